// JSON mode (the API's response_format {"type": "json_object"}): generated text held to one JSON
// object (RFC 8259) as it grows. A json_state reads the text's bytes and says whether they are
// still the start of an object; json_mask sets the logits of every token that would end that to
// -inf before a token is drawn, so that the text is an object when EOS comes (the only token then).
// Limits that keep a model from running on without end where grammar allows it (llama.cpp's JSON
// grammar's whitespace): whitespace between tokens is nothing, one space, or a newline and up to
// JSON_MAX_INDENT spaces or tabs; at most JSON_MAX_DEPTH containers open. No whitespace after the
// object; strings take any byte from 0x20 up (UTF-8 is not checked).
//
// A json_vocab is immutable after json_vocab_new: safe from any thread. A json_state belongs to
// one sequence.
#pragma once
#include <stdint.h>

#include "tokenizer.h"

enum { JSON_MAX_INDENT = 20, JSON_MAX_DEPTH = 64 };

typedef struct {
    uint64_t objects; // bit d: the container at depth d is an object (else an array)
    uint8_t depth;    // containers open
    uint8_t mode;     // what the next byte may be (json_grammar.c)
    uint8_t sub;      // within a string, number or literal: how far it has come
    uint8_t key;      // the string is an object's key
    uint8_t literal;  // which of true, false, null
    uint8_t spaces;   // the whitespace since the last token: 0 none, 1 a space, 2 + k a newline and k more
} json_state;

void json_start(json_state *s);
// Reads n bytes of text: 1 where the text so far still begins an object, else 0 (s is then spent).
int json_feed(json_state *s, const char *bytes, int n);
// Whether the text so far is a whole object.
int json_complete(const json_state *s);

typedef struct json_vocab json_vocab;
json_vocab *json_vocab_new(const tokenizer *t); // each token's text, as decoded output holds it
void json_vocab_free(json_vocab *v);
// logits (the vocabulary's) of the tokens whose text would not continue the object, and of EOS
// until it is whole (of all others then), set to -inf. Where no token fits, EOS is left.
void json_mask(const json_vocab *v, const json_state *s, float *logits);
// s after token id, one that json_mask left (EOS: s unchanged).
void json_advance(const json_vocab *v, json_state *s, int id);
