#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/burst.h"

void sampler_init(sampler *s, const sampler_params *p, int vocab) {
    s->p = *p;
    s->rng = p->seed ? p->seed : 0x853c49e6748fea9bull; // xorshift needs a non-zero state
    s->vocab = vocab;
    s->cand = burst_malloc(sizeof *s->cand * (size_t)vocab);
    int penalties = p->presence_penalty != 0 || p->frequency_penalty != 0;
    s->counts = penalties ? burst_calloc((size_t)vocab, sizeof *s->counts) : NULL;
    s->adjusted = penalties || p->n_bias ? burst_malloc(sizeof *s->adjusted * (size_t)vocab) : NULL;
}

void sampler_free(sampler *s) {
    free(s->cand);
    free(s->counts);
    free(s->adjusted);
    s->cand = NULL;
    s->counts = NULL;
    s->adjusted = NULL;
}

static float random_unit(sampler *s) { // xorshift64*, 24 bits -> [0, 1)
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (float)((s->rng * 2685821657736338717ull) >> 40) / 16777216.0f;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int by_prob_desc(const void *a, const void *b) {
    float pa = ((const struct sampler_cand *)a)->prob, pb = ((const struct sampler_cand *)b)->prob;
    return (pa < pb) - (pa > pb);
}

// The logits with the penalties and the bias applied, in s->adjusted.
static const float *adjust(sampler *s, const float *logits) {
    float *x = s->adjusted;
    if (s->counts) {
        for (int i = 0; i < s->vocab; i++)
            x[i] = logits[i] - (float)s->counts[i] * s->p.frequency_penalty -
                   (s->counts[i] > 0 ? s->p.presence_penalty : 0.0f);
    } else {
        memcpy(x, logits, sizeof *x * (size_t)s->vocab);
    }
    for (int i = 0; i < s->p.n_bias; i++) x[s->p.bias[i].id] += s->p.bias[i].bias;
    return x;
}

static int pick(sampler *s, const float *logits) {
    int n = s->vocab;
    if (s->p.temperature <= 0) return argmax(logits, n);
    float max = logits[argmax(logits, n)], sum = 0;
    for (int i = 0; i < n; i++) {
        float e = expf((logits[i] - max) / s->p.temperature);
        s->cand[i] = (struct sampler_cand){e, i};
        sum += e;
    }
    int keep = n;
    int filter = (s->p.top_k > 0 && s->p.top_k < n) || s->p.top_p < 1.0f || s->p.min_p > 0;
    if (filter) {
        qsort(s->cand, (size_t)n, sizeof *s->cand, by_prob_desc);
        if (s->p.top_k > 0 && s->p.top_k < n) keep = s->p.top_k;
        while (keep > 1 && s->cand[keep - 1].prob < s->p.min_p * s->cand[0].prob) keep--;
        if (s->p.top_p < 1.0f) { // smallest prefix whose mass reaches top_p
            float mass = 0;
            for (int i = 0; i < keep; i++) {
                mass += s->cand[i].prob / sum;
                if (mass >= s->p.top_p) { keep = i + 1; break; }
            }
        }
        sum = 0;
        for (int i = 0; i < keep; i++) sum += s->cand[i].prob;
    }
    float r = random_unit(s) * sum, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += s->cand[i].prob;
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[keep - 1].id; // rounding left r just past the last bucket
}

int sampler_sample(sampler *s, const float *logits) {
    int id = pick(s, s->adjusted ? adjust(s, logits) : logits);
    if (s->counts) s->counts[id]++;
    return id;
}

void sampler_logprobs(const float *logits, int vocab, int id, int n_top, sampled_logprobs *out) {
    BURST_ASSERT(n_top >= 0 && n_top <= SAMPLER_MAX_TOP_LOGPROBS && "sampler_logprobs: n_top out of range");
    int top[SAMPLER_MAX_TOP_LOGPROBS], n = 0;
    float max = logits[0];
    for (int i = 0; i < vocab; i++) {
        if (logits[i] > max) max = logits[i];
        if (n_top == 0 || (n == n_top && !(logits[i] > logits[top[n - 1]]))) continue;
        int j = n < n_top ? n++ : n - 1; // insert into the sorted list, dropping its last
        for (; j > 0 && logits[i] > logits[top[j - 1]]; j--) top[j] = top[j - 1];
        top[j] = i;
    }
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - max);
    double lse = max + log(sum);
    out->chosen = (token_logprob){id, logits[id] - lse};
    out->n_top = n;
    for (int i = 0; i < n; i++) out->top[i] = (token_logprob){top[i], logits[top[i]] - lse};
}
