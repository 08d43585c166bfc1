#!/usr/bin/env python3
"""README.md says what the code does: every tool is listed, the commands it shows name
files that exist, set-up's package list is the one it states, the default manifest's
count is what qjit-precompile prints for it, the precompile exit rule is the tool's
--help word for word, and qjit_gemm_resolve is described as qjit.h describes it.

usage: check_readme.py SOURCE_DIR QJIT_PRECOMPILE"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def squash(text):
    return " ".join(text.replace("`", "").split())


def main():
    root, precompile = sys.argv[1], sys.argv[2]
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    header = open(os.path.join(root, "include", "qjit.h"), encoding="utf-8").read()
    bad = []

    # every tool: in the folder table, the Tools section and the installed list
    tools = sorted(f[:-2] for f in os.listdir(os.path.join(root, "tools"))
                   if f.startswith("qjit-") and f.endswith(".c"))
    row = next((l for l in readme.splitlines() if l.startswith("| `tools/`")), "")
    section = readme.split("## Tools", 1)[-1].split("\n## ", 1)[0]
    installs = readme.split("## Installing the library", 1)[-1].split("\n## ", 1)[0]
    for t in tools:
        for where, text in (("the tools/ row", row), ("## Tools", section),
                            ("## Installing (bin/)", installs)):
            if not re.search(rf"`(bin/)?{t}[` ]", text):
                bad.append(f"{t} is missing from {where}")

    # files the shown commands compile or run exist (from the repository root)
    in_code = False
    for line in readme.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            if re.match(r"(cc|bash|python3) ", line):
                for word in line.split("#")[0].split()[1:]:
                    if re.search(r"\.(c|sh|py)$", word) and not os.path.exists(
                            os.path.join(root, word)):
                        bad.append(f"README runs {word!r} ({line.strip()!r}): no such file")

    # set-up installs what README says it installs
    setup = open(os.path.join(root, "scripts", "setup.sh"), encoding="utf-8").read()
    pkgs = re.search(r"for pkg in ([^;]*);", setup).group(1).split()
    for p in pkgs:
        if f"`{p}`" not in readme:
            bad.append(f"scripts/setup.sh installs {p}; README does not say so")

    # the default manifest's count, as qjit-precompile prints it (it prints the count before
    # compiling anything; the run is stopped there)
    tmp = tempfile.mkdtemp(prefix="qjit-readme-")
    try:
        p = subprocess.Popen([precompile, "--cache-dir", os.path.join(tmp, "cache"),
                              os.path.join(root, "cache", "manifests", "default.txt")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = p.stdout.readline()
        p.kill()
        p.wait()
        p.stdout.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m = re.search(r"(\d+ kernels from \d+ descriptors)", first)
    if not m:
        bad.append(f"qjit-precompile printed no count: {first!r}")
    elif m.group(1) not in squash(readme):
        bad.append(f"qjit-precompile prints {m.group(1)!r} for the default manifest; README "
                   "does not")

    # the exit rule: --help's words are README's
    help_text = subprocess.run([precompile, "--help"], capture_output=True, text=True).stdout
    rule = squash(help_text.split("Exit status:", 1)[1])
    if rule not in squash(readme):
        bad.append(f"README does not state qjit-precompile's exit rule: {rule!r}")

    # qjit_gemm_resolve: one description
    for name, text in (("README.md", squash(readme)), ("qjit.h", squash(header))):
        if re.search(r"for M = 1(?![\d-])", text):  # "for M = 1-64" speaks of a range
            bad.append(f"{name} says qjit_gemm_resolve resolves for M = 1")
        if "the family's choice when M is not known" not in text:
            bad.append(f"{name} does not say qjit_gemm_resolve gives the choice for an "
                       "unknown M")

    for b in bad:
        print("check_readme:", b)
    print(f"check_readme: {len(bad)} problem(s), {len(tools)} tools checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
