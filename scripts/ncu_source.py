#!/usr/bin/env python3
"""ncu_source.py — read ncu's source page (`ncu --import R --page source --print-source sass
--csv`) and print, for each kernel in it, where its warps' stall samples fall: the total,
the samples by opcode, and the instructions with the most samples, with any stall-reason
columns the page carries.  Used by scripts/ncu-decode.sh (QJIT_NCU_SOURCE=1).

    python3 scripts/ncu_source.py source.csv [--top 30]
"""
import argparse
import csv
import sys


def number(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def blocks(path):
    """(title, header, rows) for each table in the page; a line of one or two filled cells (a
    kernel's name) ends a table and titles the next; other lines that do not fit the
    header are skipped."""
    title, header, rows = "", None, []
    for r in csv.reader(open(path, newline="", errors="replace")):
        if not r:
            continue
        if any("Stall Sampling" in c for c in r) and any(c in ("Source", "Address") for c in r):
            if header:
                yield title, header, rows
            header, rows = r, []
        elif header and len(r) == len(header):
            rows.append(r)
        elif sum(1 for c in r if c) <= 2:
            if header:
                yield title, header, rows
                header, rows = None, []
            title = " ".join(c for c in r if c)[:160]
    if header:
        yield title, header, rows


def main():
    ap = argparse.ArgumentParser(description="where the stall samples of ncu's source page fall")
    ap.add_argument("csv", help="ncu --import R --page source --print-source sass --csv > CSV")
    ap.add_argument("--top", type=int, default=30, help="instructions listed a kernel")
    o = ap.parse_args()
    path, top = o.csv, o.top
    found = False
    for title, h, rows in blocks(path):
        found = True
        col = {n: i for i, n in enumerate(h)}
        allc = next((i for i, n in enumerate(h) if n.startswith("Warp Stall Sampling (All")), None)
        if allc is None:
            allc = next(i for i, n in enumerate(h) if "Stall Sampling" in n)
        src = col.get("Source", 1)
        # the stall-reason columns: numeric, named for a stall, not the totals
        reasons = [i for i, n in enumerate(h) if "stall" in n.lower() and "Sampling" not in n]
        total = sum(number(r[allc]) or 0 for r in rows)
        print(f"== {title}\n   {len(rows)} instructions, {total:.0f} stall samples")
        if total == 0:
            continue
        byop = {}
        for r in rows:
            words = [w for w in r[src].split() if not w.startswith("@")] # past a predicate
            op = words[0].split(".")[0] if words else "?"
            byop[op] = byop.get(op, 0) + (number(r[allc]) or 0)
        print("   by opcode: " + ", ".join(f"{o} {100 * v / total:.1f}%"
                                          for o, v in sorted(byop.items(), key=lambda x: -x[1])[:12]))
        for r in sorted(rows, key=lambda r: -(number(r[allc]) or 0))[:top]:
            v = number(r[allc]) or 0
            why = sorted(((number(r[i]) or 0, h[i]) for i in reasons), reverse=True)[:3]
            why = ", ".join(f"{n} {x:.0f}" for x, n in why if x > 0)
            addr = r[col["Address"]] if "Address" in col else ""
            print(f"   {100 * v / total:5.1f}% {addr:>6} {r[src][:70]:70} {why}")
    if not found:
        print("no source table found; the page's first lines:")
        for i, line in enumerate(open(path, errors="replace")):
            if i >= 20:
                break
            print("   " + line.rstrip()[:200])
    return 0


if __name__ == "__main__":
    sys.exit(main())
