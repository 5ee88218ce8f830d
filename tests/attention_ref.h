// Shared by the attention tests: a case (shapes, positions), its inputs in padded row layouts,
// a naive float64 reference, and the check of (O, lse) against it with guard words and poisoned
// row padding. Header-only, static functions; the reference runs OpenMP threads over rows.
#pragma once
#include <math.h>

#include "attention/flash.h"
#include "common/burst.h"
#include "tests/test_util.h"

typedef struct {
    int nq, nk, head_dim, n_heads, n_kv_heads, causal;
    int64_t q_pos0, k_pos0;
    burst_dtype kv_dtype; // F32, or BF16: K/V are drawn as bf16 values and passed as bf16
} attn_case;

// Inputs and padded layouts of one case; o is poisoned with the guard pattern before each run.
typedef struct {
    attn_case c;
    int64_t q_stride, kv_stride, o_stride; // padded by 8 and 4 elements: strides are honoured
    float *q, *k, *v;                      // (n, heads, head_dim) rows at the strides above
    uint16_t *k16, *v16;                   // bf16 K/V: k and v's bits, same strides (else NULL)
    double *o_ref, *lse_ref;               // (nq, n_heads, head_dim) packed, (n_heads, nq)
} attn_data;

static void data_init(attn_data *t, attn_case c) {
    t->c = c;
    t->q_stride = (int64_t)c.n_heads * c.head_dim + 8;
    t->kv_stride = (int64_t)c.n_kv_heads * c.head_dim + 8;
    t->o_stride = (int64_t)c.n_heads * c.head_dim + 4;
    t->q = burst_malloc((size_t)(c.nq * t->q_stride) * sizeof(float));
    t->k = burst_malloc((size_t)(c.nk * t->kv_stride + 1) * sizeof(float));
    t->v = burst_malloc((size_t)(c.nk * t->kv_stride + 1) * sizeof(float));
    // Scores with a standard deviation near 1.3: softmax rows are peaked but not one-hot.
    test_fill(t->q, c.nq * t->q_stride, -2.0f, 2.0f);
    test_fill(t->k, c.nk * t->kv_stride, -2.0f, 2.0f);
    test_fill(t->v, c.nk * t->kv_stride, -1.0f, 1.0f);
    t->k16 = t->v16 = NULL;
    if (c.kv_dtype == DTYPE_BF16) {
        t->k16 = burst_malloc((size_t)(c.nk * t->kv_stride + 1) * sizeof(uint16_t));
        t->v16 = burst_malloc((size_t)(c.nk * t->kv_stride + 1) * sizeof(uint16_t));
        for (int64_t i = 0; i < c.nk * t->kv_stride; i++) {
            t->k16[i] = f32_to_bf16(t->k[i]), t->k[i] = bf16_to_f32(t->k16[i]);
            t->v16[i] = f32_to_bf16(t->v[i]), t->v[i] = bf16_to_f32(t->v16[i]);
        }
    }
    t->o_ref = burst_malloc((size_t)c.nq * c.n_heads * c.head_dim * sizeof(double));
    t->lse_ref = burst_malloc((size_t)c.n_heads * c.nq * sizeof(double));
}

static void data_free(attn_data *t) {
    free(t->q); free(t->k); free(t->v); free(t->k16); free(t->v16); free(t->o_ref); free(t->lse_ref);
}

// Naive attention in double: every visible key of every row, one row at a time.
static void reference(attn_data *t) {
    const attn_case c = t->c;
    const int d = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const double scale = 1.0 / sqrt((double)d);
#pragma omp parallel for schedule(dynamic)
    for (int64_t t_ = 0; t_ < (int64_t)c.nq * c.n_heads; t_++) {
        int64_t i = t_ / c.n_heads;
        int h = (int)(t_ % c.n_heads), hk = h / group;
        double *srow = burst_malloc((size_t)(c.nk + 1) * sizeof(double));
        const float *q = t->q + i * t->q_stride + (int64_t)h * d;
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.nk; j++) {
            srow[j] = -INFINITY;
            if (c.causal && c.k_pos0 + j > c.q_pos0 + i) continue;
            const float *k = t->k + j * t->kv_stride + (int64_t)hk * d;
            double dot = 0;
            for (int x = 0; x < d; x++) dot += (double)q[x] * k[x];
            srow[j] = dot * scale;
            if (srow[j] > mx) mx = srow[j];
        }
        double *o = t->o_ref + (i * c.n_heads + h) * d;
        for (int x = 0; x < d; x++) o[x] = 0;
        double sum = 0;
        if (mx > -INFINITY)
            for (int64_t j = 0; j < c.nk; j++) {
                double p = exp(srow[j] - mx);
                if (p == 0) continue;
                sum += p;
                const float *v = t->v + j * t->kv_stride + (int64_t)hk * d;
                for (int x = 0; x < d; x++) o[x] += p * v[x];
            }
        for (int x = 0; x < d; x++) o[x] = sum > 0 ? o[x] / sum : 0;
        t->lse_ref[(int64_t)h * c.nq + i] = sum > 0 ? mx + log(sum) : -INFINITY;
        free(srow);
    }
}

static flash_args args_for(const attn_data *t, float *o, float *lse, int64_t k_begin, int nk) {
    const attn_case c = t->c;
    const int bf16 = c.kv_dtype == DTYPE_BF16;
    return (flash_args){
        .q = t->q,
        .k = bf16 ? (const void *)(t->k16 + k_begin * t->kv_stride) : (const void *)(t->k + k_begin * t->kv_stride),
        .v = bf16 ? (const void *)(t->v16 + k_begin * t->kv_stride) : (const void *)(t->v + k_begin * t->kv_stride),
        .kv_dtype = c.kv_dtype,
        .o = o, .lse = lse, .q_stride = t->q_stride, .kv_stride = t->kv_stride,
        .o_stride = t->o_stride, .nq = c.nq, .nk = nk, .n_heads = c.n_heads,
        .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .q_pos0 = c.q_pos0,
        .k_pos0 = c.k_pos0 + k_begin, .causal = c.causal, .scale = 1.0f / sqrtf((float)c.head_dim),
    };
}

// Checks o (padded, guarded) and lse (guarded) against the reference; the pad columns of o must
// still hold the poison pattern.
static int check(const attn_data *t, const char *what, const float *o, const float *lse,
                 double o_nmse, double o_atol, double o_rtol, double lse_nmse, double lse_atol,
                 double lse_rtol) {
    const attn_case c = t->c;
    const int64_t row = (int64_t)c.n_heads * c.head_dim, n = (int64_t)c.nq * row;
    float *packed = burst_malloc((size_t)(n + 1) * sizeof(float));
    int pad_ok = 1;
    for (int64_t i = 0; i < c.nq; i++) {
        for (int64_t x = 0; x < row; x++) packed[i * row + x] = o[i * t->o_stride + x];
        for (int64_t x = row; x < t->o_stride; x++)
            pad_ok &= memcmp(&o[i * t->o_stride + x], &test_guard_pattern, 4) == 0;
    }
    if (!pad_ok) printf("FAIL %s: o written between rows (row padding)\n", what);
    char name[160];
    snprintf(name, sizeof name, "%s O", what);
    int ok = test_compare(name, packed, t->o_ref, n, o_nmse, o_atol, o_rtol);
    snprintf(name, sizeof name, "%s lse", what);
    ok &= test_compare(name, lse, t->lse_ref, (int64_t)c.n_heads * c.nq, lse_nmse, lse_atol, lse_rtol);
    ok &= test_guard_ok(o, (int64_t)c.nq * t->o_stride, name);
    ok &= test_guard_ok(lse, (int64_t)c.n_heads * c.nq, name);
    free(packed);
    return ok && pad_ok;
}

static float *poisoned(int64_t n) {
    float *p = test_alloc_guarded(n);
    for (int64_t i = 0; i < n; i++) memcpy(&p[i], &test_guard_pattern, 4);
    return p;
}

static void describe(char *buf, size_t len, const attn_case *c, const char *tag) {
    snprintf(buf, len, "%s d=%d nq=%d nk=%d h=%d/%d %s qpos0=%lld kpos0=%lld kv %s", tag, c->head_dim,
             c->nq, c->nk, c->n_heads, c->n_kv_heads, c->causal ? "causal" : "full",
             (long long)c->q_pos0, (long long)c->k_pos0, dtype_name(c->kv_dtype));
}
