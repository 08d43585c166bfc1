/* testlib.c — counters and scratch directories for the tests. */
#include "testlib.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tl_passed, tl_failed;

int tl_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
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
    return p;
}

int tl_matches_any(const char *text, const char *any)
{
    char part[64];
    for (const char *p = any;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(part, sizeof part, "%.*s", (int)n, p);
        if (strstr(text, part))
            return 1;
        if (!bar)
            return 0;
        p = bar + 1;
    }
}
