// A vectorizable e^x for x <= 88, shared by the CPU attention's softmax (attention/flash_cpu.c,
// whose arguments stay below its lazy max's margin, 8) and SwiGLU (model/swiglu.h, x <= 0);
// and the same in AVX-512 intrinsics for the AMX attention (attention/flash_amx.c), which computes
// its probabilities in registers.
#pragma once
#include <stdint.h>
#include <string.h>

// x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so that n ln2 is exact), e^r by its Taylor
// series to r^7 (error below 1e-8 of the value), times 2^n.
#define EXP_LOG2E 1.44269504f
#define EXP_LN2_HI 0.693145752f
#define EXP_LN2_LO 1.42860682e-6f
#define EXP_TAYLOR {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}
enum { EXP_TERMS = 8 };

// e^x for x <= 88 (2^n below needs n <= 127), 0 below -87 (and for -inf: the attention's masked
// keys), NaN for NaN. Plain arithmetic, so that a loop of it vectorizes (libm's expf is a call per
// element, which took as long as the attention's dot products).
static inline float exp_below_88(float x) {
    static const float taylor[EXP_TERMS] = EXP_TAYLOR;
    const float xc = x >= -87.0f ? x : -87.0f; // NaN too: n must stay a number (the cast below)
    const float n = (xc * EXP_LOG2E + 12582912.0f) - 12582912.0f; // round to nearest: 1.5 x 2^23
    const float r = (xc - n * EXP_LN2_HI) - n * EXP_LN2_LO;
    float p = taylor[0];
    for (int i = 1; i < EXP_TERMS; i++) p = p * r + taylor[i];
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; // 2^n: -126 <= n <= 127
    float two_n;
    memcpy(&two_n, &bits, 4);
    return x >= -87.0f ? p * two_n : x < -87.0f ? 0.0f : x;
}

#ifdef __AVX512F__
#include <immintrin.h>

// e^x of 16 floats as exp_below_88, and 0 in the lanes outside keep: 2^n by scalef, the clamp
// keeping a NaN (max returns its second operand where one is NaN).
static inline __m512 exp_below_88_x16(__m512 x, __mmask16 keep) {
    static const float taylor[EXP_TERMS] = EXP_TAYLOR;
    keep &= _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x));
    __m512 p = _mm512_set1_ps(taylor[0]);
    for (int i = 1; i < EXP_TERMS; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(taylor[i]));
    return _mm512_maskz_scalef_ps(keep, p, n);
}
#endif
