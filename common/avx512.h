// AVX-512 pieces shared by the CPU's vector code: the CPU GEMM (model/matmul_cpu.c) and AMX's
// matmul and attention (model/matmul_amx.c, attention/flash_amx.c, common/amx.c). BURST_AVX512 is
// 1 where the build targets AVX-512 with its DQ and BW parts (every AVX-512 CPU since Skylake-SP).
#pragma once
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
#define BURST_AVX512 1
#include <immintrin.h>
#include <stdint.h>

// The mask of the first n (at most 32) of 32 elements, and of 16.
static inline __mmask32 mask_first32(int64_t n) { return n >= 32 ? ~0u : n <= 0 ? 0 : (1u << n) - 1; }
static inline __mmask16 mask_first16(int64_t n) { return (__mmask16)mask_first32(n < 16 ? n : 16); }

// v's 16 floats rounded to the nearest bf16 (ties to even; a NaN kept NaN), as f32_to_bf16.
static inline __m256i bf16_nearest_x16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v), lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_mask_or_epi32(r, _mm512_fpclass_ps_mask(v, 0x81), u, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

// 16 rows of 16 32-bit elements, transposed in place: unpacks of 32 and 64 bits make 4 x 4 blocks
// within each 128-bit lane, two lane shuffles move the blocks.
static inline void transpose_16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 4) {
        __m512i a = _mm512_unpacklo_epi32(r[i], r[i + 1]), b = _mm512_unpackhi_epi32(r[i], r[i + 1]);
        __m512i c = _mm512_unpacklo_epi32(r[i + 2], r[i + 3]), d = _mm512_unpackhi_epi32(r[i + 2], r[i + 3]);
        t[i] = _mm512_unpacklo_epi64(a, c), t[i + 1] = _mm512_unpackhi_epi64(a, c);
        t[i + 2] = _mm512_unpacklo_epi64(b, d), t[i + 3] = _mm512_unpackhi_epi64(b, d);
    } // t[4 g + j], lane l: column 4 l + j of rows 4 g .. 4 g + 3
    for (int j = 0; j < 4; j++) {
        __m512i b0 = _mm512_shuffle_i32x4(t[j], t[4 + j], 0x44), b1 = _mm512_shuffle_i32x4(t[j], t[4 + j], 0xee);
        __m512i b2 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], 0x44), b3 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], 0xee);
        r[j] = _mm512_shuffle_i32x4(b0, b2, 0x88), r[4 + j] = _mm512_shuffle_i32x4(b0, b2, 0xdd);
        r[8 + j] = _mm512_shuffle_i32x4(b1, b3, 0x88), r[12 + j] = _mm512_shuffle_i32x4(b1, b3, 0xdd);
    }
}
#endif
