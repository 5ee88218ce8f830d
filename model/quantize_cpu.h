// Quantized weights on the CPU backends (--quantize): made at load from a checkpoint's matrices, a
// float32 scale per Q_GROUP (32) columns of a row (burst_weight.scales).
//   Q8: int8, the group's largest magnitude / 127 its scale (llama.cpp's Q8_0, float32 scales).
//   Q4: 4-bit integers q in -8..7, two to a byte. A row is q4_row_bytes(cols) bytes, blocks of 64
//       columns in 32 bytes: byte j of a block holds column j in its low 4 bits and column j + 32
//       in its high ones, each as q + 8; columns past the row's end hold 8 (zero). The scale is
//       llama.cpp's Q4_0's: the group's largest magnitude, signed, over -8.
// Q8 weights are multiplied as the others (model/matmul_cpu.c); Q4 ones by a few tokens here
// (matmul_q4_few: decode steps), by more widened as Q8 ones, a block of 64 columns at a time.
#pragma once
#include "backend.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

static inline int64_t q4_row_bytes(int64_t cols) { return (cols + 63) / 64 * 32; }

// n (at most Q_GROUP) floats w as int8 multiples q of the scale they return: their largest
// magnitude over 127, each rounded to the nearest (ties to even).
float quantize_group(const float *w, int64_t n, int8_t *q);

// W (rows, cols; F32, F16 or BF16) quantized into data (Q8: int8 of W's shape; Q4: rows of
// q4_row_bytes(cols)) and scales (rows, q_groups(cols)), on n_threads threads.
void quantize_weight(burst_dtype quant, void *data, float *scales, const burst_weight *W, int n_threads);

// The 64 4-bit integers of a Q4 block (32 bytes at b) as int8, in column order.
static inline void q4_unpack(const uint8_t *b, int8_t q[64]) {
#if defined(__AVX2__)
    const __m256i packed = _mm256_loadu_si256((const __m256i *)b), low = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
    _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi8(_mm256_and_si256(packed, low), eight));
    _mm256_storeu_si256((__m256i *)(q + 32), _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low), eight));
#else
    for (int j = 0; j < 32; j++) q[j] = (int8_t)((b[j] & 15) - 8), q[j + 32] = (int8_t)((b[j] >> 4) - 8);
#endif
}

// Weight j of a Q4 row (its bytes w, its scales s), as float32: its integer times its scale.
static inline float q4_at(const uint8_t *w, const float *s, int64_t j) {
    const uint8_t byte = w[j / 64 * 32 + j % 32];
    const int q = (j % 64 < 32 ? byte & 15 : byte >> 4) - 8;
    return (float)q * s[j / Q_GROUP];
}

// out (n, rows) = x @ W^T for a Q4 weight W and n tokens of x (F32 or BF16), or out (F32) += it
// with accumulate: each token's row quantized as Q8 weights are (quantize_group), each group's
// integer products summed exactly, then times both scales and summed in float32.
void matmul_q4_few(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                   const burst_weight *W, int n, int n_threads);

// What matmul_q4_few allocates for n tokens of cols columns.
size_t matmul_q4_few_bytes(int n, int64_t cols);
