// The CPU twin of the flash-attention forward (contract in attention/flash.h). Written plainly:
// it is the specification the CUDA kernel is tested against. A key tile's scores are held
// transposed, each key's scores of the tile's query rows side by side, so that the softmax runs
// along the rows a vector at a time (no max or sum across a vector register). A query tile of
// more than 8 rows takes its scores against its Q transposed once for all its key tiles: each K
// element, broadcast, multiplies a vector of queries, a few keys at a time. P V works on a few query
// rows at a time, each loaded V vector serving them.
//
// For each (head, tile of FLASH_CPU_BQ queries, or FLASH_AMX_QUERIES on AMX), walk the key tiles
// of FLASH_CPU_BK keys (FLASH_AMX_KEYS on AMX) that the tile can see, keeping a running row max m,
// row sum l and unnormalised output acc (online softmax), so the S and P tiles (64x64 floats, 16
// KB; 64 KB on AMX) stay in L1/L2. Under causal masking a key tile that lies wholly after the last
// query of the tile is never visited, and only tiles that straddle the diagonal (or run past nk)
// are masked element by element.
// Each OpenMP thread owns one scratch block (the rows' state, S, Q^T) for the whole parallel region.
// A bf16 K/V tile is widened to float32 in that scratch once per query tile that reads it
// (head_dim values per 64 dot products of head_dim: a small share of the work). On a CPU with AMX,
// a bf16 K/V tile's scores and P V run in bf16 tiles instead (attention/flash_amx.h), in place of
// these loops; the softmax between them is the same.
//
// Decode calls (up to FLASH_CPU_SPLIT_ROWS query rows) are memory-bound: each K/V element serves
// a few rows. Walking one head's keys reads head_dim values and then jumps kv_stride to the next
// key (all KV heads share a cached row), which the hardware prefetchers follow poorly: 11 GB/s on a
// 2-core EPYC that streams 40 (bench/bench_flash_decode). So a decode call is split into chunks of
// FLASH_CPU_CHUNK keys, each a thread's work over all heads, tile by tile, key row by key row, so
// that a thread reads its chunk of the cache front to back; the chunks' partials are then
// merged (attention/online_softmax.h). The chunk length is fixed so that a call's result depends on
// neither the thread count nor the other calls; only the ranges of KV heads that keep threads busy
// when chunks are few depend on them, and heads do not mix.
#include "attention/flash.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attention/dot_cpu.h"
#include "attention/flash_amx.h"
#include "attention/flash_pairs.h"
#include "attention/head_copy.h"
#include "attention/online_softmax.h"
#include "common/burst.h"
#include "common/exp_below_88.h"
#include "common/vec.h"

enum { FLASH_CPU_BQ = 64, FLASH_CPU_BK = 64, FLASH_CPU_SPLIT_ROWS = 8, FLASH_CPU_CHUNK = 8 * FLASH_CPU_BK };
_Static_assert((int)FLASH_CPU_BQ <= (int)FLASH_AMX_QUERIES && (int)FLASH_CPU_BK <= (int)FLASH_AMX_KEYS, "AMX tiles are the larger");
_Static_assert((int)FLASH_CPU_BQ == (int)FLASH_PAIRS_QUERIES && (int)FLASH_CPU_BK == (int)FLASH_PAIRS_KEYS,
               "flash_pairs takes the vector loops' tiles");

// The rows of a query tile: AMX's take 128 (each K/V tile read half as often), the vector loops' 64
// (they ran slower with 128). Also the row stride of w->s and the rows of state a tile resets.
static int query_tile_rows(int amx) { return amx ? FLASH_AMX_QUERIES : FLASH_CPU_BQ; }
// The keys of a key tile: 128 on AMX (attention/flash_amx.h), 64 in the vector loops.
static int key_tile_keys(int amx) { return amx ? FLASH_AMX_KEYS : FLASH_CPU_BK; }
enum { DECODE_PV_KEYS = 4 }; // keys a decode call's P V adds to its state at once (8: no faster)
// How many keys ahead a decode call asks for a bf16 cache's K rows, and V rows (decode_tile_as).
enum { DECODE_PREFETCH_K = 2, DECODE_PREFETCH_V = DECODE_PV_KEYS };
enum { RESCALE_ROWS = 16 };  // rows of AMX's transposed sums that softmax_tile rescales together: a vector
enum { SOFTMAX_ROWS = FLASH_AMX_QUERIES }; // rows softmax_tile's passes take at once
// How far a score may pass a row's running max before the max moves (softmax_tile): e^8 ~ 3000 keeps
// the probabilities and their sums far inside float32's (and bf16's) range.
#define LAZY_MAX 8.0f
// The vector loops' register tiles (common/vec.h). P V keeps PV_ROWS query rows x PV_COLS columns
// of sums in registers beside the V vectors of a key that the rows share; the scores keep
// SCORE_KEYS keys x SCORE_QUERIES queries of sums beside the vectors of Q^T that the keys share.
// AVX-512: 6 x 4 vectors of sums, 4 shared, a broadcast: 29 of 32 registers; AVX2: 6 x 2, 15 of
// 16. With 4 rows (or keys) a pass GCC folded the shared loads into every multiply-add, each vector
// loaded once a row, and attention took ~1.4-1.9x the time (bench_ring --ranks 2 --heads 8
// --kv-heads 2 --head-dim 128, on a 2-core Zen 5: AVX-512 0.83 s against 0.44 at N = 8192;
// built for x86-64-v3, 0.34 s against 0.24 at N = 4096).
enum { PV_ROWS = 6, SCORE_KEYS = 6, TILE_VECS = VEC_FLOATS >= 16 ? 4 : 2 };
enum { PV_COLS = TILE_VECS * VEC_FLOATS, SCORE_QUERIES = TILE_VECS * VEC_FLOATS };
_Static_assert(PV_ROWS <= 6 && SCORE_KEYS <= 6, "add_pv and scores take the last rows and keys by cases up to 5");

// The online-softmax state of a block of query rows of one head.
typedef struct {
    float *acc;     // (rows, head_dim): unnormalised output; AMX's (transposed): (head_dim, FLASH_AMX_QUERIES)
    float *m, *l;   // (rows): running row max and row sum of exp(s - m)
    int transposed; // acc as AMX's P V sums it (attention/flash_amx.h)
} flash_cpu_rows;

// Where row r's element c of st.acc lies (d = head_dim).
static inline int64_t acc_at(flash_cpu_rows st, int r, int c, int d) {
    return st.transposed ? (int64_t)c * FLASH_AMX_QUERIES + r : (int64_t)r * d + c;
}

typedef struct {
    float *s;       // (keys, rows): scores, then probabilities, of one key tile, a key's at a time
    float *qt;      // (head_dim, FLASH_CPU_BQ): a query tile's Q transposed, its rows past nq zero (or flash_pairs_queries')
    uint32_t *pairs; // flash_pairs_pv's scratch, where a call takes that path
    head_copy head; // off AMX, the K and V of the KV head of a prompt's query tiles
    float *mx;      // (rows): a key tile's row maxima, then the factors each row's state is rescaled by
    float *acc, *m, *l; // state of up to max_rows rows: a query tile, or a decode call's heads
    flash_amx_scratch amx; // where a call takes the AMX path
} flash_cpu_scratch;

// The thread's state from row r0 on; rows of head_dim d.
static flash_cpu_rows rows_at(const flash_cpu_scratch *w, int r0, int d) {
    return (flash_cpu_rows){w->acc + (int64_t)r0 * d, w->m + r0, w->l + r0, 0};
}

// n rows of st back to "no key seen".
static void reset_rows(flash_cpu_rows st, int n, int d) {
    for (int r = 0; r < n; r++) st.m[r] = -INFINITY, st.l[r] = 0.0f;
    for (int64_t x = 0; x < (int64_t)n * d; x++) st.acc[x] = 0.0f;
}

static inline const float *q_row(const flash_args *a, int64_t i, int h) {
    return a->q + i * a->q_stride + (int64_t)h * a->head_dim;
}
// Key tile t (FLASH_CPU_BK keys) of a head's K and V into its copy as float32 rows side by side
// (key j at (float *)h->k + j x d): the vector loops' head_fill, for an f32 cache (copied) and a
// bf16 one (widened).
static inline void float_rows_tile(head_copy *h, int t, const int bf16) {
    const int k0 = t * FLASH_CPU_BK, k1 = k0 + FLASH_CPU_BK < h->nk ? k0 + FLASH_CPU_BK : h->nk, d = h->d;
    const void *from[2] = {h->of_k, h->of_v};
    float *to[2] = {h->k, h->v};
    for (int x = 0; x < 2; x++)
        for (int64_t j = k0; j < k1; j++) {
            float *row = to[x] + j * d;
            if (!bf16) memcpy(row, (const float *)from[x] + j * h->stride, sizeof(float) * (size_t)d);
            else
                for (int c = 0; c < d; c++) row[c] = bf16_to_f32(((const uint16_t *)from[x])[j * h->stride + c]);
        }
}
static void f32_head_fill(head_copy *h, int t) { float_rows_tile(h, t, 0); }
static void bf16_head_fill(head_copy *h, int t) { float_rows_tile(h, t, 1); }

// The bytes of the two buffers of a head's copy for the vector loops, up to max_keys keys of d.
static size_t float_head_bytes(int d, int64_t max_keys) {
    return 2 * sizeof(float) * (size_t)((max_keys + FLASH_CPU_BK - 1) / FLASH_CPU_BK * FLASH_CPU_BK) * (size_t)d;
}

// Query rows [q0, q0 + n) of head h transposed into qt (head_dim rows of FLASH_CPU_BQ), the
// columns past n zero (their scores are computed, then ignored), so that the scores' products run
// along the rows with no sum across a vector register. Once per query tile, for all its key tiles.
static void q_transposed(const flash_args *a, int h, int64_t q0, int n, float *qt) {
    for (int r = 0; r < FLASH_CPU_BQ; r++)
        for (int c = 0; c < a->head_dim; c++) qt[c * FLASH_CPU_BQ + r] = r < n ? q_row(a, q0 + r, h)[c] : 0.0f;
}

// The scores of R <= SCORE_KEYS keys (rows of k at k_stride; R a constant once inlined) against
// the query tile in qt, key r's at s + r x FLASH_CPU_BQ, SCORE_QUERIES queries at a time: their
// R x SCORE_QUERIES sums stay in registers over head_dim, each broadcast K element multiplying a
// vector of queries.
static inline __attribute__((always_inline)) void scores_keys(float *s, const float *k, int64_t k_stride,
                                                             const float *qt, int d, const int R) {
    enum { NV = SCORE_QUERIES / VEC_FLOATS };
    for (int q0 = 0; q0 < FLASH_CPU_BQ; q0 += SCORE_QUERIES) {
        vec acc[SCORE_KEYS][NV];
        for (int r = 0; r < R; r++)
            for (int x = 0; x < NV; x++) acc[r][x] = (vec){0};
        for (int c = 0; c < d; c++) {
            vec q[NV];
            for (int x = 0; x < NV; x++) q[x] = vec_load(qt + c * FLASH_CPU_BQ + q0 + x * VEC_FLOATS);
            for (int r = 0; r < R; r++) {
                const float kr = k[r * k_stride + c];
                for (int x = 0; x < NV; x++) acc[r][x] += kr * q[x];
            }
        }
        for (int r = 0; r < R; r++)
            for (int x = 0; x < NV; x++) vec_store(s + r * FLASH_CPU_BQ + q0 + x * VEC_FLOATS, acc[r][x]);
    }
}

// The same for nk keys: SCORE_KEYS at a time, then the last few.
static void scores(float *s, const float *k, int64_t k_stride, const float *qt, int d, int nk) {
    int j = 0;
    for (; j + SCORE_KEYS <= nk; j += SCORE_KEYS)
        scores_keys(s + j * FLASH_CPU_BQ, k + j * k_stride, k_stride, qt, d, SCORE_KEYS);
    switch (nk - j) {
#define KEYS(n) \
    case n: scores_keys(s + j * FLASH_CPU_BQ, k + j * k_stride, k_stride, qt, d, n); break;
    KEYS(1) KEYS(2) KEYS(3) KEYS(4) KEYS(5)
#undef KEYS
    }
}

// Columns [c0, c0 + COLS) of acc (R rows of d) += p · v (nk rows at v_stride), where p[j * ld + r]
// is row r's probability of key j; R <= PV_ROWS and COLS (a multiple of VEC_FLOATS, at most PV_COLS)
// constants once inlined, so that the R x COLS sums stay in registers over all nk keys (acc in
// memory would be loaded and stored again for every key) and each loaded V vector serves the R rows.
static inline __attribute__((always_inline)) void add_pv_cols(float *acc, const float *p, int64_t ld,
                                                             const float *v, int64_t v_stride, int d, int nk,
                                                             const int R, int c0, const int COLS) {
    const int NV = COLS / VEC_FLOATS;
    vec s[PV_ROWS][PV_COLS / VEC_FLOATS];
    for (int r = 0; r < R; r++)
        for (int x = 0; x < NV; x++) s[r][x] = vec_load(acc + r * d + c0 + x * VEC_FLOATS);
    for (int j = 0; j < nk; j++) {
        vec vj[PV_COLS / VEC_FLOATS];
        for (int x = 0; x < NV; x++) vj[x] = vec_load(v + j * v_stride + c0 + x * VEC_FLOATS);
        for (int r = 0; r < R; r++) {
            const float pr = p[j * ld + r];
            for (int x = 0; x < NV; x++) s[r][x] += pr * vj[x];
        }
    }
    for (int r = 0; r < R; r++)
        for (int x = 0; x < NV; x++) vec_store(acc + r * d + c0 + x * VEC_FLOATS, s[r][x]);
}

// All d columns of R rows: PV_COLS at a time, then a vector's width, then what is left one by one.
static inline __attribute__((always_inline)) void add_pv_rows(float *acc, const float *p, int64_t ld,
                                                             const float *v, int64_t v_stride, int d, int nk,
                                                             const int R) {
    int c0 = 0;
    for (; c0 + PV_COLS <= d; c0 += PV_COLS) add_pv_cols(acc, p, ld, v, v_stride, d, nk, R, c0, PV_COLS);
    for (; c0 + VEC_FLOATS <= d; c0 += VEC_FLOATS) add_pv_cols(acc, p, ld, v, v_stride, d, nk, R, c0, VEC_FLOATS);
    for (int j = 0; c0 < d && j < nk; j++)
        for (int r = 0; r < R; r++)
            for (int c = c0; c < d; c++) acc[r * d + c] += p[j * ld + r] * v[j * v_stride + c];
}

// The same for nq rows: PV_ROWS at a time, then the last few.
static void add_pv(float *acc, const float *p, int64_t ld, const float *v, int64_t v_stride, int d, int nq, int nk) {
    int r = 0;
    for (; r + PV_ROWS <= nq; r += PV_ROWS) add_pv_rows(acc + (int64_t)r * d, p + r, ld, v, v_stride, d, nk, PV_ROWS);
    float *a = acc + (int64_t)r * d;
    switch (nq - r) {
#define ROWS(n) \
    case n: add_pv_rows(a, p + r, ld, v, v_stride, d, nk, n); break;
    ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5)
#undef ROWS
    }
}

// Rows [0, R) (R <= SOFTMAX_ROWS) of softmax_tile's row maxima and probabilities, key by key, and
// the state's m and l: where R is the constant SOFTMAX_ROWS, the rows' maxima and sums stay in
// registers over all nk keys, rather than loaded and stored at every key. mx: where each row's
// rescale factor goes. On AMX (amx), flash_amx_probs computes the probabilities, on AVX512-BF16
// (pairs) flash_pairs_probs, each laid out for its P V. (They could ride
// along a pass of their own against the old maxima, run again only where a max moves; but in a
// random-weight model's prompt half the tiles moved some row's max.)
static inline __attribute__((always_inline)) void softmax_rows(float *s, int64_t ld, int nk, float scale, float *m,
                                                              float *l, float *mx, flash_amx_scratch *amx, uint32_t *pairs,
                                                              const int R) {
    // The row maxima of the unscaled scores (scale > 0 keeps their order): the scaling rides in the
    // exponent below instead of a pass that stores every score scaled.
    float top[SOFTMAX_ROWS], sum[SOFTMAX_ROWS];
    for (int i = 0; i < R; i++) top[i] = -INFINITY;
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < R; i++) {
            const float x = s[j * ld + i];
            top[i] = x > top[i] ? x : top[i]; // (fmaxf is a call)
        }
    // The running max m is lazy: it moves only when a score passes it by more than LAZY_MAX, so that
    // most tiles leave the state alone (m need not be the max for exact results, only the same in
    // P, l and lse); the probabilities stay below e^LAZY_MAX. mx: 0 when the old max is -inf (a row
    // that has seen no key keeps its zeros); 1 when it stays.
    float m_row[SOFTMAX_ROWS];
    for (int i = 0; i < R; i++) {
        const float m_new = top[i] * scale;
        mx[i] = m_new > m[i] + LAZY_MAX ? expf(m[i] - m_new) : 1.0f;
        m[i] = m_row[i] = m_new > m[i] + LAZY_MAX ? m_new : m[i];
        sum[i] = l[i] * mx[i];
    }
    if (amx || pairs) {
        float tile_sum[SOFTMAX_ROWS];
        if (amx) flash_amx_probs(amx, s, ld, R, nk, scale, m, tile_sum);
        else flash_pairs_probs(pairs, s, R, nk, scale, m, tile_sum);
        for (int i = 0; i < R; i++) sum[i] += tile_sum[i];
    } else
        for (int j = 0; j < nk; j++)
            for (int i = 0; i < R; i++) { // a row that has seen no key yet adds nothing
                const float p = m_row[i] == -INFINITY ? 0.0f : exp_below_88(s[j * ld + i] * scale - m_row[i]);
                s[j * ld + i] = p;
                sum[i] += p;
            }
    for (int i = 0; i < R; i++) l[i] = sum[i];
}

// Rows [0, n) of st take the scores of nk keys in s (key j's at s + j x ld): scaled, masked
// (with `masked`, row r sees the keys j <= see0 + r % period: its query's position less the
// tile's first key's; a prefill tile's rows are its queries, period n; a decode call's rows are
// nq queries of each head, period nq), online softmax. The scores become the probabilities that
// P V weighs the keys by: in s, or on AMX (amx, n <= 128) as flash_amx_probs lays them out, or on
// AVX512-BF16 (pairs, n <= 64) as flash_pairs_probs does. Every loop runs along the rows, a vector
// of them at a time (64-row tiles as a constant too). mx: n floats of scratch.
static void softmax_tile(const flash_args *a, float *s, int64_t ld, int n, int nk, flash_cpu_rows st, float *mx,
                         int masked, int64_t see0, int period, flash_amx_scratch *amx, uint32_t *pairs) {
    if (masked)
        for (int r = 0; r < n; r++) {
            const int64_t first_unseen = see0 + r % period + 1;
            for (int64_t j = first_unseen > 0 ? first_unseen : 0; j < nk; j++) s[j * ld + r] = -INFINITY;
        }
    for (int r0 = 0; r0 < n; r0 += SOFTMAX_ROWS) { // a whole AMX tile's rows (a constant) at once
        float *m = st.m + r0, *l = st.l + r0;
        if (n - r0 >= SOFTMAX_ROWS) softmax_rows(s + r0, ld, nk, a->scale, m, l, mx + r0, amx, pairs, SOFTMAX_ROWS);
        else if (n - r0 == FLASH_CPU_BQ) softmax_rows(s + r0, ld, nk, a->scale, m, l, mx + r0, amx, pairs, FLASH_CPU_BQ);
        else softmax_rows(s + r0, ld, nk, a->scale, m, l, mx + r0, amx, pairs, n - r0);
    }
    // Once a row's max settles, most key tiles leave it alone. A row's sums lie side by side, but
    // AMX's transposed sums go along the rows, RESCALE_ROWS at a time.
    const int d = a->head_dim;
    if (!st.transposed) {
        for (int r = 0; r < n; r++)
            if (mx[r] != 1.0f)
                for (int c = 0; c < d; c++) st.acc[(int64_t)r * d + c] *= mx[r];
        return;
    }
    for (int r0 = 0; r0 < n; r0 += RESCALE_ROWS) {
        const int r1 = r0 + RESCALE_ROWS < n ? r0 + RESCALE_ROWS : n;
        int rescaled = 0;
        for (int r = r0; r < r1; r++) rescaled |= mx[r] != 1.0f;
        for (int c = 0; rescaled && c < d; c++)
            for (int r = r0; r < r1; r++) st.acc[acc_at(st, r, c, d)] *= mx[r];
    }
}

// Row k0 of KV head hk of bf16 K or V (base), as stored.
static const uint16_t *bf16_rows(const flash_args *a, const void *base, int64_t k0, int hk) {
    return (const uint16_t *)base + k0 * a->kv_stride + (int64_t)hk * a->head_dim;
}

// One key tile [k0, k1) against the query rows [q0, q1) of head h, whose state is st: scores,
// online softmax, then acc += P V. Many rows take their scores against w->qt, which holds them
// transposed (flash_cpu_query_tile); a few (a decode call's) take dot products; with amx, both
// products run on AMX, with pairs as bf16 dot products (attention/flash_pairs.h).
static void flash_cpu_tile(const flash_args *a, flash_cpu_scratch *w, flash_cpu_rows st, int h, int hk,
                           int64_t q0, int64_t q1, int64_t k0, int64_t k1, int masked, int amx, int pairs) {
    const int d = a->head_dim, nq = (int)(q1 - q0), nk = (int)(k1 - k0);
    const int ld = query_tile_rows(amx); // of w->s
    if (amx) flash_amx_scores(&w->amx, w->s, ld, bf16_rows(a, a->k, 0, hk), a->kv_stride, a->nk, (int)k0, nq, nk, d);
    else if (pairs) flash_pairs_scores(w->s, (const uint16_t *)w->head.k + k0 * d, d, (const uint32_t *)w->qt, d, nk);
    else {
        const float *k = (const float *)w->head.k + k0 * d;
        if (nq > FLASH_CPU_SPLIT_ROWS) scores(w->s, k, d, w->qt, d, nk);
        else dot_rows(q_row(a, q0, h), a->q_stride, nq, k, d, nk, d, w->s, 1, FLASH_CPU_BQ);
    }
    softmax_tile(a, w->s, ld, nq, nk, st, w->mx, masked, a->q_pos0 + q0 - a->k_pos0 - k0, nq, amx ? &w->amx : NULL,
                 pairs ? w->pairs : NULL);
    if (amx) flash_amx_pv(&w->amx, st.acc, bf16_rows(a, a->v, 0, hk), a->kv_stride, a->nk, (int)k0, nq, nk, d);
    else if (pairs)
        flash_pairs_pv(st.acc, (const uint32_t *)w->head.v + k0 / FLASH_CPU_BK * (FLASH_CPU_BK / 2) * d, d, nq, nk, w->pairs);
    else add_pv(st.acc, w->s, FLASH_CPU_BQ, (const float *)w->head.v + k0 * d, d, d, nq, nk);
}

// The scores of one key (k, its KV head's slice of d) against n query rows (q, qs apart) into s:
// 4 rows at a time, each loaded K element serving them (dot_rx1_as), then the last 1 to 3.
static inline __attribute__((always_inline)) void decode_scores(const float *q, int64_t qs, int n, const void *k,
                                                               const int kv_bf16, int d, float *s) {
    int i = 0;
    for (; i + 4 <= n; i += 4) dot_rx1_as(q + i * qs, qs, 4, k, kv_bf16, d, s + i);
    switch (n - i) {
    case 3: dot_rx1_as(q + i * qs, qs, 3, k, kv_bf16, d, s + i); break;
    case 2: dot_rx1_as(q + i * qs, qs, 2, k, kv_bf16, d, s + i); break;
    case 1: dot_rx1_as(q + i * qs, qs, 1, k, kv_bf16, d, s + i); break;
    }
}

#ifdef BURST_AVX512
// decode_pv's dims [c, c + nc), nc <= 16 (16 a constant once inlined, for whole vectors): the NB
// keys' V values (widened from bf16 where v_bf16) loaded once for the n rows (GQA: a KV head's
// query heads), each row's state loaded and stored once for the NB keys.
static inline __attribute__((always_inline)) void decode_pv_dims(float *acc, int n, int d, const float *p, int64_t ld,
                                                                const void *v, const int v_bf16, int64_t v_stride,
                                                                const int NB, int c, const int nc) {
    const __mmask16 m = mask_first16(nc);
    __m512 vb[DECODE_PV_KEYS];
    for (int b = 0; b < NB; b++) vb[b] = floats16((const char *)v + b * v_stride * (v_bf16 ? 2 : 4), v_bf16, c, m);
    for (int t = 0; t < n; t++) {
        __m512 x = floats16(acc + t * d, 0, c, m);
        for (int b = 0; b < NB; b++) x = _mm512_fmadd_ps(_mm512_set1_ps(p[b * ld + t]), vb[b], x);
        store16(acc + t * d + c, m, x);
    }
}
#endif

// acc (n state rows of d) += the probabilities of NB keys (key b's of row t at p[b x ld + t]) times
// their V rows (v + b x v_stride elements, bf16 when v_bf16, read in place): on AVX-512 16 dims at
// a time (decode_pv_dims), else row by row, each row's state loaded and stored once for the NB keys.
static inline __attribute__((always_inline)) void decode_pv(float *acc, int n, int d, const float *p, int64_t ld,
                                                           const void *v, const int v_bf16, int64_t v_stride,
                                                           const int NB) {
#ifdef BURST_AVX512
    int c = 0;
    for (; c + 16 <= d; c += 16) decode_pv_dims(acc, n, d, p, ld, v, v_bf16, v_stride, NB, c, 16);
    if (c < d) decode_pv_dims(acc, n, d, p, ld, v, v_bf16, v_stride, NB, c, d - c);
#else
    const float *vf = v;
    const uint16_t *vh = v;
    for (int t = 0; t < n; t++, acc += d) {
        float pb[DECODE_PV_KEYS];
        for (int b = 0; b < NB; b++) pb[b] = p[b * ld + t];
        for (int c = 0; c < d; c++) {
            float x = acc[c];
            for (int b = 0; b < NB; b++) x += pb[b] * (v_bf16 ? bf16_to_f32(vh[b * v_stride + c]) : vf[b * v_stride + c]);
            acc[c] = x;
        }
    }
#endif
}

// One key tile [k0, k1) of a decode call against the heads of KV heads [hk0, hk1), key by key: a
// key's cached row holds every KV head, so the tile is read front to back (flash_cpu_tile, one
// head at a time, jumps kv_stride from key to key: with 2 to 6 rows, 1.3-2x the time). State row
// t is query row t % nq of head hk0 x group + t / nq, its score of key j at s[j x rows + t]. K is
// read in place, bf16 (kv_bf16, a constant once inlined) widened in registers; P V takes V
// DECODE_PV_KEYS keys at a time, V read in place too. (V widened into a buffer first, as the
// prompt's tiles once did, cost a decode step of 16 sequences at 1900 tokens ~12% with a bf16
// cache.) A bf16 cache's K and V rows are asked for a few keys ahead: one thread read it at ~20
// GB/s, waiting on the loads (perf), where the same thread with an f32 cache reads ~24 and 2
// threads reach the memory's ~45 (prefetching there too made it slower).
// (Loops over KV heads and their query heads, not t with divisions: a division per head and key
// cost more than the memory it waits on.)
static inline __attribute__((always_inline)) void decode_tile_as(const flash_args *a, flash_cpu_scratch *w,
                                                                int64_t k0, int64_t k1, int masked, int hk0, int hk1,
                                                                const int kv_bf16) {
    const int d = a->head_dim, group = a->n_heads / a->n_kv_heads, nk = (int)(k1 - k0), nq = a->nq;
    const int rows = (hk1 - hk0) * group * nq;
    const size_t esize = kv_bf16 ? 2 : 4;
    const flash_cpu_rows st = rows_at(w, 0, d);
    for (int j = 0; j < nk; j++) {
        const char *k = (const char *)a->k + (size_t)((k0 + j) * a->kv_stride + (int64_t)hk0 * d) * esize;
        float *s = w->s + j * rows;
        for (int hk = hk0; hk < hk1; hk++, k += (size_t)d * esize) {
            for (size_t o = 0; kv_bf16 && o < (size_t)d * esize; o += 64)
                __builtin_prefetch(k + DECODE_PREFETCH_K * a->kv_stride * esize + o, 0, 3);
            // One row a head (a decode step): the KV head's query heads, d apart, take K together.
            if (nq == 1) decode_scores(q_row(a, 0, hk * group), d, group, k, kv_bf16, d, s), s += group;
            else
                for (int h = hk * group; h < (hk + 1) * group; h++, s += nq)
                    decode_scores(q_row(a, 0, h), a->q_stride, nq, k, kv_bf16, d, s);
        }
    }
    softmax_tile(a, w->s, rows, rows, nk, st, w->mx, masked, a->q_pos0 - a->k_pos0 - k0, nq, NULL, NULL);
    for (int j = 0; j < nk; j += DECODE_PV_KEYS) {
        const int nb = nk - j < DECODE_PV_KEYS ? nk - j : DECODE_PV_KEYS, head_rows = group * nq;
        for (int hk = hk0; hk < hk1; hk++) {
            const char *v = (const char *)a->v + (size_t)((k0 + j) * a->kv_stride + (int64_t)hk * d) * esize;
            float *acc = st.acc + (int64_t)(hk - hk0) * head_rows * d;
            const float *p = w->s + j * rows + (hk - hk0) * head_rows;
            for (int b = 0; kv_bf16 && b < DECODE_PV_KEYS; b++)
                for (size_t o = 0; o < (size_t)d * esize; o += 64)
                    __builtin_prefetch(v + ((DECODE_PREFETCH_V + b) * a->kv_stride) * esize + o, 0, 3);
            if (nb == DECODE_PV_KEYS) decode_pv(acc, head_rows, d, p, rows, v, kv_bf16, a->kv_stride, DECODE_PV_KEYS);
            else
                for (int b = 0; b < nb; b++)
                    decode_pv(acc, head_rows, d, p + b * rows, rows, v + (size_t)(b * a->kv_stride) * esize, kv_bf16, 0, 1);
        }
    }
}

static void decode_tile(const flash_args *a, flash_cpu_scratch *w, int64_t k0, int64_t k1, int masked, int hk0,
                        int hk1) {
    if (a->kv_dtype == DTYPE_BF16) decode_tile_as(a, w, k0, k1, masked, hk0, hk1, 1);
    else decode_tile_as(a, w, k0, k1, masked, hk0, hk1, 0);
}

// Normalises the rows [q0, q1) of head h (state st) into o (row i at o + i * o_stride) and lse
// ((n_heads, a->nq) layout).
static void store_rows(const flash_args *a, flash_cpu_rows st, int h, int64_t q0, int64_t q1, float *o,
                       int64_t o_stride, float *lse) {
    const int d = a->head_dim;
    for (int64_t i = q0; i < q1; i++) { // l becomes the factor each row's output takes
        const int r = (int)(i - q0);
        lse[(int64_t)h * a->nq + i] = st.l[r] > 0.0f ? st.m[r] + logf(st.l[r]) : -INFINITY;
        st.l[r] = st.l[r] > 0.0f ? 1.0f / st.l[r] : 0.0f;
    }
    if (st.transposed) flash_amx_store(o + q0 * o_stride + (int64_t)h * d, o_stride, st.acc, st.l, (int)(q1 - q0), d);
    else
        for (int64_t i = q0; i < q1; i++) {
            const int r = (int)(i - q0);
            float *out = o + i * o_stride + (int64_t)h * d;
            for (int c = 0; c < d; c++) out[c] = st.acc[(int64_t)r * d + c] * st.l[r];
        }
}

// Keys past the last query's position are invisible to all rows [q0, q1) under causal masking:
// the end of the keys those rows see.
static int64_t visible_keys(const flash_args *a, int64_t q1) {
    if (!a->causal) return a->nk;
    const int64_t last_visible = a->q_pos0 + q1 - 1 - a->k_pos0; // key index
    return last_visible + 1 < 0 ? 0 : last_visible + 1 < a->nk ? last_visible + 1 : a->nk;
}

// Mask only when some key of [k0, k1) lies after the position of query row q0.
static int tile_masked(const flash_args *a, int64_t q0, int64_t k1) {
    return a->causal && a->k_pos0 + k1 - 1 > a->q_pos0 + q0;
}

// One query tile [q0, q1) of head h: every visible key tile, then normalise and store.
static void flash_cpu_query_tile(const flash_args *a, flash_cpu_scratch *w, int h, int64_t q0,
                                 int64_t q1) {
    const int hk = h / (a->n_heads / a->n_kv_heads), amx = flash_amx_applies(a->head_dim, a->kv_dtype);
    flash_cpu_rows st = rows_at(w, 0, a->head_dim);
    st.transposed = amx;
    reset_rows(st, query_tile_rows(amx), a->head_dim); // every row: AMX's P V carries rows past q1 (zeros) too
    const int pairs = !amx && flash_pairs_applies(a); // every tile: the head copy is laid out for one path
    if (amx) flash_amx_queries(&w->amx, q_row(a, q0, h), a->q_stride, (int)(q1 - q0), a->head_dim, a->qp_bf16);
    else if (pairs) flash_pairs_queries((uint32_t *)w->qt, q_row(a, q0, h), a->q_stride, (int)(q1 - q0), a->head_dim);
    else if (q1 - q0 > FLASH_CPU_SPLIT_ROWS) q_transposed(a, h, q0, (int)(q1 - q0), w->qt); // for flash_cpu_tile
    const int64_t k_end = visible_keys(a, q1);
    if (!amx) {
        head_fill *fill = pairs ? flash_pairs_head_fill : a->kv_dtype == DTYPE_BF16 ? bf16_head_fill : f32_head_fill;
        const int64_t head = (int64_t)hk * a->head_dim * (int64_t)dtype_size(a->kv_dtype); // bytes
        head_copy_to(&w->head, fill, (const char *)a->k + head, (const char *)a->v + head, a->kv_stride, a->nk,
                     a->head_dim, (int)k_end, FLASH_CPU_BK);
    }
    const int bk = key_tile_keys(amx);
    for (int64_t k0 = 0; k0 < k_end; k0 += bk) {
        int64_t k1 = k0 + bk < k_end ? k0 + bk : k_end;
        flash_cpu_tile(a, w, st, h, hk, q0, q1, k0, k1, tile_masked(a, q0, k1), amx, pairs);
    }
    store_rows(a, st, h, q0, q1, a->o, a->o_stride, a->lse);
}

// A decode call, split into chunks of FLASH_CPU_CHUNK keys whose partials are merged afterwards,
// and, when the step's chunks are fewer than the threads, into ranges of KV heads (independent).
typedef struct {
    const flash_args *a;
    int n_chunks, n_ranges;
    float *parts; // chunks 1..n_chunks-1: (nq, n_heads, head_dim) O, then (n_heads, nq) lse, each
} decode_call;

typedef struct {
    const decode_call *c;
    int chunk, range;
} decode_job;

static int is_decode(const flash_args *a) { return a->nq > 0 && a->nq <= FLASH_CPU_SPLIT_ROWS; }
static int64_t part_floats(const flash_args *a) { return (int64_t)a->nq * a->n_heads * (a->head_dim + 1); }
static int64_t part_o_stride(const flash_args *a) { return (int64_t)a->n_heads * a->head_dim; }

// Chunk c's partial (c >= 1): O rows of n_heads x head_dim floats, then its lse.
static float *part_o(const decode_call *dc, int c) { return dc->parts + (c - 1) * part_floats(dc->a); }
static float *part_lse(const decode_call *dc, int c) {
    return part_o(dc, c) + dc->a->nq * part_o_stride(dc->a);
}

// One chunk of a decode call's keys against all its rows and the heads of one range, tile by
// tile; its normalised result goes to the call's o and lse (chunk 0) or to the chunk's partial.
static void flash_cpu_chunk(const decode_job *job, flash_cpu_scratch *w) {
    const flash_args *a = job->c->a;
    const int nq = a->nq, d = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const int hk0 = a->n_kv_heads * job->range / job->c->n_ranges, hk1 = a->n_kv_heads * (job->range + 1) / job->c->n_ranges;
    const int64_t k_end = visible_keys(a, nq), k0 = (int64_t)job->chunk * FLASH_CPU_CHUNK;
    const int64_t k1 = k0 + FLASH_CPU_CHUNK < k_end ? k0 + FLASH_CPU_CHUNK : k_end;
    float *o = a->o, *lse = a->lse;
    int64_t o_stride = a->o_stride;
    if (job->chunk > 0)
        o = part_o(job->c, job->chunk), lse = part_lse(job->c, job->chunk), o_stride = part_o_stride(a);
    reset_rows(rows_at(w, 0, d), (hk1 - hk0) * group * nq, d);
    for (int64_t t0 = k0; t0 < k1; t0 += FLASH_CPU_BK) {
        const int64_t t1 = t0 + FLASH_CPU_BK < k1 ? t0 + FLASH_CPU_BK : k1;
        decode_tile(a, w, t0, t1, tile_masked(a, 0, t1), hk0, hk1);
    }
    for (int h = hk0 * group; h < hk1 * group; h++)
        store_rows(a, rows_at(w, (h - hk0 * group) * nq, d), h, 0, nq, o, o_stride, lse);
}

// A thread's copy of one KV head for a prompt call's query tiles (head_copy.h, flash_amx.h).
static size_t head_bytes(int head_dim, burst_dtype kv_dtype, int qp_bf16, int64_t max_keys) {
    if (flash_amx_applies(head_dim, kv_dtype)) return flash_amx_head_bytes(head_dim, max_keys);
    if (flash_pairs_applies(&(flash_args){.head_dim = head_dim, .kv_dtype = kv_dtype, .qp_bf16 = qp_bf16}))
        return flash_pairs_head_bytes(head_dim, max_keys);
    return float_head_bytes(head_dim, max_keys);
}

size_t flash_cpu_transient_bytes(int64_t max_keys, int head_dim, burst_dtype kv_dtype, int qp_bf16, int n_threads) {
    return (size_t)n_threads * head_bytes(head_dim, kv_dtype, qp_bf16, max_keys);
}

void flash_cpu(const flash_args *calls, int n) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    int most_d = 1, amx = 0, pairs = 0, most_rows = FLASH_CPU_BQ, most_keys = 0, n_decode = 0; // the scratch fits every call
    size_t most_copy = 0; // bytes of a head's copy off AMX
    int64_t n_chunks = 0, n_parts = 0;
    decode_call *dc = burst_malloc(sizeof *dc * (size_t)(n > 0 ? n : 1));
    for (int j = 0; j < n; j++) {
        const flash_args *a = &calls[j];
        BURST_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0 && "n_heads must be a multiple of n_kv_heads");
        BURST_ASSERT(a->nq >= 0 && a->nk >= 0 && a->head_dim > 0 && "negative sizes");
        BURST_ASSERT(a->scale > 0 && "the softmax takes row maxima before scaling");
        BURST_ASSERT((a->kv_dtype == DTYPE_F32 || a->kv_dtype == DTYPE_BF16) && "K/V must be F32 or BF16");
        if (a->head_dim > most_d) most_d = a->head_dim;
        if (!is_decode(a)) {
            const int on_amx = flash_amx_applies(a->head_dim, a->kv_dtype);
            amx |= on_amx;
            pairs |= !on_amx && flash_pairs_applies(a);
            if (on_amx && a->nk > most_keys) most_keys = a->nk; // AMX's head copies are for these
            const size_t copy = on_amx ? 0 : head_bytes(a->head_dim, a->kv_dtype, a->qp_bf16, a->nk);
            if (copy > most_copy) most_copy = copy;
            if (query_tile_rows(amx) > most_rows) most_rows = query_tile_rows(amx);
            continue;
        }
        // At least one chunk: a row that sees no key still gets o = 0 and lse = -inf.
        const int64_t keys = visible_keys(a, a->nq);
        const int64_t chunks = keys > FLASH_CPU_CHUNK ? (keys + FLASH_CPU_CHUNK - 1) / FLASH_CPU_CHUNK : 1;
        dc[n_decode++] = (decode_call){.a = a, .n_chunks = (int)chunks};
        n_chunks += chunks;
        n_parts += (chunks - 1) * part_floats(a);
        if (a->n_heads * a->nq > most_rows) most_rows = a->n_heads * a->nq;
    }
    // Head ranges only where chunks alone leave threads idle; they change no sum's order.
    const int64_t want_ranges = n_chunks > 0 ? (omp_get_max_threads() + n_chunks - 1) / n_chunks : 1;
    float *parts = burst_malloc(sizeof(float) * (size_t)(n_parts > 0 ? n_parts : 1)), *next_part = parts;
    int64_t n_jobs = 0;
    for (int i = 0; i < n_decode; i++) {
        decode_call *c = &dc[i];
        c->n_ranges = (int)(want_ranges < c->a->n_kv_heads ? want_ranges : c->a->n_kv_heads);
        c->parts = next_part, next_part += (c->n_chunks - 1) * part_floats(c->a);
        n_jobs += (int64_t)c->n_chunks * c->n_ranges;
    }
    decode_job *jobs = burst_malloc(sizeof *jobs * (size_t)(n_jobs > 0 ? n_jobs : 1));
    n_jobs = 0;
    for (int i = 0; i < n_decode; i++)
        for (int chunk = 0; chunk < dc[i].n_chunks; chunk++)
            for (int range = 0; range < dc[i].n_ranges; range++) jobs[n_jobs++] = (decode_job){&dc[i], chunk, range};
    // One parallel region for all calls: their outputs are disjoint, so no barrier between them
    // but the one before the decode calls' merges.
#pragma omp parallel
    {
        flash_cpu_scratch w;
        w.acc = burst_malloc((size_t)most_rows * (size_t)most_d * sizeof(float));
        w.m = burst_malloc((size_t)most_rows * sizeof(float));
        w.l = burst_malloc((size_t)most_rows * sizeof(float));
        w.s = burst_malloc_aligned((size_t)most_rows * key_tile_keys(amx) * sizeof(float)); // (aligned: flash_pairs' loads)
        w.mx = burst_malloc((size_t)most_rows * sizeof(float));
        w.qt = burst_malloc_aligned((size_t)FLASH_CPU_BQ * (size_t)most_d * sizeof(float));
        w.pairs = pairs ? burst_malloc_aligned(flash_pairs_scratch_words() * sizeof(uint32_t)) : NULL;
        w.head = (head_copy){.k = most_copy ? burst_malloc_aligned(most_copy / 2) : NULL,
                             .v = most_copy ? burst_malloc_aligned(most_copy / 2) : NULL};
        if (amx) flash_amx_thread_begin(&w.amx, most_d, most_keys);
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < n_jobs; t++) flash_cpu_chunk(&jobs[t], &w);
        for (int j = 0; j < n; j++) {
            const flash_args *a = &calls[j];
            if (is_decode(a)) continue;
            const int on_amx = flash_amx_applies(a->head_dim, a->kv_dtype), bq = query_tile_rows(on_amx);
            const int64_t n_qtiles = ((int64_t)a->nq + bq - 1) / bq;
            // A thread takes a run of a head's query tiles, so that it lays out the head's K and V
            // once for them all (flash_amx.h, head_copy.h), in runs short enough for 4 a thread.
            const int64_t fair = n_qtiles * a->n_heads / (4 * omp_get_num_threads());
            const int run = (int)(fair < 1 ? 1 : fair < n_qtiles ? fair : n_qtiles);
#pragma omp for schedule(dynamic, run) nowait
            for (int64_t t = 0; t < n_qtiles * a->n_heads; t++) {
                int h = (int)(t / n_qtiles);
                int64_t q0 = (t % n_qtiles) * bq;
                int64_t q1 = q0 + bq < a->nq ? q0 + bq : a->nq;
                flash_cpu_query_tile(a, &w, h, q0, q1);
            }
        }
        if (amx) flash_amx_thread_end(&w.amx);
        free(w.acc), free(w.m), free(w.l), free(w.s), free(w.mx), free(w.qt), free(w.pairs);
        free(w.head.k), free(w.head.v);
#pragma omp barrier
        // Each decode call's later chunks folded into its first, in key order.
        for (int i = 0; i < n_decode; i++) {
            const flash_args *a = dc[i].a;
#pragma omp for schedule(static) nowait
            for (int64_t row = 0; row < (int64_t)a->nq * a->n_heads; row++)
                for (int c = 1; c < dc[i].n_chunks; c++) {
                    const online_softmax_args m = {.o = a->o, .lse = a->lse, .o_b = part_o(&dc[i], c),
                                                   .lse_b = part_lse(&dc[i], c), .o_stride = a->o_stride,
                                                   .o_b_stride = part_o_stride(a), .n = a->nq,
                                                   .n_heads = a->n_heads, .head_dim = a->head_dim};
                    online_softmax_merge_row(&m, row);
                }
        }
    }
    free(dc), free(jobs), free(parts);
}
