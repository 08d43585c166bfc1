/*
 * test_dispatch.c — choosing what runs, with no GPU: the M buckets, each family's
 * heuristic per bucket, tuning results recorded, persisted, verified and used (a fresh
 * context picks up the winners; corrupt or unusable rows fall back to the heuristic with a
 * warning), exported and merged with the cache, and a precompile of every variant of a
 * dispatch; template declarations answer every question without expanding kernel text.
 */
#include "qjit_internal.h"
#include "cache_db.h"
#include "testlib.h"

#include <sqlite3.h>
#include <string.h>

static int warnings;
static char last_warning[1024];

static void on_log(void *user, qjit_log_level lvl, const char *msg)
{
    (void)user;
    if (lvl == QJIT_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof last_warning, "%s", msg);
    }
}

static qjit_context *open_ctx(const char *dir, const char *shipped)
{
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    o.shipped_cache = shipped;
    o.log = on_log;
    qjit_context *c = NULL;
    CHECK_OK(qjit_context_create(&o, &c));
    return c;
}

static qjit_gemm_desc parse(const char *text)
{
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse(text, &d));
    return d;
}

static void test_buckets(void)
{
    static const struct {
        int64_t m;
        int b;
    } cases[] = {{0, 0},   {1, 0},    {2, 1},    {3, 1},     {4, 1},   {5, 2},    {8, 2},
                 {9, 3},   {16, 3},   {17, 4},   {32, 4},    {33, 5},  {64, 5},   {65, 6},
                 {128, 6}, {129, 7},  {256, 7},  {257, 8},   {1024, 8}, {1025, 9}, {4097, 9},
                 {1LL << 40, 9}, {-5, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(qjit_m_bucket(cases[i].m) == cases[i].b, "m=%lld: bucket %d, want %d",
              (long long)cases[i].m, qjit_m_bucket(cases[i].m), cases[i].b);
    /* every M falls in the bucket whose range the header gives */
    for (int64_t m = 1; m <= 5000; m++) {
        int b = qjit_m_bucket(m);
        CHECK(m <= qjit_m_bucket_max(b) && (b == 0 || m > qjit_m_bucket_max(b - 1)),
              "m=%lld in bucket %d of max %lld", (long long)m, b,
              (long long)qjit_m_bucket_max(b));
    }
    CHECK(qjit_m_bucket_max(QJIT_M_BUCKETS - 1) == INT64_MAX && qjit_m_bucket_max(-1) == 0 &&
              qjit_m_bucket_max(QJIT_M_BUCKETS) == 0,
          "bucket_max out of range");
}

/* The variants of d on arch, printed, and checked to be each supported. */
static size_t variants(qjit_context *ctx, const char *text, qjit_arch arch,
                       qjit_gemm_variant *v, size_t cap)
{
    qjit_gemm_desc d = parse(text);
    size_t n = 0;
    CHECK_OK(qjit_gemm_variants(ctx, &d, arch, v, cap, &n));
    for (size_t i = 0; i < n && i < cap; i++) {
        char why[512];
        CHECK(qjit_gemm_supports(ctx, &v[i].desc, arch, why, sizeof why) == QJIT_OK,
              "%s: %s", v[i].text, why);
        CHECK(qjit_select_fully_named(&v[i].desc) && v[i].desc.arch == arch,
              "%s is not resolved for arch %d", v[i].text, (int)arch);
    }
    return n;
}

/* Whether v starts with the decode kernel's two variants: gemv with a tile of 8 tokens for
 * M 1-8 and of 16 for M 9-16. */
static bool gemv_decode(const qjit_gemm_variant *v)
{
    const char *k0 = qjit_kernel_name(v[0].desc.kernel), *k1 = qjit_kernel_name(v[1].desc.kernel);
    return k0 && k1 && !strcmp(k0, "gemv") && !strcmp(k1, "gemv") && v[0].m_min == 1 &&
           v[0].m_max == 8 && v[0].desc.bm == 8 && v[1].m_min == 9 && v[1].m_max == 16 &&
           v[1].desc.bm == 16;
}

static void test_heuristics(qjit_context *ctx)
{
    qjit_gemm_variant v[32];
    /* f16/bf16 on sm_90a: the decode kernel gemv up to M = 16 (a tile of 8 tokens to M = 8,
     * 16 above), then wgmma's 64x128x64 to M = 64, 128x128x64 to 1024, 128x256x64 above
     * (each measured on the H100); mma in gemv's place elsewhere */
    size_t n = variants(ctx, "gemm a=bf16 b=bf16 out=bf16", QJIT_ARCH_SM90A, v, 32);
    CHECK(n == 5 && gemv_decode(v) && v[2].m_min == 17 && v[2].m_max == 64 &&
              v[2].desc.kernel == QJIT_KERNEL_WGMMA && v[2].desc.bm == 64 && v[2].desc.bn == 128 &&
              v[3].m_min == 65 && v[3].m_max == 1024 && v[3].desc.kernel == QJIT_KERNEL_WGMMA &&
              v[3].desc.bm == 128 && v[3].desc.bn == 128 && v[4].m_min == 1025 &&
              v[4].m_max == INT64_MAX && v[4].desc.kernel == QJIT_KERNEL_WGMMA &&
              v[4].desc.bm == 128 && v[4].desc.bn == 256 && !v[2].tuned && !v[3].tuned &&
              !v[4].tuned,
          "bf16 sm_90a: %zu variants, %s | %s", n, v[0].text, n > 2 ? v[2].text : "");
    n = variants(ctx, "gemm a=f16 b=f16 out=f32", QJIT_ARCH_SM80, v, 32);
    CHECK(n == 4 && gemv_decode(v) && v[2].desc.kernel == QJIT_KERNEL_MMA && v[2].desc.bm == 64 &&
              v[3].desc.kernel == QJIT_KERNEL_MMA && v[3].desc.bm == 128,
          "f16 sm_80: %zu, %s", n, v[0].text);
    /* kernel=wgmma named: wgmma for every M, the same three tiles */
    n = variants(ctx, "gemm a=bf16 b=bf16 out=bf16 kernel=wgmma", QJIT_ARCH_SM90A, v, 32);
    CHECK(n == 3 && v[0].desc.kernel == QJIT_KERNEL_WGMMA && v[0].desc.bm == 64 &&
              v[1].desc.kernel == QJIT_KERNEL_WGMMA && v[1].desc.bn == 128 &&
              v[2].desc.kernel == QJIT_KERNEL_WGMMA && v[2].desc.bn == 256,
          "kernel=wgmma: %zu, %s", n, v[0].text);
    /* a named tile holds for every M */
    n = variants(ctx, "gemm a=bf16 b=bf16 out=bf16 kernel=wgmma tile=128x128x64", QJIT_ARCH_SM90A,
                 v, 32);
    CHECK(n == 1 && v[0].desc.bm == 128 && v[0].desc.bn == 128, "kernel=wgmma tile=128x128x64: "
          "%zu, %s", n, v[0].text);
    /* ... and for W8A8, whose unnamed tiles change with M on both families */
    static const char *const w8_named[] = {
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 tile=128x256x128",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=128x128x64",
    };
    for (size_t i = 0; i < 2; i++) {
        n = variants(ctx, w8_named[i], QJIT_ARCH_SM90A, v, 32);
        CHECK(n == 1 && v[0].m_min == 1 && v[0].m_max == INT64_MAX, "%s: %zu variants, %s",
              w8_named[i], n, v[0].text);
    }
    /* weight-only and W4A8: decode tiles up to M = 64, tiles of more rows above; where gemv
     * serves the pair (4-bit with col or group 128/256 scales, s8 col, e2m1 mx, W4A8 col and
     * group 128/256; not group 64), gemv to M = 16 and
     * the decode tile from 17 */
    static const char *const split[] = {
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", "gemm a=f16 b=u4 sb=group:64 gs=f16 zeros=1 out=f16",
        "gemm a=bf16 b=s8 sb=col out=bf16",            "gemm a=f16 b=e2m1 sb=mx out=f32",
        "gemm a=s8 b=s4 sa=row sb=col out=bf16",       "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16",
    };
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        for (int a = 0; a < 2; a++) {
            qjit_arch arch = a ? QJIT_ARCH_SM90A : QJIT_ARCH_SM80;
            n = variants(ctx, split[i], arch, v, 32);
            const size_t g = gemv_decode(v) ? 2 : 0; /* variants before the decode tile */
            /* sm_90a: wgmma_wqr (W4A16, W8A16) 128x128 tiles to M = 128, 256x128 above;
             * wgmma_wq (e2m1) 128x128 to M = 256; wgmma_wqr for W4A8 col 128x128 to M = 1024,
             * 256x128 above, with groups 128x128 from M = 65 */
            static const int64_t last128[] = {128, 128, 128, 256, 1024, 0};
            const int64_t mb = a ? last128[i] : 0;
            const size_t h = mb ? 2 : 1;
            CHECK(n == g + 1 + h && v[g].m_min == (g ? 17 : 1) && v[g].m_max == 64 && v[g].desc.bm == 16 &&
                      v[g + 1].m_min == 65 && v[g + 1].desc.bm >= 64 &&
                      v[g + h].m_max == INT64_MAX && (g == 2) == (i != 1) &&
                      (h == 1 || (v[g + 1].m_max == mb && v[g + 1].desc.bm == 128 &&
                                  v[g + 2].m_min == mb + 1 && v[g + 2].desc.bm == 256)),
                  "%s on arch %d: %zu variants (%s | %s)", split[i], (int)arch, n, v[0].text,
                  n > 1 ? v[1].text : "");
        }
    /* W8A8, fp8, MX on sm_90a: one kernel up to M = 64 (mma_i8, wgmma_f8, wgmma_mx's 64-row
     * tile), another above (W8A8: two tiles of wgmma_i8, 128x128 up to M = 256); mma_f8 for
     * every M on sm_89; each begins with gemv's two variants up to M = 16 (on sm_89 too for
     * fp8 and MX) */
    static const struct {
        const char *text;
        qjit_kernel decode, prefill;
        size_t n;
    } q[] = {
        {"gemm a=s8 b=s8 sa=row sb=col out=bf16", QJIT_KERNEL_MMA_I8, QJIT_KERNEL_WGMMA_I8, 3},
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16", QJIT_KERNEL_WGMMA_F8, QJIT_KERNEL_WGMMA_TMA, 2},
        {"gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16", QJIT_KERNEL_WGMMA_MX, QJIT_KERNEL_WGMMA_MX, 2},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        n = variants(ctx, q[i].text, QJIT_ARCH_SM90A, v, 32);
        const size_t g = gemv_decode(v) ? 2 : 0;
        CHECK(n == g + q[i].n && g == 2 && v[g].m_max == 64 &&
                  v[g].desc.kernel == q[i].decode && v[n - 1].desc.kernel == q[i].prefill &&
                  v[n - 1].m_max == INT64_MAX,
              "%s: %zu variants (%s | %s)", q[i].text, n, v[g].text, n > 1 ? v[n - 1].text : "");
        if (i > 0) { /* fp8 and MX */
            n = variants(ctx, q[i].text, QJIT_ARCH_SM89, v, 32);
            CHECK(n == 3, "%s on sm_89: %zu variants", q[i].text, n);
        }
    }
    /* a descriptor that names its whole configuration is one kernel, as named */
    n = variants(ctx, "gemm a=bf16 b=s4 sb=col out=bf16 kernel=mma_wq tile=64x64x64 warps=2x2 "
                      "stages=3 split=1", QJIT_ARCH_SM90A, v, 32);
    CHECK(n == 1 && v[0].desc.bm == 64 && v[0].m_max == INT64_MAX, "named: %zu %s", n, v[0].text);
    /* a named tile holds for every bucket: the auto fields around it do not move (wgmma_wqr:
     * its two consumer warpgroups split the 128 weights) */
    n = variants(ctx, "gemm a=bf16 b=s4 sb=col out=bf16 tile=128x128x64", QJIT_ARCH_SM90A, v, 32);
    CHECK(n == 1 && v[0].desc.bm == 128 && v[0].desc.wm == 1 && v[0].desc.wn == 2 &&
              strstr(v[0].text, "kernel=wgmma_wqr"),
          "named tile: %zu %s", n, v[0].text);
    /* wgmma_wq: named tiles and warps keep 3 stages at every M (4 stages of 128x256x64 do
     * not fit with s8 weights), while the unnamed tiles follow the tuning */
    static const char *const wq_named[] = {
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=wgmma_wq tile=128x256x64",
        "gemm a=bf16 b=s8 sb=tensor out=f32 kernel=wgmma_wq tile=128x256x64",
        "gemm a=bf16 b=s8 sb=col out=f32 kernel=wgmma_wq warps=1x2",
    };
    for (size_t i = 0; i < sizeof wq_named / sizeof wq_named[0]; i++) {
        n = variants(ctx, wq_named[i], QJIT_ARCH_SM90A, v, 32);
        bool ok = n >= 1;
        for (size_t j = 0; j < n && j < 32; j++)
            ok = ok && (v[j].m_max <= 64 || (v[j].desc.stages == 3 && v[j].desc.bn == 256));
        CHECK(ok, "%s: %zu variants, %s", wq_named[i], n, n ? v[n - 1].text : "");
    }
}

static qjit_tune_measurement measure(const char *gpu, int64_t m, const qjit_gemm_desc *c,
                                     double us, int ok)
{
    return (qjit_tune_measurement){gpu, m, 28672, 8192, c, us, ok};
}

static const char *W4A16 = "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16";

/* Winners are recorded, persist into a new context, and stand for their N, K and bucket. */
static void test_record_and_pick(const char *dir)
{
    qjit_context *ctx = open_ctx(dir, NULL);
    qjit_gemm_desc d = parse(W4A16);
    qjit_gemm_desc fast = parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a "
                                "kernel=mma_wq tile=64x128x64 warps=2x2 stages=3 split=1");
    qjit_gemm_desc slow = parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a "
                                "kernel=mma_wq tile=64x64x64 warps=2x2 stages=4 split=1");
    qjit_gemm_desc wrong = parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a "
                                 "kernel=mma_wq tile=128x128x64 warps=2x2 stages=3 split=1");
    qjit_gemm_desc big = parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a "
                               "kernel=mma_wq tile=128x256x64 warps=2x4 stages=3 split=1");
    qjit_tune_measurement ms[] = {
        measure("TestGPU A", 16, &slow, 80.0, 1), measure("TestGPU A", 16, &fast, 70.0, 1),
        measure("TestGPU A", 16, &wrong, 10.0, 0), /* fastest, but its output was wrong */
        measure("TestGPU A", 4096, &big, 5000.0, 1), measure("TestGPU B", 16, &slow, 60.0, 1),
    };
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        CHECK_OK(qjit_tune_record(ctx, &d, &ms[i]));
    /* re-measuring a candidate replaces its time; the others stay */
    qjit_tune_measurement again = measure("TestGPU A", 16, &fast, 65.0, 1);
    CHECK_OK(qjit_tune_record(ctx, &d, &again));

    /* bad records are refused, naming why */
    qjit_gemm_desc other = parse("gemm a=f16 b=s4 sb=group:128 gs=f16 out=bf16 arch=sm_90a "
                                 "kernel=mma_wq tile=64x64x64 warps=2x2 stages=3 split=1");
    qjit_tune_measurement bad = measure("TestGPU A", 16, &other, 50.0, 1);
    CHECK(qjit_tune_record(ctx, &d, &bad) == QJIT_ERROR_INVALID_ARGUMENT &&
              strstr(qjit_last_error(), "not a configuration"),
          "another pair recorded: %s", qjit_last_error());
    qjit_gemm_desc unsup = fast;
    unsup.stages = 9;
    bad = measure("TestGPU A", 16, &unsup, 50.0, 1);
    CHECK(qjit_tune_record(ctx, &d, &bad) == QJIT_ERROR_INVALID_ARGUMENT &&
              strstr(qjit_last_error(), "STAGES"),
          "unsupported candidate recorded: %s", qjit_last_error());
    bad = measure("TestGPU A", 16, &fast, -1.0, 1);
    CHECK(qjit_tune_record(ctx, &d, &bad) == QJIT_ERROR_INVALID_ARGUMENT, "negative time");
    CHECK(qjit_tune_record(ctx, &fast, &again) == QJIT_ERROR_INVALID_ARGUMENT &&
              strstr(qjit_last_error(), "nothing to tune"),
          "a fully named descriptor tuned: %s", qjit_last_error());
    qjit_context_destroy(ctx);

    /* a new context, as a new process would, sees the winners */
    ctx = open_ctx(dir, NULL);
    qjit_gemm_variant v[32];
    size_t n = variants(ctx, W4A16, QJIT_ARCH_SM90A, v, 32);
    int seen_a16 = 0, seen_a4096 = 0, seen_b16 = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        if (!v[i].tuned)
            continue;
        CHECK(v[i].n == 28672 && v[i].k == 8192, "tuned variant for n=%lld k=%lld",
              (long long)v[i].n, (long long)v[i].k);
        if (!strcmp(v[i].gpu, "TestGPU A") && v[i].m_min == 9 && v[i].m_max == 16) {
            seen_a16++;
            CHECK(memcmp(&v[i].desc, &fast, sizeof fast) == 0 && v[i].us == 65.0,
                  "winner at M=16: %s (%.1f us)", v[i].text, v[i].us);
        } else if (!strcmp(v[i].gpu, "TestGPU A") && v[i].m_min == 1025) {
            seen_a4096++;
            CHECK(memcmp(&v[i].desc, &big, sizeof big) == 0, "winner at M=4096: %s", v[i].text);
        } else if (!strcmp(v[i].gpu, "TestGPU B")) {
            seen_b16++;
            CHECK(memcmp(&v[i].desc, &slow, sizeof slow) == 0, "GPU B's winner: %s", v[i].text);
        } else {
            CHECK(0, "unexpected tuned variant %s M %lld..%lld on %s", v[i].text,
                  (long long)v[i].m_min, (long long)v[i].m_max, v[i].gpu);
        }
    }
    /* the heuristic's five (gemv to M = 8 and to 16, the decode tile to 64, wgmma_wq's two
     * tiles above) and three tuned */
    CHECK(seen_a16 == 1 && seen_a4096 == 1 && seen_b16 == 1 && n == 8,
          "tuned variants: %d %d %d of %zu", seen_a16, seen_a4096, seen_b16, n);
    /* the heuristics still cover every bucket and every other N and K */
    CHECK(!v[0].tuned && !v[1].tuned && !v[2].tuned && !v[3].tuned && v[1].m_max == 16 &&
              v[2].m_max == 64 && v[3].m_min == 65,
          "heuristics kept");
    qjit_context_destroy(ctx);
}

static sqlite3 *raw_open(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qjit.db", dir);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK, "open %s", path);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static int64_t raw_count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* A tuning row with a hash that matches its fields, measured at `created` (ms). */
static void insert_tuning(sqlite3 *db, const qjit_tuning_row *r, int64_t created)
{
    uint8_t h[16];
    qjit_db_tuning_hash(r, h);
    sqlite3_stmt *st = NULL;
    CHECK(sqlite3_prepare_v2(db,
                             "INSERT INTO tuning(gpu, arch, problem, bucket, n, k, config, m, us, "
                             "ok, created, row_hash) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                             "?10, ?12, ?11)",
                             -1, &st, NULL) == SQLITE_OK,
          "prepare");
    sqlite3_bind_text(st, 1, r->gpu, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->problem, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, r->bucket);
    sqlite3_bind_int64(st, 5, r->n);
    sqlite3_bind_int64(st, 6, r->k);
    sqlite3_bind_text(st, 7, r->config, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 8, r->m);
    sqlite3_bind_double(st, 9, r->us);
    sqlite3_bind_int(st, 10, r->ok);
    sqlite3_bind_blob(st, 11, h, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 12, created);
    CHECK(sqlite3_step(st) == SQLITE_DONE, "insert: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

/* Merging tuning files: the newer measurement of a candidate stays, whichever file it
 * comes from (a re-tuning shipped later replaces an old record; an older file merged
 * afterwards does not bring the old one back). */
static void test_merge_newer(void)
{
    qjit_gemm_desc d = parse(W4A16);
    char problem[256];
    qjit_select_problem_text(&d, problem, sizeof problem);
    qjit_tuning_row r = {"TestGPU M", "sm_90a", problem, 3, 4096, 4096,
                         "gemm a=bf16 b=s4 sa=none sb=group:128 gs=bf16 zeros=0 out=bf16 bias=0 "
                         "arch=sm_90a kernel=gemv tile=16x32x128 warps=1x4 stages=2 split=1",
                         16, 0, 1};
    const double us[3] = {20.0, 10.0, 30.0};      /* the base, a newer file, an older file */
    const int64_t created[3] = {2000, 3000, 1000};
    const char *dirs[3] = {tl_tmpdir("merge-base"), tl_tmpdir("merge-newer"), tl_tmpdir("merge-older")};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/qjit.db", dirs[i]);
        qjit_cache_db *h = NULL;
        CHECK_OK(qjit_cache_db_open(path, 1, &h)); /* creates the schema */
        qjit_cache_db_close(h);
        sqlite3 *db = raw_open(dirs[i]);
        r.us = us[i];
        insert_tuning(db, &r, created[i]);
        sqlite3_close(db);
    }
    char base[1024], newer[1024], older[1024];
    snprintf(base, sizeof base, "%s/qjit.db", dirs[0]);
    snprintf(newer, sizeof newer, "%s/qjit.db", dirs[1]);
    snprintf(older, sizeof older, "%s/qjit.db", dirs[2]);
    const char *sql = "SELECT count(*) FROM tuning WHERE gpu = 'TestGPU M' AND us = %g";
    char q[160];
    qjit_cache_db *h = NULL;
    CHECK_OK(qjit_cache_db_open(base, 1, &h));
    CHECK_OK(qjit_cache_db_merge(h, newer, NULL, NULL));
    qjit_cache_db_close(h);
    sqlite3 *db = raw_open(dirs[0]);
    snprintf(q, sizeof q, sql, us[1]);
    CHECK(raw_count(db, q) == 1 && raw_count(db, "SELECT count(*) FROM tuning") == 1,
          "the newer record did not replace the old one");
    sqlite3_close(db);
    CHECK_OK(qjit_cache_db_open(base, 1, &h));
    CHECK_OK(qjit_cache_db_merge(h, older, NULL, NULL));
    qjit_cache_verify_report rep;
    CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &rep));
    CHECK(rep.tuning_checked == 1 && rep.tuning_bad == 0, "after the merges: %llu checked, %llu bad",
          (unsigned long long)rep.tuning_checked, (unsigned long long)rep.tuning_bad);
    qjit_cache_db_close(h);
    db = raw_open(dirs[0]);
    snprintf(q, sizeof q, sql, us[1]);
    CHECK(raw_count(db, q) == 1, "an older file brought the old record back");
    sqlite3_close(db);
}

/* A row whose fields no longer match its hash, and a row that verifies but names a
 * configuration this build cannot run: each is skipped with a warning, and the next
 * candidate or the heuristic stands in. */
static void test_damaged_rows(const char *dir)
{
    sqlite3 *db = raw_open(dir);
    CHECK(sqlite3_exec(db, "UPDATE tuning SET us = us / 10 WHERE gpu = 'TestGPU B'", NULL, NULL,
                       NULL) == SQLITE_OK,
          "damage a row");
    /* a verifying row whose config the template refuses: stages 9 */
    qjit_tuning_row r = {"TestGPU A", "sm_90a", "", 9, 1000, 512, "", 1500, 1.0, 1};
    char problem[256];
    qjit_gemm_desc d = parse(W4A16);
    qjit_select_problem_text(&d, problem, sizeof problem);
    r.problem = problem;
    r.config = "gemm a=bf16 b=s4 sa=none sb=group:128 gs=bf16 zeros=0 out=bf16 bias=0 "
               "arch=sm_90a kernel=mma_wq tile=64x64x64 warps=2x2 stages=9 split=1";
    insert_tuning(db, &r, 0);
    /* at k = 1500 the refused row is the fastest; the next one, slower, stands in for it */
    r.k = 1500;
    r.us = 0.5;
    insert_tuning(db, &r, 0);
    r.us = 2.0;
    r.config = "gemm a=bf16 b=s4 sa=none sb=group:128 gs=bf16 zeros=0 out=bf16 bias=0 "
               "arch=sm_90a kernel=mma_wq tile=64x64x64 warps=2x2 stages=3 split=1";
    insert_tuning(db, &r, 0);
    /* and a refused row slower than that winner: passed over, without a warning */
    r.us = 3.0;
    r.config = "gemm a=bf16 b=s4 sa=none sb=group:128 gs=bf16 zeros=0 out=bf16 bias=0 "
               "arch=sm_90a kernel=mma_wq tile=64x64x64 warps=2x2 stages=10 split=1";
    insert_tuning(db, &r, 0);
    sqlite3_close(db);

    qjit_context *ctx = open_ctx(dir, NULL);
    int w = warnings;
    qjit_gemm_variant v[32];
    size_t n = variants(ctx, W4A16, QJIT_ARCH_SM90A, v, 32);
    CHECK(warnings == w + 3, "warnings %d (want one per bad row up to a winner)", warnings - w);
    int seen_b = 0, seen_1500 = 0, next = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        seen_b += !strcmp(v[i].gpu, "TestGPU B");
        seen_1500 += v[i].tuned && v[i].n == 1000 && v[i].k == 512;
        next += v[i].tuned && v[i].n == 1000 && v[i].k == 1500 && v[i].desc.stages == 3 &&
                v[i].us == 2.0;
    }
    CHECK(seen_b == 0 && seen_1500 == 0 && next == 1 && n == 8,
          "bad rows used: B %d, n=1000 %d, next row %d, %zu variants", seen_b, seen_1500, next, n);
    qjit_context_destroy(ctx);
    db = raw_open(dir);
    CHECK(raw_count(db, "SELECT count(*) FROM tuning WHERE gpu = 'TestGPU B'") == 0,
          "the damaged row was not deleted");
    /* the tests after this one count the rows before these three */
    CHECK(sqlite3_exec(db, "DELETE FROM tuning WHERE k = 1500", NULL, NULL, NULL) == SQLITE_OK,
          "delete the n = 1000, k = 1500 rows");
    sqlite3_close(db);
}

static int count_tuning(void *user, const qjit_cache_tuning_entry *e)
{
    int *n = user;
    n[0]++;
    n[1] += e->winner;
    return 0;
}

/* Tuning results travel with the cache: export to a shipped file (read-only layer under an
 * empty writable cache) and merge into another DB. */
static void test_ship(const char *dir)
{
    char src[1024], out[1024];
    snprintf(src, sizeof src, "%s/qjit.db", dir);
    snprintf(out, sizeof out, "%s/shipped.db", tl_tmpdir("dispatch-ship"));
    qjit_cache_db *db = NULL;
    CHECK_OK(qjit_cache_db_open(src, 0, &db));
    int cnt[2] = {0, 0};
    CHECK_OK(qjit_cache_db_tuning(db, NULL, count_tuning, cnt));
    CHECK(cnt[0] == 5 && cnt[1] == 3, "listed %d rows, %d winners", cnt[0], cnt[1]);
    qjit_cache_stats s;
    CHECK_OK(qjit_cache_db_stats(db, &s));
    CHECK(s.tuning_rows == 5 && s.schema_version == 2, "stats: %llu tuning rows, schema %d",
          (unsigned long long)s.tuning_rows, s.schema_version);
    qjit_cache_verify_report rep;
    CHECK_OK(qjit_cache_db_verify(db, 0, NULL, NULL, &rep));
    CHECK(rep.tuning_checked == 5 && rep.tuning_bad == 0, "verify: %llu checked, %llu bad",
          (unsigned long long)rep.tuning_checked, (unsigned long long)rep.tuning_bad);
    qjit_cache_filter f = {"sm_90", NULL, NULL};
    CHECK_OK(qjit_cache_db_export(db, out, &f, NULL, NULL));
    qjit_cache_db_close(db);

    qjit_context *ctx = open_ctx(tl_tmpdir("dispatch-empty"), out);
    qjit_gemm_variant v[32];
    size_t n = variants(ctx, W4A16, QJIT_ARCH_SM90A, v, 32);
    int tuned = 0;
    for (size_t i = 0; i < n && i < 32; i++)
        tuned += v[i].tuned;
    CHECK(tuned == 2, "from the shipped cache: %d tuned variants of %zu", tuned, n);
    qjit_context_destroy(ctx);

    char merged[1024];
    snprintf(merged, sizeof merged, "%s/qjit.db", tl_tmpdir("dispatch-merge"));
    CHECK_OK(qjit_cache_db_open(merged, 1, &db));
    CHECK_OK(qjit_cache_db_merge(db, out, NULL, NULL));
    cnt[0] = cnt[1] = 0;
    CHECK_OK(qjit_cache_db_tuning(db, NULL, count_tuning, cnt));
    CHECK(cnt[0] == 5 && cnt[1] == 3, "merged %d rows, %d winners", cnt[0], cnt[1]);
    qjit_cache_db_close(db);
}

/* A version-1 DB keeps its kernels when a library of version 2 opens it. */
static void test_migration(void)
{
    const char *dir = tl_tmpdir("dispatch-v1");
    sqlite3 *db = raw_open(dir);
    CHECK(sqlite3_exec(db,
                       "CREATE TABLE kernels (key BLOB PRIMARY KEY NOT NULL, cubin_size INTEGER "
                       "NOT NULL, cubin_hash BLOB NOT NULL, source_size INTEGER NOT NULL, "
                       "compile_ms REAL NOT NULL, created INTEGER NOT NULL, last_used INTEGER "
                       "NOT NULL, arch TEXT NOT NULL, descriptor TEXT NOT NULL, material BLOB "
                       "NOT NULL, cubin BLOB NOT NULL, source TEXT NOT NULL);"
                       "INSERT INTO kernels VALUES(x'00', 1, x'00', 0, 0, 0, 0, 'sm_80', 'd', "
                       "x'00', x'00', '');"
                       "PRAGMA user_version = 1;",
                       NULL, NULL, NULL) == SQLITE_OK,
          "make a version 1 DB: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
    qjit_context *ctx = open_ctx(dir, NULL);
    qjit_context_destroy(ctx);
    db = raw_open(dir);
    CHECK(raw_count(db, "PRAGMA user_version") == 2, "not migrated");
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "a row was lost");
    CHECK(raw_count(db, "SELECT count(*) FROM tuning") == 0, "no tuning table");
    sqlite3_close(db);
}

/* Declarations answer resolve, supports, variants and sweeps without expanding kernel
 * text; a precompile expands once per kernel it builds, and builds every variant. */
static void test_expansions(void)
{
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("dispatch-pc");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm_desc d = parse(W4A16), r;
    CHECK_OK(qjit_gemm_resolve(ctx, &d, QJIT_ARCH_SM90A, &r)); /* reads the declarations */
    long long e0 = qjit_sandbox_expansions();
    for (int i = 0; i < 20; i++) {
        CHECK_OK(qjit_gemm_resolve(ctx, &d, QJIT_ARCH_SM90A, &r));
        CHECK_OK(qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM80, NULL, 0));
    }
    qjit_gemm_variant v[16];
    size_t n = 0;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, v, 16, &n));
    qjit_gemm_desc pts[64];
    size_t np = 0, np2 = 0;
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM90A, "default", pts, 64, &np));
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM90A, "small-m", pts, 64, &np2));
    CHECK(qjit_sandbox_expansions() == e0, "questions expanded %lld times",
          qjit_sandbox_expansions() - e0);
    CHECK(np >= 4 && np2 >= 2 && n == 5, "sweeps %zu and %zu points, %zu variants", np, np2, n);
    /* precompile of the auto descriptor: its five variants (gemv to M = 8 and 16, the decode
     * tile, wgmma_wq's two tiles), one expansion each */
    qjit_stats s0, s1;
    qjit_context_stats(ctx, &s0);
    int cached = -1;
    CHECK_OK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, &cached));
    qjit_context_stats(ctx, &s1);
    CHECK(s1.compiles - s0.compiles == 5 && cached == 0, "precompile compiled %llu",
          (unsigned long long)(s1.compiles - s0.compiles));
    CHECK(qjit_sandbox_expansions() - e0 == 5, "precompile expanded %lld times",
          qjit_sandbox_expansions() - e0);
    /* every variant is now in the cache: a second precompile, as a later get, compiles none */
    CHECK_OK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, &cached));
    qjit_context_stats(ctx, &s0);
    CHECK(s0.compiles == s1.compiles && cached == 1, "second precompile compiled %llu",
          (unsigned long long)(s0.compiles - s1.compiles));
    for (size_t i = 0; i < n; i++) {
        CHECK_OK(qjit_gemm_precompile(ctx, &v[i].desc, QJIT_ARCH_SM90A, &cached));
        CHECK(cached == 1, "variant %s was not cached", v[i].text);
    }
    qjit_context_destroy(ctx);
}

/* The sweep of a kernel=auto descriptor takes the points of every measured family that
 * serves the pair (f16/bf16 on sm_90a: wgmma's, then mma's); a family not yet measured on
 * a GPU (wgmma_i8) is neither picked nor swept by auto, and sweeps when named. */
static void test_sweep_families(void)
{
    qjit_options o;
    qjit_options_init(&o);
    o.memory_only = 1;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm_desc pts[64];
    size_t n = 0;
    int fam[QJIT_KERNEL_COUNT] = {0};
    qjit_gemm_desc d = parse("gemm a=bf16 b=bf16 out=bf16");
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM90A, "default", pts, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        fam[pts[i].kernel]++;
    CHECK(n <= 64 && pts[0].kernel == QJIT_KERNEL_WGMMA && fam[QJIT_KERNEL_WGMMA] >= 3 &&
              fam[QJIT_KERNEL_MMA] >= 3,
          "bf16 auto sweep: %zu points, wgmma %d, mma %d, first %s", n, fam[QJIT_KERNEL_WGMMA],
          fam[QJIT_KERNEL_MMA], qjit_kernel_name(pts[0].kernel));
    /* sm_80: mma alone (wgmma needs sm_90a) */
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM80, "default", pts, 64, &n));
    bool only_mma = n > 0;
    for (size_t i = 0; i < n && i < 64; i++)
        only_mma &= pts[i].kernel == QJIT_KERNEL_MMA;
    CHECK(only_mma, "bf16 auto sweep on sm_80 has %zu points, not all mma", n);
    /* W8A8: auto resolves (M unknown) to wgmma_i8 and sweeps the three families that serve
     * it on sm_90a, wgmma_i8's points first */
    d = parse("gemm a=s8 b=s8 sa=row sb=col out=bf16");
    qjit_gemm_desc r;
    CHECK_OK(qjit_gemm_resolve(ctx, &d, QJIT_ARCH_SM90A, &r));
    CHECK(r.kernel == QJIT_KERNEL_WGMMA_I8, "W8A8 auto resolved to %s", qjit_kernel_name(r.kernel));
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM90A, "default", pts, 64, &n));
    int fams[QJIT_KERNEL_WGMMA_TMA + 1] = {0};
    for (size_t i = 0; i < n && i < 64; i++)
        if (pts[i].kernel <= QJIT_KERNEL_WGMMA_TMA)
            fams[pts[i].kernel]++;
    CHECK(n > 0 && pts[0].kernel == QJIT_KERNEL_WGMMA_I8 && fams[QJIT_KERNEL_WGMMA_I8] >= 3 &&
              fams[QJIT_KERNEL_MMA_I8] >= 3 && fams[QJIT_KERNEL_WGMMA_TMA] >= 3,
          "W8A8 auto sweep: %zu points, wgmma_i8 %d, mma_i8 %d, wgmma_tma %d", n,
          fams[QJIT_KERNEL_WGMMA_I8], fams[QJIT_KERNEL_MMA_I8], fams[QJIT_KERNEL_WGMMA_TMA]);
    d.kernel = QJIT_KERNEL_WGMMA_I8;
    CHECK_OK(qjit_gemm_sweep(ctx, &d, QJIT_ARCH_SM90A, "default", pts, 64, &n));
    bool all = n >= 3;
    for (size_t i = 0; i < n && i < 64; i++)
        all &= pts[i].kernel == QJIT_KERNEL_WGMMA_I8;
    CHECK(all, "wgmma_i8 sweep has %zu points, not all wgmma_i8", n);
    /* a handle's variants: auto runs gemv up to M = 16, mma_i8 to 64 and wgmma_i8 above; named, wgmma_i8
     * in every bucket, with one consumer warpgroup of 64 rows up to M = 64 (its default(m)
     * answers NAMED) */
    qjit_gemm_variant v[QJIT_M_BUCKETS];
    size_t nv = 0;
    d.kernel = QJIT_KERNEL_AUTO;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, v, QJIT_M_BUCKETS, &nv));
    for (size_t i = 0; i < nv && i < QJIT_M_BUCKETS; i++)
        CHECK(v[i].m_max <= 16 ? strstr(v[i].text, "kernel=gemv ") != NULL
                               : v[i].desc.kernel == (v[i].m_max <= 64 ? QJIT_KERNEL_MMA_I8
                                                                       : QJIT_KERNEL_WGMMA_I8),
              "auto W8A8 variant %s for M %lld..%lld", v[i].text, (long long)v[i].m_min,
              (long long)v[i].m_max);
    d.kernel = QJIT_KERNEL_WGMMA_I8;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, v, QJIT_M_BUCKETS, &nv));
    CHECK(nv >= 1, "no wgmma_i8 variants");
    for (size_t i = 0; i < nv && i < QJIT_M_BUCKETS; i++) {
        CHECK(v[i].desc.kernel == QJIT_KERNEL_WGMMA_I8, "named wgmma_i8 variant %s", v[i].text);
        CHECK((v[i].m_max <= 64) == (v[i].desc.bm == 64), "named wgmma_i8 variant for M %lld..%lld: %s",
              (long long)v[i].m_min, (long long)v[i].m_max, v[i].text);
    }
    CHECK(nv == 3, "named wgmma_i8: %zu variants, expected 3 (M <= 64, 65-256, > 256)", nv);
    qjit_context_destroy(ctx);
}

/* The Hopper families refuse what they cannot run with the reason, before any compile:
 * the arch, the operand packing's tile rules, the registers a tile's accumulators need. */
static void test_hopper_refusals(void)
{
    qjit_options o;
    qjit_options_init(&o);
    o.memory_only = 1;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=wgmma_i8 arch=sm_89", "sm_90a"},
        {"gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=wgmma_i8 tile=128x48x128 warps=2x1 stages=4",
         "multiple of 32"},
        {"gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=wgmma_i8 tile=256x128x128 "
         "warps=2x1 stages=3", "accumulator registers"},
        {"gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=wgmma_i8 tile=128x128x64 warps=2x1 stages=4",
         "BK must be 128"},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wq tile=128x96x64 warps=2x1 "
         "stages=4", "multiple of 64"},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wq tile=128x128x128 "
         "warps=2x1 stages=4", "BK must be 64"},
        {"gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 kernel=wgmma_mx tile=128x48x128 warps=2x1 "
         "stages=4", "multiple"},
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=wgmma_mx", "does not serve"},
        {"gemm a=bf16 b=bf16 out=bf16 kernel=mma tile=64x128x32 warps=2x2 stages=4 split=8 "
         "arch=sm_80", "sm_90a"},
        {"gemm a=bf16 b=bf16 out=bf16 kernel=mma tile=64x128x32 warps=2x2 stages=4 split=16",
         "at most 8"},
        /* wgmma_tma: fp8 keeps two parts and a total; the pairs it serves; sm_90a */
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=wgmma_tma tile=128x128x128 warps=1x1 "
         "stages=4", "two parts and a total"},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_tma", "does not serve"},
        {"gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=wgmma_tma", "does not serve"},
        {"gemm a=bf16 b=bf16 out=bf16 kernel=wgmma_tma arch=sm_89", "sm_90a"},
        /* the K split of mma_i8 and mma_f8 is sm_90a's, up to 8 */
        {"gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 "
         "split=8 arch=sm_89", "sm_90a"},
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x4 "
         "stages=4 split=16", "at most 8"},
        /* gemv's K split across a cluster: sm_90a, up to 8 */
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x64x128 warps=4x2 "
         "stages=2 split=8 arch=sm_89", "needs sm_90a"},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x64x128 warps=4x2 "
         "stages=2 split=16", "at most 8"},
        /* wgmma_wqr: W4A8 groups of a multiple of 128 (one K tile), 128 of K a tile, a part and a
         * total of 256 tokens do not fit, no K split; W8A16 64 of K a tile */
        {"gemm a=s8 b=s4 sa=row sb=group:64 gs=f32 out=bf16 kernel=wgmma_wqr", "does not serve"},
        {"gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=4",
         "BK must be 128"},
        {"gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=wgmma_wqr tile=256x128x128 "
         "warps=1x2 stages=3", "accumulator"},
        {"gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=wgmma_wqr tile=128x128x128 warps=1x2 stages=4 "
         "split=2", "no K split"},
        {"gemm a=bf16 b=s8 sb=col out=bf16 kernel=wgmma_wqr tile=128x128x128 warps=1x2 stages=4",
         "BK must be 64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_gemm_desc d = parse(cases[i].text);
        char why[512] = "";
        qjit_status st = qjit_gemm_supports(ctx, &d, d.arch ? d.arch : QJIT_ARCH_SM90A, why,
                                            sizeof why);
        CHECK(st == QJIT_ERROR_UNSUPPORTED && strstr(why, cases[i].needle), "%s: %s '%s'",
              cases[i].text, qjit_status_string(st), why);
    }
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.compiles == 0, "a refusal compiled %llu kernels", (unsigned long long)s.compiles);
    qjit_context_destroy(ctx);
}

/* plan.tma: wgmma_wqr takes A's tensor map alone (2), its K-split tiles too (the kernel starts
 * a rank's coordinates at its part of K); wgmma_tma both maps (1).  Both copy A's tiles that
 * pass M in boxes of tma_rows rows (the tile up to 64, else 64, 32 or 16, whichever divides it).  Template copies whose plan states both maps (tma 1)
 * beside a K split, or boxes that do not tile BM, are refused, their fields named. */
static qjit_status plan_of_copy(const char *text, size_t n, const char *needle, const char *with,
                                const char *desc, qjit_plan *pl, char *why, size_t cap)
{
    static char copy[1 << 20];
    const char *at = strstr(text, needle);
    CHECK(at != NULL && n < sizeof copy, "gemm_wgmma_wqr.cu no longer states '%s'", needle);
    if (!at || n >= sizeof copy)
        return QJIT_ERROR_TEMPLATE;
    CHECK(strlen(with) == strlen(needle), "'%s' and '%s' differ in length", needle, with);
    memcpy(copy, text, n);
    memcpy(copy + (at - text), with, strlen(with)); /* same length: the rest stays */
    const char *dir = tl_tmpdir("plan_tma");
    char path[4096];
    snprintf(path, sizeof path, "%s/gemm_wgmma_wqr.cu", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(copy, 1, n, f) == n, "write %s", path);
    if (f)
        fclose(f);
    qjit_families *fs;
    CHECK_OK(qjit_family_open(dir, &fs));
    qjit_gemm_desc d = parse(desc);
    const qjit_status st = qjit_family_plan(fs, &d, pl, why, cap);
    qjit_family_close(fs);
    return st;
}

static void test_plan_tma(void)
{
    static const struct {
        const char *text;
        int tma, cluster_k, rows;
    } cases[] = {
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a kernel=wgmma_wqr tile=256x128x64 "
         "warps=1x2 stages=4 split=1", 2, 1, 64},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a kernel=wgmma_wqr tile=128x128x64 "
         "warps=1x2 stages=6 split=2", 2, 2, 64},
        {"gemm a=bf16 b=s8 sb=col out=bf16 arch=sm_90a kernel=wgmma_wqr tile=256x64x64 warps=1x1 "
         "stages=5 split=4", 2, 4, 64},
        {"gemm a=s8 b=s4 sa=row sb=col out=bf16 arch=sm_90a kernel=wgmma_wqr tile=128x128x128 "
         "warps=1x2 stages=6 split=1", 2, 1, 64},
        {"gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 arch=sm_90a kernel=wgmma_wqr "
         "tile=128x128x128 warps=1x2 stages=6 split=1", 2, 1, 64},
        {"gemm a=bf16 b=s8 sb=col out=bf16 arch=sm_90a kernel=wgmma_wqr tile=256x128x64 warps=1x2 "
         "stages=4 split=1", 2, 1, 64},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a kernel=wgmma_wqr tile=96x128x64 "
         "warps=1x2 stages=6 split=1", 2, 1, 32},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a kernel=wgmma_wqr tile=80x128x64 "
         "warps=1x2 stages=6 split=1", 2, 1, 16},
        {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 arch=sm_90a kernel=wgmma_wqr tile=48x128x64 "
         "warps=1x2 stages=6 split=1", 2, 1, 48},
        {"gemm a=bf16 b=bf16 out=bf16 arch=sm_90a kernel=wgmma_tma tile=128x128x64 warps=2x1 stages=4 "
         "split=1", 1, 1, 64},
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 arch=sm_90a kernel=wgmma_tma tile=128x128x128 "
         "warps=2x1 stages=5 split=1", 1, 1, 64},
    };
    qjit_families *fs;
    CHECK_OK(qjit_family_open(NULL, &fs));
    char why[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_gemm_desc d = parse(cases[i].text);
        qjit_plan pl = {0};
        CHECK_OK(qjit_family_plan(fs, &d, &pl, why, sizeof why));
        CHECK(pl.tma == cases[i].tma && pl.cluster_k == cases[i].cluster_k && pl.tma_rows == cases[i].rows,
              "%s: tma %d cluster_k %d tma_rows %d", cases[i].text, pl.tma, pl.cluster_k, pl.tma_rows);
    }
    qjit_family_close(fs);
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/gemm_wgmma_wqr.cu", QJIT_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "open %s", path);
    if (!f)
        return;
    static char text[1 << 20];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    qjit_plan pl;
    /* both maps beside a K split: refused */
    qjit_status st = plan_of_copy(text, n, "tma = TMA_A and 2 or 0", "tma = 1               ",
                                  cases[1].text, &pl, why, sizeof why);
    CHECK(st == QJIT_ERROR_TEMPLATE && strstr(why, "tma=1") && strstr(why, "cluster_k=2"),
          "a plan of two tensor maps beside a K split: %s '%s'", qjit_status_string(st), why);
    /* boxes of 48 rows, which do not tile a 128-row tile: refused */
    st = plan_of_copy(text, n, "tma_rows = TMA_A and hopper_tma_rows(BM) or 0", "tma_rows = 48                                ", cases[1].text,
                      &pl, why, sizeof why);
    CHECK(st == QJIT_ERROR_TEMPLATE && strstr(why, "tma_rows=48"), "boxes of 48 rows in a 128-row tile: %s '%s'",
          qjit_status_string(st), why);
    /* and of 64 rows stated outright: accepted as the library's own */
    st = plan_of_copy(text, n, "tma_rows = TMA_A and hopper_tma_rows(BM) or 0", "tma_rows = 64                                ", cases[1].text,
                      &pl, why, sizeof why);
    CHECK(st == QJIT_OK && pl.tma == 2 && pl.tma_rows == 64, "boxes of 64 rows: %s '%s' (tma_rows %d)",
          qjit_status_string(st), why, pl.tma_rows);
}

/* QJIT_PDL, read when a context is made: unset, empty or 2, every launch starts early, the
 * GEMMs reading nothing before their wait; 0, nothing does; any other value, every launch,
 * `gemv` reading its first weights before its wait (qjit_gemm_launch's flags, gemm.c). */
static void test_pdl_settings(void)
{
    static const struct {
        const char *value;
        bool pdl, weights, quant;
    } cases[] = {{NULL, true, false, true}, {"", true, false, true}, {"0", false, false, false},
                 {"1", true, true, true},    {"2", true, false, true}, {"yes", true, true, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value)
            setenv("QJIT_PDL", cases[i].value, 1);
        else
            unsetenv("QJIT_PDL");
        qjit_options o;
        qjit_options_init(&o);
        o.memory_only = 1;
        qjit_context *ctx;
        CHECK_OK(qjit_context_create(&o, &ctx));
        CHECK(ctx->pdl == cases[i].pdl && ctx->pdl_weights == cases[i].weights &&
                  ctx->pdl_quant == cases[i].quant,
              "QJIT_PDL=%s: GEMMs early %d, weights before the wait %d, quantizers early %d",
              cases[i].value ? cases[i].value : "(unset)", ctx->pdl, ctx->pdl_weights,
              ctx->pdl_quant);
        qjit_context_destroy(ctx);
    }
    unsetenv("QJIT_PDL");
}

int main(void)
{
    test_pdl_settings();
    test_buckets();
    test_plan_tma();
    test_sweep_families();
    test_hopper_refusals();
    qjit_options o;
    qjit_options_init(&o);
    o.memory_only = 1;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    test_heuristics(ctx);
    qjit_context_destroy(ctx);
    const char *dir = tl_tmpdir("dispatch");
    test_record_and_pick(dir);
    test_damaged_rows(dir);
    test_ship(dir);
    test_merge_newer();
    test_migration();
    test_expansions();
    return tl_finish("test_dispatch");
}
