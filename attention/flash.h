// Local attention of a block of queries against a block of keys/values, the inner step of
// BurstAttention (LAO): a tiled flash-attention forward that returns the normalised output O and
// the log-sum-exp of each row, so that results over several K/V blocks can be merged later
// (attention/online_softmax.h). The S and P tiles never reach main memory.
//
// Positions: query row i has position q_pos0 + i, key row j has position k_pos0 + j. With
// causal != 0, key j is visible to query i only when k_pos0 + j <= q_pos0 + i. A query row that
// sees no key at all gets O = 0 and lse = -INFINITY (the merge treats it as empty).
//
// GQA: query head h reads K/V head h / (n_heads / n_kv_heads).
// K and V are float32 or bf16 (kv_dtype: a KV cache kept in bf16); Q, O and lse are float32.
// The caller owns every buffer. flash_cpu runs n such calls at once (a step's decoding
// sequences), whose outputs must not overlap; it is thread-safe for disjoint outputs and uses
// OpenMP threads over (call, head, query tile) in one parallel region when built with OpenMP.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

#ifdef __cplusplus // the CUDA benchmark calls the CPU twin
extern "C" {
#endif

typedef struct {
    const float *q;     // (nq, n_heads, head_dim), row i at q + i*q_stride
    const void *k;      // (nk, n_kv_heads, head_dim) kv_dtype, row j at k + j*kv_stride
    const void *v;      // (nk, n_kv_heads, head_dim) kv_dtype, row j at v + j*kv_stride
    float *o;           // (nq, n_heads, head_dim), row i at o + i*o_stride
    float *lse;         // (n_heads, nq): natural-log log-sum-exp of the scaled scores
    int64_t q_stride, kv_stride, o_stride; // in elements, between consecutive rows
    int nq, nk;
    int n_heads, n_kv_heads, head_dim;
    int64_t q_pos0, k_pos0;
    int causal;
    float scale;        // > 0, usually 1/sqrt(head_dim)
    burst_dtype kv_dtype; // DTYPE_F32 (0) or DTYPE_BF16
    // 1: where flash_cpu runs a query tile on AMX (attention/flash_amx.h), Q and the probabilities
    // are rounded to bf16 (one tile product a block instead of three), as the GPU's bf16 kernels
    // round them; off AMX, on a bf16 cache with head_dim a multiple of 32 where the build has
    // AVX512-BF16, the tile's products are bf16 dot products of them (attention/flash_pairs.h);
    // elsewhere it changes nothing. The cpu-bf16 backend sets it.
    int qp_bf16;
} flash_args;

void flash_cpu(const flash_args *calls, int n);

// Bytes a flash_cpu call of up to max_keys keys (K/V of kv_dtype, heads of head_dim, qp_bf16 as
// its flash_args ask) allocates on n_threads threads for its duration, of what grows with the
// keys: each thread's copy of a KV head's K and V for a prompt's query tiles, in bf16 on AMX
// (attention/flash_amx.h) and for AVX512-BF16's dot products (attention/flash_pairs.h), in
// float32 for the vector loops (attention/head_copy.h).
size_t flash_cpu_transient_bytes(int64_t max_keys, int head_dim, burst_dtype kv_dtype, int qp_bf16, int n_threads);

#ifdef __cplusplus
}
#endif
