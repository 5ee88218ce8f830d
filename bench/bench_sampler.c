// The sampler's time per token on a LLaMA vocabulary (32000 logits, bell-shaped, spread like a
// model's), greedy and with temperature and each filter; mean of 200 draws, one thread. The
// engine samples every running sequence on its own thread between GPU steps.
//   bench_sampler
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/burst.h"
#include "model/sampler.h"

int main(void) {
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
    return 0;
}
