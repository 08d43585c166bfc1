/*
 * sandbox.c — expands kernel templates in a sandboxed Lua 5.4 state.  A template is
 * CUDA text with `%` Lua lines and `$(expr)` holes; it is translated into a Lua chunk
 * that keeps one chunk line per template line (so Lua errors name template lines) and
 * emits `#line` marks (so NVRTC errors do too).
 */
#define _GNU_SOURCE /* memmem */
#include "qjit_internal.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void qjit_sandbox_default_limits(qjit_sandbox_limits *l)
{
    l->max_memory = 64u << 20;
    l->max_steps = 200000000;
    l->max_output = 8u << 20;
}

void qjit_expansion_free(qjit_expansion *e)
{
    if (!e)
        return;
    qjit_buf_free(&e->source);
    for (int i = 0; i < e->nfiles; i++)
        qjit_tmpl_close(&e->files[i]);
    e->nfiles = 0;
}

/* Everything a running expansion needs; lives in the C frame that calls lua_pcall, so
 * a Lua error never unwinds past its owner. */
typedef struct expand_state {
    const char *override_dir;
    const qjit_sandbox_limits *lim;
    qjit_expansion *out;
    size_t mem_used;
    long long steps;
    int last_file, last_line;
    int depth;
    bool unsupported;  /* the template refused the parameters with unsupported() */
    bool refused;      /* the allocator refused a block: an error now is out of memory */
    const char *declaring; /* root whose family{...} ends the run, kept (qjit_sandbox_declare) */
    bool declared;     /* family{...} was reached while declaring */
    char why[512];
    size_t *line_start[16]; /* per file: byte offset of each line (1-based), owned here */
    int nlines[16];
} expand_state;

/* ------------------------------------------------------------ allocator and hook */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    expand_state *st = ud;
    if (!ptr)
        osize = 0;
    if (nsize == 0) {
        free(ptr);
        st->mem_used -= osize;
        return NULL;
    }
    if (nsize > osize && st->mem_used + (nsize - osize) > st->lim->max_memory) {
        st->refused = true;
        return NULL; /* Lua raises "not enough memory" */
    }
    void *p = realloc(ptr, nsize);
    if (p)
        st->mem_used = st->mem_used - osize + nsize;
    return p;
}

#define HOOK_EVERY 1000
static const char STATE_KEY = 'S';

static expand_state *get_state(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &STATE_KEY);
    expand_state *st = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return st;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    expand_state *st = get_state(L);
    st->steps += HOOK_EVERY;
    if (st->steps > st->lim->max_steps) {
        /* lua_pushfstring has no %lld: format here */
        char msg[96];
        snprintf(msg, sizeof msg, "template ran past its budget of %lld Lua instructions",
                 st->lim->max_steps);
        luaL_error(L, "%s", msg);
    }
}

/* ------------------------------------------------------------ translation */
static void add_quoted(luaL_Buffer *b, const char *s, size_t n)
{
    luaL_addchar(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            luaL_addchar(b, '\\');
            luaL_addchar(b, (char)c);
        } else if (c < 32 && c != '\t') {
            char esc[8];
            snprintf(esc, sizeof esc, "\\%03u", c);
            luaL_addstring(b, esc);
        } else {
            luaL_addchar(b, (char)c);
        }
    }
    luaL_addchar(b, '"');
}

/* Index just past the ')' matching the '(' at s[i], or (size_t)-1. Skips strings. */
static size_t match_paren(const char *s, size_t n, size_t i)
{
    int depth = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '"' || c == '\'') {
            for (i++; i < n && s[i] != c; i++)
                if (s[i] == '\\')
                    i++;
            if (i >= n)
                return (size_t)-1;
        } else if (c == '(') {
            depth++;
        } else if (c == ')' && --depth == 0) {
            return i + 1;
        }
    }
    return (size_t)-1;
}

/* Translates a file (text s, n bytes) into a Lua chunk on the stack top: one chunk line per
 * template line.  The chunk takes the file's index in the expansion as its argument (F),
 * so the same chunk serves the file wherever it is included.  Raises a Lua error on a
 * malformed hole. */
static void flush_run(luaL_Buffer *b, int *run_first, int line)
{
    if (*run_first == 0)
        return;
    char call[64];
    snprintf(call, sizeof call, "_R(F,%d,%d)", *run_first, line - 1);
    luaL_addstring(b, call);
    for (int i = *run_first; i < line; i++)
        luaL_addchar(b, '\n');
    *run_first = 0;
}

/* head_only: only the lines up to the end of the family{...} block (the first text line
 * after a Lua line that starts "family {"), which is all a declaration needs. */
static void translate(lua_State *L, const char *name, const char *s, size_t n, bool head_only)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "local F = ...; "); /* on line 1: chunk lines stay template lines */
    int line = 1, run_first = 0; /* run_first: first line of a run of plain text lines */
    size_t pos = 0;
    bool in_family = false;
    while (pos < n) {
        size_t end = pos;
        while (end < n && s[end] != '\n')
            end++;
        size_t len = end - pos;
        if (len && s[pos + len - 1] == '\r')
            len--;
        const char *p = s + pos;
        size_t k = 0;
        while (k < len && (p[k] == ' ' || p[k] == '\t'))
            k++;
        bool lua = k < len && p[k] == '%';
        if (head_only && !lua && in_family)
            break;
        if (head_only && lua) {
            size_t j = k + 1;
            while (j < len && (p[j] == ' ' || p[j] == '\t'))
                j++;
            in_family |= len - j >= 6 && memcmp(p + j, "family", 6) == 0;
        }
        bool plain = !lua && !memmem(p, len, "$(", 2);
        if (plain) { /* emitted from the file's bytes by _R, not parsed by Lua */
            if (!run_first)
                run_first = line;
            line++;
            pos = end + 1;
            continue;
        }
        flush_run(&b, &run_first, line);
        if (k < len && p[k] == '%') {
            luaL_addlstring(&b, p + k + 1, len - k - 1);
        } else {
            char head[48];
            snprintf(head, sizeof head, "_T(F,%d,", line);
            luaL_addstring(&b, head);
            size_t lit = 0;
            for (size_t i = 0; i < len; i++) {
                if (p[i] == '$' && i + 1 < len && p[i + 1] == '(') {
                    size_t close = match_paren(p, len, i + 1);
                    if (close == (size_t)-1)
                        luaL_error(L, "%s:%d: unterminated $( hole", name, line);
                    add_quoted(&b, p + lit, i - lit);
                    luaL_addstring(&b, ",(");
                    luaL_addlstring(&b, p + i + 2, close - i - 3);
                    luaL_addstring(&b, "),");
                    lit = close;
                    i = close - 1;
                }
            }
            add_quoted(&b, p + lit, len - lit);
            luaL_addchar(&b, ')');
        }
        luaL_addchar(&b, '\n');
        line++;
        pos = end + 1;
    }
    flush_run(&b, &run_first, line);
    luaL_pushresult(&b);
}

/* ------------------------------------------------------------ chunks, parsed once */
/* Parsing a translated template was about half of an expansion's work (callgrind: 7.4M of
 * 15.5M instructions a get of a W4A16 handle's two variants), and the same files are
 * expanded again and again: every variant, every get, the shared includes of every family.
 * So each (file name, text, head_only) is translated and parsed once a process, its
 * bytecode kept (with its debug information, so that errors still name template lines),
 * and later expansions, in any state on any thread, load the bytecode.  An entry is found
 * by a hash and then matched against its own copy of the text, so a changed file (an
 * override directory) can only be a new entry; the table is small and stops growing when
 * full. */
typedef struct chunk_entry {
    uint64_t hash; /* of the name and head_only, and of the text */
    char *text;    /* a copy, compared in full before the bytecode is used */
    size_t text_len;
    char *code;
    size_t code_len;
} chunk_entry;
static chunk_entry chunks[128];
static int nchunks;
static pthread_mutex_t chunks_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t chunk_hash(const char *name, const char *text, size_t len, bool head_only)
{
    const uint64_t seed = XXH3_64bits(name, strlen(name)) ^ (head_only ? 1 : 0);
    return XXH3_64bits_withSeed(text, len, seed);
}

static bool chunk_is(const chunk_entry *c, uint64_t hash, const char *text, size_t len)
{
    return c->hash == hash && c->text_len == len && memcmp(c->text, text, len) == 0;
}

static const chunk_entry *chunk_find(uint64_t hash, const char *text, size_t len)
{
    const chunk_entry *hit = NULL;
    pthread_mutex_lock(&chunks_mu);
    for (int i = 0; i < nchunks && !hit; i++)
        if (chunk_is(&chunks[i], hash, text, len))
            hit = &chunks[i]; /* an entry never changes or goes once made */
    pthread_mutex_unlock(&chunks_mu);
    return hit;
}

static int dump_writer(lua_State *L, const void *p, size_t n, void *ud)
{
    (void)L;
    return qjit_buf_append(ud, p, n) ? 0 : 1;
}

/* Keeps the bytecode of the function on the stack top (best effort: a failure only means
 * that the next expansion parses again). */
static void chunk_keep(lua_State *L, uint64_t hash, const char *text, size_t len)
{
    qjit_buf code = {0};
    char *copy = malloc(len ? len : 1);
    if (!copy || lua_dump(L, dump_writer, &code, 0) != 0 || !code.len) {
        free(copy);
        qjit_buf_free(&code);
        return;
    }
    memcpy(copy, text, len);
    pthread_mutex_lock(&chunks_mu);
    bool have = false;
    for (int i = 0; i < nchunks && !have; i++)
        have = chunk_is(&chunks[i], hash, text, len);
    if (!have && nchunks < (int)(sizeof chunks / sizeof chunks[0])) {
        chunks[nchunks++] = (chunk_entry){hash, copy, len, code.data, code.len};
        copy = NULL; /* the table owns them now */
        code.data = NULL;
    }
    pthread_mutex_unlock(&chunks_mu);
    free(copy);
    qjit_buf_free(&code);
}

/* Pushes the chunk of file f (as translate() makes it) as a function.  Lua errors (a
 * malformed hole, a syntax error) are raised as from the parse. */
static void chunk_load(lua_State *L, const qjit_tmpl_file *f, bool head_only)
{
    char chunkname[160];
    snprintf(chunkname, sizeof chunkname, "=%s", f->name);
    const uint64_t hash = chunk_hash(f->name, f->text, f->len, head_only);
    const chunk_entry *c = chunk_find(hash, f->text, f->len);
    if (c) {
        if (luaL_loadbufferx(L, c->code, c->code_len, chunkname, "b") != LUA_OK)
            lua_error(L);
        return;
    }
    translate(L, f->name, f->text, f->len, head_only);
    size_t clen;
    const char *chunk = lua_tolstring(L, -1, &clen);
    if (luaL_loadbufferx(L, chunk, clen, chunkname, "t") != LUA_OK)
        lua_error(L);
    lua_remove(L, -2); /* the translation */
    chunk_keep(L, hash, f->text, f->len);
}

/* ------------------------------------------------------------ functions for templates */
/* _T(file, line, piece...) — appends one output line, preceded by a #line mark when
 * the output stops following the template.  Stack: [-(2+n), +0] */
static int l_emit(lua_State *L)
{
    expand_state *st = get_state(L);
    int fidx = (int)luaL_checkinteger(L, 1);
    int line = (int)luaL_checkinteger(L, 2);
    if (fidx < 0 || fidx >= st->out->nfiles)
        return luaL_error(L, "_T: bad file index");
    int top = lua_gettop(L);
    qjit_buf *o = &st->out->source;
    if (fidx != st->last_file || line != st->last_line + 1) {
        if (!qjit_buf_printf(o, "#line %d \"%s\"\n", line, st->out->files[fidx].name))
            return luaL_error(L, "out of memory");
    }
    st->last_file = fidx;
    st->last_line = line;
    for (int i = 3; i <= top; i++) {
        size_t n = 0;
        const char *v;
        char num[64];
        switch (lua_type(L, i)) {
        case LUA_TSTRING:
            v = lua_tolstring(L, i, &n);
            break;
        case LUA_TNUMBER:
            if (lua_isinteger(L, i)) {
                snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, i));
            } else {
                lua_Number x = lua_tonumber(L, i);
                if (x == (lua_Number)(long long)x)
                    snprintf(num, sizeof num, "%lld", (long long)x);
                else
                    snprintf(num, sizeof num, "%.17g", (double)x);
            }
            v = num;
            n = strlen(num);
            break;
        case LUA_TBOOLEAN:
            v = lua_toboolean(L, i) ? "true" : "false";
            n = strlen(v);
            break;
        default:
            return luaL_error(L, "a $(...) hole gave a %s value", luaL_typename(L, i));
        }
        if (!qjit_buf_append(o, v, n))
            return luaL_error(L, "out of memory");
    }
    if (!qjit_buf_append(o, "\n", 1))
        return luaL_error(L, "out of memory");
    if (o->len > st->lim->max_output)
        return luaL_error(L, "generated source passed its cap of %d bytes", (int)st->lim->max_output);
    return 0;
}

/* _R(file, first, last) — appends template lines first..last as they are (a run with no
 * holes), preceded by a #line mark when needed.  Stack: [-3, +0] */
static int l_range(lua_State *L)
{
    expand_state *st = get_state(L);
    int fidx = (int)luaL_checkinteger(L, 1);
    int first = (int)luaL_checkinteger(L, 2), last = (int)luaL_checkinteger(L, 3);
    if (fidx < 0 || fidx >= st->out->nfiles || first < 1 || last > st->nlines[fidx] ||
        first > last)
        return luaL_error(L, "_R: bad line range");
    qjit_buf *o = &st->out->source;
    const qjit_tmpl_file *f = &st->out->files[fidx];
    if (fidx != st->last_file || first != st->last_line + 1) {
        if (!qjit_buf_printf(o, "#line %d \"%s\"\n", first, f->name))
            return luaL_error(L, "out of memory");
    }
    for (int l = first; l <= last; l++) {
        size_t a = st->line_start[fidx][l], b = st->line_start[fidx][l + 1] - 1; /* at '\n' */
        if (b > a && f->text[b - 1] == '\r')
            b--;
        if (!qjit_buf_append(o, f->text + a, b - a) || !qjit_buf_append(o, "\n", 1))
            return luaL_error(L, "out of memory");
    }
    st->last_file = fidx;
    st->last_line = last;
    if (o->len > st->lim->max_output)
        return luaL_error(L, "generated source passed its cap of %d bytes", (int)st->lim->max_output);
    return 0;
}

/* Byte offsets of each line of file fidx: line_start[l] for l = 1..nlines, and one past
 * the end (as if the file ended with a newline) at nlines + 1. */
static bool index_lines(expand_state *st, int fidx)
{
    const qjit_tmpl_file *f = &st->out->files[fidx];
    int n = 1;
    for (size_t i = 0; i < f->len; i++)
        n += f->text[i] == '\n';
    size_t *ls = malloc(sizeof *ls * (size_t)(n + 2));
    if (!ls)
        return false;
    int l = 1;
    ls[l] = 0;
    for (size_t i = 0; i < f->len; i++)
        if (f->text[i] == '\n')
            ls[++l] = i + 1;
    if (ls[l] == f->len) /* the file ends with a newline: no partial last line */
        l--;
    ls[l + 1] = f->len + (f->len && f->text[f->len - 1] == '\n' ? 0 : 1);
    st->line_start[fidx] = ls;
    st->nlines[fidx] = l;
    return true;
}

/* include(name) — expands another template file here. Stack: [-1, +0] */
static int l_include(lua_State *L)
{
    expand_state *st = get_state(L);
    const char *name = luaL_checkstring(L, 1);
    qjit_expansion *e = st->out;
    int fidx = -1;
    for (int i = 0; i < e->nfiles; i++)
        if (strcmp(e->files[i].name, name) == 0)
            fidx = i;
    if (fidx < 0) {
        if (e->nfiles == (int)(sizeof e->files / sizeof e->files[0]))
            return luaL_error(L, "include('%s'): too many template files", name);
        if (qjit_tmpl_open(st->override_dir, name, &e->files[e->nfiles]) != QJIT_OK)
            return luaL_error(L, "include('%s'): %s", name, qjit_last_error());
        fidx = e->nfiles++;
        if (!index_lines(st, fidx))
            return luaL_error(L, "out of memory");
    }
    if (st->depth >= 8)
        return luaL_error(L, "include('%s'): nested too deep", name);
    chunk_load(L, &e->files[fidx], st->declaring && st->depth == 0);
    lua_pushinteger(L, fidx);
    st->depth++;
    lua_call(L, 1, 0);
    st->depth--;
    st->last_file = -1; /* the includer's next line needs a fresh mark */
    return 0;
}

/* unsupported(reason) — the parameters are valid but this template cannot do them;
 * the expansion fails with QJIT_ERROR_UNSUPPORTED and the reason alone.  Stack: [-1, +0] */
static int l_unsupported(lua_State *L)
{
    expand_state *st = get_state(L);
    const char *why = luaL_checkstring(L, 1);
    st->unsupported = true;
    snprintf(st->why, sizeof st->why, "%s", why);
    return luaL_error(L, "unsupported: %s", why);
}

static int l_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg)
        msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* pairs() in key order, so that no template's output depends on hash order. */
static const char PRELUDE[] =
    "local next, type, tostring, sort = next, type, tostring, table.sort\n"
    "local function cmp(a, b)\n"
    "  local ta, tb = type(a), type(b)\n"
    "  if ta ~= tb then return ta < tb end\n"
    "  if ta == 'number' or ta == 'string' then return a < b end\n"
    "  return tostring(a) < tostring(b)\n"
    "end\n"
    "function pairs(t)\n"
    "  local keys = {}\n"
    "  for k in next, t do keys[#keys + 1] = k end\n"
    "  sort(keys, cmp)\n"
    "  local i = 0\n"
    "  return function() i = i + 1; local k = keys[i]; if k ~= nil then return k, t[k] end end, t, nil\n"
    "end\n";

/* The registry key of the declarations table: template name -> its family{...} table. */
static const char DECLS_KEY = 'D';

/* family{...} — a template's declaration of its family (docs/TEMPLATES.md).  Declaring
 * (qjit_sandbox_declare): the table is kept and the run stops here.  Expanding: the
 * table's plan() is called with the parameters, and every field of the plan it returns
 * becomes a global (and PLAN the plan), so the kernel text below reads the one plan that
 * the library checked and launches by.  Stack: [-1, +0] */
static int l_family(lua_State *L)
{
    expand_state *st = get_state(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    if (st->declaring) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, &DECLS_KEY);
        lua_pushstring(L, st->declaring);
        lua_pushvalue(L, 1);
        lua_rawset(L, -3);
        st->declared = true;
        return luaL_error(L, "declared"); /* stops the template's run: see declare_run */
    }
    lua_getfield(L, 1, "plan");
    if (lua_type(L, -1) != LUA_TFUNCTION)
        return luaL_error(L, "family{...} has no plan function");
    lua_call(L, 0, 1);
    if (lua_type(L, -1) != LUA_TTABLE)
        return luaL_error(L, "the family's plan() returned a %s, not a table",
                          luaL_typename(L, -1));
    lua_pushnil(L);
    while (lua_next(L, -2)) { /* plan, key, value */
        if (lua_type(L, -2) == LUA_TSTRING)
            lua_setglobal(L, lua_tostring(L, -2));
        else
            lua_pop(L, 1);
    }
    lua_setglobal(L, "PLAN");
    return 0;
}

/* Everything a new state gets, under lua_pcall (it allocates).  Stack: [-0, +0] */
static int setup(lua_State *L)
{
    void *st;
    lua_getallocf(L, &st);
    lua_pushlightuserdata(L, st);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &STATE_KEY);
    luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
    lua_pop(L, 4);
    static const char *const removed[] = {"dofile", "loadfile", "load", "require",
                                          "collectgarbage", "print", NULL};
    for (int i = 0; removed[i]; i++) {
        lua_pushnil(L);
        lua_setglobal(L, removed[i]);
    }
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_emit);
    lua_setglobal(L, "_T");
    lua_pushcfunction(L, l_include);
    lua_setglobal(L, "include");
    lua_pushcfunction(L, l_range);
    lua_setglobal(L, "_R");
    lua_pushcfunction(L, l_unsupported);
    lua_setglobal(L, "unsupported");
    lua_pushcfunction(L, l_family);
    lua_setglobal(L, "family");
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &DECLS_KEY);
    if (luaL_loadbufferx(L, PRELUDE, sizeof PRELUDE - 1, "=prelude", "t") != LUA_OK)
        return lua_error(L);
    lua_call(L, 0, 0);
    return 0;
}

/* Pushes the parameters as globals.  Stack: [-0, +0] */
static void set_params(lua_State *L, const qjit_tparam *params, int nparams)
{
    for (int i = 0; i < nparams; i++) {
        const qjit_tparam *p = &params[i];
        if (p->kind == QJIT_TP_INT)
            lua_pushinteger(L, (lua_Integer)p->i);
        else if (p->kind == QJIT_TP_BOOL)
            lua_pushboolean(L, p->i != 0);
        else
            lua_pushstring(L, p->s ? p->s : "");
        lua_setglobal(L, p->name);
    }
}

/* What a protected run takes: its arguments travel as one light userdata, so nothing
 * that can fail (an allocation past the cap) happens outside lua_pcall. */
typedef struct run_args {
    const char *root;
    const qjit_tparam *params;
    int nparams;
    /* queries */
    const char *what;
    const qjit_tparam *arg;
    qjit_records *rec;
} run_args;

/* Expansion: parameters as globals, then include(root).  Stack: [-1, +0] */
static int expand_run(lua_State *L)
{
    const run_args *a = lua_touserdata(L, 1);
    set_params(L, a->params, a->nparams);
    lua_getglobal(L, "include");
    lua_pushstring(L, a->root);
    lua_call(L, 1, 0);
    return 0;
}

/* A new state for st in *out: capped allocator, count hook, the sandbox's globals, and
 * the traceback handler at index 1. */
static qjit_status state_new(expand_state *st, const char *root, lua_State **out)
{
    *out = NULL;
    lua_State *L = lua_newstate(capped_alloc, st);
    if (!L)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "template %s: cannot create a Lua state",
                            root);
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
    lua_pushcfunction(L, l_traceback); /* light C functions: no allocation outside pcall */
    lua_pushcfunction(L, setup);
    if (lua_pcall(L, 0, 0, 1) != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        qjit_status s = qjit_err_set(m && strstr(m, "not enough memory")
                                         ? QJIT_ERROR_OUT_OF_MEMORY
                                         : QJIT_ERROR_TEMPLATE,
                                     "template %s: sandbox setup failed: %s", root, m ? m : "?");
        lua_close(L);
        return s;
    }
    *out = L;
    return QJIT_OK;
}

/* The status of a failed protected run of template root, its message set. */
static qjit_status run_failed(lua_State *L, expand_state *st, const char *root)
{
    const char *msg = lua_tostring(L, -1);
    if (st->unsupported)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "%s: %s", root, st->why);
    if (st->refused && msg && strstr(msg, "not enough memory"))
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "template %s: %s", root, msg);
    return qjit_err_set(QJIT_ERROR_TEMPLATE, "template %s: %s", root,
                        msg ? msg : "(error object is not a string)");
}

static _Atomic long long expansions;

long long qjit_sandbox_expansions(void) { return expansions; }

qjit_status qjit_sandbox_expand(const char *override_dir, const char *root,
                                const qjit_tparam *params, int nparams,
                                const qjit_sandbox_limits *lim, qjit_expansion *out)
{
    qjit_sandbox_limits deflim;
    if (!lim) {
        qjit_sandbox_default_limits(&deflim);
        lim = &deflim;
    }
    memset(out, 0, sizeof *out);
    expansions++;
    expand_state st = {.override_dir = override_dir, .lim = lim, .out = out, .last_file = -1};
    lua_State *L;
    qjit_status status = state_new(&st, root, &L);
    if (status != QJIT_OK)
        return status;
    run_args a = {root, params, nparams, NULL, NULL, NULL};
    lua_pushcfunction(L, expand_run);
    lua_pushlightuserdata(L, &a);
    if (lua_pcall(L, 1, 0, 1) != LUA_OK) {
        status = run_failed(L, &st, root);
        goto done;
    }
    if (!out->source.data && !qjit_buf_append(&out->source, "", 0))
        status = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "template %s", root);
done:
    lua_close(L);
    for (int i = 0; i < 16; i++)
        free(st.line_start[i]);
    if (status != QJIT_OK)
        qjit_expansion_free(out);
    return status;
}

/* ------------------------------------------------------------ declarations */
struct qjit_sandbox {
    lua_State *L;
    expand_state st;
    qjit_expansion files;     /* every template file read; generated text is dropped */
    qjit_sandbox_limits lim;
};

qjit_status qjit_sandbox_open(const char *override_dir, const qjit_sandbox_limits *lim,
                              qjit_sandbox **out)
{
    *out = NULL;
    qjit_sandbox *S = calloc(1, sizeof *S);
    if (!S)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "template declarations");
    if (lim)
        S->lim = *lim;
    else
        qjit_sandbox_default_limits(&S->lim);
    S->st.override_dir = override_dir;
    S->st.lim = &S->lim;
    S->st.out = &S->files;
    S->st.last_file = -1;
    qjit_status st = state_new(&S->st, "declarations", &S->L);
    if (st != QJIT_OK) {
        free(S);
        return st;
    }
    *out = S;
    return QJIT_OK;
}

void qjit_sandbox_close(qjit_sandbox *S)
{
    if (!S)
        return;
    lua_close(S->L);
    for (int i = 0; i < 16; i++)
        free(S->st.line_start[i]);
    qjit_expansion_free(&S->files);
    free(S);
}

/* Starts a run in the persistent state: fresh budget and position. */
static void run_begin(qjit_sandbox *S)
{
    S->st.steps = 0;
    S->st.depth = 0;
    S->st.last_file = -1;
    S->st.unsupported = false;
    S->st.declared = false;
    S->st.refused = false;
    S->st.why[0] = 0;
    lua_settop(S->L, 1); /* the traceback handler */
}

/* Declaring: include(root) with no parameters set.  Stack: [-1, +0] */
static int declare_run(lua_State *L)
{
    const run_args *a = lua_touserdata(L, 1);
    lua_getglobal(L, "include");
    lua_pushstring(L, a->root);
    lua_call(L, 1, 0);
    return 0;
}

qjit_status qjit_sandbox_declare(qjit_sandbox *S, const char *root)
{
    run_begin(S);
    /* the root is file 0 of its own run: include() finds or opens it; the name family{}
     * files the table under is the root's */
    run_args a = {root, NULL, 0, NULL, NULL, NULL};
    S->st.declaring = root;
    qjit_buf_free(&S->files.source);
    lua_pushcfunction(S->L, declare_run);
    lua_pushlightuserdata(S->L, &a);
    int rc = lua_pcall(S->L, 1, 0, 1);
    S->st.declaring = NULL;
    qjit_buf_free(&S->files.source);
    if (rc == LUA_OK)
        return qjit_err_set(QJIT_ERROR_TEMPLATE,
                            "template %s declares no family: it never calls family{...}", root);
    if (!S->st.declared)
        return run_failed(S->L, &S->st, root);
    return QJIT_OK;
}

/* Reads the value on the stack top into rec: nil or false: no records; true: one with
 * every field missing; a number: one with it as the first field; a table of fields: one;
 * a list of such tables: one each.  Stack: [-0, +0] */
static void read_record(lua_State *L, qjit_records *rec, int idx)
{
    long long *v = rec->vals + (size_t)rec->n * (size_t)rec->nfields;
    for (int f = 0; f < rec->nfields; f++) {
        lua_pushstring(L, rec->fields[f]);
        int t = lua_rawget(L, idx);
        if (t == LUA_TNIL)
            v[f] = QJIT_RECORD_MISSING;
        else if (t == LUA_TBOOLEAN)
            v[f] = lua_toboolean(L, -1);
        else if (t == LUA_TNUMBER && lua_isinteger(L, -1))
            v[f] = (long long)lua_tointeger(L, -1);
        else
            luaL_error(L, "field '%s' is a %s, not an integer", rec->fields[f],
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    rec->n++;
}

static void read_result(lua_State *L, qjit_records *rec)
{
    int idx = lua_gettop(L);
    rec->n = 0;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return;
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx) && rec->cap > 0) {
            for (int f = 0; f < rec->nfields; f++)
                rec->vals[f] = QJIT_RECORD_MISSING;
            rec->n = 1;
        }
        return;
    case LUA_TNUMBER:
        if (!lua_isinteger(L, idx))
            luaL_error(L, "the value is not an integer");
        if (rec->cap > 0 && rec->nfields > 0) {
            rec->vals[0] = (long long)lua_tointeger(L, idx);
            for (int f = 1; f < rec->nfields; f++)
                rec->vals[f] = QJIT_RECORD_MISSING;
            rec->n = 1;
        }
        return;
    case LUA_TTABLE: break;
    default: luaL_error(L, "the value is a %s", luaL_typename(L, idx));
    }
    if (lua_rawgeti(L, idx, 1) == LUA_TTABLE) { /* a list of records */
        lua_pop(L, 1);
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_rawgeti(L, idx, i) != LUA_TTABLE)
                luaL_error(L, "entry %d of the list is a %s", (int)i, luaL_typename(L, -1));
            if (rec->n < rec->cap)
                read_record(L, rec, lua_gettop(L));
            else
                rec->more++;
            lua_pop(L, 1);
        }
        return;
    }
    lua_pop(L, 1);
    if (rec->cap > 0)
        read_record(L, rec, idx);
}

/* A query: parameters as globals, the declaration's field `what`, called with arg when it
 * is a function, its result read.  Stack: [-1, +0] */
static int query_run(lua_State *L)
{
    const run_args *a = lua_touserdata(L, 1);
    set_params(L, a->params, a->nparams);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &DECLS_KEY);
    if (lua_getfield(L, -1, a->root) != LUA_TTABLE)
        return luaL_error(L, "no declaration of %s", a->root);
    lua_getfield(L, -1, a->what);
    if (lua_type(L, -1) == LUA_TFUNCTION) {
        int nargs = 0;
        if (a->arg) {
            if (a->arg->kind == QJIT_TP_INT)
                lua_pushinteger(L, (lua_Integer)a->arg->i);
            else if (a->arg->kind == QJIT_TP_BOOL)
                lua_pushboolean(L, a->arg->i != 0);
            else
                lua_pushstring(L, a->arg->s ? a->arg->s : "");
            nargs = 1;
        }
        lua_call(L, nargs, 1);
    } else if (lua_type(L, -1) == LUA_TNIL) {
        return luaL_error(L, "the family{...} of %s has no '%s'", a->root, a->what);
    }
    read_result(L, a->rec);
    return 0;
}

qjit_status qjit_sandbox_query(qjit_sandbox *S, const char *root, const char *what,
                               const qjit_tparam *params, int nparams, const qjit_tparam *arg,
                               qjit_records *rec)
{
    run_begin(S);
    rec->n = rec->more = 0;
    run_args a = {root, params, nparams, what, arg, rec};
    lua_pushcfunction(S->L, query_run);
    lua_pushlightuserdata(S->L, &a);
    int rc = lua_pcall(S->L, 1, 0, 1);
    qjit_buf_free(&S->files.source);
    if (rc != LUA_OK) {
        qjit_status st = run_failed(S->L, &S->st, root);
        if (st == QJIT_ERROR_TEMPLATE)
            qjit_err_prefix(st, "%s '%s'", root, what);
        return st;
    }
    return QJIT_OK;
}
