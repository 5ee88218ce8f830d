// bf16 pairs in 32-bit lanes, as AVX512-BF16's dot products (attention/flash_pairs.c) and AMX's
// tiles (attention/flash_amx.c) take them.
#pragma once
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>

// x's and y's 16 floats rounded to the nearest bf16 (one AVX512-BF16 conversion; as
// bf16_nearest_x16 but for subnormals, which become zeros, as AMX reads them), side by side in the
// lanes: x's element j at bf16 2 j, y's at 2 j + 1.
static inline __m512i bf16_pairs_nearest(__m512 x, __m512 y) {
    const __m512i xy = (__m512i)_mm512_cvtne2ps_pbh(y, x); // x's 16 in the low half, y's in the high
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                                20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(interleave, xy);
}
#endif
