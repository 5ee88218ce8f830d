#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "../common/burst.h"

void sampler_init(sampler *s, const sampler_params *p, int vocab) {
    s->p = *p;
    s->rng = p->seed ? p->seed : 0x853c49e6748fea9bull; // xorshift needs a non-zero state
    s->vocab = vocab;
    s->cand = burst_malloc(sizeof *s->cand * (size_t)vocab);
}

void sampler_free(sampler *s) {
    free(s->cand);
    s->cand = NULL;
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

int sampler_sample(sampler *s, float *logits) {
    int n = s->vocab;
    if (s->p.temperature <= 0) return argmax(logits, n);
    float max = logits[argmax(logits, n)], sum = 0;
    for (int i = 0; i < n; i++) {
        float e = expf((logits[i] - max) / s->p.temperature);
        s->cand[i] = (struct sampler_cand){e, i};
        sum += e;
    }
    int keep = n;
    int filter = (s->p.top_k > 0 && s->p.top_k < n) || s->p.top_p < 1.0f;
    if (filter) {
        qsort(s->cand, (size_t)n, sizeof *s->cand, by_prob_desc);
        if (s->p.top_k > 0 && s->p.top_k < n) keep = s->p.top_k;
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
