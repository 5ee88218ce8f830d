// JSON mode and structured outputs (the API's response_format json_object and json_schema):
// generated text held to one JSON object (RFC 8259), an instance of a schema (json_schema.h; JSON
// mode's: any object), as it grows. A json_state reads the text's bytes and says whether they are
// still the start of an instance; json_mask sets the logits of every token that would end that to
// -inf before a token is drawn, so that the text is an instance when EOS comes (the only token then).
// Limits that keep a model from running on without end where grammar allows it (llama.cpp's JSON
// grammar's whitespace): whitespace between tokens is nothing, one space, or a newline and up to
// JSON_MAX_INDENT spaces or tabs; at most JSON_MAX_DEPTH containers open. No whitespace after the
// object; strings take any character from U+0020 up, in UTF-8 (RFC 3629: no overlong forms, no
// surrogates).
//
// A json_vocab is immutable after json_vocab_new: safe from any thread. A json_state belongs to
// one sequence; its schema outlives it.
#pragma once
#include <stdint.h>

#include "json_schema.h"
#include "tokenizer.h"

enum { JSON_MAX_INDENT = 20, JSON_MAX_DEPTH = 64, JSON_MAX_BRANCHES = 16 };

typedef struct {
    uint16_t node;   // the container's schema node
    uint16_t count;  // an array's items begun; an object's (with properties) next property's place
    uint16_t object; // an object (else an array)
} json_frame;

// One reading of the text: a path through the schema's nodes. Its fields have no padding between
// them and a value's are zeroed once it is whole, so that branches that meet again compare equal
// bytewise (json_grammar.c).
typedef struct {
    const json_schema *schema;
    // The value being read:
    uint64_t magnitude; // a number with a range, a date or time: its digits so far, as a number (an
                        // integer with multipleOf: their remainder; its digits in chars)
    uint64_t pattern;   // a string with a pattern: the set of its NFA's live places (json_pattern.h)
    uint16_t node;    // the next value's schema node (a string's, while in it; the matched texts')
    uint16_t lo, hi;  // matching (an enum's values, an object's names): the texts [lo, hi) of the
    uint16_t matched; //   node's begin with the matched bytes of the text so far (a time's part
                      //   after its seconds: that part's bytes so far)
    uint16_t chars;   // a string's characters so far (an integer with multipleOf: its digits)
    uint8_t sub;      // within a string, number or literal: how far it has come
    uint8_t key;      // the string (or the text matched) is an object's key
    uint8_t literal;  // which of true, false, null
    uint8_t integer;  // the number is an integer (no fraction or exponent)
    uint8_t negative; // the number has a minus
    uint8_t decimals; // a number with a range: its digits after the point so far
    uint8_t utf8_left, utf8_lo, utf8_hi; // a string's UTF-8 continuation bytes due, the next one's range
    // Around it:
    uint8_t depth;  // containers open
    uint8_t mode;   // what the next byte may be (json_grammar.c)
    uint8_t spaces; // the whitespace since the last token: 0 none, 1 a space, 2 + k a newline and k more
    json_frame frames[JSON_MAX_DEPTH]; // (depth) innermost last
} json_branch;

// The text read every way the schema allows: where alternatives (anyOf, oneOf) begin alike (two
// objects, an integer and a number) a branch follows each, as long as the text fits it; the text
// is an instance once one branch holds a whole one. Each branch alone has no dead end, so where
// more than JSON_MAX_BRANCHES would be alive the later alternatives are left out: a narrowing.
typedef struct {
    int n; // branches alive
    json_branch branches[JSON_MAX_BRANCHES];
} json_state;

// schema NULL: JSON mode's, any object.
void json_start(json_state *s, const json_schema *schema);
// Reads n bytes of text: 1 where the text so far still begins an instance, else 0 (s is then spent).
int json_feed(json_state *s, const char *bytes, int n);
// Whether the text so far is a whole instance.
int json_complete(const json_state *s);
// dst = src, copying only the branches alive and their containers open (a mask copies a state for
// each token).
void json_copy(json_state *dst, const json_state *src);

typedef struct json_vocab json_vocab;
json_vocab *json_vocab_new(const tokenizer *t); // each token's text, as decoded output holds it
void json_vocab_free(json_vocab *v);
// logits (the vocabulary's) of the tokens whose text would not continue the instance, and of EOS
// until it is whole (of all others then), set to -inf. Where no token fits, EOS is left.
void json_mask(const json_vocab *v, const json_state *s, float *logits);
// s after token id, one that json_mask left (EOS: s unchanged).
void json_advance(const json_vocab *v, json_state *s, int id);
