// Time of one decode step of S sequences at once, each with N tokens of context: the step of a
// server with S requests generating, on any backend (llama_forward with S one-token segments), with
// the logits to the host (no sampling), and again with each row's argmax instead (what greedy
// requests take: llama_segment.sampled). Slot 0 is prefilled once and copied to the others.
//
//   bench_decode DIR S1,S2,... N [STEPS] [BACKEND] [KV_DTYPE] [THREADS] [RANKS]
// DIR is a Hugging Face LLaMA directory (tests/make_random_model.py writes one of any shape);
// BACKEND cpu (default), cpu-bf16, cuda or cuda-fp32; KV_DTYPE f32 (default) or bf16; STEPS 20; RANKS 1 (G:
// each sequence sharded over G ranks, decode attention merged across them). Prints a table of ms
// per step and per token, and per step with argmax, each the median of STEPS steps after 3
// untimed ones.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what, const burst_error *err) {
    fprintf(stderr, "bench_decode: %s: %s\n", what, err->msg);
    exit(1);
}

enum { UNTIMED = 3, MAX_STEPS = 1000 };

// The median seconds of `steps` decode steps of slots 0..S-1 (each N tokens long, and cut back to
// N after), their logits to the host or (argmax) only each row's argmax.
static double median_step(llama_model *m, int S, int N, int steps, int argmax, llama_segment *segs, int *tokens,
                          float *logits, int *ids) {
    double t[MAX_STEPS];
    burst_error err;
    for (int k = 0; k < UNTIMED + steps; k++) {
        for (int s = 0; s < S; s++)
            segs[s] = (llama_segment){.slot = s, .n = 1, .sampled = argmax ? ids + s : NULL}, tokens[s] = 1 + (s + k) % 100;
        double t0 = omp_get_wtime();
        if (llama_forward(m, segs, S, tokens, argmax ? NULL : logits, NULL, NULL, &err)) fail("decode", &err);
        if (k >= UNTIMED) t[k - UNTIMED] = omp_get_wtime() - t0;
    }
    for (int s = 0; s < S; s++) llama_slot_truncate(m, s, N);
    qsort(t, (size_t)steps, sizeof t[0], by_value);
    return t[steps / 2];
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_decode DIR S1,S2,... N [STEPS] [cpu|cpu-bf16|cuda|cuda-fp32] [f32|bf16] [THREADS] [RANKS]\n");
        return 2;
    }
    enum { MAX_LIST = 16 };
    int slots[MAX_LIST], n_list = 0, most = 0;
    for (char *s = strtok(argv[2], ","); s && n_list < MAX_LIST; s = strtok(NULL, ","))
        slots[n_list] = atoi(s), most = slots[n_list] > most ? slots[n_list] : most, n_list++;
    const int N = atoi(argv[3]), steps = argc > 4 ? atoi(argv[4]) : 20;
    const char *backend = argc > 5 ? argv[5] : "cpu";
    const burst_dtype kv = argc > 6 && !strcmp(argv[6], "bf16") ? DTYPE_BF16 : DTYPE_F32;
    if (most < 1 || N < 1 || steps < 1 || steps > MAX_STEPS) {
        fprintf(stderr, "bench_decode: want S >= 1, N >= 1 and 1 <= STEPS <= %d\n", MAX_STEPS);
        return 2;
    }
    llama_options o = {.ctx = N + UNTIMED + steps + 1, .n_slots = most, .max_batch = N > most ? N : most,
                       .backend = backend, .kv_dtype = kv, .n_threads = argc > 7 ? atoi(argv[7]) : 0,
                       .n_ranks = argc > 8 ? atoi(argv[8]) : 1};
    llama_model *m;
    burst_error err;
    if (llama_load(argv[1], &o, &m, &err)) fail("load", &err);
    const llama_config *c = llama_config_of(m);
    int *tokens = malloc(sizeof(int) * (size_t)(N > most ? N : most));
    float *logits = malloc(sizeof(float) * (size_t)most * (size_t)c->vocab_size);
    llama_segment *segs = malloc(sizeof *segs * (size_t)most);
    int *ids = malloc(sizeof(int) * (size_t)most);
    for (int i = 0; i < N; i++) tokens[i] = 1 + (7919 * i) % (c->vocab_size - 1);
    if (llama_prefill(m, 0, tokens, N, 0, logits, &err)) fail("prefill", &err);
    printf("bench_decode %s: dim %d, %d layers, vocab %d; context %d, backend %s, KV %s, %d threads, %d ranks\n", argv[1],
           c->dim, c->n_layers, c->vocab_size, N, backend, dtype_name(kv), o.n_threads ? o.n_threads : omp_get_num_procs(),
           o.n_ranks);
    printf("| sequences | ms per step | ms per token | ms per step, argmax |\n|---|---|---|---|\n");
    for (int l = 0; l < n_list; l++) {
        const int S = slots[l];
        for (int s = 1; s < S; s++) llama_slot_copy(m, s, 0, N);
        double with_logits = median_step(m, S, N, steps, 0, segs, tokens, logits, ids);
        double with_argmax = median_step(m, S, N, steps, 1, segs, tokens, logits, ids);
        printf("| %d | %.3f | %.4f | %.3f |\n", S, 1e3 * with_logits, 1e3 * with_logits / S, 1e3 * with_argmax);
    }
    free(tokens), free(logits), free(segs), free(ids);
    llama_free(m);
    return 0;
}
