/*
 * tune_run.c — qjit_gemm_tune: measure a descriptor's candidate configurations on the
 * current GPU and record them (tune.c) for the dispatch of later handles.
 *
 * Per problem: candidates (the named sweep plus the bucket's heuristic) compiled on CPU
 * threads first; then random operands, filled once, the weights copied on the device into
 * several buffers (so that repeated launches read them from DRAM) and the activations in
 * one (warm in L2, as a model's are after the kernel that wrote them), the heuristic's output
 * as the reference, each candidate run once on a poisoned output and checked, then timed
 * as replays of a CUDA graph of launches over the copies (the way decode runs), median of
 * the replays.
 */
#define _GNU_SOURCE
#include "tune_data.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CANDIDATES 72
#define MIN_LAUNCHES 8 /* launches per graph, at least */
/* Timing's budget, so that prefill problems (a replay of 8 launches of milliseconds each)
 * do not take the tuning's time: a graph whose first warm-up replay took over
 * LONG_REPLAY_MS is replayed only as often as REPLAY_BUDGET_MS allows (at least
 * MIN_LONG_REPS times, with no further warm-up), and there a candidate whose warm-up replay
 * is over PRUNE times the fastest so far stops (that replay is its time).  Shorter graphs
 * (decode) are cheap to time and noisier a replay: every candidate gets its median.  The
 * sweep only has to find the candidates within FINAL_WINDOW of the fastest, which the final
 * round times again in turns (with its own budget, FINAL_LONG_MS and FINAL_BUDGET_MS): on
 * the H100, 20 and 200 ms here spent 55% of a prefill bucket's tuning timing the sweep,
 * every candidate of a graph of 5-20 ms (M = 1024) getting 14 replays, and at decode the
 * widest layers' graphs of 8- and 16-bit weights take 1-3 ms (docs/NOTES.md). */
#define LONG_REPLAY_MS 1.0
#define REPLAY_BUDGET_MS 100.0
#define FINAL_LONG_MS 20.0
#define FINAL_BUDGET_MS 200.0
#define MIN_LONG_REPS 3
#define PRUNE 1.25
/* The final round: the fastest of a sweep is the minimum of many noisy medians, biased low,
 * and a winner within a few percent of the runner-up is often the luckier one (the sweep
 * times each candidate at its own moment, and at the board's power limit the clock swings
 * within seconds).  The passed candidates within FINAL_WINDOW of the fastest (FINAL_MAX of
 * them at most), and the heuristic's kernel where it passed, are timed again side by side:
 * their graphs replayed in turns on one stream, back to back, FINAL_ROUNDS × reps rounds of
 * one replay each.  The winner is the finalist fastest there.  A prefill problem (M above
 * 64) first loads the board for WARM_PREFILL_MS with the finalists (QJIT_TUNE_WARM_MS sets
 * it for every problem), so that they are not timed on a board that idled while the host
 * checked their outputs.  A short load does it: on the H100 a longer one widened the gaps
 * between near-ties without reordering them, and at 1000 ms the load alone took 540 s of a
 * full tuning's 1800.  The finalists' times are recorded on the sweep's
 * scale (the winner's as the sweep's fastest, the others in proportion to it), so that the
 * winner is also the fastest record, which is what dispatch reads back: a loaded board's
 * times are higher than an idle one's, and the sweep's times of the others stay. */
#define FINAL_WINDOW 1.10
#define FINAL_MAX 4
#define WARM_PREFILL_MS 250.0
#define FINAL_ROUNDS 2

void qjit_tune_options_init(qjit_tune_options *o)
{
    if (o)
        memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------ compiling */
/* The candidates compile on CPU threads while the calling thread measures: a problem's
 * candidates come first in the list, so the first problem starts as soon as its own are
 * built, and later ones compile under its measurements. */
typedef struct compile_job {
    qjit_context *ctx;
    const qjit_gemm_desc *cands;
    qjit_status *status;
    bool *done;
    size_t n, next, finished;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} compile_job;

static void *compile_worker(void *p)
{
    compile_job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n)
            return NULL;
        qjit_status st = qjit_gemm_precompile(j->ctx, &j->cands[i], j->cands[i].arch, NULL);
        pthread_mutex_lock(&j->mu);
        j->status[i] = st;
        j->done[i] = true;
        j->finished++;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
}

/* Start `threads` compile threads (0: the CPU count) over the job; returns how many
 * started (0: the caller compiles everything itself first). */
static int compile_start(compile_job *j, int threads, pthread_t *tid, int cap)
{
    if (threads < 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if ((size_t)threads > j->n)
        threads = (int)j->n;
    int started = 0;
    for (int i = 0; i < threads && i < cap; i++)
        if (pthread_create(&tid[started], NULL, compile_worker, j) == 0)
            started++;
    if (started == 0)
        compile_worker(j);
    return started;
}

/* Wait until candidate u is built; its status.  Reports compile progress meanwhile. */
static qjit_status compile_wait(compile_job *j, size_t u, const qjit_tune_options *o,
                                size_t *reported)
{
    pthread_mutex_lock(&j->mu);
    while (!j->done[u])
        pthread_cond_wait(&j->cv, &j->mu);
    qjit_status st = j->status[u];
    size_t finished = j->finished;
    pthread_mutex_unlock(&j->mu);
    if (o->progress && finished != *reported) {
        *reported = finished;
        o->progress(o->user, "compile", finished, j->n, "");
    }
    return st;
}

/* ------------------------------------------------------------ timing */
/* The median of v[0..n), n >= 1 (sorted in place: n is small). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A candidate's graph of launches over the copies, captured on a stream of its own. */
typedef struct timed_graph {
    const qjit_cu_api *cu;
    CUstream s;
    CUgraphExec exec;
    int launches;
} timed_graph;

static void graph_free(timed_graph *t)
{
    const qjit_cu_api *cu = t->cu;
    if (t->s)
        cu->StreamSynchronize(t->s);
    if (t->exec)
        cu->GraphExecDestroy(t->exec);
    if (t->s)
        cu->StreamDestroy(t->s);
    memset(t, 0, sizeof *t);
}

static qjit_status graph_make(const qjit_cu_api *cu, qjit_gemm *g, const qjit_tune_operands *ops,
                              const qjit_gemm_desc *d, const qjit_tune_problem *p, timed_graph *t)
{
    memset(t, 0, sizeof *t);
    t->cu = cu;
    t->launches = ops->copies * ((MIN_LAUNCHES + ops->copies - 1) / ops->copies);
    CUgraph graph = NULL;
    qjit_status st = QJIT_OK;
    CUresult r = cu->StreamCreate(&t->s, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS)
        r = cu->StreamBeginCapture(t->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r == CUDA_SUCCESS) {
        for (int i = 0; i < t->launches && st == QJIT_OK; i++) {
            qjit_gemm_args a = qjit_tune_args(ops, d, p, i % ops->copies);
            st = qjit_gemm_launch(g, &a, (struct CUstream_st *)t->s);
        }
        CUresult er = cu->StreamEndCapture(t->s, &graph);
        r = st == QJIT_OK ? er : CUDA_SUCCESS;
    }
    if (st == QJIT_OK && r == CUDA_SUCCESS)
        r = cu->GraphInstantiate(&t->exec, graph, 0);
    if (graph)
        cu->GraphDestroy(graph);
    if (st == QJIT_OK && r != CUDA_SUCCESS)
        st = qjit_drv_fail(cu, r, "capturing a candidate's launches");
    if (st != QJIT_OK)
        graph_free(t);
    return st;
}

/* An untimed replay of each of the n graphs g, in turn, on stream s (their warm-ups). */
static qjit_status graphs_launch(const qjit_cu_api *cu, const timed_graph *g, int n, CUstream s)
{
    CUresult r = CUDA_SUCCESS;
    for (int j = 0; j < n && r == CUDA_SUCCESS; j++)
        r = cu->GraphLaunch(g[j].exec, s);
    return r == CUDA_SUCCESS ? QJIT_OK : qjit_drv_fail(cu, r, "replaying a candidate");
}

/* count replays, graph g[order[i]] the i-th (g[0] each where order is NULL), back to back on
 * stream s with an event between each two and one wait at the end: us[i] is replay i's µs a
 * launch.  The GPU does not idle between them, as it does not in a model's prefill: with a
 * wait for each replay, qjit-tune picked near-ties apart from bench_grid on the H100 where,
 * back to back, it agreed (docs/NOTES.md, "bf16 × e2m1 and MXFP4 under auto; the tuner's
 * replays back to back"). */
static qjit_status replays_timed(const qjit_cu_api *cu, const timed_graph *g, const int *order,
                                 int count, CUstream s, double *us)
{
    CUevent *ev = calloc((size_t)count + 1, sizeof *ev);
    if (!ev)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "timing %d replays", count);
    CUresult r = CUDA_SUCCESS;
    int made = 0;
    for (; made <= count && r == CUDA_SUCCESS; made++)
        r = cu->EventCreate(&ev[made], CU_EVENT_DEFAULT);
    if (r != CUDA_SUCCESS)
        made--; /* the one that failed was not made */
    if (r == CUDA_SUCCESS)
        r = cu->EventRecord(ev[0], s);
    for (int i = 0; i < count && r == CUDA_SUCCESS; i++) {
        r = cu->GraphLaunch(g[order ? order[i] : 0].exec, s);
        if (r == CUDA_SUCCESS)
            r = cu->EventRecord(ev[i + 1], s);
    }
    if (r == CUDA_SUCCESS)
        r = cu->EventSynchronize(ev[count]);
    for (int i = 0; i < count && r == CUDA_SUCCESS; i++) {
        float ms = 0;
        r = cu->EventElapsedTime(&ms, ev[i], ev[i + 1]);
        us[i] = 1000.0 * ms / g[order ? order[i] : 0].launches;
    }
    for (int i = 0; i < made; i++)
        cu->EventDestroy(ev[i]);
    free(ev);
    return r == CUDA_SUCCESS ? QJIT_OK : qjit_drv_fail(cu, r, "timing a candidate");
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Whether a graph whose replay took us a launch is long (over long_ms). */
static bool long_replay(const timed_graph *t, double us, double long_ms)
{
    return us * t->launches / 1000.0 > long_ms;
}

/* How many timed replays a graph gets whose first replay took first_us a launch: reps, or
 * for a long graph (over long_ms) what budget_ms allows (at least MIN_LONG_REPS). */
static int replays_for(const timed_graph *t, double first_us, int reps, double long_ms,
                       double budget_ms)
{
    if (!long_replay(t, first_us, long_ms))
        return reps;
    const double ms = first_us * t->launches / 1000.0;
    const int fit = (int)ceil(budget_ms / ms), want = fit < MIN_LONG_REPS ? MIN_LONG_REPS : fit;
    return want < reps ? want : reps;
}

/* Median µs of one launch of g over the copies, as replays of a graph of launches; within
 * the budget above (cutoff_us: the time past which a candidate stops after one replay, 0 for
 * none). */
static qjit_status time_launches(const qjit_cu_api *cu, qjit_gemm *g, const qjit_tune_operands *ops,
                                 const qjit_gemm_desc *d, const qjit_tune_problem *p,
                                 int warmup, int reps, double cutoff_us, double *us)
{
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "timing a candidate (%d replays)", reps);
    timed_graph tg;
    qjit_status st = graph_make(cu, g, ops, d, p, &tg);
    /* the first warm-up replay, timed, sets the budget */
    double w0 = 0;
    if (st == QJIT_OK)
        st = replays_timed(cu, &tg, NULL, 1, tg.s, &w0);
    const bool long_graph = st == QJIT_OK && long_replay(&tg, w0, LONG_REPLAY_MS);
    if (long_graph) {
        reps = replays_for(&tg, w0, reps, LONG_REPLAY_MS, REPLAY_BUDGET_MS);
        warmup = 1;
    }
    /* a long graph clearly slower than the best so far: its warm-up replay is its time */
    const bool pruned = long_graph && cutoff_us > 0 && w0 > cutoff_us;
    for (int i = 1; i < warmup && st == QJIT_OK && !pruned; i++)
        st = graphs_launch(cu, &tg, 1, tg.s);
    if (st == QJIT_OK && !pruned)
        st = replays_timed(cu, &tg, NULL, reps, tg.s, t);
    if (st == QJIT_OK)
        *us = pruned ? w0 : median(t, reps);
    if (tg.cu)
        graph_free(&tg);
    free(t);
    return st;
}

/* The finalists' graphs replayed in turns: in each of `rounds` rounds one replay of each, the
 * order reversed every other round, so that a drift of the clock (at the board's power limit
 * it swings within seconds) falls on every finalist alike.  us[j]: the median of finalist j's
 * replays, in the sweep's unit (µs a launch of the same graph). */
static qjit_status time_interleaved(const qjit_cu_api *cu, qjit_gemm *const *g, int n,
                                    const qjit_tune_operands *ops, const qjit_gemm_desc *d,
                                    const qjit_tune_problem *p, int warmup, int rounds,
                                    double warm_ms, const double *first, double *us)
{
    timed_graph tg[FINAL_MAX + 1];
    double *t = calloc((size_t)(n * rounds), sizeof *t);
    int made = 0;
    qjit_status st = t ? QJIT_OK
                       : qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "the final round (%d replays)", n * rounds);
    for (; made < n && st == QJIT_OK; made++)
        if ((st = graph_make(cu, g[made], ops, d, p, &tg[made])) != QJIT_OK)
            break;
    bool long_graph = false; /* long graphs: one warm-up, and the rounds the budget allows */
    for (int j = 0; j < n && st == QJIT_OK; j++) {
        const int fit = replays_for(&tg[j], first[j], rounds, FINAL_LONG_MS, FINAL_BUDGET_MS);
        long_graph = long_graph || long_replay(&tg[j], first[j], FINAL_LONG_MS);
        rounds = fit < rounds ? fit : rounds;
    }
    /* the warm-ups, then for warm_ms (QJIT_TUNE_WARM_MS) more of the finalists in turns, so
     * that the timed rounds find the board loaded as a prefill keeps it; all on one stream */
    for (int i = 0; i < (long_graph ? 1 : warmup) && st == QJIT_OK; i++)
        st = graphs_launch(cu, tg, n, tg[0].s);
    for (const double t0 = now_ms(); st == QJIT_OK && warm_ms > 0 && now_ms() - t0 < warm_ms;) {
        st = graphs_launch(cu, tg, n, tg[0].s);
        const CUresult r = st == QJIT_OK ? cu->StreamSynchronize(tg[0].s) : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS)
            st = qjit_drv_fail(cu, r, "the final round's warm load");
    }
    /* then every round's replays back to back on one stream, one wait at the end */
    int *order = st == QJIT_OK ? malloc((size_t)(n * rounds) * sizeof *order) : NULL;
    double *all = order ? malloc((size_t)(n * rounds) * sizeof *all) : NULL;
    if (st == QJIT_OK && !all)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "the final round (%d replays)", n * rounds);
    for (int r = 0; r < rounds && st == QJIT_OK; r++)
        for (int k = 0; k < n; k++)
            order[r * n + k] = r % 2 ? n - 1 - k : k;
    if (st == QJIT_OK)
        st = replays_timed(cu, tg, order, n * rounds, tg[0].s, all);
    for (int i = 0; i < n * rounds && st == QJIT_OK; i++)
        t[order[i] * rounds + i / n] = all[i];
    free(order);
    free(all);
    for (int j = 0; j < n && st == QJIT_OK; j++)
        us[j] = median(t + j * rounds, rounds);
    for (int j = 0; j < made; j++)
        graph_free(&tg[j]);
    free(t);
    return st;
}

/* Run g once on copy 0 into a poisoned output and read it back into host. */
static qjit_status run_once(const qjit_cu_api *cu, qjit_gemm *g, const qjit_tune_operands *ops,
                            const qjit_gemm_desc *d, const qjit_tune_problem *p, uint8_t *host)
{
    CUresult r = cu->MemsetD8(ops->out, 0xff, ops->d_bytes); /* NaN in every output type */
    if (r != CUDA_SUCCESS)
        return qjit_drv_fail(cu, r, "poisoning the output");
    qjit_gemm_args a = qjit_tune_args(ops, d, p, 0);
    qjit_status st = qjit_gemm_launch(g, &a, NULL);
    if (st != QJIT_OK)
        return st;
    if ((r = cu->StreamSynchronize(NULL)) != CUDA_SUCCESS ||
        (r = cu->MemcpyDtoH(host, ops->out, ops->d_bytes)) != CUDA_SUCCESS)
        return qjit_drv_fail(cu, r, "running a candidate");
    return QJIT_OK;
}

/* ------------------------------------------------------------ one problem */
typedef struct tuner {
    qjit_context *ctx;
    const qjit_cu_api *cu;
    const qjit_gemm_desc *d;
    const qjit_tune_options *o;
    char gpu[64];
    size_t done, total; /* measurements, for progress */
    compile_job *job;   /* the candidates being compiled */
    size_t compiled;    /* compiles reported to progress */
    double warm_ms;     /* QJIT_TUNE_WARM_MS: the final round's untimed load first (< 0: the
                         * default, WARM_PREFILL_MS for M above 64) */
    uint8_t *ref, *got; /* host copies of the reference and a candidate's output, as large
                         * as the largest problem's: page-locked where the driver gives them
                         * (a prefill output of hundreds of MB copies at about twice the
                         * rate of pageable memory), made once for the whole list */
    bool pinned;
} tuner;

/* T's host buffers of `bytes` each, page-locked if possible. */
static qjit_status host_buffers(tuner *T, size_t bytes)
{
    void *a = NULL, *b = NULL;
    if (T->cu->MemAllocHost(&a, bytes) == CUDA_SUCCESS &&
        T->cu->MemAllocHost(&b, bytes) == CUDA_SUCCESS) {
        T->ref = a, T->got = b, T->pinned = true;
        return QJIT_OK;
    }
    if (a)
        T->cu->MemFreeHost(a);
    T->ref = malloc(bytes), T->got = malloc(bytes);
    if (T->ref && T->got)
        return QJIT_OK;
    free(T->ref);
    free(T->got);
    T->ref = T->got = NULL;
    return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "tuning outputs (%zu bytes)", bytes);
}

static void host_buffers_free(tuner *T)
{
    if (T->pinned) {
        T->cu->MemFreeHost(T->ref);
        T->cu->MemFreeHost(T->got);
    } else {
        free(T->ref);
        free(T->got);
    }
    T->ref = T->got = NULL;
}

/* The final round (FINAL_WINDOW above): first[i] is candidate i's time in the sweep, 0
 * where it did not pass.  Updates res (best, best_us, heuristic_us) and the records. */
static bool picked(const size_t *pick, int npick, size_t i)
{
    for (int j = 0; j < npick; j++)
        if (pick[j] == i)
            return true;
    return false;
}

static qjit_status final_round(tuner *T, const qjit_tune_problem *p, const qjit_gemm_desc *cands,
                               const double *first, size_t ncands, const qjit_tune_operands *ops,
                               qjit_tune_result *res)
{
    size_t pick[FINAL_MAX + 1];
    int npick = 0;
    /* the fastest FINAL_MAX within the window, fastest first */
    for (int k = 0; k < FINAL_MAX; k++) {
        size_t b = ncands;
        for (size_t i = 0; i < ncands; i++)
            if (!picked(pick, npick, i) && first[i] > 0 && first[i] <= FINAL_WINDOW * res->best_us &&
                (b == ncands || first[i] < first[b]))
                b = i;
        if (b == ncands)
            break;
        pick[npick++] = b;
    }
    if (npick < 2)
        return QJIT_OK;
    /* and the heuristic's kernel, so that the speed-up printed compares like with like */
    for (size_t i = 0; i < ncands; i++)
        if (first[i] > 0 && !memcmp(&cands[i], &res->heuristic, sizeof cands[i])) {
            if (!picked(pick, npick, i))
                pick[npick++] = i;
            break;
        }
    const int warmup = T->o->warmup > 0 ? T->o->warmup : 3;
    const int reps = T->o->reps > 0 ? T->o->reps : 20;
    qjit_gemm *g[FINAL_MAX + 1];
    double firsts[FINAL_MAX + 1], t[FINAL_MAX + 1];
    qjit_status st = QJIT_OK;
    for (int j = 0; j < npick && st == QJIT_OK; j++) {
        firsts[j] = first[pick[j]];
        st = qjit_context_get_gemm(T->ctx, &cands[pick[j]], NULL, &g[j]);
    }
    const double warm_ms = T->warm_ms >= 0 ? T->warm_ms : p->m > 64 ? WARM_PREFILL_MS : 0;
    if (st == QJIT_OK)
        st = time_interleaved(T->cu, g, npick, ops, T->d, p, warmup, FINAL_ROUNDS * reps, warm_ms,
                              firsts, t);
    if (st != QJIT_OK)
        return qjit_err_prefix(st, "m=%lld n=%lld k=%lld: the final round", (long long)p->m,
                               (long long)p->n, (long long)p->k);
    double rec[FINAL_MAX + 1];
    const int w = qjit_tune_final_pick(firsts, t, npick, rec);
    res->best = cands[pick[w]];
    res->best_us = rec[w];
    for (int j = 0; j < npick && st == QJIT_OK; j++) {
        const double us = rec[j];
        const qjit_gemm_desc *c = &cands[pick[j]];
        if (!memcmp(c, &res->heuristic, sizeof *c))
            res->heuristic_us = us;
        if (!T->o->dry_run) {
            qjit_tune_measurement m = {T->gpu, p->m, p->n, p->k, c, us, true};
            st = qjit_tune_record(T->ctx, T->d, &m);
        }
    }
    return st;
}

static qjit_status tune_problem(tuner *T, const qjit_tune_problem *p, const qjit_gemm_desc *cands,
                                const size_t *uidx, size_t ncands, qjit_tune_result *res)
{
    const qjit_gemm_desc *d = T->d;
    const qjit_cu_api *cu = T->cu;
    const int warmup = T->o->warmup > 0 ? T->o->warmup : 3;
    const int reps = T->o->reps > 0 ? T->o->reps : 20;
    qjit_tune_operands ops;
    if (T->o->progress) /* where a problem's time goes: operands, checks, timing, final */
        T->o->progress(T->o->user, "operands", T->done, T->total, "");
    qjit_status st = qjit_tune_operands_make(cu, &res->heuristic, p,
                                   T->o->rotate_bytes ? T->o->rotate_bytes : 256ull << 20, &ops);
    if (st != QJIT_OK)
        return st;
    uint8_t *ref = T->ref, *got = T->got; /* (sized for the largest problem) */
    qjit_gemm *hg = NULL;
    /* the reference: the bucket's heuristic kernel (candidate 0) */
    if (st == QJIT_OK)
        compile_wait(T->job, uidx[0], T->o, &T->compiled);
    if (st == QJIT_OK)
        st = qjit_context_get_gemm(T->ctx, &res->heuristic, NULL, &hg);
    if (st == QJIT_OK)
        st = run_once(cu, hg, &ops, d, p, ref);
    if (st != QJIT_OK) {
        char text[256];
        qjit_desc_text(&res->heuristic, text, sizeof text);
        st = qjit_err_prefix(st, "m=%lld n=%lld k=%lld: the heuristic's kernel %s",
                             (long long)p->m, (long long)p->n, (long long)p->k, text);
    }
    const double tol = qjit_tune_tolerance(d);
    /* the passed candidates' first times, for the final round */
    double *first = calloc(ncands ? ncands : 1, sizeof *first);
    if (!first && st == QJIT_OK)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "tuning times (%zu candidates)", ncands);
    for (size_t i = 0; i < ncands && st == QJIT_OK; i++) {
        char text[256];
        qjit_desc_text(&cands[i], text, sizeof text);
        if (T->o->progress)
            T->o->progress(T->o->user, "time", T->done, T->total, text);
        T->done++;
        qjit_gemm *g = NULL;
        double us = 0, e = 0;
        /* a candidate that did not compile is not tried again (a failure to store it
         * is not one: the get below compiles it) */
        const qjit_status built = compile_wait(T->job, uidx[i], T->o, &T->compiled);
        bool unbuildable = built == QJIT_ERROR_COMPILE || built == QJIT_ERROR_TEMPLATE ||
                           built == QJIT_ERROR_UNSUPPORTED;
        if (unbuildable || qjit_context_get_gemm(T->ctx, &cands[i], NULL, &g) != QJIT_OK ||
            run_once(cu, g, &ops, d, p, got) != QJIT_OK) {
            res->skipped++; /* not built, or sizes this kernel refuses */
            continue;
        }
        e = qjit_tune_nerr(d->out, got, ref, p->m * p->n);
        bool ok = e >= 0 && e <= tol;
        /* a candidate that is wrong cannot win: it is timed for the record, and pruned as
         * any other once it is clearly slower */
        const double cutoff = res->best_us > 0 ? PRUNE * res->best_us : 0;
        if (T->o->progress)
            T->o->progress(T->o->user, "measure", T->done, T->total, text);
        if ((st = time_launches(cu, g, &ops, d, p, warmup, reps, cutoff, &us)) != QJIT_OK) {
            st = qjit_err_prefix(st, "m=%lld n=%lld k=%lld: %s", (long long)p->m,
                                 (long long)p->n, (long long)p->k, text);
            break;
        }
        if (ok) {
            first[i] = us;
            res->passed++;
            res->max_error = e > res->max_error ? e : res->max_error;
            if (res->best_us == 0 || us < res->best_us) {
                res->best_us = us;
                res->best = cands[i];
            }
        } else {
            res->failed++;
        }
        if (!memcmp(&cands[i], &res->heuristic, sizeof cands[i]))
            res->heuristic_us = us;
        if (!T->o->dry_run) {
            qjit_tune_measurement m = {T->gpu, p->m, p->n, p->k, &cands[i], us, ok};
            if ((st = qjit_tune_record(T->ctx, d, &m)) != QJIT_OK)
                break;
        }
    }
    if (st == QJIT_OK && res->passed >= 2 && T->o->progress)
        T->o->progress(T->o->user, "final", T->done, T->total, "");
    if (st == QJIT_OK && res->passed >= 2)
        st = final_round(T, p, cands, first, ncands, &ops, res);
    free(first);
    qjit_tune_operands_free(&ops);
    return st;
}

/* ------------------------------------------------------------ the call */
static bool contains(const qjit_gemm_desc *list, size_t n, const qjit_gemm_desc *x)
{
    for (size_t i = 0; i < n; i++)
        if (!memcmp(&list[i], x, sizeof *x))
            return true;
    return false;
}

qjit_status qjit_gemm_tune(qjit_context *ctx, const qjit_gemm_desc *d,
                           const qjit_tune_problem *problems, size_t n,
                           const qjit_tune_options *opt, qjit_tune_result *results)
{
    if (!d || (n && (!problems || !results)))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_tune: NULL argument");
    qjit_tune_options defaults;
    qjit_tune_options_init(&defaults);
    const qjit_tune_options *o = opt ? opt : &defaults;
    qjit_status st = ctx ? QJIT_OK : qjit_default_context(&ctx);
    if (st == QJIT_OK)
        st = qjit_gemm_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    /* the final round's untimed load first (QJIT_TUNE_WARM_MS), checked before anything */
    double warm_ms = -1;
    const char *warm = getenv("QJIT_TUNE_WARM_MS");
    if (warm && *warm) {
        char *end;
        warm_ms = strtod(warm, &end);
        if (*end || !(warm_ms >= 0 && warm_ms <= 60000))
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "QJIT_TUNE_WARM_MS is '%s' (must be milliseconds, 0 to 60000)", warm);
    }
    char problem[256];
    qjit_select_problem_text(d, problem, sizeof problem);
    if (qjit_select_fully_named(d))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_tune: %s names its whole configuration: there is "
                            "nothing to tune",
                            problem);
    for (size_t i = 0; i < n; i++)
        if (problems[i].m < 1 || problems[i].n < 1 || problems[i].k < 1)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "qjit_gemm_tune: problem %zu has m=%lld n=%lld k=%lld (each "
                                "must be positive)",
                                i, (long long)problems[i].m, (long long)problems[i].n,
                                (long long)problems[i].k);
    for (size_t i = 0; i < n; i++) { /* K as the launch will ask, before any GPU work */
        char why[128];
        if (!qjit_desc_k_fits(d, problems[i].k, why, sizeof why))
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_tune: problem %zu: %s",
                                i, why);
    }
    if (n == 0)
        return QJIT_OK; /* nothing to measure: no GPU needed */
    tuner T = {ctx, NULL, d, o, "", 0, 0, NULL, 0, warm_ms, NULL, NULL, false};
    CUcontext cuctx;
    CUdevice dev;
    int major, minor;
    if ((st = qjit_drv_current(&T.cu, &cuctx, &dev, &major, &minor)) != QJIT_OK ||
        (st = qjit_drv_device_name(T.cu, dev, T.gpu, sizeof T.gpu)) != QJIT_OK)
        return qjit_err_prefix(st, "qjit_gemm_tune");

    /* every problem's candidates: the bucket's heuristic first, then the sweep's (when none
     * is named: the small-m sweep up to M = 64, the default one above) */
    size_t per = MAX_CANDIDATES;
    qjit_gemm_desc *cands = calloc(n * per, sizeof *cands);
    size_t *count = calloc(n, sizeof *count);
    qjit_gemm_desc *uniq = calloc(n * per, sizeof *uniq);
    size_t *uidx = calloc(n * per, sizeof *uidx);
    qjit_status *ustatus = calloc(n * per, sizeof *ustatus);
    bool *udone = calloc(n * per, sizeof *udone);
    size_t nuniq = 0;
    if (!cands || !count || !uniq || !uidx || !ustatus || !udone)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_gemm_tune: candidate lists");
    for (size_t i = 0; i < n && st == QJIT_OK; i++) {
        qjit_tune_result *r = &results[i];
        memset(r, 0, sizeof *r);
        r->problem = problems[i];
        r->bucket = qjit_m_bucket(problems[i].m);
        qjit_gemm_desc *c = &cands[i * per];
        st = qjit_select_resolve(ctx, d, QJIT_ARCH_AUTO, qjit_m_bucket_max(r->bucket),
                                 &r->heuristic);
        if (st != QJIT_OK)
            break;
        c[count[i]++] = r->heuristic;
        size_t np = 0;
        qjit_gemm_desc pts[MAX_CANDIDATES];
        const char *sweep = o->sweep && *o->sweep ? o->sweep
                            : problems[i].m <= 64  ? "small-m"
                                                   : "default";
        st = qjit_gemm_sweep(ctx, d, r->heuristic.arch, sweep, pts, MAX_CANDIDATES - 1, &np);
        for (size_t j = 0; st == QJIT_OK && j < np && j < MAX_CANDIDATES - 1; j++)
            if (!contains(c, count[i], &pts[j]))
                c[count[i]++] = pts[j];
        for (size_t j = 0; st == QJIT_OK && j < count[i]; j++) {
            size_t u = 0;
            while (u < nuniq && memcmp(&uniq[u], &c[j], sizeof uniq[u]))
                u++;
            if (u == nuniq)
                uniq[nuniq++] = c[j];
            uidx[i * per + j] = u;
        }
        T.total += count[i];
        r->candidates = (int)count[i];
    }
    /* the host's copies of the outputs, once for the largest */
    size_t out_bytes = 16;
    for (size_t i = 0; i < n; i++) {
        const size_t b = qjit_desc_bytes(d->out, problems[i].m, problems[i].n);
        out_bytes = b > out_bytes ? b : out_bytes;
    }
    if (st == QJIT_OK)
        st = host_buffers(&T, out_bytes);
    /* compile on CPU threads while this thread measures */
    compile_job job = {ctx, uniq, ustatus, udone, nuniq, 0, 0, PTHREAD_MUTEX_INITIALIZER,
                       PTHREAD_COND_INITIALIZER};
    pthread_t tid[64];
    int started = 0;
    if (st == QJIT_OK) {
        if (o->progress)
            o->progress(o->user, "compile", 0, nuniq, "");
        started = compile_start(&job, o->compile_threads, tid, 64);
        T.job = &job;
    }
    for (size_t i = 0; i < n && st == QJIT_OK; i++) {
        st = tune_problem(&T, &problems[i], &cands[i * per], &uidx[i * per], count[i],
                          &results[i]);
        if (st == QJIT_OK && o->progress) /* results[i] is final: a caller can show it now */
            o->progress(o->user, "problem", i + 1, n, "");
    }
    if (started) { /* after an error, the rest of the list is not wanted */
        pthread_mutex_lock(&job.mu);
        job.next = job.n;
        pthread_mutex_unlock(&job.mu);
        for (int t = 0; t < started; t++)
            pthread_join(tid[t], NULL);
    }
    if (st == QJIT_OK && o->progress)
        o->progress(o->user, "time", T.total, T.total, "");
    if (T.ref)
        host_buffers_free(&T);
    free(cands);
    free(count);
    free(uniq);
    free(uidx);
    free(ustatus);
    free(udone);
    return st;
}
