/* testlib.c — counters and scratch directories for the tests. */
#include "testlib.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int tl_passed, tl_failed;

int tl_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

/* The scratch directories this process made, removed when it exits (not by the
 * children it forks, which exit while the parent still uses them).  QJIT_TEST_KEEP=1
 * keeps them for a look after a failure. */
static char **made;
static size_t nmade;
static pid_t maker;

static void remove_all(void)
{
    const char *keep = getenv("QJIT_TEST_KEEP");
    if (getpid() != maker)
        return;
    for (size_t i = 0; i < nmade; i++) {
        if (!(keep && *keep && strcmp(keep, "0") != 0)) {
            char cmd[1100];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", made[i]);
            if (system(cmd) != 0)
                fprintf(stderr, "testlib: could not remove %s\n", made[i]);
        }
        free(made[i]);
    }
    free(made);
    made = NULL;
    nmade = 0;
}

static void remember(const char *p)
{
    for (size_t i = 0; i < nmade; i++)
        if (strcmp(made[i], p) == 0)
            return;
    char **m = realloc(made, (nmade + 1) * sizeof *m);
    char *copy = strdup(p);
    if (!m || !copy) {
        free(copy);
        if (m)
            made = m;
        return;
    }
    made = m;
    made[nmade++] = copy;
    if (nmade == 1) {
        maker = getpid();
        atexit(remove_all);
    }
}

const char *tl_tmpdir(const char *tag)
{
    static char path[4][1024];
    static int slot;
    char *p = path[slot++ % 4];
    const char *base = getenv("TMPDIR");
    snprintf(p, 1024, "%s/qjit-test-%s-%d", base ? base : "/tmp", tag, (int)getpid());
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0)
        return NULL;
    if (mkdir(p, 0755) != 0)
        return NULL;
    remember(p);
    return p;
}

const char *const tl_shipped_gpus[] = {"h100", "h200"};
const int tl_nshipped_gpus = (int)(sizeof tl_shipped_gpus / sizeof tl_shipped_gpus[0]);

const char *tl_shipped_records(const char *name)
{
    static char found[4][1024];
    static int slot;
    char *p = found[slot++ % 4];
    snprintf(p, 1024, "%s/tune/%s.db", QJIT_BINARY_DIR, name);
    if (access(p, R_OK) == 0)
        return p;
    snprintf(p, 1024, "build/tune/%s.db", name);
    if (access(p, R_OK) == 0)
        return p;
    char archive[1024];
    snprintf(archive, sizeof archive, "cache/tune/%s.db.tar.xz", name);
    if (access(archive, R_OK) != 0)
        snprintf(archive, sizeof archive, "%s/cache/tune/%s.db.tar.xz", QJIT_SOURCE_DIR, name);
    if (access(archive, R_OK) != 0)
        return NULL;
    const char *dir = tl_tmpdir(name);
    if (!dir)
        return NULL;
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "tar -xJf '%s' -C '%s'", archive, dir);
    if (system(cmd) != 0)
        return NULL;
    snprintf(p, 1024, "%s/%s.db", dir, name);
    return access(p, R_OK) == 0 ? p : NULL;
}

/* whether text holds one of the '|'-separated parts of any, each of any length (a whole
 * resolved descriptor among them) */
int tl_matches_any(const char *text, const char *any)
{
    const size_t len = strlen(text);
    for (const char *p = any;;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        for (size_t i = 0; i + n <= len; i++)
            if (!strncmp(text + i, p, n))
                return 1;
        if (!bar)
            return 0;
        p = bar + 1;
    }
}

int tl_run(const char *tool, const char *const *args, const char *const *env, char *out,
           size_t cap)
{
    const char *argv[32] = {tool};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    out[0] = 0;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    char sink[4096];
    for (;;) { /* read to the end, keeping what fits, so the child never blocks */
        char *to = len < cap - 1 ? out + len : sink;
        size_t room = len < cap - 1 ? cap - 1 - len : sizeof sink;
        ssize_t got = read(fds[0], to, room);
        if (got <= 0)
            break;
        if (to != sink)
            len += (size_t)got;
    }
    out[len] = 0;
    close(fds[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
