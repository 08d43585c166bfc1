/*
 * qjit-cache.c — inspect and maintain a qjit kernel cache DB for deployment: list,
 * stats, verify/repair, prune, export a subset to ship, merge, show a kernel's source.
 * Uses only the public API (qjit.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <qjit.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: qjit-cache [--db PATH] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  list [--arch A] [--match S] [--key HEX]   kernels, one per line (A: sm_80, sm_86,\n"
    "                                            sm_89 or sm_90a)\n"
    "  tuning [--arch A] [--match S]             tuning results (qjit-tune), winners marked *\n"
    "  stats                                     rows, bytes, per-arch counts, file size\n"
    "  verify [--repair]                         recheck every row and the file; --repair\n"
    "                                            deletes bad rows / rebuilds a damaged file\n"
    "  prune --older-than DAYS | --max-size SIZE delete rows unused for DAYS, or least\n"
    "                                            recently used ones and vacuum until the\n"
    "                                            file is at most SIZE (500M, 2G)\n"
    "  vacuum                                    give free pages back to the file system\n"
    "  export OUT.db [--arch A] [--match S]      copy matching kernels and tuning results\n"
    "                                            to a new file to ship\n"
    "                                            (qjit_options.shipped_cache)\n"
    "  merge OTHER.db                            add another DB's rows (verified)\n"
    "  source KEYPREFIX                          print a kernel's generated CUDA source\n"
    "  path                                      print the default DB path\n"
    "\n"
    "--db defaults to $QJIT_CACHE_DIR/qjit.db, else $XDG_CACHE_HOME/qjit/qjit.db, else\n"
    "~/.cache/qjit/qjit.db.  Exit status: 0 ok, 1 failure or problems found, 2 usage.\n";

static int fail(const char *what)
{
    fprintf(stderr, "qjit-cache: %s: %s\n", what, qjit_last_error());
    return 1;
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "qjit-cache: ");
    fprintf(stderr, fmt, arg ? arg : "");
    fprintf(stderr, "\n(qjit-cache --help for usage)\n");
    return 2;
}

static void human(uint64_t n, char *out, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%" PRIu64 " B", n);
    else
        snprintf(out, cap, "%.1f %s", v, unit[u]);
}

/* "500M", "2G", "1.5GiB", "123456" -> bytes; -1 if not a size. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v * mul > 1.8e19)
        return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

static void when(int64_t t, char *out, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !localtime_r(&tt, &tm) || !strftime(out, cap, "%Y-%m-%d %H:%M", &tm))
        snprintf(out, cap, "-");
}

/* ---------------------------------------------------------------- commands */

static int print_entry(void *user, const qjit_cache_entry *e)
{
    char cubin[32], source[32], used[32];
    human(e->cubin_bytes, cubin, sizeof cubin);
    human(e->source_bytes, source, sizeof source);
    when(e->last_used, used, sizeof used);
    printf("%s  %-7s %10s %10s %9.1f  %-16s  %s\n", e->key, e->arch, cubin, source,
           e->compile_ms, used, e->desc);
    ++*(uint64_t *)user;
    return 0;
}

static int cmd_list(qjit_cache_db *db, const qjit_cache_filter *f)
{
    uint64_t n = 0;
    printf("%-32s  %-7s %10s %10s %9s  %-16s  %s\n", "KEY", "ARCH", "CUBIN", "SOURCE",
           "COMPILE_MS", "LAST USED", "DESCRIPTOR");
    if (qjit_cache_db_list(db, f, print_entry, &n) != QJIT_OK)
        return fail("list");
    printf("%" PRIu64 " kernel%s\n", n, n == 1 ? "" : "s");
    return 0;
}

static int print_tuning(void *user, const qjit_cache_tuning_entry *e)
{
    int *n = user;
    if ((*n)++ == 0)
        printf("  %-24s %-7s %6s %6s %6s %5s %10s  %s\n", "GPU", "ARCH", "M", "N", "K", "OK",
               "US", "PROBLEM / CONFIG");
    printf("%c %-24.24s %-7s %6lld %6lld %6lld %5s %10.2f  %s\n%66s%s\n", e->winner ? '*' : ' ',
           e->gpu, e->arch, (long long)e->m, (long long)e->n, (long long)e->k,
           e->ok ? "yes" : "NO", e->us, e->problem, "", e->config);
    return 0;
}

static int cmd_tuning(qjit_cache_db *db, const qjit_cache_filter *f)
{
    int n = 0;
    if (qjit_cache_db_tuning(db, f, print_tuning, &n) != QJIT_OK)
        return fail("tuning");
    printf("%d tuning result%s\n", n, n == 1 ? "" : "s");
    return 0;
}

static int cmd_stats(qjit_cache_db *db, const char *path)
{
    qjit_cache_stats s;
    char a[32], b[32], c[32];
    if (qjit_cache_db_stats(db, &s) != QJIT_OK)
        return fail("stats");
    human(s.file_bytes, a, sizeof a);
    printf("database  %s (%s on disk, schema %d)\n", path, a, s.schema_version);
    human(s.cubin_bytes, a, sizeof a);
    human(s.source_bytes, b, sizeof b);
    human(s.cubin_bytes + s.source_bytes, c, sizeof c);
    printf("kernels   %" PRIu64 " (cubin %s + source %s = %s)\n", s.rows, a, b, c);
    for (int i = 0; i < s.narch; i++) {
        human(s.arch[i].bytes, a, sizeof a);
        printf("  %-8s %8" PRIu64 "  %s\n", s.arch[i].arch, s.arch[i].rows, a);
    }
    printf("tuning    %" PRIu64 " results\n", s.tuning_rows);
    return 0;
}

static void print_bad(void *user, const char *key, const char *desc, const char *why)
{
    char clean[200];
    size_t i = 0;
    (void)user;
    /* a damaged row's text may hold any bytes: keep the terminal sane */
    for (; i < sizeof clean - 1 && desc[i]; i++)
        clean[i] = desc[i] >= 0x20 && desc[i] < 0x7f ? desc[i] : '?';
    clean[i] = 0;
    printf("bad row %s: %s  (%s)\n", key[0] ? key : "(no key)", why, clean);
}

static int cmd_verify(qjit_cache_db *db, const char *path, int repair)
{
    qjit_cache_verify_report r;
    if (qjit_cache_db_verify(db, repair, print_bad, NULL, &r) != QJIT_OK)
        return fail("verify");
    printf("file      %s\n", r.integrity_ok ? "ok" : r.integrity);
    printf("rows      %" PRIu64 " checked, %" PRIu64 " bad", r.rows_checked, r.rows_bad);
    if (repair)
        printf(", %" PRIu64 " removed", r.rows_deleted);
    printf("\ntuning    %" PRIu64 " checked, %" PRIu64 " bad%s\n", r.tuning_checked, r.tuning_bad,
           repair && r.tuning_bad ? " (removed)" : "");
    if (r.rebuilt)
        printf("rebuilt   kept %" PRIu64 " kernel%s, lost %" PRIu64 "%s; the damaged file is "
               "%s.corrupt\n",
               r.rows_kept, r.rows_kept == 1 ? "" : "s", r.rows_deleted,
               r.rows_kept + r.rows_deleted == 0 ? " (none of its rows could be read)" : "",
               path);
    if (repair) {
        /* check what the repair left */
        if (qjit_cache_db_verify(db, 0, print_bad, NULL, &r) != QJIT_OK)
            return fail("verify after repair");
        printf("after     file %s, %" PRIu64 " rows, %" PRIu64 " bad\n",
               r.integrity_ok ? "ok" : r.integrity, r.rows_checked, r.rows_bad);
    }
    return r.integrity_ok && r.rows_bad == 0 && r.tuning_bad == 0 ? 0 : 1;
}

static int cmd_prune(qjit_cache_db *db, const char *days, const char *size)
{
    uint64_t removed = 0, cap = 0;
    if (days) {
        char *end;
        errno = 0;
        double d = strtod(days, &end);
        if (errno || end == days || *end || d < 0 || d > 1e6)
            return bad_usage("--older-than wants a number of days, not \"%s\"", days);
        if (qjit_cache_db_prune_age(db, (int64_t)(d * 86400.0), &removed) != QJIT_OK)
            return fail("prune");
        printf("removed %" PRIu64 " kernel%s unused for %s days\n", removed,
               removed == 1 ? "" : "s", days);
    }
    if (size) {
        if (parse_size(size, &cap) != 0)
            return bad_usage("--max-size wants a size like 500M or 2G, not \"%s\"", size);
        if (qjit_cache_db_prune_size(db, cap, &removed) != QJIT_OK)
            return fail("prune");
        char h[32], f[32];
        qjit_cache_stats s;
        human(cap, h, sizeof h);
        if (qjit_cache_db_stats(db, &s) != QJIT_OK)
            return fail("stats after prune");
        human(s.file_bytes, f, sizeof f);
        printf("removed %" PRIu64 " least recently used kernel%s: the file is %s, the cap %s%s\n",
               removed, removed == 1 ? "" : "s", f, h,
               s.file_bytes > cap ? " (it holds no kernels; an empty cache is this size)" : "");
    }
    return 0;
}

static int cmd_source(qjit_cache_db *db, const char *prefix)
{
    char *src = NULL;
    size_t len = 0;
    qjit_cache_entry e;
    if (qjit_cache_db_source(db, prefix, &src, &len, &e) != QJIT_OK)
        return fail("source");
    printf("// key %s arch %s\n// %s\n", e.key, e.arch, e.desc);
    fwrite(src, 1, len, stdout);
    if (len && src[len - 1] != '\n')
        printf("\n");
    qjit_cache_free(src);
    return 0;
}

/* ---------------------------------------------------------------- main */

/* --arch names one target as descriptors do (read by the library's own parser), so that
 * a target qjit has no kernels for is refused, not listed as "0 kernels"; the name
 * given becomes the canonical one, and an alias (sm_90) is said to be one. */
static int check_arch(const char **arch)
{
    char text[64], list[160] = "";
    qjit_gemm_desc d;
    const char *name = *arch;
    if (!strchr(name, ' ') && !strchr(name, '\t') &&
        snprintf(text, sizeof text, "gemm arch=%s", name) < (int)sizeof text &&
        qjit_gemm_desc_parse(text, &d) == QJIT_OK && d.arch != QJIT_ARCH_AUTO) {
        *arch = qjit_arch_name(d.arch);
        if (strcmp(name, *arch) != 0)
            fprintf(stderr, "qjit-cache: note: --arch %s is taken as %s\n", name, *arch);
        return 0;
    }
    for (int a = 1; a < 128; a++) {
        const char *n = qjit_arch_name((qjit_arch)a);
        if (n)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "",
                     n);
    }
    fprintf(stderr, "qjit-cache: --arch: bad target '%s' (expected one of %s)\n"
                    "(qjit-cache --help for usage)\n",
            name, list);
    return 2;
}

/* Take the value of "--name VALUE" or "--name=VALUE" at argv[*i]; NULL if not this one. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != 0)
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int main(int argc, char **argv)
{
    const char *db_path = NULL, *cmd = NULL, *arch = NULL, *match = NULL, *key = NULL;
    const char *days = NULL, *size = NULL;
    const char *pos[4] = {0};
    int npos = 0, repair = 0, rc = 0;
    qjit_cache_db *db = NULL;

    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if ((v = opt_value(argc, argv, &i, "--db", &missing))) {
            db_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--arch", &missing))) {
            arch = v;
        } else if ((v = opt_value(argc, argv, &i, "--match", &missing))) {
            match = v;
        } else if ((v = opt_value(argc, argv, &i, "--key", &missing))) {
            key = v;
        } else if ((v = opt_value(argc, argv, &i, "--older-than", &missing))) {
            days = v;
        } else if ((v = opt_value(argc, argv, &i, "--max-size", &missing))) {
            size = v;
        } else if (!strcmp(argv[i], "--repair")) {
            repair = 1;
        } else if (missing) {
            return bad_usage("%s needs a value", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return bad_usage("unknown option %s", argv[i]);
        } else if (!cmd) {
            cmd = argv[i];
        } else if (npos < 4) {
            pos[npos++] = argv[i];
        } else {
            return bad_usage("too many arguments (%s)", argv[i]);
        }
    }
    if (!cmd)
        return bad_usage("no command%s", "");

    /* which commands take what */
    static const struct {
        const char *name;
        int npos, writable, filter;
    } cmds[] = {
        {"list", 0, 0, 1},   {"stats", 0, 0, 0},  {"verify", 0, 0, 0}, {"prune", 0, 1, 0},
        {"vacuum", 0, 1, 0}, {"export", 1, 0, 1}, {"merge", 1, 1, 0},  {"source", 1, 0, 0},
        {"path", 0, 0, 0},   {"tuning", 0, 0, 1},
    };
    int c = -1;
    for (int i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++)
        if (!strcmp(cmd, cmds[i].name))
            c = i;
    if (c < 0)
        return bad_usage("unknown command \"%s\"", cmd);
    if (npos != cmds[c].npos)
        return bad_usage(cmds[c].npos ? "%s needs one argument" : "%s takes no argument", cmd);
    if (!cmds[c].filter && (arch || match || key))
        return bad_usage("--arch, --match and --key go with list, tuning and export, not %s", cmd);
    if (strcmp(cmd, "prune") != 0 && (days || size))
        return bad_usage("--older-than and --max-size go with prune, not %s", cmd);
    if (strcmp(cmd, "verify") != 0 && repair)
        return bad_usage("--repair goes with verify, not %s", cmd);
    if (!strcmp(cmd, "prune") && !days && !size)
        return bad_usage("prune needs --older-than DAYS or --max-size SIZE%s", "");
    if (arch && check_arch(&arch) != 0)
        return 2;

    char def[4096];
    if (!db_path) {
        if (qjit_cache_default_path(def, sizeof def, NULL) != QJIT_OK)
            return fail("default cache path");
        db_path = def;
    }
    if (!strcmp(cmd, "path")) {
        printf("%s\n", db_path);
        return 0;
    }

    int writable = cmds[c].writable || repair;
    if (qjit_cache_db_open(db_path, writable, &db) != QJIT_OK)
        return fail("open");
    qjit_cache_filter f = {arch, match, key};
    if (!strcmp(cmd, "list")) {
        rc = cmd_list(db, &f);
    } else if (!strcmp(cmd, "tuning")) {
        rc = cmd_tuning(db, &f);
    } else if (!strcmp(cmd, "stats")) {
        rc = cmd_stats(db, db_path);
    } else if (!strcmp(cmd, "verify")) {
        rc = cmd_verify(db, db_path, repair);
    } else if (!strcmp(cmd, "prune")) {
        rc = cmd_prune(db, days, size);
    } else if (!strcmp(cmd, "vacuum")) {
        rc = qjit_cache_db_vacuum(db) == QJIT_OK ? 0 : fail("vacuum");
    } else if (!strcmp(cmd, "export")) {
        uint64_t copied = 0, bad = 0;
        if (qjit_cache_db_export(db, pos[0], &f, &copied, &bad) != QJIT_OK) {
            rc = fail("export");
        } else {
            printf("exported %" PRIu64 " kernel%s to %s", copied, copied == 1 ? "" : "s",
                   pos[0]);
            if (bad)
                printf(" (%" PRIu64 " bad row%s skipped)", bad, bad == 1 ? "" : "s");
            printf("\n");
        }
    } else if (!strcmp(cmd, "merge")) {
        uint64_t added = 0, bad = 0;
        if (qjit_cache_db_merge(db, pos[0], &added, &bad) != QJIT_OK) {
            rc = fail("merge");
        } else {
            printf("merged %" PRIu64 " new kernel%s from %s", added, added == 1 ? "" : "s",
                   pos[0]);
            if (bad)
                printf(" (%" PRIu64 " bad row%s skipped)", bad, bad == 1 ? "" : "s");
            printf("\n");
        }
    } else if (!strcmp(cmd, "source")) {
        rc = cmd_source(db, pos[0]);
    }
    qjit_cache_db_close(db);
    return rc;
}
