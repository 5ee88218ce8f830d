// The GPU flash-attention forward: the same contract as attention/flash.h (positions, causal
// masking, GQA, empty rows give O = 0 and lse = -INFINITY), with bf16 Q/K/V and fp32 output.
//
// O is fp32, not bf16: BurstAttention merges G partial outputs per row (online_softmax_cuda.h);
// rounding each partial to bf16 would add G roundings of up to 2^-9 relative, while fp32 keeps
// the merge at fp32 rounding. The extra write is 2 bytes per element against O(nk*head_dim)
// FLOPs per element, invisible in the timings.
//
// head_dim 64 and 128 are compiled (others return BURST_ERR_INVALID). Q/K/V rows must be 16-byte
// aligned: row strides a multiple of 8 elements and 16-byte-aligned base pointers.
// The caller owns every buffer (device memory). The launch functions are asynchronous on the
// given stream and thread-safe; CUDA runtime failures abort through CUDA_CHECK.
#pragma once
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "common/burst.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const uint16_t *q;  // bf16 bits (n_q, n_heads, head_dim), row i at q + i*q_stride
    const uint16_t *k;  // bf16 bits (nk, n_kv_heads, head_dim), row j at k + j*kv_stride
    const uint16_t *v;  // bf16 bits (nk, n_kv_heads, head_dim), row j at v + j*kv_stride
    float *o;           // (nq, n_heads, head_dim), row i at o + i*o_stride
    float *lse;         // (n_heads, nq): natural-log log-sum-exp of the scaled scores
    int64_t q_stride, kv_stride, o_stride; // in elements
    int nq, nk;
    int n_heads, n_kv_heads, head_dim;
    int64_t q_pos0, k_pos0;
    int causal;
    float scale;        // usually 1/sqrt(head_dim)
} flash_cuda_args;

burst_status flash_cuda(const flash_cuda_args *a, cudaStream_t stream, burst_error *err);

// The compiled tile shapes, for the benchmark's sweep: flash_cuda uses FLASH_CUDA_TILES_DEFAULT.
// Names read "queries x keys per block / warps [x blocks per SM asked of the register allocator]".
typedef enum {
    FLASH_CUDA_TILES_DEFAULT = 0,
    FLASH_CUDA_TILES_128x64_W4,   // 32 query rows per warp
    FLASH_CUDA_TILES_128x64_W8,   // 16 query rows per warp
    FLASH_CUDA_TILES_128x64_W8_2, // the same, at most 128 registers
    FLASH_CUDA_TILES_128x32_W4,
    FLASH_CUDA_TILES_64x64_W4,    // 16 query rows per warp, two blocks per SM
    FLASH_CUDA_TILES_COUNT,
} flash_cuda_tiles;
extern const char *const flash_cuda_tiles_name[FLASH_CUDA_TILES_COUNT];

burst_status flash_cuda_with_tiles(const flash_cuda_args *a, flash_cuda_tiles tiles,
                                   cudaStream_t stream, burst_error *err);

#ifdef __cplusplus
}
#endif
