/*
 * tune_data.h — the operands of a tuning problem and the check of a candidate's output
 * (tune_data.c), for qjit_gemm_tune (tune_run.c).
 */
#ifndef QJIT_TUNE_DATA_H
#define QJIT_TUNE_DATA_H
#include "driver.h"

#define MAX_COPIES 32

/* One problem's operands: the weights (B, its scales, zero points) in `copies` copies, the
 * activations (A, its scales) once at a[0], sa[0]; a bias, and the output. */
typedef struct qjit_tune_operands {
    const qjit_cu_api *cu;
    int copies;
    size_t a_bytes, b_bytes, sa_bytes, sb_bytes, d_bytes, bias_bytes;
    CUdeviceptr a[MAX_COPIES], b[MAX_COPIES], sa[MAX_COPIES], sb[MAX_COPIES], zb[MAX_COPIES];
    CUdeviceptr bias, out;
} qjit_tune_operands;

/* Random operands for problem p of descriptor d (values in the ranges the kernels' checks
 * use, the same for any thread count), the weights in as many copies as cover `rotate` bytes, uploaded
 * to the device; freed with qjit_tune_operands_free. */
QJIT_HIDDEN qjit_status qjit_tune_operands_make(const qjit_cu_api *cu, const qjit_gemm_desc *d,
                                                const qjit_tune_problem *p, uint64_t rotate,
                                                qjit_tune_operands *o);
QJIT_HIDDEN void qjit_tune_operands_free(qjit_tune_operands *o);
/* A launch's arguments over copy `copy` of the operands. */
QJIT_HIDDEN qjit_gemm_args qjit_tune_args(const qjit_tune_operands *o, const qjit_gemm_desc *d,
                                          const qjit_tune_problem *p, int copy);
/* The normalized error a candidate's output may have against the heuristic's. */
QJIT_HIDDEN double qjit_tune_tolerance(const qjit_gemm_desc *d);
/* The normalized error of got against ref (count values of type t); negative where got
 * holds a NaN where ref does not (an output left poisoned). */
QJIT_HIDDEN double qjit_tune_nerr(qjit_dtype t, const uint8_t *got, const uint8_t *ref,
                                  int64_t count);

/* The final round's winner among n finalists: the fastest there (final[j], µs), not the
 * fastest in the sweep (sweep[j]), whose times were taken at other moments of the board.
 * recorded[j] gets finalist j's final time on the sweep's scale: the winner's equal to the
 * fastest sweep time among them, the others in proportion, so that the winner is also the
 * lowest record of the problem.  Returns the winner's index. */
QJIT_HIDDEN int qjit_tune_final_pick(const double *sweep, const double *final, int n,
                                     double *recorded);

#endif
