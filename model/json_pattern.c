#include "json_pattern.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

enum { MAX_LENGTH = 512, MAX_TREE = 1024, MAX_STATES = 2048, MAX_REPEAT = 100 };
enum { A_SET, A_CAT, A_ALT, A_REPEAT, A_EMPTY }; // syntax tree nodes
enum { S_CHAR, S_SPLIT, S_ACCEPT };              // NFA states

typedef struct {
    uint64_t ascii[2];
    int non_ascii;
} charset;

typedef struct {
    int kind;
    charset set;  // A_SET
    int a, b;     // A_CAT, A_ALT: the parts; A_REPEAT: a, the part repeated
    int min, max; // A_REPEAT (max -1: no limit)
} tree_node;

typedef struct {
    int kind;
    charset set; // S_CHAR
    int out, out2;
} state;

typedef struct {
    const char *re;
    int at, end; // the byte parsed next; the end (before a final '$')
    tree_node tree[MAX_TREE];
    int n_tree;
    state st[MAX_STATES];
    int n_st;
    char *err;
    size_t n_err;
} compiler;

static int fail(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(compiler *c, const char *fmt, ...) {
    if (!c->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->n_err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int add_node(compiler *c, tree_node t) {
    if (c->n_tree == MAX_TREE) return fail(c, "'pattern' is too long");
    c->tree[c->n_tree] = t;
    return c->n_tree++;
}

// Character ch into s where JSON carries it unescaped: ASCII from the space up but '"' and '\'.
static void add_char(charset *s, int ch) {
    if (ch >= 0x20 && ch < 0x80 && ch != '"' && ch != '\\') s->ascii[ch >> 6] |= 1ull << (ch & 63);
}

static void add_range(charset *s, int lo, int hi) {
    for (int ch = lo; ch <= hi; ch++) add_char(s, ch);
}

static charset complement(charset s) {
    charset out = {{0}, 0};
    for (int ch = 0; ch < 0x80; ch++)
        if (!(s.ascii[ch >> 6] >> (ch & 63) & 1)) add_char(&out, ch);
    return out;
}

// \d \w \s, or their complements \D \W \S, into *s; 0 where e names none.
static int class_escape(int e, charset *s) {
    charset x = {{0}, 0};
    switch (tolower(e)) {
    case 'd': add_range(&x, '0', '9'); break;
    case 'w':
        add_range(&x, '0', '9'), add_range(&x, 'a', 'z'), add_range(&x, 'A', 'Z');
        add_char(&x, '_');
        break;
    case 's': add_char(&x, ' '); break;
    default: return 0;
    }
    *s = isupper(e) ? complement(x) : x;
    return 1;
}

// After a backslash: a class escape or escaped punctuation, into *s.
static int parse_escape(compiler *c, charset *s) {
    if (c->at >= c->end) return fail(c, "'pattern' ends in a backslash");
    const int e = (unsigned char)c->re[c->at++];
    *s = (charset){{0}, 0};
    if (class_escape(e, s)) return 0;
    if (e && strchr(".^$*+?{}[]()|\\/-", e)) {
        add_char(s, e);
        return 0;
    }
    return fail(c, "'\\%c' in 'pattern' is not supported", e);
}

// After '[': the class up to its ']'.
static int parse_class(compiler *c, charset *s) {
    const int negate = c->at < c->end && c->re[c->at] == '^';
    charset x = {{0}, 0};
    for (c->at += negate; c->at < c->end && c->re[c->at] != ']';) {
        const int ch = (unsigned char)c->re[c->at++];
        if (ch >= 0x80) return fail(c, "'pattern' must be ASCII");
        if (ch == '\\') {
            charset item;
            if (parse_escape(c, &item) < 0) return -1;
            x.ascii[0] |= item.ascii[0], x.ascii[1] |= item.ascii[1];
        } else if (c->at + 1 < c->end && c->re[c->at] == '-' && c->re[c->at + 1] != ']') {
            const int hi = (unsigned char)c->re[c->at + 1];
            if (hi == '\\' || hi < ch) return fail(c, "'pattern' has a range '%c-%c' it does not support", ch, hi);
            add_range(&x, ch, hi);
            c->at += 2;
        } else {
            add_char(&x, ch);
        }
    }
    if (c->at >= c->end) return fail(c, "'pattern' has a '[' without its ']'");
    c->at++;
    *s = negate ? complement(x) : x;
    return 0;
}

static int parse_alt(compiler *c);

static int parse_atom(compiler *c) {
    const int ch = (unsigned char)c->re[c->at++];
    charset s = {{0}, 0};
    if (ch == '(') {
        if (c->at < c->end && c->re[c->at] == '?') {
            if (strncmp(c->re + c->at, "?:", 2)) return fail(c, "'(?' in 'pattern' is not supported but as (?:...)");
            c->at += 2;
        }
        const int inner = parse_alt(c);
        if (inner < 0) return -1;
        if (c->at >= c->end || c->re[c->at] != ')') return fail(c, "'pattern' has a '(' without its ')'");
        c->at++;
        return inner;
    }
    if (ch == '[' && parse_class(c, &s) < 0) return -1;
    if (ch == '\\' && parse_escape(c, &s) < 0) return -1;
    if (ch == '.') s = complement(s), s.non_ascii = 1;
    else if (ch >= 0x80) return fail(c, "'pattern' must be ASCII");
    else if (strchr("^$*+?{", ch)) return fail(c, "'%c' in 'pattern' is not supported where it stands", ch);
    else if (ch != '[' && ch != '\\') add_char(&s, ch);
    return add_node(c, (tree_node){.kind = A_SET, .set = s});
}

static int parse_count(compiler *c) {
    int n = -1;
    while (c->at < c->end && isdigit((unsigned char)c->re[c->at]) && n <= MAX_REPEAT)
        n = (n < 0 ? 0 : 10 * n) + (c->re[c->at++] - '0');
    return n;
}

// An atom and its quantifier, if any.
static int parse_repeat(compiler *c) {
    const int atom = parse_atom(c);
    if (atom < 0 || c->at >= c->end) return atom;
    int min, max;
    switch (c->re[c->at]) {
    case '*': min = 0, max = -1; break;
    case '+': min = 1, max = -1; break;
    case '?': min = 0, max = 1; break;
    case '{':
        c->at++;
        min = max = parse_count(c);
        if (c->at < c->end && c->re[c->at] == ',') c->at++, max = parse_count(c);
        if (min < 0 || c->at >= c->end || c->re[c->at] != '}' || (max >= 0 && max < min))
            return fail(c, "'{' in 'pattern' must begin a quantifier {n}, {n,} or {n,m}");
        break;
    default: return atom;
    }
    c->at++;
    if (c->at < c->end && c->re[c->at] == '?') c->at++; // lazy: the same strings
    if (c->at < c->end && strchr("*+?{", c->re[c->at])) return fail(c, "'pattern' repeats a repeat");
    if (min > MAX_REPEAT || max > MAX_REPEAT) return fail(c, "'pattern' quantifiers above %d are not supported", MAX_REPEAT);
    return add_node(c, (tree_node){.kind = A_REPEAT, .a = atom, .min = min, .max = max});
}

static int parse_cat(compiler *c) {
    int left = add_node(c, (tree_node){.kind = A_EMPTY});
    while (left >= 0 && c->at < c->end && c->re[c->at] != '|' && c->re[c->at] != ')') {
        const int right = parse_repeat(c);
        left = right < 0 ? -1 : add_node(c, (tree_node){.kind = A_CAT, .a = left, .b = right});
    }
    return left;
}

static int parse_alt(compiler *c) {
    int left = parse_cat(c);
    while (left >= 0 && c->at < c->end && c->re[c->at] == '|') {
        c->at++;
        const int right = parse_cat(c);
        left = right < 0 ? -1 : add_node(c, (tree_node){.kind = A_ALT, .a = left, .b = right});
    }
    return left;
}

static int add_state(compiler *c, state s) {
    if (c->n_st == MAX_STATES) return fail(c, "'pattern' is too large");
    c->st[c->n_st] = s;
    return c->n_st++;
}

// The states that match tree node t and then go on to state out (its first).
static int build(compiler *c, int t, int out) {
    if (out < 0) return -1;
    const tree_node *n = &c->tree[t];
    switch (n->kind) {
    case A_EMPTY: return out;
    case A_SET: return add_state(c, (state){S_CHAR, n->set, out, -1});
    case A_CAT: return build(c, n->a, build(c, n->b, out));
    case A_ALT: {
        const int x = build(c, n->a, out), y = build(c, n->b, out);
        return x < 0 || y < 0 ? -1 : add_state(c, (state){S_SPLIT, {{0}, 0}, x, y});
    }
    }
    int at = out; // A_REPEAT: built from the end: the optional copies (or a loop), then the min
    if (n->max < 0) {
        const int loop = add_state(c, (state){S_SPLIT, {{0}, 0}, -1, out});
        const int body = loop < 0 ? -1 : build(c, n->a, loop);
        if (body < 0) return -1;
        c->st[loop].out = body;
        at = loop;
    }
    for (int k = n->min; k < n->max && at >= 0; k++) {
        const int more = build(c, n->a, at);
        at = more < 0 ? -1 : add_state(c, (state){S_SPLIT, {{0}, 0}, more, out});
    }
    for (int k = 0; k < n->min && at >= 0; k++) at = build(c, n->a, at);
    return at;
}

// The positions (numbered character states) and END that state s reaches through splits.
static uint64_t closure(const compiler *c, int s, const int *number, uint8_t *seen) {
    if (seen[s]) return 0;
    seen[s] = 1;
    if (c->st[s].kind == S_CHAR) return 1ull << number[s];
    if (c->st[s].kind == S_ACCEPT) return JSON_PATTERN_END;
    return closure(c, c->st[s].out, number, seen) | closure(c, c->st[s].out2, number, seen);
}

static uint64_t closure_of(const compiler *c, int s, const int *number, uint8_t *seen) {
    memset(seen, 0, (size_t)c->n_st);
    return closure(c, s, number, seen);
}

int json_pattern_compile(const char *re, json_pattern *p, char *err, size_t n_err) {
    compiler *c = burst_calloc(1, sizeof *c);
    const int len = (int)strlen(re), lead = re[0] == '^';
    const int trail = len > lead && re[len - 1] == '$' && (len < 2 || re[len - 2] != '\\');
    c->re = re, c->at = lead, c->end = len - trail, c->err = err, c->n_err = n_err; // (too large for the stack)
    err[0] = 0;
    int root = len > MAX_LENGTH ? fail(c, "'pattern' is longer than %d bytes", MAX_LENGTH) : parse_alt(c);
    if (root >= 0 && c->at < c->end) root = fail(c, "'pattern' has a ')' without its '('");
    if (root >= 0) { // a search: unanchored ends take any characters before or after the match
        charset any = complement((charset){{0}, 0});
        any.non_ascii = 1;
        const int dot = add_node(c, (tree_node){.kind = A_SET, .set = any});
        const int star = dot < 0 ? -1 : add_node(c, (tree_node){.kind = A_REPEAT, .a = dot, .min = 0, .max = -1});
        if (star >= 0 && !lead) root = add_node(c, (tree_node){.kind = A_CAT, .a = star, .b = root});
        if (star >= 0 && root >= 0 && !trail) root = add_node(c, (tree_node){.kind = A_CAT, .a = root, .b = star});
        if (star < 0) root = -1;
    }
    const int accept = add_state(c, (state){S_ACCEPT, {{0}, 0}, -1, -1});
    const int start = root >= 0 ? build(c, root, accept) : -1;
    int *number = burst_calloc((size_t)c->n_st, sizeof *number), n = 0;
    for (int s = 0; start >= 0 && s < c->n_st; s++)
        if (c->st[s].kind == S_CHAR) number[s] = n++;
    if (start >= 0 && n > JSON_PATTERN_POSITIONS)
        fail(c, "'pattern' has more than %d characters' places once its quantifiers are unrolled", JSON_PATTERN_POSITIONS);
    if (!err[0]) {
        uint8_t *seen = burst_malloc((size_t)c->n_st);
        *p = (json_pattern){.start = closure_of(c, start, number, seen), .n = n};
        for (int s = 0; s < c->n_st; s++) {
            if (c->st[s].kind != S_CHAR) continue;
            struct json_pattern_position *at = &p->at[number[s]];
            *at = (struct json_pattern_position){{c->st[s].set.ascii[0], c->st[s].set.ascii[1]},
                                                 c->st[s].set.non_ascii, closure_of(c, c->st[s].out, number, seen)};
        }
        free(seen);
        // Only the places from which a match can still end are kept (alive: those that take a
        // character, ones JSON would need escaped left out, and lead to the end or to an alive
        // place), so that the set never holds a place no match goes on from.
        uint64_t alive = 0;
        for (int changed = 1; changed;) {
            changed = 0;
            for (int i = 0; i < n; i++)
                if (!(alive >> i & 1) && (p->at[i].ascii[0] || p->at[i].ascii[1] || p->at[i].non_ascii) &&
                    p->at[i].next & (alive | JSON_PATTERN_END))
                    alive |= 1ull << i, changed = 1;
        }
        for (int i = 0; i < n; i++) p->at[i].next &= alive | JSON_PATTERN_END;
        p->start &= alive | JSON_PATTERN_END;
        if (!p->start) fail(c, "'pattern' matches no text but with a quote, a backslash or a control character");
    }
    free(number);
    free(c);
    return err[0] ? -1 : 0;
}

// A path of characters through at most 63 positions repeats one once it is 64 long; without that
// cycle (at most 63) it is a path still. So where a match of k >= lo characters goes on, one of
// lo to lo + 62 does: ends up to min_length + 62 answer every question of json_pattern_fits.
void json_pattern_lengths(json_pattern *p, int min_length) {
    p->n_ends = min_length + 63;
    p->ends = burst_calloc((size_t)p->n_ends, sizeof *p->ends);
    for (int k = 1; k < p->n_ends; k++)
        for (int i = 0; i < p->n; i++)
            if (p->at[i].next & (k == 1 ? JSON_PATTERN_END : p->ends[k - 1])) p->ends[k] |= 1ull << i;
}

int json_pattern_fits(const json_pattern *p, uint64_t set, int chars, int min_length, int max_length) {
    const int lo = min_length - chars, hi = max_length < 0 ? p->n_ends : max_length - chars;
    if (lo <= 0 && hi >= 0 && set & JSON_PATTERN_END) return 1;
    for (int k = lo > 1 ? lo : 1; k <= hi && k < p->n_ends; k++)
        if (set & p->ends[k]) return 1;
    return 0;
}

void json_pattern_free(json_pattern *p) { free(p->ends); }

uint64_t json_pattern_step(const json_pattern *p, uint64_t set, unsigned char c) {
    uint64_t out = 0;
    for (uint64_t live = set & ~JSON_PATTERN_END; live; live &= live - 1) {
        const struct json_pattern_position *at = &p->at[__builtin_ctzll(live)];
        if (c < 0x80 ? (int)(at->ascii[c >> 6] >> (c & 63) & 1) : at->non_ascii) out |= at->next;
    }
    return out;
}
