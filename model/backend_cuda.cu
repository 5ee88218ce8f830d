// The CUDA backend (contract in model/backend_cuda.h; the CPU backend, model/backend_cpu.c, is
// its twin and specification, and tests/test_backend_cuda.c holds each op against it).
//
// Kernels. The element-wise ops (embed, rmsnorm, rope, swiglu, the fp32 -> bf16 rounding of
// activations, the weight conversion) are memory-bound: coalesced loads and stores,
// grid-stride loops over 64-bit indices, 256 threads a block. rmsnorm: one block per row, a
// block reduction of the sum of squares. rope: one thread per (token, frequency, 8 heads)
// computes the angle in double, as the CPU twin does (a float32 angle loses the low bits past
// ~10^4 positions), and rotates that pair in its heads. Attention: decode (up to
// DECODE_CUDA_MAX_ROWS query rows) and fp32 mode run attention/decode_cuda.h, exact fp32 on the
// fp32 Q/K/V in place; bf16 mode packs larger blocks to bf16 for cuDNN or the flash kernel:
// cuDNN where flash_cudnn_worth says its plan exists or pays (BURST_FLASH=cudnn: always, =ours:
// never). sample: one block per row, (value, index) reductions that keep the lower index of
// equal values, so that greedy sampling picks the CPU's token; at a temperature, exp sums over
// slices of the row, then a walk of the slice the draw falls in.
// Matmul: cublasGemmEx, out^T = W x^T in cuBLAS's column-major terms (W^T as op(A), x^T as B).
// bf16 mode keeps the matmuls' inputs in bf16 (backend_act_dtype): rmsnorm and swiglu write them
// so, the gate and up GEMMs write bf16 for swiglu, and the residual adds ride in the output
// projections' GEMMs (beta 1). At 32K tokens of 7B that is, by estimate, ~12 of ~27 GB of
// element-wise traffic a layer fewer (every GEMM rounded its fp32 input again, QKV three times)
// and 6 fewer launches a layer in decode. Measured with it (H200, bench/gpu_prefill.sh, bf16
// cache): 32K tokens of 7B 1.200 s to the first token (595 TFLOP/s) against Hugging Face's 1.363 s.
//
// Measured (H100 80GB HBM3, CUDA 13.0, bench/bench_prefill.c, random LLaMA-7B shape, bf16, one
// call with .gpu-kit/torch_prefill.py): time to first token with cuDNN attention 4K 0.127 s,
// 16K 0.589 s, 32K 1.403 s (509 TFLOP/s), against Hugging Face transformers (SDPA) 0.130 / 0.614 /
// 1.437 s with KV cache and 0.123 / 0.586 / 1.383 s without; with our flash kernel
// (BURST_FLASH=ours, same call) 0.137 / 0.696 / 1.831 s. Chunks of 16K or 32K tokens beat 4K
// chunks at 32K (fewer re-reads of the K/V prefix, larger GEMMs). What remains against torch,
// by estimate: the fp32 activations (~25 GB of element-wise traffic per layer, about twice
// torch's bf16 traffic), fp32 GEMM outputs, and the bf16 packing of Q/K/V and widening of O
// around attention. 64K does not fit with the fp32 KV cache (64 GB); a bf16 cache (32 GB) is read
// by the attention in place, without the per-call rounding of K/V: another call, bf16 cache, 4K
// 0.120 s, 16K 0.567 s, 32K 1.350 s, 64K 3.676 s against HF 0.124 / 0.580 / 1.378 / 3.705 s
// without its KV cache and 0.130 / 0.608 / 1.428 / 3.792 s with it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <type_traits>

#include "attention/decode_cuda.h"
#include "attention/flash_cuda.h"
#include "attention/flash_cudnn.h"
#include "attention/online_softmax_cuda.h"
#include "backend_cuda.h"
#include "backend_impl.h"
#include "common/cuda_check.h"
#include "common/cuda_launch.h"

namespace {

constexpr int THREADS = 256;
// cuDNN's fused attention (attention/flash_cudnn.h) builds a plan per shape (tens of ms): worth
// it for prefill blocks, never for decode, whose nk changes every token.
constexpr int CUDNN_MIN_ROWS = 1024;
constexpr size_t CUBLAS_WORKSPACE = 32u << 20; // cuBLAS asks for 32 MiB on Hopper
constexpr size_t UPLOAD_CHUNK = 64u << 20;     // bytes per staged weight upload
// Split-K (BURST_SPLIT_K, on unless "0"): a += matmul of at most SPLIT_K_MAX_ROWS rows (decode's
// output projections) whose columns split SPLIT_K ways into multiples of 8 runs as SPLIT_K GEMMs
// of a column slice each (one strided-batched call), summed into out by split_k_sum_kernel.
constexpr int SPLIT_K = 4, SPLIT_K_MAX_ROWS = 8;
constexpr int64_t SPLIT_K_MIN_COLS = 2048;
// BURST_CUDA_GRAPHS=1: steps of at most this many rows, none of more than DECODE_CUDA_MAX_ROWS
// of one sequence (decode), run as CUDA graphs; the graphs of GRAPH_SLOTS steps are kept.
constexpr int GRAPH_MAX_ROWS = 64, GRAPH_SLOTS = 16;
constexpr uint64_t GRAPH_KEY_SEED = 14695981039346656037ull; // FNV-1a's offset basis

constexpr int PROFILE_KEYS = 128;

// A device buffer that grows on demand (scratch reused across calls).
typedef struct {
    void *p;
    size_t cap;
    bool in_graphs; // graph steps use it: recorded graphs must not outlive it
} dev_buf;

// A host -> device copy through pinned memory: asynchronous, and skipped when the bytes equal
// the previous upload (rope receives the same positions for q and k in every layer).
typedef struct {
    void *host, *dev; // pinned host copy of the last upload, and its device copy
    size_t cap, len;
    cudaEvent_t done; // the last copy out of `host` has finished
    bool in_graphs;   // graph steps use it (the tokens and positions): recorded graphs must not outlive it
} upload_buf;

// BURST_PROFILE=1: the GPU time of every op, between two events recorded around its launches,
// summed per op and shape class, printed on stderr when the backend is freed. An event pair
// costs a few microseconds of host time per op, so wall times grow; the sums are what to read.
typedef struct {
    char name[48]; // op and shape class, e.g. "matmul 4096x11008 n<=8192"
    double ms;
    long calls;
} profile_key;
typedef struct {
    cudaEvent_t start, stop;
    int key;
} profile_mark;
typedef struct {
    profile_key keys[PROFILE_KEYS]; // the last one takes every shape past the others
    int n_keys;
    profile_mark *marks; // recorded since the last stream synchronization
    int n_marks, cap_marks;
} profile;

// A recorded step: the graph it was instantiated from (whose nodes name the executable graph's
// to cudaGraphExecKernelNodeSetParams), the nodes of its patched launches in launch order, the
// key of its ops (graph_note), its rows, and the step that last ran it.
typedef struct {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaGraphNode_t *patched;
    int n_patched;
    uint64_t key;
    int rows;
    long last_step;
} graph_slot;

// Between cuda_graph_begin and _end: the step runs as usual, is recorded (captured), or is
// replayed (its fixed launches skipped, its patched ones written into a slot's graph).
enum graph_mode { GRAPH_OFF, GRAPH_CAPTURE, GRAPH_REPLAY };

typedef struct {
    int device, fp32;
    int cudnn_min_rows;         // flash_cudnn for blocks of at least this many query rows, else 0
    int cudnn_always;           // 1: for every such block cuDNN takes, plan or not (BURST_FLASH=cudnn)
    int batched;                // BURST_BATCHED_DECODE (1 unless "0"): attention_batch / convert_batch in few launches
    int grouped_gemm;           // BURST_GROUPED_GEMM (1 unless "0"): cuda_matmul_group batches a group's GEMMs
    int split_k;                // BURST_SPLIT_K (1 unless "0"): decode's += matmuls split their columns
    int graphs;                 // BURST_CUDA_GRAPHS=1: cuda_graph_begin / cuda_graph_end run decode steps as graphs
    graph_mode mode;            // of the step between them
    int graph_rows;             // its rows
    graph_slot *replaying;      // GRAPH_REPLAY: the slot whose graph it patches
    uint64_t key;               // its ops so far (graph_note)
    int n_patched;              // its patched launches so far
    bool mismatch;              // GRAPH_REPLAY: its patched launches are not the slot's
    bool must_record;           // GRAPH_REPLAY: it needs a buffer to grow, so no graph recorded before fits
    graph_mode retry_mode;      // after cuda_graph_end returned 0: how the step's second issue runs
    graph_slot *retry_slot;     // (GRAPH_REPLAY: the slot whose key it had)
    cudaGraphNode_t *captured;  // GRAPH_CAPTURE: the nodes of its patched launches
    int cap_captured;
    unsigned char graph_rows_seen[GRAPH_MAX_ROWS + 1]; // a step of this many rows has run plainly
    graph_slot graph_slots[GRAPH_SLOTS];
    void **retired;             // buffers dev_grow replaced while capturing, freed once the graph has run
    int n_retired, cap_retired;
    long graph_steps, graph_captures, graph_refused; // steps run as graphs, recorded anew; replays refused
    cuda_launcher launcher;     // the patched launches go through it (graph_launch)
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    dev_buf mm_in;              // matmul inputs in the weights' dtype (bf16 rounded, or fp32 widened)
    dev_buf mm_out;             // fp32 mode: bf16 matmul outputs before their rounding
    dev_buf q16, k16, v16;      // bf16 roundings of attention inputs
    dev_buf decode_ws;          // decode_cuda's split partials
    dev_buf split_k_part;       // split-K GEMMs' partial sums
    dev_buf sample_out;         // backend_sample's ids before they go to the host
    dev_buf staging;            // weight upload staging (file dtype)
    upload_buf tokens, pos, sampling; // (sampling: backend_sample's temperatures and units)
    void **weights;             // (n_weights) device copies owned by the backend
    int n_weights, cap_weights;
    profile *prof;              // NULL unless BURST_PROFILE=1
} cuda_ctx;

cuda_ctx *ctx_of(burst_backend *b) {
    cuda_ctx *c = (cuda_ctx *)b->ctx;
    CUDA_CHECK(cudaSetDevice(c->device));
    return c;
}

unsigned blocks_for(int64_t n, int per_thread) {
    int64_t b = (n + (int64_t)THREADS * per_thread - 1) / ((int64_t)THREADS * per_thread);
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b); // grid-stride beyond 2^20 blocks
}

void graph_slot_clear(cuda_ctx *c, graph_slot *g) {
    if (g->exec) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream)); // a launch of it may be in flight
        CUDA_CHECK(cudaGraphExecDestroy(g->exec));
        CUDA_CHECK(cudaGraphDestroy(g->graph));
    }
    free(g->patched);
    *g = (graph_slot){};
}

// Every recorded step: after a buffer their graphs may use moved.
void graph_drop_all(cuda_ctx *c) {
    for (graph_slot &g : c->graph_slots) graph_slot_clear(c, &g);
}

// Folds bytes into the step's key (FNV-1a).
void graph_note_bytes(cuda_ctx *c, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) c->key = (c->key ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

// In a graph step, an op notes in the key what its fixed launches depend on (its name and every
// argument: scalars and pointers, no padding), so that a replay runs only where each op is the
// recorded one; its patched launches note their kernels (graph_launch).
template <typename... A> void graph_note(cuda_ctx *c, const char *op, const A &...args) {
    static_assert((std::is_scalar<A>::value && ...), "note scalars and pointers, whose bytes are all value");
    if (c->mode == GRAPH_OFF) return;
    graph_note_bytes(c, &op, sizeof op);
    (graph_note_bytes(c, &args, sizeof args), ...);
}

// A replayed step: the fixed launches are in the graph already, and the op returns after noting.
bool replaying(const cuda_ctx *c) { return c->mode == GRAPH_REPLAY; }

// The launches whose parameters change from step to step (decode attention, the K/V rows into
// the cache, the uploads of tokens and positions): launched as given outside graph steps;
// launched and their nodes kept while a step is recorded; written into the replayed graph's
// nodes, in the same order, while one is replayed.
void graph_launch(void *ctx, const void *func, dim3 grid, dim3 block, void **args, cudaStream_t stream) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (c->mode != GRAPH_OFF) {
        graph_note_bytes(c, &func, sizeof func);
        graph_note_bytes(c, &block, sizeof block);
    }
    if (c->mode != GRAPH_REPLAY) {
        CUDA_CHECK(cudaLaunchKernel(func, grid, block, args, 0, stream));
        if (c->mode == GRAPH_OFF) return;
        cudaStreamCaptureStatus status;
        const cudaGraphNode_t *deps = NULL;
        size_t n_deps = 0; // the capture's next node depends on the one just recorded, alone
        CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, NULL, NULL, &deps, NULL, &n_deps));
        BURST_ASSERT(status == cudaStreamCaptureStatusActive && n_deps == 1);
        if (c->n_patched == c->cap_captured) {
            c->cap_captured = c->cap_captured ? 2 * c->cap_captured : 256;
            c->captured = (cudaGraphNode_t *)burst_realloc(c->captured, sizeof *c->captured * (size_t)c->cap_captured);
        }
        c->captured[c->n_patched++] = deps[0];
        return;
    }
    const graph_slot *g = c->replaying;
    if (!c->mismatch && c->n_patched < g->n_patched) {
        cudaKernelNodeParams p = {.func = (void *)func, .gridDim = grid, .blockDim = block, .sharedMemBytes = 0,
                                  .kernelParams = args, .extra = NULL};
        if (cudaGraphExecKernelNodeSetParams(g->exec, g->patched[c->n_patched], &p) != cudaSuccess) {
            (void)cudaGetLastError(); // another kernel than the recorded one: the key tells too
            c->mismatch = true;
        }
    } else {
        c->mismatch = true;
    }
    c->n_patched++;
}

void *dev_grow(cuda_ctx *c, dev_buf *d, size_t bytes) {
    if (bytes <= d->cap) return d->p;
    BURST_ASSERT(c->mode != GRAPH_REPLAY); // (decode_workspace asks first)
    if (c->mode == GRAPH_CAPTURE) { // the graph's earlier nodes may use the old buffer: freed after it runs
        if (c->n_retired == c->cap_retired) {
            c->cap_retired = c->cap_retired ? 2 * c->cap_retired : 8;
            c->retired = (void **)burst_realloc(c->retired, sizeof *c->retired * (size_t)c->cap_retired);
        }
        if (d->p) c->retired[c->n_retired++] = d->p; // (none before: nothing recorded uses it)
    } else {
        CUDA_CHECK(cudaStreamSynchronize(c->stream)); // the old buffer may still be read
        CUDA_CHECK(cudaFree(d->p));
        if (d->in_graphs) graph_drop_all(c); // recorded steps may use it
    }
    CUDA_CHECK(cudaMalloc(&d->p, bytes)); // (allowed while capturing: the capture is relaxed)
    d->cap = bytes;
    return d->p;
}

// An upload in a graph step: the bytes ride in the graph as a patched launch's parameters, by
// value, where a copy node would read `host` when the graph runs, after later uploads of the
// same step may have rewritten it.
struct param_bytes {
    unsigned char b[GRAPH_MAX_ROWS * sizeof(int64_t)]; // a step's positions
};
__global__ void store_bytes_kernel(unsigned char *dst, const __grid_constant__ param_bytes src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.b[i];
}

const void *upload(cuda_ctx *c, upload_buf *u, const void *src, size_t bytes) {
    if (bytes == u->len && bytes && !memcmp(u->host, src, bytes)) return u->dev;
    if (c->mode != GRAPH_OFF) {
        // A step of this many rows ran plainly before (cuda_graph_begin) and sized `dev`; no copy
        // from `host` is in flight (cuda_graph_begin waited), so it takes the bytes that the next
        // upload compares against.
        BURST_ASSERT(bytes <= u->cap && bytes <= sizeof(param_bytes));
        param_bytes p = {};
        memcpy(p.b, src, bytes);
        memcpy(u->host, src, bytes);
        u->len = bytes;
        unsigned char *dst = (unsigned char *)u->dev;
        int n = (int)bytes;
        void *args[] = {&dst, &p, &n};
        cuda_launch(&c->launcher, (const void *)store_bytes_kernel, dim3(1), dim3(THREADS), args, c->stream);
        return u->dev;
    }
    CUDA_CHECK(cudaEventSynchronize(u->done)); // `host` is about to be overwritten
    if (bytes > u->cap) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream)); // `dev` may still be read
        CUDA_CHECK(cudaFreeHost(u->host));
        CUDA_CHECK(cudaFree(u->dev));
        if (u->in_graphs) graph_drop_all(c); // recorded steps may read it
        CUDA_CHECK(cudaMallocHost(&u->host, bytes));
        CUDA_CHECK(cudaMalloc(&u->dev, bytes));
        u->cap = bytes;
    }
    memcpy(u->host, src, bytes);
    u->len = bytes;
    CUDA_CHECK(cudaMemcpyAsync(u->dev, u->host, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaEventRecord(u->done, c->stream));
    return u->dev;
}

// The smallest power of two >= n: the shape class of a row count in profile keys.
long long pow2_at_least(long long n) {
    long long p = 1;
    while (p < n) p *= 2;
    return p;
}

// Starts timing an op on the stream under the key printf(fmt, ...); returns its mark, or -1 when
// not profiling.
int profile_start(cuda_ctx *c, const char *fmt, ...) {
    profile *p = c->prof;
    if (!p) return -1;
    char name[sizeof p->keys[0].name];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int k = 0;
    while (k < p->n_keys && strcmp(p->keys[k].name, name)) k++;
    if (k == p->n_keys) { // a new key, while there is room; past that the last one takes them all
        if (k >= PROFILE_KEYS - 1) k = PROFILE_KEYS - 1, snprintf(name, sizeof name, "(other shapes)");
        if (k == p->n_keys) p->n_keys++;
        snprintf(p->keys[k].name, sizeof p->keys[k].name, "%s", name);
    }
    if (p->n_marks == p->cap_marks) {
        p->cap_marks = p->cap_marks ? 2 * p->cap_marks : 256;
        p->marks = (profile_mark *)burst_realloc(p->marks, sizeof *p->marks * (size_t)p->cap_marks);
        for (int i = p->n_marks; i < p->cap_marks; i++) {
            CUDA_CHECK(cudaEventCreate(&p->marks[i].start));
            CUDA_CHECK(cudaEventCreate(&p->marks[i].stop));
        }
    }
    profile_mark *m = &p->marks[p->n_marks];
    m->key = k;
    CUDA_CHECK(cudaEventRecord(m->start, c->stream));
    return p->n_marks++;
}

void profile_stop(cuda_ctx *c, int mark) {
    if (mark >= 0) CUDA_CHECK(cudaEventRecord(c->prof->marks[mark].stop, c->stream));
}

// Adds the marks' times to their keys; the stream has been synchronized.
void profile_fold(cuda_ctx *c) {
    profile *p = c->prof;
    for (int i = 0; p && i < p->n_marks; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->marks[i].start, p->marks[i].stop));
        p->keys[p->marks[i].key].ms += ms;
        p->keys[p->marks[i].key].calls++;
    }
    if (p) p->n_marks = 0;
}

int profile_key_order(const void *a, const void *b) {
    const double x = ((const profile_key *)a)->ms, y = ((const profile_key *)b)->ms;
    return (x < y) - (x > y);
}

void profile_print_free(cuda_ctx *c) {
    profile *p = c->prof;
    if (!p) return;
    profile_fold(c);
    double total = 0;
    for (int k = 0; k < p->n_keys; k++) total += p->keys[k].ms;
    qsort(p->keys, (size_t)p->n_keys, sizeof p->keys[0], profile_key_order);
    fprintf(stderr, "profile cuda:%d: GPU time per op, %.1f ms in all\n", c->device, total);
    for (int k = 0; k < p->n_keys; k++)
        fprintf(stderr, "profile cuda:%d: %-48s %8ld calls %10.2f ms %9.1f us/call %5.1f%%\n", c->device,
                p->keys[k].name, p->keys[k].calls, p->keys[k].ms, 1e3 * p->keys[k].ms / (double)p->keys[k].calls,
                100.0 * p->keys[k].ms / (total > 0 ? total : 1));
    for (int i = 0; i < p->cap_marks; i++) {
        CUDA_CHECK(cudaEventDestroy(p->marks[i].start));
        CUDA_CHECK(cudaEventDestroy(p->marks[i].stop));
    }
    free(p->marks);
    free(p);
}

// ---- kernels ----

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32(float v) { return v; }
template <> __device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }

// dst (rows, cols) packed = src (rows, cols) with row stride src_stride, converted.
template <typename S, typename D>
__global__ void convert_kernel(D *dst, const S *src, int64_t rows, int64_t cols, int64_t src_stride) {
    const int64_t n = rows * cols;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / cols, j = t - i * cols;
        dst[t] = from_f32<D>(to_f32(src[i * src_stride + j]));
    }
}

// The same for packed fp32 -> bf16 with 4 elements a thread (n a multiple of 4, 16-byte aligned).
__global__ void round_bf16x4_kernel(__nv_bfloat162 *dst, const float4 *src, int64_t n4) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n4; t += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = src[t];
        dst[2 * t] = __floats2bfloat162_rn(v.x, v.y);
        dst[2 * t + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

// The jobs of one launch (a batch of conversions or copies: n[k] elements of src[k] to dst[k]),
// by value as kernel parameters; grid.y runs over the jobs.
constexpr int MAX_JOBS = 160;
template <typename D, typename S> struct job_table {
    D *dst[MAX_JOBS];
    const S *src[MAX_JOBS];
    int64_t n[MAX_JOBS];
};
static_assert(sizeof(job_table<char, char>) <= 4096, "kernel parameters past 4 KB need CUDA 12.1 and Volta");
using round_jobs = job_table<__nv_bfloat16, float>; // backend_convert_batch to bf16: K/V rows into the cache
using copy_jobs = job_table<char, char>;            // backend_copy's batches
// A job of a batch this large (elements or bytes) or larger goes alone: a batch launch's grid.x
// is sized by its largest job, so a prefill chunk's K/V among decode rows would start thousands
// of idle blocks for each of the others.
constexpr int64_t BATCH_JOB_MAX = 1 << 16;

__global__ void round_jobs_kernel(const __grid_constant__ round_jobs j) {
    const int k = blockIdx.y;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < j.n[k]; t += (int64_t)gridDim.x * blockDim.x)
        j.dst[k][t] = __float2bfloat16_rn(j.src[k][t]);
}

__device__ __host__ inline bool aligned16(const void *dst, const void *src, int64_t bytes) {
    return (((uintptr_t)dst | (uintptr_t)src | (uintptr_t)bytes) & 15) == 0;
}

// A copy whose addresses and size are multiples of 16 moves 16 bytes a thread, any other a byte.
__global__ void copy_jobs_kernel(const __grid_constant__ copy_jobs j) {
    const int k = blockIdx.y;
    char *dst = j.dst[k];
    const char *src = j.src[k];
    const int64_t n = j.n[k], first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                  step = (int64_t)gridDim.x * blockDim.x;
    if (aligned16(dst, src, n))
        for (int64_t t = first; t < n / 16; t += step) ((uint4 *)dst)[t] = ((const uint4 *)src)[t];
    else
        for (int64_t t = first; t < n; t += step) dst[t] = src[t];
}

// Jobs gathered into a job_table for `kernel`, launched MAX_JOBS at a time (and by flush), through
// `launcher` where given: grid.y over the jobs, grid.x sized by the most work (threads' worth) of
// one job.
template <typename D, typename S> struct job_batch {
    using kernel_fn = void (*)(const job_table<D, S>);
    kernel_fn kernel;
    cudaStream_t stream;
    const cuda_launcher *launcher;
    job_table<D, S> j;
    int count = 0;
    int64_t most = 1;
    job_batch(kernel_fn k, cudaStream_t s, const cuda_launcher *l) : kernel(k), stream(s), launcher(l) {}
    void add(D *dst, const S *src, int64_t n, int64_t work) {
        j.dst[count] = dst, j.src[count] = src, j.n[count] = n;
        most = std::max(most, work);
        if (++count == MAX_JOBS) flush();
    }
    // A copy of `bytes` (copy_jobs_kernel): its work is 16-byte moves where it allows them.
    void add_copy(D *dst, const S *src, int64_t bytes) { add(dst, src, bytes, aligned16(dst, src, bytes) ? bytes / 16 : bytes); }
    void flush() {
        if (!count) return;
        void *args[] = {&j};
        cuda_launch(launcher, (const void *)kernel, dim3(blocks_for(most, 4), (unsigned)count), dim3(THREADS), args, stream);
        count = 0, most = 1;
    }
};

// (v, i) becomes the better of itself and (v2, i2): the larger value, the lower index of equal
// ones. A total order on non-NaN values, so every reduction order gives the sequential answer.
__device__ __forceinline__ void keep_best(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

// One block a row (cols <= INT32_MAX), tu its (temperature, unit) pairs (NULL: all greedy). The
// first largest value: each thread's best over its strided columns, then the warps', then the
// block's. A row at a temperature t > 0 then draws as sampler_pick_unfiltered: each thread sums
// exp((x - max) / t) over its own contiguous slice of the columns, thread 0 adds the slices' sums
// in order and finds the slice whose buckets hold unit x total, and that slice's thread walks its
// columns. (The CPU adds column by column, which drifts further from the exact sum: for a few
// draws in a hundred the two pick other ids, each as likely a draw: model/backend.h.) The walk
// adds the slice's terms to what came before it where thread 0 added their sum, so the two ends
// differ by rounding; an r between them (~1.5e-5 of draws, by a float32 simulation) falls in the
// slice's last bucket that has a width, not in its last column, which may have none (-inf).
__global__ void __launch_bounds__(THREADS) sample_kernel(int *out, const float *x, int64_t cols, const float *tu) {
    __shared__ float s_v[THREADS / 32], s_sum[THREADS], s_max, s_r, s_before;
    __shared__ int s_i[THREADS / 32], s_slice;
    const float *row = x + (int64_t)blockIdx.x * cols;
    const float t = tu ? tu[2 * blockIdx.x] : 0.0f;
    float v = -INFINITY;
    int i = INT32_MAX; // none yet: -INFINITY values still win on their index
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) keep_best(v, i, row[j], (int)j);
    for (int off = 16; off; off >>= 1)
        keep_best(v, i, __shfl_xor_sync(0xffffffffu, v, off), __shfl_xor_sync(0xffffffffu, i, off));
    if (threadIdx.x % 32 == 0) s_v[threadIdx.x / 32] = v, s_i[threadIdx.x / 32] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < THREADS / 32; w++) keep_best(v, i, s_v[w], s_i[w]);
        out[blockIdx.x] = i == INT32_MAX ? 0 : i; // (a row of NaN); a draw below overwrites it
        s_max = v;
    }
    if (t <= 0) return; // (t is the block's: all its threads leave)
    __syncthreads();
    const float max = s_max;
    const int64_t slice = (cols + THREADS - 1) / THREADS, lo = min(cols, threadIdx.x * slice), hi = min(cols, lo + slice);
    float sum = 0.0f;
    for (int64_t j = lo; j < hi; j++) sum += expf((row[j] - max) / t);
    s_sum[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f, before = 0.0f;
        for (int k = 0; k < THREADS; k++) total += s_sum[k];
        const float r = tu[2 * blockIdx.x + 1] * total;
        int k = 0;
        while (k < THREADS - 1 && !(r < before + s_sum[k])) before += s_sum[k++];
        s_slice = k, s_r = r, s_before = before;
    }
    __syncthreads();
    if (threadIdx.x != s_slice) return;
    float acc = s_before;
    int64_t last = -1; // the last column with a bucket of some width
    for (int64_t j = lo; j < hi; j++) {
        const float e = expf((row[j] - max) / t);
        acc += e;
        if (s_r < acc) {
            out[blockIdx.x] = (int)j;
            return;
        }
        if (e > 0) last = j;
    }
    out[blockIdx.x] = (int)(last >= 0 ? last : cols - 1); // rounding left r past the walk's sum (or NaN)
}

template <typename W>
__global__ void embed_kernel(float *x, const W *table, const int *tokens, int n, int64_t dim) {
    const int64_t total = (int64_t)n * dim;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / dim, j = t - i * dim;
        x[t] = to_f32(table[(int64_t)tokens[i] * dim + j]);
    }
}

template <typename W, typename O>
__global__ void __launch_bounds__(THREADS) rmsnorm_kernel(O *out, const float *x, const W *w, int64_t dim, float eps) {
    __shared__ float partial[THREADS / 32];
    const float *xi = x + (int64_t)blockIdx.x * dim;
    O *oi = out + (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += THREADS) ss += xi[j] * xi[j];
    for (int off = 16; off; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    double total = 0; // the CPU twin sums in double; the 8 warp partials cost nothing in double
    for (int k = 0; k < THREADS / 32; k++) total += partial[k];
    const float r = (float)(1.0 / sqrt(total / (double)dim + eps));
    for (int64_t j = threadIdx.x; j < dim; j += THREADS) oi[j] = from_f32<O>(xi[j] * r * to_f32(w[j]));
}

// One thread per (token, frequency, group of ROPE_HEADS heads of q or of k): the angle is computed
// once per group, and a one-token decode step spreads over n_heads / ROPE_HEADS times more threads
// (7B on the H100, q alone: 8.4 us a call against 15 us with one thread per frequency; 62 against
// 66 us at 4096). q's groups come first, then k's, in one launch.
constexpr int ROPE_HEADS = 8;
__device__ __host__ inline int rope_groups(int heads) { return (heads + ROPE_HEADS - 1) / ROPE_HEADS; }
__global__ void rope_kernel(float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n, int head_dim,
                            rope_params p) {
    const int half = head_dim / 2, q_groups = rope_groups(n_heads), groups = q_groups + rope_groups(n_kv_heads);
    const int64_t total = (int64_t)n * half * groups;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / ((int64_t)half * groups);
        const int rest = (int)(t - i * half * groups), g = rest / half, j = rest - g * half;
        const bool in_q = g < q_groups;
        float *x = in_q ? q : k;
        const int heads = in_q ? n_heads : n_kv_heads, h0 = (in_q ? g : g - q_groups) * ROPE_HEADS;
        const double a = (double)pos[i] * rope_inv_freq(&p, j, head_dim);
        double sd, cd;
        sincos(a, &sd, &cd);
        const float c = (float)cd * p.mscale, s = (float)sd * p.mscale;
        const int h_end = min(heads, h0 + ROPE_HEADS);
        for (int h = h0; h < h_end; h++) {
            float *v = x + (i * heads + h) * head_dim;
            const float x1 = v[j], x2 = v[j + half];
            v[j] = x1 * c - x2 * s;
            v[j + half] = x2 * c + x1 * s;
        }
    }
}

// out[i] += the sum of part[k * n + i] over k < splits: split-K's partial sums, added in order.
__global__ void split_k_sum_kernel(float *out, const float *part, int64_t n, int splits) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < splits; k++) sum += part[k * n + i];
        out[i] += sum;
    }
}

// gate = silu(gate) * up, V elements a thread and step: V = 1, or one 16-byte vector (8 bf16 or 4
// floats) where gate, up and n allow. One bf16 element a thread ran at ~1.5 TB/s on an H200 (45
// ms of a 32K prefill of 7B against ~14 for rmsnorm's and rope's traffic).
template <typename T, int V> __global__ void swiglu_kernel(T *gate, const T *up, int64_t n_vec) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n_vec; t += (int64_t)gridDim.x * blockDim.x) {
        alignas(16) T g[V], u[V]; // (registers, once unrolled; aligned for the 16-byte moves)
        if constexpr (V == 1) g[0] = gate[t], u[0] = up[t];
        else *reinterpret_cast<uint4 *>(g) = reinterpret_cast<const uint4 *>(gate)[t],
             *reinterpret_cast<uint4 *>(u) = reinterpret_cast<const uint4 *>(up)[t];
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float x = to_f32(g[k]);
            g[k] = from_f32<T>(x / (1.0f + expf(-x)) * to_f32(u[k]));
        }
        if constexpr (V == 1) gate[t] = g[0];
        else reinterpret_cast<uint4 *>(gate)[t] = *reinterpret_cast<const uint4 *>(g);
    }
}

// ---- backend ops ----

void cuda_free(burst_backend *b) {
    cuda_ctx *c = ctx_of(b);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    profile_print_free(c);
    for (int i = 0; i < c->n_weights; i++) CUDA_CHECK(cudaFree(c->weights[i]));
    dev_buf *bufs[] = {&c->mm_in,     &c->mm_out,  &c->q16,        &c->k16,    &c->v16,
                       &c->decode_ws, &c->split_k_part, &c->sample_out, &c->staging};
    for (dev_buf *d : bufs) CUDA_CHECK(cudaFree(d->p));
    for (upload_buf *u : {&c->tokens, &c->pos, &c->sampling}) {
        CUDA_CHECK(cudaFreeHost(u->host));
        CUDA_CHECK(cudaFree(u->dev));
        CUDA_CHECK(cudaEventDestroy(u->done));
    }
    graph_drop_all(c);
    if (c->graph_steps) // recorded steps and refused replays cost more than plain steps: few, or graphs do not pay
        LOG_I("cuda:%d: %ld steps ran as CUDA graphs, %ld of them recorded anew (the rest replayed); %ld replays refused",
              c->device, c->graph_steps, c->graph_captures, c->graph_refused);
    free(c->retired);
    free(c->captured);
    CUDA_CHECK(cudaFree(c->blas_ws));
    CUBLAS_CHECK(cublasDestroy(c->blas));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    flash_cudnn_release(); // the calling thread's cuDNN plans (attention/flash_cudnn.h)
    free(c->weights);
    free(c);
    free(b);
}

void *cuda_alloc(burst_backend *b, size_t bytes) {
    cuda_ctx *c = ctx_of(b);
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError(); // clear the allocation error before asking
        cudaMemGetInfo(&free_b, &total_b);
        burst_abort(__FILE__, __LINE__, __func__, "cuda:%d: cannot allocate %.3f GB (%.3f GB free of %.3f GB)",
                    c->device, bytes / 1e9, free_b / 1e9, total_b / 1e9);
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream)); // zeroed, as the CPU backend's calloc
    return p;
}

size_t cuda_memory_free(burst_backend *b, int *pool) {
    *pool = ctx_of(b)->device; // (ctx_of selects it)
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

// What cuda_matmul's buffers grow to for n rows of a weight of up to cols columns or rows (the
// memory check at start): the input rounded to bf16 (bf16 mode) or widened to float32 (fp32
// mode), fp32 mode's bf16 outputs computed in float32 first, and split-K's partial sums.
size_t cuda_matmul_transient(burst_backend *b, int n, int64_t cols) { // (split-K: cols bounds the rows too)
    const cuda_ctx *c = (const cuda_ctx *)b->ctx;
    const size_t split_k = c->split_k ? (size_t)SPLIT_K * SPLIT_K_MAX_ROWS * (size_t)cols * sizeof(float) : 0;
    return split_k + (c->fp32 ? 2 * (size_t)n * (size_t)cols * sizeof(float) : (size_t)n * (size_t)cols * sizeof(__nv_bfloat16));
}

// What cuda_attention's buffers grow to (the memory check at start). The split-KV kernel's
// workspace, which decode_workspace grows to less than twice the most a step asks, while a graph
// being recorded may still hold the one before it (dev_grow): three times that at most. The flash
// path (bf16 mode, blocks of more than DECODE_CUDA_MAX_ROWS rows, head_dim 64 or 128) keeps Q
// rounded to bf16 and flash_cudnn its bf16 O, each up to max_rows rows, and K/V rounded to bf16
// unless the cache holds them so. cuDNN's handle and workspace are not known before the calls:
// CUDNN_MARGIN stands for them.
constexpr size_t CUDNN_MARGIN = 256u << 20;
size_t cuda_attention_transient(burst_backend *b, int max_rows, int max_calls, int64_t max_keys, int n_heads,
                                int n_kv_heads, int head_dim, burst_dtype kv_dtype) {
    const cuda_ctx *c = ctx_of(b); // (selects its device, whose SMs set the split-KV kernel's splits)
    size_t bytes = CUDNN_MARGIN +
                   3 * sizeof(float) * decode_cuda_workspace_bound_floats(max_rows, max_calls, n_heads, n_kv_heads, head_dim);
    if (c->fp32 || max_rows <= DECODE_CUDA_MAX_ROWS || (head_dim != 64 && head_dim != 128)) return bytes;
    bytes += 2 * (size_t)max_rows * n_heads * head_dim * sizeof(__nv_bfloat16);
    if (kv_dtype != DTYPE_BF16) bytes += 2 * (size_t)max_keys * n_kv_heads * head_dim * sizeof(__nv_bfloat16);
    return bytes;
}

void cuda_release(burst_backend *b, void *p) {
    cuda_ctx *c = ctx_of(b);
    CUDA_CHECK(cudaStreamSynchronize(c->stream)); // queued work may still use it
    CUDA_CHECK(cudaFree(p));
}

void cuda_to_host(burst_backend *b, float *dst, const float *src, int64_t n) {
    cuda_ctx *c = ctx_of(b);
    const int t = profile_start(c, "to_host n<=%lld", pow2_at_least(n));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    profile_stop(c, t);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    profile_fold(c);
}

// Batched decode (on unless BURST_BATCHED_DECODE=0): a batch of copies in one launch per
// MAX_JOBS (the decode merge's few-hundred-byte rows of every sequence), large ones apart; else,
// and for a batch of one, cudaMemcpyAsync each.
void cuda_copy(burst_backend *b, const copy_job *jobs, int n) {
    cuda_ctx *c = ctx_of(b);
    for (int i = 0; i < n; i++) graph_note(c, "copy", jobs[i].dst, jobs[i].src, jobs[i].bytes);
    if (replaying(c)) return;
    const int batched = c->batched && n > 1;
    const int t = batched ? profile_start(c, "copy batch jobs<=%lld", pow2_at_least(n)) : -1;
    job_batch<char, char> batch(copy_jobs_kernel, c->stream, nullptr);
    for (int i = 0; i < n; i++) {
        const copy_job *job = &jobs[i];
        const int64_t bytes = (int64_t)job->bytes;
        if (!batched || bytes >= BATCH_JOB_MAX)
            CUDA_CHECK(cudaMemcpyAsync(job->dst, job->src, job->bytes, cudaMemcpyDeviceToDevice, c->stream));
        else
            batch.add_copy((char *)job->dst, (const char *)job->src, bytes);
    }
    batch.flush();
    if (batched) profile_stop(c, t);
}

// Converts n elements of dtype `from` (on the device) into dst of another dtype `to`: F16 or BF16
// into F32, F16 or F32 into BF16. Weights as they upload, and the bf16 matmul inputs fp32 mode widens.
void convert_to(cuda_ctx *c, void *dst, burst_dtype to, const void *src, burst_dtype from, int64_t n) {
    const unsigned g = blocks_for(n, 4);
#define LAUNCH(S, D) convert_kernel<S, D><<<g, THREADS, 0, c->stream>>>((D *)dst, (const S *)src, 1, n, n)
    if (to == DTYPE_F32) {
        if (from == DTYPE_BF16) LAUNCH(__nv_bfloat16, float);
        else LAUNCH(__half, float);
    } else {
        if (from == DTYPE_F32) LAUNCH(float, __nv_bfloat16);
        else LAUNCH(__half, __nv_bfloat16);
    }
#undef LAUNCH
    CUDA_CHECK(cudaGetLastError());
}

// Weights of a group (cuda_weight_group) start at multiples of this many bytes after the one
// before: aligned for cuBLAS, and equally spaced where their shapes are one (cuda_matmul_group).
constexpr size_t WEIGHT_ALIGN = 256;

size_t weight_bytes(const cuda_ctx *c, const weights_tensor *t) {
    return (size_t)t->numel * (c->fp32 ? sizeof(float) : sizeof(__nv_bfloat16));
}

size_t weight_span(size_t bytes) { return (bytes + WEIGHT_ALIGN - 1) / WEIGHT_ALIGN * WEIGHT_ALIGN; }

// Bytes from a weight to the next in its group (cuda_weight_group's layout).
size_t weight_stride(const burst_weight *W) { return weight_span((size_t)(W->rows * W->cols) * dtype_size(W->dtype)); }

// t, in the backend's weight dtype, at dst on the device.
burst_weight upload_weight(cuda_ctx *c, const weights_tensor *t, void *dst) {
    const burst_dtype to = c->fp32 ? DTYPE_F32 : DTYPE_BF16;
    const size_t in_size = dtype_size(t->dtype), out_size = dtype_size(to);
    if (t->dtype == to) {
        CUDA_CHECK(cudaMemcpyAsync(dst, t->data, t->nbytes, cudaMemcpyHostToDevice, c->stream));
    } else { // stage chunks of the file dtype, convert on the device
        const int64_t chunk = (int64_t)(UPLOAD_CHUNK / in_size);
        void *stage = dev_grow(c, &c->staging, UPLOAD_CHUNK);
        for (int64_t first = 0; first < t->numel; first += chunk) {
            const int64_t n = t->numel - first < chunk ? t->numel - first : chunk;
            CUDA_CHECK(cudaMemcpyAsync(stage, (const char *)t->data + first * in_size, (size_t)n * in_size,
                                       cudaMemcpyHostToDevice, c->stream));
            convert_to(c, (char *)dst + first * out_size, to, stage, t->dtype, n);
            CUDA_CHECK(cudaStreamSynchronize(c->stream)); // the stage is reused next chunk
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(c->stream)); // pageable source: done before returning
    return (burst_weight){.dtype = to, .data = dst, .rows = t->ndim == 2 ? t->shape[0] : 1, .cols = t->shape[t->ndim - 1]};
}

// n weights in one allocation, each at weight_span of the one before.
burst_status cuda_weight_group(burst_backend *b, const weights_tensor *const *t, int n, burst_weight *out,
                               burst_error *err) {
    cuda_ctx *c = ctx_of(b);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += weight_span(weight_bytes(c, t[i]));
    void *dst = NULL;
    if (cudaMalloc(&dst, total) != cudaSuccess) {
        cudaGetLastError();
        return BURST_FAIL(err, BURST_ERR_NOMEM, "cuda:%d: %s%s: cannot allocate %.3f GB of device memory", c->device,
                          t[0]->name, n > 1 ? " and the weights grouped with it" : "", (double)total / 1e9);
    }
    if (c->n_weights == c->cap_weights) {
        c->cap_weights = c->cap_weights ? 2 * c->cap_weights : 64;
        c->weights = (void **)burst_realloc(c->weights, (size_t)c->cap_weights * sizeof(void *));
    }
    c->weights[c->n_weights++] = dst;
    for (int i = 0; i < n; i++) {
        out[i] = upload_weight(c, t[i], dst);
        dst = (char *)dst + weight_stride(&out[i]);
    }
    return BURST_OK;
}

burst_status cuda_weight(burst_backend *b, const weights_tensor *t, burst_weight *out, burst_error *err) {
    return cuda_weight_group(b, &t, 1, out, err);
}

void cuda_embed(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return;
    const int *d_tokens = (const int *)upload(c, &c->tokens, tokens, (size_t)n * sizeof(int));
    graph_note(c, "embed", x, table->data, table->dtype, table->cols, d_tokens, n);
    if (replaying(c)) return;
    const int t = profile_start(c, "embed n<=%lld", pow2_at_least(n));
    const unsigned g = blocks_for((int64_t)n * table->cols, 1);
    if (table->dtype == DTYPE_F32)
        embed_kernel<<<g, THREADS, 0, c->stream>>>(x, (const float *)table->data, d_tokens, n, table->cols);
    else
        embed_kernel<<<g, THREADS, 0, c->stream>>>(x, (const __nv_bfloat16 *)table->data, d_tokens, n, table->cols);
    CUDA_CHECK(cudaGetLastError());
    profile_stop(c, t);
}

template <typename O>
void launch_rmsnorm(cuda_ctx *c, O *out, const float *x, const burst_weight *w, int n, float eps) {
    if (w->dtype == DTYPE_F32)
        rmsnorm_kernel<<<n, THREADS, 0, c->stream>>>(out, x, (const float *)w->data, w->cols, eps);
    else
        rmsnorm_kernel<<<n, THREADS, 0, c->stream>>>(out, x, (const __nv_bfloat16 *)w->data, w->cols, eps);
    CUDA_CHECK(cudaGetLastError());
}

void cuda_rmsnorm(burst_backend *b, void *out, burst_dtype out_dtype, const float *x, const burst_weight *w, int n,
                  float eps) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return;
    graph_note(c, "rmsnorm", out, out_dtype, x, w->data, w->dtype, w->cols, n, eps);
    if (replaying(c)) return;
    const int t = profile_start(c, "rmsnorm to %s n<=%lld", dtype_name(out_dtype), pow2_at_least(n));
    if (out_dtype == DTYPE_F32) launch_rmsnorm(c, (float *)out, x, w, n, eps);
    else launch_rmsnorm(c, (__nv_bfloat16 *)out, x, w, n, eps);
    profile_stop(c, t);
}

// dst (rows, cols) packed bf16 = src rows (row stride src_stride floats), rounded to nearest even.
void round_bf16(cuda_ctx *c, __nv_bfloat16 *dst, const float *src, int64_t rows, int64_t cols, int64_t src_stride) {
    const int64_t n = rows * cols;
    if (n == 0) return;
    if (src_stride == cols && n % 4 == 0 && ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 3) == 0)
        round_bf16x4_kernel<<<blocks_for(n / 4, 4), THREADS, 0, c->stream>>>((__nv_bfloat162 *)dst, (const float4 *)src, n / 4);
    else
        convert_kernel<float, __nv_bfloat16><<<blocks_for(n, 4), THREADS, 0, c->stream>>>(dst, src, rows, cols, src_stride);
    CUDA_CHECK(cudaGetLastError());
}

// dst (rows, cols) packed bf16 = src rows of dtype src_dtype (F32 or BF16, row stride src_stride).
void pack_bf16(cuda_ctx *c, __nv_bfloat16 *dst, const void *src, burst_dtype src_dtype, int64_t rows, int64_t cols,
               int64_t src_stride) {
    if (src_dtype == DTYPE_F32) return round_bf16(c, dst, (const float *)src, rows, cols, src_stride);
    if (rows * cols == 0) return;
    convert_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks_for(rows * cols, 4), THREADS, 0, c->stream>>>(
        dst, (const __nv_bfloat16 *)src, rows, cols, src_stride);
    CUDA_CHECK(cudaGetLastError());
}

void cuda_convert(burst_backend *b, void *dst, burst_dtype to, const float *src, int64_t n) {
    cuda_ctx *c = ctx_of(b);
    graph_note(c, "convert", dst, to, src, n);
    if (replaying(c)) return;
    const int t = profile_start(c, "convert to %s n<=%lld", dtype_name(to), pow2_at_least(n));
    if (to == DTYPE_F32) CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    else round_bf16(c, (__nv_bfloat16 *)dst, src, 1, n, n);
    profile_stop(c, t);
}

// Batched decode (on unless BURST_BATCHED_DECODE=0): the bf16 jobs in one launch per MAX_JOBS,
// large ones apart; else job by job. In a graph step (the K/V rows of decode, whose place in the
// cache moves every step) all of them in patched launches, an fp32 cache's as copies.
void cuda_convert_batch(burst_backend *b, burst_dtype to, const convert_job *jobs, int n) {
    cuda_ctx *c = ctx_of(b);
    const bool graph = c->mode != GRAPH_OFF;
    if (!graph && (!c->batched || to != DTYPE_BF16)) { // (an fp32 cache's rows are plain copies)
        for (int i = 0; i < n; i++) cuda_convert(b, jobs[i].dst, to, jobs[i].src, jobs[i].n);
        return;
    }
    const int t = profile_start(c, "convert batch to %s jobs<=%lld", dtype_name(to), pow2_at_least(n));
    if (to == DTYPE_F32) {
        job_batch<char, char> batch(copy_jobs_kernel, c->stream, &c->launcher);
        for (int i = 0; i < n; i++) {
            const int64_t bytes = jobs[i].n * (int64_t)sizeof(float);
            batch.add_copy((char *)jobs[i].dst, (const char *)jobs[i].src, bytes);
        }
        batch.flush();
    } else {
        job_batch<__nv_bfloat16, float> batch(round_jobs_kernel, c->stream, &c->launcher);
        for (int i = 0; i < n; i++) {
            const convert_job *job = &jobs[i];
            if (!graph && job->n >= BATCH_JOB_MAX) round_bf16(c, (__nv_bfloat16 *)job->dst, job->src, 1, job->n, job->n);
            else batch.add((__nv_bfloat16 *)job->dst, job->src, job->n, job->n);
        }
        batch.flush();
    }
    profile_stop(c, t);
}

// cuBLAS's name for a bf16 or float32 operand.
cudaDataType blas_type(burst_dtype dt) { return dt == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// x as the GEMM on W reads it: in W's dtype (bf16 mode rounds float32 rows to bf16, fp32 mode
// widens bf16 ones), in mm_in where it converts.
const void *matmul_input(cuda_ctx *c, const void *x, burst_dtype x_dtype, const burst_weight *W, int n) {
    if (x_dtype == W->dtype) return x;
    const int64_t cols = W->cols;
    void *conv = dev_grow(c, &c->mm_in, (size_t)n * cols * dtype_size(W->dtype));
    const int t = profile_start(c, "matmul input to %s %lld n<=%lld", dtype_name(W->dtype), (long long)cols,
                                pow2_at_least(n));
    if (W->dtype == DTYPE_BF16) round_bf16(c, (__nv_bfloat16 *)conv, (const float *)x, n, cols, cols);
    else convert_to(c, conv, DTYPE_F32, x, DTYPE_BF16, n * cols);
    profile_stop(c, t);
    return conv;
}

// out += x W^T for a few rows, the columns split SPLIT_K ways (see SPLIT_K): one GEMM of one row
// covers a 4096x4096 weight with few thread blocks, read at ~1.7 TB/s on an H200 (~3.1 for
// 11008x4096); SPLIT_K slices of the columns give it SPLIT_K times as many. xin in W's dtype.
void split_k_matmul(cuda_ctx *c, float *out, const void *xin, const burst_weight *W, int n) {
    const int64_t rows = W->rows, cols = W->cols, slice = cols / SPLIT_K, part_n = (int64_t)n * rows;
    // (sized for SPLIT_K_MAX_ROWS rows at once: a step of more rows would otherwise regrow it, and
    // drop the recorded graphs)
    float *part = (float *)dev_grow(c, &c->split_k_part, (size_t)SPLIT_K * SPLIT_K_MAX_ROWS * rows * sizeof(float));
    const cudaDataType ab = blas_type(W->dtype);
    const float one = 1.0f, zero = 0.0f;
    const int t = profile_start(c, "matmul %lldx%lld += split-k n<=%lld", (long long)rows, (long long)cols, pow2_at_least(n));
    // Slice k: W's columns [k slice, (k + 1) slice) (column-major A: rows of it, lda cols) by x's.
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)slice, &one, W->data, ab,
                                            (int)cols, slice, xin, ab, (int)cols, slice, &zero, part, CUDA_R_32F,
                                            (int)rows, part_n, SPLIT_K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    split_k_sum_kernel<<<blocks_for(part_n, 4), THREADS, 0, c->stream>>>(out, part, part_n, SPLIT_K);
    CUDA_CHECK(cudaGetLastError());
    profile_stop(c, t);
}

// out = x W^T, or out += x W^T, by cuBLAS with the weights' dtype for both operands
// (matmul_input). cuBLAS writes bf16 or float32 outputs of bf16 GEMMs and adds to float32 ones
// (beta 1); fp32 mode's bf16 outputs, which it has no GEMM for, go through a float32 copy. (A
// GEMV kernel of our own for decode's rows, one warp a weight row with 16-byte loads, was slower
// on an H200: 7.5 against 6.3 ms a 7B step of one sequence, 22 against 7.5 of eight; removed.)
void cuda_matmul(burst_backend *b, void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                 const burst_weight *W, int n) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return;
    graph_note(c, "matmul", out, out_dtype, accumulate, x, x_dtype, W->data, W->dtype, W->rows, W->cols, n);
    if (replaying(c)) return;
    const int64_t rows = W->rows, cols = W->cols;
    const void *xin = matmul_input(c, x, x_dtype, W, n);
    if (accumulate && c->split_k && n <= SPLIT_K_MAX_ROWS && cols >= SPLIT_K_MIN_COLS && cols % (8 * SPLIT_K) == 0)
        return split_k_matmul(c, (float *)out, xin, W, n);
    const cudaDataType ab = blas_type(W->dtype);
    void *dst = out;
    if (out_dtype == DTYPE_BF16 && W->dtype == DTYPE_F32) dst = dev_grow(c, &c->mm_out, (size_t)n * rows * sizeof(float));
    const cudaDataType ct = dst == out ? blas_type(out_dtype) : CUDA_R_32F;
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int t = profile_start(c, "matmul %lldx%lld%s n<=%lld", (long long)rows, (long long)cols,
                                accumulate ? " +=" : out_dtype == DTYPE_BF16 ? " to bf16" : "", pow2_at_least(n));
    CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one, W->data, ab, (int)cols,
                              xin, ab, (int)cols, &beta, dst, ct, (int)rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dst != out) round_bf16(c, (__nv_bfloat16 *)out, (const float *)dst, n, rows, rows);
    profile_stop(c, t);
}

// How many weights from W[0] on one strided-batched GEMM can take (1: W[0] alone): neighbours of
// one shape and dtype at weight_span of each other (cuda_weight_group lays a group out so), whose
// outputs are equally spaced without overlap. 1 with BURST_GROUPED_GEMM=0, and where fp32 mode
// wants bf16 outputs (through a float32 copy: cuda_matmul).
int batch_run(const cuda_ctx *c, void *const *out, burst_dtype out_dtype, const burst_weight *const *W, int count,
              int n) {
    const burst_weight *W0 = W[0];
    if (!c->grouped_gemm || count < 2 || (out_dtype == DTYPE_BF16 && W0->dtype == DTYPE_F32)) return 1;
    const size_t out_es = dtype_size(out_dtype), w_span = weight_stride(W0);
    // (as integers: pointers into different allocations may not be subtracted)
    const int64_t out_span = (int64_t)((uintptr_t)out[1] - (uintptr_t)out[0]);
    if (out_span < (int64_t)((size_t)n * W0->rows * out_es) || out_span % (int64_t)out_es) return 1;
    int len = 1;
    while (len < count && W[len]->dtype == W0->dtype && W[len]->rows == W0->rows && W[len]->cols == W0->cols &&
           (uintptr_t)W[len]->data == (uintptr_t)W0->data + len * w_span &&
           (uintptr_t)out[len] == (uintptr_t)out[0] + len * out_span)
        len++;
    return len;
}

// out[i] = x W[i]^T for i < count as one strided-batched GEMM (x shared: stride 0); batch_run
// said it fits.
void batched_gemm(cuda_ctx *c, void *const *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype,
                  const burst_weight *const *W, int count, int n) {
    const burst_weight *W0 = W[0];
    const int64_t rows = W0->rows, cols = W0->cols;
    const size_t es = dtype_size(W0->dtype), out_es = dtype_size(out_dtype), w_span = weight_stride(W0);
    const int64_t out_span = (int64_t)((uintptr_t)out[1] - (uintptr_t)out[0]);
    graph_note(c, "matmul group", out[0], out_span, count, out_dtype, x, x_dtype, W0->data, W0->dtype, rows, cols, n);
    if (replaying(c)) return;
    const void *xin = matmul_input(c, x, x_dtype, W0, n);
    const cudaDataType ab = blas_type(W0->dtype), ct = blas_type(out_dtype);
    const float one = 1.0f, zero = 0.0f;
    const int t = profile_start(c, "matmul %dx %lldx%lld%s n<=%lld", count, (long long)rows, (long long)cols,
                                out_dtype == DTYPE_BF16 ? " to bf16" : "", pow2_at_least(n));
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one, W0->data, ab,
                                            (int)cols, (long long)(w_span / es), xin, ab, (int)cols, 0, &zero, out[0], ct,
                                            (int)rows, (long long)(out_span / (int64_t)out_es), count,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    profile_stop(c, t);
}

// backend_matmul_group: each run of neighbours that fit (batch_run) as one batched GEMM, the
// others alone; 0 (nothing run) where no two fit. One-row GEMMs are where it pays: cuBLAS read a
// 4096x4096 weight at ~1.7 TB/s against ~3.1 for an 11008x4096 one (H200). Grouped-query models
// batch K and V (Q has another shape).
int cuda_matmul_group(burst_backend *b, void *const *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype,
                      const burst_weight *const *W, int count, int n) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return 0; // (the wrapper's matmuls do nothing)
    int gemms = 0, batched = 0;
    for (int i = 0, len; i < count; i += len, gemms++) batched |= (len = batch_run(c, out + i, out_dtype, W + i, count - i, n)) > 1;
    if (!batched) return 0;
    for (int i = 0, len; i < count; i += len)
        if ((len = batch_run(c, out + i, out_dtype, W + i, count - i, n)) > 1) batched_gemm(c, out + i, out_dtype, x, x_dtype, W + i, len, n);
        else cuda_matmul(b, out[i], out_dtype, 0, x, x_dtype, W[i], n);
    return gemms;
}

void cuda_rope(burst_backend *b, float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n,
               int head_dim, const rope_params *p) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return;
    const int64_t *d_pos = (const int64_t *)upload(c, &c->pos, pos, (size_t)n * sizeof(int64_t));
    graph_note(c, "rope", q, n_heads, k, n_kv_heads, d_pos, n, head_dim, p->theta, p->factor, p->ramp_lo, p->ramp_hi,
               p->mscale);
    if (replaying(c)) return;
    const int t = profile_start(c, "rope n<=%lld", pow2_at_least(n));
    const int64_t threads = (int64_t)n * (head_dim / 2) * (rope_groups(n_heads) + rope_groups(n_kv_heads));
    rope_kernel<<<blocks_for(threads, 1), THREADS, 0, c->stream>>>(q, n_heads, k, n_kv_heads, d_pos, n, head_dim, *p);
    CUDA_CHECK(cudaGetLastError());
    profile_stop(c, t);
}

template <typename T> void launch_swiglu(cuda_ctx *c, T *gate, const T *up, int64_t n) {
    constexpr int V = 16 / sizeof(T);
    if (n % V == 0 && ((uintptr_t)gate | (uintptr_t)up) % 16 == 0)
        swiglu_kernel<T, V><<<blocks_for(n / V, 1), THREADS, 0, c->stream>>>(gate, up, n / V);
    else
        swiglu_kernel<T, 1><<<blocks_for(n, 4), THREADS, 0, c->stream>>>(gate, up, n);
    CUDA_CHECK(cudaGetLastError());
}

void cuda_swiglu(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n) {
    cuda_ctx *c = ctx_of(b);
    if (n == 0) return;
    graph_note(c, "swiglu", gate, up, dtype, n);
    if (replaying(c)) return;
    const int t = profile_start(c, "swiglu %s n<=%lld", dtype_name(dtype), pow2_at_least(n));
    if (dtype == DTYPE_F32) launch_swiglu(c, (float *)gate, (const float *)up, n);
    else launch_swiglu(c, (__nv_bfloat16 *)gate, (const __nv_bfloat16 *)up, n);
    profile_stop(c, t);
}

// bf16 mode, blocks of many rows: bf16 Q/K/V with 16-byte aligned rows for the tensor cores.
// The flash kernel writes O two floats at a time: it needs an even o_stride, 8-byte aligned o.
// Else the split-KV kernel (decode_cuda).
bool takes_flash(const cuda_ctx *c, const flash_args *a) {
    return !c->fp32 && a->nq > DECODE_CUDA_MAX_ROWS && (a->head_dim == 64 || a->head_dim == 128) &&
           a->o_stride % 2 == 0 && (uintptr_t)a->o % 8 == 0;
}

// The split-KV kernel's workspace of `floats`; NULL where a replayed step would need it larger
// (the step is then not the recorded one, whose graph points at this buffer). It at least
// doubles when it grows, so that a sequence's growing key splits record few steps anew.
float *decode_workspace(cuda_ctx *c, size_t floats) {
    const size_t bytes = floats * sizeof(float);
    if (bytes <= c->decode_ws.cap) return (float *)c->decode_ws.p;
    if (replaying(c)) {
        c->must_record = true;
        return NULL;
    }
    return (float *)dev_grow(c, &c->decode_ws, std::max(bytes, 2 * c->decode_ws.cap));
}

void cuda_attention(burst_backend *b, const flash_args *a) {
    cuda_ctx *c = ctx_of(b);
    if (a->nq == 0) return;
    const int d = a->head_dim;
    burst_error err;
    if (takes_flash(c, a)) {
        BURST_ASSERT(c->mode == GRAPH_OFF); // (cuda_graph_begin: no graph with more than DECODE_CUDA_MAX_ROWS rows a sequence)
        // Q is rounded into a packed copy, and so are K/V unless they are bf16 rows aligned
        // already: a bf16 KV cache (d = 64 or 128: 128-byte rows) is read in place.
        const int64_t qw = (int64_t)a->n_heads * d, kw = (int64_t)a->n_kv_heads * d;
        uint16_t *q = (uint16_t *)dev_grow(c, &c->q16, (size_t)a->nq * qw * 2);
        int t = profile_start(c, "attention inputs to bf16 nq<=%lld", pow2_at_least(a->nq));
        round_bf16(c, (__nv_bfloat16 *)q, a->q, a->nq, qw, a->q_stride);
        const uint16_t *k = (const uint16_t *)a->k, *v = (const uint16_t *)a->v;
        int64_t kv_stride = a->kv_stride;
        if (a->kv_dtype != DTYPE_BF16 || kv_stride % 8 || ((uintptr_t)k | (uintptr_t)v) % 16) {
            uint16_t *k16 = (uint16_t *)dev_grow(c, &c->k16, (size_t)(a->nk ? a->nk : 1) * kw * 2);
            uint16_t *v16 = (uint16_t *)dev_grow(c, &c->v16, (size_t)(a->nk ? a->nk : 1) * kw * 2);
            pack_bf16(c, (__nv_bfloat16 *)k16, a->k, a->kv_dtype, a->nk, kw, a->kv_stride);
            pack_bf16(c, (__nv_bfloat16 *)v16, a->v, a->kv_dtype, a->nk, kw, a->kv_stride);
            k = k16, v = v16, kv_stride = kw;
        }
        profile_stop(c, t);
        flash_cuda_args f = {.q = q, .k = k, .v = v, .o = a->o, .lse = a->lse, .q_stride = qw,
                             .kv_stride = kv_stride, .o_stride = a->o_stride, .nq = a->nq, .nk = a->nk,
                             .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .head_dim = d,
                             .q_pos0 = a->q_pos0, .k_pos0 = a->k_pos0, .causal = a->causal, .scale = a->scale};
        t = profile_start(c, "attention cudnn or flash nq<=%lld", pow2_at_least(a->nq));
        // cuDNN where its plan exists or pays for itself (attention/flash_cudnn.h), else our kernel.
        if (!(c->cudnn_min_rows && a->nq >= c->cudnn_min_rows && (c->cudnn_always || flash_cudnn_worth(&f)) &&
              flash_cudnn(&f, c->stream, &err) == BURST_OK) &&
            flash_cuda(&f, c->stream, &err))
            burst_abort(__FILE__, __LINE__, __func__, "%s", err.msg);
        profile_stop(c, t);
        return;
    }
    // Decode, fp32 mode and the shapes flash_cuda does not take: the split-KV kernel on the K/V
    // (fp32 or bf16) in place, any nq (attention/decode_cuda.h; past DECODE_CUDA_MAX_ROWS rows it re-reads K/V
    // through L2 on CUDA cores, which is what fp32 mode asks for: exact fp32 attention).
    const size_t ws = decode_cuda_workspace_floats(a);
    float *work = decode_workspace(c, ws);
    if (!work && ws) return;
    const int t = profile_start(c, "attention split-kv nq<=%lld", pow2_at_least(a->nq));
    if (decode_cuda(a, work, ws, &c->launcher, c->stream, &err)) burst_abort(__FILE__, __LINE__, __func__, "%s", err.msg);
    profile_stop(c, t);
}

// Batched decode (on unless BURST_BATCHED_DECODE=0): the calls for the split-KV kernel go to it
// together (a few launches for a step's decoding sequences), the rest one by one; else all one
// by one.
void cuda_attention_batch(burst_backend *b, const flash_args *calls, int n) {
    cuda_ctx *c = ctx_of(b);
    if (!c->batched) {
        for (int i = 0; i < n; i++) cuda_attention(b, &calls[i]);
        return;
    }
    flash_args *split_kv = (flash_args *)burst_malloc(sizeof *split_kv * (size_t)(n + 1));
    int n_split_kv = 0;
    for (int i = 0; i < n; i++) {
        if (takes_flash(c, &calls[i])) cuda_attention(b, &calls[i]);
        else split_kv[n_split_kv++] = calls[i];
    }
    const size_t ws = decode_cuda_batch_workspace_floats(split_kv, n_split_kv);
    float *work = decode_workspace(c, ws);
    if (work || !ws) {
        const int t = profile_start(c, "attention split-kv batch calls<=%lld", pow2_at_least(n_split_kv));
        burst_error err;
        if (decode_cuda_batch(split_kv, n_split_kv, work, ws, &c->launcher, c->stream, &err))
            burst_abort(__FILE__, __LINE__, __func__, "%s", err.msg);
        profile_stop(c, t);
    }
    free(split_kv);
}

void cuda_sample(burst_backend *b, int *out, const float *x, int rows, int64_t cols, const float *temperature,
                 const float *unit) {
    cuda_ctx *c = ctx_of(b);
    if (rows == 0) return;
    int *d = (int *)dev_grow(c, &c->sample_out, sizeof(int) * (size_t)rows);
    const float *d_tu = nullptr; // (temperature, unit) a row
    if (temperature) {
        float *tu = (float *)burst_malloc(2 * sizeof(float) * (size_t)rows);
        for (int r = 0; r < rows; r++) tu[2 * r] = temperature[r], tu[2 * r + 1] = unit[r];
        d_tu = (const float *)upload(c, &c->sampling, tu, 2 * sizeof(float) * (size_t)rows);
        free(tu);
    }
    const int t = profile_start(c, "sample n<=%lld", pow2_at_least(rows));
    sample_kernel<<<(unsigned)rows, THREADS, 0, c->stream>>>(d, x, cols, d_tu);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(out, d, sizeof(int) * (size_t)rows, cudaMemcpyDeviceToHost, c->stream));
    profile_stop(c, t);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    profile_fold(c);
}

void cuda_merge(burst_backend *b, const online_softmax_args *calls, int n) {
    cuda_ctx *c = ctx_of(b);
    BURST_ASSERT(c->mode == GRAPH_OFF); // (G ranks: no graph steps)
    long long most = 0;
    for (int i = 0; i < n; i++) most = std::max(most, (long long)calls[i].n);
    const int t = profile_start(c, "merge calls<=%lld n<=%lld", pow2_at_least(n), pow2_at_least(most));
    online_softmax_merge_cuda(calls, n, c->stream);
    profile_stop(c, t);
}

// BURST_CUDA_GRAPHS=1: a step of up to GRAPH_MAX_ROWS rows, up to DECODE_CUDA_MAX_ROWS of them a
// sequence's (decode: the attention is the split-KV kernel, never cuDNN's, whose buffers move),
// runs as a CUDA graph, so that its kernels (7B: ~14 a layer, ~450 a step) start back to back on
// the GPU instead of one launch at a time from the host. A step is recorded once (captured) and
// replayed after: its ops note in a key everything their fixed launches depend on and skip them,
// and the launches that change every step (positions, tokens, the K/V rows' place in the cache,
// the attention's key counts and splits: graph_launch) are written into the recorded nodes
// instead. Where the key, or the patched launches, differ from the slot's (another shape, a
// sequence more, a split more), cuda_graph_end asks for the step again: replayed into the slot of
// its key if one exists, else recorded into a new slot (GRAPH_SLOTS kept, least recently run
// replaced). The first step of each row count runs plainly: kernels load, cuBLAS makes its
// choices, buffers grow. Not under BURST_PROFILE (its events would be captured).
void cuda_graph_begin(burst_backend *b, int rows, int seq_rows) {
    cuda_ctx *c = ctx_of(b);
    graph_mode mode = c->retry_mode;
    graph_slot *slot = c->retry_slot;
    c->retry_mode = GRAPH_OFF;
    if (mode == GRAPH_OFF) {
        if (!c->graphs || c->prof || rows < 1 || rows > GRAPH_MAX_ROWS || seq_rows > DECODE_CUDA_MAX_ROWS) return;
        if (!c->graph_rows_seen[rows]) {
            c->graph_rows_seen[rows] = 1;
            return;
        }
        slot = NULL; // the step of these rows run last
        for (graph_slot &g : c->graph_slots)
            if (g.exec && g.rows == rows && (!slot || g.last_step > slot->last_step)) slot = &g;
        mode = slot ? GRAPH_REPLAY : GRAPH_CAPTURE;
    }
    // The step's uploads rewrite the pinned buffers: no copy from them may be in flight. Each
    // step compares its uploads within itself, so that every step makes the same launches.
    for (upload_buf *u : {&c->tokens, &c->pos}) {
        CUDA_CHECK(cudaEventSynchronize(u->done));
        u->len = 0;
    }
    c->mode = mode;
    c->replaying = slot;
    c->graph_rows = rows;
    c->key = GRAPH_KEY_SEED;
    c->n_patched = 0;
    c->mismatch = c->must_record = false;
    if (mode == GRAPH_CAPTURE) CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
}

int cuda_graph_end(burst_backend *b) {
    cuda_ctx *c = ctx_of(b);
    const graph_mode mode = c->mode;
    const bool retried = c->replaying && c->replaying == c->retry_slot;
    c->mode = GRAPH_OFF;
    c->retry_slot = NULL;
    if (mode == GRAPH_OFF) return 1;
    if (mode == GRAPH_REPLAY) {
        graph_slot *g = c->replaying;
        if (!c->mismatch && !c->must_record && c->n_patched == g->n_patched && c->key == g->key) {
            CUDA_CHECK(cudaGraphLaunch(g->exec, c->stream));
            g->last_step = ++c->graph_steps;
            return 1;
        }
        // Not that slot's step (its graph is patched in part, which does no harm: a replay patches
        // every node it names): once more into the slot of this key, else recorded.
        c->graph_refused++;
        c->retry_mode = GRAPH_CAPTURE;
        for (graph_slot &s : c->graph_slots)
            if (!retried && !c->must_record && &s != g && s.exec && s.rows == c->graph_rows && s.key == c->key)
                c->retry_mode = GRAPH_REPLAY, c->retry_slot = &s;
        return 0;
    }
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamEndCapture(c->stream, &graph));
    graph_slot *g = &c->graph_slots[0]; // the slot of this key, else an empty one, else the least recently run
    for (graph_slot &s : c->graph_slots) {
        if (s.exec && s.rows == c->graph_rows && s.key == c->key) {
            g = &s;
            break;
        }
        if (!s.exec ? g->exec != NULL : g->exec && s.last_step < g->last_step) g = &s;
    }
    graph_slot_clear(c, g);
    CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
    g->graph = graph;
    g->patched = (cudaGraphNode_t *)burst_malloc(sizeof *g->patched * (size_t)(c->n_patched + 1));
    if (c->n_patched) memcpy(g->patched, c->captured, sizeof *g->patched * (size_t)c->n_patched);
    g->n_patched = c->n_patched;
    g->key = c->key;
    g->rows = c->graph_rows;
    c->graph_captures++;
    CUDA_CHECK(cudaGraphLaunch(g->exec, c->stream));
    g->last_step = ++c->graph_steps;
    if (c->n_retired) { // buffers the capture replaced, which its own earlier nodes and other graphs used:
        CUDA_CHECK(cudaStreamSynchronize(c->stream)); // freed after this graph has run, and no graph kept
        for (int i = 0; i < c->n_retired; i++) CUDA_CHECK(cudaFree(c->retired[i]));
        c->n_retired = 0;
        graph_drop_all(c);
    }
    return 1;
}

void cuda_sync(burst_backend *b) {
    cuda_ctx *c = ctx_of(b);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    profile_fold(c);
}

// comm's copy between ranks' device buffers (same or different GPUs, found by unified
// addressing), on the calling thread's own stream so that ranks' transfers run side by side.
// Called from comm's threads, whose current device is whatever it was: the copy runs on the
// destination's device (a GPU to GPU copy over the link where backend_cuda_new enabled peer access).
void cuda_transfer(void *dst, const void *src, size_t bytes) {
    cudaPointerAttributes at;
    CUDA_CHECK(cudaPointerGetAttributes(&at, dst));
    if (at.type == cudaMemoryTypeDevice) CUDA_CHECK(cudaSetDevice(at.device));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

const backend_ops cuda_ops = {
    .name = "cuda",
    .act_dtype = DTYPE_BF16,
    .free = cuda_free,
    .alloc = cuda_alloc,
    .memory_free = cuda_memory_free,
    .release = cuda_release,
    .to_host = cuda_to_host,
    .copy = cuda_copy,
    .convert = cuda_convert,
    .weight = cuda_weight,
    .weight_group = cuda_weight_group,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .matmul = cuda_matmul,
    .matmul_group = cuda_matmul_group,
    .matmul_transient = cuda_matmul_transient,
    .attention_transient = cuda_attention_transient,
    .rope = cuda_rope,
    .swiglu = cuda_swiglu,
    .attention = cuda_attention,
    .attention_batch = cuda_attention_batch,
    .convert_batch = cuda_convert_batch,
    .merge = cuda_merge,
    .sample = cuda_sample,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .sync = cuda_sync,
    .transfer = cuda_transfer,
};

backend_ops cuda_fp32_ops() {
    backend_ops o = cuda_ops;
    o.name = "cuda-fp32";
    o.act_dtype = DTYPE_F32;
    return o;
}
const backend_ops cuda_ops_fp32 = cuda_fp32_ops();

// An on/off switch from the environment: *on = 1 for "1", 0 for "0", `dflt` unset or empty;
// anything else is refused rather than run as the default.
burst_status env_switch(const char *name, const char *what_on, int dflt, int *on, burst_error *err) {
    const char *v = getenv(name);
    *on = v && *v ? strcmp(v, "1") == 0 : dflt;
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
        return BURST_FAIL(err, BURST_ERR_INVALID, "%s=%s: want 1 (%s) or 0", name, v, what_on);
    return BURST_OK;
}

} // namespace

extern "C" burst_status backend_cuda_new(int device, int fp32, burst_backend **out, burst_error *err) {
    *out = NULL;
    // The diagnostic switches: a misspelt value is refused rather than run as the default.
    const char *flash = getenv("BURST_FLASH");
    if (flash && *flash && strcmp(flash, "ours") && strcmp(flash, "cudnn"))
        return BURST_FAIL(err, BURST_ERR_INVALID, "BURST_FLASH=%s: want ours or cudnn (unset: cuDNN where its plan pays)",
                          flash);
    int prof, batched, grouped, split_k, graphs;
    burst_status st;
    if ((st = env_switch("BURST_PROFILE", "a GPU time table per op", 0, &prof, err)) ||
        (st = env_switch("BURST_BATCHED_DECODE", "a step's sequences in few launches, the default", 1, &batched, err)) ||
        (st = env_switch("BURST_GROUPED_GEMM", "a weight group's GEMMs as one, the default", 1, &grouped, err)) ||
        (st = env_switch("BURST_SPLIT_K", "decode's output projections as split-K GEMMs, the default", 1, &split_k, err)) ||
        (st = env_switch("BURST_CUDA_GRAPHS", "decode steps as CUDA graphs", 0, &graphs, err)))
        return st;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || device < 0 || count == 0) {
        cudaGetLastError();
        return BURST_FAIL(err, BURST_ERR_DEVICE, "cuda:%d: no CUDA device (%d found%s%s)", device, count,
                          e != cudaSuccess ? ": " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
    }
    device %= count; // more ranks than GPUs: virtual ranks share them (tests of G > 1 on one GPU)
    CUDA_CHECK(cudaSetDevice(device));
    // Ranks on other GPUs pass K/V to this one's buffers (comm threads, cuda_transfer): over
    // NVLink or PCIe peer to peer where the pair allows it, else CUDA stages the copy in host memory.
    for (int peer = 0; peer < count; peer++) {
        int can = 0;
        if (peer != device) CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
        // already enabled (another backend on this GPU), or past the hardware's peer limit: either way copies work
        if (can && cudaDeviceEnablePeerAccess(peer, 0) != cudaSuccess) (void)cudaGetLastError();
    }
    cuda_ctx *c = (cuda_ctx *)burst_calloc(1, sizeof *c);
    c->device = device;
    c->fp32 = fp32;
    c->cudnn_min_rows = flash && strcmp(flash, "ours") == 0 ? 0 : CUDNN_MIN_ROWS;
    c->cudnn_always = flash && strcmp(flash, "cudnn") == 0;
    c->batched = batched;
    c->grouped_gemm = grouped;
    c->split_k = split_k;
    c->graphs = graphs;
    c->launcher = (cuda_launcher){graph_launch, c};
    c->mm_in.in_graphs = c->mm_out.in_graphs = c->decode_ws.in_graphs = c->split_k_part.in_graphs = true;
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    CUDA_CHECK(cudaMalloc(&c->blas_ws, CUBLAS_WORKSPACE));
    CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->blas_ws, CUBLAS_WORKSPACE));
    // fp32 mode: CUBLAS_COMPUTE_32F under the default math mode never uses TF32.
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    for (upload_buf *u : {&c->tokens, &c->pos, &c->sampling}) CUDA_CHECK(cudaEventCreateWithFlags(&u->done, cudaEventDisableTiming));
    c->tokens.in_graphs = c->pos.in_graphs = true;
    if (prof) c->prof = (profile *)burst_calloc(1, sizeof *c->prof);
    burst_backend *b = (burst_backend *)burst_malloc(sizeof *b);
    *b = (burst_backend){.ops = fp32 ? &cuda_ops_fp32 : &cuda_ops, .ctx = c};
    *out = b;
    return BURST_OK;
}
