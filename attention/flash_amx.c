// The AMX tiles of flash_cpu's query tiles (contract in attention/flash_amx.h).
//
// Scores: C = S^T (keys by queries, as flash_cpu's softmax holds a tile's scores), A = K rows (keys
// by dims: no transpose), B = Q^T in pairs, in w->parts parts (three, or one: rounded), made once
// per query tile. P V runs transposed, O^T = V^T P^T, so that P needs no transpose: C = the output
// sums as dims by queries, A = V^T (dims by keys), B = P^T in pairs of keys, two rows of S^T side
// by side. Each thread lays out a KV head's K (its rows one after the other) and V^T once for all
// the query tiles that read it, key tiles as they are first needed, rather than for every query
// tile anew.
// Each runs 2 x 2 blocks of sum tiles (amx_block, common/amx.h).
#include "attention/flash_amx.h"

#include <math.h>

#include "common/amx.h"
#include "common/bf16_pairs.h"
#include "common/exp_below_88.h"

size_t flash_amx_head_bytes(int max_d, int64_t max_keys) {
    return 2 * sizeof(uint16_t) * (size_t)amx_pad_to_block(max_keys) * (size_t)max_d;
}

#ifdef BURST_AMX_BUILD
#include "common/burst.h"

enum { T = AMX_TILE, TK = AMX_TILE_K, TE = AMX_TILE_ELEMS, PARTS = AMX_PARTS, QROWS = FLASH_AMX_QUERIES, KROWS = FLASH_AMX_KEYS, QG = QROWS / T };

int flash_amx_applies(int head_dim, burst_dtype kv_dtype) {
    return kv_dtype == DTYPE_BF16 && head_dim % TK == 0 && amx_usable();
}

// Buffers, for kt = d / 32 column tiles of 32 dims and parts = w->parts (sized for PARTS):
//   q: part p of queries [16 g, 16 g + 16) x dims [32 c, 32 c + 32) at q[((g * kt + c) * parts + p) * TE],
//      row i holding (Q[r][32 c + 2 i], Q[r][32 c + 2 i + 1]) at 2 r
//   p: part p of P^T, keys [32 c, 32 c + 32) x queries [16 g, 16 g + 16) at p[((c * QG + g) * parts + p) * TE],
//      row i holding (P[q][32 c + 2 i], P[q][32 c + 2 i + 1]) at 2 q
//   k.rows: K of one KV head, key j's d dims at j * d (a cache's rows lie kv_stride apart, 8 KB for
//      LLaMA-7B: the 16 rows of a tile would fall into one L1 set); zeros past the call's keys
//   vt.rows: V^T of one KV head, dims [16 e, 16 e + 16) x keys [32 c, 32 c + 32) at (c * d / 16 + e) * TE,
//      row i holding V[32 c + j][16 e + i] at j; zeros past the call's keys
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d, int max_keys) {
    const size_t q = (size_t)QROWS / T * (size_t)(max_d / TK) * PARTS * TE, p = (size_t)KROWS / TK * QG * PARTS * TE;
    const size_t head = flash_amx_head_bytes(max_d, max_keys) / 2;
    w->q = burst_malloc_aligned(q * 2), w->p = burst_malloc_aligned(p * 2);
    w->k = (flash_amx_head){.rows = burst_malloc_aligned(head)}, w->vt = (flash_amx_head){.rows = burst_malloc_aligned(head)};
    amx_load_tile_config();
}

void flash_amx_thread_end(flash_amx_scratch *w) {
    _tile_release();
    free(w->q), free(w->p), free(w->k.rows), free(w->vt.rows);
}

void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16) {
    w->parts = round_bf16 ? 1 : PARTS;
    for (int g = 0; g < amx_pad_to_block(n) / T; g++)
        amx_rows_to_b(w->q + (int64_t)g * (d / TK) * w->parts * TE, q, DTYPE_F32, q_stride, n, d, (int64_t)g * T, 0, d / TK, w->parts);
}

// Keys [32 c, 32 c + 32) of one KV head's nk rows at src (kv_stride apart), zeros past nk, into a
// head cache's rows.
typedef void head_chunk(uint16_t *rows, const uint16_t *src, int64_t kv_stride, int nk, int d, int c);

// K's rows, one after the other.
static void copy_k(uint16_t *rows, const uint16_t *k, int64_t kv_stride, int nk, int d, int c) {
    for (int j = c * TK; j < (c + 1) * TK; j++)
        for (int d0 = 0; d0 < d; d0 += TK)
            _mm512_store_si512(rows + (int64_t)j * d + d0, _mm512_maskz_loadu_epi16(j < nk ? ~0u : 0, k + (j < nk ? j * kv_stride : 0) + d0));
}

// V^T, 32 dims at a time: a 16 x 16 transpose of 16 keys' dim pairs (32-bit lanes) leaves pair p of
// the 16 keys in one register; the even and odd halves of the two registers of pair p (keys 0-15
// and 16-31) are dims 2 p and 2 p + 1's rows.
static void transpose_v(uint16_t *rows, const uint16_t *v, int64_t kv_stride, int nk, int d, int c) {
    static const uint16_t even[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                      32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
    const __m512i to_even = _mm512_loadu_si512(even), to_odd = _mm512_add_epi16(to_even, _mm512_set1_epi16(1));
    for (int d0 = 0; d0 < d; d0 += TK) {
        __m512i lo[T], hi[T]; // keys [32 c, 32 c + 16) and the next 16, then (transposed) dim pairs
        for (int j = 0; j < T; j++) {
            const int k0 = c * TK + j, k1 = k0 + T;
            lo[j] = _mm512_maskz_loadu_epi16(k0 < nk ? ~0u : 0, v + (k0 < nk ? k0 * kv_stride : 0) + d0);
            hi[j] = _mm512_maskz_loadu_epi16(k1 < nk ? ~0u : 0, v + (k1 < nk ? k1 * kv_stride : 0) + d0);
        }
        transpose_16x16(lo), transpose_16x16(hi);
        for (int p = 0; p < T; p++) {
            const int dim = d0 + 2 * p;
            uint16_t *dst = rows + (c * (d / T) + dim / T) * TE + dim % T * TK;
            _mm512_store_si512(dst, _mm512_permutex2var_epi16(lo[p], to_even, hi[p]));
            _mm512_store_si512(dst + TK, _mm512_permutex2var_epi16(lo[p], to_odd, hi[p]));
        }
    }
}

// h's rows made to hold keys [0, keys) at least of the KV head at src (nk rows at kv_stride): what
// it holds of that head is kept (K/V do not change during a flash_cpu call), another starts anew.
static const uint16_t *head_to(flash_amx_head *h, head_chunk *fill, const uint16_t *src, int64_t kv_stride, int nk,
                               int d, int keys) {
    if (src != h->of || kv_stride != h->stride || nk != h->nk || d != h->d)
        *h = (flash_amx_head){.rows = h->rows, .of = src, .stride = kv_stride, .nk = nk, .d = d};
    for (; h->keys < keys; h->keys += TK) fill(h->rows, src, kv_stride, nk, d, h->keys / TK);
    return h->rows;
}

void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk_all,
                      int k0, int nq, int nk, int d) {
    const int kt = d / TK, nkp = amx_pad_to_block(nk), nqp = amx_pad_to_block(nq), parts = w->parts;
    const uint16_t *rows = head_to(&w->k, copy_k, k, kv_stride, nk_all, d, k0 + nk) + (int64_t)k0 * d;
    for (int j = 0; j < nkp; j += 2 * T) // keys j.. by queries r..: K's rows by Q's pairs
        for (int r = 0; r < nqp; r += 2 * T)
            amx_block(s + j * ld + r, ld, 1, (amx_operand){rows + j * d, rows + (j + T) * d, TK, d * 2, 1},
                      (amx_operand){w->q + r / T * kt * parts * TE, w->q + (r / T + 1) * kt * parts * TE, parts * TE, 64, parts},
                      kt);
}

// Two rows of 16 bf16, each in the top 16 bits of 32-bit lanes, side by side as a tile row of
// pairs: x's element j at 2 j, y's at 2 j + 1.
static inline __m512i pair_tops(__m512i x_top, __m512i y_top) {
    return _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_srli_epi32(x_top, 16), y_top);
}

void flash_amx_probs(flash_amx_scratch *w, const float *s, int64_t ld, int nq, int nk, float scale, const float *m, float *sum) {
    const int parts = w->parts;
    for (int g = 0; g < amx_pad_to_block(nq) / T; g++) { // 16 query rows, their state in registers over all keys
        const __mmask16 rows = mask_first16(nq - g * T);
        const __m512 mg = _mm512_maskz_loadu_ps(rows, m + g * T), sc = _mm512_set1_ps(scale);
        const __mmask16 seen = rows & _mm512_cmp_ps_mask(mg, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        const __m512 mf = _mm512_maskz_mov_ps(seen, mg); // finite
        __m512 sum_g = _mm512_setzero_ps();
        for (int c = 0; c < amx_pad_to_block(nk) / TK; c++) {
            uint16_t *dst = w->p + (c * QG + g) * parts * TE;
            for (int i = 0; i < T; i++) { // keys k0 and k0 + 1, side by side in a row of pairs
                const int k0 = c * TK + 2 * i;
                const __mmask16 in0 = k0 < nk ? rows : 0, in1 = k0 + 1 < nk ? rows : 0;
                const __m512 s0 = _mm512_maskz_loadu_ps(in0, s + (int64_t)k0 * ld + g * T);
                const __m512 s1 = _mm512_maskz_loadu_ps(in1, s + (int64_t)(k0 + 1) * ld + g * T);
                __m512 x = exp_below_88_x16(_mm512_fmsub_ps(s0, sc, mf), in0 & seen);
                __m512 y = exp_below_88_x16(_mm512_fmsub_ps(s1, sc, mf), in1 & seen);
                sum_g = _mm512_add_ps(sum_g, _mm512_add_ps(x, y));
                if (parts == 1) _mm512_store_si512(dst + i * TK, bf16_pairs_nearest(x, y));
                else
                    for (int part = 0; part < parts; part++) {
                        const __m512i xp = amx_bf16_part_top(&x);
                        _mm512_store_si512(dst + part * TE + i * TK, pair_tops(xp, amx_bf16_part_top(&y)));
                    }
            }
        }
        _mm512_mask_storeu_ps(sum + g * T, rows, sum_g);
    }
}

void flash_amx_pv(flash_amx_scratch *w, float *acc_t, const uint16_t *v, int64_t kv_stride, int nk_all, int k0, int nq, int nk,
                  int d) {
    const int kc = amx_pad_to_block(nk) / TK, eg = d / T, parts = w->parts;
    const uint16_t *vt = head_to(&w->vt, transpose_v, v, kv_stride, nk_all, d, k0 + nk) + k0 / TK * eg * TE;
    for (int e = 0; e < eg; e += 2) // dims 16 e.. by queries r..: V^T's tiles by P^T's pairs (one tile where the second holds no query)
        for (int r = 0; r < amx_pad_to_block(nq); r += 2 * T)
            amx_block(acc_t + (int64_t)e * T * QROWS + r, QROWS, 0, (amx_operand){vt + e * TE, vt + (e + 1) * TE, eg * TE, 64, 1},
                      (amx_operand){w->p + r / T * parts * TE, r + T < nq ? w->p + (r / T + 1) * parts * TE : NULL, QG * parts * TE, 64, parts},
                      kc);
}

void flash_amx_store(float *o, int64_t o_stride, const float *acc_t, const float *factor, int n, int d) {
    for (int r0 = 0; r0 < n; r0 += T)
        for (int c0 = 0; c0 < d; c0 += T) {
            __m512i x[T]; // dims c0.. of queries r0.., then (transposed) queries of dims
            for (int i = 0; i < T; i++) x[i] = _mm512_loadu_si512(acc_t + (int64_t)(c0 + i) * QROWS + r0);
            transpose_16x16(x);
            for (int j = 0; j < T && r0 + j < n; j++)
                _mm512_storeu_ps(o + (int64_t)(r0 + j) * o_stride + c0, _mm512_mul_ps(_mm512_castsi512_ps(x[j]), _mm512_set1_ps(factor[r0 + j])));
        }
}
#else // flash_amx_applies is 0: nothing else here is called
#include "common/burst.h"

#define NOT_BUILT burst_abort(__FILE__, __LINE__, __func__, "this build has no AMX")
int flash_amx_applies(int head_dim, burst_dtype kv_dtype) { return 0; }
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d, int max_keys) { NOT_BUILT; }
void flash_amx_thread_end(flash_amx_scratch *w) { NOT_BUILT; }
void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16) { NOT_BUILT; }
void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk_all,
                      int k0, int nq, int nk, int d) {
    NOT_BUILT;
}
void flash_amx_probs(flash_amx_scratch *w, const float *s, int64_t ld, int nq, int nk, float scale, const float *m, float *sum) {
    NOT_BUILT;
}
void flash_amx_pv(flash_amx_scratch *w, float *acc_t, const uint16_t *v, int64_t kv_stride, int nk_all, int k0, int nq, int nk,
                  int d) {
    NOT_BUILT;
}
void flash_amx_store(float *o, int64_t o_stride, const float *acc_t, const float *factor, int n, int d) { NOT_BUILT; }
#endif
