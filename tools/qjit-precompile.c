/*
 * qjit-precompile — fill the kernel cache offline from manifests of descriptors, for
 * named architectures, with no GPU.  Uses only the public API in qjit.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "qjit.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TEXT_CAP 256
#define MAX_ARCHS 8

static const char usage_text[] =
    "usage: qjit-precompile [-j N] [--arch sm_80,sm_90a,...] [--cache-dir DIR] [--quiet]\n"
    "                       MANIFEST...\n"
    "\n"
    "Compiles every kernel a manifest names into the qjit cache, with no GPU.\n"
    "A manifest holds one descriptor per line in the canonical text form, e.g.\n"
    "  gemm a=bf16 b=bf16 out=bf16 tile=128x128x32 warps=2x2 stages=4 arch=sm_90a\n"
    "  quant in=bf16 out=e4m3 scale=mx rule=rceil\n"
    "'#' starts a comment; blank lines are ignored.  A line with auto fields gives\n"
    "every kernel qjit_get_gemm loads for it on that architecture (one per run of\n"
    "M buckets, and the tuned winners the cache holds), or, when the line ends in\n"
    "sweep=NAME, every configuration of that named sweep (default, small-m).\n"
    "\n"
    "  -j N             worker threads (default: all online cores)\n"
    "  --arch LIST      compile every descriptor for each of these targets (sm_80,\n"
    "                   sm_86, sm_89, sm_90a); default: the descriptor's arch, and\n"
    "                   sm_90a where that is auto\n"
    "  --cache-dir DIR  the writable cache directory (default: $QJIT_CACHE_DIR, else\n"
    "                   $XDG_CACHE_HOME/qjit, else ~/.cache/qjit)\n"
    "  --quiet          print only failures and the summary\n"
    "\n"
    "Exit status: 0 every kernel compiled or found cached (also when qjit warned and\n"
    "recovered, e.g. repaired a damaged cache), 1 a line, a manifest or a kernel failed\n"
    "or a kernel could not be stored, 2 usage error.\n";

/* ---------------------------------------------------------------- output */

/* One lock orders every line the tool prints, from workers and the log callback. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *arch_name(qjit_arch a)
{
    const char *n = qjit_arch_name(a);
    return n ? n : "?";
}

/* The library's own parser reads arch names, so the tool accepts exactly what
 * descriptors accept (sm_90 meaning sm_90a included). */
static bool parse_arch(const char *name, qjit_arch *out)
{
    char text[64];
    qjit_gemm_desc d;
    if (strchr(name, ' ') || strchr(name, '\t') ||
        snprintf(text, sizeof text, "gemm arch=%s", name) >= (int)sizeof text ||
        qjit_gemm_desc_parse(text, &d) != QJIT_OK || d.arch == QJIT_ARCH_AUTO)
        return false;
    *out = d.arch;
    return true;
}

static void fmt_desc(const qjit_gemm_desc *d, char *buf)
{
    if (qjit_gemm_desc_format(d, buf, TEXT_CAP, NULL) != QJIT_OK)
        snprintf(buf, TEXT_CAP, "gemm (unprintable: %s)", qjit_last_error());
}

/* ---------------------------------------------------------------- jobs */

typedef struct job {
    int quant;             /* 1: a quantization kernel (qdesc), else a GEMM (desc) */
    qjit_gemm_desc desc;   /* resolved */
    qjit_quant_desc qdesc; /* arch named */
    qjit_arch arch;
    char text[TEXT_CAP];
    char *where; /* "file:line" of the first line that asked for it */
    /* results, written by the one worker that ran it */
    qjit_status status;
    int cached;
    double ms;
    char *error;
} job;

/* A failure found before compiling: unreadable file, bad line, unresolvable job. */
typedef struct failure {
    char *where; /* "file:line" or NULL */
    char *what;  /* the descriptor text, or the line */
    char *error;
} failure;

typedef struct run {
    /* options */
    int threads;
    qjit_arch archs[MAX_ARCHS];
    int narchs;
    const char *cache_dir;
    bool quiet, tty;

    qjit_context *ctx;
    job *jobs;
    size_t njobs, jobs_cap;
    failure *fails;
    size_t nfails, fails_cap;
    size_t duplicates, lines;

    /* dedup set of job keys ("<text>" of resolved, or "<arch>|<text>" for failures) */
    char **set;
    size_t set_cap, set_len;

    atomic_size_t next;
    atomic_int warnings;
    /* progress, under out_mu */
    size_t done, compiled, cached, failed;
    bool bar_drawn;
} run;

static char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p) {
        fputs("qjit-precompile: out of memory\n", stderr);
        exit(1);
    }
    return p;
}

static void *grow(void *p, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 64;
    void *q = realloc(p, n * elem);
    if (!q) {
        fputs("qjit-precompile: out of memory\n", stderr);
        exit(1);
    }
    *cap = n;
    return q;
}

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Add key to the set; false when it was already there. */
static bool set_add(run *R, const char *key)
{
    if ((R->set_len + 1) * 2 > R->set_cap) {
        size_t cap = R->set_cap ? R->set_cap * 2 : 256;
        char **s = calloc(cap, sizeof *s);
        if (!s) {
            fputs("qjit-precompile: out of memory\n", stderr);
            exit(1);
        }
        for (size_t i = 0; i < R->set_cap; i++)
            if (R->set[i]) {
                size_t j = str_hash(R->set[i]) & (cap - 1);
                while (s[j])
                    j = (j + 1) & (cap - 1);
                s[j] = R->set[i];
            }
        free(R->set);
        R->set = s;
        R->set_cap = cap;
    }
    size_t j = str_hash(key) & (R->set_cap - 1);
    while (R->set[j]) {
        if (strcmp(R->set[j], key) == 0)
            return false;
        j = (j + 1) & (R->set_cap - 1);
    }
    R->set[j] = xstrdup(key);
    R->set_len++;
    return true;
}

static void add_failure(run *R, const char *where, const char *what, const char *error)
{
    if (R->nfails == R->fails_cap)
        R->fails = grow(R->fails, &R->fails_cap, sizeof *R->fails);
    failure *f = &R->fails[R->nfails++];
    f->where = where ? xstrdup(where) : NULL;
    f->what = xstrdup(what);
    f->error = xstrdup(error);
    /* Shown at once too, so that a long run does not hide it until the end. */
    pthread_mutex_lock(&out_mu);
    if (where)
        fprintf(stderr, "qjit-precompile: %s: %s\n", where, error);
    else
        fprintf(stderr, "qjit-precompile: FAILED %s: %s\n", what, error);
    pthread_mutex_unlock(&out_mu);
}

/* A descriptor that cannot be queued for arch (its text `in`): reported once per
 * (arch, descriptor) with the message err. */
static void refuse(run *R, const char *in, qjit_arch arch, const char *where, const char *err)
{
    char what[TEXT_CAP + 32];
    snprintf(what, sizeof what, "%s (for %s)", in, arch_name(arch));
    if (set_add(R, what))
        add_failure(R, where, what, err);
    else
        R->duplicates++;
}

/* A new job for the kernel of canonical text `text`, or NULL when it is queued already. */
static job *push_job(run *R, const char *text, qjit_arch arch, const char *where)
{
    if (!set_add(R, text)) {
        R->duplicates++;
        return NULL;
    }
    if (R->njobs == R->jobs_cap)
        R->jobs = grow(R->jobs, &R->jobs_cap, sizeof *R->jobs);
    job *j = &R->jobs[R->njobs++];
    memset(j, 0, sizeof *j);
    j->arch = arch;
    j->where = xstrdup(where);
    snprintf(j->text, sizeof j->text, "%s", text);
    return j;
}

/* Queue every kernel a get of d loads on arch (one per run of M buckets, and the tuned
 * winners this cache holds for d, of every GPU), each unless the same kernel is queued.
 * The variants are counted first: a descriptor tuned on many layers has hundreds. */
static void add_job(run *R, const qjit_gemm_desc *d, qjit_arch arch, const char *where)
{
    size_t n = 0, got = 0;
    char text[TEXT_CAP];
    qjit_gemm_variant *v = NULL;
    qjit_status st = qjit_gemm_variants(R->ctx, d, arch, NULL, 0, &n);
    if (st == QJIT_OK) {
        v = calloc(n ? n : 1, sizeof *v);
        if (!v) {
            fputs("qjit-precompile: out of memory\n", stderr);
            exit(1);
        }
        st = qjit_gemm_variants(R->ctx, d, arch, v, n, &got);
    }
    if (st != QJIT_OK) {
        char *err = xstrdup(qjit_last_error());
        fmt_desc(d, text);
        refuse(R, text, arch, where, err);
        free(err);
        free(v);
        return;
    }
    for (size_t i = 0; i < got && i < n; i++) {
        fmt_desc(&v[i].desc, text);
        job *j = push_job(R, text, arch, where);
        if (j)
            j->desc = v[i].desc;
    }
    free(v);
}

/* Queue a quantization kernel for arch (its own arch when it names one), unless queued. */
static void add_quant_job(run *R, const qjit_quant_desc *d, qjit_arch arch, const char *where)
{
    qjit_quant_desc r = *d;
    if (r.arch == QJIT_ARCH_AUTO)
        r.arch = arch;
    char text[TEXT_CAP];
    if (qjit_quant_desc_validate(&r) != QJIT_OK ||
        qjit_quant_desc_format(&r, text, sizeof text, NULL) != QJIT_OK) {
        char *err = xstrdup(qjit_last_error());
        if (qjit_quant_desc_format(d, text, sizeof text, NULL) != QJIT_OK)
            snprintf(text, sizeof text, "quant (unprintable)");
        refuse(R, text, arch, where, err);
        free(err);
        return;
    }
    job *j = push_job(R, text, r.arch, where);
    if (j) {
        j->quant = 1;
        j->qdesc = r;
    }
}

/* Queue one manifest line for one arch: its resolved kernel, or each point of a sweep. */
static void add_line(run *R, const qjit_gemm_desc *d, qjit_arch arch, const char *sweep,
                     const char *where)
{
    if (!*sweep) {
        add_job(R, d, arch, where);
        return;
    }
    size_t n = 0;
    qjit_gemm_desc pts[64];
    if (qjit_gemm_sweep(R->ctx, d, arch, sweep, pts, 64, &n) != QJIT_OK) {
        char in[TEXT_CAP];
        fmt_desc(d, in);
        add_failure(R, where, in, qjit_last_error());
        return;
    }
    for (size_t i = 0; i < n && i < 64; i++)
        add_job(R, &pts[i], arch, where);
}

/* Whether a manifest holds a line that parses: with none in any manifest, the run makes
 * no context, so bad input writes nothing (no cache directory, no empty qjit.db). */
static bool has_item(const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    bool any = false;
    while (f && !any && getline(&line, &cap, f) >= 0) {
        qjit_manifest_item it;
        any = qjit_manifest_line(line, &it) == QJIT_OK;
    }
    free(line);
    if (f)
        fclose(f);
    return any;
}

/* Read one manifest: every line a descriptor, '#' to end of line a comment. */
static void read_manifest(run *R, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot open manifest: %s", strerror(errno));
        add_failure(R, path, "", msg);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    for (long lineno = 1; (n = getline(&line, &cap, f)) >= 0; lineno++) {
        char where[1024];
        snprintf(where, sizeof where, "%s:%ld", path, lineno);
        qjit_manifest_item it;
        qjit_status st = qjit_manifest_line(line, &it);
        if (st == QJIT_ERROR_NOT_FOUND)
            continue;
        R->lines++;
        if (st != QJIT_OK) {
            line[strcspn(line, "#\r\n")] = 0;
            add_failure(R, where, line, qjit_last_error());
            continue;
        }
        if (!R->ctx) { /* has_item found no good line before */
            add_failure(R, where, "", "the manifest changed while it was read");
            continue;
        }
        qjit_arch own = it.kind == QJIT_MANIFEST_QUANT ? it.quant.arch : it.gemm.arch;
        int narchs = R->narchs > 0 ? R->narchs : 1;
        for (int i = 0; i < narchs; i++) {
            qjit_arch a = R->narchs > 0 ? R->archs[i]
                          : own != QJIT_ARCH_AUTO ? own : QJIT_ARCH_SM90A;
            if (it.kind == QJIT_MANIFEST_QUANT)
                add_quant_job(R, &it.quant, a, where);
            else
                add_line(R, &it.gemm, a, it.sweep, where);
        }
    }
    if (ferror(f)) {
        char msg[512];
        snprintf(msg, sizeof msg, "read error: %s", strerror(errno));
        add_failure(R, path, "", msg);
    }
    free(line);
    fclose(f);
}

/* ---------------------------------------------------------------- progress */

static size_t total_of(const run *R) { return R->njobs + R->nfails; }

/* Under out_mu.  "[=====>    ] 37/120  compiled 30, cached 5, failed 2" */
static void draw_bar(run *R)
{
    enum { WIDTH = 30 };
    size_t total = total_of(R);
    size_t fill = total ? R->done * WIDTH / total : WIDTH;
    char bar[WIDTH + 1];
    for (size_t i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[WIDTH] = 0;
    fprintf(stderr, "\r[%s] %zu/%zu  compiled %zu, cached %zu, failed %zu\033[K", bar, R->done,
            total, R->compiled, R->cached, R->failed);
    fflush(stderr);
    R->bar_drawn = true;
}

/* Under out_mu: print a line where the bar is (the caller draws it again). */
static void print_line(run *R, FILE *to, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void print_line(run *R, FILE *to, const char *fmt, ...)
{
    if (R->bar_drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(to, fmt, ap);
    va_end(ap);
    fflush(to);
}

/* The library's message usually begins with the descriptor; do not print it twice. */
static const char *without_text(const job *j)
{
    const char *e = j->error ? j->error : "(no message)";
    size_t n = strlen(j->text);
    if (strncmp(e, j->text, n) == 0 && e[n] == ':' && e[n + 1] == ' ')
        return e + n + 2;
    return e;
}

static void report(run *R, job *j)
{
    pthread_mutex_lock(&out_mu);
    R->done++;
    if (j->status != QJIT_OK)
        R->failed++;
    else if (j->cached)
        R->cached++;
    else
        R->compiled++;
    if (j->status != QJIT_OK)
        print_line(R, stderr, "[%zu/%zu] FAILED   %s: %s: %s\n", R->done, total_of(R),
                   j->where, j->text, without_text(j));
    else if (!R->quiet && !R->tty)
        print_line(R, stdout, "[%zu/%zu] %s %s (%.0f ms)\n", R->done, total_of(R),
                   j->cached ? "cached  " : "compiled", j->text, j->ms);
    if (R->tty && !R->quiet)
        draw_bar(R);
    pthread_mutex_unlock(&out_mu);
}

static void log_cb(void *user, qjit_log_level level, const char *message)
{
    run *R = user;
    if (level < QJIT_LOG_WARN)
        return;
    atomic_fetch_add(&R->warnings, 1);
    pthread_mutex_lock(&out_mu);
    print_line(R, stderr, "qjit-precompile: %s: %s\n",
               level == QJIT_LOG_ERROR ? "error" : "warning", message);
    if (R->bar_drawn)
        draw_bar(R);
    pthread_mutex_unlock(&out_mu);
}

/* ---------------------------------------------------------------- workers */

static void *worker(void *arg)
{
    run *R = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&R->next, 1);
        if (i >= R->njobs)
            break;
        job *j = &R->jobs[i];
        double t0 = now_s();
        int cached = 0;
        j->status = j->quant ? qjit_quant_precompile(R->ctx, &j->qdesc, j->arch, &cached)
                             : qjit_gemm_precompile(R->ctx, &j->desc, j->arch, &cached);
        j->ms = (now_s() - t0) * 1e3;
        j->cached = cached;
        if (j->status != QJIT_OK)
            j->error = strdup(qjit_last_error());
        report(R, j);
    }
    return NULL;
}

/* ---------------------------------------------------------------- main */

static int usage_error(const char *fmt, const char *arg)
{
    fputs("qjit-precompile: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(qjit-precompile --help for usage)\n", stderr);
    return 2;
}

static bool add_archs(run *R, const char *list)
{
    char *copy = xstrdup(list), *save = NULL;
    bool ok = true;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        qjit_arch a;
        if (!parse_arch(t, &a)) {
            ok = false;
            break;
        }
        if (strcmp(t, arch_name(a)) != 0) /* sm_90: said, not silently widened */
            fprintf(stderr, "qjit-precompile: note: --arch %s is taken as %s\n", t,
                    arch_name(a));
        bool have = false;
        for (int i = 0; i < R->narchs; i++)
            have |= R->archs[i] == a;
        if (!have && R->narchs < MAX_ARCHS)
            R->archs[R->narchs++] = a;
    }
    free(copy);
    return ok && R->narchs > 0;
}

/* "--name VALUE" or "--name=VALUE"; advances *i over a separate value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != 0)
        return NULL;
    if (*i + 1 >= argc)
        return "";
    return argv[++*i];
}

int main(int argc, char **argv)
{
    double t_start = now_s();
    run R;
    memset(&R, 0, sizeof R);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    R.threads = cores > 0 ? (int)cores : 1;

    const char **manifests = calloc((size_t)argc, sizeof *manifests);
    int nmanifests = 0;
    if (!manifests)
        return 1;
#define USAGE(...)                                                                       \
    do {                                                                                 \
        free(manifests);                                                                 \
        return usage_error(__VA_ARGS__);                                                 \
    } while (0)
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (options_done || a[0] != '-' || a[1] == 0) {
            manifests[nmanifests++] = a;
        } else if (strcmp(a, "--") == 0) {
            options_done = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            free(manifests);
            return 0;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            R.quiet = true;
        } else if (strncmp(a, "-j", 2) == 0) {
            const char *n = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : "";
            char *end;
            errno = 0;
            long j = strtol(n, &end, 10);
            if (!*n || *end || errno || j < 1 || j > 4096)
                USAGE("-j needs a thread count of 1..4096, got '%s'", n);
            R.threads = (int)j;
        } else if ((v = opt_value(argc, argv, &i, "--arch"))) {
            if (!add_archs(&R, v))
                USAGE("--arch: bad target list '%s' (expected names among "
                                   "sm_80, sm_86, sm_89, sm_90a, separated by commas)",
                                   v);
        } else if ((v = opt_value(argc, argv, &i, "--cache-dir"))) {
            if (!*v)
                USAGE("--cache-dir needs a directory%s", "");
            R.cache_dir = v;
        } else {
            USAGE("unknown option '%s'", a);
        }
    }
    if (nmanifests == 0)
        USAGE("no manifest given%s", "");

#undef USAGE
    R.tty = isatty(2) == 1;
    /* past a file-size limit, a write should fail with EFBIG and be reported, not kill us */
    signal(SIGXFSZ, SIG_IGN);
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = R.cache_dir;
    o.log = log_cb;
    o.log_user = &R;
    o.verify_cache = 1; /* a damaged cache is repaired before anything is compiled into it */
    bool any = false;
    for (int i = 0; i < nmanifests && !any; i++)
        any = has_item(manifests[i]);
    qjit_cache_info ci = {.persistent = 1};
    if (any && qjit_context_create(&o, &R.ctx) != QJIT_OK) {
        fprintf(stderr, "qjit-precompile: cannot create a qjit context: %s\n",
                qjit_last_error());
        free(manifests);
        return 1;
    }
    if (R.ctx)
        qjit_context_cache_info(R.ctx, &ci);
    if (!ci.persistent) { /* qjit caches in memory: compiling would store nothing */
        fprintf(stderr, "qjit-precompile: no writable cache (see the warning above); nothing "
                        "was compiled\n");
        qjit_context_destroy(R.ctx);
        free(manifests);
        return 1;
    }
    if (ci.repairs && !R.quiet)
        printf("qjit-precompile: the cache %s was damaged and is repaired (%llu kernel rows "
               "could not be kept); going on\n",
               ci.path, (unsigned long long)ci.rows_dropped);

    for (int i = 0; i < nmanifests; i++)
        read_manifest(&R, manifests[i]);
    R.done = R.failed = R.nfails;

    int nthreads = R.threads;
    if ((size_t)nthreads > R.njobs)
        nthreads = R.njobs ? (int)R.njobs : 1;
    if (!R.quiet) {
        char archs[128] = "";
        for (int i = 0; i < R.narchs; i++)
            snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%s",
                     i ? "," : "", arch_name(R.archs[i]));
        printf("qjit-precompile: %zu kernel%s from %zu descriptor%s in %d manifest%s "
               "(targets: %s), %d thread%s\n",
               R.njobs, R.njobs == 1 ? "" : "s", R.lines, R.lines == 1 ? "" : "s", nmanifests,
               nmanifests == 1 ? "" : "s", R.narchs ? archs : "per descriptor, sm_90a for auto",
               nthreads, nthreads == 1 ? "" : "s");
        fflush(stdout);
    }

    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    int started = 0;
    if (tids) {
        for (; started < nthreads; started++)
            if (pthread_create(&tids[started], NULL, worker, &R) != 0)
                break;
    }
    if (started == 0)
        worker(&R); /* no threads to be had: do the work here */
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    if (R.bar_drawn) {
        fputs("\n", stderr);
        fflush(stderr);
    }

    /* Summary: counts, then every failure with its descriptor and message. */
    double wall = now_s() - t_start;
    size_t ok = R.compiled + R.cached;
    printf("qjit-precompile: %zu compiled, %zu already cached, %zu failed", R.compiled,
           R.cached, R.failed);
    if (R.duplicates)
        printf(" (%zu duplicate%s skipped)", R.duplicates, R.duplicates == 1 ? "" : "s");
    printf(" in %.2f s, %.2f kernels/s\n", wall, wall > 0 ? (double)ok / wall : 0.0);
    int warnings = atomic_load(&R.warnings);
    if (R.ctx)
        qjit_context_cache_info(R.ctx, &ci);
    if (!ci.persistent)
        printf("qjit-precompile: the cache became unusable during the run (%d warning%s "
               "above): kernels reported as compiled may not be stored\n",
               warnings, warnings == 1 ? "" : "s");
    if (R.failed) {
        printf("failures:\n");
        for (size_t i = 0; i < R.nfails; i++) {
            if (R.fails[i].where && !*R.fails[i].what) /* the file itself */
                printf("  %s\n    %s\n", R.fails[i].where, R.fails[i].error);
            else if (R.fails[i].where)
                printf("  %s: %s\n    %s\n", R.fails[i].where, R.fails[i].what,
                       R.fails[i].error);
            else
                printf("  %s\n    %s\n", R.fails[i].what, R.fails[i].error);
        }
        for (size_t i = 0; i < R.njobs; i++)
            if (R.jobs[i].status != QJIT_OK)
                printf("  %s: %s\n    %s: %s\n", R.jobs[i].where, R.jobs[i].text,
                       qjit_status_string(R.jobs[i].status), without_text(&R.jobs[i]));
    }
    fflush(stdout);

    int rc = R.failed || !ci.persistent ? 1 : 0;
    qjit_context_destroy(R.ctx);
    for (size_t i = 0; i < R.njobs; i++) {
        free(R.jobs[i].error);
        free(R.jobs[i].where);
    }
    for (size_t i = 0; i < R.nfails; i++) {
        free(R.fails[i].where);
        free(R.fails[i].what);
        free(R.fails[i].error);
    }
    for (size_t i = 0; i < R.set_cap; i++)
        free(R.set[i]);
    free(R.set);
    free(R.jobs);
    free(R.fails);
    free(manifests);
    return rc;
}
