"""python -m qjit: the package's tools from the command line.

    python -m qjit precompile MANIFEST... [--arch sm_90a,...] [--cache-dir DIR] [--no-records]
    python -m qjit stats [--db PATH]
    python -m qjit verify [--db PATH] [--repair]
    python -m qjit variants DESCRIPTOR [--arch sm_90a]
    python -m qjit tune DESCRIPTOR --nk NxK[,NxK] [--m 1,16,...] [--cache-dir DIR] [--dry-run]

Exit status 0, 1 when something failed (printed), 2 for a usage error.
"""
import argparse
import os
import sys

import qjit


def _context(args):
    return qjit.Context(cache_dir=args.cache_dir) if getattr(args, "cache_dir", None) else None


def cmd_precompile(args):
    # every manifest readable before anything is written: a missing one is one line, exit 1
    unreadable = 0
    for path in args.manifest:
        try:
            with open(path, "rb"):
                pass
        except OSError as e:  # one line, as qjit-precompile says it
            print(f"{path}: cannot open manifest: {e.strerror}", file=sys.stderr)
            unreadable += 1
    if unreadable:
        return 1
    if not args.no_records:  # the shipped tuning records first, as scripts/run.sh: their winners compile too
        db = os.path.join(args.cache_dir, "qjit.db") if args.cache_dir else None
        for name, added in qjit.merge_shipped_records(db).items():
            print(f"{name}: {added} tuning records merged")
    ctx = _context(args)
    archs = args.arch.split(",")
    failed = 0
    for path in args.manifest:
        try:
            r = qjit.precompile_manifest(path, archs, ctx)
        except OSError as e:  # one line, as qjit-precompile says it
            print(f"{path}: cannot open manifest: {e.strerror}", file=sys.stderr)
            failed += 1
            continue
        print(f"{path}: {r['compiled']} compiled, {r['cached']} already cached, "
              f"{len(r['failed'])} failed")
        for line, text, msg in r["failed"]:
            print(f"  {path}:{line}: {text}: {msg}", file=sys.stderr)
        failed += len(r["failed"])
    return 1 if failed else 0


def cmd_stats(args):
    s = qjit.cache_stats(args.db)
    print(f"kernels {s['rows']} (cubin {s['cubin_bytes']} B, source {s['source_bytes']} B), "
          f"file {s['file_bytes']} B, schema {s['schema_version']}, tuning results {s['tuning_rows']}")
    for arch, a in sorted(s["archs"].items()):
        print(f"  {arch:8} {a['rows']:6d} kernels {a['bytes']:12d} B")
    return 0


def cmd_verify(args):
    r = qjit.cache_verify(args.db, repair=args.repair)
    print(f"{r['rows_checked']} kernels checked, {r['rows_bad']} bad, {r['rows_deleted']} deleted; "
          f"{r['tuning_checked']} tuning results checked, {r['tuning_bad']} bad; "
          f"integrity {'ok' if r['integrity_ok'] else r['integrity']}")
    if r["rebuilt"]:
        print(f"rebuilt: kept {r['rows_kept']} kernels, lost {r['rows_deleted']} "
              f"(the damaged file is {r['path']}.corrupt)")
    if args.repair:  # what the repair left, as qjit-cache verify --repair says
        r = qjit.cache_verify(args.db)
        print(f"after: {r['rows_checked']} kernels, {r['rows_bad']} bad, "
              f"integrity {'ok' if r['integrity_ok'] else r['integrity']}")
    return 0 if r["ok"] else 1


def cmd_variants(args):
    for v in qjit.variants(args.descriptor, args.arch):
        top = "max" if v["m_max"] >= 2**62 else v["m_max"]
        why = f"tuned on {v['gpu']} for N={v['n']} K={v['k']} ({v['us']:.2f} us)" if v["tuned"] \
            else "heuristic"
        print(f"M {v['m_min']}..{top}: {v['desc']}  [{why}]")
    return 0


def cmd_tune(args):
    try:
        import torch  # the device is made current through torch
    except ImportError:
        print("qjit tune: needs PyTorch with CUDA to reach the GPU: pip install torch", file=sys.stderr)
        return 1
    torch.cuda.init()
    torch.cuda.set_device(args.device)
    ms = [int(x) for x in args.m.split(",")]
    problems = [(m, int(n), int(k)) for n, k in (nk.lower().split("x") for nk in args.nk.split(","))
                for m in ms]
    res = qjit.tune(args.descriptor, problems, sweep=args.sweep, dry_run=args.dry_run,
                    ctx=_context(args))
    print(f"{'M':>6} {'N':>6} {'K':>6} {'heuristic us':>13} {'best us':>9}  best")
    for r in res:
        best = str(r["best"]).split("kernel=")[-1] if r["best"] else "(none passed)"
        print(f"{r['m']:6d} {r['n']:6d} {r['k']:6d} {r['heuristic_us']:13.2f} {r['best_us']:9.2f}  "
              f"kernel={best}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qjit", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("precompile", help="compile manifests into the cache (no GPU)")
    p.add_argument("manifest", nargs="+")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--cache-dir")
    p.add_argument("--no-records", action="store_true",
                   help="leave out the tuning records qjit ships (their winners are then not compiled)")
    p.set_defaults(fn=cmd_precompile)
    p = sub.add_parser("stats", help="a cache file's rows and sizes")
    p.add_argument("--db")
    p.set_defaults(fn=cmd_stats)
    p = sub.add_parser("verify", help="recheck every row of a cache file")
    p.add_argument("--db")
    p.add_argument("--repair", action="store_true")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("variants", help="the kernels a get would load, per M bucket")
    p.add_argument("descriptor")
    p.add_argument("--arch", default="sm_90a")
    p.set_defaults(fn=cmd_variants)
    p = sub.add_parser("tune", help="time the candidates on the GPU and record the winners")
    p.add_argument("descriptor")
    p.add_argument("--nk", required=True)
    p.add_argument("--m", default="1,4,8,16,32,64,128,256,1024,4096")
    p.add_argument("--sweep")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--cache-dir")
    p.add_argument("--dry-run", action="store_true")
    p.set_defaults(fn=cmd_tune)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except qjit.QjitError as e:
        print(f"qjit: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"qjit: {e.filename}: {e.strerror}" if e.filename else f"qjit: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
