// The AMX tiles of flash_cpu's query tiles (contract in attention/flash_amx.h).
//
// Scores: C = S^T (keys by queries, as flash_cpu's softmax holds a tile's scores), A = K rows as
// stored (keys by dims: no transpose), B = Q^T in pairs, in w->parts parts (three, or one: rounded),
// made once per query tile. P V: C = the output sums (queries by dims, as flash_cpu's state holds
// them), A = P (queries by keys: the 16 x 16 transposes of S^T's blocks, in w->parts parts), B = V
// in pairs of keys.
// Each runs 2 x 2 blocks of sum tiles (amx_block, common/amx.h).
#include "attention/flash_amx.h"

#include "common/amx.h"

#ifdef BURST_AMX_BUILD
#include "common/burst.h"

enum { T = AMX_TILE, TK = AMX_TILE_K, TE = AMX_TILE_ELEMS, PARTS = AMX_PARTS, QROWS = FLASH_AMX_QUERIES, KROWS = FLASH_AMX_KEYS, PK = KROWS / TK };

int flash_amx_applies(int head_dim, burst_dtype kv_dtype) {
    return kv_dtype == DTYPE_BF16 && head_dim % TK == 0 && amx_usable();
}

// Buffers, for kt = d / 32 column tiles of 32 dims and parts = w->parts (sized for PARTS):
//   q: part p of queries [16 g, 16 g + 16) x dims [32 c, 32 c + 32) at q[((g * kt + c) * parts + p) * TE],
//      row i holding (Q[r][32 c + 2 i], Q[r][32 c + 2 i + 1]) at 2 r
//   k: K rows, KROWS x d, zeros past nk
//   p: part p of P, queries [16 g, ...) x keys [32 c, 32 c + 32) at p[((g * PK + c) * parts + p) * TE],
//      PK = KROWS / 32 key tiles
//   v: keys [32 c, ...) x dims [16 e, 16 e + 16) at v[(c * d / 16 + e) * TE], row i holding
//      (V[32 c + 2 i][16 e + j], V[32 c + 2 i + 1][16 e + j]) at 2 j
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d) {
    const size_t q = (size_t)QROWS / T * (size_t)(max_d / TK) * PARTS * TE, k = (size_t)KROWS * max_d;
    const size_t p = (size_t)QROWS / T * (KROWS / TK) * PARTS * TE, v = (size_t)KROWS / TK * (size_t)(max_d / T) * TE;
    w->q = burst_malloc_aligned(q * 2), w->k = burst_malloc_aligned(k * 2);
    w->p = burst_malloc_aligned(p * 2), w->v = burst_malloc_aligned(v * 2);
    amx_load_tile_config();
}

void flash_amx_thread_end(flash_amx_scratch *w) {
    _tile_release();
    free(w->q), free(w->k), free(w->p), free(w->v);
}

void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16) {
    w->parts = round_bf16 ? 1 : PARTS;
    for (int g = 0; g < amx_pad_to_block(n) / T; g++) amx_rows_to_b(w->q, q, 0, q_stride, n, d, g, d / TK, w->parts);
}

void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk,
                      int nq, int d) {
    const int kt = d / TK, nkf = nk / (2 * T) * (2 * T), nkp = amx_pad_to_block(nk), nqp = amx_pad_to_block(nq), parts = w->parts;
    for (int j = nkf; j < nkp; j++) // a tile reads 16 whole rows: the last pair's past nk zeros, in a copy
        for (int c = 0; c < kt; c++)
            _mm512_store_si512(w->k + (j - nkf) * d + c * TK,
                               _mm512_maskz_loadu_epi16(j < nk ? ~0u : 0, k + (j < nk ? j * kv_stride : 0) + c * TK));
    for (int j = 0; j < nkp; j += 2 * T) { // keys j.. by queries r..: K's rows (as cached, but the last pair) by Q's pairs
        const uint16_t *kj = j < nkf ? k + j * kv_stride : w->k;
        const int64_t ks = j < nkf ? kv_stride : d;
        for (int r = 0; r < nqp; r += 2 * T)
            amx_block(s + j * ld + r, ld, 1, (amx_operand){kj, kj + T * ks, TK, ks * 2, 1},
                      (amx_operand){w->q + r / T * kt * parts * TE, w->q + (r / T + 1) * kt * parts * TE, parts * TE, 64, parts},
                      kt);
    }
}

// P's parts, queries by keys, from p (keys by queries): 16 x 16 transposes; zeros past nq and nk.
static void split_p(flash_amx_scratch *w, const float *p, int64_t ld, int nq, int nk) {
    const int parts = w->parts;
    for (int g = 0; g < amx_pad_to_block(nq) / T; g++)
        for (int c = 0; c < amx_pad_to_block(nk) / TK; c++) {
            __m512i lo[T], hi[T]; // keys [32 c, 32 c + 16) and the next 16, then (transposed) queries
            const __mmask16 m = amx_first16(nq - g * T);
            for (int j = 0; j < T; j++) {
                const int k0 = c * TK + j, k1 = k0 + T;
                lo[j] = _mm512_castps_si512(_mm512_maskz_loadu_ps(k0 < nk ? m : 0, p + (k0 < nk ? k0 * ld : 0) + g * T));
                hi[j] = _mm512_castps_si512(_mm512_maskz_loadu_ps(k1 < nk ? m : 0, p + (k1 < nk ? k1 * ld : 0) + g * T));
            }
            amx_transpose_16x16(lo), amx_transpose_16x16(hi);
            uint16_t *dst = w->p + (g * PK + c) * parts * TE;
            for (int r = 0; r < T; r++)
                amx_split_32(_mm512_castsi512_ps(lo[r]), _mm512_castsi512_ps(hi[r]), parts, dst + r * TK, TE);
        }
}

// V in pairs of keys (two rows' elements side by side as one 32-bit pair); zeros past nk.
static void pair_v(flash_amx_scratch *w, const uint16_t *v, int64_t kv_stride, int nk, int d) {
    for (int c = 0; c < amx_pad_to_block(nk) / TK; c++)
        for (int e = 0; e < d / T; e++)
            for (int i = 0; i < T; i++) {
                const int k0 = c * TK + 2 * i, k1 = k0 + 1;
                const __m256i a = _mm256_maskz_loadu_epi16(k0 < nk ? 0xffff : 0, v + (k0 < nk ? k0 * kv_stride : 0) + e * T);
                const __m256i b = _mm256_maskz_loadu_epi16(k1 < nk ? 0xffff : 0, v + (k1 < nk ? k1 * kv_stride : 0) + e * T);
                _mm512_store_si512(w->v + (c * (d / T) + e) * TE + i * TK,
                                   _mm512_or_si512(_mm512_cvtepu16_epi32(a), _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
            }
}

void flash_amx_pv(flash_amx_scratch *w, float *acc, const float *p, int64_t ld, const uint16_t *v, int64_t kv_stride,
                  int nq, int nk, int d) {
    split_p(w, p, ld, nq, nk);
    pair_v(w, v, kv_stride, nk, d);
    const int kc = amx_pad_to_block(nk) / TK, eg = d / T, parts = w->parts;
    for (int r = 0; r < amx_pad_to_block(nq); r += 2 * T) // queries r.. by dims 16 e..: P's parts by V's pairs
        for (int e = 0; e < eg; e += 2)
            amx_block(acc + (int64_t)r * d + e * T, d, 0,
                      (amx_operand){w->p + r / T * PK * parts * TE, w->p + (r / T + 1) * PK * parts * TE, parts * TE, 64, parts},
                      (amx_operand){w->v + e * TE, w->v + (e + 1) * TE, eg * TE, 64, 1}, kc);
}
#else // flash_amx_applies is 0: nothing else here is called
#include "common/burst.h"

#define NOT_BUILT burst_abort(__FILE__, __LINE__, __func__, "this build has no AMX")
int flash_amx_applies(int head_dim, burst_dtype kv_dtype) { return 0; }
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d) { NOT_BUILT; }
void flash_amx_thread_end(flash_amx_scratch *w) { NOT_BUILT; }
void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16) { NOT_BUILT; }
void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk,
                      int nq, int d) {
    NOT_BUILT;
}
void flash_amx_pv(flash_amx_scratch *w, float *acc, const float *p, int64_t ld, const uint16_t *v, int64_t kv_stride,
                  int nq, int nk, int d) {
    NOT_BUILT;
}
#endif
