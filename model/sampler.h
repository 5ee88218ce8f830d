// Picks the next token from logits: greedy (temperature 0), or temperature with optional top-k
// and top-p (nucleus) filtering, from a seeded generator so that a seed reproduces a completion.
// A sampler belongs to one request; it owns a scratch buffer of vocab entries.
#pragma once
#include <stdint.h>

typedef struct {
    float temperature; // 0: greedy
    float top_p;       // 1: off
    int top_k;         // 0: off
    uint64_t seed;
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng;
    int vocab;
    struct sampler_cand { float prob; int id; } *cand; // (vocab)
} sampler;

void sampler_init(sampler *s, const sampler_params *p, int vocab);
void sampler_free(sampler *s);
// logits (vocab) is used as scratch.
int sampler_sample(sampler *s, float *logits);
