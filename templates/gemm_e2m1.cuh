// gemm_e2m1.cuh — e2m1 (MX 4-bit) values into bf16 by byte tables, for a word of eight values
// that share one block scale: wgmma_wqr's MXFP4 tokens, gemv's MXFP4 operands.  Included
// inside a template's namespace (u32 from gemm_common.cuh).
// A block's e2m1 magnitudes as bf16 times its scale sc (both halves), as byte tables for prmt:
// t[0], t[1] the high bytes of codes 0..3 and 4..7, t[2], t[3] the low bytes.  Each product is
// one rounding of q·2^(x−127), exact while bf16 holds it.
__device__ __forceinline__ void e2m1_tables(u32 sc, u32 (&t)[4])
{
    // 0, 0.5 | 1, 1.5 | 2, 3 | 4, 6 in bf16, the lower code in the low half
    const u32 base[4] = {0x3F000000u, 0x3FC03F80u, 0x40404000u, 0x40C04080u};
    u32 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(v[i]) : "r"(base[i]), "r"(sc), "r"(0x80008000u)); // + (−0): a product (sm_80+)
    asm("prmt.b32 %0, %1, %2, 0x7531;\n" : "=r"(t[0]) : "r"(v[0]), "r"(v[1]));
    asm("prmt.b32 %0, %1, %2, 0x7531;\n" : "=r"(t[1]) : "r"(v[2]), "r"(v[3]));
    asm("prmt.b32 %0, %1, %2, 0x6420;\n" : "=r"(t[2]) : "r"(v[0]), "r"(v[1]));
    asm("prmt.b32 %0, %1, %2, 0x6420;\n" : "=r"(t[3]) : "r"(v[2]), "r"(v[3]));
}
// The eight e2m1 values of word w (k in nibble order) through a block's tables: o[q] holds
// nibbles 2q and 2q + 1 as bf16, the first in the low half: the bits of q·2^(x−127) rounded
// once, as a value's decode then a product by the scale gives them (a NaN scale's NaN
// payloads aside).  Per word: the magnitudes'
// high and low bytes by prmt on the sign-cleared nibbles, the signs into the high bytes (a
// prmt that replicates each nibble's top bit, moved to a byte's top), and the bytes paired.
__device__ __forceinline__ void e2m1_bf16x8(u32 w, const u32 (&t)[4], u32 (&o)[4])
{
    const u32 m = w & 0x77777777u, mh = m >> 16, s = w << 4;
    u32 hl, hh, ll, lh, sl, sh;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(hl) : "r"(t[0]), "r"(t[1]), "r"(m));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(hh) : "r"(t[0]), "r"(t[1]), "r"(mh));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(ll) : "r"(t[2]), "r"(t[3]), "r"(m));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(lh) : "r"(t[2]), "r"(t[3]), "r"(mh));
    // nibble 2j's sign is bit 7 of s's byte j, nibble 2j + 1's bit 7 of w's byte j
    asm("prmt.b32 %0, %1, %2, 0x9D8C;\n" : "=r"(sl) : "r"(w), "r"(s));
    asm("prmt.b32 %0, %1, %2, 0xBFAE;\n" : "=r"(sh) : "r"(w), "r"(s));
    hl |= sl & 0x80808080u;
    hh |= sh & 0x80808080u;
    asm("prmt.b32 %0, %1, %2, 0x5140;\n" : "=r"(o[0]) : "r"(ll), "r"(hl));
    asm("prmt.b32 %0, %1, %2, 0x7362;\n" : "=r"(o[1]) : "r"(ll), "r"(hl));
    asm("prmt.b32 %0, %1, %2, 0x5140;\n" : "=r"(o[2]) : "r"(lh), "r"(hh));
    asm("prmt.b32 %0, %1, %2, 0x7362;\n" : "=r"(o[3]) : "r"(lh), "r"(hh));
}
