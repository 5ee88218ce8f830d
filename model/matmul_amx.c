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
// A is W and B is x^T, so a tile of C holds 16 weight rows x 16 tokens. x is split and transposed
// into tiles once per call (amx_rows_to_b). The CPU backends lay BF16 matrices (and cpu-bf16 its
// F16 ones) out as tiles at load (amx_tiles_from), so that every call reads them contiguously, with
// no copy, from one token on. A weight as stored (rows as W lays them out: `cpu`'s F16 ones, and
// any weight given to matmul_cpu directly) is read in place where it is BF16 and one or two blocks
// of 32 tokens read it (a decode step's few tokens: each weight is used once or twice, and copying
// it would cost as much as its tile products); otherwise copied into tiles (F16 ones widened and
// split), KC columns at a time as the first NC tokens need them (the copy still in L2 for those),
// and read from the copy for each further NC tokens: copies of rows that AMX reads 16 rows at a
// time, 8 KB apart, would fall into one cache set, and each NC tokens copying them again would
// read W from memory again.
// Each thread takes MC weight rows at a time. The sums of MC rows x NC tokens stay in L2 while KC
// columns at a time are added to them (the 32 rows' KC columns in L1, NC tokens' KC columns in L2),
// and are stored as out_dtype, 16 x 16 transposed in registers, once the last columns are in. Where
// a few tokens read tiles, each 32 rows take all the columns at once, the sums in tile registers.
#include "matmul_amx.h"

#include "common/amx.h"

#include "common/burst.h"

enum { TILE = AMX_TILE, TILE_K = AMX_TILE_K, TILE_ELEMS = AMX_TILE_ELEMS, X_PARTS = AMX_PARTS };

static int64_t tiles_k(int64_t cols) { return (cols + TILE_K - 1) / TILE_K; }

size_t amx_tiles_bytes(int64_t rows, int64_t cols) {
    return sizeof(uint16_t) * (size_t)(amx_pad_to_block(rows) * tiles_k(cols) * TILE_K);
}

// Where W's element (row, col) lies in its tiles.
static int64_t tiles_at(int64_t k_tiles, int64_t row, int64_t col) {
    return (row / TILE * k_tiles + col / TILE_K) * TILE_ELEMS + row % TILE * TILE_K + col % TILE_K;
}

void amx_tiles_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst) {
    const int64_t k_tiles = tiles_k(w->cols);
    for (int64_t i = first, left = n; left > 0;) { // the elements within one row at a time
        const int64_t row = i / w->cols, col0 = i % w->cols, run = w->cols - col0 < left ? w->cols - col0 : left;
        const uint16_t *in_row = (const uint16_t *)w->data + tiles_at(k_tiles, row, 0);
        for (int64_t col = col0; col < col0 + run; col++) *dst++ = bf16_to_f32(in_row[col / TILE_K * TILE_ELEMS + col % TILE_K]);
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
// against the float32 GEMM (even at 64 to 128, 1.2x faster at 256 and more); a BF16 one's 3 run on
// 32 tokens, of which fewer than 16 leave the few-token path ahead (2x at 8 tokens, even at 16, AMX
// 1.5x at 24). Up to DIRECT_MAX_TOKENS (padded), BF16 rows are read where they lie.
enum { AMX_F16_MIN_TOKENS = 128, AMX_BF16_MIN_TOKENS = 16, DIRECT_MAX_TOKENS = 64 };

// Rows [r0, r0 + mr) x columns [k0, k0 + kn) of W (mr and kn multiples of 32; zeros past W's edges)
// as A tiles: ws[i * i_stride + (k * parts + p) * TILE_ELEMS] is part p of rows [16 i, 16 i + 16) x
// columns [k0 + 32 k, k0 + 32 k + 32), as W lays them out; F16 weights split into two bf16 parts,
// or with one part rounded to bf16.
static void copy_w(uint16_t *ws, int64_t i_stride, const burst_weight *W, int64_t r0, int64_t mr, int64_t k0,
                   int64_t kn, int parts) {
    for (int64_t i = 0; i < mr / TILE; i++)
        for (int64_t k = 0; k < kn / TILE_K; k++)
            for (int64_t r = 0; r < TILE; r++) {
                const int64_t row = r0 + i * TILE + r, col = k0 + k * TILE_K;
                const __mmask32 m = row < W->rows ? amx_first32(W->cols - col) : 0;
                const __m512i w = _mm512_maskz_loadu_epi16(m, (const uint16_t *)W->data + (row < W->rows ? row * W->cols + col : 0));
                uint16_t *d = ws + i * i_stride + k * parts * TILE_ELEMS + r * TILE_K;
                if (W->dtype == DTYPE_BF16) _mm512_store_si512(d, w);
                else amx_split_32(_mm512_cvtph_ps(_mm512_castsi512_si256(w)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1)), parts, d,
                                  TILE_ELEMS);
            }
}

void amx_tiles_from(uint16_t *dst, const burst_weight *W, int n_threads) {
    const int64_t k_tiles = tiles_k(W->cols), blocks = amx_pad_to_block(W->rows) / (2 * TILE);
    #pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t b = 0; b < blocks; b++)
        copy_w(dst + b * 2 * k_tiles * TILE_ELEMS, k_tiles * TILE_ELEMS, W, b * 2 * TILE, 2 * TILE, 0, k_tiles * TILE_K, 1);
}

// What a call allocates: x's tiles, and each thread's copy of MC weight rows and its sums.
static size_t x_tiles_bytes(int64_t n_pad, int64_t k_tiles, int x_parts) {
    return sizeof(uint16_t) * (size_t)(n_pad / TILE * k_tiles * x_parts * TILE_ELEMS);
}
static size_t w_copy_bytes(int64_t w_k, int w_parts) { return sizeof(uint16_t) * MC * (size_t)(w_k * TILE_K * w_parts); }
static size_t sums_bytes(int64_t nc) { return sizeof(float) * (size_t)nc * MC; } // [row of the block][token]

// The tokens whose sums a thread holds at a time, and the column tiles its copy of a weight block
// keeps: KC columns at a time, or all of them where several NC tokens read them (MC x cols x 2 to 4
// bytes: 5.6 MB for F16 at 11008 columns).
static int64_t sums_tokens(int64_t n_pad) { return n_pad < NC ? n_pad : NC; }
static int64_t copy_k_tiles(int64_t n_pad, int64_t k_tiles) { return n_pad > NC ? k_tiles : KC / TILE_K; }

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) {
    const int64_t n_pad = amx_pad_to_block(n), k_tiles = tiles_k(cols);
    const size_t per_thread = w_copy_bytes(copy_k_tiles(n_pad, k_tiles), 2) + sums_bytes(sums_tokens(n_pad));
    return !amx_usable() ? 0 : x_tiles_bytes(n_pad, k_tiles, X_PARTS) + (size_t)n_threads * per_thread;
}

// c[r * nc + t] (r < mr rows, t < nt tokens; whole tiles of 16 x 16 in c) into out (n, rows) at rows
// r0 + r of tokens t0 + t, as out_dtype (rounded to nearest) or added to it.
static void store_sums(void *out, burst_dtype out_dtype, int accumulate, int64_t rows, const float *c, int64_t nc,
                       int64_t r0, int64_t mr, int64_t t0, int64_t nt) {
    for (int64_t t = 0; t < nt; t += TILE) // a token at a time: its rows lie together in out
        for (int64_t r = 0; r < mr; r += TILE) {
            __m512i v[TILE];
            for (int i = 0; i < TILE; i++) v[i] = _mm512_load_si512(c + (r + i) * nc + t);
            amx_transpose_16x16(v); // v[j]: token t + j's 16 rows
            const __mmask16 m = amx_first16(mr - r);
            for (int64_t j = 0; j < TILE && t + j < nt; j++) {
                const int64_t o = (t0 + t + j) * rows + r0 + r;
                const __m512 s = _mm512_castsi512_ps(v[j]);
                float *of = (float *)out + o;
                if (accumulate) _mm512_mask_storeu_ps(of, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, of), s));
                else if (out_dtype == DTYPE_F32) _mm512_mask_storeu_ps(of, m, s);
                else _mm256_mask_storeu_epi16((uint16_t *)out + o, m, amx_bf16_nearest(s));
            }
        }
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    const int min_tokens = W->amx_tiles ? 1
                           : W->dtype == DTYPE_BF16 ? AMX_BF16_MIN_TOKENS
                           : W->dtype == DTYPE_F16  ? AMX_F16_MIN_TOKENS
                                                    : INT_MAX;
    if (n < min_tokens || !amx_usable()) return 0;
    const int64_t rows = W->rows, cols = W->cols, k_tiles = tiles_k(cols), n_pad = amx_pad_to_block(n);
    const int x_parts = x_dtype == DTYPE_BF16 ? 1 : X_PARTS, w_parts = W->dtype == DTYPE_BF16 ? 1 : 2; // tiles are BF16
    const int64_t blocks = (rows + MC - 1) / MC, x_tile_row = k_tiles * x_parts * TILE_ELEMS;
    const int64_t nc = sums_tokens(n_pad), w_k = copy_k_tiles(n_pad, k_tiles), w_i = w_k * w_parts * TILE_ELEMS;
    uint16_t *xs = burst_malloc_aligned(x_tiles_bytes(n_pad, k_tiles, x_parts));
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < n_pad / TILE; b++)
            amx_rows_to_b(xs, x, x_dtype == DTYPE_BF16, cols, n, cols, b, k_tiles, x_parts);
        uint16_t *ws = W->amx_tiles ? NULL : burst_malloc_aligned(w_copy_bytes(w_k, w_parts));
        float *c = burst_malloc_aligned(sums_bytes(nc));
        amx_load_tile_config();
        #pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * MC, mr = rows - r0 < MC ? rows - r0 : MC, mr_pad = amx_pad_to_block(mr);
            const int direct = !W->amx_tiles && W->dtype == DTYPE_BF16 && n_pad <= DIRECT_MAX_TOKENS && r0 + mr_pad <= rows &&
                               cols % TILE_K == 0;
            const int64_t kc = W->amx_tiles && n_pad <= DIRECT_MAX_TOKENS ? k_tiles * TILE_K : KC;
            for (int64_t t0 = 0; t0 < n_pad; t0 += nc) {
                const int64_t nt = n_pad - t0 < nc ? n_pad - t0 : nc;
                for (int64_t k0 = 0; k0 < k_tiles * TILE_K; k0 += kc) {
                    const int64_t kn = k_tiles * TILE_K - k0 < kc ? k_tiles * TILE_K - k0 : kc, kt = kn / TILE_K;
                    // these columns' place in the copy: after the earlier ones where it keeps them all
                    uint16_t *wk = ws && !direct ? ws + (w_k == k_tiles ? k0 / TILE_K : 0) * w_parts * TILE_ELEMS : NULL;
                    if (wk && t0 == 0) copy_w(wk, w_i, W, r0, mr_pad, k0, kn, w_parts);
                    for (int64_t r = 0; r < mr_pad; r += 2 * TILE) {
                        amx_operand a;
                        if (W->amx_tiles) {
                            const uint16_t *wt = (const uint16_t *)W->data + ((r0 + r) / TILE * k_tiles + k0 / TILE_K) * TILE_ELEMS;
                            a = (amx_operand){wt, wt + k_tiles * TILE_ELEMS, TILE_ELEMS, 64, 1};
                        } else if (direct) { // in place
                            const uint16_t *wd = (const uint16_t *)W->data + (r0 + r) * cols + k0;
                            a = (amx_operand){wd, wd + TILE * cols, TILE_K, cols * 2, 1};
                            // the next columns of these 32 rows, from memory: the tile loads alone wait on it (half
                            // the speed at 11008 columns)
                            for (int64_t i = 0; i < 2 * TILE; i++)
                                for (int64_t j = KC; j < 2 * KC && k0 + j < cols; j += 64 / sizeof(uint16_t))
                                    _mm_prefetch((const char *)(wd + i * cols + j), _MM_HINT_T0);
                        } else {
                            const uint16_t *wc = wk + r / TILE * w_i;
                            a = (amx_operand){wc, wc + w_i, w_parts * TILE_ELEMS, 64, w_parts};
                        }
                        for (int64_t t = t0; t < t0 + nt; t += 2 * TILE) {
                            const uint16_t *xb = xs + (t / TILE) * x_tile_row + k0 / TILE_K * x_parts * TILE_ELEMS;
                            // 32 weight rows x 32 tokens of the sums: W's two tiles of 16 rows by x's two of 16 tokens (one
                            // where the second would hold no token)
                            amx_block(c + r * nc + t - t0, nc, k0 == 0, a,
                                      (amx_operand){xb, t + TILE < n ? xb + x_tile_row : NULL, x_parts * TILE_ELEMS, 64, x_parts}, kt);
                        }
                    }
                }
                store_sums(out, out_dtype, accumulate, rows, c, nc, r0, mr, t0, n - t0 < nt ? n - t0 : nt);
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

void amx_tiles_from(uint16_t *dst, const burst_weight *W, int n_threads) {
    BURST_ASSERT(!"amx_tiles_from without AMX"); // callers ask amx_usable(), 0 in this build
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    return 0;
}
#endif
