// The CPU backend's matmul: out (n, rows) = x (n, cols) @ W^T, W in its stored dtype (F32, F16 or
// BF16, read from the mmap in place; never widened whole), in AMX tiles (matmul_amx.c), or Q8 or Q4
// (integers with a scale per group of columns: the backend's quantized copy, model/quantize_cpu.h).
// Q8 weights are widened as the others, with their scales: to bf16 on column pairs (bf16 x with
// AVX512-BF16), in registers or a GEMM block at a time; else to float32, but a row of one or two
// tokens a group at a time (few_row_q8). Q4 ones in integers (matmul_ints, x quantized to int8),
// but by 256 tokens or more of bf16 x on column pairs widened as Q8 ones in the GEMM
// (Q4_INT_TOKENS_PAIRS). A build with AVX2 but not AVX-512 takes Q8 weights in integers too
// (Q8_INTS).
//
// A few tokens (decode steps, n < MM_FEW_TOKENS, or MM_FEW_TOKENS_PAIRS on column pairs): each
// weight row is read once for all of them, a tile of FEW_ROWS rows at a time (one row for one or
// two tokens), widened in registers once for up to FEW_TOKENS tokens whose sums with it stay in
// registers (few_tile).
//
// More tokens (prefill): a register-blocked GEMM in the manner of GotoBLAS. It computes
// out^T = W x^T: a tile of GEMM_MR weight rows x NR tokens (GEMM_NV vector registers a row) stays
// in registers while KC columns go by, each column one broadcast weight per row times GEMM_NV
// vectors of x^T (fewer, for more rows, where a panel's last tokens fit in fewer). The weights are
// widened to f32 a block of NB rows x KC columns at a time (in L2, then read by every panel of
// tokens), x is transposed once per call into panels of NR tokens (a panel's KC columns stay in
// L1 or L2), and the sums of MC tokens gather in a per-thread buffer before they are stored as
// out_dtype. On AVX-512 both the transpose and the store go 16 x 16 blocks at a time through
// registers (common/avx512.h). Broadcasting weights, not tokens, keeps the widening a contiguous
// loop and leaves the transpose to x, which is read once where the weights are widened n / MC
// times (bench/bench_matmul_cpu.c).
//
// Where the CPU has AMX, matmul_amx.c takes BF16 weights from 16 tokens on, F16 ones from 128, and
// weights in tiles at every token count. Without AMX, where the build has AVX512-BF16, the GEMM
// multiplies bf16 x by BF16 weights (cpu-bf16) as stored, in pairs of columns (GEMM_PAIRS).
#include "matmul_cpu.h"

#include "matmul_amx.h"
#include "quantize_cpu.h"

#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#include <immintrin.h>
#endif

#include "common/burst.h"
#include "common/vec.h"

// The GEMM's register tile: VEC_FLOATS floats a vector (common/vec.h); GEMM_MR rows x GEMM_NV
// vectors of sums, plus the x^T vectors and a broadcast, fill the 32 (AVX-512) or 16 (AVX2, NEON's
// 4-wide) registers. On AVX-512, 6 x 4 rather than 14 x 2: 10 loads for 24 products instead of 16
// for 28, and 6 rows read at once, where 14 rows of LLaMA's 4096 (or 2048) columns, 8 KB apart,
// compete for the 12 lines of one L1 set (bench_matmul_cpu, 2 threads, BF16 x bf16 at 256 / 512 /
// 2048 tokens: 4096 x 4096 +4 / +5 / +24%, 4096 x 11008 +4 / +16 / +12%; at exactly 32 tokens, one
// panel of 2 vectors, -14% on 4096 x 4096). GEMM_NB rows and GEMM_MC tokens: the blocks of weights
// and tokens each thread's job takes; GEMM_KC columns: a tile's sums are loaded and stored once per
// block of them (on AVX-512, 512 rather than 256: +4-6% with float32 x, +0-4% with bf16; 128: -2 to
// -50%; 1024: within +-3%; AVX2 stays at 256, where 512 moved F32 and BF16 weights -5 to +11%).
// The few-token path's: FEW_ROWS weight rows x FEW_TOKENS tokens of sums, plus the rows' widened
// weights and a token's x (float32; bf16 on column pairs: FEW_ROWS_PAIRS). On AVX-512, 5 x 4
// rather than 3 x 8: each x load serves 5 rows, and 4 tokens of 2048 columns (32 KB) stay in L1
// while a tile's rows go by, where 8 (64 KB) did not (decode matmuls with F16 weights, alternating
// with 3 x 8: a 2048-wide model's 0.57-0.66x the time at 8 to 31 tokens, LLaMA-7B's 0.58-0.63x;
// 2 and 4 tokens within +-3%).
#if defined(__AVX512F__)
#define GEMM_MR 6
#define GEMM_NV 4
#define GEMM_NB 96
#define GEMM_MC 256
#define GEMM_KC 512
#define FEW_ROWS 5
#define FEW_TOKENS 4
#define FEW_ROWS_ONE 1
#define MM_FEW_TOKENS 44
#else // AVX2, and any 4-wide unit
#define GEMM_MR 6
#define GEMM_NV 2
#define GEMM_NB 48
#define GEMM_MC 128
#define GEMM_KC 256
#define FEW_ROWS 2
#define FEW_TOKENS 6
#define MM_FEW_TOKENS 32
#if defined(__AVX__)
#define FEW_ROWS_ONE 4
#else
#define FEW_ROWS_ONE 1
#endif
#endif
enum { NR = GEMM_NV * VEC_FLOATS, KC = GEMM_KC, NB = GEMM_NB, MC = GEMM_MC, MAX_TILE_ROWS = 12, PACK_LANES = 128 };

// MM_FEW_TOKENS: the token count from which the GEMM takes over from the few-token path. With 2 x 6
// tiles (AVX2) 32: at 16 to 24 tokens the few-token path was 1.2 to 2x faster on F16 and F32
// weights, at 32 as fast, at 48 slower. With AVX-512's 5 x 4, 44: at 32 to 40 tokens 0.77-0.93x
// the GEMM's time, at 44 0.93-0.97x, at 47 1.03x (F16 weights, float32 x: a 2048-wide model's and
// LLaMA-7B's decode matmuls, alternating). On column pairs (GEMM_PAIRS) from 25: the 4 x 8 tiles
// took 0.77-0.96x the GEMM's time at 16 to 24 tokens, 0.99-1.05x at 26 and 28, 1.11x at 32
// (LLaMA-7B's decode matmuls, BF16 weights in 2 MB pages, alternating).
enum { MM_FEW_TOKENS_PAIRS = 25 };
// Q4 weights: in integers (matmul_ints) below Q4_INT_TOKENS, then widened in the GEMM; against its
// GEMM on column pairs (bf16 x with AVX512-BF16), below Q4_INT_TOKENS_PAIRS. Blocks of tokens
// (matmul_ints; 32 when these ran) keep a span of x in L1 at every count, so that with AVX-512
// and VNNI the integers ran LLaMA-7B's shapes at 513-771 GFLOP/s from 160 to 512 tokens of
// float32 x against the float32 GEMM's 255-430, and of bf16 x at 650-811 against the pairs' 446-685 at 96 to 160 tokens, as fast
// at 256, slower at 384 and 512 (581-749 against 720-816; bench_matmul_cpu --quantize q4, 2
// threads, two rounds alternating). With AVX2 the integers win at every count too, against a GEMM
// of 8-float vectors (300-350 GFLOP/s against 39-187 at 4 to 79 tokens, before the blocks 190-234
// against 128-196 at 80 to 512). Without either the plain-C loop is slow: there the GEMM takes
// over from 4.
#if defined(BURST_AVX512) || defined(__AVX2__)
enum { Q4_INT_TOKENS = INT_MAX };
#else
enum { Q4_INT_TOKENS = 4 };
#endif
enum { Q4_INT_TOKENS_PAIRS = 256 };

// bf16 x times BF16 weights (the cpu-bf16 backend), on a CPU with AVX512-BF16 (AMD Zen 4 and later,
// Intel Cooper Lake and later): both paths multiply them as stored, a pair of adjacent columns in
// every 32-bit lane, with the dot-product instruction that adds both products of a lane's pair to
// its float32 sum: twice the products of a float32 multiply-add an instruction, and no widening.
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define GEMM_PAIRS 1
#else
#define GEMM_PAIRS 0
#endif
// The few-token tiles on column pairs: 4 rows x 8 tokens. Their 32 sums leave no register for the
// 4 rows' weights and a token's x, so GCC keeps 6 of the sums on the stack (a load and a store each
// a step of 32 columns, from L1), yet each x load, read from L2 where 8 tokens' x outgrow L1
// (4096 columns and more), serves 4 rows instead of 3: against 3 x 8, decode matmuls of 2 LLaMA-7B
// layers and the head and of the 8-layer dim-2048 model, alternating in one process, took
// 0.95-0.99x the time at 4 tokens, 0.85-1.0x at 8, 0.76-0.86x at 12, 0.74-0.87x at 15 (BF16 weights
// in 2 MB pages; in 4 KB pages 0.97-1.01x at 4 and 8, 0.84-0.94x at 12 and 15), with the same sums
// bit for bit. (5 x 8, 5 x 6, 5 x 5, 4 x 6, 5 x 4, 6 x 4: between, or slower at 8.) The few-token
// path's largest tile: FEW_MAX_ROWS x FEW_MAX_TOKENS, FEW_MAX_SUMS.
enum { FEW_ROWS_PAIRS = 4, FEW_TOKENS_PAIRS = 8 };
enum { FEW_MAX_ROWS = FEW_ROWS > FEW_ROWS_PAIRS ? FEW_ROWS : FEW_ROWS_PAIRS };
enum { FEW_MAX_TOKENS = FEW_TOKENS > FEW_TOKENS_PAIRS ? FEW_TOKENS : FEW_TOKENS_PAIRS };
enum { FEW_MAX_SUMS = FEW_ROWS * FEW_TOKENS > FEW_ROWS_PAIRS * FEW_TOKENS_PAIRS ? FEW_ROWS * FEW_TOKENS
                                                                                : FEW_ROWS_PAIRS * FEW_TOKENS_PAIRS };
// How a few-token tile multiplies: float32 x by weights widened to float32, bf16 x by BF16 (or Q8)
// weights on column pairs (on_pairs), or float32 x by a row of Q8 weights a group at a time
// (few_row_q8, for one or two tokens; more take Q8 weights widened to float32 with their scales).
enum { FEW_F32, FEW_PAIRS, FEW_Q8 };

// One weight of a row w of dtype dt as float32 (Q8, Q4: times its group's scale, of the row's scales s).
static inline float w_at(const void *w, const float *s, burst_dtype dt, int64_t i) {
    if (dt == DTYPE_F32) return ((const float *)w)[i];
    if (dt == DTYPE_Q8) return (float)((const int8_t *)w)[i] * s[i / Q_GROUP];
    if (dt == DTYPE_Q4) return q4_at(w, s, i);
    const uint16_t h = ((const uint16_t *)w)[i];
    return dt == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// VEC_FLOATS int8 from q as floats.
static inline vec q8_vec(const int8_t *q) {
#if defined(__AVX512F__)
    return (vec)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
#elif defined(__AVX2__)
    return (vec)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
#else
    vec v;
    for (int l = 0; l < VEC_FLOATS; l++) v[l] = q[l];
    return v;
#endif
}

// VEC_FLOATS weights of a row w of dtype dt from column i, as floats (Q8: i a multiple of
// VEC_FLOATS, so all in one group). GCC does not vectorize f16_to_f32 into F16C's one
// instruction, and its bit operations cost more than the multiply-adds they feed.
static inline vec w_vec(const void *w, const float *s, burst_dtype dt, int64_t i) {
    vec v;
    if (dt == DTYPE_F32) {
        memcpy(&v, (const float *)w + i, sizeof v);
        return v;
    }
    if (dt == DTYPE_Q8) return q8_vec((const int8_t *)w + i) * s[i / Q_GROUP];
#if defined(__AVX512F__)
    __m256i b = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    v = (vec)(dt == DTYPE_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)) : _mm512_cvtph_ps(b));
#elif defined(__AVX2__) && defined(__F16C__)
    __m128i b = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    v = (vec)(dt == DTYPE_BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16)) : _mm256_cvtph_ps(b));
#else
    for (int l = 0; l < VEC_FLOATS; l++) v[l] = w_at(w, s, dt, i + l);
#endif
    return v;
}

// Row r of W: its first weight, and its scales (Q8, Q4; else NULL).
static const void *w_row(const burst_weight *W, int64_t r) {
    if (W->dtype == DTYPE_Q4) return (const uint8_t *)W->data + r * q4_row_bytes(W->cols);
    return (const char *)W->data + r * W->cols * (int64_t)dtype_size(W->dtype);
}
static const float *w_scales(const burst_weight *W, int64_t r) {
    return dtype_quantized(W->dtype) ? W->scales + r * q_groups(W->cols) : NULL;
}

void weight_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst) {
    if (w->amx_tiles) {
        amx_tiles_to_f32(w, first, n, dst);
        return;
    }
    // Row by row, since a quantized row's scales lie apart; other dtypes in one go, as one row.
    const int quant = dtype_quantized(w->dtype);
    while (n > 0) {
        const int64_t r = quant ? first / w->cols : 0, c0 = first - r * w->cols;
        const int64_t m = quant && w->cols - c0 < n ? w->cols - c0 : n;
        const void *row = w_row(w, r);
        const float *s = w_scales(w, r);
        int64_t i = 0;
        for (; w->dtype == DTYPE_Q4 && c0 % Q_GROUP == 0 && i + Q_GROUP <= m; i += Q_GROUP) { // a group at a time
            int8_t q[Q_GROUP];
            q4_unpack(row, (c0 + i) / Q_GROUP, q);
            for (int h = 0; h < Q_GROUP; h += VEC_FLOATS) {
                vec v = q8_vec(q + h) * s[(c0 + i) / Q_GROUP];
                memcpy(dst + i + h, &v, sizeof v);
            }
        }
        for (; w->dtype != DTYPE_Q4 && (w->dtype != DTYPE_Q8 || c0 % VEC_FLOATS == 0) && i + VEC_FLOATS <= m; i += VEC_FLOATS) {
            vec v = w_vec(row, s, w->dtype, c0 + i);
            memcpy(dst + i, &v, sizeof v);
        }
        for (; i < m; i++) dst[i] = w_at(row, s, w->dtype, c0 + i);
        first += m, n -= m, dst += m;
    }
}

// Whether a matmul of x (x_dtype) by W runs on column pairs (GEMM_PAIRS): bf16 x, BF16 weights in
// rows, or Q8 and Q4 ones rounded to bf16 with their scales (Q4: in the GEMM), an even number of
// columns.
static int on_pairs(burst_dtype x_dtype, const burst_weight *W) {
    return GEMM_PAIRS && x_dtype == DTYPE_BF16 && (W->dtype == DTYPE_BF16 || dtype_quantized(W->dtype)) &&
           !W->amx_tiles && W->cols % 2 == 0;
}

#if GEMM_PAIRS
// The Q_GROUP (32) int8 weights at q times their scale, rounded to bf16 (nearest even).
static inline __m512bh q8_bf16_x32(const int8_t *q, float scale) {
    return _mm512_cvtne2ps_pbh((__m512)(q8_vec(q + 16) * scale), (__m512)(q8_vec(q) * scale));
}

// 32 weights of row w (dtype dt, a constant once inlined) from column k as bf16 pairs: BF16 ones as
// stored, Q8 ones (the row's scales s) rounded to bf16 with their scale; and a prefetch of the row
// `ahead` columns on.
static inline __attribute__((always_inline)) __m512bh pairs_w32(const void *w, const float *s, const burst_dtype dt,
                                                                int64_t k, int64_t ahead) {
    if (dt == DTYPE_Q8) {
        __builtin_prefetch((const int8_t *)w + k + ahead, 0, 2);
        return q8_bf16_x32((const int8_t *)w + k, s[k / Q_GROUP]);
    }
    __builtin_prefetch((const uint16_t *)w + k + ahead, 0, 2);
    return (__m512bh)_mm512_loadu_si512((const uint16_t *)w + k);
}

// few_tile on column pairs: x (nt rows of bf16, and their blocks of 32 as few_blocks lays them
// out) and the weights as stored (BF16), or Q8 and Q4 ones (scales s) rounded to bf16 a group at a time,
// 32 columns a dot-product instruction, each lane's pair added to its float32 sum. (Q8 weights
// widened to float32 instead took 1.2-1.5x the time at 8 to 24 tokens: bench_matmul_cpu.) One
// token's sums go in two chains, even and odd blocks of 32 columns, added at the end: in one, each
// product waited on the one before (one token ran at half two tokens' products a second).
static inline __attribute__((always_inline)) void few_tile_pairs(const void *const *w, const float *const *s,
                                                                 const burst_dtype dt, int64_t cols, const uint16_t *xb,
                                                                 const uint16_t *x, const int nr, const int nt,
                                                                 float *sums) {
    __m512 acc[FEW_ROWS_PAIRS][FEW_TOKENS_PAIRS];
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < FEW_TOKENS_PAIRS; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t k = 0;
    if (nt == 1) // acc[r][1]: the odd blocks' chain
        for (; k + 64 <= cols; k += 64, xb += 64)
            for (int r = 0; r < nr; r++) {
                const __m512bh w0 = pairs_w32(w[r], s[r], dt, k, nr * cols), w1 = pairs_w32(w[r], s[r], dt, k + 32, nr * cols);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, (__m512bh)_mm512_loadu_si512(xb));
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, (__m512bh)_mm512_loadu_si512(xb + 32));
            }
    for (; k + 32 <= cols; k += 32, xb += nt * 32) {
        __m512bh wv[FEW_ROWS_PAIRS];
        for (int r = 0; r < nr; r++) wv[r] = pairs_w32(w[r], s[r], dt, k, nr * cols);
        for (int t = 0; t < nt; t++) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + t * 32);
            for (int r = 0; r < nr; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
        }
    }
    for (int r = 0; nt == 1 && r < nr; r++) acc[r][0] = _mm512_add_ps(acc[r][0], acc[r][1]);
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            float sum = _mm512_reduce_add_ps(acc[r][t]);
            for (int64_t j = k; j < cols; j++) {
                const uint16_t wj = dt != DTYPE_BF16 ? f32_to_bf16(w_at(w[r], s[r], dt, j)) : ((const uint16_t *)w[r])[j];
                sum += bf16_to_f32(wj) * bf16_to_f32(x[t * cols + j]);
            }
            sums[t * nr + r] = sum;
        }
}
#endif

// One group of a Q8 row's weights (w, with scale) times nt tokens' x (their blocks at xb), added to
// acc[t]: the products with the unscaled int8 summed apart, then times the scale. x is loaded a
// vector at a time: copied as a group (an array of vectors), GCC moved it through the stack in
// 16-byte pieces, and AVX2's 32-byte loads of them waited on the stores (one token 7x slower).
static inline __attribute__((always_inline)) void q8_group(const int8_t *w, float scale, const float *xb,
                                                           const int nt, vec *acc) {
    enum { GV = Q_GROUP / VEC_FLOATS }; // vectors a group
    vec wv[GV];
    for (int h = 0; h < GV; h++) wv[h] = q8_vec(w + h * VEC_FLOATS);
    for (int t = 0; t < nt; t++) {
        vec p = wv[0] * vec_load(xb + t * Q_GROUP);
        for (int h = 1; h < GV; h++) p += wv[h] * vec_load(xb + t * Q_GROUP + h * VEC_FLOATS);
        acc[t] += p * scale;
    }
}

// few_tile of one row of Q8 weights (w, its scales s) and one or two tokens, where the weights'
// reads bound the time; x float32 in blocks of a group (few_blocks). A group at a time, so that no
// weight is multiplied by its scale (weights widened with their scales took 1.1-1.5x the time at
// 1 token, as long at 2: bench_matmul_cpu --quantize q8, LLaMA-7B's shapes).
static inline __attribute__((always_inline)) void few_row_q8(const int8_t *w, const float *s, int64_t cols,
                                                             const float *xb, const float *x, const int nt,
                                                             float *sums) {
    vec acc[FEW_MAX_TOKENS] = {{0}}; // (sized for every few_tiles shape)
    int64_t k = 0;
    for (; k + Q_GROUP <= cols; k += Q_GROUP, xb += nt * Q_GROUP) {
        q8_group(w + k, s[k / Q_GROUP], xb, nt, acc);
        __builtin_prefetch(w + k + cols, 0, 2); // the next row: the thread's next tile
    }
    for (int t = 0; t < nt; t++) {
        float sum = 0;
        for (int l = 0; l < VEC_FLOATS; l++) sum += acc[t][l];
        for (int64_t j = k; j < cols; j++) sum += w_at(w, s, DTYPE_Q8, j) * x[t * cols + j];
        sums[t] = sum;
    }
}

// sums[t * nr + r] = the dot product of W's row r0 + r with token t's row of x, for r < nr and t <
// nt, at most FEW_ROWS x FEW_TOKENS, or FEW_ROWS_PAIRS x FEW_TOKENS_PAIRS with pairs (rows past W's
// last repeat it; their sums are not used): the rows' weights are widened once, in registers, for
// all nt tokens, and the nr x nt sums stay in registers (nr and nt constants once inlined) while
// the columns go by, VEC_FLOATS at a time, x's from xb (few_blocks; the last columns from x). x is
// float32, or bf16 with pairs (few_tile_pairs). Both ask for the thread's next tile's rows (the
// next nr: threads take runs of tiles) while they read their own: a row of 2048 BF16 weights is a
// page, where the CPU's stream prefetchers stop, so without it each row's first reads waited on
// memory (decode steps of 8 and 16 sequences ~13% faster).
static inline __attribute__((always_inline)) void few_tile(const burst_weight *W, int64_t r0, const void *xb,
                                                           const void *xp, const int form, const int nr, const int nt,
                                                           float *sums) {
    const int64_t cols = W->cols;
    const void *w[FEW_MAX_ROWS];
    const float *s[FEW_MAX_ROWS];
    for (int r = 0; r < nr; r++) {
        const int64_t row = r0 + r < W->rows ? r0 + r : W->rows - 1;
        w[r] = w_row(W, row), s[r] = w_scales(W, row);
    }
#if GEMM_PAIRS
    if (form == FEW_PAIRS) {
        few_tile_pairs(w, s, W->dtype, cols, xb, xp, nr, nt, sums);
        return;
    }
#endif
    if (form == FEW_Q8) {
        few_row_q8(w[0], s[0], cols, xb, xp, nt, sums);
        return;
    }
    const float *x = xp, *xk = xb;
    const int64_t dsize = (int64_t)dtype_size(W->dtype);
    vec acc[FEW_MAX_ROWS][FEW_MAX_TOKENS]; // (sized for every few_tiles shape, pairs' too)
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = (vec){0};
    int64_t k = 0;
    for (; k + VEC_FLOATS <= cols; k += VEC_FLOATS, xk += nt * VEC_FLOATS) {
        vec wv[FEW_MAX_ROWS];
        for (int r = 0; r < nr; r++) {
            wv[r] = w_vec(w[r], s[r], W->dtype, k);
            __builtin_prefetch((const char *)w[r] + (k + nr * cols) * dsize, 0, 2);
        }
        for (int t = 0; t < nt; t++) {
            vec xv;
            memcpy(&xv, xk + t * VEC_FLOATS, sizeof xv);
            for (int r = 0; r < nr; r++) acc[r][t] += wv[r] * xv;
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            float sum = 0;
            for (int l = 0; l < VEC_FLOATS; l++) sum += acc[r][t][l];
            for (int64_t j = k; j < cols; j++) sum += w_at(w[r], s[r], W->dtype, j) * x[t * cols + j];
            sums[t * nr + r] = sum;
        }
}

// Stores sums[i * tok_stride + r * row_stride] (i < nt tokens from token i0, r < nr rows from row
// r0) into out (n, rows) as out_dtype, or adds them to it.
static void store_sums(void *out, burst_dtype out_dtype, int accumulate, int64_t rows, int64_t i0, int64_t nt,
                       int64_t r0, int64_t nr, const float *sums, int64_t tok_stride, int64_t row_stride) {
    for (int64_t i = 0; i < nt; i++)
        for (int64_t r = 0; r < nr; r++) {
            int64_t o = (i0 + i) * rows + r0 + r;
            float v = sums[i * tok_stride + r * row_stride];
            if (accumulate) ((float *)out)[o] += v;
            else act_set(out, out_dtype, o, v);
        }
}

#ifdef BURST_AVX512
// store_sums for the GEMM's sums (sums[r * MC + i], r < nr, i < nt), 16 rows x 16 tokens at a time
// through registers (transpose_16x16), so that each token's rows are stored as one vector.
static void store_sums_x16(void *out, burst_dtype out_dtype, int accumulate, int64_t rows, int64_t i0, int64_t nt,
                           int64_t r0, int64_t nr, const float *sums) {
    for (int64_t r = 0; r < nr; r += 16) {
        const __mmask16 m = mask_first16(nr - r);
        for (int64_t i = 0; i < nt; i += 16) {
            __m512i v[16];
            for (int j = 0; j < 16; j++)
                v[j] = r + j < nr ? _mm512_load_si512(sums + (r + j) * MC + i) : _mm512_setzero_si512();
            transpose_16x16(v);
            for (int64_t j = 0; j < 16 && i + j < nt; j++)
                act_set_x16(out, out_dtype, accumulate, (i0 + i + j) * rows + r0 + r, m, _mm512_castsi512_ps(v[j]));
        }
    }
}

// Lanes k0 .. k1 - 1 of x^T's panel q from x's tokens read as 32-bit lanes (float32, or bf16
// pairs), 16 tokens x 16 lanes at a time through registers; tokens past n are 0.
static void pack_panel_x16(float *xt, const uint32_t *x, int64_t n, int64_t lanes, int64_t q, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; k += 16) {
        const __mmask16 m = mask_first16(k1 - k);
        for (int h = 0; h < NR; h += 16) {
            __m512i v[16];
            for (int j = 0; j < 16; j++) {
                const int64_t t = q * NR + h + j;
                v[j] = t < n ? _mm512_maskz_loadu_epi32(m, x + t * lanes + k) : _mm512_setzero_si512();
            }
            transpose_16x16(v);
            for (int64_t l = 0; l < 16 && k + l < k1; l++) _mm512_store_si512(xt + (q * lanes + k + l) * NR + h, v[l]);
        }
    }
}
#endif

// x's whole blocks of `lanes` columns (a vector's: 32 bf16 on pairs, VEC_FLOATS floats else) for
// the few-token tiles, token by token within a block: of each group of `group` tokens from token t0
// (the last group may be short: nt), block b of token t at xb + t0 x blocks x lanes + (b x nt + t)
// x lanes elements. A tile then reads x through one pointer, front to back: on column pairs
// 0.70-0.92x the time of a 2048-wide model's and LLaMA-7B's decode matmuls at 8 to 15 tokens
// against a pointer a token, which also left GCC short of registers in the pairs tiles' loop (then
// 3 x 8) once the code around it changed (two pointers kept on the stack inside the loop).
static void few_blocks(void *xb, const void *x, size_t esize, int n, int64_t cols, int64_t lanes, int group) {
    const int64_t blocks = cols / lanes;
    for (int t0 = 0; t0 < n; t0 += group) {
        const int nt = n - t0 < group ? n - t0 : group;
        for (int64_t b = 0; b < blocks; b++)
            for (int t = 0; t < nt; t++)
                memcpy((char *)xb + ((t0 * blocks + b * nt + t) * lanes) * esize,
                       (const char *)x + ((t0 + t) * cols + b * lanes) * esize, (size_t)lanes * esize);
    }
}

// x's elements (esize bytes) a few-token tile reads at a time from its blocks: a vector's, or a
// group's on Q8 weights.
static int64_t few_lanes(int form) { return form == FEW_PAIRS ? 32 : form == FEW_Q8 ? Q_GROUP : VEC_FLOATS; }
static size_t few_esize(int form) { return form == FEW_PAIRS ? 2 : 4; }

// The few-token path's tiles of one shape (tile_rows x tile_tokens, and form: constants once
// inlined) for a thread of matmul_few's parallel region: each thread takes a run of tiles, and each
// tile its tokens tile_tokens at a time (the tile's weights stay in L1 for the next ones); x's
// blocks as few_blocks lays them out (xb; for one token, x itself).
static inline __attribute__((always_inline)) void few_tiles(void *out, burst_dtype out_dtype, int accumulate,
                                                            const void *x, const void *xb, const int form,
                                                            const burst_weight *W, int n, const int tile_rows,
                                                            const int tile_tokens) {
    const int64_t rows = W->rows, tiles = (rows + tile_rows - 1) / tile_rows;
    const size_t esize = few_esize(form);
    const int64_t lanes = few_lanes(form), blocks = W->cols / lanes;
    #pragma omp for schedule(static)
    for (int64_t tile = 0; tile < tiles; tile++) {
        const int64_t r0 = tile * tile_rows, nr = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        for (int t0 = 0; t0 < n; t0 += tile_tokens) {
            const int nt = n - t0 < tile_tokens ? n - t0 : tile_tokens;
            const void *xt = (const char *)x + (int64_t)t0 * W->cols * esize;
            const void *xbt = (const char *)xb + (int64_t)t0 * blocks * lanes * esize;
            float sums[FEW_MAX_SUMS];
            switch (nt) {
#define TOKENS(t) \
    case t: \
        if (t <= tile_tokens) few_tile(W, r0, xbt, xt, form, tile_rows, t, sums); \
        break;
            TOKENS(1) TOKENS(2) TOKENS(3) TOKENS(4) TOKENS(5) TOKENS(6) TOKENS(7) TOKENS(8)
#undef TOKENS
            }
            store_sums(out, out_dtype, accumulate, rows, t0, nt, r0, nr, sums, tile_rows, 1);
        }
    }
}

// The few-token path; x is F32, or BF16 with pairs (on_pairs). Tiles of FEW_ROWS x FEW_TOKENS
// (FEW_ROWS_PAIRS x FEW_TOKENS_PAIRS), but of one row for one or two tokens, where the weights'
// reads bound the time: a thread's rows lie one after another, so that it reads them in one
// stream rather than several a row apart (a 2048-wide model's BF16 weights on 2 Zen 5 cores,
// against 3-row tiles: one token 8-13% less time with bf16 x, 16-23% with float32 x; two tokens,
// with x's blocks, 9-16% less with bf16 x, 0-11% with float32 x). With AVX2, float32 x (or bf16
// widened) takes FEW_ROWS_ONE = 4 rows instead: each of one row's sums of 8-float vectors waited
// on its last multiply-add, so that one token ran at half the speed the memory allows (x86-64-v3
// build, BF16 weights of LLaMA-7B's shapes, 2 threads: 28-44 GFLOP/s against 24-29 at one token,
// 54-85 against 47-56 at two). Several chains of one row's sums were faster still, but would sum a
// token's products in another order alone than beside other tokens, and a sequence's logits should
// not depend on what else the step runs.
static void matmul_few(void *out, burst_dtype out_dtype, int accumulate, const void *x, int pairs,
                       const burst_weight *W, int n, int n_threads) {
    const int form = pairs ? FEW_PAIRS : W->dtype == DTYPE_Q8 && n <= 2 ? FEW_Q8 : FEW_F32;
    const int tile_tokens = n <= 2 ? 2 : pairs ? FEW_TOKENS_PAIRS : FEW_TOKENS; // as few_tiles takes them below
    void *copy = NULL;
    if (n > 1) {
        copy = burst_malloc_aligned(few_esize(form) * (size_t)(n * W->cols));
        few_blocks(copy, x, few_esize(form), n, W->cols, few_lanes(form), tile_tokens);
    }
    const void *xb = copy ? copy : x; // one token's blocks are its row
    #pragma omp parallel num_threads(n_threads)
    {
        if (n <= 2) few_tiles(out, out_dtype, accumulate, x, xb, form, W, n, form == FEW_F32 ? FEW_ROWS_ONE : 1, 2);
#if GEMM_PAIRS
        else if (pairs) few_tiles(out, out_dtype, accumulate, x, xb, FEW_PAIRS, W, n, FEW_ROWS_PAIRS, FEW_TOKENS_PAIRS);
#endif
        else few_tiles(out, out_dtype, accumulate, x, xb, FEW_F32, W, n, FEW_ROWS, FEW_TOKENS);
    }
    free(copy);
}

#if GEMM_PAIRS
// n weights of row r of a Q8 or Q4 weight W from column c0 (a multiple of Q_GROUP) times their
// scales, rounded to bf16 (q8_bf16_x32; Q4 unpacked to int8 a group at a time): a row of the GEMM's
// block on column pairs.
static void quant_row_to_bf16(const burst_weight *W, int64_t r, int64_t c0, int n, uint16_t *dst) {
    const void *row = w_row(W, r);
    const float *s = w_scales(W, r);
    int i = 0;
    for (; W->dtype == DTYPE_Q4 && i + Q_GROUP <= n; i += Q_GROUP) {
        int8_t q[Q_GROUP];
        q4_unpack(row, (c0 + i) / Q_GROUP, q);
        _mm512_storeu_si512(dst + i, (__m512i)q8_bf16_x32(q, s[(c0 + i) / Q_GROUP]));
    }
    for (; W->dtype == DTYPE_Q8 && i + Q_GROUP <= n; i += Q_GROUP)
        _mm512_storeu_si512(dst + i, (__m512i)q8_bf16_x32((const int8_t *)row + c0 + i, s[(c0 + i) / Q_GROUP]));
    for (; i < n; i++) dst[i] = f32_to_bf16(w_at(row, s, W->dtype, c0 + i));
}

// gemm_tile on column pairs (GEMM_PAIRS): kp pairs of bf16 weights, row i's pair p at w + i x
// w_stride + 2p (the weights as stored), broadcast to every lane; a token's pair p is one 32-bit
// lane of xt: xt[p * NR + token].
static inline __attribute__((always_inline)) void gemm_tile_pairs(const uint16_t *w, int64_t w_stride,
                                                                  const uint32_t *xt, int kp, const int mr,
                                                                  const int nv, float *c) {
    __m512 acc[MAX_TILE_ROWS][GEMM_NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = _mm512_load_ps(c + i * MC + v * VEC_FLOATS);
    for (int p = 0; p < kp; p++) {
        __m512bh x[GEMM_NV];
        for (int v = 0; v < nv; v++) x[v] = (__m512bh)_mm512_load_si512(xt + p * NR + v * VEC_FLOATS);
        for (int i = 0; i < mr; i++) {
            uint32_t pair;
            memcpy(&pair, w + i * w_stride + 2 * p, sizeof pair);
            const __m512bh wi = (__m512bh)_mm512_set1_epi32((int)pair);
            for (int v = 0; v < nv; v++) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], x[v], wi);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) _mm512_store_ps(c + i * MC + v * VEC_FLOATS, acc[i][v]);
}
#endif

// c[i * MC + 0..nv x VEC_FLOATS) += the sum over k < kn of w[i * KC + k] * xt[k * NR + 0..nv x VEC_FLOATS),
// for i < mr: one register tile of the GEMM, of nv = 2 vectors of tokens, or 1 for a panel's last
// tokens. mr and nv are constants once inlined, so that the sums stay in registers. With pairs,
// gemm_tile_pairs on the weights as stored (rows at w_stride) and xt of pairs instead.
static inline __attribute__((always_inline)) void gemm_tile(const void *w, int64_t w_stride, const void *xt, int kn,
                                                            const int mr, const int nv, int pairs, float *c) {
#if GEMM_PAIRS
    if (pairs) {
        gemm_tile_pairs(w, w_stride, xt, kn / 2, mr, nv, c);
        return;
    }
#endif
    const float *wf = w, *xf = xt;
    vec acc[MAX_TILE_ROWS][GEMM_NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = *(const vec *)(c + i * MC + v * VEC_FLOATS);
    for (int k = 0; k < kn; k++) {
        vec x[GEMM_NV];
        for (int v = 0; v < nv; v++) x[v] = *(const vec *)(xf + k * NR + v * VEC_FLOATS);
        for (int i = 0; i < mr; i++) {
            float wi = wf[i * KC + k];
            for (int v = 0; v < nv; v++) acc[i][v] += wi * x[v];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) *(vec *)(c + i * MC + v * VEC_FLOATS) = acc[i][v];
}

// The vectors of a panel that hold some of its first t tokens.
static int vectors(int64_t t) { return t >= NR ? GEMM_NV : (int)((t + VEC_FLOATS - 1) / VEC_FLOATS); }

// The rows of a register tile of nv vectors of tokens: GEMM_MR x GEMM_NV sums, or as many with
// fewer vectors (a panel's last tokens; all of them for 32 tokens, where 6 x 2 sums left the
// dot products waiting on each other: 15% slower), up to 12: more rows 4 KB apart than L1 ways.
static int tile_rows(int nv) { return GEMM_MR * GEMM_NV / nv < MAX_TILE_ROWS ? GEMM_MR * GEMM_NV / nv : MAX_TILE_ROWS; }

static void gemm_tile_rows(const void *w, int64_t w_stride, const void *xt, int kn, int mr, int nv, int pairs,
                           float *c) {
#define TILE(m, v) \
    case m: gemm_tile(w, w_stride, xt, kn, m, v, pairs, c); break;
#define TILES6(v) TILE(1, v) TILE(2, v) TILE(3, v) TILE(4, v) TILE(5, v) TILE(6, v)
#define TILES8(v) TILES6(v) TILE(7, v) TILE(8, v)
#define TILES12(v) TILES8(v) TILE(9, v) TILE(10, v) TILE(11, v) TILE(12, v)
    switch (nv) {
    case 1: switch (mr) { TILES12(1) } break;
#if GEMM_NV == 4
    case 2: switch (mr) { TILES12(2) } break;
    case 3: switch (mr) { TILES8(3) } break;
    case 4: switch (mr) { TILES6(4) } break;
#else
    case 2: switch (mr) { TILES6(2) } break;
#endif
    }
#undef TILES12
#undef TILES8
#undef TILES6
#undef TILE
}

// What the GEMM allocates: x^T, [panel][column][token] (tokens past n are 0), and each thread's
// widened weight block and sums, [row][token].
static size_t xt_bytes(int64_t n, int64_t cols) { return sizeof(float) * (size_t)((n + NR - 1) / NR * cols * NR); }
static const size_t wf_bytes = sizeof(float) * NB * KC, c_bytes = sizeof(float) * NB * MC;

static void matmul_gemm(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                        const burst_weight *W, int n, int n_threads) {
    const int64_t rows = W->rows, cols = W->cols, panels = (n + NR - 1) / NR;
    const int64_t blocks = (n + MC - 1) / MC; // of tokens
    // On column pairs (GEMM_PAIRS) x^T's 32-bit lanes hold a token's bf16 pairs as stored, half as
    // many as its columns, and BF16 weights are read as stored; others are widened a block at a
    // time, to float32 or, Q8 and Q4 on pairs, to bf16.
    const int pairs = on_pairs(x_dtype, W), as_stored = pairs && W->dtype == DTYPE_BF16;
    const int64_t step = pairs ? 2 : 1, lanes = cols / step; // columns a lane, lanes a token
    float *xt = burst_malloc_aligned(xt_bytes(n, cols));
    #pragma omp parallel num_threads(n_threads)
    {
        // In pieces of PACK_LANES lanes of a panel, so that many threads share a step's few panels
        // (512 tokens are 8).
        #pragma omp for schedule(static) collapse(2)
        for (int64_t q = 0; q < panels; q++)
            for (int64_t k0 = 0; k0 < lanes; k0 += PACK_LANES) {
                const int64_t k1 = k0 + PACK_LANES < lanes ? k0 + PACK_LANES : lanes;
#ifdef BURST_AVX512
                if (pairs || x_dtype == DTYPE_F32) {
                    pack_panel_x16(xt, x, n, lanes, q, k0, k1);
                    continue;
                }
#endif
                for (int64_t k = k0; k < k1; k++)
                    for (int64_t j = 0, t = q * NR; j < NR; j++, t++) {
                        float *to = xt + (q * lanes + k) * NR + j;
                        if (t >= n) *to = 0;
                        else if (pairs) memcpy(to, (const uint16_t *)x + t * cols + 2 * k, sizeof *to);
                        else *to = act_get(x, x_dtype, t * cols + k);
                    }
            }
        float *wf = as_stored ? NULL : burst_malloc_aligned(wf_bytes), *c = burst_malloc_aligned(c_bytes);
        // Each thread takes an equal share of the rows (whole tiles of GEMM_MR) with all tokens, in
        // blocks of NB rows x MC tokens. Blocks of NB rows from row 0, shared out whole, left
        // threads idle: 7B's 4096-row weights at 512 tokens made 86 blocks, of which 22 of 64
        // threads ran two and the others one (by count; on 2 threads 1056 rows against 992 of a
        // 2048-row weight, within this machine's noise end to end).
        const int64_t tiles = (rows + GEMM_MR - 1) / GEMM_MR, thread = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t first = tiles * thread / T * GEMM_MR, last = tiles * (thread + 1) / T * GEMM_MR;
        const int64_t end = last < rows ? last : rows, jobs = (end - first + NB - 1) / NB * blocks;
        for (int64_t job = 0; job < jobs; job++) {
            const int64_t r0 = first + job / blocks * NB, nb = end - r0 < NB ? end - r0 : NB;
            const int64_t i0 = job % blocks * MC, mc = n - i0 < MC ? n - i0 : MC;
            memset(c, 0, sizeof(float) * NB * MC);
            for (int64_t k0 = 0; k0 < cols; k0 += KC) {
                int kn = (int)(cols - k0 < KC ? cols - k0 : KC);
                for (int64_t r = 0; !as_stored && r < nb; r++) {
#if GEMM_PAIRS
                    if (pairs) {
                        quant_row_to_bf16(W, r0 + r, k0, kn, (uint16_t *)wf + r * KC);
                        continue;
                    }
#endif
                    weight_to_f32(W, (r0 + r) * cols + k0, kn, wf + r * KC);
                }
                for (int64_t q = 0; q * NR < mc; q++) {
                    const int nv = vectors(mc - q * NR), tile = tile_rows(nv);
                    for (int64_t s = 0; s < nb; s += tile)
                        gemm_tile_rows(as_stored ? (const void *)((const uint16_t *)W->data + (r0 + s) * cols + k0)
                                       : pairs   ? (const void *)((const uint16_t *)wf + s * KC)
                                                 : wf + s * KC,
                                       as_stored ? cols : KC, xt + ((i0 / NR + q) * lanes + k0 / step) * NR, kn,
                                       (int)(nb - s < tile ? nb - s : tile), nv, pairs, c + s * MC + q * NR);
                }
            }
#ifdef BURST_AVX512
            store_sums_x16(out, out_dtype, accumulate, rows, i0, mc, r0, nb, c);
#else
            store_sums(out, out_dtype, accumulate, rows, i0, mc, r0, nb, c, 1, MC);
#endif
        }
        free(wf), free(c);
    }
    free(xt);
}

int matmul_cpu_bf16_products(void) { return GEMM_PAIRS; }

int matmul_cpu_rounds_weights(burst_dtype x_dtype, const burst_weight *W) {
    return dtype_quantized(W->dtype) && on_pairs(x_dtype, W);
}

int matmul_cpu_quantizes_x(burst_dtype x_dtype, const burst_weight *W, int n) {
    if (W->dtype == DTYPE_Q4) return n < (on_pairs(x_dtype, W) ? Q4_INT_TOKENS_PAIRS : Q4_INT_TOKENS);
    return W->dtype == DTYPE_Q8 && Q8_INTS;
}

size_t matmul_cpu_transient_bytes(int n, int64_t cols, int n_threads) {
    // bf16 x widened for the few-token tiles, and x's blocks for them (few_blocks)
    const size_t widened = n < MM_FEW_TOKENS ? 2 * sizeof(float) * (size_t)(n * cols) : 0;
    const size_t gemm = n >= MM_FEW_TOKENS_PAIRS ? xt_bytes(n, cols) + (size_t)n_threads * (wf_bytes + c_bytes) : 0;
    const size_t vector = widened > gemm ? widened : gemm, ints = matmul_ints_transient_bytes(n, cols, n_threads);
    const size_t amx = matmul_amx_transient_bytes(n, cols, n_threads), most = vector > ints ? vector : ints;
    return most > amx ? most : amx;
}

void matmul_cpu(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                const burst_weight *W, int n, int n_threads) {
    if (matmul_amx(out, out_dtype, accumulate, x, x_dtype, W, n, n_threads)) return;
    if (matmul_cpu_quantizes_x(x_dtype, W, n)) {
        matmul_ints(out, out_dtype, accumulate, x, x_dtype, W, n, n_threads);
        return;
    }
    const int pairs = on_pairs(x_dtype, W);
    if (n >= (pairs ? MM_FEW_TOKENS_PAIRS : MM_FEW_TOKENS) || W->dtype == DTYPE_Q4) {
        matmul_gemm(out, out_dtype, accumulate, x, x_dtype, W, n, n_threads);
        return;
    }
    float *xw = NULL; // bf16 inputs (cpu-bf16's activations) widened once, unless multiplied as stored
    if (x_dtype != DTYPE_F32 && !pairs) {
        xw = burst_malloc((size_t)n * W->cols * sizeof(float));
        for (int64_t i = 0; i < n * W->cols; i++) xw[i] = act_get(x, x_dtype, i);
    }
    matmul_few(out, out_dtype, accumulate, xw ? xw : x, pairs, W, n, n_threads);
    free(xw);
}
