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
// A is x and B is W^T, so a tile of C holds 16 tokens x 16 weight rows: a token's sums lie together,
// as out wants them. x is copied into A tiles once per call (amx_rows_to_a; split where float32).
// The CPU backends lay BF16 matrices (and cpu-bf16 its F16 ones) out as B tiles at load
// (amx_tiles_from), so that every call reads them contiguously, with no copy, from one token on. A
// weight as stored (rows as W lays them out: `cpu`'s F16 ones, and any weight given to matmul_cpu
// directly) is copied into B tiles (F16 ones widened and split), KC columns at a time as the first
// NC tokens need them (the copy still in L2 for those), and read from the copy for each further NC
// tokens: each NC tokens copying them again would read W from memory again.
// Each thread takes MC weight rows at a time. The sums of NC tokens x MC rows stay in L2 while KC
// columns at a time are added to them (the 32 rows' KC columns in L1, NC tokens' KC columns in L2),
// and are stored as out_dtype once the last columns are in. Where a few tokens read tiles, each 32
// rows take all the columns at once, the sums in tile registers. matmul_amx_swiglu does the same
// for two weights at once (the MLP's gate and up), a second L2 buffer holding the second's sums,
// and stores SwiGLU of the two.
#include "matmul_amx.h"
#include "matmul_cpu.h"

#include "common/amx.h"
#include "common/burst.h"
#include "swiglu.h"

enum { TILE = AMX_TILE, TILE_K = AMX_TILE_K, TILE_ELEMS = AMX_TILE_ELEMS, X_PARTS = AMX_PARTS };

static int64_t tiles_k(int64_t cols) { return (cols + TILE_K - 1) / TILE_K; }

size_t amx_tiles_bytes(int64_t rows, int64_t cols) {
    return sizeof(uint16_t) * (size_t)(amx_pad_to_block(rows) * tiles_k(cols) * TILE_K);
}

// Where W's element (row, col) lies in its B tiles: pairs of columns, a pair's 16 rows together.
static int64_t tiles_at(int64_t k_tiles, int64_t row, int64_t col) {
    return (row / TILE * k_tiles + col / TILE_K) * TILE_ELEMS + col % TILE_K / 2 * TILE_K + row % TILE * 2 + col % 2;
}

void amx_tiles_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst) {
    const int64_t k_tiles = tiles_k(w->cols);
    for (int64_t i = first, left = n; left > 0;) { // the elements within one row at a time
        const int64_t row = i / w->cols, col0 = i % w->cols, run = w->cols - col0 < left ? w->cols - col0 : left;
        for (int64_t col = col0; col < col0 + run; col++) *dst++ = bf16_to_f32(((const uint16_t *)w->data)[tiles_at(k_tiles, row, col)]);
        i += run, left -= run;
    }
}

#ifdef BURST_AMX_BUILD
#include <limits.h>
#include <stdlib.h>
// MC weight rows x NC tokens of sums (256 KB), KC columns added at a time.
enum { MC = 128, NC = 512, KC = 256 };
// Below these many tokens the vector paths of matmul_cpu.c are as fast for weights as stored
// (bench/bench_matmul_cpu.c): an F16 weight's split costs more than its 5 tile products save
// against the float32 GEMM (even at 64 to 128, 1.2x faster at 256 and more). A BF16 one as stored
// comes here only from matmul_cpu's direct callers (the CPU backends hold BF16 matrices as tiles):
// 16 was measured when such rows were read in place, not copied (fewer than 16 of a block's 32
// tokens left the few-token path ahead). Up to FEW_TOKENS (padded), tiles at load are read whole for
// each 32 rows.
enum { AMX_F16_MIN_TOKENS = 128, AMX_BF16_MIN_TOKENS = 16, FEW_TOKENS = 64 };

// Rows [r0, r0 + mr) x columns [k0, k0 + kn) of W (mr and kn multiples of 32; zeros past W's edges)
// as B tiles: ws[i * i_stride + (k * parts + p) * TILE_ELEMS] is part p of rows [16 i, 16 i + 16) x
// columns [k0 + 32 k, k0 + 32 k + 32); F16 weights split into two bf16 parts, or with one part
// rounded to bf16.
static void copy_w(uint16_t *ws, int64_t i_stride, const burst_weight *W, int64_t r0, int64_t mr, int64_t k0,
                   int64_t kn, int parts) {
    for (int64_t i = 0; i < mr / TILE; i++)
        amx_rows_to_b(ws + i * i_stride, W->data, W->dtype, W->cols, W->rows, W->cols, r0 + i * TILE, k0 / TILE_K, kn / TILE_K, parts);
}

void amx_tiles_from(uint16_t *dst, const burst_weight *W, int n_threads) {
    const int64_t k_tiles = tiles_k(W->cols), groups = amx_pad_to_block(W->rows) / TILE;
    #pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t g = 0; g < groups; g++)
        amx_rows_to_b(dst + g * k_tiles * TILE_ELEMS, W->data, W->dtype, W->cols, W->rows, W->cols, g * TILE, 0, k_tiles, 1);
}

// What a call allocates: x's tiles, and each thread's copy of MC weight rows and its sums.
static size_t x_tiles_bytes(int64_t n_pad, int64_t k_tiles, int x_parts) {
    return sizeof(uint16_t) * (size_t)(n_pad / TILE * k_tiles * x_parts * TILE_ELEMS);
}
static size_t w_copy_bytes(int64_t w_k, int w_parts) { return sizeof(uint16_t) * MC * (size_t)(w_k * TILE_K * w_parts); }
static size_t sums_bytes(int64_t nc) { return sizeof(float) * (size_t)nc * MC; } // [token][row of the block]

// The tokens whose sums a thread holds at a time, and the column tiles its copy of a weight block
// keeps: KC columns at a time, or all of them where several NC tokens read them (MC x cols x 2 to 4
// bytes: 5.6 MB for F16 at 11008 columns).
static int64_t sums_tokens(int64_t n_pad) { return n_pad < NC ? n_pad : NC; }
static int64_t copy_k_tiles(int64_t n_pad, int64_t k_tiles) { return n_pad > NC ? k_tiles : KC / TILE_K; }

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) {
    const int64_t n_pad = amx_pad_to_block(n), k_tiles = tiles_k(cols);
    const size_t per_thread = w_copy_bytes(copy_k_tiles(n_pad, k_tiles), 2) + 2 * sums_bytes(sums_tokens(n_pad)); // 2: gate, up
    return !amx_usable() ? 0 : x_tiles_bytes(n_pad, k_tiles, X_PARTS) + (size_t)n_threads * per_thread;
}

// c[t * MC + r] (t < nt tokens, r < mr rows) into out (n, rows) at tokens t0 + t, rows r0 + r, as
// out_dtype (rounded to nearest) or added to it; with up, silu(c) x up[t * MC + r] (swiglu_x16).
static void store_sums(void *out, burst_dtype out_dtype, int accumulate, int64_t rows, const float *c, const float *up,
                       int64_t r0, int64_t mr, int64_t t0, int64_t nt) {
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < mr; r += TILE) {
            const int64_t o = (t0 + t) * rows + r0 + r;
            const __mmask16 m = mask_first16(mr - r);
            __m512 s = _mm512_load_ps(c + t * MC + r);
            if (up) s = swiglu_x16(s, _mm512_load_ps(up + t * MC + r));
            act_set_x16(out, out_dtype, accumulate, o, m, s);
        }
}

// What a call's blocks share: x in A tiles, and how W's columns are taken.
typedef struct {
    const uint16_t *xs;
    int64_t x_tile_row, k_tiles, kc; // x's tiles of 16 tokens apart; W's column tiles; columns at a time
    int64_t w_k, w_i;                // a weight block's copy: its column tiles, 16 rows apart (as stored)
    int x_parts, w_parts, n;
} amx_call;

// The sums of W's rows [r0, r0 + mr_pad) by tokens [t0, t0 + nt) into c (token t's at (t - t0) x MC),
// KC columns at a time (all where few tokens read tiles); W as stored is copied into ws first.
static void block_sums(const amx_call *a, const burst_weight *W, uint16_t *ws, float *c, int64_t r0, int64_t mr_pad,
                       int64_t t0, int64_t nt) {
    const int64_t k_tiles = a->k_tiles, kc = a->kc;
    for (int64_t k0 = 0; k0 < k_tiles * TILE_K; k0 += kc) {
        const int64_t kn = k_tiles * TILE_K - k0 < kc ? k_tiles * TILE_K - k0 : kc, kt = kn / TILE_K;
        // these columns' place in the copy: after the earlier ones where it keeps them all
        uint16_t *wk = ws ? ws + (a->w_k == k_tiles ? k0 / TILE_K : 0) * a->w_parts * TILE_ELEMS : NULL;
        if (wk && t0 == 0) copy_w(wk, a->w_i, W, r0, mr_pad, k0, kn, a->w_parts);
        for (int64_t r = 0; r < mr_pad; r += 2 * TILE) {
            amx_operand b;
            if (W->amx_tiles) {
                const uint16_t *wt = (const uint16_t *)W->data + ((r0 + r) / TILE * k_tiles + k0 / TILE_K) * TILE_ELEMS;
                b = (amx_operand){wt, wt + k_tiles * TILE_ELEMS, TILE_ELEMS, 64, 1};
            } else {
                const uint16_t *wc = wk + r / TILE * a->w_i;
                b = (amx_operand){wc, wc + a->w_i, a->w_parts * TILE_ELEMS, 64, a->w_parts};
            }
            for (int64_t t = t0; t < t0 + nt; t += 2 * TILE) {
                const uint16_t *xa = a->xs + (t / TILE) * a->x_tile_row + k0 / TILE_K * a->x_parts * TILE_ELEMS;
                // 32 tokens x 32 weight rows of the sums: x's two tiles of 16 tokens (one where the second
                // would hold no token) by W's two of 16 rows
                amx_block(c + (t - t0) * MC + r, MC, k0 == 0,
                          (amx_operand){xa, t + TILE < a->n ? xa + a->x_tile_row : NULL, a->x_parts * TILE_ELEMS, 64, a->x_parts},
                          b, kt);
            }
        }
    }
}

// matmul_amx, or with W_up (the same shape, in tiles) out = silu(x W^T) x (x W_up^T): both weights'
// sums of a block in L2, combined as they are stored.
static int matmul_amx_with(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                           const burst_weight *W, const burst_weight *W_up, int n, int n_threads) {
    const int min_tokens = W->amx_tiles ? 1
                           : W->dtype == DTYPE_BF16 ? AMX_BF16_MIN_TOKENS
                           : W->dtype == DTYPE_F16  ? AMX_F16_MIN_TOKENS
                                                    : INT_MAX;
    if (n < min_tokens || !amx_usable()) return 0;
    const int64_t rows = W->rows, cols = W->cols, k_tiles = tiles_k(cols), n_pad = amx_pad_to_block(n);
    const int x_parts = x_dtype == DTYPE_BF16 ? 1 : X_PARTS, w_parts = W->dtype == DTYPE_BF16 ? 1 : 2; // tiles are BF16
    const int64_t blocks = (rows + MC - 1) / MC, nc = sums_tokens(n_pad), w_k = copy_k_tiles(n_pad, k_tiles);
    uint16_t *xs = burst_malloc_aligned(x_tiles_bytes(n_pad, k_tiles, x_parts));
    const amx_call a = {.xs = xs, .x_tile_row = k_tiles * x_parts * TILE_ELEMS, .k_tiles = k_tiles,
                        .kc = W->amx_tiles && n_pad <= FEW_TOKENS ? k_tiles * TILE_K : KC, .w_k = w_k,
                        .w_i = w_k * w_parts * TILE_ELEMS, .x_parts = x_parts, .w_parts = w_parts, .n = n};
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t g = 0; g < n_pad / TILE; g++) amx_rows_to_a(xs + g * a.x_tile_row, x, x_dtype, cols, n, cols, g * TILE, 0, k_tiles, x_parts);
        uint16_t *ws = W->amx_tiles ? NULL : burst_malloc_aligned(w_copy_bytes(w_k, w_parts));
        float *c = burst_malloc_aligned(sums_bytes(nc)), *c_up = W_up ? burst_malloc_aligned(sums_bytes(nc)) : NULL;
        amx_load_tile_config();
        #pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * MC, mr = rows - r0 < MC ? rows - r0 : MC, mr_pad = amx_pad_to_block(mr);
            for (int64_t t0 = 0; t0 < n_pad; t0 += nc) {
                const int64_t nt = n_pad - t0 < nc ? n_pad - t0 : nc;
                block_sums(&a, W, ws, c, r0, mr_pad, t0, nt);
                if (W_up) block_sums(&a, W_up, NULL, c_up, r0, mr_pad, t0, nt);
                store_sums(out, out_dtype, accumulate, rows, c, c_up, r0, mr, t0, n - t0 < nt ? n - t0 : nt);
            }
        }
        _tile_release();
        free(ws), free(c), free(c_up);
    }
    free(xs);
    return 1;
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    return matmul_amx_with(out, out_dtype, accumulate, x, x_dtype, W, NULL, n, n_threads);
}

int matmul_amx_swiglu(void *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype, const burst_weight *W_gate,
                      const burst_weight *W_up, int n, int n_threads) {
    if (!W_gate->amx_tiles || !W_up->amx_tiles) return 0;
    return matmul_amx_with(out, out_dtype, 0, x, x_dtype, W_gate, W_up, n, n_threads);
}
#else
size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) { return 0; }

void amx_tiles_from(uint16_t *dst, const burst_weight *W, int n_threads) {
    BURST_ASSERT(!"amx_tiles_from without AMX"); // callers ask amx_usable(), 0 in this build
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    return 0;
}

int matmul_amx_swiglu(void *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype, const burst_weight *W_gate,
                      const burst_weight *W_up, int n, int n_threads) {
    return 0;
}
#endif
