// The CPU backend's matmul (model/matmul_cpu.c) on LLaMA-7B projection shapes: GFLOP/s for
// n tokens against a (rows, cols) weight in F32, F16 or BF16, all threads, best of 3 runs. Where
// the CPU has AMX, BURST_AMX=0 times the vector paths instead (model/matmul_amx.h). The inputs x
// are float32 (the cpu backend), or bf16 with --x-dtype bf16: the cpu-bf16 backend, which takes the
// weights as backend_weight hands them to it (in AMX tiles where the CPU has AMX, model/matmul_amx.h).
// --quantize q8 or q4: BF16 weights quantized (DTYPE_Q8, DTYPE_Q4) instead of the three dtypes.
// --tokens 1,2,8: those token counts only.
//   bench_matmul_cpu [--threads T] [--x-dtype f32|bf16] [--quantize q8|q4] [--tokens N,N,...]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/matmul_cpu.h"
#include "common/amx.h"

// n elements in [-0.5, 0.5) of dtype; F16 ones have magnitudes in [2^-7, 1/2), none subnormal.
static void *random_weight(burst_dtype dtype, int64_t n) {
    void *w = burst_malloc((size_t)n * dtype_size(dtype));
    for (int64_t i = 0; i < n; i++) {
        float v = (float)rand() / (float)RAND_MAX - 0.5f;
        uint32_t u;
        memcpy(&u, &v, 4);
        if (dtype == DTYPE_F32) ((float *)w)[i] = v;
        else if (dtype == DTYPE_BF16) ((uint16_t *)w)[i] = (uint16_t)(u >> 16);
        else ((uint16_t *)w)[i] = (uint16_t)((rand() & 0x83ff) | (8 + rand() % 6) << 10);
    }
    return w;
}

// The token counts of a --tokens list into ns (at most max of them, each positive): how many, or 0.
static int parse_tokens(const char *list, int *ns, int max) {
    int count = 0;
    for (const char *p = list; count < max;) {
        char *end;
        const long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > 1 << 20 || (*end != ',' && *end)) return 0;
        ns[count++] = (int)n;
        if (!*end) return count;
        p = end + 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    // 24: the few-token tiles; 32: the GEMM's first; 40: a part-filled last panel of the GEMM;
    // 512 and 2048: one and four of AMX's blocks of tokens (a prefill step, the default and larger)
    int ns[16] = {1, 2, 4, 8, 16, 24, 32, 40, 64, 128, 256, 512, 2048}, n_ns = 13;
    int threads = 0, ok = 1, quant = 0;
    burst_dtype x_dtype = DTYPE_F32;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) ok = 0;
        else if (!strcmp(flag, "--threads")) ok = (threads = atoi(value)) > 0;
        else if (!strcmp(flag, "--quantize")) ok = quant_parse(value, &quant);
        else if (!strcmp(flag, "--tokens")) ok = (n_ns = parse_tokens(value, ns, 16)) > 0;
        else if (!strcmp(flag, "--x-dtype")) ok = dtype_parse(value, &x_dtype) && (x_dtype == DTYPE_F32 || x_dtype == DTYPE_BF16);
        else ok = 0;
    }
    if (!ok)
        return fprintf(stderr, "usage: bench_matmul_cpu [--threads T] [--x-dtype f32|bf16] [--quantize q8|q4] [--tokens N,N,...]\n"), 2;
    burst_backend *be = backend_cpu_new(threads, x_dtype == DTYPE_BF16, quant);
    static const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    printf("CPU matmul, %d threads, AMX %s, x %s, GFLOP/s (best of 3)\n", threads ? threads : omp_get_max_threads(),
           amx_usable() ? "on" : "off", dtype_name(x_dtype));
    printf("%6s %14s %6s %10s\n", "dtype", "weight", "n", "GFLOP/s");
    static const burst_dtype dtypes[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t d = quant ? 2 : 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            const weights_tensor t = {.name = "random", .dtype = dtypes[d], .ndim = 2, .shape = {rows, cols}, .numel = rows * cols,
                                      .nbytes = (size_t)(rows * cols) * dtype_size(dtypes[d]), .data = random_weight(dtypes[d], rows * cols)};
            burst_weight W;
            burst_error err;
            if (backend_weight(be, &t, &W, &err)) return fprintf(stderr, "bench_matmul_cpu: %s\n", err.msg), 1;
            for (int k = 0; k < n_ns; k++) {
                int n = ns[k];
                void *x = backend_alloc(be, dtype_size(x_dtype) * (size_t)(n * cols));
                float *out = backend_alloc(be, sizeof(float) * (size_t)(n * rows));
                for (int64_t i = 0; i < n * cols; i++) act_set(x, x_dtype, i, (float)rand() / (float)RAND_MAX - 0.5f);
                double best = 1e30;
                for (int rep = 0; rep < 3; rep++) {
                    double t0 = burst_now();
                    backend_matmul(be, out, DTYPE_F32, x, x_dtype, &W, n);
                    double t = burst_now() - t0;
                    if (t < best) best = t;
                }
                printf("%6s %6lldx%-7lld %6d %10.1f\n", dtype_name(W.dtype), (long long)rows, (long long)cols, n,
                       2.0 * n * rows * cols / best / 1e9);
                backend_release(be, x), backend_release(be, out);
            }
            free((void *)t.data);
        }
    backend_free(be);
    return 0;
}
