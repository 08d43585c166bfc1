#!/usr/bin/env python3
"""check_layout.py — the house rules that a compiler cannot check, checked on every CI run:

- no file in src/ is over 900 lines;
- no circle of src/ files calling each other (a call is a use of a function defined in
  another file; the graph must be acyclic);
- every list of kernel names or arch names shown to users agrees with the one registry:
  the families' templates (their "qjit family:" lines, kernels) and the table in src/arch.c
  (archs):
  qjit.h's enum comments, the README's kernel table, docs/TEMPLATES.md, and the help
  text of qjit-precompile;
- every template parameter the library passes (family.c) is documented in
  docs/TEMPLATES.md, and every template of the list declares a family;
- the templates are composed, not copied: runs of REPEAT_LINES or more equal lines (blank
  lines, comments and lone braces left out) found in two places in templates/ are at most
  REPEAT_CEILING, today's count, so that a new family cannot add copies.

Usage: check_layout.py SOURCE_DIR [QJIT_PRECOMPILE_BINARY]
"""
import os
import re
import subprocess
import sys

root = sys.argv[1]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def read(rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


src = sorted(f for f in os.listdir(os.path.join(root, "src")) if f.endswith((".c", ".h")))

# 1. file sizes
for f in src:
    n = read("src/" + f).count("\n")
    if n > 900:
        fail(f"src/{f} has {n} lines (at most 900)")

# 2. the call graph between files
strip = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"", re.S)
defn = re.compile(r"^(?:QJIT_API\s+|static\s+)?[A-Za-z_][\w\s\*]*?\b(qjit_\w+)\s*\([^;{]*\)\s*\{",
                  re.M)
defined, text = {}, {}
for f in src:
    if not f.endswith(".c"):
        continue
    t = strip.sub("", read("src/" + f))
    text[f] = t
    for m in defn.finditer(t):
        defined.setdefault(m.group(1), f)
edges = {f: set() for f in text}
for f, t in text.items():
    for name in set(re.findall(r"\b(qjit_\w+)\s*\(", t)):
        g = defined.get(name)
        if g and g != f:
            edges[f].add(g)
state, stack = {}, []


def visit(f):
    state[f] = 1
    stack.append(f)
    for g in sorted(edges[f]):
        if state.get(g) == 1:
            fail("a circle of calls: " + " -> ".join(stack[stack.index(g):] + [g]))
        elif g not in state:
            visit(g)
    stack.pop()
    state[f] = 2


for f in sorted(edges):
    if f not in state:
        visit(f)

# 3. kernel and arch names
# the registry: each family template's "% -- qjit family: name=N id=I order=O" line
# (cmake/families.cmake makes QJIT_FAMILY_LIST of them)
families = []
for f in sorted(os.listdir(os.path.join(root, "templates"))):
    for m in re.finditer(r"^% -- qjit family: name=(\w+) id=(\d+) order=(\d+)\s*$",
                         read("templates/" + f), re.M):
        families.append((int(m.group(2)), m.group(1), f))
if len(families) < 6:
    fail(f"templates/ declares {len(families)} families")
archs = re.findall(r'\{QJIT_ARCH_\w+,\s*"(sm_\w+)"', read("src/arch.c"))
if len(archs) < 4:
    fail(f"the arch table of src/arch.c lists {len(archs)} archs")
header = read("include/qjit.h")
enum = re.search(r"typedef enum qjit_kernel \{(.*?)\} qjit_kernel;", header, re.S).group(1)
named = {int(v): n for v, n in re.findall(r"QJIT_KERNEL_\w+\s*=\s*(\d+),\s*/\*\s*\"(\w+)\"", enum)}
for fid, name, tmpl in families:
    if fid in named and named[fid] != name:
        fail(f"qjit.h's enum says kernel {fid} is \"{named[fid]}\", templates/{tmpl} \"{name}\"")
    if f"`{name}`" not in read("README.md"):
        fail(f"the README's kernel table lacks `{name}`")
    if f"`{tmpl}`" not in read("docs/TEMPLATES.md"):
        fail(f"docs/TEMPLATES.md does not name `{tmpl}`")
    t = read("templates/" + tmpl)
    if not re.search(r"^%\s*family\s*\{", t, re.M):
        fail(f"templates/{tmpl} declares no family{{...}}")
extra = set(named.values()) - {n for _, n, _ in families}
if extra:
    fail(f"qjit.h names kernels the registry lacks: {sorted(extra)}")
if len(sys.argv) > 2:
    out = subprocess.run([sys.argv[2], "--help"], capture_output=True, text=True).stdout
    for a in archs:
        if a not in out:
            fail(f"qjit-precompile --help does not name {a}")

# 4. template parameters
fam = read("src/family.c")
block = fam[fam.index("static void params_of"):]
block = block[:block.index("memcpy(p, q")]
params = re.findall(r'\{"(\w+)", QJIT_TP_', block)
doc = read("docs/TEMPLATES.md")
for p in params:
    if f"`{p}`" not in doc:
        fail(f"template parameter {p} is not in docs/TEMPLATES.md")

# 5. repeated runs of lines in templates/ (a copy gives one run per place it repeats)
REPEAT_LINES, REPEAT_CEILING = 6, 1
trivial = {"{", "}", "};", "% end", "end"}
lines = {}
for f in sorted(os.listdir(os.path.join(root, "templates"))):
    kept = []
    for i, l in enumerate(read("templates/" + f).split("\n")):
        l = re.sub(r"\s+", " ", l.strip())
        if l and not l.startswith("//") and not l.startswith("% --") and l not in trivial:
            kept.append((i + 1, l))
    lines[f] = kept
where = {}
for f, kept in lines.items():
    for j in range(len(kept) - REPEAT_LINES + 1):
        where.setdefault(tuple(l for _, l in kept[j:j + REPEAT_LINES]), []).append((f, j))
starts = set()
for places in where.values():
    for a in range(len(places)):
        for b in range(a + 1, len(places)):
            (fa, ja), (fb, jb) = places[a], places[b]
            if fa != fb or abs(ja - jb) >= REPEAT_LINES:
                starts.add((fa, ja, fb, jb))
runs = [(fa, ja, fb, jb) for fa, ja, fb, jb in starts if (fa, ja - 1, fb, jb - 1) not in starts]
if len(runs) > REPEAT_CEILING:
    for fa, ja, fb, jb in sorted(runs):
        print(f"  repeated: templates/{fa}:{lines[fa][ja][0]} and templates/{fb}:{lines[fb][jb][0]}")
    fail(f"templates/ repeats {len(runs)} runs of {REPEAT_LINES}+ lines (at most {REPEAT_CEILING}): "
         "share the piece (docs/TEMPLATES.md) instead of copying it")

print(f"check_layout: {len(src)} files, {sum(len(e) for e in edges.values())} calls between "
      f"files, {len(families)} families, {len(archs)} archs, {len(params)} parameters, {len(runs)} repeated runs in templates/: "
      f"{len(failures)} failed")
sys.exit(1 if failures else 0)
