// The CPU matmul's many-token path on Intel AMX (Sapphire Rapids and later): out (n, rows) =
// x (n, cols) @ W^T for BF16 and F16 weights, in 16 x 32 bf16 tiles multiplied into 16 x 16
// float32 sums (TDPBF16PS), several times the float32 GEMM's multiply-adds a cycle.
//
// It stays a float32 matmul (common/amx.h): each float32 x is split into three bf16 parts and each
// F16 weight into two (its 11 bits); the products of the parts are summed in float32, as the
// float32 GEMM sums. The one product left out, an F16 weight's low part times x's lowest, is below
// 2^-24 of the term. A BF16 weight costs 3 tile products, an F16 one 5; bf16 x needs no split (1
// and 2).
//
// A is x (tokens by columns, as x is laid out) and B is W^T, so a tile of C holds 16 tokens x 16
// weight rows, stored as out's rows are. x is split into tiles once per call; W is widened and
// transposed in pairs a block of MC rows x KC columns at a time, into L2, where every 32 tokens
// read it; a block's sums for all tokens gather in a per-thread buffer and are stored as out_dtype
// once its last columns are in.
#include "matmul_amx.h"

#include "common/amx.h"
#include "matmul_cpu.h"

#ifdef BURST_AMX_BUILD
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

// MC and KC: the weight block widened at a time (128 KB of bf16 parts for F16, in L2).
enum { TILE = AMX_TILE, TILE_K = AMX_TILE_K, TILE_ELEMS = AMX_TILE_ELEMS, MC = 128, KC = 256, X_PARTS = AMX_PARTS };
// Below this many tokens an F16 weight's split costs more than its 5 tile products save against
// the float32 GEMM (bench/bench_matmul_cpu.c; even at 64 to 128, 1.2x faster at 256 and more).
enum { AMX_F16_MIN_TOKENS = 128 };

// x's n tokens split into tiles: xs[((b * k_tiles + k) * parts + p) * TILE_ELEMS] is part p of tokens
// [16 b, 16 b + 16) x columns [32 k, 32 k + 32); zeros past n and past cols.
static void split_x(uint16_t *xs, const void *x, burst_dtype x_dtype, int64_t n, int64_t cols, int64_t b,
                    int64_t k_tiles, int parts) {
    for (int64_t t = 0; t < TILE; t++)
        for (int64_t k = 0; k < k_tiles; k++) {
            const int64_t token = b * TILE + t, left = token < n ? cols - k * TILE_K : 0;
            uint16_t *d = xs + (b * k_tiles + k) * parts * TILE_ELEMS + t * TILE_K;
            if (x_dtype == DTYPE_BF16) {
                const uint16_t *src = (const uint16_t *)x + (token < n ? token * cols + k * TILE_K : 0);
                _mm512_store_si512(d, _mm512_maskz_loadu_epi16(amx_first32(left), src));
            } else {
                const float *src = (const float *)x + (token < n ? token * cols + k * TILE_K : 0);
                amx_split_32(_mm512_maskz_loadu_ps(amx_first16(left), src), _mm512_maskz_loadu_ps(amx_first16(left - 16), src + 16),
                             parts, d, TILE_ELEMS);
            }
        }
}

// Rows [r0, r0 + mr) x columns [k0, k0 + kn) of W (mr and kn multiples of 32; zeros past W's edges)
// as tiles of pairs: ws[((i * (kn / 32) + k) * parts + p) * TILE_ELEMS] is part p of rows
// [16 i, 16 i + 16) x columns [32 k, 32 k + 32), whose row c / 2 holds (W[r][c], W[r][c + 1]) at 2 r:
// a row of 32 16-bit weights is 16 such pairs, so the tile is the 16 x 16 transpose of the rows'
// pairs. F16 weights are split after the transpose, which moves pairs and leaves them whole.
static void pack_w(uint16_t *ws, const burst_weight *W, int64_t r0, int64_t mr, int64_t k0, int64_t kn, int parts) {
    const int64_t k_tiles = kn / TILE_K;
    for (int64_t i = 0; i < mr / TILE; i++)
        for (int64_t k = 0; k < k_tiles; k++) {
            __m512i t[TILE];
            for (int64_t r = 0; r < TILE; r++) {
                const int64_t row = r0 + i * TILE + r, col = k0 + k * TILE_K;
                const __mmask32 m = row < W->rows ? amx_first32(W->cols - col) : 0;
                t[r] = _mm512_maskz_loadu_epi16(m, (const uint16_t *)W->data + (row < W->rows ? row * W->cols + col : 0));
            }
            amx_transpose_16x16(t);
            uint16_t *d = ws + (i * k_tiles + k) * parts * TILE_ELEMS;
            for (int r = 0; r < TILE; r++)
                if (parts == 1) _mm512_store_si512(d + r * TILE_K, t[r]);
                else amx_split_32(_mm512_cvtph_ps(_mm512_castsi512_si256(t[r])), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(t[r], 1)),
                                  2, d + r * TILE_K, TILE_ELEMS);
        }
}

// What a call allocates: x's tiles, and each thread's weight block and sums.
static size_t x_tiles_bytes(int64_t n_pad, int64_t k_tiles, int x_parts) {
    return sizeof(uint16_t) * (size_t)(n_pad / TILE * k_tiles * x_parts * TILE_ELEMS);
}
static size_t w_block_bytes(int w_parts) { return sizeof(uint16_t) * MC * KC * (size_t)w_parts; }
static size_t sums_bytes(int64_t n_pad) { return sizeof(float) * (size_t)n_pad * MC; } // [token][row of the block]

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) {
    const int64_t n_pad = amx_pad_to_block(n);
    return !amx_usable() ? 0 : x_tiles_bytes(n_pad, (cols + TILE_K - 1) / TILE_K, X_PARTS) +
                                   (size_t)n_threads * (w_block_bytes(2) + sums_bytes(n_pad));
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    if (!(W->dtype == DTYPE_BF16 || (W->dtype == DTYPE_F16 && n >= AMX_F16_MIN_TOKENS)) || !amx_usable()) return 0;
    const int64_t rows = W->rows, cols = W->cols, k_tiles = (cols + TILE_K - 1) / TILE_K, n_pad = amx_pad_to_block(n);
    const int x_parts = x_dtype == DTYPE_BF16 ? 1 : X_PARTS, w_parts = W->dtype == DTYPE_BF16 ? 1 : 2;
    const int64_t blocks = (rows + MC - 1) / MC, x_tile_row = k_tiles * x_parts * TILE_ELEMS;
    uint16_t *xs = burst_malloc_aligned(x_tiles_bytes(n_pad, k_tiles, x_parts));
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < n_pad / TILE; b++) split_x(xs, x, x_dtype, n, cols, b, k_tiles, x_parts);
        uint16_t *ws = burst_malloc_aligned(w_block_bytes(w_parts));
        float *c = burst_malloc_aligned(sums_bytes(n_pad));
        amx_load_tile_config();
        #pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * MC, mr = rows - r0 < MC ? rows - r0 : MC, mr_pad = amx_pad_to_block(mr);
            memset(c, 0, sums_bytes(n_pad));
            for (int64_t k0 = 0; k0 < k_tiles * TILE_K; k0 += KC) {
                const int64_t kn = k_tiles * TILE_K - k0 < KC ? k_tiles * TILE_K - k0 : KC, kt = kn / TILE_K;
                pack_w(ws, W, r0, mr_pad, k0, kn, w_parts);
                for (int64_t t = 0; t < n_pad; t += 2 * TILE)
                    for (int64_t r = 0; r < mr_pad; r += 2 * TILE) {
                        const uint16_t *xa = xs + (t / TILE) * x_tile_row + k0 / TILE_K * x_parts * TILE_ELEMS;
                        const uint16_t *wa = ws + r / TILE * kt * w_parts * TILE_ELEMS;
                        // 32 tokens x 32 weight rows of the sums: x's two tiles of 16 tokens by W's two of 16 rows
                        amx_block(c + t * MC + r, MC, 0,
                                  (amx_operand){xa, xa + x_tile_row, x_parts * TILE_ELEMS, 64, x_parts},
                                  (amx_operand){wa, wa + kt * w_parts * TILE_ELEMS, w_parts * TILE_ELEMS, 64, w_parts}, kt);
                    }
            }
            for (int64_t t = 0; t < n; t++)
                for (int64_t r = 0; r < mr; r++) {
                    int64_t o = t * rows + r0 + r;
                    if (accumulate) ((float *)out)[o] += c[t * MC + r];
                    else act_set(out, out_dtype, o, c[t * MC + r]);
                }
        }
        _tile_release();
        free(ws), free(c);
    }
    free(xs);
    return 1;
}
#else
size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) { return 0; }

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    return 0;
}
#endif
