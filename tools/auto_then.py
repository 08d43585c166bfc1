#!/usr/bin/env python3
"""auto_then.py — the configurations an auto handle runs, per pair and M range, written
as JSON for bench_grid.py --then.  Run it with an earlier revision's package and library
(no GPU needed: the choice is the heuristic's, from the descriptor alone, where that
revision shipped no tuning records), so that a grid can time what that revision's auto
ran beside today's auto, both built by today's library.

    PYTHONPATH=<old>/python QJIT_LIBRARY=<old>/build/libqjit.so \\
        python3 tools/auto_then.py --rev 5f3ecf2 > auto-then.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_step import PAIRS  # noqa: E402  (the pairs as the benchmarks time them; no torch needed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="", help="the revision the package and library are of")
    ap.add_argument("--arch", default="sm_90a")
    o = ap.parse_args()
    import qjit
    ctx = qjit.Context(cache_dir=os.environ.get("QJIT_CACHE_DIR") or None)
    out = {"rev": o.rev, "arch": o.arch, "pairs": {}}
    for d in dict.fromkeys(p[0] for p in PAIRS.values()):
        try:
            vs = qjit.variants(d, o.arch, ctx)
        except Exception as e:  # noqa: BLE001  (a pair that revision did not serve)
            print(f"auto_then: {d}: {(str(e).splitlines() or [repr(e)])[0]}", file=sys.stderr)
            continue
        if any(v["tuned"] for v in vs):  # records decide some problems: not one config an M
            print(f"auto_then: {d}: tuned records in this cache choose per layer; only the "
                  "heuristic's configurations are written (use a cache without records)", file=sys.stderr)
        out["pairs"][d] = [{"m_min": v["m_min"], "m_max": v["m_max"], "config": str(v["desc"])}
                           for v in vs if not v["tuned"]]
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
