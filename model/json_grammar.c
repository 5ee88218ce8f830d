#include "json_grammar.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

// What the next byte may be. Whitespace may come in the modes up to J_AFTER.
enum { J_START, J_VALUE, J_VALUE_OR_CLOSE, J_KEY, J_KEY_OR_CLOSE, J_COLON, J_AFTER, J_STRING, J_NUMBER, J_LITERAL, J_MATCH, J_DONE };
// A number's parts, by RFC 8259's grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
// Within a string: S_PLAIN, after a backslash, or S_HEX + k after \u and k of its 4 digits.
enum { S_PLAIN, S_ESCAPE, S_HEX };
// Within a time's string (format time or date-time), after its seconds: where it is, and in
// matched its part's bytes so far. (A formatted string has no escapes: its phases take sub.)
enum { F_SECONDS = S_PLAIN, F_FRACTION, F_OFFSET, F_END };

_Static_assert(offsetof(json_branch, frames) == 3 * 8 + 5 * 2 + 12 && sizeof(json_frame) == 6,
               "json_branch has no padding before its frames: branches compare bytewise");

// The bytes of a branch that matter: its fields and its containers open.
static size_t branch_size(const json_branch *b) { return offsetof(json_branch, frames) + sizeof *b->frames * b->depth; }
static void copy_branch(json_branch *dst, const json_branch *src) { memcpy(dst, src, branch_size(src)); }

void json_start(json_state *s, const json_schema *schema) {
    if (!schema) schema = json_schema_any_object();
    json_branch *b = &s->branches[0];
    memset(b, 0, offsetof(json_branch, frames));
    b->schema = schema, b->node = (uint16_t)schema->root, b->mode = J_START;
    s->n = 1;
}

void json_copy(json_state *dst, const json_state *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) copy_branch(&dst->branches[i], &src->branches[i]);
}

int json_complete(const json_state *s) {
    for (int i = 0; i < s->n; i++)
        if (s->branches[i].mode == J_DONE) return 1;
    return 0;
}

static const json_node *node_at(const json_branch *s, int n) { return &s->schema->nodes[n]; }
static json_frame *innermost(json_branch *s) { return &s->frames[s->depth - 1]; }
static const json_node *innermost_node(const json_branch *s) { return node_at(s, s->frames[s->depth - 1].node); }
static uint16_t count_up(uint16_t n) { return n < JSON_UNLIMITED ? n + 1 : n; }
static int below_max(int n, int max) { return max == JSON_UNLIMITED || n < max; }

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Whitespace byte c between tokens, where the run allows it: a space or a newline first, then
// (after a newline) up to JSON_MAX_INDENT spaces or tabs.
static int space(json_branch *s, unsigned char c) {
    if (!s->spaces) s->spaces = c == ' ' ? 1 : c == '\n' ? 2 : 0;
    else if (s->spaces >= 2 && s->spaces < 2 + JSON_MAX_INDENT && (c == ' ' || c == '\t')) s->spaces++;
    else return 0;
    return s->spaces != 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// After a value: a separator or a closer in the container, or nothing at all after the object. The
// value's fields are zeroed: branches that read it as different alternatives are one again.
static void value_done(json_branch *s) {
    memset(&s->magnitude, 0, offsetof(json_branch, depth) - offsetof(json_branch, magnitude));
    s->mode = s->depth ? J_AFTER : J_DONE;
}

// The innermost object may take a key: a property not yet given, or any key where it has no
// properties and its values have a schema.
static int may_key(const json_branch *s) {
    const json_node *n = innermost_node(s);
    return n->n_props ? s->frames[s->depth - 1].count < n->n_props : n->extra >= 0;
}

// Whether the innermost object's property i may come next: none required is left out before it.
static int may_be_next(const json_branch *s, int i) {
    const json_node *n = innermost_node(s);
    int k = s->frames[s->depth - 1].count;
    if (i < k) return 0;
    while (k < i && !s->schema->props[n->props + k].required) k++;
    return k == i;
}

static int may_close(const json_branch *s, int object) {
    const json_node *n = innermost_node(s);
    const int count = s->frames[s->depth - 1].count;
    return object ? count > n->last_required : count >= n->min_items;
}

// The node of the innermost array's next item: its place is the count of items begun.
static uint16_t next_item(const json_branch *s) {
    const json_node *n = innermost_node(s);
    const int at = s->frames[s->depth - 1].count;
    return (uint16_t)(at < n->n_prefix ? s->schema->alts[n->prefix + at] : n->items);
}

// Container open, of the value's node.
static int open_container(json_branch *s, int object) {
    if (s->depth == JSON_MAX_DEPTH) return 0;
    s->frames[s->depth++] = (json_frame){.node = s->node, .object = (uint16_t)object};
    s->mode = object ? J_KEY_OR_CLOSE : J_VALUE_OR_CLOSE;
    if (!object) s->node = next_item(s);
    return 1;
}

static int close_container(json_branch *s, int object) {
    if (!s->depth || innermost(s)->object != object || !may_close(s, object)) return 0;
    s->depth--;
    value_done(s);
    return 1;
}

static int start_string(json_branch *s, int key) {
    const json_node *n = node_at(s, s->node);
    s->mode = J_STRING, s->key = (uint8_t)key, s->sub = S_PLAIN, s->chars = 0, s->magnitude = 0;
    s->pattern = !key && n->pattern ? s->schema->patterns[n->pattern - 1].start : 0;
    return 1;
}

static int days_in_month(int year, int month) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const int leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    return month == 2 && leap ? 29 : days[month - 1];
}

// Byte c at place `at` of a date YYYY-MM-DD (years 0001-9999), its digits so far in *digits as a
// number.
static int date_byte(uint64_t *digits, int at, unsigned char c) {
    if (at == 4 || at == 7) return c == '-';
    if (!is_digit(c)) return 0;
    const int d = c - '0', prev = (int)(*digits % 10);
    const int ok = at == 3   ? *digits || d                                                  // not year 0000
                   : at == 5 ? d <= 1                                                        // month 01-12
                   : at == 6 ? (prev ? d <= 2 : d >= 1)
                   : at == 8 ? d * 10 <= days_in_month((int)(*digits / 100), (int)(*digits % 100)) // YYYYMM so far
                   : at == 9 ? prev * 10 + d >= 1 &&
                                   prev * 10 + d <= days_in_month((int)(*digits / 1000), (int)(*digits / 10 % 100))
                             : 1;
    *digits = *digits * 10 + (uint64_t)d;
    return ok;
}

// Byte c at place `at` of hh:mm:ss (hours 00-23, no leap second) or of an offset's hh:mm.
static int time_byte(uint64_t *digits, int at, unsigned char c) {
    if (at == 2 || at == 5) return c == ':';
    if (!is_digit(c)) return 0;
    const int d = c - '0';
    const int ok = at == 0 ? d <= 2 : at == 1 ? *digits % 10 < 2 || d <= 3 : at == 3 || at == 6 ? d <= 5 : 1;
    *digits = *digits * 10 + (uint64_t)d;
    return ok;
}

// Byte c of a time after its seconds: a fraction (1 to 6 digits), then Z or an offset (+hh:mm, -hh:mm).
static int time_tail_byte(json_branch *s, unsigned char c) {
    switch (s->sub) {
    case F_SECONDS:
        if (c == '.') {
            s->sub = F_FRACTION, s->matched = 0;
            return 1;
        }
        break;
    case F_FRACTION:
        if (is_digit(c) && s->matched < 6) {
            s->matched++;
            return 1;
        }
        if (!s->matched) return 0;
        break;
    case F_OFFSET:
        if (!time_byte(&s->magnitude, s->matched, c)) return 0;
        if (++s->matched == 5) s->sub = F_END;
        return 1;
    default: return 0; // F_END
    }
    if (c == 'Z') s->sub = F_END;
    else if (c == '+' || c == '-') s->sub = F_OFFSET, s->matched = 0;
    else return 0;
    return 1;
}

// Byte c of a string of node n's format (the closing quote only where it is whole); its bytes so
// far in chars (such strings are ASCII).
static int format_byte(json_branch *s, const json_node *n, unsigned char c) {
    const int at = s->chars;
    const int whole = n->format == JSON_FORMAT_DATE ? at == 10 : n->format == JSON_FORMAT_UUID ? at == 36 : s->sub == F_END;
    if (c == '"' || whole) {
        if (c != '"' || !whole) return 0;
        value_done(s);
        return 1;
    }
    s->chars = count_up(s->chars);
    switch (n->format) {
    case JSON_FORMAT_UUID:
        if (at == 8 || at == 13 || at == 18 || at == 23) return c == '-';
        return is_digit(c) || (c >= 'a' && c <= 'f');
    case JSON_FORMAT_DATE: return date_byte(&s->magnitude, at, c);
    case JSON_FORMAT_DATE_TIME:
        if (at < 10) return date_byte(&s->magnitude, at, c);
        if (at == 10) return c == 'T';
        return at < 19 ? time_byte(&s->magnitude, at - 11, c) : time_tail_byte(s, c);
    default: return at < 8 ? time_byte(&s->magnitude, at, c) : time_tail_byte(s, c); // JSON_FORMAT_TIME
    }
}

// The texts being matched: the node's values, or the names of the innermost object's properties.
static const json_text *match_texts(const json_branch *s) {
    return s->schema->texts + (s->key ? innermost_node(s)->names : node_at(s, s->node)->values);
}

// Byte c of a text matched (sorted, the texts that go on with c are a run of [lo, hi)): where one
// is left (a key: one that may come next), those. A name matched whole gives its property's value
// node; a value matched whole ends there unless it is a number (more digits may follow).
static int match_byte(json_branch *s, unsigned char c) {
    const json_text *t = match_texts(s);
    const int at = s->matched;
    int lo = s->lo, hi, fits = 0;
    while (lo < s->hi && (t[lo].len <= at || (unsigned char)t[lo].text[at] < c)) lo++;
    for (hi = lo; hi < s->hi && (unsigned char)t[hi].text[at] == c; hi++) fits |= !s->key || may_be_next(s, t[hi].index);
    if (!fits) return 0;
    s->lo = (uint16_t)lo, s->hi = (uint16_t)hi, s->matched++;
    if (t[lo].len != s->matched) return 1;
    if (s->key) {
        json_frame *f = innermost(s);
        f->count = (uint16_t)(t[lo].index + 1);
        s->node = (uint16_t)s->schema->props[innermost_node(s)->props + t[lo].index].node;
        s->mode = J_COLON;
    } else if (!is_digit(c)) {
        value_done(s);
    }
    return 1;
}

static int start_match(json_branch *s, int key, int n, unsigned char c) {
    s->mode = J_MATCH, s->key = (uint8_t)key, s->lo = 0, s->hi = (uint16_t)n, s->matched = 0;
    return match_byte(s, c);
}

static int start_key(json_branch *s, unsigned char c) {
    if (c != '"' || !may_key(s)) return 0;
    const json_node *n = innermost_node(s);
    if (n->n_props) return start_match(s, 1, n->n_props, c);
    s->node = (uint16_t)n->extra;
    return start_string(s, 1);
}

static uint64_t power_of_10(int k) {
    uint64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

// Whether ranged node n's range holds a number whose sign is negative and whose digits so far make
// magnitude (the last decimals of them after its point; fraction: it has a point), or one that it
// begins: more digits (none after a leading 0 but a fraction's, up to n->decimals of them). In
// units of 10^-n->decimals: the magnitudes that begin so are runs [lo, lo + span).
static int range_meets(const json_node *n, int negative, uint64_t magnitude, int decimals, int fraction) {
    const uint64_t unit = power_of_10(n->decimals - decimals);
    for (uint64_t lo = magnitude * unit, span = unit; lo <= (uint64_t)JSON_RANGE_LIMIT; lo *= 10, span *= 10) {
        const int64_t a = (int64_t)lo, b = (int64_t)(lo + span - 1);
        if (negative ? -b <= n->maximum && -a >= n->minimum : a <= n->maximum && b >= n->minimum) return 1;
        if (fraction || !magnitude) break;
    }
    return 0;
}

// Whether the number s has read so far can still end within ranged node n's range.
static int may_reach(const json_node *n, const json_branch *s) {
    if (s->sub != N_MINUS)
        return range_meets(n, s->negative, s->magnitude, s->decimals, s->sub == N_DOT || s->sub == N_FRAC);
    for (int d = 0; d < 10; d++) // a minus alone: a first digit must lead somewhere
        if (range_meets(n, 1, (uint64_t)d, 0, 0)) return 1;
    return 0;
}

// Whether node n holds the number s has read: within its range, if it has one (decimals: 0 but in
// a fraction), or a multiple, if it asks for one (magnitude is then the remainder: no range beside).
static int number_held(const json_node *n, const json_branch *s) {
    if (n->multiple) return !s->magnitude;
    const uint64_t units = s->magnitude * power_of_10(n->decimals - s->decimals);
    const int64_t v = s->negative ? -(int64_t)units : (int64_t)units;
    return !n->ranged || (v >= n->minimum && v <= n->maximum);
}

// Digit d (-1: none, the first digit being in magnitude already) of an integer of node n's
// multipleOf: the remainder so far in magnitude, the digits in chars. Whether a multiple can still
// end within JSON_MULTIPLE_DIGITS digits: some suffix x of j more digits (x < 10^j) that makes
// remainder * 10^j + x a multiple.
static int multiple_digit(const json_node *n, json_branch *s, int d) {
    const uint64_t m = (uint64_t)n->multiple;
    if (d >= 0) s->magnitude = s->magnitude * 10 + (uint64_t)d;
    s->magnitude %= m;
    if (d >= 0 || s->sub != N_MINUS) s->chars++;
    uint64_t ten_j = 1; // 10^j
    for (int j = 0; j <= JSON_MULTIPLE_DIGITS - s->chars; j++, ten_j *= 10)
        if ((m - s->magnitude * (ten_j % m) % m) % m < ten_j) return 1;
    return 0;
}

// A value's first byte: of the value's node, or of its alternatives that begin so: the first in s,
// each later one in a branch of its own added to set, while it has room.
static int start_value(json_state *set, json_branch *s, unsigned char c) {
    const int class = json_start_class(c);
    const json_node *n = node_at(s, s->node);
    while (n->starts & class && n->n_alts) {
        const int *alt = s->schema->alts + n->alts, *end = alt + n->n_alts;
        while (!(node_at(s, *alt)->starts & class)) alt++;
        for (const int *other = alt + 1; other < end && set->n < JSON_MAX_BRANCHES; other++) {
            if (!(node_at(s, *other)->starts & class)) continue;
            json_branch fork;
            copy_branch(&fork, s);
            fork.node = (uint16_t)*other;
            if (start_value(set, &fork, c) && set->n < JSON_MAX_BRANCHES) copy_branch(&set->branches[set->n++], &fork);
        }
        s->node = (uint16_t)*alt, n = node_at(s, *alt);
    }
    if (!(n->starts & class)) return 0;
    if (s->depth && !innermost(s)->object) {
        if (!below_max(innermost(s)->count, innermost_node(s)->max_items)) return 0;
        innermost(s)->count = count_up(innermost(s)->count);
    }
    if (n->n_values) return start_match(s, 0, n->n_values, c);
    if (c == '{' || c == '[') return open_container(s, c == '{');
    if (c == '"') return start_string(s, 0);
    if (c == 't' || c == 'f' || c == 'n') {
        s->mode = J_LITERAL, s->literal = c == 't' ? 0 : c == 'f' ? 1 : 2, s->sub = 1;
        return 1;
    }
    s->mode = J_NUMBER, s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
    s->integer = !(n->types & JSON_NUMBER), s->negative = c == '-', s->magnitude = c == '-' ? 0 : c - '0';
    s->decimals = 0, s->chars = 0; // (chars may hold a free key's characters still)
    if (n->multiple) return multiple_digit(n, s, -1);
    return !n->ranged || may_reach(n, s);
}

static int string_byte(json_branch *s, unsigned char c) {
    const json_node *n = node_at(s, s->node);
    if (n->format && !s->key) return format_byte(s, n, c); // (a free key's node is its value's)
    if (s->sub == S_ESCAPE) {
        if (c == 'u') s->sub = S_HEX;
        else if (c && strchr("\"\\/bfnrt", c)) s->sub = S_PLAIN;
        else return 0;
        return 1;
    }
    if (s->sub >= S_HEX) {
        s->sub = s->sub == S_HEX + 3 ? S_PLAIN : s->sub + 1;
        return is_hex(c);
    }
    if (s->utf8_left) {
        if (c < s->utf8_lo || c > s->utf8_hi) return 0;
        s->utf8_left--, s->utf8_lo = 0x80, s->utf8_hi = 0xbf;
        return 1;
    }
    const json_pattern *pattern = !s->key && n->pattern ? &s->schema->patterns[n->pattern - 1] : NULL;
    if (c == '"') {
        if (s->key) s->mode = J_COLON;
        else if (s->chars < n->min_length || (pattern && !(s->pattern & JSON_PATTERN_END))) return 0;
        else value_done(s);
        return 1;
    }
    if (pattern && !(s->pattern = json_pattern_step(pattern, s->pattern, c))) return 0; // (no escapes: no '\')
    if (c < 0x20 || (c >= 0x80 && (c < 0xc2 || c > 0xf4))) return 0;
    if (!s->key && !below_max(s->chars, n->max_length)) return 0; // a character begins (an escape's at its backslash)
    s->chars = count_up(s->chars);
    if (pattern && !json_pattern_fits(pattern, s->pattern, s->chars, n->min_length,
                                      n->max_length == JSON_UNLIMITED ? -1 : n->max_length))
        return 0; // (no match of a length within the bounds goes on)
    if (c >= 0x80) { // RFC 3629's table: the continuation bytes due, and the first one's range
        s->utf8_left = c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
        s->utf8_lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        s->utf8_hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    }
    if (c == '\\') s->sub = S_ESCAPE;
    return 1;
}

// The number's part after byte c, or -1 where c does not continue it.
static int number_byte(int part, unsigned char c) {
    const int exp = c == 'e' || c == 'E';
    switch (part) {
    case N_MINUS: return c == '0' ? N_ZERO : is_digit(c) ? N_INT : -1;
    case N_ZERO: return c == '.' ? N_DOT : exp ? N_E : -1;
    case N_INT: return is_digit(c) ? N_INT : c == '.' ? N_DOT : exp ? N_E : -1;
    case N_DOT: return is_digit(c) ? N_FRAC : -1;
    case N_FRAC: return is_digit(c) ? N_FRAC : exp ? N_E : -1;
    case N_E: return is_digit(c) ? N_EXP : c == '+' || c == '-' ? N_ESIGN : -1;
    default: return is_digit(c) ? N_EXP : -1; // N_ESIGN, N_EXP
    }
}

static int feed_byte(json_state *set, json_branch *s, unsigned char c) {
    static const char *const literals[] = {"true", "false", "null"};
    if (!is_space(c)) s->spaces = 0;
    switch (s->mode) {
    case J_STRING: return string_byte(s, c);
    case J_LITERAL:
        if (c != (unsigned char)literals[s->literal][s->sub]) return 0;
        if (!literals[s->literal][++s->sub]) value_done(s);
        return 1;
    case J_NUMBER: {
        const int part = number_byte(s->sub, c);
        const json_node *n = node_at(s, s->node);
        if (part >= 0 && !(s->integer && part == N_DOT) && !((s->integer || n->ranged) && part == N_E)) {
            s->sub = (uint8_t)part;
            if (n->multiple) return multiple_digit(n, s, c - '0');
            if (!n->ranged) return 1;
            if (part == N_FRAC && s->decimals++ == n->decimals) return 0;
            if (part != N_DOT) s->magnitude = s->magnitude * 10 + (uint64_t)(c - '0');
            return may_reach(n, s);
        }
        if ((s->sub != N_ZERO && s->sub != N_INT && s->sub != N_FRAC && s->sub != N_EXP) || !number_held(n, s)) return 0;
        value_done(s); // c comes after the number (the object is open: J_AFTER)
        break;
    }
    case J_MATCH:
        if (match_byte(s, c)) return 1;
        if (s->key || match_texts(s)[s->lo].len != s->matched) return 0;
        value_done(s); // a number matched whole: c comes after it
        break;
    case J_DONE: return 0;
    }
    if (is_space(c)) return space(s, c);
    switch (s->mode) {
    case J_START: return c == '{' && start_value(set, s, c);
    case J_VALUE_OR_CLOSE:
        if (c == ']') return close_container(s, 0);
        return start_value(set, s, c);
    case J_VALUE: return start_value(set, s, c);
    case J_KEY_OR_CLOSE:
        if (c == '}') return close_container(s, 1);
        return start_key(s, c);
    case J_KEY: return start_key(s, c);
    case J_COLON:
        s->mode = J_VALUE;
        return c == ':';
    default: // J_AFTER
        if (c == ',' && innermost(s)->object) {
            s->mode = J_KEY;
            return may_key(s);
        }
        if (c == ',') {
            s->mode = J_VALUE, s->node = next_item(s);
            return below_max(innermost(s)->count, innermost_node(s)->max_items);
        }
        return (c == '}' || c == ']') && close_container(s, c == '}');
    }
}

// Whether branch b is one of set's first n.
static int seen_branch(const json_state *set, int n, const json_branch *b) {
    for (int i = 0; i < n; i++)
        if (set->branches[i].depth == b->depth && !memcmp(&set->branches[i], b, branch_size(b))) return 1;
    return 0;
}

int json_feed(json_state *s, const char *bytes, int n) {
    for (int i = 0; i < n && s->n; i++) {
        const int before = s->n; // (forks join after these, having read the byte)
        uint8_t fits[JSON_MAX_BRANCHES];
        for (int b = 0; b < before; b++) fits[b] = (uint8_t)feed_byte(s, &s->branches[b], (unsigned char)bytes[i]);
        if (s->n == 1) { // one branch, as most of the time: nothing to compare
            s->n = fits[0];
            continue;
        }
        int kept = 0;
        for (int b = 0; b < s->n; b++) {
            if ((b < before && !fits[b]) || seen_branch(s, kept, &s->branches[b])) continue;
            if (b != kept) copy_branch(&s->branches[kept], &s->branches[b]);
            kept++;
        }
        s->n = kept;
    }
    return s->n > 0;
}

struct json_vocab {
    int n, eos;
    int *start, *len; // token id's text: text[start[id], + len[id]); len 0: none (control pieces)
    char *text;
    uint8_t *plain;   // token id's text is string content, whole: from a string's plain text back to it (no
                      // quote, escapes and UTF-8 sequences whole)
    uint16_t *chars;  // and then its characters
};

json_vocab *json_vocab_new(const tokenizer *t) {
    json_vocab *v = burst_calloc(1, sizeof *v);
    v->n = tokenizer_vocab_size(t), v->eos = tokenizer_eos(t);
    v->start = burst_malloc(sizeof *v->start * (size_t)v->n), v->len = burst_calloc((size_t)v->n, sizeof *v->len);
    v->plain = burst_calloc((size_t)v->n, 1), v->chars = burst_calloc((size_t)v->n, sizeof *v->chars);
    size_t used = 0, cap = 16 * (size_t)v->n;
    v->text = burst_malloc(cap);
    for (int id = 0; id < v->n; id++) {
        v->start[id] = (int)used;
        if (!tokenizer_is_text(t, id)) continue;
        int byte;
        char *piece = tokenizer_piece(t, id, &byte);
        const size_t len = byte >= 0 ? 1 : strlen(piece);
        if (used + len > cap) v->text = burst_realloc(v->text, cap = 2 * (used + len));
        if (byte >= 0) v->text[used] = (char)byte;
        else memcpy(v->text + used, piece, len);
        v->len[id] = (int)len;
        json_state s;
        json_start(&s, NULL);
        json_feed(&s, "{\"", 2); // in a key: a string without limits on its length
        const json_branch *b = &s.branches[0]; // (JSON mode has no alternatives: one branch)
        v->plain[id] = !memchr(v->text + used, '"', len) && json_feed(&s, v->text + used, (int)len) && b->sub == S_PLAIN &&
                       !b->utf8_left;
        v->chars[id] = b->chars;
        used += len;
        free(piece);
    }
    return v;
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->start), free(v->len), free(v->text), free(v->plain), free(v->chars);
    free(v);
}

// fits[c]: whether byte c may come after s.
static void next_bytes(const json_state *s, uint8_t fits[256]) {
    json_state next;
    for (int c = 0; c < 256; c++) {
        json_copy(&next, s);
        fits[c] = (uint8_t)json_feed(&next, &(char){(char)c}, 1);
    }
}

// s: the branch b alone.
static void state_of(json_state *s, const json_branch *b) {
    s->n = 1;
    copy_branch(&s->branches[0], b);
}

// Whether len bytes of text continue branch b (past the shortcuts: a state is large).
static __attribute__((noinline)) int feeds_whole(const json_branch *b, const unsigned char *text, int len) {
    json_state next;
    state_of(&next, b);
    return json_feed(&next, (const char *)text, len);
}

// fit[id] set for each token (but EOS) whose text continues branch b, where not set already.
// Shortcuts before a token's text is fed whole: within a string's plain text, a token that can only
// be string content fits as it is where the string has room for its characters, and not where it
// has not (most of a vocabulary: 0.7 ms a mask of 32000 tokens fed whole); a token whose first
// byte does not fit is out, and so is one whose first byte is a space (most of LLaMA's) and whose
// second does not fit after it.
static void fit_branch(const json_vocab *v, const json_branch *b, uint8_t *fit) {
    const json_node *n = node_at(b, b->node);
    int room = -1; // characters of plain text that fit
    if (b->mode == J_STRING && b->sub == S_PLAIN && !b->utf8_left && (b->key || (!n->format && !n->pattern)))
        room = b->key || n->max_length == JSON_UNLIMITED ? INT_MAX : n->max_length - b->chars;
    uint8_t first[256], after_space[256] = {0};
    json_state alone;
    state_of(&alone, b);
    next_bytes(&alone, first);
    if (json_feed(&alone, " ", 1)) next_bytes(&alone, after_space);
    // (v's fields in locals: a store to fit, bytes, might change them for all the compiler knows)
    const int n_tokens = v->n, eos = v->eos, *start = v->start, *lens = v->len;
    const unsigned char *texts = (const unsigned char *)v->text, *plain = v->plain;
    const uint16_t *chars = v->chars;
    for (int id = 0; id < n_tokens; id++) {
        const unsigned char *text = texts + start[id];
        const int len = lens[id];
        if (fit[id] || id == eos || !len || !first[text[0]]) continue;
        if (plain[id] && room >= 0) fit[id] = chars[id] <= room;
        else if (len > 1 && text[0] == ' ' && !after_space[text[1]]) continue;
        else fit[id] = (uint8_t)feeds_whole(b, text, len);
    }
}

void json_mask(const json_vocab *v, const json_state *s, float *logits) {
    uint8_t *fit = burst_calloc((size_t)v->n, 1);
    for (int b = 0; b < s->n; b++) fit_branch(v, &s->branches[b], fit);
    fit[v->eos] = (uint8_t)json_complete(s);
    int fits = 0;
    for (int id = 0; id < v->n; id++) {
        if (fit[id]) fits++;
        else logits[id] = -INFINITY;
    }
    free(fit);
    if (!fits) logits[v->eos] = 0; // no token continues it: the text ends here
}

void json_advance(const json_vocab *v, json_state *s, int id) {
    if (id != v->eos) json_feed(s, v->text + v->start[id], v->len[id]);
}
