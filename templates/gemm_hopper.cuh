// gemm_hopper.cuh — the sm_90a machinery that gemm_wgmma.cu and the quantized Hopper body
// (gemm_wgmma_q.cuh) share: mbarriers, the async-proxy fence, wgmma group control,
// shared-memory matrix descriptors, bulk stores, the persistent tile walk, the producers
// (cp.async, packed operands expanded in the producer, TMA with cluster multicast) and the
// sending of one staged output pass.  Include after gemm_common.cuh: `% include("gemm_hopper.cuh")`.
//
// The ring: STAGES stages, each A rows [0, BM) then B rows [0, BN) of one K tile, 128 bytes
// a row (64 halves or 128 fp8 values) in the 128-byte swizzle layout.  full[s] (8 bytes at
// full0 + 8s) completes when the stage's data has landed; empty[s] (at empty0 + 8s) when
// every consumer warp is done with it.

% -- wgmma_k64(N, TYPES, REG_A, INT): writes wgmma_ktile(d, a, b), which adds one K tile (one
% -- 128-byte row of K: 64 16-bit values, or with INT 128 8-bit ones) to d (64×N, this
% -- thread's N/2: f32, or with INT s32) as four k16 (INT: k32) wgmma in one asm statement
% -- (an asm with 128 operands costs NVVM as much as four): A from shared memory through
% -- descriptor a (REG_A false; step ks at a + 2ks, 32 bytes into the swizzled rows) or from
% -- registers a[ks][0..3] (REG_A true: each step's m16n8k16-shaped A fragment; with INT
% -- m16n8k32's, the same bytes), B through descriptor b (b + 2ks); TYPES the wgmma's A and B
% -- type suffix ("bf16.bf16", "s8.s8").  With INT (register A only) wgmma_ktile takes a
% -- fourth argument: fresh, where the K tile's first wgmma starts d from zero.  Called in a
% -- template's namespace, where u32 and u64 are named.
% function wgmma_k64(N, TYPES, REG_A, INT)
%   local H = N // 2                 -- accumulator operands %0 .. %(H - 1)
%   local P = H + (REG_A and 20 or 8) -- the operand that sets scale-d
%   local ACC = INT and "int" or "float"
%   local SIG = INT and "const u32 (&a)[4][4], u64 b, int fresh" or (REG_A and "const u32 (&a)[4][4]" or "u64 a") .. ", u64 b"
__device__ __forceinline__ void wgmma_ktile($(ACC) (&d)[$(H)], $(SIG))
{
%   if INT then
    asm volatile("{\n.reg .pred p, q;\nsetp.eq.b32 p, %$(P), 0;\nsetp.ne.b32 q, %$(P + 1), 0;\n"
%   else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %$(P), 0;\n"
%   end
%   for ks = 0, 3 do
                 "wgmma.mma_async.sync.aligned.m64n$(N)$(INT and "k32.s32." or "k16.f32.")$(TYPES) {"
%     for i = 0, H - 1 do
                 "%$(i)$(i + 1 < H and "," or "")"
%     end
%     if INT then
                 "}, {%$(H + 4 * ks), %$(H + 4 * ks + 1), %$(H + 4 * ks + 2), %$(H + 4 * ks + 3)}, %$(H + 16 + ks), $(ks == 0 and "p" or "q");\n"
%     elseif REG_A then
                 "}, {%$(H + 4 * ks), %$(H + 4 * ks + 1), %$(H + 4 * ks + 2), %$(H + 4 * ks + 3)}, %$(H + 16 + ks), p, 1, 1, 0;\n"
%     else
                 "}, %$(H + 2 * ks), %$(H + 2 * ks + 1), p, 1, 1, 0, 0;\n"
%     end
%   end
                 "}\n"
                 :
%   for i = 0, H - 1 do
                 "$(INT and "+r" or "+f")"(d[$(i)])$(i + 1 < H and "," or "")
%   end
%   if REG_A then
                 : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]),
                   "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]),
%     if INT then
                   "l"(b), "l"(b + 2), "l"(b + 4), "l"(b + 6), "r"(fresh), "r"(1)); // scale-d: d += a·b; a fresh K tile's first: d = a·b
%     else
                   "l"(b), "l"(b + 2), "l"(b + 4), "l"(b + 6), "r"(1)); // scale-d true: d += a·b
%     end
%   else
                 : "l"(a), "l"(b), "l"(a + 2), "l"(b + 2), "l"(a + 4), "l"(b + 4), "l"(a + 6), "l"(b + 6),
                   "r"(1)); // scale-d true: d += a·b
%   end
}
% end

namespace qh {

using qc::u32;
using qc::u64;
using qc::out_t;

constexpr int ROW_BYTES = 128; // one swizzle row
constexpr int LD_ROWS = 16;    // tile rows one pass of 128 producer threads covers
constexpr int GROUP_M = 8;     // tile rows per rasterization band

// One arrival on `bar` once every cp.async this thread issued so far has landed; noinc: the
// arrival is one of the barrier's expected count, not an extra one.
__device__ __forceinline__ void cp_async_arrive(u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
// p + bytes, opaque to the compiler so that it adds as it goes instead of keeping one
// precomputed address per row in the producer's few registers.
__device__ __forceinline__ const char *advance(const char *p, long long bytes)
{
    const char *r;
    asm("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(p), "l"(bytes));
    return r;
}

__device__ __forceinline__ void mbar_init(u32 bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// Returns once the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" :: "r"(bar), "r"(parity) : "memory");
}

// cp.async writes through the generic proxy; wgmma and the bulk copies read through the
// async proxy.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Shared-memory matrix descriptor for a K-major tile in the 128-byte swizzle layout: rows of
// 128 bytes, chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms 1024 bytes apart
// (stride byte offset). The leading byte offset is unused by this layout. The tile base is
// 1024-byte aligned; a step of 32 bytes into the row adds 2 to the descriptor.
__device__ __forceinline__ u64 smem_desc(u32 addr)
{
    return (1ull << 62) | ((u64)(1024 >> 4) << 32) | (1ull << 16) | ((addr & 0x3FFFF) >> 4);
}

// Barrier among the 128 threads of one warpgroup (ids 1.. ; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int id)
{
    asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory");
}
// Bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) from shared to global memory.
__device__ __forceinline__ void bulk_store(void *dst, u32 src, u32 bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 :: "l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until this thread's bulk stores have read their source (WRITTEN=false) or are done.
template <bool WRITTEN> __device__ __forceinline__ void bulk_wait()
{
    if (WRITTEN)
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// The ring at the first 1024-byte boundary of dynamic shared memory, its 2*STAGES mbarriers
// right after it: full[s] expects the 128 producer threads (twice each when the producer
// also writes side data, FULL_ARRIVALS 256: see produce), empty[s] the 4*NC consumer warps.
// Every thread of the block calls it (it ends with __syncthreads).  TMA: the barriers are also
// completed by bulk tensor copies (the async proxy), so the initializing thread makes its
// inits visible to that proxy and to the cluster before the barrier, as the PTX memory model
// asks of an mbarrier that a complete_tx reaches.
struct ring_addrs {
    u32 base, full0, empty0;
};
template <int STAGES, int NC, int FULL_ARRIVALS = 128, bool TMA = false>
__device__ __forceinline__ ring_addrs make_ring(const unsigned char *smem, int ring_bytes, int tid, int peers = 1)
{
    ring_addrs r;
    r.base = (qc::smem_addr(smem) + 1023) & ~1023u;
    r.full0 = r.base + ring_bytes;
    r.empty0 = r.full0 + 8 * STAGES;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(r.full0 + 8 * s, FULL_ARRIVALS);
            mbar_init(r.empty0 + 8 * s, 4 * NC * peers);
        }
        if (TMA) {
            fence_proxy_async();
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
    }
    __syncthreads();
    return r;
}

// Tiles are numbered in bands of GROUP_M tile rows, walking down a band before across it, so
// that the CTAs resident at one time share their A rows and B columns in L2. A grid smaller
// than the tile count makes the kernel persistent: each CTA walks the tiles with a stride of
// the grid, and its producer runs ahead into the next tile while the consumers store the last.
// Every tile has k_tiles K tiles of one 128-byte ring row each (ES: element size in bytes).
// In clusters of cl CTAs along x (produce_tma's multicast), a cluster walks units of cl tiles
// down M with the same columns, CTA `rank` taking the rank-th; a unit past M's last tile
// gives its CTA a tile of rows past M (all zeros, nothing stored).
template <int BM, int BN, int ES> struct tile_walk {
    int tiles_n, tiles_m, tiles, first, stride, k_tiles, cl, rank;
    __device__ __forceinline__ tile_walk(const qjit_params &p, int cl_ = 1, int rank_ = 0)
        : tiles_n(((int)p.n + BN - 1) / BN), tiles_m((((int)p.m + BM - 1) / BM + cl_ - 1) / cl_),
          tiles(tiles_n * tiles_m), first((int)(blockIdx.y * gridDim.x + blockIdx.x) / cl_),
          stride((int)(gridDim.x * gridDim.y) / cl_), k_tiles((int)((p.k * ES + ROW_BYTES - 1) / ROW_BYTES)),
          cl(cl_), rank(rank_)
    {
    }
    // After tile t's main loop: the CTA's last tile has used all of its loads, so the next
    // kernel may be scheduled (QJIT_PDL=1: its launch and first weights then overlap the
    // epilogues and this grid's drain, not its main loops).
    __device__ __forceinline__ void main_loops_done(int t) const
    {
        if (t + stride >= tiles)
            qc::pdl_launch();
    }
    __device__ __forceinline__ void origin(int t, int &m0, int &n0) const
    {
        const int band = t / (GROUP_M * tiles_n), in_band = t % (GROUP_M * tiles_n);
        const int band_rows = tiles_m - band * GROUP_M < GROUP_M ? tiles_m - band * GROUP_M : GROUP_M;
        m0 = ((band * GROUP_M + in_band % band_rows) * cl + rank) * BM;
        n0 = (in_band / band_rows) * BN;
    }
};

// Issues one operand's copies of one K tile: ROWS rows, PASS_ROWS of them a pass of the 128
// producer threads, one 16-byte chunk a thread, into rows PITCH bytes apart from dst (the
// thread's first destination).  src: the thread's first row and chunk at this K tile; pass:
// bytes between its rows; rows: the operand's rows left from the thread's first; ok: its
// chunk is inside K.
template <int ROWS, int PASS_ROWS, int PITCH>
__device__ __forceinline__ void issue_rows(u32 dst, const char *src, long long pass, int rows, bool ok)
{
#pragma unroll
    for (int i = 0; i < ROWS / PASS_ROWS; ++i) {
        qc::cp_async16(dst + i * PASS_ROWS * PITCH, src, ok && i * PASS_ROWS < rows ? 16 : 0);
        src = advance(src, pass);
    }
}

// What a producer writes beside each stage's tiles: nothing (the plain GEMMs).  A family
// with per-stage side data (scales that travel with their K tile) passes a type with
// ARRIVES = true and either now(stage, m0, n0, kt, tid), which loads a K tile's side data and
// stores it beside the stage in one pass, or, with RAW (and where raw_ok), issue(stage, m0,
// n0, kt, tid), which copies it as stored with cp.async beside the stage, and decode(stage,
// tid), which converts what that thread copied once it has landed (produce only: some passes
// later, the stage getting its arrival then), or, with PREFETCH (produce_packed only),
// prepare(m0, n0, kt, tid), which loads it into registers with the conversion's own prepare,
// an expansion ahead, and operator()(stage, tid), which stores what was last prepared; so
// the loads' latency is not the producer's.  The stores are ordered before the
// consumers' reads by one more arrival per thread on full[s] (make_ring<..., 256>).
// A side with FILLS_A (produce only, RAW) also makes A's tile itself: issue copies this
// thread's part of A's K tile as stored beside the stage and decode, its LAG passes later,
// writes it into the tile, so produce copies no A.
struct no_side {
    static constexpr bool ARRIVES = false, PREFETCH = false, RAW = false, FILLS_A = false;
    __device__ __forceinline__ void now(int, int, int, int, int) const {}
};

// The producer warpgroup (threads 0..127): thread t copies 16-byte chunk t%8 of rows
// t/8 + 16*i of every K tile of every tile of the walk into the ring; 16 rows keep the row's
// swizzle phase, so the destination offset is fixed and steps by 16 rows. Rows past M or N
// and chunks past K copy 0 source bytes (zeros; their addresses are never read). K·ES,
// lda·ES and ldb·ES are multiples of 16.
// PB_ROW (packed B, 0: none): B is stored in 4 bits a value (two a byte along K), or in 8 bits
// beside 16-bit A, and copied as stored, PB_ROW = 32 bytes a row a K tile (64 values of 4
// bits beside 16-bit A), or 64 (128 of 4 bits beside 8-bit A, 64 of 8 bits beside 16-bit A),
// into rows of the stage after A's tiles: thread t copies 16-byte chunk t%C of rows
// t/C + (128/C)*i (C = PB_ROW/16 chunks a row), the chunks placed by pb_chunk, so that eight
// rows' same chunk read by eight lanes fall on different banks: with 32-byte rows the two
// halves swapped in rows whose bit 2 is set, with 64-byte rows chunk c at c ^ (row/2 % 4).
// ldb then counts B's values, and K and ldb are multiples of 32.
// With TMA_A, A's tile comes as bulk tensor copies (ta, tr: A's tensor maps, gemm.c;
// tma_rows_load), issued by thread 0, whose bytes the stage's full barrier also waits for; B
// by cp.async.  Under a K split, the maps stay the whole of A and ta_k0 is the rank's first
// value of K.
__device__ __forceinline__ int pb_half(int row, int half) { return half ^ ((row >> 2) & 1); }
struct tmap;
__device__ __forceinline__ void mbar_add_tx(u32 bar, u32 bytes);
template <int BM, int R> __device__ __forceinline__ u32 tma_rows_bytes(int m0, int M);
template <int BM, int R> __device__ __forceinline__ void tma_rows_load(u32 dst, const tmap &ta, const tmap &tr, int x, int m0, int M, u32 bar);
template <int PB_ROW> __device__ __forceinline__ int pb_chunk(int row, int c)
{
    return PB_ROW == 32 ? pb_half(row, c) : c ^ ((row >> 1) & 3);
}
// The passes a RAW side's decode follows its copies by in produce: a side that fills A's tile
// says (its LAG), the others 2 where 4 stages or more allow, else 1.
template <class Side, int STAGES> __device__ constexpr int side_lag()
{
    if constexpr (Side::FILLS_A)
        return Side::LAG;
    else
        return STAGES >= 4 ? 2 : 1;
}
template <int BM, int BN, int STAGES, int ES, class Side = no_side, int PB_ROW = 0, bool TMA_A = false, int TR = BM>
__device__ __forceinline__ void produce(const qjit_params &p, const tile_walk<BM, BN, ES> &w, u32 ring,
                                        u32 full0, u32 empty0, int tid, Side side = Side(),
                                        const tmap *ta = nullptr, const tmap *tr = nullptr, int ta_k0 = 0)
{
    constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = BM * ROW_BYTES + BN * (PB_ROW ? PB_ROW : ROW_BYTES);
    const int M = (int)p.m, N = (int)p.n;
    const long long K_BYTES = p.k * ES;
    const int ld_row = tid >> 3, ld_chunk = tid & 7;
    const u32 ld_off = ld_row * ROW_BYTES + ((ld_chunk ^ (ld_row & 7)) << 4);
    const long long a_pass = LD_ROWS * p.lda * ES, b_pass = LD_ROWS * p.ldb * ES;
    static_assert(PB_ROW == 0 || PB_ROW == 32 || PB_ROW == 64, "produce: a packed B row is 32 or 64 bytes a K tile");
    constexpr int PB_LOG = PB_ROW == 64 ? 2 : 1, PB_CH = 1 << PB_LOG; // packed B: 16-byte chunks a row
    const int pb_row = tid >> PB_LOG, pb_ch = tid & (PB_CH - 1);      // 128/PB_CH rows a pass
    constexpr bool PB_BYTE = PB_ROW * ES == ROW_BYTES; // B's values are bytes (else nibbles)
    const u32 pb_off = A_BYTES + pb_row * PB_ROW + (pb_chunk<PB_ROW>(pb_row, pb_ch) << 4);
    // (a PREFETCH side is produce_packed's: no family gives one to this producer)
    static_assert(!Side::PREFETCH, "produce: side data with PREFETCH goes with produce_packed");
    int s = 0, n = 0; // stage, K tiles issued
    u32 phase = 0;
    // passes between a RAW side's copy and decode; where the side fills A's tile, its own LAG
    // (its consumers, wgmma_wqr's, free a stage once the one two K tiles on is full, so
    // STAGES − RAW_LAG ≥ 3)
    constexpr int RAW_LAG = side_lag<Side, STAGES>();
    static_assert(!Side::FILLS_A || (RAW_LAG >= 1 && STAGES - RAW_LAG >= 3),
                  "produce: a side that fills A's tile lags 1 or more passes and leaves 3 stages");
    for (int t = w.first; t < w.tiles; t += w.stride) {
        int m0, n0;
        w.origin(t, m0, n0);
        const char *a_src = static_cast<const char *>(p.a) + (long long)(m0 + ld_row) * p.lda * ES + ld_chunk * 16;
        const int a_rows = M - m0 - ld_row; // pass i is in while 16*i < rows
        const char *b_src;
        int b_rows;
        if constexpr (PB_ROW) {
            b_src = static_cast<const char *>(p.b) + (long long)(n0 + pb_row) * (PB_BYTE ? p.ldb : p.ldb / 2) + pb_ch * 16;
            b_rows = N - n0 - pb_row;
        } else {
            b_src = static_cast<const char *>(p.b) + (long long)(n0 + ld_row) * p.ldb * ES + ld_chunk * 16;
            b_rows = N - n0 - ld_row;
        }
        for (int kt = 0; kt < w.k_tiles; ++kt, ++n) {
            if (n >= STAGES)
                mbar_wait(empty0 + 8 * s, phase ^ 1);
            const u32 st = ring + s * STAGE_BYTES + ld_off;
            const int k = kt * ROW_BYTES;
            const bool k_ok = k + ld_chunk * 16 < K_BYTES; // a chunk is all in or all out
            if constexpr (Side::FILLS_A) {
                // A's tile comes from the side (issue below, decode RAW_LAG passes later)
            } else if constexpr (TMA_A) {
                if (tid == 0) { // the stage's A bytes, before this thread's arrival below
                    mbar_add_tx(full0 + 8 * s, tma_rows_bytes<BM, TR>(m0, M));
                    tma_rows_load<BM, TR>(ring + s * STAGE_BYTES, *ta, *tr, ta_k0 + kt * (ROW_BYTES / ES), m0, M, full0 + 8 * s);
                }
            } else {
                issue_rows<BM, LD_ROWS, ROW_BYTES>(st, a_src + k, a_pass, a_rows, k_ok);
            }
            if constexpr (PB_ROW) {
                const int kb = kt * PB_ROW; // bytes of packed K
                issue_rows<BN, 128 / PB_CH, PB_ROW>(ring + s * STAGE_BYTES + pb_off, b_src + kb,
                                                    (128 / PB_CH) * (PB_BYTE ? p.ldb : p.ldb / 2), b_rows,
                                                    kb + pb_ch * 16 < (PB_BYTE ? p.k : p.k / 2));
            } else {
                issue_rows<BN, LD_ROWS, ROW_BYTES>(st + A_BYTES, b_src + k, b_pass, b_rows, k_ok);
            }
            cp_async_arrive(full0 + 8 * s);
            if constexpr (Side::ARRIVES && Side::RAW) {
                // copied now, decoded RAW_LAG passes later (this thread's own words): the
                // wait for them is a wait for those passes' tiles too, so the lag is what
                // the producer keeps in flight; it leaves STAGES − RAW_LAG stages to the
                // consumers
                if (side.raw_ok) {
                    side.issue(s, m0, n0, kt, tid);
                    qc::cp_async_commit();
                    if (n >= RAW_LAG) {
                        qc::cp_async_wait<RAW_LAG>(); // K tile n − RAW_LAG's copies have landed
                        const int sd = (int)((unsigned)(n - RAW_LAG) % STAGES);
                        side.decode(sd, tid);
                        mbar_arrive(full0 + 8 * sd);
                    }
                } else {
                    side.now(s, m0, n0, kt, tid);
                    mbar_arrive(full0 + 8 * s);
                }
            } else if constexpr (Side::ARRIVES) { // loaded and stored in this pass
                side.now(s, m0, n0, kt, tid);
                mbar_arrive(full0 + 8 * s);
            }
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
    }
    if constexpr (Side::ARRIVES && Side::RAW) {
        if (side.raw_ok && n > 0) { // the last K tiles copied, oldest first
            const int left = n < RAW_LAG ? n : RAW_LAG;
            qc::cp_async_wait<0>();
#pragma unroll
            for (int i = 0; i < RAW_LAG; ++i)
                if (i >= RAW_LAG - left) {
                    const int sd = (int)((unsigned)(n - RAW_LAG + i) % STAGES);
                    side.decode(sd, tid);
                    mbar_arrive(full0 + 8 * sd);
                }
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- TMA (the wgmma_tma family) ----
// A tensor map as the kernel receives it: the driver's 128-byte CUtensorMap, which the library
// encodes at each launch (gemm.c: the operand's rows of K, 128-byte swizzle, boxes of one
// 128-byte ring row (128/ES values) by BM and by the plan's tma_rows for A and BN/2 rows for
// B, zeros outside the tensor) and passes by value after qjit_params, as a __grid_constant__ parameter whose
// address the copies take.
struct alignas(64) tmap {
    u64 opaque[16];
};

__device__ __forceinline__ u32 cluster_rank()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_size()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
    return r;
}
// One arrival on the barrier at the same offset in cluster CTA `rank`'s shared memory, with
// the default (CTA-scope release) semantics, as CUTLASS's cluster pipelines arrive: the
// .cluster-scope release costs a MEMBAR.ALL.GPU a stage.
__device__ __forceinline__ void mbar_arrive_peer(u32 bar, u32 rank)
{
    asm volatile("{\n.reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
                 :: "r"(bar), "r"(rank) : "memory");
}
// One arrival that also expects `bytes` more of async copies in the barrier's current phase.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
// The same expectation without an arrival (the caller arrives with the others).
__device__ __forceinline__ void mbar_add_tx(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_prefetch(const tmap &m)
{
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<u64>(&m)) : "memory");
}
// The box of m at (x = value of K, y = row) into shared `dst`; its bytes complete on `bar`.
__device__ __forceinline__ void tma_load(u32 dst, const tmap &m, int x, int y, u32 bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(&m)), "r"(x), "r"(y), "r"(bar) : "memory");
}
// A's tile of BM rows from m0: one box of BM rows (ta) where the tile is inside A, else boxes
// of R rows (tr: R is the plan's tma_rows, hopper_tma_rows in gemm_hopper_plan.cuh, which the
// map was encoded with) up to the first past M; tma_rows_bytes is what they bring, for the
// stage's expected bytes, counted before the copies.  On the H100 a box's rows past the
// tensor cost about as much as rows read (a 256-row tile at M = 64 ran 2.2x its time at
// M = 256), and boxes of 64 rows cost 2-15% against one of BM on whole tiles, hence the two
// maps.  A tile's rows past M are then neither copied nor counted: its stage keeps whatever
// those rows held, which only output rows past M read (never stored).  The boxes land one
// after another: R is a multiple of 8, so each starts on a 1024-byte line and the 128-byte
// swizzle is the one a single box of BM rows makes.
template <int BM, int R> __device__ __forceinline__ u32 tma_rows_bytes(int m0, int M)
{
    static_assert(BM % R == 0 && R % 8 == 0, "tma_rows: boxes of whole 8-row swizzle lines that tile BM");
    const int boxes = M - m0 >= BM ? BM / R : M > m0 ? (M - m0 + R - 1) / R : 0;
    return (u32)(boxes * R * ROW_BYTES);
}
template <int BM, int R>
__device__ __forceinline__ void tma_rows_load(u32 dst, const tmap &ta, const tmap &tr, int x, int m0, int M, u32 bar)
{
    if (M - m0 >= BM) {
        tma_load(dst, ta, x, m0, bar);
    } else {
#pragma unroll
        for (int b = 0; b < BM / R; ++b)
            if (m0 + b * R < M)
                tma_load(dst + b * R * ROW_BYTES, tr, x, m0 + b * R, bar);
    }
}
// The same, written at `dst` and completed on `bar` in every CTA of the cluster in `mask`.
__device__ __forceinline__ void tma_load_multicast(u32 dst, const tmap &m, int x, int y, u32 bar, unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(&m)), "r"(x), "r"(y), "r"(bar), "h"(mask) : "memory");
}

// The TMA producer: one thread (the caller's) issues each K tile of each tile of the walk as
// bulk tensor copies, which land in the layout produce's cp.async copies make (the 128-byte
// swizzle of a 1024-byte aligned tile is the address-bit swizzle TMA applies) and count their
// bytes on full[s], armed by one expect_tx arrival (make_ring<..., 1>).  Alone (w.cl == 1) it
// loads A's rows up to M (tma_rows_load) and B's two halves of BN/2 rows; in a cluster of two
// along M, the CTAs work on tiles of the same columns (tile_walk), so each loads its own A and
// half `rank` of B, multicast into both CTAs' stage: each B row leaves L2 once a pair.  Stage
// s is refilled after empty[s] completes, which counts the consumer warps of every CTA it is
// written into (make_ring's peers).  ES: bytes of a value (a K tile is 128/ES values).
template <int BM, int BN, int STAGES, int ES, int TR>
__device__ __forceinline__ void produce_tma(const tmap &ta, const tmap &tb, const tmap &tr,
                                            const tile_walk<BM, BN, ES> &w, u32 ring, u32 full0, u32 empty0, int M)
{
    constexpr int A_BYTES = BM * ROW_BYTES, HALF_B = BN / 2 * ROW_BYTES, STAGE_BYTES = A_BYTES + 2 * HALF_B;
    tma_prefetch(ta);
    tma_prefetch(tb);
    tma_prefetch(tr);
    int s = 0, n = 0; // stage, K tiles issued
    u32 phase = 0;
    for (int t = w.first; t < w.tiles; t += w.stride) {
        int m0, n0;
        w.origin(t, m0, n0);
        for (int kt = 0; kt < w.k_tiles; ++kt, ++n) {
            if (n >= STAGES)
                mbar_wait(empty0 + 8 * s, phase ^ 1);
            const u32 st = ring + s * STAGE_BYTES, bar = full0 + 8 * s;
            const int k = kt * (ROW_BYTES / ES); // values of K
            mbar_expect_tx(bar, STAGE_BYTES - A_BYTES + tma_rows_bytes<BM, TR>(m0, M));
            tma_rows_load<BM, TR>(st, ta, tr, k, m0, M, bar);
            if (w.cl > 1) {
                tma_load_multicast(st + A_BYTES + w.rank * HALF_B, tb, k, n0 + w.rank * (BN / 2), bar, 3);
            } else {
                tma_load(st + A_BYTES, tb, k, n0, bar);
                tma_load(st + A_BYTES + HALF_B, tb, k, n0 + BN / 2, bar);
            }
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
    }
}

// 16 values of 4 bits (8 bytes, value 2i in the low nibble of byte i) as 16 bytes in K order:
// Nib::even(w) turns the low nibbles of w's four bytes (values 0, 2, 4, 6) into four bytes,
// Nib::odd(w) the high ones; prmt interleaves them.  A conversion of no state: prepare()
// does nothing.  run<ROWS>(tile, slot, t) expands a packed slot of [ROWS][64] bytes into its
// tile at `tile`: thread t does output chunk t%8 (16 values from the 8 packed bytes at
// slot + 64·(t/8) + 8·(t%8)) of rows t/8 + 16i, stored where produce's copies land.
template <class Nib> struct nibble_expand {
    static __device__ __forceinline__ u32 perm(u32 x, u32 y, u32 sel)
    {
        u32 r;
        asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(y), "r"(sel));
        return r;
    }
    __device__ __forceinline__ void prepare(int, int, int) {}
    template <int ROWS> __device__ __forceinline__ void run(u32 tile, u32 slot, int t) const
    {
        const int row = t >> 3, chunk = t & 7;
        const u32 dst = tile + row * ROW_BYTES + ((chunk ^ (row & 7)) << 4), src = slot + row * 64 + chunk * 8;
#pragma unroll
        for (int i = 0; i < ROWS / LD_ROWS; ++i) {
            u32 w0, w1;
            asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(w0), "=r"(w1) : "r"(src + i * LD_ROWS * 64));
            const u32 e0 = Nib::even(w0), o0 = Nib::odd(w0), e1 = Nib::even(w1), o1 = Nib::odd(w1);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
                         :: "r"(dst + i * LD_ROWS * ROW_BYTES), "r"(perm(e0, o0, 0x5140u)), "r"(perm(e0, o0, 0x7362u)),
                            "r"(perm(e1, o1, 0x5140u)), "r"(perm(e1, o1, 0x7362u)) : "memory");
        }
    }
};

// The producer for operands stored in IB bits a value (PA: A, PB: B; 4-bit ones two a byte
// along K, DESIGN §2) that the consumers read as OB bytes a value: a K tile is 128/OB values.
// Each K tile's plain operand is copied as produce does (16-byte chunk t%8 of rows t/8 + 16i
// into the swizzled tile); a packed one's rows (PROW = 16·IB/OB bytes, chunk t%CPR of rows
// t/CPR + (128/CPR)i, CPR = PROW/16) go into one of SLOTS staging slots with cp.async and,
// SLOTS − 1 K tiles behind (so that many K tiles of loads are in flight beyond the one being
// expanded), once every producer thread's copies of that stage have landed, are expanded into
// the stage's tile by conv.run<ROWS>(tile, slot, t) (nibble_expand shows the contract); then
// side() and one plain arrival a thread on full[s] (make_ring<..., 128>).  A conversion with
// state (per-row scales) reads it in conv.prepare(m0, n0, kt), called for the next K tile to
// be expanded right after the one before it is, so its loads have an expansion to land; the
// side data is prepared at the same points.
// Named barrier 15 orders the producer threads: a slot is expanded after all its copies
// have landed, and refilled after all its expansions are done.  A slot holds A's packed rows
// ([BM][PROW] bytes, if PA) then B's ([BN][PROW], if PB); SLOTS of them start at `slots`.  K
// and the packed operands' leading dimensions are multiples of 128/IB values (whole chunks).
// The ring must be deeper than the slots, STAGES > SLOTS: the consumers that release a stage
// only once the next one is full (one wgmma group in flight) need the producer to have
// finished K tile n − STAGES + 1 when it waits to refill the stage of n − STAGES (the
// families give SLOTS = STAGES − 1, 2 to 4, as shared memory allows, and 3 stages or more:
// hopper_pack_slots).
template <int BM, int BN, int STAGES, bool PA, bool PB, int OB, int IB, int SLOTS, class Conv, class Side = no_side>
__device__ __forceinline__ void produce_packed(const qjit_params &p, const tile_walk<BM, BN, OB> &w, u32 ring,
                                               u32 full0, u32 empty0, u32 slots, int tid, Conv &conv,
                                               Side side = Side())
{
    constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = (BM + BN) * ROW_BYTES;
    constexpr int PROW = 16 * IB / OB, CPR = PROW / 16, PK_ROWS = 128 / CPR; // packed rows: bytes, chunks; a pass
    constexpr int SLOT_A = PA ? BM * PROW : 0, SLOT_BYTES = SLOT_A + (PB ? BN * PROW : 0);
    constexpr int VALUES = ROW_BYTES / OB;      // values of K a K tile
    const int M = (int)p.m, N = (int)p.n;
    const long long K = p.k;
    const long long lda = PA ? p.lda * IB / 8 : p.lda * OB, ldb = PB ? p.ldb * IB / 8 : p.ldb * OB; // bytes
    const int ld_row = tid >> 3, ld_chunk = tid & 7;
    const u32 ld_off = ld_row * ROW_BYTES + ((ld_chunk ^ (ld_row & 7)) << 4);
    const int pk_row = tid / CPR, pk_chunk = tid % CPR;
    const u32 pk_off = pk_row * PROW + pk_chunk * 16;
    // this thread's first row and chunk of each operand
    const int a_row = PA ? pk_row : ld_row, b_row = PB ? pk_row : ld_row;
    const int a_col = PA ? pk_chunk * 16 : ld_chunk * 16, b_col = PB ? pk_chunk * 16 : ld_chunk * 16;
    const long long a_pass = (PA ? PK_ROWS : LD_ROWS) * lda, b_pass = (PB ? PK_ROWS : LD_ROWS) * ldb;
    // Expands stage st's slot into its tiles, then hands the stage over.
    auto finish = [&](int st, int slot, int kt, int m0, int n0) {
        warpgroup_sync(15); // every copy of this stage has landed (each thread waited its own)
        const u32 src = slots + slot * SLOT_BYTES, dst = ring + st * STAGE_BYTES;
        if (PA)
            conv.template run<BM>(dst, src, tid);
        if (PB)
            conv.template run<BN>(dst + A_BYTES, src + SLOT_A, tid);
        if constexpr (Side::PREFETCH) // prepared with conv, an expansion ahead
            side(st, tid);
        else // (RAW copies beside the stage spilled this producer's registers: one pass here)
            side.now(st, m0, n0, kt, tid);
        fence_proxy_async(); // the consumers' wgmma read these stores through the async proxy
        mbar_arrive(full0 + 8 * st);
        warpgroup_sync(15); // the slot is read: it may be refilled
    };
    static_assert(SLOTS >= 2 && SLOTS < STAGES, "produce_packed: 2 to STAGES - 1 staging slots");
    constexpr int P = SLOTS - 1; // K tiles of loads in flight beyond the one being expanded
    int s = 0, n = 0;            // stage, K tiles issued (the j-th is in slot j % SLOTS)
    u32 phase = 0;
    // the K tiles issued and not yet expanded, oldest at [0] once P are (pushed at [P − 1],
    // the rest shifted down): stage, K tile, output tile origin
    int hs[P], hkt[P], hm0[P], hn0[P];
#pragma unroll
    for (int i = 0; i < P; ++i)
        hs[i] = hkt[i] = hm0[i] = hn0[i] = 0;
    for (int t = w.first; t < w.tiles; t += w.stride) {
        int m0, n0;
        w.origin(t, m0, n0);
        const char *a_src = static_cast<const char *>(p.a) + (long long)(m0 + a_row) * lda + a_col;
        const char *b_src = static_cast<const char *>(p.b) + (long long)(n0 + b_row) * ldb + b_col;
        const int a_rows = M - m0 - a_row, b_rows = N - n0 - b_row;
        for (int kt = 0; kt < w.k_tiles; ++kt, ++n) {
            if (n >= STAGES)
                mbar_wait(empty0 + 8 * s, phase ^ 1);
            const long long k = (long long)kt * VALUES; // values of K at this K tile
            const u32 tile = ring + s * STAGE_BYTES + ld_off, slot = slots + ((unsigned)n % SLOTS) * SLOT_BYTES + pk_off;
            // a chunk is all in or all out: 16/OB plain values, or 128/IB packed ones
            const bool pk_ok = k + pk_chunk * (128 / IB) < K, ld_ok = k + ld_chunk * (16 / OB) < K;
            const long long k_pk = k * IB / 8, k_ld = k * OB; // bytes into a row
            issue_rows<BM, PA ? PK_ROWS : LD_ROWS, PA ? PROW : ROW_BYTES>(
                PA ? slot : tile, a_src + (PA ? k_pk : k_ld), a_pass, a_rows, PA ? pk_ok : ld_ok);
            issue_rows<BN, PB ? PK_ROWS : LD_ROWS, PB ? PROW : ROW_BYTES>(
                PB ? slot + SLOT_A : tile + A_BYTES, b_src + (PB ? k_pk : k_ld), b_pass, b_rows, PB ? pk_ok : ld_ok);
            qc::cp_async_commit();
            if (n >= P) {
                qc::cp_async_wait<P>(); // this thread's copies of K tile n − P have landed
                finish(hs[0], (unsigned)(n - P) % SLOTS, hkt[0], hm0[0], hn0[0]);
            }
#pragma unroll
            for (int i = 0; i + 1 < P; ++i)
                hs[i] = hs[i + 1], hkt[i] = hkt[i + 1], hm0[i] = hm0[i + 1], hn0[i] = hn0[i + 1];
            hs[P - 1] = s, hkt[P - 1] = kt, hm0[P - 1] = m0, hn0[P - 1] = n0;
            // the next K tile to expand: the oldest in flight once P are (with one, this one),
            // K tile 0 before
            if (P == 1 || n >= P) {
                conv.prepare(hm0[0], hn0[0], hkt[0]);
                if constexpr (Side::PREFETCH)
                    side.prepare(hm0[0], hn0[0], hkt[0], tid);
            } else if (n == 0) {
                conv.prepare(m0, n0, kt);
                if constexpr (Side::PREFETCH)
                    side.prepare(m0, n0, kt, tid);
            }
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
    }
    if (n > 0) { // the last K tiles in flight, oldest first: [P − left, P), K tiles n − left ..
        const int left = n < P ? n : P;
        qc::cp_async_wait<0>();
#pragma unroll
        for (int i = 0; i < P; ++i)
            if (i >= P - left) {
                finish(hs[i], (unsigned)(n - P + i) % SLOTS, hkt[i], hm0[i], hn0[i]);
                if (i + 1 < P) {
                    conv.prepare(hm0[i + 1], hn0[i + 1], hkt[i + 1]);
                    if constexpr (Side::PREFETCH)
                        side.prepare(hm0[i + 1], hn0[i + 1], hkt[i + 1], tid);
                }
            }
    }
}

// Sends one staged pass of a consumer warpgroup: ROWS x SEG values of OUT at shared address
// `own` (row pitch `pitch`) to D rows row0.., columns col0... A whole tile with a 16-byte
// aligned D leaves by one bulk copy per row; any other through checked stores. t: the
// thread's index in its warpgroup.
template <int ROWS, int SEG>
__device__ __forceinline__ void send_pass(bool bulk, out_t *D, long long ldd, u32 own, int pitch,
                                          int row0, int col0, int M, int N, bool vec, int t)
{
    if (bulk) {
        for (int r = t; r < ROWS; r += 128)
            bulk_store(D + (long long)(row0 + r) * ldd + col0, own + r * pitch, SEG * (int)sizeof(out_t));
    } else {
        qc::copy_out<ROWS, SEG, SEG, SEG, 128>(own, pitch, D, ldd, row0, col0, M, N, vec, t);
    }
}

// A consumer warpgroup's output tile leaves in NP passes over its columns, each staged into
// the buffer at `own` between pass_open and pass_send:
//   for q: pass_open(sender, bar); <stage columns [q*SEG, (q+1)*SEG)>; pass_send(... q ...)
// Before a pass writes the buffer, the bulk copies of the last one (or of the last tile) must
// have read it, which its senders wait for, and every thread must be past its checked
// stores: the warpgroup's named barrier `bar`.  sender: whether this thread issues bulk copies.
__device__ __forceinline__ void pass_open(bool sender, int bar)
{
    if (sender)
        bulk_wait<false>();
    warpgroup_sync(bar);
}
// ... then, once every thread of the warpgroup has staged its part of pass q, it leaves for
// D rows row0.., columns col0 + q*SEG.. (send_pass).  t: the thread's index in its warpgroup.
template <int ROWS, int SEG>
__device__ __forceinline__ void pass_send(int bar, int q, bool bulk, out_t *D, long long ldd, u32 own, int pitch,
                                          int row0, int col0, int M, int N, bool vec, int t)
{
    fence_proxy_async(); // the bulk copies read what the pass's stores wrote
    warpgroup_sync(bar);
    send_pass<ROWS, SEG>(bulk, D, ldd, own, pitch, row0, col0 + q * SEG, M, N, vec, t);
}

% if SPLIT then
// K split across the gridDim.z CTAs of a cluster, once every consumer thread of every rank
// has left its part of the f32 tile in its ring as D's tile (row-major, SUM_PITCH floats a
// row: 8 rows of a warp's stores fall on different banks): after a cluster barrier, rank r
// finishes rows
// [BM·r/c, BM·(r+1)/c), each value the ranks' sums added in rank order 0, 1, ... (so it
// depends neither on timing nor on which rank adds), finished in f32 as every epilogue
// (qc::finish2: its column's B scale, the bias), rounded once to OUT and stored to D.  ct:
// this thread's index among the NT consumer threads.  A second cluster barrier keeps every
// ring alive until the others have read it (the producers take part in both: the
// start of the kernel, gemm_hopper_start.cuh).
__host__ __device__ constexpr int sum_pitch(int bn) { return bn + 8; }
template <int BM, int BN, int NT>
__device__ __forceinline__ void split_sum(u32 ring, int ct, const qjit_params &p, int m0, int n0, bool vec)
{
    constexpr int SUM_PITCH = sum_pitch(BN);
    qc::cluster_sync();
    const int c = (int)gridDim.z, r = (int)blockIdx.z;
    const int M = (int)p.m, N = (int)p.n;
    const int r0 = BM * r / c, r1 = min(BM * (r + 1) / c, M - m0); // rows past M: nothing to add
    out_t *__restrict__ D = static_cast<out_t *>(p.d);
    const qc::factors f(p);
#pragma unroll 1
    for (int i = ct; i < (r1 - r0) * (BN / 4); i += NT) {
        const int row = r0 + i / (BN / 4), col = (i % (BN / 4)) * 4;
        const int grow = m0 + row, gcol = n0 + col;
        if (gcol >= N)
            continue;
        const u32 at = ring + (row * SUM_PITCH + col) * 4;
        // every rank's four values in flight at once, then added in rank order
        float x[8][4];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0.f;
            if (k < c) {
                u32 peer;
                asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(peer) : "r"(at), "r"(k));
                asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                             : "=f"(x[k][0]), "=f"(x[k][1]), "=f"(x[k][2]), "=f"(x[k][3]) : "r"(peer) : "memory");
            }
        }
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            v[e] = x[0][e];
#pragma unroll
            for (int k = 1; k < 8; ++k)
                if (k < c)
                    v[e] += x[k][e];
        }
        float s[4], b[4];
        f.cols(gcol, N, s[0], s[1], b[0], b[1]);
        f.cols(gcol + 2, N, s[2], s[3], b[2], b[3]);
        qc::finish2(v[0], v[1], f.sa_t, s[0], s[1], b[0], b[1]);
        qc::finish2(v[2], v[3], f.sa_t, s[2], s[3], b[2], b[3]);
        out_t *dst = D + (long long)grow * p.ldd + gcol;
%   if OUT == "f32" then
        if (vec && gcol + 4 <= N) {
            asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n"
                         :: "l"(dst), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
        } else {
            for (int e = 0; e < 4 && gcol + e < N; ++e)
                dst[e] = v[e];
        }
%   else
        u32 w0, w1; // the first operand goes to the upper half
        asm("cvt.rn.$(OUT)x2.f32 %0, %1, %2;\n" : "=r"(w0) : "f"(v[1]), "f"(v[0]));
        asm("cvt.rn.$(OUT)x2.f32 %0, %1, %2;\n" : "=r"(w1) : "f"(v[3]), "f"(v[2]));
        if (vec && gcol + 4 <= N) {
            asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" :: "l"(dst), "r"(w0), "r"(w1) : "memory");
        } else {
            const qc::u16 h[4] = {(qc::u16)w0, (qc::u16)(w0 >> 16), (qc::u16)w1, (qc::u16)(w1 >> 16)};
            for (int e = 0; e < 4 && gcol + e < N; ++e)
                dst[e] = h[e];
        }
%   end
    }
    qc::cluster_sync();
}
% end

} // namespace qh

// The names the Hopper kernel bodies (gemm_wgmma.cu, gemm_wgmma_q.cuh) use unqualified.
namespace {
using qc::u32;
using qc::u64;
using qc::out_t;
using qh::ROW_BYTES;
using qh::mbar_arrive;
using qh::mbar_wait;
using qh::fence_proxy_async;
using qh::smem_desc;
using qh::warpgroup_sync;
using qh::bulk_wait;
using qh::wgmma_fence;
using qh::wgmma_commit;
using qh::wgmma_wait;
} // namespace
