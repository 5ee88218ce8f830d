// Intel AMX (Sapphire Rapids and later), shared by the CPU matmul (model/matmul_amx.c) and the CPU
// attention (attention/flash_amx.c): whether it may run, the tile shapes both use, and the AVX-512
// pieces that lay float32 data out as bf16 tiles.
//
// AMX computes C (16 x 16 float32) += A (16 x 32 bf16) B (32 x 16 bf16), B stored in pairs of rows:
// 16 rows of 16 (B[2i][j], B[2i+1][j]) pairs. To stay a float32 computation, each float32 operand
// is split into three bf16 parts that add up to it exactly (8 mantissa bits each, truncated); the
// parts' products are exact in float32 and are summed in float32. (AMX reads bf16 subnormals as 0:
// a value below about 2^-110 keeps fewer than its 24 bits.) Where bf16 precision is asked for
// (the cpu-bf16 backend), an operand is one part instead: rounded to the nearest bf16.
#pragma once
#include <stdint.h>

#include "common/dtype.h"

// 1 where this build, the CPU and the kernel let AMX run and BURST_AMX is not 0 in the environment.
// The first call asks Linux for the tile registers and logs the outcome.
int amx_usable(void);

// A tile: 16 rows of 32 bf16 (operands) or of 16 floats (sums), 1 KB. A float32 splits into
// AMX_PARTS bf16 parts.
enum { AMX_TILE = 16, AMX_TILE_K = 32, AMX_TILE_ELEMS = AMX_TILE * AMX_TILE_K, AMX_PARTS = 3 };

// n rounded up to amx_block's 32 rows (or columns): two tiles.
static inline int64_t amx_pad_to_block(int64_t n) { return (n + 2 * AMX_TILE - 1) / (2 * AMX_TILE) * (2 * AMX_TILE); }

// Compiled where the compiler targets AMX-BF16 (-march=native on such a CPU), with the AVX512-BF16
// conversions every such CPU has; clang 14 names the features __AMXTILE__ and __AMXBF16__, GCC
// __AMX_TILE__ and __AMX_BF16__.
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__)) && defined(__AVX512F__) && \
    defined(__AVX512BF16__)
#define BURST_AMX_BUILD 1
#include <immintrin.h>

#include "common/avx512.h"

// Every tile register 16 rows of 64 bytes; each thread loads the shapes before its first tile
// instruction (and _tile_release() when done). A constant: built in a local variable, GCC 12
// dropped the stores to it inlined here (as if _tile_loadconfig did not read them), and ldtilecfg
// faulted on the zeros.
static inline void amx_load_tile_config(void) {
    static const struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t bytes_per_row[16];
        uint8_t rows[16];
    } cfg = {.palette = 1,
             .bytes_per_row = {64, 64, 64, 64, 64, 64, 64, 64},
             .rows = {AMX_TILE, AMX_TILE, AMX_TILE, AMX_TILE, AMX_TILE, AMX_TILE, AMX_TILE, AMX_TILE}};
    _tile_loadconfig(&cfg);
}

// The top 16 bits of v's 16 floats, truncated to bf16 (a NaN kept NaN), in the top 16 bits of each
// 32-bit lane (the low ones zero), and in *v what they leave out (exact in float32; 0 for an
// infinity or NaN, whose top part carries it).
static inline __m512i amx_bf16_part_top(__m512 *v) {
    const __mmask16 nan = _mm512_fpclass_ps_mask(*v, 0x81), finite = (__mmask16)~_mm512_fpclass_ps_mask(*v, 0x99);
    __m512i top = _mm512_and_si512(_mm512_castps_si512(*v), _mm512_set1_epi32((int)0xffff0000u));
    top = _mm512_mask_or_epi32(top, nan, top, _mm512_set1_epi32(0x00400000));
    *v = _mm512_maskz_sub_ps(finite, *v, _mm512_castsi512_ps(top));
    return top;
}
// The same, as 16 bf16.
static inline __m256i amx_bf16_part(__m512 *v) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(amx_bf16_part_top(v), 16)); }

// The bf16 parts of 32 floats (a, b), as parts rows of 32 at d, d + stride, ... (d 32-byte aligned).
// One part is the floats rounded to bf16 (an operand rounded, not split); more are truncated
// parts that add up to them.
static inline void amx_split_32(__m512 a, __m512 b, int parts, uint16_t *d, int64_t stride) {
    if (parts == 1) {
        _mm256_store_si256((__m256i *)d, bf16_nearest_x16(a));
        _mm256_store_si256((__m256i *)(d + 16), bf16_nearest_x16(b));
        return;
    }
    for (int p = 0; p < parts; p++, d += stride) {
        _mm256_store_si256((__m256i *)d, amx_bf16_part(&a));
        _mm256_store_si256((__m256i *)(d + 16), amx_bf16_part(&b));
    }
}

// Rows [row0, row0 + 16) of x (n rows of cols elements, stride elements apart; float32, F16 or bf16)
// as A tiles: part p of those rows x columns [32 k, 32 k + 32) at dst[((k - k0) * parts + p) *
// AMX_TILE_ELEMS] for k in [k0, k0 + k_tiles), row t of the tile x's row row0 + t; `parts` bf16
// parts as amx_split_32 makes them (a bf16 x: one part, as it is); zeros past n and past cols.
void amx_rows_to_a(uint16_t *dst, const void *x, burst_dtype dtype, int64_t stride, int64_t n, int64_t cols,
                   int64_t row0, int64_t k0, int64_t k_tiles, int parts);
// The same as B tiles: row c / 2 of a tile holds (x[r][c], x[r][c + 1]) at 2 r (the 16 x 16
// transpose of the A tile's pairs), so that x's rows are B's columns.
void amx_rows_to_b(uint16_t *dst, const void *x, burst_dtype dtype, int64_t stride, int64_t n, int64_t cols,
                   int64_t row0, int64_t k0, int64_t k_tiles, int parts);

// One operand of amx_block: its two tiles (rows 0-15 and 16-31 of the block's A, or columns of its
// B), step k's part p at first + k * step + p * AMX_TILE_ELEMS and second likewise, rows `stride`
// bytes apart. Either's second may be NULL: its rows (A) or columns (B) 16-31 would be zeros.
typedef struct {
    const uint16_t *first, *second;
    int64_t step, stride;
    int parts;
} amx_operand;

// Loads step k's part p of an operand of amx_block into tiles 4-5 (a) or 6-7 (b).
static inline void amx_load_a(const amx_operand *a, int64_t k, int p) {
    _tile_loadd(4, a->first + k * a->step + p * AMX_TILE_ELEMS, a->stride);
    if (a->second) _tile_loadd(5, a->second + k * a->step + p * AMX_TILE_ELEMS, a->stride);
}
static inline void amx_load_b(const amx_operand *b, int64_t k, int p) {
    _tile_loadd(6, b->first + k * b->step + p * AMX_TILE_ELEMS, b->stride);
    if (b->second) _tile_loadd(7, b->second + k * b->step + p * AMX_TILE_ELEMS, b->stride);
}

// c (a 2 x 2 block of 16 x 16 float sums, rows c_stride floats apart; from zeros where zero) +=
// the tile products of k_tiles steps of a's parts by b's, those with p + q < AMX_PARTS (the
// products below 2^-24 of their term are left out). Tiles 0-3 hold the sums (0 and 1 the first
// rows, 0 and 2 the first columns), 4-5 a, 6-7 b. The operand of fewer parts goes round the outer
// loop, so that each of its parts is loaded once a step, and the other's parts once for each (once
// in all where it has one). Without a.second (b.second), the products of c's rows (columns) 16-31
// are left out, and those sums as they are.
static inline void amx_block(float *c, int64_t c_stride, int zero, amx_operand a, amx_operand b, int64_t k_tiles) {
    const size_t cs = (size_t)c_stride * sizeof(float);
    const int two_a = a.second != NULL, two_b = b.second != NULL;
    float *c1 = c + AMX_TILE, *c2 = c + AMX_TILE * c_stride, *c3 = c2 + AMX_TILE;
    if (zero) {
        _tile_zero(0);
        if (two_b) _tile_zero(1);
        if (two_a) _tile_zero(2);
        if (two_a && two_b) _tile_zero(3);
    } else {
        _tile_loadd(0, c, cs);
        if (two_b) _tile_loadd(1, c1, cs);
        if (two_a) _tile_loadd(2, c2, cs);
        if (two_a && two_b) _tile_loadd(3, c3, cs);
    }
    const int a_outer = a.parts <= b.parts, outer_parts = a_outer ? a.parts : b.parts, inner_parts = a_outer ? b.parts : a.parts;
    for (int64_t k = 0; k < k_tiles; k++)
        for (int o = 0; o < outer_parts; o++) {
            if (a_outer) amx_load_a(&a, k, o);
            else amx_load_b(&b, k, o);
            for (int i = 0; i < inner_parts && o + i < AMX_PARTS; i++) {
                if (o == 0 || inner_parts > 1) {
                    if (a_outer) amx_load_b(&b, k, i);
                    else amx_load_a(&a, k, i);
                }
                _tile_dpbf16ps(0, 4, 6);
                if (two_a) _tile_dpbf16ps(2, 5, 6);
                if (two_b) _tile_dpbf16ps(1, 4, 7);
                if (two_a && two_b) _tile_dpbf16ps(3, 5, 7);
            }
        }
    _tile_stored(0, c, cs);
    if (two_b) _tile_stored(1, c1, cs);
    if (two_a) _tile_stored(2, c2, cs);
    if (two_a && two_b) _tile_stored(3, c3, cs);
}
#endif
