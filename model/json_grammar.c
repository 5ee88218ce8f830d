#include "json_grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

// What the next byte may be. Whitespace may come in the modes up to J_AFTER.
enum { J_START, J_VALUE, J_VALUE_OR_CLOSE, J_KEY, J_KEY_OR_CLOSE, J_COLON, J_AFTER, J_STRING, J_NUMBER, J_LITERAL, J_DONE };
// A number's parts, by RFC 8259's grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
// Within a string: S_PLAIN, after a backslash, or S_HEX + k after \u and k of its 4 digits.
enum { S_PLAIN, S_ESCAPE, S_HEX };

void json_start(json_state *s) { *s = (json_state){.mode = J_START}; }

int json_complete(const json_state *s) { return s->mode == J_DONE; }

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Whitespace byte c between tokens, where the run allows it: a space or a newline first, then
// (after a newline) up to JSON_MAX_INDENT spaces or tabs.
static int space(json_state *s, unsigned char c) {
    if (!s->spaces) s->spaces = c == ' ' ? 1 : c == '\n' ? 2 : 0;
    else if (s->spaces >= 2 && s->spaces < 2 + JSON_MAX_INDENT && (c == ' ' || c == '\t')) s->spaces++;
    else return 0;
    return s->spaces != 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// After a value: a separator or a closer in the container, or nothing at all after the object.
static void value_done(json_state *s) { s->mode = s->depth ? J_AFTER : J_DONE; }

static int open_container(json_state *s, int object) {
    if (s->depth == JSON_MAX_DEPTH) return 0;
    s->objects = object ? s->objects | 1ull << s->depth : s->objects & ~(1ull << s->depth);
    s->depth++;
    s->mode = object ? J_KEY_OR_CLOSE : J_VALUE_OR_CLOSE;
    return 1;
}

static int in_object(const json_state *s) { return (int)(s->objects >> (s->depth - 1) & 1); }

static int close_container(json_state *s, int object) {
    if (!s->depth || in_object(s) != object) return 0;
    s->depth--;
    value_done(s);
    return 1;
}

static int start_string(json_state *s, int key) {
    s->mode = J_STRING, s->key = (uint8_t)key, s->sub = S_PLAIN;
    return 1;
}

// A value's first byte.
static int start_value(json_state *s, unsigned char c) {
    if (c == '{' || c == '[') return open_container(s, c == '{');
    if (c == '"') return start_string(s, 0);
    if (c == 't' || c == 'f' || c == 'n') {
        s->mode = J_LITERAL, s->literal = c == 't' ? 0 : c == 'f' ? 1 : 2, s->sub = 1;
        return 1;
    }
    if (c != '-' && !is_digit(c)) return 0;
    s->mode = J_NUMBER, s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
    return 1;
}

static int string_byte(json_state *s, unsigned char c) {
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
    if (c == '\\') s->sub = S_ESCAPE;
    else if (c == '"' && s->key) s->mode = J_COLON;
    else if (c == '"') value_done(s);
    return c >= 0x20;
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

static int feed_byte(json_state *s, unsigned char c) {
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
        if (part >= 0) {
            s->sub = (uint8_t)part;
            return 1;
        }
        if (s->sub != N_ZERO && s->sub != N_INT && s->sub != N_FRAC && s->sub != N_EXP) return 0;
        value_done(s); // c comes after the number (the object is open: J_AFTER)
        break;
    }
    case J_DONE: return 0;
    }
    if (is_space(c)) return space(s, c);
    switch (s->mode) {
    case J_START: return c == '{' && open_container(s, 1);
    case J_VALUE_OR_CLOSE:
        if (c == ']') return close_container(s, 0);
        return start_value(s, c);
    case J_VALUE: return start_value(s, c);
    case J_KEY_OR_CLOSE:
        if (c == '}') return close_container(s, 1);
        return c == '"' && start_string(s, 1);
    case J_KEY: return c == '"' && start_string(s, 1);
    case J_COLON:
        s->mode = J_VALUE;
        return c == ':';
    default: // J_AFTER
        if (c == ',') {
            s->mode = in_object(s) ? J_KEY : J_VALUE;
            return 1;
        }
        return (c == '}' || c == ']') && close_container(s, c == '}');
    }
}

int json_feed(json_state *s, const char *bytes, int n) {
    for (int i = 0; i < n; i++)
        if (!feed_byte(s, (unsigned char)bytes[i])) return 0;
    return 1;
}

struct json_vocab {
    int n, eos;
    int *start, *len; // token id's text: text[start[id], + len[id]); len 0: none (control pieces)
    char *text;
    uint8_t *plain;   // token id's text can only be a string's content: no quote, backslash or byte below 0x20
};

json_vocab *json_vocab_new(const tokenizer *t) {
    json_vocab *v = burst_calloc(1, sizeof *v);
    v->n = tokenizer_vocab_size(t), v->eos = tokenizer_eos(t);
    v->start = burst_malloc(sizeof *v->start * (size_t)v->n), v->len = burst_calloc((size_t)v->n, sizeof *v->len);
    v->plain = burst_calloc((size_t)v->n, 1);
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
        v->plain[id] = 1;
        for (size_t i = 0; i < len; i++) {
            const unsigned char c = (unsigned char)v->text[used + i];
            v->plain[id] &= c >= 0x20 && c != '"' && c != '\\';
        }
        used += len;
        free(piece);
    }
    return v;
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->start), free(v->len), free(v->text), free(v->plain);
    free(v);
}

// fits[c]: whether byte c may come after s.
static void next_bytes(const json_state *s, uint8_t fits[256]) {
    for (int c = 0; c < 256; c++) {
        json_state next = *s;
        fits[c] = (uint8_t)feed_byte(&next, (unsigned char)c);
    }
}

// Shortcuts before a token's text is fed whole: within a string's plain text, a token that can
// only be string content fits as it is (most of a vocabulary: 0.7 ms a mask of 32000 tokens fed
// whole); a token whose first byte does not fit is out, and so is one whose first byte is a space
// (most of LLaMA's) and whose second does not fit after it.
void json_mask(const json_vocab *v, const json_state *s, float *logits) {
    const int in_text = s->mode == J_STRING && s->sub == S_PLAIN;
    uint8_t first[256], after_space[256] = {0};
    next_bytes(s, first);
    json_state spaced = *s;
    if (feed_byte(&spaced, ' ')) next_bytes(&spaced, after_space);
    int fits = 0;
    for (int id = 0; id < v->n; id++) {
        const char *text = v->text + v->start[id];
        const int len = v->len[id];
        json_state next = *s;
        const int ok = id == v->eos ? json_complete(s)
                       : !len || !first[(unsigned char)text[0]] ? 0
                       : in_text && v->plain[id]                ? 1
                       : len > 1 && text[0] == ' ' && !after_space[(unsigned char)text[1]] ? 0
                                                                                          : json_feed(&next, text, len);
        if (ok) fits++;
        else logits[id] = -INFINITY;
    }
    if (!fits) logits[v->eos] = 0; // no token continues it: the text ends here
}

void json_advance(const json_vocab *v, json_state *s, int id) {
    if (id != v->eos) json_feed(s, v->text + v->start[id], v->len[id]);
}
