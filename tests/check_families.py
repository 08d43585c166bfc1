#!/usr/bin/env python3
"""check_families.py — a family is its template: cmake/families.cmake builds the registry
(QJIT_FAMILY_LIST) from the templates' "% -- qjit family:" lines alone.

Over a copy of templates/ with one more family template (an unused id, an order between
two families), the generated list holds the new family at its place in the preference,
the others in theirs, and the id limit past its id; a second template that reuses a name,
an id or an order, or a malformed line, stops the build with a message naming the file.

usage: check_families.py SOURCE_DIR CMAKE"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def generate(cmake, script, tdir, out):
    r = subprocess.run([cmake, f"-DOUT={out}", f"-DDIR={tdir}", "-P", script],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    root, cmake = sys.argv[1], sys.argv[2]
    script = os.path.join(root, "cmake", "families.cmake")
    bad = []
    with tempfile.TemporaryDirectory(prefix="qjit-families-") as tmp:
        tdir = os.path.join(tmp, "templates")
        shutil.copytree(os.path.join(root, "templates"), tdir)
        out = os.path.join(tmp, "qjit_families.h")
        rc, msg = generate(cmake, script, tdir, out)
        if rc:
            sys.exit(f"check_families: the repository's templates: {msg}")
        before = re.findall(r'X\((\d+), "(\w+)", "([\w.]+)"\)', open(out).read())
        orders = {}
        for f in os.listdir(tdir):
            m = re.search(r"^% -- qjit family: name=(\w+) id=(\d+) order=(\d+)", open(os.path.join(tdir, f)).read(), re.M)
            if m:
                orders[m.group(1)] = int(m.group(3))
        ids = [int(i) for i, _, _ in before]
        # a new family between the second and the third in the preference
        second = sorted(orders.values())[1]
        for n, o in orders.items():  # make room: the families from the third on move down one
            if o > second:
                p = os.path.join(tdir, next(f for f in os.listdir(tdir)
                                            if f"name={n} " in open(os.path.join(tdir, f)).read()))
                s = re.sub(rf"(name={n} id=\d+ order=){o}\b", rf"\g<1>{o + 1}", open(p).read())
                open(p, "w").write(s)
        new_id = max(ids) + 5
        with open(os.path.join(tdir, "gemm_zz_new.cu"), "w") as fh:
            fh.write(f"// a family added by a template alone\n% -- qjit family: name=zz_new id={new_id} "
                     f"order={second + 1}\n% family {{}}\n")
        rc, msg = generate(cmake, script, tdir, out)
        text = open(out).read() if rc == 0 else ""
        after = re.findall(r'X\((\d+), "(\w+)", "([\w.]+)"\)', text)
        want = before[:2] + [(str(new_id), "zz_new", "gemm_zz_new.cu")] + before[2:]
        if after != want:
            bad.append(f"with a new template the list is {after}, expected {want} ({msg.strip()})")
        if f"#define QJIT_FAMILY_ID_LIMIT {new_id + 1}" not in text:
            bad.append(f"the id limit is not {new_id + 1}")
        # reuse of a name, an id, an order; a malformed line
        for what, line in (("name", f"name={before[0][1]} id={new_id + 1} order=999"),
                           ("id", f"name=zz_other id={before[0][0]} order=999"),
                           ("order", f"name=zz_other id={new_id + 1} order={second + 1}"),
                           ("malformed", "name=zz_other id=x order=1")):
            p = os.path.join(tdir, "gemm_zz_other.cu")
            with open(p, "w") as fh:
                fh.write(f"% -- qjit family: {line}\n")
            rc, msg = generate(cmake, script, tdir, out + ".x")
            if rc == 0 or "gemm_zz_other.cu" not in msg:
                bad.append(f"a template with a {what} clash was accepted (rc {rc}): {msg.strip()[:200]}")
            os.remove(p)
    for b in bad:
        print("check_families:", b)
    print(f"check_families: {len(before)} families in templates/, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
