/*
 * test_sandbox.c — template expansion: holes and Lua lines, #line marks, determinism,
 * includes, chunks parsed once and reused, the sandbox's limits and removed functions, and
 * errors that name the template file and line (from Lua and from NVRTC).
 */
#include "qjit_internal.h"
#include "testlib.h"

#include <string.h>

static const char *dir;

static void put(const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static qjit_status expand(const char *root, qjit_expansion *e)
{
    qjit_tparam p[] = {{"BM", QJIT_TP_INT, 128, NULL},
                       {"A", QJIT_TP_STR, 0, "bf16"},
                       {"BIAS", QJIT_TP_BOOL, 1, NULL}};
    qjit_sandbox_limits lim;
    qjit_sandbox_default_limits(&lim);
    lim.max_steps = 5000000;
    lim.max_memory = 8u << 20;
    return qjit_sandbox_expand(dir, root, p, 3, &lim, e);
}

static void test_holes_and_lines(void)
{
    put("t1.cu", "constexpr int BM = $(BM);\n"
                 "% for i = 0, 2 do\n"
                 "int v$(i) = $(i * (BM + 1));\n"
                 "% end\n"
                 "% if BIAS then\n"
                 "// bias on, type $(A), half $(BM / 2)\n"
                 "% end\n"
                 "tail\n");
    qjit_expansion e;
    CHECK_OK(expand("t1.cu", &e));
    const char *want = "#line 1 \"t1.cu\"\n"
                       "constexpr int BM = 128;\n"
                       "#line 3 \"t1.cu\"\n"
                       "int v0 = 0;\n"
                       "#line 3 \"t1.cu\"\n"
                       "int v1 = 129;\n"
                       "#line 3 \"t1.cu\"\n"
                       "int v2 = 258;\n"
                       "#line 6 \"t1.cu\"\n"
                       "// bias on, type bf16, half 64\n"
                       "#line 8 \"t1.cu\"\n"
                       "tail\n";
    CHECK(e.source.data && strcmp(e.source.data, want) == 0, "got:\n%s", e.source.data);
    CHECK(e.nfiles == 1 && strcmp(e.files[0].name, "t1.cu") == 0, "files %d", e.nfiles);
    qjit_expansion_free(&e);
}

static void test_include_and_determinism(void)
{
    put("inc.cuh", "// included $(BM)\n");
    put("t2.cu", "% local t = {zeta = 1, alpha = 2, mid = 3, [10] = 4, [2] = 5}\n"
                 "% for k, v in pairs(t) do\n"
                 "$(k)=$(v)\n"
                 "% end\n"
                 "% include(\"inc.cuh\")\n"
                 "after\n");
    qjit_expansion a, b;
    CHECK_OK(expand("t2.cu", &a));
    CHECK_OK(expand("t2.cu", &b));
    CHECK(a.source.data && b.source.data && strcmp(a.source.data, b.source.data) == 0,
          "two expansions differ");
    /* numbers sort before strings, each in order */
    const char *p2 = strstr(a.source.data, "2=5"), *p10 = strstr(a.source.data, "10=4");
    const char *pa = strstr(a.source.data, "alpha=2"), *pz = strstr(a.source.data, "zeta=1");
    CHECK(p2 && p10 && pa && pz && p2 < p10 && p10 < pa && pa < pz, "order:\n%s",
          a.source.data);
    CHECK(strstr(a.source.data, "#line 1 \"inc.cuh\"\n// included 128\n") != NULL,
          "include:\n%s", a.source.data);
    CHECK(strstr(a.source.data, "#line 6 \"t2.cu\"\nafter\n") != NULL, "mark after include");
    CHECK(a.nfiles == 2 && strcmp(a.files[1].name, "inc.cuh") == 0, "files list");
    qjit_expansion_free(&a);
    qjit_expansion_free(&b);
}

/* Each file's chunk is parsed once a process and reused (sandbox.c): a file included at a
 * different index, a second expansion from the kept bytecode, a Lua error raised from it,
 * and a file whose text changed under the same name must all come out as a fresh parse. */
static void test_chunks_reused(void)
{
    put("shared.cuh", "// shared $(BM)\n% if A == 'bf16' then\nbf16 here\n% end\n");
    put("first.cuh", "// first\n");
    put("ra.cu", "% include(\"shared.cuh\")\nra tail $(BM + 1)\n");
    put("rb.cu", "% include(\"first.cuh\")\n% include(\"shared.cuh\")\nrb tail\n");
    qjit_expansion a1, b1, a2, b2;
    CHECK_OK(expand("ra.cu", &a1));
    CHECK_OK(expand("rb.cu", &b1));
    CHECK_OK(expand("ra.cu", &a2));
    CHECK_OK(expand("rb.cu", &b2));
    const char *shared = "#line 1 \"shared.cuh\"\n// shared 128\n#line 3 \"shared.cuh\"\nbf16 here\n";
    CHECK(a1.source.data && strstr(a1.source.data, shared) && b1.source.data &&
              strstr(b1.source.data, shared),
          "shared.cuh as file 1 and as file 2:\n%s\n%s", a1.source.data, b1.source.data);
    CHECK(b1.nfiles == 3 && strcmp(b1.files[2].name, "shared.cuh") == 0, "rb's files");
    CHECK(a2.source.data && strcmp(a1.source.data, a2.source.data) == 0, "ra again:\n%s",
          a2.source.data);
    CHECK(b2.source.data && strcmp(b1.source.data, b2.source.data) == 0, "rb again:\n%s",
          b2.source.data);
    qjit_expansion_free(&a1);
    qjit_expansion_free(&b1);
    qjit_expansion_free(&a2);
    qjit_expansion_free(&b2);

    qjit_expansion e;
    put("err2.cu", "line one\n% local x = nil + 1\n");
    for (int i = 0; i < 2; i++) {
        CHECK(expand("err2.cu", &e) == QJIT_ERROR_TEMPLATE, "Lua error not reported (run %d)", i);
        CHECK(strstr(qjit_last_error(), "err2.cu:2:") != NULL, "run %d: %s", i,
              qjit_last_error());
    }
    put("chg.cu", "one $(BM)\n");
    CHECK_OK(expand("chg.cu", &e));
    CHECK(strstr(e.source.data, "one 128") != NULL, "chg.cu: %s", e.source.data);
    qjit_expansion_free(&e);
    put("chg.cu", "two $(BM)\n");
    CHECK_OK(expand("chg.cu", &e));
    CHECK(strstr(e.source.data, "two 128") != NULL && !strstr(e.source.data, "one"),
          "chg.cu changed: %s", e.source.data);
    qjit_expansion_free(&e);
}

static void test_limits(void)
{
    qjit_expansion e;
    put("loop.cu", "% while true do end\n");
    CHECK(expand("loop.cu", &e) == QJIT_ERROR_TEMPLATE, "runaway loop not stopped");
    CHECK(strstr(qjit_last_error(), "budget") != NULL, "msg: %s", qjit_last_error());

    put("mem.cu", "% local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end\n");
    CHECK(expand("mem.cu", &e) == QJIT_ERROR_OUT_OF_MEMORY, "unbounded allocation not stopped");
    CHECK(strstr(qjit_last_error(), "memory") != NULL, "msg: %s", qjit_last_error());

    put("out.cu", "% for i = 1, 1e7 do\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n% end\n");
    CHECK(expand("out.cu", &e) == QJIT_ERROR_TEMPLATE, "unbounded output not stopped");

    static const char *const banned[] = {"io.open('/etc/passwd')", "os.exit(1)",
                                         "require('x')", "load('return 1')",
                                         "dofile('/x')", "debug.traceback()",
                                         "package.loaded", "string.dump(print)", NULL};
    for (int i = 0; banned[i]; i++) {
        char t[256];
        snprintf(t, sizeof t, "%% local x = %s\n", banned[i]);
        put("ban.cu", t);
        CHECK(expand("ban.cu", &e) == QJIT_ERROR_TEMPLATE, "'%s' was allowed", banned[i]);
    }
}

/* Every step of an expansion under a memory cap, setting the parameters included: the
 * cap is raised 64 bytes at a time from far too little to enough, and each run either
 * expands or says QJIT_ERROR_OUT_OF_MEMORY (an allocation failure outside a protected
 * call would abort the process instead). */
static void test_memory_cap_everywhere(void)
{
    put("caps.cu", "% local s = A .. B .. OUT\nv = $(BM + BN) $(s)\n");
    char names[40][8], value[40][64];
    qjit_tparam p[40 + 3];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "P%d", i);
        snprintf(value[i], sizeof value[i], "a parameter string long enough to allocate %d", i);
        p[i] = (qjit_tparam){names[i], QJIT_TP_STR, 0, value[i]};
    }
    p[40] = (qjit_tparam){"A", QJIT_TP_STR, 0, "bf16"};
    p[41] = (qjit_tparam){"B", QJIT_TP_STR, 0, "s4"};
    p[42] = (qjit_tparam){"OUT", QJIT_TP_STR, 0, "f16"};
    qjit_tparam q[] = {{"BM", QJIT_TP_INT, 128, NULL}, {"BN", QJIT_TP_INT, 64, NULL}};
    qjit_tparam all[45];
    memcpy(all, p, sizeof p);
    memcpy(all + 43, q, sizeof q);
    int oom = 0, ok = 0, other = 0;
    for (size_t cap = 1024; cap < (256u << 10) && !ok; cap += 64) {
        qjit_sandbox_limits lim;
        qjit_sandbox_default_limits(&lim);
        lim.max_memory = cap;
        qjit_expansion e;
        qjit_status st = qjit_sandbox_expand(dir, "caps.cu", all, 45, &lim, &e);
        if (st == QJIT_OK) {
            ok++;
            CHECK(e.source.data && strstr(e.source.data, "v = 192 bf16s4f16"), "got %s",
                  e.source.data);
            qjit_expansion_free(&e);
        } else if (st == QJIT_ERROR_OUT_OF_MEMORY) {
            oom++;
        } else {
            other++;
            CHECK(0, "cap %zu: %s: %s", cap, qjit_status_string(st), qjit_last_error());
        }
    }
    CHECK(ok == 1 && oom > 10 && other == 0, "ok %d, out of memory %d, other %d", ok, oom,
          other);
}

static void test_errors_name_lines(void)
{
    qjit_expansion e;
    put("err.cu", "line one\n"
                  "line two\n"
                  "% local x = nil + 1\n");
    CHECK(expand("err.cu", &e) == QJIT_ERROR_TEMPLATE, "Lua error not reported");
    CHECK(strstr(qjit_last_error(), "err.cu:3:") != NULL, "msg: %s", qjit_last_error());
    CHECK(strstr(qjit_last_error(), "traceback") != NULL, "no traceback: %s",
          qjit_last_error());

    put("hole.cu", "ok\nvalue $(nothing_here)\n");
    CHECK(expand("hole.cu", &e) == QJIT_ERROR_TEMPLATE, "nil hole not reported");
    CHECK(strstr(qjit_last_error(), "hole.cu:2:") != NULL, "msg: %s", qjit_last_error());

    put("open.cu", "x\ny $(BM\n");
    CHECK(expand("open.cu", &e) == QJIT_ERROR_TEMPLATE, "unterminated hole");
    CHECK(strstr(qjit_last_error(), "open.cu:2") != NULL, "msg: %s", qjit_last_error());

    put("unsup.cu", "ok\n% if BM > 64 then unsupported('BM=' .. BM .. ' is too large here') end\n");
    CHECK(expand("unsup.cu", &e) == QJIT_ERROR_UNSUPPORTED, "unsupported() not mapped");
    CHECK(strstr(qjit_last_error(), "BM=128 is too large here") != NULL &&
              strstr(qjit_last_error(), "traceback") == NULL,
          "msg: %s", qjit_last_error());

    put("missing.cu", "% include('no_such_file.cuh')\n");
    CHECK(expand("missing.cu", &e) == QJIT_ERROR_TEMPLATE, "missing include");
    CHECK(strstr(qjit_last_error(), "no_such_file.cuh") != NULL, "msg: %s", qjit_last_error());

    /* an NVRTC error names the template file and line through the #line marks */
    put("bad.cu", "extern \"C\" __global__ void k(int *p) {\n"
                  "% for i = 1, 2 do\n"
                  "  p[$(i)] = $(i);\n"
                  "% end\n"
                  "  p[0] = undeclared_name_$(BM);\n"
                  "}\n");
    CHECK_OK(expand("bad.cu", &e));
    void *cubin = NULL;
    size_t n = 0;
    qjit_status st = qjit_nvrtc_compile(e.source.data, e.source.len, "bad.cu", QJIT_ARCH_SM80,
                                        &cubin, &n, NULL);
    CHECK(st == QJIT_ERROR_COMPILE, "compile of a bad template: %s", qjit_status_string(st));
    CHECK(strstr(qjit_last_error(), "bad.cu(5)") != NULL, "msg: %s", qjit_last_error());
    CHECK(strstr(qjit_last_error(), "undeclared_name_128") != NULL, "msg: %s",
          qjit_last_error());
    CHECK(cubin == NULL, "cubin on failure");
    qjit_expansion_free(&e);
}

int main(void)
{
    dir = tl_tmpdir("sandbox");
    if (!dir)
        return 1;
    test_holes_and_lines();
    test_include_and_determinism();
    test_chunks_reused();
    test_limits();
    test_memory_cap_everywhere();
    test_errors_name_lines();
    return tl_finish("test_sandbox");
}
