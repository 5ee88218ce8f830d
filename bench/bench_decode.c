// Time of one decode step of S sequences at once, each with N tokens of context: the step of a
// server with S requests generating, on any backend (llama_forward with S one-token segments), with
// the logits to the host (no sampling); again with each row's argmax instead (what greedy requests
// take: llama_segment.sampled); with each row drawn at temperature 0.8 where the logits are (what
// requests at a temperature alone take); and with the logits to the host and each row drawn there
// at 0.8 on the threads (what the engine does for filtered sampling, and did for all sampling).
// Slot 0 is prefilled once and copied to the others.
//
//   bench_decode DIR S1,S2,... N [STEPS] [BACKEND] [KV_DTYPE] [THREADS] [RANKS] [QUANT]
// DIR is a Hugging Face LLaMA directory (tests/make_random_model.py writes one of any shape);
// BACKEND cpu (default), cpu-bf16, cuda or cuda-fp32; KV_DTYPE f32 (default) or bf16; STEPS 20; RANKS 1 (G:
// each sequence sharded over G ranks, decode attention merged across them); QUANT none (default), q8 or q4. Prints a table of ms
// per step and per token, and per step with argmax and with the two draws, each the median of
// STEPS steps after 3 untimed ones.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "model/sampler.h"

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what, const burst_error *err) {
    fprintf(stderr, "bench_decode: %s: %s\n", what, err->msg);
    exit(1);
}

enum { UNTIMED = 3, MAX_STEPS = 1000 };
enum { LOGITS, ARGMAX, DRAWN_THERE, DRAWN_ON_HOST, MODES };
static const float TEMPERATURE = 0.8f;

// The median seconds of `steps` decode steps of slots 0..S-1 (each N tokens long, and cut back to
// N after) in the given mode, with temperature and unit (S each) for the draws.
static double median_step(llama_model *m, int S, int N, int steps, int mode, llama_segment *segs, int *tokens,
                          float *logits, int *ids, const float *temperature, const float *unit) {
    double t[MAX_STEPS];
    burst_error err;
    const int vocab = llama_config_of(m)->vocab_size, there = mode == ARGMAX || mode == DRAWN_THERE;
    for (int k = 0; k < UNTIMED + steps; k++) {
        for (int s = 0; s < S; s++) {
            segs[s] = (llama_segment){.slot = s, .n = 1, .sampled = there ? ids + s : NULL}, tokens[s] = 1 + (s + k) % 100;
            if (mode == DRAWN_THERE) segs[s].temperature = temperature + s, segs[s].unit = unit + s;
        }
        double t0 = omp_get_wtime();
        if (llama_forward(m, segs, S, tokens, there ? NULL : logits, NULL, NULL, &err)) fail("decode", &err);
        if (mode == DRAWN_ON_HOST) {
            #pragma omp parallel
            {
                struct sampler_cand *scratch = malloc(sizeof *scratch * (size_t)vocab);
                #pragma omp for schedule(dynamic)
                for (int s = 0; s < S; s++)
                    ids[s] = sampler_pick_unfiltered(logits + (int64_t)s * vocab, vocab, TEMPERATURE, unit[s], scratch);
                free(scratch);
            }
        }
        if (k >= UNTIMED) t[k - UNTIMED] = omp_get_wtime() - t0;
    }
    for (int s = 0; s < S; s++) llama_slot_truncate(m, s, N);
    qsort(t, (size_t)steps, sizeof t[0], by_value);
    return t[steps / 2];
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_decode DIR S1,S2,... N [STEPS] [cpu|cpu-bf16|cuda|cuda-fp32] [f32|bf16] [THREADS] [RANKS] [none|q8|q4]\n");
        return 2;
    }
    enum { MAX_LIST = 16 };
    int slots[MAX_LIST], n_list = 0, most = 0;
    for (char *s = strtok(argv[2], ","); s && n_list < MAX_LIST; s = strtok(NULL, ","))
        slots[n_list] = atoi(s), most = slots[n_list] > most ? slots[n_list] : most, n_list++;
    const int N = atoi(argv[3]), steps = argc > 4 ? atoi(argv[4]) : 20;
    const char *backend = argc > 5 ? argv[5] : "cpu";
    const burst_dtype kv = argc > 6 && !strcmp(argv[6], "bf16") ? DTYPE_BF16 : DTYPE_F32;
    int quant = 0;
    if (most < 1 || N < 1 || steps < 1 || steps > MAX_STEPS || (argc > 9 && !quant_parse(argv[9], &quant))) {
        fprintf(stderr, "bench_decode: want S >= 1, N >= 1, 1 <= STEPS <= %d and a quantization of none, q8 or q4\n", MAX_STEPS);
        return 2;
    }
    llama_options o = {.ctx = N + UNTIMED + steps + 1, .n_slots = most, .max_batch = N > most ? N : most,
                       .backend = backend, .kv_dtype = kv, .n_threads = argc > 7 ? atoi(argv[7]) : 0,
                       .n_ranks = argc > 8 ? atoi(argv[8]) : 1, .weights_quant = quant};
    llama_model *m;
    burst_error err;
    if (llama_load(argv[1], &o, &m, &err)) fail("load", &err);
    const llama_config *c = llama_config_of(m);
    int *tokens = malloc(sizeof(int) * (size_t)(N > most ? N : most));
    float *logits = malloc(sizeof(float) * (size_t)most * (size_t)c->vocab_size);
    llama_segment *segs = malloc(sizeof *segs * (size_t)most);
    int *ids = malloc(sizeof(int) * (size_t)most);
    float *temperature = malloc(sizeof(float) * (size_t)most), *unit = malloc(sizeof(float) * (size_t)most);
    for (int s = 0; s < most; s++) temperature[s] = TEMPERATURE, unit[s] = (float)((s * 0.618034) - (int)(s * 0.618034));
    for (int i = 0; i < N; i++) tokens[i] = 1 + (7919 * i) % (c->vocab_size - 1);
    if (llama_prefill(m, 0, tokens, N, 0, logits, &err)) fail("prefill", &err);
    printf("bench_decode %s: dim %d, %d layers, vocab %d; context %d, backend %s%s, KV %s, %d threads, %d ranks\n", argv[1],
           c->dim, c->n_layers, c->vocab_size, N, backend, llama_weights_note(&o), dtype_name(kv), o.n_threads ? o.n_threads : omp_get_num_procs(),
           o.n_ranks);
    printf("| sequences | ms per step | ms per token | ms per step, argmax | T %.1f drawn there | T %.1f on the host |\n"
           "|---|---|---|---|---|---|\n", TEMPERATURE, TEMPERATURE);
    for (int l = 0; l < n_list; l++) {
        const int S = slots[l];
        for (int s = 1; s < S; s++) llama_slot_copy(m, s, 0, N);
        double ms[MODES];
        for (int mode = 0; mode < MODES; mode++)
            ms[mode] = 1e3 * median_step(m, S, N, steps, mode, segs, tokens, logits, ids, temperature, unit);
        printf("| %d | %.3f | %.4f | %.3f | %.3f | %.3f |\n", S, ms[LOGITS], ms[LOGITS] / S, ms[ARGMAX], ms[DRAWN_THERE],
               ms[DRAWN_ON_HOST]);
    }
    free(tokens), free(logits), free(segs), free(ids), free(temperature), free(unit);
    llama_free(m);
    return 0;
}
