// The CPU matmul on Intel AMX (Sapphire Rapids and later): out (n, rows) = x (n, cols) @ W^T for
// BF16 and F16 weights, in 16 x 32 bf16 tiles multiplied into 16 x 16 float32 sums (TDPBF16PS),
// several times the float32 GEMM's multiply-adds a cycle.
//
// It stays a float32 matmul (common/amx.h): each float32 x is split into three bf16 parts and each
// F16 weight into two (its 11 bits); the products of the parts are summed in float32, as the
// float32 GEMM sums. The one product left out, an F16 weight's low part times x's lowest, is below
// 2^-24 of the term. A BF16 weight costs 3 tile products, an F16 one 5; bf16 x needs no split (1
// and 2).
//
// A is W (rows by columns, as W is laid out) and B is x^T, so a tile of C holds 16 weight rows x 16
// tokens. x is split and transposed into tiles once per call (amx_rows_to_b). W is read a block of
// MC rows x KC columns at a time: BF16 rows where they lie when one or two blocks of 32 tokens read
// them (a decode step's few tokens: each weight is used once or twice, and copying it would cost as
// much as its tile products), otherwise copied into L2 (F16 ones widened and split), where every 32
// tokens read them; copies of rows that AMX reads 16 rows at a time, 8 KB apart, would fall into
// one cache set. A block's sums for all tokens gather in a per-thread buffer and are stored as
// out_dtype once its last columns are in.
#include "matmul_amx.h"

#include "common/amx.h"
#include "matmul_cpu.h"

#ifdef BURST_AMX_BUILD
#include <limits.h>
#include <stdlib.h>

#include "common/burst.h"

// MC and KC: the weight block copied at a time (128 KB of bf16 parts for F16, in L2).
enum { TILE = AMX_TILE, TILE_K = AMX_TILE_K, TILE_ELEMS = AMX_TILE_ELEMS, MC = 128, KC = 256, X_PARTS = AMX_PARTS };
// Below these many tokens the vector paths of matmul_cpu.c are as fast (bench/bench_matmul_cpu.c):
// an F16 weight's split costs more than its 5 tile products save against the float32 GEMM (even at
// 64 to 128, 1.2x faster at 256 and more); with bf16 x, 2 products, it pays from 48 (1.9 / 1.0x at
// 40, 2.1 / 1.6x at 64 on 4096 / 11008 rows); a BF16 one's 3 run on 32 tokens, of which fewer than 16
// leave the few-token path ahead (2x at 8 tokens, even at 16, AMX 1.5x at 24; with bf16 x, 1
// product, 0.9x at 8, 1.3 / 1.9x at 16). Up to DIRECT_MAX_TOKENS (padded), BF16 rows are read
// where they lie.
enum { AMX_F16_MIN_TOKENS = 128, AMX_F16_BF16_X_MIN_TOKENS = 48, AMX_BF16_MIN_TOKENS = 16, DIRECT_MAX_TOKENS = 64 };

// Rows [r0, r0 + mr) x columns [k0, k0 + kn) of W (mr and kn multiples of 32; zeros past W's edges)
// as A tiles: ws[((i * (kn / 32) + k) * parts + p) * TILE_ELEMS] is part p of rows [16 i, 16 i + 16)
// x columns [32 k, 32 k + 32), as W lays them out; F16 weights split into two bf16 parts.
static void copy_w(uint16_t *ws, const burst_weight *W, int64_t r0, int64_t mr, int64_t k0, int64_t kn, int parts) {
    const int64_t k_tiles = kn / TILE_K;
    for (int64_t i = 0; i < mr / TILE; i++)
        for (int64_t k = 0; k < k_tiles; k++)
            for (int64_t r = 0; r < TILE; r++) {
                const int64_t row = r0 + i * TILE + r, col = k0 + k * TILE_K;
                const __mmask32 m = row < W->rows ? amx_first32(W->cols - col) : 0;
                const __m512i w = _mm512_maskz_loadu_epi16(m, (const uint16_t *)W->data + (row < W->rows ? row * W->cols + col : 0));
                uint16_t *d = ws + (i * k_tiles + k) * parts * TILE_ELEMS + r * TILE_K;
                if (parts == 1) _mm512_store_si512(d, w);
                else amx_split_32(_mm512_cvtph_ps(_mm512_castsi512_si256(w)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1)), 2, d,
                                  TILE_ELEMS);
            }
}

// What a call allocates: x's tiles, and each thread's weight block and sums.
static size_t x_tiles_bytes(int64_t n_pad, int64_t k_tiles, int x_parts) {
    return sizeof(uint16_t) * (size_t)(n_pad / TILE * k_tiles * x_parts * TILE_ELEMS);
}
static size_t w_block_bytes(int w_parts) { return sizeof(uint16_t) * MC * KC * (size_t)w_parts; }
static size_t sums_bytes(int64_t n_pad) { return sizeof(float) * (size_t)n_pad * MC; } // [row of the block][token]

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) {
    const int64_t n_pad = amx_pad_to_block(n);
    return !amx_usable() ? 0 : x_tiles_bytes(n_pad, (cols + TILE_K - 1) / TILE_K, X_PARTS) +
                                   (size_t)n_threads * (w_block_bytes(2) + sums_bytes(n_pad));
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    const int min_tokens = W->dtype == DTYPE_BF16                             ? AMX_BF16_MIN_TOKENS
                           : W->dtype == DTYPE_F16 && x_dtype == DTYPE_BF16 ? AMX_F16_BF16_X_MIN_TOKENS
                           : W->dtype == DTYPE_F16                          ? AMX_F16_MIN_TOKENS
                                                                            : INT_MAX;
    if (n < min_tokens || !amx_usable()) return 0;
    const int64_t rows = W->rows, cols = W->cols, k_tiles = (cols + TILE_K - 1) / TILE_K, n_pad = amx_pad_to_block(n);
    const int x_parts = x_dtype == DTYPE_BF16 ? 1 : X_PARTS, w_parts = W->dtype == DTYPE_BF16 ? 1 : 2;
    const int64_t blocks = (rows + MC - 1) / MC, x_tile_row = k_tiles * x_parts * TILE_ELEMS;
    uint16_t *xs = burst_malloc_aligned(x_tiles_bytes(n_pad, k_tiles, x_parts));
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < n_pad / TILE; b++)
            amx_rows_to_b(xs, x, x_dtype == DTYPE_BF16, cols, n, cols, b, k_tiles, x_parts);
        uint16_t *ws = burst_malloc_aligned(w_block_bytes(w_parts));
        float *c = burst_malloc_aligned(sums_bytes(n_pad));
        amx_load_tile_config();
        #pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * MC, mr = rows - r0 < MC ? rows - r0 : MC, mr_pad = amx_pad_to_block(mr);
            const int direct = W->dtype == DTYPE_BF16 && n_pad <= DIRECT_MAX_TOKENS && r0 + mr_pad <= rows && cols % TILE_K == 0;
            for (int64_t k0 = 0; k0 < k_tiles * TILE_K; k0 += KC) {
                const int64_t kn = k_tiles * TILE_K - k0 < KC ? k_tiles * TILE_K - k0 : KC, kt = kn / TILE_K;
                if (!direct) copy_w(ws, W, r0, mr_pad, k0, kn, w_parts);
                for (int64_t r = 0; r < mr_pad; r += 2 * TILE) {
                    const uint16_t *wd = (const uint16_t *)W->data + (r0 + r) * cols + k0; // in place
                    const uint16_t *wc = ws + r / TILE * kt * w_parts * TILE_ELEMS;           // copied
                    const amx_operand a = direct ? (amx_operand){wd, wd + TILE * cols, TILE_K, cols * 2, 1}
                                                 : (amx_operand){wc, wc + kt * w_parts * TILE_ELEMS, w_parts * TILE_ELEMS, 64, w_parts};
                    // the next columns of these 32 rows, from memory: the tile loads alone wait on it (half the
                    // speed at 11008 columns)
                    for (int64_t i = 0; direct && i < 2 * TILE; i++)
                        for (int64_t j = KC; j < 2 * KC && k0 + j < cols; j += 64 / sizeof(uint16_t))
                            _mm_prefetch((const char *)(wd + i * cols + j), _MM_HINT_T0);
                    for (int64_t t = 0; t < n_pad; t += 2 * TILE) {
                        const uint16_t *xb = xs + (t / TILE) * x_tile_row + k0 / TILE_K * x_parts * TILE_ELEMS;
                        // 32 weight rows x 32 tokens of the sums: W's two tiles of 16 rows by x's two of 16 tokens
                        amx_block(c + r * n_pad + t, n_pad, k0 == 0, a,
                                  (amx_operand){xb, xb + x_tile_row, x_parts * TILE_ELEMS, 64, x_parts}, kt);
                    }
                }
            }
            for (int64_t t = 0; t < n; t++)
                for (int64_t r = 0; r < mr; r++) {
                    int64_t o = t * rows + r0 + r;
                    if (accumulate) ((float *)out)[o] += c[r * n_pad + t];
                    else act_set(out, out_dtype, o, c[r * n_pad + t]);
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
