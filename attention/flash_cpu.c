// The CPU twin of the flash-attention forward (contract in attention/flash.h). Written plainly:
// it is the specification the CUDA kernel is tested against. Its two products (the scores Q Kᵀ
// and P V) work on 4 rows at a time so that each loaded K or V row serves 4 queries.
//
// For each (head, tile of FLASH_CPU_BQ queries), walk the key tiles of FLASH_CPU_BK keys that the
// tile can see, keeping a running row max m, row sum l and unnormalised output acc (online
// softmax), so the S and P tiles (64x64 floats, 16 KB) stay in L1/L2. Under causal masking a key
// tile that lies wholly after the last query of the tile is never visited, and only tiles that
// straddle the diagonal (or run past nk) are masked element by element.
// Each OpenMP thread owns one scratch block (acc, S, m, l) for the whole parallel region.
// A bf16 K/V tile is widened to float32 in that scratch once per query tile that reads it
// (head_dim values per 64 dot products of head_dim: a small share of the work).
#include "attention/flash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/dot_cpu.h"
#include "common/burst.h"

enum { FLASH_CPU_BQ = 64, FLASH_CPU_BK = 64 };

typedef struct {
    float *acc; // (FLASH_CPU_BQ, head_dim): unnormalised output of the query tile
    float *s;   // (FLASH_CPU_BQ, FLASH_CPU_BK): scores, then probabilities, of one key tile
    float *kt, *vt; // (FLASH_CPU_BK, head_dim): a bf16 key tile's K and V rows, widened
    float m[FLASH_CPU_BQ], l[FLASH_CPU_BQ]; // running row max and row sum of exp(s - m)
} flash_cpu_scratch;

// e^x for x <= 0 (a score less its row's maximum), 0 below -87 (and for -inf: masked keys). Plain
// arithmetic, so that a loop of it vectorizes (libm's expf is a call per element, which took as
// long as the scores' dot products): x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so that
// n ln2 is exact), e^r by its Taylor series to r^7 (error below 1e-8 of the value), times 2^n.
static inline float exp_nonpositive(float x) {
    const float xc = x < -87.0f ? -87.0f : x;
    const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; // round to nearest: 1.5 x 2^23
    const float r = (xc - n * 0.693145752f) - n * 1.42860682e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720, p = p * r + 1.0f / 120, p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6, p = p * r + 0.5f, p = p * r + 1.0f, p = p * r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; // 2^n: n >= -126 for xc >= -87
    float two_n;
    memcpy(&two_n, &bits, 4);
    return x < -87.0f ? 0.0f : p * two_n;
}

static inline const float *q_row(const flash_args *a, int64_t i, int h) {
    return a->q + i * a->q_stride + (int64_t)h * a->head_dim;
}
// Rows [k0, k0 + n) of KV head hk of K or V (base) as float32: in place when stored so, else
// widened into buf. *stride is the distance between the rows returned.
static const float *kv_tile(const flash_args *a, const void *base, int64_t k0, int n, int hk, float *buf,
                            int64_t *stride) {
    const int64_t first = k0 * a->kv_stride + (int64_t)hk * a->head_dim;
    if (a->kv_dtype == DTYPE_F32) {
        *stride = a->kv_stride;
        return (const float *)base + first;
    }
    const uint16_t *src = (const uint16_t *)base + first;
    for (int j = 0; j < n; j++)
        for (int c = 0; c < a->head_dim; c++) buf[j * a->head_dim + c] = bf16_to_f32(src[j * a->kv_stride + c]);
    *stride = a->head_dim;
    return buf;
}

// Columns [c0, c0 + COLS) of acc (R rows of d) += p (R rows of FLASH_CPU_BK) · v (nk rows at
// v_stride); R <= 4 and COLS constants once inlined, so that the R x COLS sums stay in registers
// over all nk keys (acc in memory would be loaded and stored again for every key) and each loaded
// V element serves the R rows.
static inline __attribute__((always_inline)) void add_pv_cols(float *acc, const float *p, const float *v,
                                                             int64_t v_stride, int d, int nk, const int R, int c0,
                                                             const int COLS) {
    float s[4][128];
    for (int r = 0; r < R; r++)
        for (int l = 0; l < COLS; l++) s[r][l] = acc[r * d + c0 + l];
    for (int j = 0; j < nk; j++) {
        const float *vj = v + j * v_stride + c0;
        for (int r = 0; r < R; r++) {
            const float x = p[r * FLASH_CPU_BK + j];
            for (int l = 0; l < COLS; l++) s[r][l] += x * vj[l];
        }
    }
    for (int r = 0; r < R; r++)
        for (int l = 0; l < COLS; l++) acc[r * d + c0 + l] = s[r][l];
}

// All d columns of R rows: 128 / R columns at a time (8 vector registers of sums, enough to keep
// the multiply-adds from waiting on each other), then 32, then what is left one by one.
static inline __attribute__((always_inline)) void add_pv_rows(float *acc, const float *p, const float *v,
                                                             int64_t v_stride, int d, int nk, const int R) {
    const int wide = R == 1 ? 128 : R == 2 ? 64 : 32;
    int c0 = 0;
    for (; c0 + wide <= d; c0 += wide) add_pv_cols(acc, p, v, v_stride, d, nk, R, c0, wide);
    for (; c0 + 32 <= d; c0 += 32) add_pv_cols(acc, p, v, v_stride, d, nk, R, c0, 32);
    for (int j = 0; c0 < d && j < nk; j++)
        for (int r = 0; r < R; r++)
            for (int c = c0; c < d; c++) acc[r * d + c] += p[r * FLASH_CPU_BK + j] * v[j * v_stride + c];
}

// The same for nq rows: 4 at a time, then the last 1 to 3 (a decode row).
static void add_pv(float *acc, const float *p, const float *v, int64_t v_stride, int d, int nq, int nk) {
    int r = 0;
    for (; r + 4 <= nq; r += 4) add_pv_rows(acc + (int64_t)r * d, p + r * FLASH_CPU_BK, v, v_stride, d, nk, 4);
    float *a = acc + (int64_t)r * d;
    const float *pr = p + r * FLASH_CPU_BK;
    switch (nq - r) {
    case 3: add_pv_rows(a, pr, v, v_stride, d, nk, 3); break;
    case 2: add_pv_rows(a, pr, v, v_stride, d, nk, 2); break;
    case 1: add_pv_rows(a, pr, v, v_stride, d, nk, 1); break;
    }
}

// One key tile [k0, k1) against the query rows [q0, q1) of head h: scores, masking, online
// softmax (the scores become probabilities in place), then acc += P V.
static void flash_cpu_tile(const flash_args *a, flash_cpu_scratch *w, int h, int hk, int64_t q0,
                           int64_t q1, int64_t k0, int64_t k1, int masked) {
    const int d = a->head_dim, nq = (int)(q1 - q0), nk = (int)(k1 - k0);
    int64_t k_stride, v_stride;
    const float *k = kv_tile(a, a->k, k0, nk, hk, w->kt, &k_stride);
    dot_rows(q_row(a, q0, h), a->q_stride, nq, k, k_stride, nk, d, w->s, FLASH_CPU_BK, 1);
    for (int r = 0; r < nq; r++) {
        float *s = w->s + r * FLASH_CPU_BK, mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            s[j] = masked && a->k_pos0 + k0 + j > a->q_pos0 + q0 + r ? -INFINITY : s[j] * a->scale;
            mx = s[j] > mx ? s[j] : mx; // (fmaxf is a call)
        }
        float m_new = fmaxf(w->m[r], mx);
        if (m_new == -INFINITY) { // nothing visible to this row yet: it adds nothing
            for (int j = 0; j < nk; j++) s[j] = 0.0f;
            continue;
        }
        float alpha = expf(w->m[r] - m_new), sum = 0.0f; // alpha is 0 when the old max is -inf
        float *acc = w->acc + (int64_t)r * d;
        for (int c = 0; c < d; c++) acc[c] *= alpha;
        for (int j = 0; j < nk; j++) sum += s[j] = exp_nonpositive(s[j] - m_new);
        w->l[r] = w->l[r] * alpha + sum;
        w->m[r] = m_new;
    }
    const float *v = kv_tile(a, a->v, k0, nk, hk, w->vt, &v_stride);
    add_pv(w->acc, w->s, v, v_stride, d, nq, nk);
}

// One query tile [q0, q1) of head h: every visible key tile, then normalise and store.
static void flash_cpu_query_tile(const flash_args *a, flash_cpu_scratch *w, int h, int64_t q0,
                                 int64_t q1) {
    const int d = a->head_dim;
    const int hk = h / (a->n_heads / a->n_kv_heads);
    for (int r = 0; r < FLASH_CPU_BQ; r++) { w->m[r] = -INFINITY; w->l[r] = 0.0f; }
    for (int64_t x = 0; x < (int64_t)FLASH_CPU_BQ * d; x++) w->acc[x] = 0.0f;

    // Causal: keys past the last query's position are invisible to the whole tile.
    int64_t k_end = a->nk;
    if (a->causal) {
        int64_t last_visible = a->q_pos0 + q1 - 1 - a->k_pos0; // key index
        if (last_visible + 1 < k_end) k_end = last_visible + 1 < 0 ? 0 : last_visible + 1;
    }
    for (int64_t k0 = 0; k0 < k_end; k0 += FLASH_CPU_BK) {
        int64_t k1 = k0 + FLASH_CPU_BK < k_end ? k0 + FLASH_CPU_BK : k_end;
        // Mask only when some key of the tile lies after the first query's position.
        int masked = a->causal && a->k_pos0 + k1 - 1 > a->q_pos0 + q0;
        flash_cpu_tile(a, w, h, hk, q0, q1, k0, k1, masked);
    }

    for (int64_t i = q0; i < q1; i++) {
        int r = (int)(i - q0);
        float *o = a->o + i * a->o_stride + (int64_t)h * d;
        float inv = w->l[r] > 0.0f ? 1.0f / w->l[r] : 0.0f;
        for (int c = 0; c < d; c++) o[c] = w->acc[(int64_t)r * d + c] * inv;
        a->lse[(int64_t)h * a->nq + i] = w->l[r] > 0.0f ? w->m[r] + logf(w->l[r]) : -INFINITY;
    }
}

void flash_cpu(const flash_args *calls, int n) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    int most_d = 1, bf16 = 0; // the scratch fits every call
    for (int j = 0; j < n; j++) {
        const flash_args *a = &calls[j];
        BURST_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0 && "n_heads must be a multiple of n_kv_heads");
        BURST_ASSERT(a->nq >= 0 && a->nk >= 0 && a->head_dim > 0 && "negative sizes");
        BURST_ASSERT((a->kv_dtype == DTYPE_F32 || a->kv_dtype == DTYPE_BF16) && "K/V must be F32 or BF16");
        if (a->head_dim > most_d) most_d = a->head_dim;
        bf16 |= a->kv_dtype == DTYPE_BF16;
    }
    // One parallel region for all calls: their outputs are disjoint, so no barrier between them.
#pragma omp parallel
    {
        flash_cpu_scratch w;
        w.acc = burst_malloc((size_t)FLASH_CPU_BQ * (size_t)most_d * sizeof(float));
        w.s = burst_malloc((size_t)FLASH_CPU_BQ * FLASH_CPU_BK * sizeof(float));
        w.kt = bf16 ? burst_malloc((size_t)FLASH_CPU_BK * (size_t)most_d * sizeof(float)) : NULL;
        w.vt = bf16 ? burst_malloc((size_t)FLASH_CPU_BK * (size_t)most_d * sizeof(float)) : NULL;
        for (int j = 0; j < n; j++) {
            const flash_args *a = &calls[j];
            const int64_t n_qtiles = ((int64_t)a->nq + FLASH_CPU_BQ - 1) / FLASH_CPU_BQ;
#pragma omp for schedule(dynamic, 1) nowait
            for (int64_t t = 0; t < n_qtiles * a->n_heads; t++) {
                int h = (int)(t / n_qtiles);
                int64_t q0 = (t % n_qtiles) * FLASH_CPU_BQ;
                int64_t q1 = q0 + FLASH_CPU_BQ < a->nq ? q0 + FLASH_CPU_BQ : a->nq;
                flash_cpu_query_tile(a, &w, h, q0, q1);
            }
        }
        free(w.acc), free(w.s), free(w.kt), free(w.vt);
    }
}
