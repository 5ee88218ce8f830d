// The CPU matmul's many-token path on Intel AMX (Sapphire Rapids and later): out (n, rows) =
// x (n, cols) @ W^T for BF16 and F16 weights, in 16 x 32 bf16 tiles multiplied into 16 x 16
// float32 sums (TDPBF16PS), several times the float32 GEMM's multiply-adds a cycle.
//
// It stays a float32 matmul. AMX multiplies bf16, so each float32 x is split into three bf16 parts
// that add up to it exactly (8 mantissa bits each, truncated) and each F16 weight into two (its 11
// bits); the products of the parts are summed in float32, as the float32 GEMM sums. The one product
// left out, an F16 weight's low part times x's lowest, is below 2^-24 of the term. (AMX reads bf16
// subnormals as 0: an x below about 2^-110 keeps fewer than its 24 bits.) A BF16 weight costs 3
// tile products, an F16 one 5; bf16 x needs no split (1 and 2).
//
// AMX computes C (16 x 16) += A (16 x 32) B (32 x 16) with B stored in pairs of rows: 16 rows of
// 16 (B[2i][j], B[2i+1][j]) pairs. Here A is x (tokens by columns, as x is laid out) and B is W^T,
// so a tile of C holds 16 tokens x 16 weight rows, stored as out's rows are. x is split into tiles
// once per call; W is widened and transposed in pairs a block of MC rows x KC columns at a time,
// into L2, where every 32 tokens read it; a block's sums for all tokens gather in a per-thread
// buffer and are stored as out_dtype once its last columns are in.
#include "matmul_amx.h"

#include "matmul_cpu.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/burst.h"

// A tile: 16 rows of 32 bf16 (tiles of x and W) or 16 floats (sums). MC and KC: the weight block
// widened at a time (128 KB of bf16 parts for F16, in L2).
enum { TILE = 16, TILE_K = 32, TILE_ELEMS = TILE * TILE_K, MC = 128, KC = 256, X_PARTS = 3 };
// Below this many tokens an F16 weight's split costs more than its 5 tile products save against
// the float32 GEMM (bench/bench_matmul_cpu.c; even at 64 to 128, 1.2x faster at 256 and more).
enum { AMX_F16_MIN_TOKENS = 128 };

// Linux hands AMX's 8 KB of tile registers to a process only when it asks (arch_prctl).
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_on;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_init(void) {
    const char *env = getenv("BURST_AMX");
    if (env && !strcmp(env, "0")) return;
    amx_on = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    if (amx_on) LOG_I("AMX: matmuls of BF16 and F16 weights run in bf16 tiles, float32-exact (BURST_AMX=0: off)");
    else LOG_W("AMX: the kernel refused the tile registers (%s); the float32 GEMM runs instead", strerror(errno));
}

// The tile registers' shapes, loaded by each thread that uses them: 0-3 sums, 4-5 x, 6-7 W.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} tile_config;

static void load_tile_config(void) {
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.bytes_per_row[t] = 64, cfg.rows[t] = TILE;
    _tile_loadconfig(&cfg);
}

// The top 16 bits of v's 16 floats, truncated to bf16 (a NaN kept NaN), and in *v what they leave
// out (exact in float32; 0 for an infinity or NaN, whose top part carries it).
static inline __m256i bf16_part(__m512 *v) {
    const __mmask16 nan = _mm512_fpclass_ps_mask(*v, 0x81), finite = (__mmask16)~_mm512_fpclass_ps_mask(*v, 0x99);
    __m512i top = _mm512_and_si512(_mm512_castps_si512(*v), _mm512_set1_epi32((int)0xffff0000u));
    top = _mm512_mask_or_epi32(top, nan, top, _mm512_set1_epi32(0x00400000));
    *v = _mm512_maskz_sub_ps(finite, *v, _mm512_castsi512_ps(top));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(top, 16));
}

// The bf16 parts of 32 floats (a, b), as parts rows of 32 at d, d + stride, ...
static inline void split_32(__m512 a, __m512 b, int parts, uint16_t *d, int64_t stride) {
    for (int p = 0; p < parts; p++, d += stride) {
        _mm256_store_si256((__m256i *)d, bf16_part(&a));
        _mm256_store_si256((__m256i *)(d + 16), bf16_part(&b));
    }
}

// The mask of the first n (at most 32) of 32 elements, and of 16.
static inline __mmask32 first32(int64_t n) { return n >= 32 ? ~0u : n <= 0 ? 0 : (1u << n) - 1; }
static inline __mmask16 first16(int64_t n) { return (__mmask16)first32(n < 16 ? n : 16); }

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
                _mm512_store_si512(d, _mm512_maskz_loadu_epi16(first32(left), src));
            } else {
                const float *src = (const float *)x + (token < n ? token * cols + k * TILE_K : 0);
                split_32(_mm512_maskz_loadu_ps(first16(left), src), _mm512_maskz_loadu_ps(first16(left - 16), src + 16),
                         parts, d, TILE_ELEMS);
            }
        }
}

// 16 rows of 16 32-bit elements, transposed in place: unpacks of 32 and 64 bits make 4 x 4 blocks
// within each 128-bit lane, two lane shuffles move the blocks.
static void transpose_16x16(__m512i r[16]) {
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
                const __mmask32 m = row < W->rows ? first32(W->cols - col) : 0;
                t[r] = _mm512_maskz_loadu_epi16(m, (const uint16_t *)W->data + (row < W->rows ? row * W->cols + col : 0));
            }
            transpose_16x16(t);
            uint16_t *d = ws + (i * k_tiles + k) * parts * TILE_ELEMS;
            for (int r = 0; r < TILE; r++)
                if (parts == 1) _mm512_store_si512(d + r * TILE_K, t[r]);
                else split_32(_mm512_cvtph_ps(_mm512_castsi512_si256(t[r])), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(t[r], 1)),
                              2, d + r * TILE_K, TILE_ELEMS);
        }
}

// The sums of 32 tokens x 32 weight rows: c (16 x 16 tiles, rows of c_stride floats) += the tile
// products of k_tiles column tiles, from xa/xb (x's two tiles of 16 tokens) and wa/wb (W's two of
// 16 rows).
static void amx_tiles(const uint16_t *xa, const uint16_t *xb, int x_parts, const uint16_t *wa, const uint16_t *wb,
                      int w_parts, int64_t k_tiles, float *c, int64_t c_stride) {
    const size_t cs = (size_t)c_stride * sizeof(float);
    _tile_loadd(0, c, cs);
    _tile_loadd(1, c + TILE, cs);
    _tile_loadd(2, c + TILE * c_stride, cs);
    _tile_loadd(3, c + TILE * c_stride + TILE, cs);
    for (int64_t k = 0; k < k_tiles; k++)
        for (int q = 0; q < w_parts; q++) {
            _tile_loadd(6, wa + (k * w_parts + q) * TILE_ELEMS, 64);
            _tile_loadd(7, wb + (k * w_parts + q) * TILE_ELEMS, 64);
            for (int p = 0; p < x_parts && p + q < X_PARTS; p++) {
                _tile_loadd(4, xa + (k * x_parts + p) * TILE_ELEMS, 64);
                _tile_loadd(5, xb + (k * x_parts + p) * TILE_ELEMS, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    _tile_stored(0, c, cs);
    _tile_stored(1, c + TILE, cs);
    _tile_stored(2, c + TILE * c_stride, cs);
    _tile_stored(3, c + TILE * c_stride + TILE, cs);
}

int matmul_amx_usable(void) {
    pthread_once(&amx_once, amx_init);
    return amx_on;
}

// Tokens and weight rows go 32 at a time (a 2 x 2 block of 16 x 16 tiles).
static int64_t pad_to_tile_pair(int64_t n) { return (n + 2 * TILE - 1) / (2 * TILE) * (2 * TILE); }

// What a call allocates: x's tiles, and each thread's weight block and sums.
static size_t x_tiles_bytes(int64_t n_pad, int64_t k_tiles, int x_parts) {
    return sizeof(uint16_t) * (size_t)(n_pad / TILE * k_tiles * x_parts * TILE_ELEMS);
}
static size_t w_block_bytes(int w_parts) { return sizeof(uint16_t) * MC * KC * (size_t)w_parts; }
static size_t sums_bytes(int64_t n_pad) { return sizeof(float) * (size_t)n_pad * MC; } // [token][row of the block]

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) {
    const int64_t n_pad = pad_to_tile_pair(n);
    return !matmul_amx_usable() ? 0 : x_tiles_bytes(n_pad, (cols + TILE_K - 1) / TILE_K, X_PARTS) +
                                          (size_t)n_threads * (w_block_bytes(2) + sums_bytes(n_pad));
}

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    if (!(W->dtype == DTYPE_BF16 || (W->dtype == DTYPE_F16 && n >= AMX_F16_MIN_TOKENS)) || !matmul_amx_usable()) return 0;
    const int64_t rows = W->rows, cols = W->cols, k_tiles = (cols + TILE_K - 1) / TILE_K, n_pad = pad_to_tile_pair(n);
    const int x_parts = x_dtype == DTYPE_BF16 ? 1 : X_PARTS, w_parts = W->dtype == DTYPE_BF16 ? 1 : 2;
    const int64_t blocks = (rows + MC - 1) / MC, x_tile_row = k_tiles * x_parts * TILE_ELEMS;
    uint16_t *xs = burst_malloc_aligned(x_tiles_bytes(n_pad, k_tiles, x_parts));
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < n_pad / TILE; b++) split_x(xs, x, x_dtype, n, cols, b, k_tiles, x_parts);
        uint16_t *ws = burst_malloc_aligned(w_block_bytes(w_parts));
        float *c = burst_malloc_aligned(sums_bytes(n_pad));
        load_tile_config();
        #pragma omp for schedule(dynamic)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * MC, mr = rows - r0 < MC ? rows - r0 : MC, mr_pad = pad_to_tile_pair(mr);
            memset(c, 0, sums_bytes(n_pad));
            for (int64_t k0 = 0; k0 < k_tiles * TILE_K; k0 += KC) {
                const int64_t kn = k_tiles * TILE_K - k0 < KC ? k_tiles * TILE_K - k0 : KC, kt = kn / TILE_K;
                pack_w(ws, W, r0, mr_pad, k0, kn, w_parts);
                for (int64_t t = 0; t < n_pad; t += 2 * TILE)
                    for (int64_t r = 0; r < mr_pad; r += 2 * TILE) {
                        const uint16_t *xa = xs + (t / TILE) * x_tile_row + k0 / TILE_K * x_parts * TILE_ELEMS;
                        const uint16_t *wa = ws + r / TILE * kt * w_parts * TILE_ELEMS;
                        amx_tiles(xa, xa + x_tile_row, x_parts, wa, wa + kt * w_parts * TILE_ELEMS, w_parts, kt,
                                  c + t * MC + r, MC);
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
int matmul_amx_usable(void) { return 0; }

size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads) { return 0; }

int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads) {
    return 0;
}
#endif
