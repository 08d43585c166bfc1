/*
 * quant_list.h — every quantized pair × scale mode of DESIGN.md §2 as descriptor text,
 * outputs and bias rotated across them; shared by test_gpu_quant.c and
 * test_quant_compile.c (included once per test executable).
 */
#ifndef QJIT_QUANT_LIST_H
#define QJIT_QUANT_LIST_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int ndesc;
static char descs[512][200];

static void add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void add(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(descs[ndesc++], sizeof descs[0], fmt, ap);
    va_end(ap);
}

/* Every pair x mode of DESIGN.md §2, outputs and bias rotated across them. */
static void build_list(void)
{
    static const char *const outs[] = {"bf16", "f16", "f32"};
    int r = 0;
#define OUT outs[r % 3], (r++ % 2)
    static const char *const halves[] = {"f16", "bf16"};
    static const int groups[] = {32, 64, 128, 256};
    for (int h = 0; h < 2; h++) {
        const char *a = halves[h];
        /* W4A16 */
        add("gemm a=%s b=s4 sb=col out=%s bias=%d", a, OUT);
        add("gemm a=%s b=u4 sb=col out=%s bias=%d", a, OUT);
        for (int gi = 0; gi < 4; gi++) {
            add("gemm a=%s b=s4 sb=group:%d gs=%s out=%s bias=%d", a, groups[gi], a, OUT);
            add("gemm a=%s b=u4 sb=group:%d gs=%s zeros=1 out=%s bias=%d", a, groups[gi], a,
                OUT);
        }
        add("gemm a=%s b=u4 sb=group:128 gs=f32 zeros=0 out=%s bias=%d", a, OUT);
        /* u4 with scales of A's type and no zero points (wgmma_wq's two-lane dequantization) */
        add("gemm a=%s b=u4 sb=group:64 gs=%s out=%s bias=%d", a, a, OUT);
        /* W8A16 */
        add("gemm a=%s b=s8 sb=col out=%s bias=%d", a, OUT);
        /* f16/bf16 x e2m1 mx */
        add("gemm a=%s b=e2m1 sb=mx out=%s bias=%d", a, OUT);
    }
    /* W8A8 */
    static const char *const sas[] = {"tensor", "row"}, *const sbs[] = {"tensor", "col"};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            add("gemm a=s8 b=s8 sa=%s sb=%s out=%s bias=%d", sas[i], sbs[j], OUT);
    /* W4A8 */
    add("gemm a=s8 b=s4 sa=row sb=col out=%s bias=%d", OUT);
    for (int gi = 0; gi < 4; gi++)
        add("gemm a=s8 b=s4 sa=row sb=group:%d gs=f32 out=%s bias=%d", groups[gi], OUT);
    /* FP8 */
    static const char *const fa[] = {"e4m3", "e5m2"};
    static const char *const fsa[] = {"tensor", "row", "block"}, *const fsb[] = {"tensor", "col", "block"};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                add("gemm a=%s b=e4m3 sa=%s sb=%s out=%s bias=%d", fa[t], fsa[i], fsb[j], OUT);
    /* MXFP8, MXFP4 */
    add("gemm a=e4m3 b=e4m3 sa=mx sb=mx out=%s bias=%d", OUT);
    add("gemm a=e4m3 b=e4m3 sa=mx sb=mx out=%s bias=%d", OUT);
    add("gemm a=e2m1 b=e2m1 sa=mx sb=mx out=%s bias=%d", OUT);
    add("gemm a=e2m1 b=e2m1 sa=mx sb=mx out=%s bias=%d", OUT);
#undef OUT
}

#endif
