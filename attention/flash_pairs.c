// flash_cpu's query tiles on AVX512-BF16 (contract in attention/flash_pairs.h).
//
// A dot-product instruction takes, in every 32-bit lane, a pair of bf16 from each operand and adds
// both products to the lane's float32 sum; the two operands' pairs must hold the same two terms.
// Scores: pairs of dims. Q^T is laid out once per query tile as pairs of a query's dims, a query a
// lane (qp); each K row's pair of dims, as stored, is broadcast to every lane. P V: pairs of keys.
// P, rounded, as pairs of a row's two keys, a row a lane (pp), laid out as flash_pairs_probs computes
// it, e^x in registers (flash_cpu's compiled softmax loop took ~20% of a prompt's attention, this
// ~9%); V as pairs of two keys' values of a dim, a dim a lane (vp), laid out once per key tile for
// the run of query tiles a thread takes (flash_pairs_head_fill); each row's pair of P is
// broadcast. The register tiles are flash_cpu's: 6 keys (or rows) by 4 vectors of 16 sums.
#include "attention/flash_pairs.h"

#include <math.h>
#include <string.h>

#include "common/avx512.h"
#include "common/bf16_pairs.h"
#include "common/exp_below_88.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
enum { BQ = FLASH_PAIRS_QUERIES, BK = FLASH_PAIRS_KEYS, TILE = 6, VEC = 16 };

int flash_pairs_applies(const flash_args *a) { return a->qp_bf16 && a->kv_dtype == DTYPE_BF16 && a->head_dim % 32 == 0; }

size_t flash_pairs_scratch_words(void) { return (size_t)BK / 2 * BQ; }

// Whole key tiles (the last one's missing keys are never read).
static int64_t padded_keys(int64_t keys) { return (keys + BK - 1) / BK * BK; }

size_t flash_pairs_head_bytes(int d, int64_t max_keys) { return 2 * sizeof(uint16_t) * (size_t)padded_keys(max_keys) * (size_t)d; }

// K's rows copied; V's pairs of keys j and j + 1: dims [c, c + 32) of both keys interleaved, two
// lanes' worth of pairs a register.
void flash_pairs_head_fill(head_copy *h, int t) {
    const uint16_t *k = h->of_k, *v = h->of_v;
    const int64_t kv_stride = h->stride;
    const int d = h->d;
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36,
                                        4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int k0 = t * BK, k1 = k0 + BK < h->nk ? k0 + BK : h->nk;
    for (int j = k0; j < k1; j++) memcpy((uint16_t *)h->k + (int64_t)j * d, k + j * kv_stride, sizeof(uint16_t) * (size_t)d);
    uint32_t *vp = (uint32_t *)h->v + (int64_t)t * BK / 2 * d;
    for (int j = k0; j < k1; j += 2)
        for (int c = 0; c < d; c += 32) {
            const __m512i a = _mm512_loadu_si512(v + j * kv_stride + c);
            const __m512i b = j + 1 < k1 ? _mm512_loadu_si512(v + (j + 1) * kv_stride + c) : _mm512_setzero_si512();
            _mm512_store_si512(vp + (j - k0) / 2 * d + c, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_store_si512(vp + (j - k0) / 2 * d + c + VEC, _mm512_permutex2var_epi16(a, hi, b));
        }
}

void flash_pairs_queries(uint32_t *qp, const float *q, int64_t q_stride, int n, int d) {
    for (int r = 0; r < BQ; r++)
        for (int p = 0; p < d / 2; p++) {
            uint32_t pair = 0;
            if (r < n) pair = f32_to_bf16(q[r * q_stride + 2 * p]) | (uint32_t)f32_to_bf16(q[r * q_stride + 2 * p + 1]) << 16;
            qp[p * BQ + r] = pair;
        }
}

// The scores of R <= TILE keys (rows of k at kv_stride; R a constant once inlined) against the 64
// queries of qp, key r's at s + r x BQ: R x 4 vectors of sums in registers over the dims' pairs.
static inline __attribute__((always_inline)) void scores_keys(float *s, const uint16_t *k, int64_t kv_stride,
                                                             const uint32_t *qp, int d, const int R) {
    __m512 acc[TILE][BQ / VEC];
    for (int r = 0; r < R; r++)
        for (int x = 0; x < BQ / VEC; x++) acc[r][x] = _mm512_setzero_ps();
    for (int p = 0; p < d / 2; p++) {
        __m512bh q[BQ / VEC];
        for (int x = 0; x < BQ / VEC; x++) q[x] = (__m512bh)_mm512_load_si512(qp + p * BQ + x * VEC);
        for (int r = 0; r < R; r++) {
            uint32_t pair;
            memcpy(&pair, k + r * kv_stride + 2 * p, sizeof pair);
            const __m512bh kb = (__m512bh)_mm512_set1_epi32((int)pair);
            for (int x = 0; x < BQ / VEC; x++) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], q[x], kb);
        }
    }
    for (int r = 0; r < R; r++)
        for (int x = 0; x < BQ / VEC; x++) _mm512_store_ps(s + r * BQ + x * VEC, acc[r][x]);
}

void flash_pairs_scores(float *s, const uint16_t *k, int64_t kv_stride, const uint32_t *qp, int d, int nk) {
    int j = 0;
    for (; j + TILE <= nk; j += TILE) scores_keys(s + j * BQ, k + j * kv_stride, kv_stride, qp, d, TILE);
    switch (nk - j) {
#define KEYS(n) \
    case n: scores_keys(s + j * BQ, k + j * kv_stride, kv_stride, qp, d, n); break;
    KEYS(1) KEYS(2) KEYS(3) KEYS(4) KEYS(5)
#undef KEYS
    }
}

// Columns [c0, c0 + 16 NV) of acc (R rows of d; R <= TILE and NV constants once inlined) += the
// np key pairs of pp (row r's pair m at pp[m * BQ + r]) times those of vp (dim c's pair m at
// vp[m * d + c]): R x NV vectors of sums in registers over the pairs.
static inline __attribute__((always_inline)) void pv_cols(float *acc, const uint32_t *pp, const uint32_t *vp, int d,
                                                         int np, const int R, int c0, const int NV) {
    __m512 sum[TILE][4];
    for (int r = 0; r < R; r++)
        for (int x = 0; x < NV; x++) sum[r][x] = _mm512_loadu_ps(acc + r * d + c0 + x * VEC);
    for (int m = 0; m < np; m++) {
        __m512bh v[4];
        for (int x = 0; x < NV; x++) v[x] = (__m512bh)_mm512_load_si512(vp + m * d + c0 + x * VEC);
        for (int r = 0; r < R; r++) {
            const __m512bh pb = (__m512bh)_mm512_set1_epi32((int)pp[m * BQ + r]);
            for (int x = 0; x < NV; x++) sum[r][x] = _mm512_dpbf16_ps(sum[r][x], v[x], pb);
        }
    }
    for (int r = 0; r < R; r++)
        for (int x = 0; x < NV; x++) _mm512_storeu_ps(acc + r * d + c0 + x * VEC, sum[r][x]);
}

// All d columns (a multiple of 32) of R rows: 64 at a time, then 32.
static inline __attribute__((always_inline)) void pv_rows(float *acc, const uint32_t *pp, const uint32_t *vp, int d,
                                                         int np, const int R) {
    int c0 = 0;
    for (; c0 + 4 * VEC <= d; c0 += 4 * VEC) pv_cols(acc, pp, vp, d, np, R, c0, 4);
    if (c0 < d) pv_cols(acc, pp, vp, d, np, R, c0, 2);
}

void flash_pairs_probs(uint32_t *scratch, const float *s, int nq, int nk, float scale, const float *m, float *sum) {
    for (int x = 0; x < BQ / VEC && x * VEC < nq; x++) { // 16 rows, their max and sum in registers
        const __mmask16 rows = mask_first16(nq - x * VEC);
        const __m512 mx = _mm512_maskz_loadu_ps(rows, m + x * VEC);
        const __mmask16 seen = rows & _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        const __m512 mf = _mm512_maskz_mov_ps(seen, mx), sc = _mm512_set1_ps(scale); // mf finite
        __m512 total = _mm512_setzero_ps();
        for (int j = 0; j < nk; j += 2) { // a last odd key pairs with a zero
            const float *sj = s + j * BQ + x * VEC;
            const __m512 p0 = exp_below_88_x16(_mm512_fmsub_ps(_mm512_load_ps(sj), sc, mf), seen);
            const __m512 p1 = j + 1 < nk ? exp_below_88_x16(_mm512_fmsub_ps(_mm512_load_ps(sj + BQ), sc, mf), seen)
                                         : _mm512_setzero_ps();
            total = _mm512_add_ps(total, _mm512_add_ps(p0, p1));
            _mm512_store_si512(scratch + j / 2 * BQ + x * VEC, bf16_pairs_nearest(p0, p1));
        }
        _mm512_mask_storeu_ps(sum + x * VEC, rows, total);
    }
}

void flash_pairs_pv(float *acc, const uint32_t *vp, int d, int nq, int nk, const uint32_t *scratch) {
    const int np = (nk + 1) / 2; // a last odd key's pair holds a zero probability
    const uint32_t *pp = scratch;
    int r = 0;
    for (; r + TILE <= nq; r += TILE) pv_rows(acc + (int64_t)r * d, pp + r, vp, d, np, TILE);
    float *a = acc + (int64_t)r * d;
    switch (nq - r) {
#define ROWS(n) \
    case n: pv_rows(a, pp + r, vp, d, np, n); break;
    ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5)
#undef ROWS
    }
}
#else // flash_pairs_applies is 0: nothing else here is called
#include "common/burst.h"

#define NOT_BUILT burst_abort(__FILE__, __LINE__, __func__, "this build has no AVX512-BF16")
int flash_pairs_applies(const flash_args *a) { return 0; }
size_t flash_pairs_scratch_words(void) { return 0; }
void flash_pairs_queries(uint32_t *qp, const float *q, int64_t q_stride, int n, int d) { NOT_BUILT; }
void flash_pairs_scores(float *s, const uint16_t *k, int64_t kv_stride, const uint32_t *qp, int d, int nk) { NOT_BUILT; }
void flash_pairs_probs(uint32_t *scratch, const float *s, int nq, int nk, float scale, const float *m, float *sum) {
    NOT_BUILT;
}
void flash_pairs_pv(float *acc, const uint32_t *vp, int d, int nq, int nk, const uint32_t *scratch) { NOT_BUILT; }
size_t flash_pairs_head_bytes(int d, int64_t max_keys) { return 0; }
void flash_pairs_head_fill(head_copy *h, int tile) { NOT_BUILT; }
#endif
