// The sampler's time per token on a LLaMA vocabulary (32000 logits, bell-shaped, spread like a
// model's), greedy and with temperature and each filter; mean of 200 draws, one thread. The
// engine samples every running sequence on its own thread between GPU steps. Given a tokenizer,
// also JSON mode's mask of its vocabulary (json_mask) after a few prefixes of an object.
//   bench_sampler [tokenizer.model]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "model/sampler.h"

// json_mask's time on t's vocabulary after each of a few prefixes (mean of 200).
static void json_rows(const tokenizer *t) {
    static const char *const prefixes[] = {"{\"name\": \"Lil", " {", "{\"a\": ", "{\"a\": 12", "{\"a\": [tr",
                                           "{\"a\": {\"b\": [1, 2]}"};
    json_vocab *v = json_vocab_new(t);
    float *logits = burst_calloc((size_t)tokenizer_vocab_size(t), sizeof *logits);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        json_state s;
        json_start(&s);
        json_feed(&s, prefixes[i], (int)strlen(prefixes[i]));
        double t0 = burst_now();
        for (int r = 0; r < 200; r++) json_mask(v, &s, logits);
        printf("| JSON mode's mask after `%s` | %.3f | |\n", prefixes[i], (burst_now() - t0) / 200 * 1e3);
    }
    free(logits);
    json_vocab_free(v);
}

int main(int argc, char **argv) {
    enum { VOCAB = 32000, DRAWS = 200 };
    float *logits = burst_malloc(sizeof(float) * VOCAB);
    srand(1);
    for (int i = 0; i < VOCAB; i++) { // Box-Muller, standard deviation 3
        float u1 = (rand() + 1.0f) / ((float)RAND_MAX + 1), u2 = (float)rand() / (float)RAND_MAX;
        logits[i] = 3.0f * sqrtf(-2 * logf(u1)) * cosf(6.2831853f * u2);
    }
    static const struct {
        const char *name;
        sampler_params p;
    } cases[] = {
        {"greedy", {.temperature = 0, .top_p = 1}},
        {"temperature 0.8", {.temperature = 0.8f, .top_p = 1, .seed = 1}},
        {"temperature 0.8, top_p 0.9", {.temperature = 0.8f, .top_p = 0.9f, .seed = 1}},
        {"temperature 0.8, top_k 40", {.temperature = 0.8f, .top_p = 1, .top_k = 40, .seed = 1}},
        {"temperature 1, min_p 0.05", {.temperature = 1, .top_p = 1, .min_p = 0.05f, .seed = 1}},
    };
    printf("| sampling, vocab %d | ms per token | sum of ids |\n|---|---|---|\n", VOCAB);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampler s;
        sampler_init(&s, &cases[c].p, VOCAB);
        long ids = 0;
        double t = burst_now();
        for (int r = 0; r < DRAWS; r++) ids += sampler_sample(&s, logits);
        printf("| %s | %.3f | %ld |\n", cases[c].name, (burst_now() - t) / DRAWS * 1e3, ids);
        sampler_free(&s);
    }
    free(logits);
    tokenizer *t = NULL;
    burst_error err;
    if (argc > 1 && tokenizer_load(argv[1], &t, &err)) {
        fprintf(stderr, "bench_sampler: %s\n", err.msg);
        return 1;
    }
    if (t) json_rows(t);
    tokenizer_free(t);
    return 0;
}
