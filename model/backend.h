// The operations the LLaMA forward pass needs, behind one interface, so that model/llama.c is
// written once for every backend (CPU, and CUDA in model/backend_cuda.h).
//
// Activation buffers come from backend_alloc and live in the backend's memory (host memory for
// the CPU backend, device memory for CUDA), zeroed, in float32, except the matmuls' inputs and the
// SwiGLU between them, which may be in the backend's activation dtype (backend_act_dtype). Weights
// keep their stored dtype (F32/F16/BF16) where the backend computes on them as stored: the CPU
// backend points into the weights' mmap and converts tiles inside the matmul (but on AMX keeps BF16
// matrices, and cpu-bf16's F16 ones, as bf16 AMX tiles; cpu-bf16 keeps bf16 copies of F16 weights
// elsewhere). A backend instance is used by one thread at a time (each rank owns its own).
#pragma once
#ifdef __cplusplus // the CUDA backend implements it in CUDA C++; weights.h has no guards of its own
extern "C" {
#endif
#include "attention/flash.h"
#include "attention/online_softmax.h"
#include "rope.h"
#include "weights/weights.h"

typedef struct burst_backend burst_backend;

// A weight as the backend holds it: a matrix (rows, cols) or a vector (1, cols).
typedef struct {
    burst_dtype dtype;
    const void *data;
    int64_t rows, cols;
    int amx_tiles; // data holds bf16 AMX tiles, not rows (model/matmul_amx.h): the CPU backends on AMX
    // DTYPE_Q8 and DTYPE_Q4: (rows, q_groups(cols)) scales; weight (r, c) is its integer times
    // scales[r * q_groups(cols) + c / Q_GROUP]: Q8's data[r * cols + c] (int8), Q4's in its row of
    // q4_row_bytes(cols) bytes (model/quantize_cpu.h)
    const float *scales;
} burst_weight;

// Scales a row of a Q8 or Q4 weight of cols columns: the last group may be short.
static inline int64_t q_groups(int64_t cols) { return (cols + Q_GROUP - 1) / Q_GROUP; }

// Creates a backend by name: "cpu" (float32 activations) or "cpu-bf16" (the matmuls' inputs, but
// float32 ones by F32 weights, and F16 weights in bf16: model/backend_cpu.c), or, when built with
// CUDA, "cuda" (bf16 weights and GEMMs) or "cuda-fp32" (float32 throughout, for exactness tests)
// on GPU `device` (model/backend_cuda.h). quant (0, DTYPE_Q8 or DTYPE_Q4): the CPU backends hold
// every matrix in it (backend_weight quantizes it: 56% or 31% of BF16's bytes, which decode steps
// stream); a GPU refuses it.
burst_status backend_new(const char *name, int device, int n_threads, int quant, burst_backend **out,
                         burst_error *err);
burst_backend *backend_cpu_new(int n_threads, int bf16, int quant);
// 1 for the backends that compute in host memory, on the mapped weights (or their copies of them):
// "cpu" and "cpu-bf16". A process's host ranks share one set of weights.
int backend_on_host(const char *name);
// 1 for the backends on a GPU: "cuda" and "cuda-fp32".
int backend_on_device(const char *name);
// 1 for the backends whose activations are bf16 by name: "cpu-bf16" and "cuda".
int backend_bf16(const char *name);
// What multiplies bf16 on this CPU in this build: "AMX" (usable: common/amx.h), "AVX512-BF16",
// or NULL (none: cpu-bf16 would only round).
const char *backend_cpu_bf16_unit(void);
// The backend where none is named, for a checkpoint whose weights are mostly `weights`: cpu-bf16
// for BF16 and F16 weights where the CPU multiplies bf16 (it prefills about twice as fast; llama.cpp
// and a GPU's cuda compute in 16 bits too), else cpu (float32).
const char *backend_default(burst_dtype weights);
void backend_free(burst_backend *b);
const char *backend_name(const burst_backend *b);
// The dtype a backend wants for matmul inputs: DTYPE_BF16 where its GEMMs round their inputs to
// bf16 anyway (the CUDA backend), so that rmsnorm and swiglu write them in bf16 once instead of
// float32 that every matmul re-reads and rounds, or where bf16 inputs make its matmuls faster
// (cpu-bf16); DTYPE_F32 otherwise. Every backend takes both dtypes wherever an op has a dtype
// argument; this one is the cheaper.
burst_dtype backend_act_dtype(const burst_backend *b);

void *backend_alloc(burst_backend *b, size_t bytes);
// Bytes backend_alloc can still hand out, 0 when it cannot tell: the GPU's free memory; for the
// CPU, the host's available memory within its cgroups' limits (common/host_memory.h) less what
// CPU backends of this process hold, which calloc has granted but nothing may have touched yet.
// Backends that give the same *pool share that memory (the CPU: -1; a GPU: its device number).
size_t backend_memory_free(burst_backend *b, int *pool);
void backend_release(burst_backend *b, void *p);
void backend_to_host(burst_backend *b, float *dst, const float *src, int64_t n);
// n independent copies between backend buffers (common/burst.h's copy_job: none may overlap
// another or depend on one), in one launch where the backend can.
void backend_copy(burst_backend *b, const copy_job *jobs, int n);
// dst (n elements of dtype `to`, DTYPE_F32 or DTYPE_BF16) = src (n floats) rounded to nearest
// even; both backend buffers. How K/V rows enter a KV cache of either dtype.
void backend_convert(burst_backend *b, void *dst, burst_dtype to, const float *src, int64_t n);

// n conversions of backend_convert at once: jobs[i].n floats at src to dst, all of dtype `to`.
typedef struct {
    void *dst;
    const float *src;
    int64_t n;
} convert_job;
void backend_convert_batch(burst_backend *b, burst_dtype to, const convert_job *jobs, int n);

// Makes a weights tensor usable by the backend: the CPU backend borrows the mapping (or copies BF16
// matrices, and cpu-bf16's F16 ones, into AMX tiles; cpu-bf16 without AMX rounds F16 ones to bf16;
// with q8 it quantizes every matrix: model/backend_cpu.c), the CUDA backend uploads it. out->data
// == t->data where the backend borrows it.
burst_status backend_weight(burst_backend *b, const weights_tensor *t, burst_weight *out,
                            burst_error *err);

// backend_weight of n tensors, out[i] for t[i]. Where the backend copies weights (CUDA), into one
// allocation, each at a multiple of 256 bytes after the one before: backend_matmul_group then
// runs neighbours of one shape as one batched GEMM.
burst_status backend_weight_group(burst_backend *b, const weights_tensor *const *t, int n, burst_weight *out,
                                  burst_error *err);

// x (n, dim) = rows tokens[0..n) of table (vocab, dim).
void backend_embed(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n);
// out (n, dim) of out_dtype = x / rms(x) * w, per row, in float32; out may equal x (F32 only).
void backend_rmsnorm(burst_backend *b, void *out, burst_dtype out_dtype, const float *x,
                     const burst_weight *w, int n, float eps);
// out (n, W.rows) of out_dtype = x (n, W.cols) of x_dtype @ W^T, accumulated in float32.
void backend_matmul(burst_backend *b, void *out, burst_dtype out_dtype, const void *x,
                    burst_dtype x_dtype, const burst_weight *W, int n);
// out[i] (n, W[i].rows) of out_dtype = x @ W[i]^T for i < count, outputs disjoint; returns the
// number of GEMMs that ran (count where n is 0). The CUDA backend runs neighbours of one shape in one backend_weight_group
// whose outputs lie equally spaced as one batched GEMM: Q, K and V of 7B and 13B (1), K and V of
// grouped-query models (2), the MLP's gate and up (1); elsewhere count matmuls (count).
int backend_matmul_group(burst_backend *b, void *const *out, burst_dtype out_dtype, const void *x,
                         burst_dtype x_dtype, const burst_weight *const *W, int count, int n);
// out (n, W.rows) float32 += x @ W^T: the residual add fused into the matmul (a GEMM with beta 1
// on the GPU), which saves writing and re-reading the product.
void backend_matmul_add(burst_backend *b, float *out, const void *x, burst_dtype x_dtype,
                        const burst_weight *W, int n);
// Bytes a matmul of n tokens by a weight of cols columns allocates for the call's duration (the
// CPU's x transposed or split into tiles, and its threads' blocks) or keeps for the next (the
// GPU's x rounded to bf16), for the memory check at start.
size_t backend_matmul_transient_bytes(burst_backend *b, int n, int64_t cols);
// Bytes the attention calls of a step allocate for their duration or keep for the next, for the
// memory check at start: up to max_calls calls (sequences) of up to max_rows query rows of n_heads
// heads, in all, over up to max_keys keys of n_kv_heads. On the CPU with AMX, each thread's copy
// of a KV head's K and V^T; on a GPU, Q and cuDNN's O in bf16, K/V rounded to bf16 from a float32
// cache, the split-KV kernel's partials, and a margin for cuDNN's handle and workspace
// (model/backend_cuda.cu).
size_t backend_attention_transient_bytes(burst_backend *b, int max_rows, int max_calls, int64_t max_keys, int n_heads,
                                         int n_kv_heads, int head_dim, burst_dtype kv_dtype);
// Rotary embedding in place on q (n, n_heads, head_dim) and k (n, n_kv_heads, head_dim), rotate-half
// layout (Hugging Face); row i has position pos[i]; frequencies and scaling from p (model/rope.h).
// Both in one call: each angle is worked out once for both, and a GPU launches once a layer.
void backend_rope(burst_backend *b, float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n,
                  int head_dim, const rope_params *p);
// gate (n) = silu(gate) * up, both of dtype, computed in float32.
void backend_swiglu(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n);
// The MLP's first half: out (n, W_gate.rows) of dtype = silu(x W_gate^T) * (x W_up^T), x (n,
// W_gate.cols) of dtype. The CPU's AMX matmul fuses it where both weights are in tiles: x read
// once, SwiGLU computed from the two projections' float32 sums as they are stored (so unrounded
// to dtype in between); elsewhere backend_matmul_group of the two, the up projection into
// up_scratch (n, W_up.rows of dtype), and backend_swiglu.
void backend_matmul_swiglu(burst_backend *b, void *out, const void *x, burst_dtype dtype, const burst_weight *W_gate,
                           const burst_weight *W_up, void *up_scratch, int n);
// Local attention (attention/flash.h) on the backend's buffers.
void backend_attention(burst_backend *b, const flash_args *a);
// n independent local attentions at once (every sequence of a step on one rank). The CUDA
// backend runs the decode-sized ones (and the cache writes of backend_convert_batch) in a few
// launches instead of a few each, where BURST_BATCHED_DECODE=1; the others call by call.
void backend_attention_batch(burst_backend *b, const flash_args *calls, int n);
// n online-softmax merges of attention partials (attention/online_softmax.h) on the backend's
// buffers, outputs disjoint: a step's decoding sequences in one launch on a GPU.
void backend_merge(burst_backend *b, const online_softmax_args *calls, int n);
// out (rows, on the host) = a token id drawn from each row of logits x (rows, cols) float32, where
// the logits live (a GPU hands back 4 bytes a row instead of the row); synchronous. Row r at
// temperature[r] <= 0 (or temperature NULL: every row) gives the index of its largest value, the
// first of equal ones; else it draws as model/sampler.h's sampler_pick_unfiltered with unit[r].
// The CPU's draw is that function's; a GPU adds by slices of the row (within ~1e-6 of the sum,
// where a float sum term by term drifts to ~1e-5), so for a few draws in a hundred it picks
// another id than the host's sampler would, as likely a draw. Rows holding NaN may give any index.
void backend_sample(burst_backend *b, int *out, const float *x, int rows, int64_t cols, const float *temperature,
                    const float *unit);
// The ops queued between backend_graph_begin and backend_graph_end (a step of `rows` rows, at
// most `seq_rows` of them one sequence's) may be recorded and run together at backend_graph_end:
// the CUDA backend runs decode steps as CUDA graphs under BURST_CUDA_GRAPHS=1, recorded once and
// replayed with the step's new positions and key counts (model/backend_cuda.cu). Between the two,
// nothing may wait for the backend or read its buffers (backend_to_host, backend_sample,
// backend_sync, backend_alloc, backend_release, a transfer): the wrappers assert so on every
// backend, so that the CPU's tests hold llama.c to it too. backend_graph_end returns 1 when the
// ops have run (or are queued), 0 when the backend ran none of them (the step was not the graph
// it tried): the caller then issues the same ops again, from backend_graph_begin on. No graph on
// the CPU: always 1.
void backend_graph_begin(burst_backend *b, int rows, int seq_rows);
int backend_graph_end(burst_backend *b);
// Waits until every op queued on the backend has finished (a no-op where ops are synchronous).
void backend_sync(burst_backend *b);
// A copy between any two buffers of backends of this kind (of the same or different instances),
// synchronous and callable from any thread: how comm moves data between ranks.
typedef void (*backend_transfer_fn)(void *dst, const void *src, size_t bytes);
backend_transfer_fn backend_transfer(const burst_backend *b);

#ifdef __cplusplus
}
#endif
