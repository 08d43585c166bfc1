#!/usr/bin/env python3
"""Run the Python package's tests and say what ran: a summary line with the counts, every
skip reason with how many it skipped, and a failure when fewer ran than the caller
expects.

usage: run_tests.py [--needs none|numpy|torch|gpu|all] [--min-run N]

--needs picks the test classes by their `needs` attribute (none: those that need only the
package).  When every selected test skipped, the output ends in "SKIPPED: every test ..."
(ctest's SKIP_REGULAR_EXPRESSION reports the test as skipped).  --min-run N fails the run
when fewer than N tests ran (did not skip): CI's check that its numpy and torch are used."""
import argparse
import collections
import os
import sys
import unittest


def selected(suite, needs):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from selected(t, needs)
        elif needs == "all" or getattr(type(t), "needs", "none") == needs:
            yield t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--needs", default="all", choices=["none", "numpy", "torch", "gpu", "all"])
    ap.add_argument("--min-run", type=int, default=0)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    found = unittest.defaultTestLoader.discover(here, top_level_dir=here)
    suite = unittest.TestSuite(selected(found, args.needs))
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    skipped = len(result.skipped)
    ran = result.testsRun - skipped
    bad = len(result.failures) + len(result.errors)
    reasons = collections.Counter(why for _, why in result.skipped)
    print(f"test_python ({args.needs}): {result.testsRun} tests, {ran} ran, {skipped} skipped, "
          f"{bad} failed")
    for why, n in reasons.most_common():
        print(f"  {n} skipped: {why}")
    if ran < args.min_run:
        print(f"test_python: only {ran} tests ran, at least {args.min_run} expected here "
              "(a dependency is missing?)")
        return 1
    if bad:
        return 1
    if result.testsRun and ran == 0:
        print(f"SKIPPED: every test of this group ({', '.join(reasons)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
