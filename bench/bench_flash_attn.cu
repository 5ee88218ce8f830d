// Benchmark of the GPU flash-attention forward, our kernel (attention/flash_cuda.h) beside cuDNN's
// fused attention (attention/flash_cudnn.h, when built): B=1, 32 heads, d=128, bf16 Q/K/V with
// random values, fp32 O. Validates first (two heads against the CPU twin on the same bf16
// inputs), then times with cudaEvents: warm-up, an L2 flush before every repeat, the median of
// the repeats. Prints ms and TFLOP/s (4*N*N*d*heads FLOPs, halved for causal): a tile sweep of
// ours at one length, then ours and cuDNN over lengths, with cuDNN's first call (plan build).
// Then decode: one query row against an fp32 KV cache of 4K, 32K and 128K keys, LLaMA-7B's
// 32/32 heads and GQA 32/8, d=128: the split-KV kernel (attention/decode_cuda.h, validated first
// against the CPU twin) beside what the CUDA backend ran before it (Q/K/V rounded to packed bf16,
// then flash_cuda), in us per call and GB/s of fp32 K/V read, with a device copy for scale.
//
//   bench_flash_attn [max_n]   (default 131072; 128K runs causal only; then decode)
//   bench_flash_attn decode    (decode only)
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "attention/decode_cuda.h"
#include "attention/flash.h"
#include "attention/flash_cuda.h"
#include "attention/flash_cudnn.h"
#include "common/cuda_check.h"

namespace {

constexpr int HEADS = 32, D = 128;

// Uniform in [-amp, amp) from a hash of the index: the same data whatever the launch shape.
template <typename T> __global__ void fill(T *x, int64_t n, uint32_t seed, float amp) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ seed;
        h ^= h >> 31; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 29;
        x[i] = (T)(amp * (2.0f * (float)(h >> 40) / 16777216.0f - 1.0f));
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
        fill<<<1024, 256>>>((__nv_bfloat16 *)x[i], e, 1234u + 77u * i, i < 2 ? 2.0f : 1.0f);
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
        flash_cpu(&c, 1);
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

// Median ms of `reps` calls of run() after `warm` calls, each timed call preceded by an L2 flush.
template <typename F> double time_ms(F run, int warm, int reps, void *flush, size_t flush_bytes) {
    for (int i = 0; i < warm; i++) run();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> ms;
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaMemsetAsync(flush, i, flush_bytes, 0));
        CUDA_CHECK(cudaEventRecord(e0, 0));
        run();
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

// The prefill tables: a tile sweep of ours at one length, then ours and cuDNN over lengths.
void bench_prefill(int max_n, bool cudnn, void *flush, size_t flush_bytes) {
    const int sweep_n = std::min(16384, max_n);
    printf("\ntile sweep, B=1 H=%d d=%d N=%d\n| tiles | causal | ms | TFLOP/s |\n|---|---|---|---|\n", HEADS, D, sweep_n);
    problem p = make_problem(sweep_n);
    for (int t = 1; t < FLASH_CUDA_TILES_COUNT; t++)
        for (int causal = 1; causal >= 0; causal--) {
            const flash_cuda_args a = args_of(p, causal);
            double ms = time_ms([&] { run(a, t); }, 2, 10, flush, flush_bytes);
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
            double ms = time_ms([&] { run(a, FLASH_CUDA_TILES_DEFAULT); }, 1, reps, flush, flush_bytes);
            printf("| %d | %d | %.3f | %.1f |", n, causal, ms, tflops(n, causal, ms));
            if (cudnn) {
                CUDA_CHECK(cudaDeviceSynchronize());
                const double t0 = burst_now();
                run(a, CUDNN);
                CUDA_CHECK(cudaDeviceSynchronize());
                const double plan_s = burst_now() - t0;
                double cms = time_ms([&] { run(a, CUDNN); }, 1, reps, flush, flush_bytes);
                printf(" %.3f | %.1f | %.2f |", cms, tflops(n, causal, cms), plan_s);
            }
            printf("\n");
        }
        free_problem(q);
    }
}

// ---- decode: one query row against a long fp32 KV cache ----

// The first step of the old decode path, as model/backend_cuda.cu's round_bf16 ran it on packed
// rows: fp32 -> bf16, four elements a thread.
__global__ void round_bf16x4(__nv_bfloat162 *dst, const float4 *src, int64_t n4) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n4; t += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = src[t];
        dst[2 * t] = __floats2bfloat162_rn(v.x, v.y);
        dst[2 * t + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

void round_bf16(uint16_t *dst, const float *src, int64_t n) { // n a multiple of 4
    const int64_t blocks = std::min<int64_t>((n / 4 + 1023) / 1024, 1 << 20);
    round_bf16x4<<<(unsigned)blocks, 256>>>((__nv_bfloat162 *)dst, (const float4 *)src, n / 4);
    CUDA_CHECK(cudaGetLastError());
}

struct decode_problem {
    int nk, kv_heads;
    float *q, *k, *v, *o, *lse; // device: q, o (HEADS, D); k, v (nk, kv_heads, D); lse (HEADS)
    uint16_t *q16, *k16, *v16;  // the old path's bf16 copies
    float *ws;                  // decode_cuda's workspace
    size_t n_ws;
};

// The step after a prefill of nk tokens, as llama.c's attend_replicated asks it of the backend.
flash_args decode_args(const decode_problem &p) {
    flash_args a = {};
    a.q = p.q; a.k = p.k; a.v = p.v; a.o = p.o; a.lse = p.lse;
    a.q_stride = a.o_stride = (int64_t)HEADS * D;
    a.kv_stride = (int64_t)p.kv_heads * D;
    a.nq = 1; a.nk = p.nk; a.n_heads = HEADS; a.n_kv_heads = p.kv_heads; a.head_dim = D;
    a.q_pos0 = p.nk; a.scale = 1.0f / sqrtf((float)D);
    return a;
}

decode_problem make_decode(int nk, int kv_heads) {
    decode_problem p = {};
    p.nk = nk, p.kv_heads = kv_heads;
    const int64_t qe = (int64_t)HEADS * D, ke = (int64_t)nk * kv_heads * D;
    CUDA_CHECK(cudaMalloc(&p.q, qe * 4)); CUDA_CHECK(cudaMalloc(&p.o, qe * 4)); CUDA_CHECK(cudaMalloc(&p.lse, HEADS * 4));
    CUDA_CHECK(cudaMalloc(&p.k, ke * 4)); CUDA_CHECK(cudaMalloc(&p.v, ke * 4));
    CUDA_CHECK(cudaMalloc(&p.q16, qe * 2)); CUDA_CHECK(cudaMalloc(&p.k16, ke * 2)); CUDA_CHECK(cudaMalloc(&p.v16, ke * 2));
    float *x[3] = {p.q, p.k, p.v};
    const int64_t n[3] = {qe, ke, ke};
    for (int i = 0; i < 3; i++) {
        fill<<<1024, 256>>>(x[i], n[i], 4321u + 77u * i, i < 2 ? 2.0f : 1.0f);
        CUDA_CHECK(cudaGetLastError());
    }
    const flash_args a = decode_args(p);
    p.n_ws = decode_cuda_workspace_floats(&a);
    CUDA_CHECK(cudaMalloc(&p.ws, (p.n_ws ? p.n_ws : 1) * 4));
    return p;
}

void free_decode(decode_problem &p) {
    void *bufs[] = {p.q, p.k, p.v, p.o, p.lse, p.q16, p.k16, p.v16, p.ws};
    for (void *b : bufs) CUDA_CHECK(cudaFree(b));
}

void decode_old(const decode_problem &p) {
    const int64_t ke = (int64_t)p.nk * p.kv_heads * D;
    round_bf16(p.q16, p.q, (int64_t)HEADS * D);
    round_bf16(p.k16, p.k, ke);
    round_bf16(p.v16, p.v, ke);
    const flash_args a = decode_args(p);
    flash_cuda_args f = {};
    f.q = p.q16; f.k = p.k16; f.v = p.v16; f.o = p.o; f.lse = p.lse;
    f.q_stride = a.q_stride; f.kv_stride = a.kv_stride; f.o_stride = a.o_stride;
    f.nq = 1; f.nk = p.nk; f.n_heads = HEADS; f.n_kv_heads = p.kv_heads; f.head_dim = D;
    f.q_pos0 = a.q_pos0; f.scale = a.scale;
    run(f, FLASH_CUDA_TILES_DEFAULT);
}

void decode_new(const decode_problem &p) {
    const flash_args a = decode_args(p);
    burst_error err;
    if (decode_cuda(&a, p.ws, p.n_ws, nullptr, 0, &err) != BURST_OK) {
        fprintf(stderr, "decode_cuda: %s\n", err.msg);
        exit(1);
    }
}

// decode_cuda at 4K keys, GQA 32/8, against the CPU twin on the same fp32 inputs.
bool validate_decode() {
    decode_problem p = make_decode(4096, 8);
    decode_new(p);
    const int64_t qe = (int64_t)HEADS * D, ke = (int64_t)p.nk * p.kv_heads * D;
    std::vector<float> q(qe), k(ke), v(ke), o(qe), lse(HEADS), oc(qe), lc(HEADS);
    CUDA_CHECK(cudaMemcpy(q.data(), p.q, qe * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(k.data(), p.k, ke * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(v.data(), p.v, ke * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o.data(), p.o, qe * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse.data(), p.lse, HEADS * 4, cudaMemcpyDeviceToHost));
    flash_args c = decode_args(p);
    c.q = q.data(); c.k = k.data(); c.v = v.data(); c.o = oc.data(); c.lse = lc.data();
    flash_cpu(&c, 1);
    double num = 0, den = 0, worst = 0, worst_lse = 0;
    for (int64_t x = 0; x < qe; x++) {
        num += (o[x] - (double)oc[x]) * (o[x] - (double)oc[x]);
        den += (double)oc[x] * oc[x];
        worst = std::max(worst, isnan(o[x]) ? INFINITY : fabs(o[x] - (double)oc[x]));
    }
    for (int h = 0; h < HEADS; h++) worst_lse = std::max(worst_lse, isnan(lse[h]) ? INFINITY : fabs(lse[h] - (double)lc[h]));
    // fp32 on both sides (tests/test_flash_cuda.c bounds the kernel at 1e-6 absolute against float64).
    const bool good = num / den < 1e-10 && worst < 1e-5 && worst_lse < 1e-4;
    printf("validate decode N=%d heads %d/%d: nmse %.2e, max |dO| %.2e, max |dlse| %.2e: %s\n", p.nk, HEADS,
           p.kv_heads, num / den, worst, worst_lse, good ? "ok" : "FAIL");
    free_decode(p);
    return good;
}

void bench_decode(void *flush, size_t flush_bytes) {
    const size_t copy_bytes = 1u << 30;
    void *a, *b;
    CUDA_CHECK(cudaMalloc(&a, copy_bytes)); CUDA_CHECK(cudaMalloc(&b, copy_bytes));
    const double copy_ms = time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice, 0)); },
                                   2, 10, flush, flush_bytes);
    CUDA_CHECK(cudaFree(a)); CUDA_CHECK(cudaFree(b));
    printf("\ndecode: 1 query row, %d heads, d=%d, fp32 KV cache of N keys, not causal (llama.c's "
           "attend_replicated); GB/s of fp32 K/V read (2*N*kv_heads*d*4 bytes); device copy of 1 GiB: "
           "%.0f GB/s read + write\n| heads/kv | N | splits | old: pack + flash us | GB/s | split-KV us | GB/s | "
           "speedup |\n|---|---|---|---|---|---|---|---|\n", HEADS, D, 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9);
    for (int kv : {HEADS, 8})
        for (int n : {4096, 32768, 131072}) {
            decode_problem p = make_decode(n, kv);
            const double old_ms = time_ms([&] { decode_old(p); }, 2, 20, flush, flush_bytes);
            const double new_ms = time_ms([&] { decode_new(p); }, 2, 20, flush, flush_bytes);
            const double gb = 2.0 * n * kv * D * 4 / 1e9;
            const flash_args a = decode_args(p);
            printf("| %d/%d | %d | %d | %.1f | %.0f | %.1f | %.0f | %.2fx |\n", HEADS, kv, n, decode_cuda_splits(&a),
                   old_ms * 1e3, gb / (old_ms * 1e-3), new_ms * 1e3, gb / (new_ms * 1e-3), old_ms / new_ms);
            free_decode(p);
        }
}

} // namespace

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("no CUDA device\n");
        return 77;
    }
    const bool decode_only = argc > 1 && strcmp(argv[1], "decode") == 0;
    const int max_n = argc > 1 && !decode_only ? atoi(argv[1]) : 131072;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const bool cudnn = flash_cudnn_compiled();
    bool ok = validate_decode();
    if (!decode_only) {
        ok &= validate(4096, 1, FLASH_CUDA_TILES_DEFAULT) & validate(4096, 0, FLASH_CUDA_TILES_DEFAULT) &
              validate(1000, 1, FLASH_CUDA_TILES_DEFAULT);
        if (cudnn) ok &= validate(4096, 1, CUDNN) & validate(4096, 0, CUDNN) & validate(1000, 1, CUDNN);
    }
    if (!ok) { printf("validation FAILED: no timings\n"); return 1; }

    const size_t flush_bytes = 256u << 20;
    void *flush;
    CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    if (!decode_only) bench_prefill(max_n, cudnn, flush, flush_bytes);
    bench_decode(flush, flush_bytes);
    CUDA_CHECK(cudaFree(flush));
    printf("\ncommand:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");
    return 0;
}
