// The sampler against a plain reference on fresh random logits: temperature with top_k, top_p and
// min_p filters, done the plain way (with a filter, sort every candidate, most likely first, ties
// lower id first; keep top_k, drop those under min_p times the first, keep the smallest prefix
// whose mass reaches top_p; draw r in [0, sum of the kept) and walk them; without a filter, walk
// them in id order), with the same seeded generator: the same
// ids, draw after draw. Vocabularies of 1 to 32000, flat and peaked logits, logits with many ties,
// -inf logits; and NaN logits still give an id in range (no hang). The repetition penalty against
// its formula, greedy.
#include <math.h>

#include "model/sampler.h"
#include "test_util.h"

typedef struct {
    float prob;
    int id;
} cand;

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return x->prob != y->prob ? (x->prob < y->prob) - (x->prob > y->prob) : (x->id > y->id) - (x->id < y->id);
}

static float unit(uint64_t *state) { // the sampler's generator: xorshift64*, 24 bits -> [0, 1)
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((*state * 2685821657736338717ull) >> 40) / 16777216.0f;
}

static int reference(const sampler_params *p, uint64_t *state, const float *logits, int n, cand *c) {
    float max = logits[0], sum = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    for (int i = 0; i < n; i++) {
        c[i] = (cand){expf((logits[i] - max) / p->temperature), i};
        sum += c[i].prob;
    }
    if ((p->top_k > 0 && p->top_k < n) || p->top_p < 1.0f || p->min_p > 0) // no filter: the ids' order
        qsort(c, (size_t)n, sizeof *c, cand_desc);
    int keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    while (keep > 1 && c[keep - 1].prob < p->min_p * c[0].prob) keep--;
    float mass = 0;
    for (int i = 0; p->top_p < 1.0f && i < keep; i++) {
        mass += c[i].prob / sum;
        if (mass >= p->top_p) keep = i + 1;
    }
    float kept = 0, acc = 0;
    for (int i = 0; i < keep; i++) kept += c[i].prob;
    float r = unit(state) * kept;
    for (int i = 0; i < keep; i++) {
        acc += c[i].prob;
        if (r < acc) return c[i].id;
    }
    return c[keep - 1].id;
}

int main(void) {
    test_seed("test_sampler");
    static const int vocabs[] = {1, 2, 7, 300, 32000};
    static const float temps[] = {0.3f, 0.8f, 1.0f, 1.7f}, top_ps[] = {1.0f, 0.5f, 0.9f, 0.95f, 0.999f},
                       min_ps[] = {0, 0, 0.01f, 0.05f, 0.3f}, scales[] = {0.1f, 1, 3, 10};
    float *logits = malloc(sizeof(float) * 32000);
    cand *c = malloc(sizeof(cand) * 32000);
    struct sampler_cand *scratch = malloc(sizeof *scratch * 32000);
    int failures = 0, cases = 0;
    for (int vi = 0; vi < 5; vi++)
        for (int round = 0; round < (vi == 4 ? 40 : 150); round++) {
            const int n = vocabs[vi];
            const int top_ks[] = {0, 0, 1, 5, 40, n, n + 5};
            sampler_params p = {.temperature = temps[test_rand_u64() % 4], .top_p = top_ps[test_rand_u64() % 5],
                                .top_k = top_ks[test_rand_u64() % 7], .min_p = min_ps[test_rand_u64() % 5],
                                .seed = test_rand_u64() | 1};
            float scale = scales[test_rand_u64() % 4];
            int ties = test_rand_u64() % 3 == 0, infs = test_rand_u64() % 4 == 0;
            for (int i = 0; i < n; i++) {
                float z = test_uniform(-1, 1) + test_uniform(-1, 1) + test_uniform(-1, 1); // bell-shaped
                logits[i] = ties ? roundf(z * 2) * scale : z * scale;
                if (infs && test_rand_u64() % 3 == 0) logits[i] = -INFINITY;
            }
            logits[test_rand_u64() % n] = 2 * scale; // finite somewhere
            sampler s, skipping;
            sampler_init(&s, &p, n);
            sampler_init(&skipping, &p, n);
            // Unfiltered, the draws are sampler_pick_unfiltered's with the units peeked before
            // them, and a sampler that skips a draw then samples gives the next.
            const int unfiltered = p.top_p >= 1.0f && (p.top_k == 0 || p.top_k >= n) && p.min_p <= 0;
            float units[12];
            sampler_peek_units(&s, 12, units);
            if (sampler_unfiltered(&s) != unfiltered) failures++, printf("FAIL sampler_unfiltered: want %d\n", unfiltered);
            uint64_t state = p.seed;
            for (int draw = 0; draw < 12; draw++) {
                int got = sampler_sample(&s, logits), want = reference(&p, &state, logits, n, c);
                int picked = unfiltered ? sampler_pick_unfiltered(logits, n, p.temperature, units[draw], scratch) : got;
                int skipped = got;
                if (draw % 2 == 0) sampler_skip(&skipping); // (then the odd draws are compared)
                else skipped = sampler_sample(&skipping, logits);
                if (got != want || picked != want || skipped != want) {
                    if (failures++ < 10)
                        printf("FAIL vocab %d T %g top_p %g top_k %d min_p %g scale %g ties %d -inf %d, draw %d: "
                               "id %d (unfiltered pick %d, after skips %d), want %d\n", n, p.temperature, p.top_p, p.top_k,
                               p.min_p, scale, ties, infs, draw, got, picked, skipped, want);
                    break;
                }
            }
            sampler_free(&s);
            sampler_free(&skipping);
            cases++;
        }
    // Greedy: unfiltered, its peeked units 0, and a skip draws nothing (the generator stays).
    sampler g;
    sampler_init(&g, &(sampler_params){.temperature = 0, .top_p = 1, .seed = 9}, 300);
    float zeros[3] = {1, 1, 1};
    const uint64_t rng = g.rng;
    sampler_peek_units(&g, 3, zeros);
    sampler_skip(&g);
    if (!sampler_unfiltered(&g) || zeros[0] != 0 || zeros[1] != 0 || zeros[2] != 0 || g.rng != rng)
        failures++, printf("FAIL greedy: unfiltered %d, peeked %g %g %g, generator %s\n", sampler_unfiltered(&g), zeros[0],
                           zeros[1], zeros[2], g.rng == rng ? "kept" : "moved");
    sampler_free(&g);
    // A repetition penalty (greedy, logits of both signs): each id the argmax after the logits of
    // the context's and the drawn tokens are divided by it where positive, multiplied where not.
    for (int round = 0; round < 60; round++) {
        const int n = 1 + (int)(test_rand_u64() % 300);
        const float penalties[] = {0.5f, 1.3f, 2.0f};
        int context[8];
        for (int i = 0; i < 8; i++) context[i] = (int)(test_rand_u64() % (uint64_t)n);
        for (int i = 0; i < n; i++) logits[i] = test_uniform(-2, 2);
        sampler_params p = {.temperature = 0, .top_p = 1, .repetition_penalty = penalties[round % 3],
                            .context = context, .n_context = 1 + round % 8};
        unsigned char seen[300] = {0};
        for (int i = 0; i < p.n_context; i++) seen[context[i]] = 1;
        sampler s;
        sampler_init(&s, &p, n);
        for (int draw = 0; draw < 10; draw++) {
            int want = 0;
            float best = -INFINITY;
            for (int i = 0; i < n; i++) {
                const float r = p.repetition_penalty, x = seen[i] ? (logits[i] > 0 ? logits[i] / r : logits[i] * r) : logits[i];
                if (x > best) best = x, want = i;
            }
            const int got = sampler_sample(&s, logits);
            seen[want] = 1;
            if (got != want) {
                failures++, printf("FAIL repetition penalty %g, vocab %d, draw %d: id %d, want %d\n", p.repetition_penalty,
                                   n, draw, got, want);
                break;
            }
        }
        sampler_free(&s);
    }
    // NaN logits (a broken model): an id in range, whatever the filters.
    for (int i = 0; i < 300; i++) logits[i] = i % 2 ? NAN : test_uniform(-1, 1);
    for (int all = 0; all < 2; all++) {
        if (all)
            for (int i = 0; i < 300; i++) logits[i] = NAN;
        sampler s;
        sampler_init(&s, &(sampler_params){.temperature = 1, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f, .seed = 7}, 300);
        int id = sampler_sample(&s, logits);
        sampler_free(&s);
        if (id < 0 || id >= 300) failures++, printf("FAIL NaN logits (%s): id %d\n", all ? "all" : "half", id);
    }
    printf("%s: %d cases of 12 draws, %d failed\n", failures ? "FAIL" : "ok", cases, failures);
    free(logits), free(c), free(scratch);
    return failures != 0;
}
