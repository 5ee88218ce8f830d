// The CPU's decode attention alone: flash_cpu on S sequences of Q query rows each (a decode step;
// Q > 1: a speculative step's verification) against N cached keys, K/V in f32 and in bf16,
// LLaMA-7B's heads by default. Prints the time of a call and the K/V bytes read per second: a
// decode row is bound by that read.
//   bench_flash_decode [--heads H] [--kv-heads K] [--head-dim D] [--seqs S] [--rows Q] [--reps R] N [N ...]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/flash.h"
#include "common/burst.h"

int main(int argc, char **argv) {
    int H = 32, K = 32, D = 128, S = 1, Q = 1, reps = 10, first_n = 1;
    for (; first_n + 1 < argc && argv[first_n][0] == '-'; first_n += 2) {
        int v = atoi(argv[first_n + 1]);
        if (!strcmp(argv[first_n], "--heads")) H = v;
        else if (!strcmp(argv[first_n], "--kv-heads")) K = v;
        else if (!strcmp(argv[first_n], "--head-dim")) D = v;
        else if (!strcmp(argv[first_n], "--seqs")) S = v;
        else if (!strcmp(argv[first_n], "--rows")) Q = v;
        else if (!strcmp(argv[first_n], "--reps")) reps = v;
        else return fprintf(stderr, "bench_flash_decode: unknown option %s\n", argv[first_n]), 2;
    }
    if (first_n >= argc || H < 1 || K < 1 || H % K || D < 1 || S < 1 || S > 256 || Q < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_flash_decode [--heads H] [--kv-heads K] [--head-dim D] [--seqs S (1-256)] "
                        "[--rows Q] [--reps R] N [N ...]\n");
        return 2;
    }
    printf("flash_cpu decode: %d sequences x %d rows, heads %d (kv %d), d %d, best of %d\n", S, Q, H, K, D, reps);
    printf("| N | K/V | ms a call | GB/s of K/V |\n|---|---|---|---|\n");
    for (int i = first_n; i < argc; i++) {
        const int N = atoi(argv[i]);
        if (N < Q) return fprintf(stderr, "bench_flash_decode: N %s: want at least the %d rows\n", argv[i], Q), 2;
        const int64_t kv_dim = (int64_t)K * D, kv_elems = (int64_t)N * kv_dim, q_dim = (int64_t)Q * H * D;
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            const burst_dtype dt = bf16 ? DTYPE_BF16 : DTYPE_F32;
            const size_t esz = dtype_size(dt);
            flash_args calls[256];
            // Each sequence its own cache, as slots are: no sequence finds another's keys in cache.
            char *k = burst_malloc(esz * (size_t)(kv_elems * S)), *v = burst_malloc(esz * (size_t)(kv_elems * S));
            float *q = burst_malloc(sizeof(float) * (size_t)(q_dim * S)), *o = burst_malloc(sizeof(float) * (size_t)(q_dim * S));
            float *lse = burst_malloc(sizeof(float) * (size_t)(Q * H * S));
            unsigned seed = 1234u;
            for (int64_t x = 0; x < q_dim * S; x++) q[x] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
            for (int64_t x = 0; x < kv_elems * S; x++) {
                const float kx = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f, vx = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
                if (bf16) ((uint16_t *)k)[x] = f32_to_bf16(kx), ((uint16_t *)v)[x] = f32_to_bf16(vx);
                else ((float *)k)[x] = kx, ((float *)v)[x] = vx;
            }
            for (int s = 0; s < S; s++)
                calls[s] = (flash_args){.q = q + s * q_dim, .k = k + esz * (size_t)(s * kv_elems),
                                        .v = v + esz * (size_t)(s * kv_elems), .o = o + s * q_dim,
                                        .lse = lse + s * Q * H, .q_stride = (int64_t)H * D, .kv_stride = kv_dim,
                                        .o_stride = (int64_t)H * D, .nq = Q, .nk = N, .n_heads = H, .n_kv_heads = K,
                                        .head_dim = D, .q_pos0 = N - Q, .k_pos0 = 0, .causal = 1, .scale = 0.088f,
                                        .kv_dtype = dt};
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                const double t0 = burst_now();
                flash_cpu(calls, S);
                const double t = burst_now() - t0;
                best = t < best ? t : best;
            }
            printf("| %d | %s | %.3f | %.1f |\n", N, bf16 ? "bf16" : "f32", 1e3 * best,
                   2.0 * (double)esz * (double)(kv_elems * S) / best / 1e9);
            free(k), free(v), free(q), free(o), free(lse);
        }
    }
    return 0;
}
