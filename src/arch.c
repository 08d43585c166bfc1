/*
 * arch.c — every fact qjit holds about a target architecture: its name, the NVRTC
 * target it compiles for, the shared memory one block may use there, which devices run
 * its cubins, and which target a device gets.  One table; nothing else restates it.
 */
#include "qjit_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct arch_facts {
    qjit_arch arch;
    const char *name;        /* descriptor text and cache rows: "sm_90a" */
    const char *nvrtc;       /* --gpu-architecture= value */
    unsigned smem_limit;     /* dynamic shared memory a block may opt into, bytes */
    int major, minor;        /* the compute capability it is made for */
    bool exact;              /* cubins run only on that capability (arch-specific features) */
} arch_facts;

/* In order: a lower entry's kernels may be chosen for a higher one's device. */
static const arch_facts archs[] = {
    {QJIT_ARCH_SM80, "sm_80", "sm_80", 166912, 8, 0, false},
    {QJIT_ARCH_SM86, "sm_86", "sm_86", 101376, 8, 6, false},
    {QJIT_ARCH_SM89, "sm_89", "sm_89", 101376, 8, 9, false},
    /* sm_90a: wgmma and setmaxnreg exist only in the arch-specific target */
    {QJIT_ARCH_SM90A, "sm_90a", "sm_90a", 232448, 9, 0, true},
};
#define NARCHS (int)(sizeof archs / sizeof archs[0])

static const arch_facts *facts(qjit_arch a)
{
    for (int i = 0; i < NARCHS; i++)
        if (archs[i].arch == a)
            return &archs[i];
    return NULL;
}

QJIT_API const char *qjit_arch_name(qjit_arch a)
{
    if (a == QJIT_ARCH_AUTO)
        return "auto";
    const arch_facts *f = facts(a);
    return f ? f->name : NULL;
}

const char *qjit_arch_nvrtc_target(qjit_arch a)
{
    const arch_facts *f = facts(a);
    return f ? f->nvrtc : NULL;
}

unsigned qjit_arch_smem_limit(qjit_arch a)
{
    const arch_facts *f = facts(a);
    return f ? f->smem_limit : 0;
}

int qjit_arch_count(void) { return NARCHS; }

qjit_arch qjit_arch_at(int i) { return i >= 0 && i < NARCHS ? archs[i].arch : QJIT_ARCH_AUTO; }

bool qjit_arch_parse(const char *s, size_t n, qjit_arch *out)
{
    if (n == 4 && memcmp(s, "auto", 4) == 0) {
        *out = QJIT_ARCH_AUTO;
        return true;
    }
    for (int i = 0; i < NARCHS; i++)
        if (strlen(archs[i].name) == n && memcmp(s, archs[i].name, n) == 0) {
            *out = archs[i].arch;
            return true;
        }
    /* "sm_90" names the only sm_90 target qjit has */
    if (n == 5 && memcmp(s, "sm_90", 5) == 0) {
        *out = QJIT_ARCH_SM90A;
        return true;
    }
    return false;
}

static char arch_list[128];
static pthread_once_t arch_list_once = PTHREAD_ONCE_INIT;

static void arch_list_init(void)
{
    size_t n = 0;
    for (int i = 0; i < NARCHS; i++)
        n += (size_t)snprintf(arch_list + n, sizeof arch_list - n, "%s ", archs[i].name);
    snprintf(arch_list + n, sizeof arch_list - n, "(sm_90 names sm_90a) auto");
}

const char *qjit_arch_list(void)
{
    pthread_once(&arch_list_once, arch_list_init);
    return arch_list;
}

qjit_arch qjit_arch_for_device(int major, int minor)
{
    const arch_facts *best = NULL;
    for (int i = 0; i < NARCHS; i++) {
        const arch_facts *f = &archs[i];
        if (f->exact ? (major == f->major && minor == f->minor)
                     : (major == f->major && minor >= f->minor))
            best = f;
    }
    return best ? best->arch : QJIT_ARCH_AUTO;
}

bool qjit_arch_runs_on(qjit_arch a, int major, int minor)
{
    const arch_facts *f = facts(a);
    if (!f)
        return false;
    if (f->exact)
        return major == f->major && minor == f->minor;
    return major == f->major && minor >= f->minor;
}

bool qjit_arch_at_least(qjit_arch a, qjit_arch floor)
{
    const arch_facts *fa = facts(a), *ff = facts(floor);
    if (!fa || !ff)
        return false;
    if (ff->exact) /* an arch-specific floor: only that target has its instructions */
        return fa == ff;
    return fa >= ff;
}
