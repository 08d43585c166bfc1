/*
 * abi_dump.c — the size of every public struct of qjit.h and the offset of each field,
 * one "name value" a line, as the C compiler lays them out.  tests/python compares the
 * Python package's ctypes mirrors (python/qjit/_lib.py) with it.
 */
#include "qjit.h"

#include <stddef.h>
#include <stdio.h>

#define SIZE(s) printf("%s %zu\n", #s, sizeof(s))
#define FIELD(s, f) printf("%s.%s %zu\n", #s, #f, offsetof(s, f))

int main(void)
{
    SIZE(qjit_gemm_desc);
    FIELD(qjit_gemm_desc, a);
    FIELD(qjit_gemm_desc, b);
    FIELD(qjit_gemm_desc, out);
    FIELD(qjit_gemm_desc, sa);
    FIELD(qjit_gemm_desc, sb);
    FIELD(qjit_gemm_desc, group);
    FIELD(qjit_gemm_desc, group_scale);
    FIELD(qjit_gemm_desc, zeros);
    FIELD(qjit_gemm_desc, bias);
    FIELD(qjit_gemm_desc, arch);
    FIELD(qjit_gemm_desc, kernel);
    FIELD(qjit_gemm_desc, bm);
    FIELD(qjit_gemm_desc, bn);
    FIELD(qjit_gemm_desc, bk);
    FIELD(qjit_gemm_desc, wm);
    FIELD(qjit_gemm_desc, wn);
    FIELD(qjit_gemm_desc, stages);
    FIELD(qjit_gemm_desc, split_k);
    SIZE(qjit_gemm_args);
    FIELD(qjit_gemm_args, a);
    FIELD(qjit_gemm_args, b);
    FIELD(qjit_gemm_args, d);
    FIELD(qjit_gemm_args, bias);
    FIELD(qjit_gemm_args, scale_a);
    FIELD(qjit_gemm_args, scale_b);
    FIELD(qjit_gemm_args, zeros_b);
    FIELD(qjit_gemm_args, m);
    FIELD(qjit_gemm_args, n);
    FIELD(qjit_gemm_args, k);
    FIELD(qjit_gemm_args, lda);
    FIELD(qjit_gemm_args, ldb);
    FIELD(qjit_gemm_args, ldd);
    SIZE(qjit_options);
    FIELD(qjit_options, cache_dir);
    FIELD(qjit_options, shipped_cache);
    FIELD(qjit_options, memory_only);
    FIELD(qjit_options, cache_max_bytes);
    FIELD(qjit_options, template_dir);
    FIELD(qjit_options, arch);
    FIELD(qjit_options, log);
    FIELD(qjit_options, log_user);
    FIELD(qjit_options, verify_cache);
    SIZE(qjit_stats);
    FIELD(qjit_stats, gets);
    FIELD(qjit_stats, memory_hits);
    FIELD(qjit_stats, disk_hits);
    FIELD(qjit_stats, compiles);
    FIELD(qjit_stats, compile_failures);
    FIELD(qjit_stats, compile_ms);
    SIZE(qjit_cache_info);
    FIELD(qjit_cache_info, path);
    FIELD(qjit_cache_info, persistent);
    FIELD(qjit_cache_info, shipped);
    FIELD(qjit_cache_info, repairs);
    FIELD(qjit_cache_info, rows_dropped);
    SIZE(qjit_gemm_info);
    FIELD(qjit_gemm_info, desc);
    FIELD(qjit_gemm_info, text);
    FIELD(qjit_gemm_info, key);
    FIELD(qjit_gemm_info, threads);
    FIELD(qjit_gemm_info, shared_bytes);
    FIELD(qjit_gemm_info, registers);
    FIELD(qjit_gemm_info, k_multiple);
    FIELD(qjit_gemm_info, ld_multiple);
    FIELD(qjit_gemm_info, ptr_align);
    FIELD(qjit_gemm_info, variants);
    SIZE(qjit_gemm_variant);
    FIELD(qjit_gemm_variant, desc);
    FIELD(qjit_gemm_variant, text);
    FIELD(qjit_gemm_variant, m_min);
    FIELD(qjit_gemm_variant, m_max);
    FIELD(qjit_gemm_variant, n);
    FIELD(qjit_gemm_variant, k);
    FIELD(qjit_gemm_variant, tuned);
    FIELD(qjit_gemm_variant, us);
    FIELD(qjit_gemm_variant, gpu);
    SIZE(qjit_tune_measurement);
    FIELD(qjit_tune_measurement, gpu);
    FIELD(qjit_tune_measurement, m);
    FIELD(qjit_tune_measurement, n);
    FIELD(qjit_tune_measurement, k);
    FIELD(qjit_tune_measurement, config);
    FIELD(qjit_tune_measurement, us);
    FIELD(qjit_tune_measurement, ok);
    SIZE(qjit_tune_problem);
    FIELD(qjit_tune_problem, m);
    FIELD(qjit_tune_problem, n);
    FIELD(qjit_tune_problem, k);
    SIZE(qjit_tune_options);
    FIELD(qjit_tune_options, sweep);
    FIELD(qjit_tune_options, warmup);
    FIELD(qjit_tune_options, reps);
    FIELD(qjit_tune_options, compile_threads);
    FIELD(qjit_tune_options, rotate_bytes);
    FIELD(qjit_tune_options, dry_run);
    FIELD(qjit_tune_options, progress);
    FIELD(qjit_tune_options, user);
    SIZE(qjit_tune_result);
    FIELD(qjit_tune_result, problem);
    FIELD(qjit_tune_result, bucket);
    FIELD(qjit_tune_result, candidates);
    FIELD(qjit_tune_result, passed);
    FIELD(qjit_tune_result, failed);
    FIELD(qjit_tune_result, skipped);
    FIELD(qjit_tune_result, heuristic);
    FIELD(qjit_tune_result, heuristic_us);
    FIELD(qjit_tune_result, best);
    FIELD(qjit_tune_result, best_us);
    FIELD(qjit_tune_result, max_error);
    SIZE(qjit_quant_desc);
    FIELD(qjit_quant_desc, in);
    FIELD(qjit_quant_desc, out);
    FIELD(qjit_quant_desc, scale);
    FIELD(qjit_quant_desc, rule);
    FIELD(qjit_quant_desc, arch);
    FIELD(qjit_quant_desc, cols);
    SIZE(qjit_quant_args);
    FIELD(qjit_quant_args, x);
    FIELD(qjit_quant_args, q);
    FIELD(qjit_quant_args, scale);
    FIELD(qjit_quant_args, workspace);
    FIELD(qjit_quant_args, m);
    FIELD(qjit_quant_args, k);
    FIELD(qjit_quant_args, ldx);
    FIELD(qjit_quant_args, ldq);
    FIELD(qjit_quant_args, clip);
    FIELD(qjit_quant_args, batch);
    FIELD(qjit_quant_args, x_batch_stride);
    FIELD(qjit_quant_args, q_batch_stride);
    SIZE(qjit_manifest_item);
    FIELD(qjit_manifest_item, kind);
    FIELD(qjit_manifest_item, gemm);
    FIELD(qjit_manifest_item, quant);
    FIELD(qjit_manifest_item, sweep);
    SIZE(qjit_cache_stats);
    FIELD(qjit_cache_stats, rows);
    FIELD(qjit_cache_stats, cubin_bytes);
    FIELD(qjit_cache_stats, source_bytes);
    FIELD(qjit_cache_stats, file_bytes);
    FIELD(qjit_cache_stats, schema_version);
    FIELD(qjit_cache_stats, narch);
    FIELD(qjit_cache_stats, arch);
    FIELD(qjit_cache_stats, tuning_rows);
    SIZE(qjit_cache_verify_report);
    FIELD(qjit_cache_verify_report, rows_checked);
    FIELD(qjit_cache_verify_report, rows_bad);
    FIELD(qjit_cache_verify_report, rows_deleted);
    FIELD(qjit_cache_verify_report, integrity_ok);
    FIELD(qjit_cache_verify_report, integrity);
    FIELD(qjit_cache_verify_report, tuning_checked);
    FIELD(qjit_cache_verify_report, tuning_bad);
    return 0;
}
