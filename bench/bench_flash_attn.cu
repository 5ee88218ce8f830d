// Benchmark of the GPU flash-attention forward, our kernel (attention/flash_cuda.h) beside cuDNN's
// fused attention (attention/flash_cudnn.h, when built): B=1, 32 heads, d=128, bf16 Q/K/V with
// random values, fp32 O. Validates first (two heads against the CPU twin on the same bf16
// inputs), then times with cudaEvents: warm-up, an L2 flush before every repeat, the median of
// the repeats. Prints ms and TFLOP/s (4*N*N*d*heads FLOPs, halved for causal): a tile sweep of
// ours at one length, then ours and cuDNN over lengths, with cuDNN's first call (plan build).
//
//   bench_flash_attn [max_n]   (default 131072; 128K runs causal only)
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "attention/flash.h"
#include "attention/flash_cuda.h"
#include "attention/flash_cudnn.h"
#include "common/cuda_check.h"

namespace {

constexpr int HEADS = 32, D = 128;

// Uniform in [-amp, amp) from a hash of the index: the same data whatever the launch shape.
__global__ void fill_bf16(__nv_bfloat16 *x, int64_t n, uint32_t seed, float amp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ seed;
        h ^= h >> 31; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 29;
        x[i] = __float2bfloat16(amp * (2.0f * (float)(h >> 40) / 16777216.0f - 1.0f));
    }
}

struct problem {
    int n;
    uint16_t *q, *k, *v; // device (n, HEADS, D) bf16
    float *o, *lse;      // device (n, HEADS, D), (HEADS, n)
};

problem make_problem(int n) {
    problem p = {n, nullptr, nullptr, nullptr, nullptr, nullptr};
    const int64_t e = (int64_t)n * HEADS * D;
    CUDA_CHECK(cudaMalloc(&p.q, e * 2)); CUDA_CHECK(cudaMalloc(&p.k, e * 2)); CUDA_CHECK(cudaMalloc(&p.v, e * 2));
    CUDA_CHECK(cudaMalloc(&p.o, e * 4)); CUDA_CHECK(cudaMalloc(&p.lse, (int64_t)HEADS * n * 4));
    uint16_t *x[3] = {p.q, p.k, p.v};
    for (int i = 0; i < 3; i++) {
        fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)x[i], e, 1234u + 77u * i, i < 2 ? 2.0f : 1.0f);
        CUDA_CHECK(cudaGetLastError());
    }
    return p;
}

void free_problem(problem &p) {
    CUDA_CHECK(cudaFree(p.q)); CUDA_CHECK(cudaFree(p.k)); CUDA_CHECK(cudaFree(p.v));
    CUDA_CHECK(cudaFree(p.o)); CUDA_CHECK(cudaFree(p.lse));
}

flash_cuda_args args_of(const problem &p, int causal) {
    flash_cuda_args a = {};
    a.q = p.q; a.k = p.k; a.v = p.v; a.o = p.o; a.lse = p.lse;
    a.q_stride = a.kv_stride = a.o_stride = (int64_t)HEADS * D;
    a.nq = a.nk = p.n; a.n_heads = a.n_kv_heads = HEADS; a.head_dim = D;
    a.causal = causal; a.scale = 1.0f / sqrtf((float)D);
    return a;
}

// What runs: one of our tile shapes, or CUDNN.
constexpr int CUDNN = FLASH_CUDA_TILES_COUNT;

void run(const flash_cuda_args &a, int impl) {
    burst_error err;
    burst_status s = impl == CUDNN ? flash_cudnn(&a, 0, &err) : flash_cuda_with_tiles(&a, (flash_cuda_tiles)impl, 0, &err);
    if (s != BURST_OK) {
        fprintf(stderr, "%s: %s\n", impl == CUDNN ? "flash_cudnn" : "flash_cuda", err.msg);
        exit(1);
    }
}

// Heads 0 and HEADS-1 of the GPU result against the CPU twin on the same bf16 inputs.
bool validate(int n, int causal, int impl) {
    problem p = make_problem(n);
    run(args_of(p, causal), impl);
    const int64_t e = (int64_t)n * HEADS * D;
    std::vector<uint16_t> hb(e);
    std::vector<float> q(e), k(e), v(e), o(e), lse((size_t)HEADS * n);
    uint16_t *src[3] = {p.q, p.k, p.v};
    std::vector<float> *dst[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++) {
        CUDA_CHECK(cudaMemcpy(hb.data(), src[i], e * 2, cudaMemcpyDeviceToHost));
        for (int64_t j = 0; j < e; j++) (*dst[i])[j] = bf16_to_f32(hb[j]);
    }
    CUDA_CHECK(cudaMemcpy(o.data(), p.o, e * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse.data(), p.lse, (size_t)HEADS * n * 4, cudaMemcpyDeviceToHost));
    std::vector<float> oc(e), lc(n);
    bool ok = true;
    for (int h : {0, HEADS - 1}) {
        flash_args c = {};
        c.q = q.data() + h * D; c.k = k.data() + h * D; c.v = v.data() + h * D;
        c.o = oc.data() + h * D; c.lse = lc.data();
        c.q_stride = c.kv_stride = c.o_stride = (int64_t)HEADS * D;
        c.nq = c.nk = n; c.n_heads = c.n_kv_heads = 1; c.head_dim = D;
        c.causal = causal; c.scale = 1.0f / sqrtf((float)D);
        flash_cpu(&c);
        double num = 0, den = 0, worst = 0, worst_lse = 0;
        for (int64_t i = 0; i < n; i++) {
            for (int x = 0; x < D; x++) {
                double g = o[i * HEADS * D + h * D + x], r = oc[i * HEADS * D + h * D + x];
                num += (g - r) * (g - r); den += r * r;
                worst = std::max(worst, isnan(g) ? INFINITY : fabs(g - r));
            }
            worst_lse = std::max(worst_lse, (double)fabsf(lse[(int64_t)h * n + i] - lc[i]));
        }
        const double nmse = num / den;
        // bf16 P in P V: ~1e-3 relative per row, nmse ~1e-6; lse is fp32 arithmetic.
        const bool good = nmse < 1e-4 && worst < 1e-2 && worst_lse < 1e-3;
        printf("validate %s N=%d %s head %d: nmse %.2e, max |dO| %.2e, max |dlse| %.2e: %s\n",
               impl == CUDNN ? "cudnn" : "ours", n, causal ? "causal" : "full", h, nmse, worst, worst_lse,
               good ? "ok" : "FAIL");
        ok &= good;
    }
    free_problem(p);
    return ok;
}

// Median ms of `reps` runs after `warm` runs, each run preceded by an L2 flush.
double time_ms(const flash_cuda_args &a, int impl, int warm, int reps, void *flush, size_t flush_bytes) {
    for (int i = 0; i < warm; i++) run(a, impl);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> ms;
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaMemsetAsync(flush, i, flush_bytes, 0));
        CUDA_CHECK(cudaEventRecord(e0, 0));
        run(a, impl);
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    CUDA_CHECK(cudaEventDestroy(e0)); CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

double tflops(int n, int causal, double ms) {
    return 4.0 * n * (double)n * D * HEADS * (causal ? 0.5 : 1.0) / (ms * 1e-3) / 1e12;
}

} // namespace

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("no CUDA device\n");
        return 77;
    }
    const int max_n = argc > 1 ? atoi(argv[1]) : 131072;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const bool cudnn = flash_cudnn_compiled();
    bool ok = validate(4096, 1, FLASH_CUDA_TILES_DEFAULT) & validate(4096, 0, FLASH_CUDA_TILES_DEFAULT) &
              validate(1000, 1, FLASH_CUDA_TILES_DEFAULT);
    if (cudnn) ok &= validate(4096, 1, CUDNN) & validate(4096, 0, CUDNN) & validate(1000, 1, CUDNN);
    if (!ok) { printf("validation FAILED: no timings\n"); return 1; }

    const size_t flush_bytes = 256u << 20;
    void *flush;
    CUDA_CHECK(cudaMalloc(&flush, flush_bytes));

    const int sweep_n = std::min(16384, max_n);
    printf("\ntile sweep, B=1 H=%d d=%d N=%d\n| tiles | causal | ms | TFLOP/s |\n|---|---|---|---|\n", HEADS, D, sweep_n);
    problem p = make_problem(sweep_n);
    for (int t = 1; t < FLASH_CUDA_TILES_COUNT; t++)
        for (int causal = 1; causal >= 0; causal--) {
            double ms = time_ms(args_of(p, causal), t, 2, 10, flush, flush_bytes);
            printf("| %s | %d | %.3f | %.1f |\n", flash_cuda_tiles_name[t], causal, ms, tflops(sweep_n, causal, ms));
        }
    free_problem(p);

    printf("\nours (default tiles %s) and cuDNN %s, B=1 H=%d d=%d; plan: cuDNN's first call, s\n"
           "| N | causal | ours ms | TFLOP/s | cuDNN ms | TFLOP/s | plan s |\n|---|---|---|---|---|---|---|\n",
           flash_cuda_tiles_name[FLASH_CUDA_TILES_DEFAULT], cudnn ? "" : "(not built)", HEADS, D);
    for (int n : {4096, 16384, 32768, 65536, 131072}) {
        if (n > max_n) break;
        problem q = make_problem(n);
        const int reps = n <= 16384 ? 10 : 3;
        for (int causal = 1; causal >= 0; causal--) {
            if (n > 65536 && !causal) continue; // 2 PFLOP a run: too long for the lease
            const flash_cuda_args a = args_of(q, causal);
            double ms = time_ms(a, FLASH_CUDA_TILES_DEFAULT, 1, reps, flush, flush_bytes);
            printf("| %d | %d | %.3f | %.1f |", n, causal, ms, tflops(n, causal, ms));
            if (cudnn) {
                CUDA_CHECK(cudaDeviceSynchronize());
                const double t0 = burst_now();
                run(a, CUDNN);
                CUDA_CHECK(cudaDeviceSynchronize());
                const double plan_s = burst_now() - t0;
                double cms = time_ms(a, CUDNN, 1, reps, flush, flush_bytes);
                printf(" %.3f | %.1f | %.2f |", cms, tflops(n, causal, cms), plan_s);
            }
            printf("\n");
        }
        free_problem(q);
    }
    CUDA_CHECK(cudaFree(flush));
    printf("\ncommand:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");
    return 0;
}
