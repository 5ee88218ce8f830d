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
    int repetition = p->repetition_penalty > 0 && p->repetition_penalty != 1;
    s->counts = penalties ? burst_calloc((size_t)vocab, sizeof *s->counts) : NULL;
    s->seen = repetition ? burst_calloc((size_t)vocab, 1) : NULL;
    for (int i = 0; s->seen && i < p->n_context; i++) s->seen[p->context[i]] = 1;
    s->adjusted = penalties || repetition || p->n_bias || p->json ? burst_malloc(sizeof *s->adjusted * (size_t)vocab)
                                                                  : NULL;
    json_start(&s->json, p->json_schema);
}

void sampler_free(sampler *s) {
    free(s->cand);
    free(s->counts);
    free(s->seen);
    free(s->adjusted);
    s->cand = NULL;
    s->counts = NULL;
    s->seen = NULL;
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

// Most likely first; ties: lower id first (an order that does not depend on the sort).
static int by_prob_desc(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    return x->prob != y->prob ? (x->prob < y->prob) - (x->prob > y->prob) : (x->id > y->id) - (x->id < y->id);
}

// Moves the candidates whose prob is at least floor to the front of c (the rest stay behind
// them, so that a lower floor finds them again) and sorts them; returns how many.
static int front_sorted(struct sampler_cand *c, int n, float floor) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (c[i].prob >= floor) {
            struct sampler_cand t = c[m];
            c[m++] = c[i];
            c[i] = t;
        }
    qsort(c, (size_t)m, sizeof *c, by_prob_desc);
    return m;
}

// The logits with the penalties, the bias and JSON mode's mask applied, in s->adjusted.
static const float *adjust(sampler *s, const float *logits) {
    float *x = s->adjusted;
    memcpy(x, logits, sizeof *x * (size_t)s->vocab);
    const float r = s->p.repetition_penalty;
    for (int i = 0; s->seen && i < s->vocab; i++)
        if (s->seen[i]) x[i] = x[i] > 0 ? x[i] / r : x[i] * r;
    for (int i = 0; s->counts && i < s->vocab; i++)
        x[i] = x[i] - (float)s->counts[i] * s->p.frequency_penalty - (s->counts[i] > 0 ? s->p.presence_penalty : 0.0f);
    for (int i = 0; i < s->p.n_bias; i++) x[s->p.bias[i].id] += s->p.bias[i].bias;
    if (s->p.json) json_mask(s->p.json, &s->json, x);
    return x;
}

// cand[i] = (exp((logits[i] - max) / temperature), i) for i < n; returns their sum, added in id order.
static float candidates(const float *logits, int n, float temperature, struct sampler_cand *cand) {
    float max = logits[argmax(logits, n)], sum = 0;
    for (int i = 0; i < n; i++) {
        float e = expf((logits[i] - max) / temperature);
        cand[i] = (struct sampler_cand){e, i};
        sum += e;
    }
    return sum;
}

// The id of the bucket that r falls in, the kept candidates' probs laid end to end in order; the
// last one where rounding left r just past them.
static int walk(const struct sampler_cand *cand, int keep, float r) {
    float acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += cand[i].prob;
        if (r < acc) return cand[i].id;
    }
    return cand[keep - 1].id;
}

int sampler_pick_unfiltered(const float *logits, int n, float temperature, float u, struct sampler_cand *scratch) {
    if (temperature <= 0) return argmax(logits, n);
    return walk(scratch, n, u * candidates(logits, n, temperature, scratch));
}

static int filters(const sampler *s) {
    return (s->p.top_k > 0 && s->p.top_k < s->vocab) || s->p.top_p < 1.0f || s->p.min_p > 0;
}

static int pick(sampler *s, const float *logits) {
    int n = s->vocab;
    if (s->p.temperature <= 0) return argmax(logits, n);
    if (!filters(s)) return sampler_pick_unfiltered(logits, n, s->p.temperature, random_unit(s), s->cand);
    float sum = candidates(logits, n, s->p.temperature, s->cand);
    int keep = n;
    // The filters keep a prefix of the candidates sorted most likely first. Sorting all of them
    // (about 5 ms for 32000) would cost half a 7B decode step on a GPU, so only those at least floor
    // times as likely as the most likely (whose prob is 1) are sorted, for the first floor (min_p,
    // else 0.1, down by 10x) under which they hold the prefix: min_p's at once, top_k's within
    // them, top_p's when their mass reaches it (counted first, sorted only then). Floor 0 is the
    // last: NaN logits (a broken model) are never kept, and must not loop forever.
    for (float floor = s->p.min_p > 0 ? s->p.min_p : 0.1f;; floor = floor > 1e-9f ? floor * 0.1f : 0) {
        int m = 0;
        float held = 0;
        for (int i = 0; i < n; i++)
            if (s->cand[i].prob >= floor) m++, held += s->cand[i].prob;
        int whole = m == n || floor == 0 || s->p.min_p > 0 || (s->p.top_k > 0 && s->p.top_k <= m);
        if (!whole && !(s->p.top_p < 1.0f && held >= s->p.top_p * sum)) continue;
        m = front_sorted(s->cand, n, floor);
        keep = s->p.top_k > 0 && s->p.top_k < m ? s->p.top_k : m;
        while (keep > 1 && s->cand[keep - 1].prob < s->p.min_p * s->cand[0].prob) keep--;
        if (s->p.top_p < 1.0f) { // smallest prefix whose mass reaches top_p
            float mass = 0;
            for (int i = 0; i < keep; i++) {
                mass += s->cand[i].prob / sum;
                if (mass >= s->p.top_p) { keep = i + 1, whole = 1; break; }
            }
        }
        if (whole) break;
    }
    if (keep < 1) keep = 1; // every prob NaN: any id will do
    sum = 0;
    for (int i = 0; i < keep; i++) sum += s->cand[i].prob;
    return walk(s->cand, keep, random_unit(s) * sum);
}

int sampler_sample(sampler *s, const float *logits) {
    const float *x = s->adjusted ? adjust(s, logits) : logits;
    int id = pick(s, x);
    if (s->p.json && isinf(x[id])) id = argmax(x, s->vocab); // a draw rounded past the last token allowed
    if (s->counts) s->counts[id]++;
    if (s->seen) s->seen[id] = 1;
    if (s->p.json) json_advance(s->p.json, &s->json, id);
    return id;
}

int sampler_greedy(const sampler *s) { return s->p.temperature <= 0 && !s->adjusted; }

int sampler_unfiltered(const sampler *s) { return !s->adjusted && (s->p.temperature <= 0 || !filters(s)); }

void sampler_peek_units(const sampler *s, int n, float *out) {
    sampler t = *s; // (a copy of the generator; nothing else of it is touched)
    for (int i = 0; i < n; i++) out[i] = !(t.p.temperature <= 0) ? random_unit(&t) : 0; // (as pick draws)
}

void sampler_skip(sampler *s) {
    BURST_ASSERT(!s->adjusted); // (penalties would count the token)
    if (!(s->p.temperature <= 0)) random_unit(s);
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
