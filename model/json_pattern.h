// JSON Schema's "pattern" (a regular expression searched for in a string, ECMA-262 as Python's re
// also reads it) compiled to an NFA small enough that the set of its live positions is one 64-bit
// word: json_grammar.c steps that set with each character of a string being generated.
// The subset: literals, ".", classes ([a-z_], [^...]), \d \w \s \D \W \S, escaped punctuation,
// groups ((...) and (?:...)), alternation, the quantifiers * + ? {n} {n,} {n,m} (and their lazy
// forms, which match the same strings), "^" first and "$" last; at most 63 character positions
// once quantifiers are unrolled. Where the pattern leaves a choice, the text takes a narrower one,
// so that it never needs a JSON escape: only ASCII from the space up without '"' and '\', except
// that "." (and a pattern's unanchored ends) also take any non-ASCII character; \s is a space.
#pragma once
#include <stddef.h>
#include <stdint.h>

enum { JSON_PATTERN_POSITIONS = 63 };
#define JSON_PATTERN_END (1ull << 63) // in a set: the text so far is a match

typedef struct {
    uint64_t start; // the set before any character
    int n;          // positions
    struct json_pattern_position {
        uint64_t ascii[2]; // bit c: ASCII character c is taken here
        int non_ascii;     // any non-ASCII character is taken here
        uint64_t next;     // the set after a character taken here
    } at[JSON_PATTERN_POSITIONS];
    // ends[k] (k < n_ends): the positions from which a match ends k characters on (the one taken
    // there the first; json_pattern_lengths, NULL before)
    uint64_t *ends;
    int n_ends;
} json_pattern;

// re compiled into p; 0, or -1 with the reason in err.
int json_pattern_compile(const char *re, json_pattern *p, char *err, size_t n_err);
// The set after character c (an ASCII byte, or any byte >= 0x80 for a non-ASCII character); 0:
// no match can follow.
uint64_t json_pattern_step(const json_pattern *p, uint64_t set, unsigned char c);
// p's ends, enough to answer json_pattern_fits for strings of at least min_length characters.
void json_pattern_lengths(json_pattern *p, int min_length);
// Whether a match goes on from set (a string of chars characters so far) to end at a length
// within [min_length, max_length] (max_length -1: unbounded).
int json_pattern_fits(const json_pattern *p, uint64_t set, int chars, int min_length, int max_length);
void json_pattern_free(json_pattern *p);
