// The GPU flash-attention forward through cuDNN 9's fused attention: the contract of
// attention/flash_cuda.h (same args struct, positions, causal masking with offsets, GQA, fp32 O,
// natural-log lse (n_heads, nq)), for the shapes cuDNN takes. flash_cuda stays the reference
// and the fallback: flash_cudnn returns BURST_ERR_INVALID, having written nothing, for any case it
// does not take, and the caller then runs flash_cuda on the same arguments. Not taken: a build
// without cuDNN; nk == 0; causal with q_pos0 < k_pos0 (rows that see no key); head_dim not a
// multiple of 8; Q/K/V/O rows or lse not 16-byte aligned; a graph no cuDNN engine accepts.
// cuDNN writes O in bf16 only: it is staged and widened, so O carries one bf16 rounding that
// flash_cuda's does not (2^-9 relative; the ring merge then works on fp32 as before).
//
// cuDNN builds one execution plan per shape, which takes tens of ms (0.07 s at 32K on an H100):
// plans are cached per calling thread, keyed by every value the graph bakes in (nq, nk, heads,
// KV heads, head_dim, row strides, causal, and whether q_pos0 != k_pos0). The scale and
// q_pos0 - k_pos0 are run-time values. A server meets a new nq or nk with almost every prompt
// length: flash_cudnn_worth says when a plan is worth its cost.
// Cache, cuDNN handle, workspace and O staging buffer belong to the calling thread (each ring
// rank drives its GPU from its own thread); flash_cudnn_release frees the calling thread's, and a
// thread's are freed when it ends.
//
// Thread-safe: calls from different threads share nothing. Asynchronous on the given stream;
// one thread's calls share its O staging buffer and workspace, so they must all use one stream
// (or order their streams). CUDA and cuDNN failures after a plan exists abort through
// CUDA_CHECK / CUDNN_CHECK.
#pragma once
#include <cuda_runtime_api.h>

#include "attention/flash_cuda.h"
#include "common/burst.h"

#ifdef __cplusplus
extern "C" {
#endif

burst_status flash_cudnn(const flash_cuda_args *a, cudaStream_t stream, burst_error *err);

// For a caller with a fallback (flash_cuda): 1 when flash_cudnn should take this block now. That
// is when its plan is built already; when the block is large enough (4e11 = its visible
// (row, key) pairs x n_heads x head_dim: 7B's 32 heads of 128 at 8192 rows x 13000 keys) that
// cuDNN's speed repays the plan within one forward pass; or when the calling thread has asked
// about its shape 64 times (two passes of 32 layers: a prompt length that recurs). Else 0,
// counting the call. Always 0 without cuDNN. Cheap: no cuDNN call; never builds a plan itself.
int flash_cudnn_worth(const flash_cuda_args *a);

// 1 when burst was built with cuDNN (flash_cudnn can take cases), else 0.
int flash_cudnn_compiled(void);

// Frees the calling thread's plans, handle and buffers (the next call builds them again).
void flash_cudnn_release(void);

#ifdef __cplusplus
}
#endif
