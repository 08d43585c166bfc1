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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (nsize > osize && st->mem_used + (nsize - osize) > st->lim->max_memory)
        return NULL; /* Lua raises "not enough memory" */
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

/* Translates file `fidx` (text s, n bytes) into a Lua chunk on the stack top: one chunk
 * line per template line. Raises a Lua error on a malformed hole. */
static void flush_run(luaL_Buffer *b, int fidx, int *run_first, int line)
{
    if (*run_first == 0)
        return;
    char call[64];
    snprintf(call, sizeof call, "_R(%d,%d,%d)", fidx, *run_first, line - 1);
    luaL_addstring(b, call);
    for (int i = *run_first; i < line; i++)
        luaL_addchar(b, '\n');
    *run_first = 0;
}

static void translate(lua_State *L, int fidx, const char *name, const char *s, size_t n)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int line = 1, run_first = 0; /* run_first: first line of a run of plain text lines */
    size_t pos = 0;
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
        bool plain = !(k < len && p[k] == '%') && !memmem(p, len, "$(", 2);
        if (plain) { /* emitted from the file's bytes by _R, not parsed by Lua */
            if (!run_first)
                run_first = line;
            line++;
            pos = end + 1;
            continue;
        }
        flush_run(&b, fidx, &run_first, line);
        if (k < len && p[k] == '%') {
            luaL_addlstring(&b, p + k + 1, len - k - 1);
        } else {
            char head[48];
            snprintf(head, sizeof head, "_T(%d,%d,", fidx, line);
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
    flush_run(&b, fidx, &run_first, line);
    luaL_pushresult(&b);
}

/* ------------------------------------------------------------ functions for templates */
/* _T(file, line, piece...) — appends one output line, preceded by a #line mark when
 * the output stops following the template.  Stack: [-(2+n), +0] */
static int l_emit(lua_State *L)
{
    expand_state *st = get_state(L);
    int fidx = (int)luaL_checkinteger(L, 1);
    int line = (int)luaL_checkinteger(L, 2);
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
    const qjit_tmpl_file *f = &e->files[fidx];
    translate(L, fidx, f->name, f->text, f->len);
    size_t clen;
    const char *chunk = lua_tolstring(L, -1, &clen);
    char chunkname[160];
    snprintf(chunkname, sizeof chunkname, "=%s", f->name);
    if (luaL_loadbufferx(L, chunk, clen, chunkname, "t") != LUA_OK)
        return lua_error(L);
    st->depth++;
    lua_call(L, 0, 0);
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

static int setup(lua_State *L)
{
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
    if (luaL_loadbufferx(L, PRELUDE, sizeof PRELUDE - 1, "=prelude", "t") != LUA_OK)
        return lua_error(L);
    lua_call(L, 0, 0);
    return 0;
}

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
    expand_state st = {override_dir, lim, out, 0, 0, -1, 0, 0, false, "", {0}, {0}};
    qjit_status status = QJIT_OK;
    lua_State *L = lua_newstate(capped_alloc, &st);
    if (!L)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "template %s: cannot create a Lua state",
                            root);
    lua_pushlightuserdata(L, &st);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &STATE_KEY);
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);

    lua_pushcfunction(L, l_traceback);
    int handler = lua_gettop(L);
    lua_pushcfunction(L, setup);
    if (lua_pcall(L, 0, 0, handler) != LUA_OK) {
        status = qjit_err_set(QJIT_ERROR_TEMPLATE, "template %s: sandbox setup failed: %s",
                              root, lua_tostring(L, -1));
        goto done;
    }
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
    lua_getglobal(L, "include");
    lua_pushstring(L, root);
    if (lua_pcall(L, 1, 0, handler) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (st.unsupported)
            status = qjit_err_set(QJIT_ERROR_UNSUPPORTED, "%s: %s", root, st.why);
        else
            status = qjit_err_set(QJIT_ERROR_TEMPLATE, "template %s: %s", root,
                                  msg ? msg : "(error object is not a string)");
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
