#!/usr/bin/env bash
# On a GPU machine (the H100, the H200): Nsight Compute over one decode GEMM of each pair and its torch peer
# (tools/probe_decode.py, two launches each), profiled with the sections that say where a memory-bound kernel's time goes: throughput against the peaks, DRAM bytes,
# the launch's grid and occupancy, and the warps' stall reasons.  Writes $OUT/decode.ncu-rep
# (the report), $OUT/ncu.csv (one row per kernel and metric) and $OUT/ncu.txt (a summary
# with the four largest stall reasons).  The cache named by QJIT_CACHE_DIR (tuned records
# merged) decides which kernel auto runs.
# For a prefill shape, QJIT_NCU_PREFILL=1 takes the prefill peers and adds what a
# compute-bound kernel is read by: the pipes' utilisation (the tensor pipe's among them),
# instruction mix, and shared-memory bank conflicts; QJIT_NCU_NAMED passes configurations
# by name to profile beside auto's (tools/probe_decode.py --named); QJIT_NCU_SOURCE=1
# samples the warps' stalls at each SASS instruction (the source view) and writes
# $OUT/source.csv (ncu's source page) and $OUT/source.txt (each kernel's instructions with
# the most stall samples).  QJIT_NCU_METRICS adds metrics by name (comma-separated, e.g.
# the L2 slices' balance: lts__t_sectors_srcunit_tex_op_read.max and .avg, or ncu's
# regex:NAME form, e.g. the pipes' shares:
# 'regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active'), each printed in
# the summary beside the sections' figures.
# Usage: bash scripts/ncu-decode.sh [MxNxK] [pairs]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-/tmp/qjit-out}"
shape="${1:-1x4096x4096}"
pairs="${2:-bf16,w4a16,w8a8,fp8,w4a8}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/build:$root/build/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" # probe_decode.py imports the package
# The launches inside probe_decode.py's "probe" NVTX ranges only (not torch's set-up).
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
--section Occupancy --section WarpStateStats --section SchedulerStats"
# one --metrics option (ncu refuses a second), its entries separated by commas
metrics="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
extra=()
if [ "${QJIT_NCU_PREFILL:-0}" = 1 ]; then
  sections="$sections --section ComputeWorkloadAnalysis --section InstructionStats"
  metrics="$metrics,regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
  metrics="$metrics,regex:l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum"
  extra+=(--prefill)
fi
[ -n "${QJIT_NCU_METRICS:-}" ] && metrics="$metrics,$QJIT_NCU_METRICS"
[ "${QJIT_NCU_SOURCE:-0}" = 1 ] && sections="$sections --section SourceCounters"
sections="$sections --metrics $metrics"
[ -n "${QJIT_NCU_NAMED:-}" ] && extra+=(--named "$QJIT_NCU_NAMED")
ncu --target-processes all --nvtx --nvtx-include "probe/" $sections -f -o "$out/decode" \
  python3 "$root/tools/probe_decode.py" --lib "$root/build/libqjit.so" --shape "$shape" \
  --pairs "$pairs" ${extra[@]+"${extra[@]}"} > "$out/ncu.err" 2>&1
rc=$?
ncu --import "$out/decode.ncu-rep" --csv --page details > "$out/ncu.csv" 2>> "$out/ncu.err"
# the lines a reader wants first: kernel, duration, DRAM throughput, grid, top stalls
python3 - "$out/ncu.csv" "${QJIT_NCU_METRICS:-}" > "$out/ncu.txt" <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
h = rows[0]
col = {n: i for i, n in enumerate(h)}
want = ("Duration", "DRAM Throughput", "Memory Throughput", "Grid Size", "Block Size",
        "Registers Per Thread", "Achieved Occupancy", "Waves Per SM",
        "Warp Cycles Per Issued Instruction", "Dynamic Shared Memory Per Block",
        "Compute (SM) Throughput", "Issue Slots Busy")
added = set(filter(None, sys.argv[2].split(",")))  # QJIT_NCU_METRICS
seen, stalls = {}, {}
for r in rows[1:]:
    key = (r[col["ID"]], r[col["Kernel Name"]][:70])
    name, value = r[col["Metric Name"]], r[col["Metric Value"]]
    tensor = name.startswith("sm__pipe_tensor_op_") and name.endswith("active.avg.pct_of_peak_sustained_active")
    banks = name in ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
    # an added entry "regex:R" (ncu's own form) takes every metric whose name R matches whole,
    # its values of 0 left out
    by_regex = any(a.startswith("regex:") and re.fullmatch(a[6:], name) and value not in ("0", "0.00")
                   for a in added)
    if name in want or tensor or banks or name in added or by_regex:
        seen.setdefault(key, []).append(f"{name}={value}{r[col['Metric Unit']]}")
    elif name.startswith("smsp__average_warps_issue_stalled_"):
        try:
            stalls.setdefault(key, []).append((float(value.replace(",", "")), name[34:].split("_per_")[0]))
        except ValueError:
            pass
for key, ms in seen.items():
    top = sorted(stalls.get(key, []), reverse=True)[:4]
    print(f"[{key[0]}] {key[1]}\n    " + "; ".join(ms) +
          ("\n    stalls: " + ", ".join(f"{n} {v:.2f}" for v, n in top) if top else ""))
PY
cat "$out/ncu.txt"
if [ "${QJIT_NCU_SOURCE:-0}" = 1 ]; then
  ncu --import "$out/decode.ncu-rep" --page source --print-source sass --csv \
    > "$out/source.csv" 2>> "$out/ncu.err"
  python3 "$root/scripts/ncu_source.py" "$out/source.csv" > "$out/source.txt" 2>&1
  head -n 200 "$out/source.txt"
fi
exit $rc
