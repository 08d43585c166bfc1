/*
 * test_key.c — the cache key: same inputs give the same key, and a change to any one
 * input (descriptor, template name or bytes, generated source, arch/options) changes it.
 */
#define _GNU_SOURCE /* memmem */
#include "qjit_internal.h"
#include "testlib.h"

#include <string.h>
#include <xxhash.h>

/* The inputs of one key, with a few knobs to vary. */
typedef struct inputs {
    const char *desc;
    const char *names[3];
    const char *texts[3];
    int nfiles;
    const char *source;
    qjit_arch arch;
} inputs;

static const inputs base = {
    .desc = "gemm a=s8 b=s4 sa=row sb=group:128 gs=f16 zeros=0 out=bf16 bias=0 arch=sm_90a "
            "kernel=mma tile=128x128x64 warps=2x2 stages=4 split=1",
    .names = {"gemm_mma.cu.lua", "mma_common.lua", "epilogue.lua"},
    .texts = {"% include(\"mma_common.lua\")\n__global__ void k() {}\n", "% local X = 1\n",
              "// epilogue $(OUT)\n"},
    .nfiles = 3,
    .source = "#line 1 \"gemm_mma.cu.lua\"\n__global__ void k() {}\n",
    .arch = QJIT_ARCH_SM90A,
};

static qjit_status build(const inputs *in, qjit_key *k)
{
    qjit_expansion e;
    memset(&e, 0, sizeof e);
    e.nfiles = in->nfiles;
    for (int i = 0; i < in->nfiles; i++) {
        e.files[i].name = in->names[i];
        e.files[i].text = in->texts[i];
        e.files[i].len = strlen(in->texts[i]);
    }
    if (!qjit_buf_append(&e.source, in->source, strlen(in->source)))
        return QJIT_ERROR_OUT_OF_MEMORY;
    qjit_status st = qjit_key_build(in->desc, &e, in->arch, k);
    qjit_buf_free(&e.source);
    return st;
}

static int nkeys;
static uint8_t keys[64][16];

/* Build the key of `in`, check it differs from every key seen so far. */
static void expect_new_key(const inputs *in, const char *what)
{
    qjit_key k;
    CHECK_OK(build(in, &k));
    for (int i = 0; i < nkeys; i++)
        CHECK(memcmp(keys[i], k.hash, 16) != 0, "changing %s did not change the key", what);
    if (nkeys < 64)
        memcpy(keys[nkeys++], k.hash, 16);
    qjit_key_free(&k);
}

static void test_hash_and_hex(void)
{
    /* canonical form: high 64 bits big-endian, then low 64 bits big-endian */
    const char *msg = "qjit";
    XXH128_hash_t h = XXH3_128bits(msg, 4);
    uint8_t want[16], got[16];
    for (int i = 0; i < 8; i++) {
        want[i] = (uint8_t)(h.high64 >> (56 - 8 * i));
        want[8 + i] = (uint8_t)(h.low64 >> (56 - 8 * i));
    }
    qjit_hash128(msg, 4, got);
    CHECK(memcmp(want, got, 16) == 0, "qjit_hash128 is not canonical big-endian");

    uint8_t bytes[16];
    for (int i = 0; i < 16; i++)
        bytes[i] = (uint8_t)(i * 17 + 1);
    char hex[33];
    memset(hex, 'x', sizeof hex);
    qjit_key_hex(bytes, hex);
    CHECK(strcmp(hex, "0112233445566778899aabbccddeef00") == 0, "hex = %s", hex);
    CHECK(hex[32] == 0, "hex not terminated");

    qjit_hash128(NULL, 0, got); /* empty input is fine */
    XXH128_hash_t e = XXH3_128bits("", 0);
    CHECK(got[0] == (uint8_t)(e.high64 >> 56) && got[15] == (uint8_t)e.low64,
          "hash of empty input");
}

static void test_same_inputs_same_key(void)
{
    qjit_key a, b;
    CHECK_OK(build(&base, &a));
    CHECK_OK(build(&base, &b));
    CHECK(memcmp(a.hash, b.hash, 16) == 0, "same inputs gave different keys");
    CHECK(a.material.len == b.material.len &&
              memcmp(a.material.data, b.material.data, a.material.len) == 0,
          "same inputs gave different material");
    uint8_t h[16];
    qjit_hash128(a.material.data, a.material.len, h);
    CHECK(memcmp(h, a.hash, 16) == 0, "key is not the hash of its material");

    /* the material starts with the tagged format item: u64 LE length + "format" */
    static const uint8_t head[] = {6, 0, 0, 0, 0, 0, 0, 0, 'f', 'o', 'r', 'm', 'a', 't'};
    CHECK(a.material.len > sizeof head && memcmp(a.material.data, head, sizeof head) == 0,
          "material does not start with the format item");
    /* the descriptor text and every template's bytes are in it; the source is not
     * (only its hash) */
    CHECK(memmem(a.material.data, a.material.len, base.desc, strlen(base.desc)) != NULL,
          "descriptor missing from material");
    for (int i = 0; i < base.nfiles; i++)
        CHECK(memmem(a.material.data, a.material.len, base.texts[i], strlen(base.texts[i])),
              "template %s missing from material", base.names[i]);
    CHECK(memmem(a.material.data, a.material.len, base.source, strlen(base.source)) == NULL,
          "generated source is in the material verbatim (only its hash belongs there)");
    CHECK(memmem(a.material.data, a.material.len, "sm_90a", 6) != NULL, "arch missing");
    qjit_key_free(&a);
    qjit_key_free(&b);
    qjit_key_free(NULL);
}

static void test_every_input_matters(void)
{
    expect_new_key(&base, "nothing (base)");

    inputs v = base;
    v.desc = "gemm a=s8 b=s4 sa=row sb=group:128 gs=f16 zeros=0 out=bf16 bias=0 arch=sm_90a "
             "kernel=mma tile=128x128x64 warps=2x2 stages=3 split=1";
    expect_new_key(&v, "descriptor text");

    for (int f = 0; f < base.nfiles; f++) {
        char text[256];
        v = base;
        snprintf(text, sizeof text, "%s", base.texts[f]);
        text[0] ^= 1; /* one bit of one template */
        v.texts[f] = text;
        expect_new_key(&v, "a template's bytes");
        v = base;
        snprintf(text, sizeof text, "%s ", base.texts[f]); /* appended byte */
        v.texts[f] = text;
        expect_new_key(&v, "a template's length");
    }

    v = base;
    v.names[1] = "mma_common2.lua";
    expect_new_key(&v, "a template's name");

    v = base;
    v.nfiles = 2;
    expect_new_key(&v, "the number of template files");

    /* boundaries: moving bytes between adjacent items must change the material */
    v = base;
    v.names[0] = "gemm_mma.cu.lu";
    char shifted[256];
    snprintf(shifted, sizeof shifted, "a%s", base.texts[0]);
    v.texts[0] = shifted;
    expect_new_key(&v, "a byte moved from a template name into its text");

    v = base;
    v.source = "#line 1 \"gemm_mma.cu.lua\"\n__global__ void k() { }\n";
    expect_new_key(&v, "generated source");

    qjit_arch arches[] = {QJIT_ARCH_SM80, QJIT_ARCH_SM86, QJIT_ARCH_SM89};
    for (int i = 0; i < 3; i++) {
        v = base;
        v.arch = arches[i];
        expect_new_key(&v, "arch (and its NVRTC options)");
    }
    CHECK(nkeys == 15, "expected 15 distinct keys, got %d", nkeys);
}

static void test_bad_arguments(void)
{
    qjit_key k;
    qjit_expansion e;
    memset(&e, 0, sizeof e);
    CHECK(qjit_key_build(NULL, &e, QJIT_ARCH_SM90A, &k) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL descriptor accepted");
    CHECK(strstr(qjit_last_error(), "canonical_desc") != NULL, "message: %s", qjit_last_error());
    CHECK(qjit_key_build("gemm", NULL, QJIT_ARCH_SM90A, &k) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL expansion accepted");
    e.nfiles = 17;
    CHECK(qjit_key_build("gemm", &e, QJIT_ARCH_SM90A, &k) == QJIT_ERROR_INVALID_ARGUMENT,
          "nfiles=17 accepted");
    e.nfiles = 1; /* a file with no name */
    CHECK(qjit_key_build("gemm", &e, QJIT_ARCH_SM90A, &k) == QJIT_ERROR_INVALID_ARGUMENT,
          "nameless template accepted");
    CHECK(k.material.data == NULL, "material left allocated after a failure");
}

int main(void)
{
    test_hash_and_hex();
    test_same_inputs_same_key();
    test_every_input_matters();
    test_bad_arguments();
    return tl_finish("test_key");
}
