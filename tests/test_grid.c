/*
 * test_grid.c — the launch geometry (qjit_launch_grid, gemm.c) on the CPU: the grid and
 * cluster shape of plain, persistent, K-split and B-sharing (cluster_m) kernels over sizes
 * that include one tile row, odd tile rows, more work than SMs and a GPC-limited count of
 * clusters.  Every launch must cover every output tile with whole clusters; the values are
 * worked out by hand from the rules in gemm.c.
 */
#include "qjit_internal.h"
#include "testlib.h"

#include <stdint.h>

typedef struct geom {
    unsigned grid[3], cluster[3];
} geom;

static geom run(const qjit_grid_facts *f, int64_t m, int64_t n, int64_t k)
{
    geom g;
    qjit_launch_grid(f, m, n, k, g.grid, g.cluster);
    return g;
}

#define EXPECT(g, gx, gy, gz, cx, cy, cz, what)                                          \
    CHECK((g).grid[0] == (gx) && (g).grid[1] == (gy) && (g).grid[2] == (gz) &&          \
              (g).cluster[0] == (cx) && (g).cluster[1] == (cy) && (g).cluster[2] == (cz), \
          "%s: grid %ux%ux%u cluster %ux%ux%u, expected %ux%ux%u cluster %ux%ux%u", what,  \
          (g).grid[0], (g).grid[1], (g).grid[2], (g).cluster[0], (g).cluster[1],            \
          (g).cluster[2], (unsigned)(gx), (unsigned)(gy), (unsigned)(gz), (unsigned)(cx),   \
          (unsigned)(cy), (unsigned)(cz))

/* Whole clusters, and every tile reached: a persistent grid walks units of cluster[0] tile
 * rows by one tile column with a stride of its clusters; a plain one has a CTA a tile. */
static void covers(const qjit_grid_facts *f, geom g, int64_t m, int64_t n, const char *what)
{
    for (int i = 0; i < 3; i++)
        CHECK(g.grid[i] >= 1 && g.grid[i] % g.cluster[i] == 0,
              "%s: grid dimension %d = %u is not whole clusters of %u", what, i, g.grid[i],
              g.cluster[i]);
    const uint64_t tn = (uint64_t)((n + f->bn - 1) / f->bn), tm = (uint64_t)((m + f->bm - 1) / f->bm);
    if (f->cluster_m > 1) {
        const uint64_t units = tn * ((tm + g.cluster[0] - 1) / g.cluster[0]);
        CHECK(g.grid[0] / g.cluster[0] <= units, "%s: %u clusters for %llu units", what,
              g.grid[0] / g.cluster[0], (unsigned long long)units);
        CHECK(g.cluster[0] == 1 || tm >= 2, "%s: clusters of %u for one tile row", what,
              g.cluster[0]);
    } else if (f->persistent_ctas) {
        CHECK((uint64_t)g.grid[0] * g.grid[1] <= tn * tm, "%s: more CTAs than tiles", what);
    } else {
        CHECK(g.grid[0] == tn && g.grid[1] == tm, "%s: grid %ux%u for %llux%llu tiles", what,
              g.grid[0], g.grid[1], (unsigned long long)tn, (unsigned long long)tm);
    }
}

int main(void)
{
    /* a plain tile kernel (mma): one CTA a tile, split along z as the descriptor says */
    qjit_grid_facts plain = {128, 256, 1, 0, 1, 0, 1, 0, 0};
    geom g = run(&plain, 1000, 520, 4096);
    EXPECT(g, 3, 8, 1, 1, 1, 1, "plain 1000x520");
    covers(&plain, g, 1000, 520, "plain 1000x520");

    /* persistent (wgmma, wgmma_f8): at most one CTA a SM walks the tiles */
    qjit_grid_facts pers = {128, 256, 1, 132, 1, 0, 1, 0, 132};
    g = run(&pers, 8192, 8192, 8192);
    EXPECT(g, 132, 1, 1, 1, 1, 1, "persistent 8192^3");
    g = run(&pers, 256, 1024, 512);
    EXPECT(g, 4, 2, 1, 1, 1, 1, "persistent, fewer tiles than SMs");
    covers(&pers, g, 256, 1024, "persistent, fewer tiles than SMs");

    /* K split across a cluster (mma_wq, and mma/mma_i8/mma_f8 named split=8): only when the
     * tiles leave SMs idle, about two CTAs a SM, at most cluster_k and one chunk each */
    qjit_grid_facts split = {16, 128, 1, 0, 8, 128, 1, 0, 132};
    g = run(&split, 1, 520, 2048);
    EXPECT(g, 5, 1, 8, 1, 1, 8, "split 1x520x2048 (5 tiles)");
    g = run(&split, 1, 8192, 8192);
    EXPECT(g, 64, 1, 4, 1, 1, 4, "split 1x8192x8192 (64 tiles: 264/64 = 4)");
    g = run(&split, 1, 520, 256);
    EXPECT(g, 5, 1, 2, 1, 1, 2, "split, K of two chunks");
    g = run(&split, 1, 28672, 8192);
    EXPECT(g, 224, 1, 1, 1, 1, 1, "no split: 224 tiles > 132 SMs");
    covers(&split, g, 1, 28672, "no split");
    /* the same kernel where four CTAs fit a SM (QJIT_SPLIT_OCC: per_sm from the occupancy):
     * 224 tiles split by 528/224 = 2; 448 tiles are more than half of 528, no split */
    qjit_grid_facts split4 = {16, 128, 1, 0, 8, 128, 1, 0, 132, 4};
    g = run(&split4, 16, 28672, 4096);
    EXPECT(g, 224, 1, 2, 1, 1, 2, "per_sm 4: 16x28672x4096 (224 tiles: 528/224 = 2)");
    g = run(&split4, 16, 4096, 4096);
    EXPECT(g, 32, 1, 8, 1, 1, 8, "per_sm 4: 16x4096x4096 (32 tiles: at most 8)");
    g = run(&split4, 16, 57344, 8192);
    EXPECT(g, 448, 1, 1, 1, 1, 1, "per_sm 4: 448 tiles, no split");

    /* K split across a cluster in a persistent kernel (wgmma named split=8), which fills an SM
     * alone: about one CTA a SM, and then one tile a CTA (its ring holds the rank's tile) */
    qjit_grid_facts psplit = {128, 256, 1, 132, 8, 64, 1, 0, 132};
    g = run(&psplit, 256, 4096, 4096);
    EXPECT(g, 16, 2, 4, 1, 1, 4, "persistent split 256x4096x4096 (32 tiles: 132/32 = 4)");
    g = run(&psplit, 128, 4096, 4096);
    EXPECT(g, 16, 1, 8, 1, 1, 8, "persistent split 128x4096x4096 (16 tiles: 8)");
    g = run(&psplit, 128, 520, 128);
    EXPECT(g, 3, 1, 2, 1, 1, 2, "persistent split, K of two chunks");
    g = run(&psplit, 1024, 4096, 4096);
    EXPECT(g, 16, 8, 1, 1, 1, 1, "persistent split: 128 tiles, 132/128 = 1, no split");
    g = run(&psplit, 8192, 8192, 8192);
    EXPECT(g, 132, 1, 1, 1, 1, 1, "persistent split 8192^3: more tiles than SMs, no split");
    for (int64_t m = 1; m <= 4096; m = m * 3 + 1) { /* a split never walks more than one tile */
        g = run(&psplit, m, 4096, 4096);
        const uint64_t tiles = (uint64_t)((m + 127) / 128) * 16;
        CHECK(g.grid[2] == 1 || (uint64_t)g.grid[0] * g.grid[1] == tiles,
              "persistent split m=%lld: grid %ux%ux%u for %llu tiles", (long long)m, g.grid[0],
              g.grid[1], g.grid[2], (unsigned long long)tiles);
        covers(&psplit, g, m, 4096, "persistent split");
    }

    /* B shared across clusters of two along M (wgmma_tma): one tile row runs alone */
    qjit_grid_facts tma = {128, 128, 1, 132, 1, 0, 2, 66, 132};
    g = run(&tma, 1, 520, 1072);
    EXPECT(g, 5, 1, 1, 1, 1, 1, "tma, one tile row");
    covers(&tma, g, 1, 520, "tma, one tile row");
    g = run(&tma, 128, 8192, 1072);
    EXPECT(g, 64, 1, 1, 1, 1, 1, "tma, one tile row, 64 columns");
    /* three tile rows: units of two rows (the second unit half past M), five columns */
    g = run(&tma, 333, 520, 1072);
    EXPECT(g, 20, 1, 1, 2, 1, 1, "tma, 333 rows");
    covers(&tma, g, 333, 520, "tma, 333 rows");
    /* more units than fit: as many clusters as the driver says fit at once */
    g = run(&tma, 8192, 8192, 8192);
    EXPECT(g, 132, 1, 1, 2, 1, 1, "tma 8192^3, 66 clusters fit");
    covers(&tma, g, 8192, 8192, "tma 8192^3");
    tma.max_clusters = 62; /* a GPC with an odd count of free SMs */
    g = run(&tma, 4097, 28672, 8192);
    EXPECT(g, 124, 1, 1, 2, 1, 1, "tma 4097x28672, 62 clusters fit");
    covers(&tma, g, 4097, 28672, "tma 4097x28672");
    /* fewer units than fit clusters: one cluster a unit */
    g = run(&tma, 256, 256, 4096);
    EXPECT(g, 4, 1, 1, 2, 1, 1, "tma 256x256 (2 units)");
    /* one tile row but more columns than SMs: persistent CTAs without clusters */
    g = run(&tma, 64, 28672, 8192);
    EXPECT(g, 132, 1, 1, 1, 1, 1, "tma, one row of 224 tiles");
    covers(&tma, g, 64, 28672, "tma, one row of 224 tiles");
    return tl_finish("test_grid");
}
