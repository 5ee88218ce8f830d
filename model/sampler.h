// Picks the next token from logits: greedy (temperature 0), or temperature with optional top-k,
// top-p (nucleus) and min-p filtering, from a seeded generator so that a seed reproduces a completion.
// Before either, a repetition penalty, OpenAI's logit_bias and presence/frequency penalties adjust
// the logits, and JSON mode masks the tokens that would not continue a JSON object (of a schema,
// where one is given).
// sampler_logprobs gives the log-probabilities of a logits row (the API's logprobs).
//
// A sampler belongs to one request; it owns a scratch buffer of vocab entries, and more (the
// adjusted logits, the counts of sampled tokens, the tokens seen) only when its request adjusts
// the logits.
#pragma once
#include <stdint.h>

#include "json_grammar.h"

typedef struct {
    int id;
    float bias;
} sampler_bias;

typedef struct {
    float temperature; // 0: greedy
    float top_p;       // 1: off
    int top_k;         // 0: off
    float min_p;       // 0: off; keeps the tokens at least min_p times as likely as the most likely
    uint64_t seed;
    // OpenAI's penalties: logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty,
    // count[j] the times token j was sampled so far (the prompt does not count). 0: off.
    float presence_penalty, frequency_penalty;
    // Hugging Face's repetition penalty (vLLM's): the logit of a token in the context or sampled so
    // far divided by it where positive, times it where not, before OpenAI's penalties. 1 or 0: off.
    float repetition_penalty;
    const int *context; // (n_context) the prompt's ids, for the repetition penalty (read at sampler_init)
    int n_context;
    sampler_bias *bias; // (n_bias) added to the logits; borrowed (it outlives the sampler)
    int n_bias;
    const json_vocab *json; // JSON mode: the tokens drawn make one JSON object (json_grammar.h); NULL: off
    const json_schema *json_schema; // JSON mode: the object's schema (borrowed); NULL: any object
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng;
    int vocab;
    struct sampler_cand { float prob; int id; } *cand; // (vocab)
    float *adjusted;   // (vocab) the logits after bias, penalties and JSON mode; NULL when there are none
    int *counts;       // (vocab) times each token was sampled; NULL without penalties
    uint8_t *seen;     // (vocab) the tokens in the context or sampled; NULL without a repetition penalty
    json_state json;   // JSON mode: the text of the tokens drawn so far
} sampler;

void sampler_init(sampler *s, const sampler_params *p, int vocab);
void sampler_free(sampler *s);
// logits (vocab) is only read.
int sampler_sample(sampler *s, const float *logits);
// Whether sampler_sample is the first largest logit and nothing else (temperature 0, no bias, no
// penalties, no JSON mode).
int sampler_greedy(const sampler *s);

// Sampling where the logits are (backend_sample on a GPU: 4 bytes back a row instead of the row).
// sampler_unfiltered: whether sampler_sample draws from the logits as they are, greedy or at a
// temperature with no top_k, top_p or min_p, and no bias, penalty or JSON mode: then its token is
// sampler_pick_unfiltered of the logits at its temperature with the unit its generator draws
// next. sampler_peek_units gives the next n of those units without drawing them (0 for greedy),
// one a token in turn; sampler_skip draws one, for a token taken from elsewhere.
int sampler_unfiltered(const sampler *s);
void sampler_peek_units(const sampler *s, int n, float *out);
void sampler_skip(sampler *s);
// Greedy (temperature <= 0): the first largest logit. Else the bucket that u (in [0, 1)) times
// the sum of exp((logit - max) / temperature) falls in, the buckets in id order (sums in float,
// in id order; the last id where rounding leaves it past them). scratch: n entries. Any id in
// range for NaN logits.
int sampler_pick_unfiltered(const float *logits, int n, float temperature, float u, struct sampler_cand *scratch);

enum { SAMPLER_MAX_TOP_LOGPROBS = 20 }; // OpenAI's limit on top_logprobs

typedef struct {
    int id;
    double logprob;
} token_logprob;

typedef struct {
    token_logprob chosen;
    int n_top;
    token_logprob top[SAMPLER_MAX_TOP_LOGPROBS]; // (n_top) most likely first; ties: lower id first
} sampled_logprobs;

// Log-softmax of a logits row (vocab), in double: token id's and the n_top (<= 20) most likely
// tokens'. One pass finds the maximum and the top tokens (no sort of the vocab), one more the sum.
void sampler_logprobs(const float *logits, int vocab, int id, int n_top, sampled_logprobs *out);
