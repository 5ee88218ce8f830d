// A vectorizable e^x for x <= 88, shared by the CPU attention's softmax (attention/flash_cpu.c,
// whose arguments stay below its lazy max's margin, 8) and SwiGLU (model/backend_cpu.c, x <= 0).
#pragma once
#include <stdint.h>
#include <string.h>

// e^x for x <= 88 (2^n below needs n <= 127), 0 below -87 (and for -inf: the attention's masked
// keys), NaN for NaN. Plain arithmetic, so that a loop of it vectorizes (libm's expf is a call per
// element, which took as long as the attention's dot products): x = n ln2 + r with |r| <= ln2 / 2
// (ln2 in two parts, so that n ln2 is exact), e^r by its Taylor series to r^7 (error below 1e-8 of
// the value), times 2^n.
static inline float exp_below_88(float x) {
    const float xc = x >= -87.0f ? x : -87.0f; // NaN too: n must stay a number (the cast below)
    const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; // round to nearest: 1.5 x 2^23
    const float r = (xc - n * 0.693145752f) - n * 1.42860682e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720, p = p * r + 1.0f / 120, p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6, p = p * r + 0.5f, p = p * r + 1.0f, p = p * r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; // 2^n: -126 <= n <= 127
    float two_n;
    memcpy(&two_n, &bits, 4);
    return x >= -87.0f ? p * two_n : x < -87.0f ? 0.0f : x;
}
