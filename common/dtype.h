// The element types of weights (as a checkpoint stores them) and of the KV cache: size, the
// safetensors name, and the conversions between bf16 (or f16) and float32 that every host path shares.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// DTYPE_Q8 and DTYPE_Q4: weights only, never in a checkpoint: int8, or 4-bit integers two to a
// byte, with one float32 scale per Q_GROUP columns of a row (model/backend.h's
// burst_weight.scales), which the CPU backends make at load (model/quantize_cpu.h).
typedef enum { DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8, DTYPE_Q4 } burst_dtype;
enum { Q_GROUP = 32 };

// Of an element (Q8: its int8, without the scales; Q4: 0, two share a byte: q4_row_bytes).
size_t dtype_size(burst_dtype t);
const char *dtype_name(burst_dtype t); // "F32", "F16", "BF16" as safetensors spells them; "Q8", "Q4"
// Parses a checkpoint's or KV cache's dtype name (F32, F16 or BF16, any case); returns 0 (and
// leaves *out alone) when it is not one of those.
int dtype_parse(const char *name, burst_dtype *out);
static inline int dtype_quantized(burst_dtype t) { return t == DTYPE_Q8 || t == DTYPE_Q4; }
// A weights quantization (llama_options.weights_quant: 0, DTYPE_Q8 or DTYPE_Q4) as --quantize
// spells it: "none", "q8", "q4"; quant_parse reads those (any case), returning 0 on anything else.
const char *quant_name(int quant);
int quant_parse(const char *s, int *out);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Exact for every half, NaN payloads included. Branch-free (after F. Giesen's half_to_float), so
// that a loop of it vectorizes: a subnormal gets the exponent of 2^-14 and then loses 2^-14 in a
// float subtraction, which is exact.
static inline float f16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)(h & 0x7fff) << 13, e = u & 0x0f800000u;
    u += e == 0x0f800000u ? 0x70000000u : e == 0 ? 0x38800000u : 0x38000000u; // exponent bias 15 -> 127
    float f;
    memcpy(&f, &u, 4);
    f = e == 0 ? f - 0x1p-14f : f;
    memcpy(&u, &f, 4);
    u |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, as CUDA's __float2bfloat16_rn; a NaN stays a (quiet) NaN.
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#ifdef __cplusplus
}
#endif
