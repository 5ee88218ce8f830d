// Attention of a few query rows against a long K/V (decode) on the GPU, split over the keys
// ("flash-decoding"): the contract of attention/flash.h (positions, causal masking, GQA, nk = 0,
// rows that see no key get O = 0 and lse = -INFINITY, natural-log lse (n_heads, nq)) with every
// pointer in device memory. Q is fp32, K/V fp32 or bf16 (kv_dtype), all read in place at their
// strides (the KV cache is never copied or rounded); all arithmetic is fp32, so the result
// matches flash_cpu to fp32 rounding. head_dim 1..256, any strides and alignment (4-element
// loads where they allow).
//
// Any nq is correct. One block holds up to 8 query vectors (a row of one query head) of a KV
// head's group and reads each K/V row once for all of them: with n_heads / n_kv_heads * nq <= 8
// (decode of one token, up to GQA 8) every K/V byte leaves memory once. Larger products run
// several blocks over the same keys (re-reads from L2) on CUDA cores, so a caller with a
// tensor-core kernel should send it blocks of more than DECODE_CUDA_MAX_ROWS rows.
//
// Workspace: when the keys are split (decode_cuda_splits > 1), the splits' partial (O, lse) go to
// a caller-owned device buffer of decode_cuda_workspace_floats(a) floats; the split count comes
// from nk and the current device's SM count, so ask on the device that runs the call.
// Thread-safe; asynchronous on the given stream, which must order the workspace's reuse; CUDA
// runtime failures abort through CUDA_CHECK. The kernels launch through `launcher` where one is
// given (common/cuda_launch.h: the CUDA backend patches them in replayed graphs), else directly.
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "attention/flash.h"
#include "common/burst.h"
#include "common/cuda_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

// Query rows up to which decode_cuda beats packing K/V to bf16 for the tensor-core flash kernel
// (attention/flash_cuda.h), by estimate, not measured: at 8 rows, 32 heads, d=128, 32K keys its
// fp32 dot products (4.3 GFLOP on CUDA cores, ~0.2-0.3 ms) hide under its one read of the fp32
// K/V (1.1 GB, 0.36 ms at 3 TB/s), while the pack alone moves 1.6 GB.
#define DECODE_CUDA_MAX_ROWS 8

// Key splits decode_cuda runs for these arguments on the current device (1 for invalid ones).
int decode_cuda_splits(const flash_args *a);

// Floats of workspace decode_cuda needs (0 when it runs one split).
size_t decode_cuda_workspace_floats(const flash_args *a);

// At least decode_cuda_batch_workspace_floats of any max_calls or fewer calls of n_heads and
// n_kv_heads heads of head_dim, of max_rows query rows in all, over any keys, on the current
// device: what a workspace grows to (the memory check at start).
size_t decode_cuda_workspace_bound_floats(int max_rows, int max_calls, int n_heads, int n_kv_heads, int head_dim);

burst_status decode_cuda(const flash_args *a, float *workspace, size_t workspace_floats,
                         const cuda_launcher *launcher, cudaStream_t stream, burst_error *err);

// n independent calls of decode_cuda (a step's decoding sequences, one call each) in as few
// launches as they allow: calls with the same kernel instance (K/V dtype, 4-element loads or
// not, head_dim up to 128 or 256, vectors a block), KV heads and blocks of rows go up to DECODE_CUDA_MAX_BATCH a
// launch (plus one launch of their split merges), their parameters passed by value. Calls of a
// layer's decode step of one token each share all of that: 64 sequences take 3 + 3 launches
// instead of up to 128. The calls' split partials follow one another in the workspace.
#define DECODE_CUDA_MAX_BATCH 28 // their parameters fill the 4 KB of a kernel's
size_t decode_cuda_batch_workspace_floats(const flash_args *calls, int n);
burst_status decode_cuda_batch(const flash_args *calls, int n, float *workspace, size_t workspace_floats,
                               const cuda_launcher *launcher, cudaStream_t stream, burst_error *err);

#ifdef __cplusplus
}
#endif
