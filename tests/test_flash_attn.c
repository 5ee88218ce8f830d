// attention/: the CPU flash-attention twin against a float64 naive reference over a grid of
// shapes (head_dim, nq/nk not multiples of the tile, causal with position offsets that leave
// key blocks fully, partly or not masked, GQA ratio 1/2/4, padded row strides), and the
// online-softmax merge: attention over G uneven key blocks merged equals attention over all keys.
#include <math.h>

#include "attention/flash.h"
#include "attention/online_softmax.h"
#include "common/burst.h"
#include "tests/test_util.h"

typedef struct {
    int nq, nk, head_dim, n_heads, n_kv_heads, causal;
    int64_t q_pos0, k_pos0;
} attn_case;

// Inputs and padded layouts of one case; o is poisoned with the guard pattern before each run.
typedef struct {
    attn_case c;
    int64_t q_stride, kv_stride, o_stride; // padded by 8 and 4 elements: strides are honoured
    float *q, *k, *v;                      // (n, heads, head_dim) rows at the strides above
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
    t->o_ref = burst_malloc((size_t)c.nq * c.n_heads * c.head_dim * sizeof(double));
    t->lse_ref = burst_malloc((size_t)c.n_heads * c.nq * sizeof(double));
}

static void data_free(attn_data *t) {
    free(t->q); free(t->k); free(t->v); free(t->o_ref); free(t->lse_ref);
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
    return (flash_args){
        .q = t->q, .k = t->k + k_begin * t->kv_stride, .v = t->v + k_begin * t->kv_stride,
        .o = o, .lse = lse, .q_stride = t->q_stride, .kv_stride = t->kv_stride,
        .o_stride = t->o_stride, .nq = c.nq, .nk = nk, .n_heads = c.n_heads,
        .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .q_pos0 = c.q_pos0,
        .k_pos0 = c.k_pos0 + k_begin, .causal = c.causal, .scale = 1.0f / sqrtf((float)c.head_dim),
    };
}

// Checks o (padded, guarded) and lse (guarded) against the reference; the pad columns of o must
// still hold the poison pattern.
static int check(const attn_data *t, const char *what, const float *o, const float *lse,
                 double o_atol, double lse_atol) {
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
    // O is a convex combination of v in [-1, 1]: errors are absolute, set by fp32 rounding of
    // scores, exp and sums over up to ~4K keys (seen up to 2e-7); nmse at fp32 class (seen up to
    // 2e-12, the long rows with small outputs).
    snprintf(name, sizeof name, "%s O", what);
    int ok = test_compare(name, packed, t->o_ref, n, 1e-10, o_atol, 1e-5);
    // lse is about log(nk) + max score, |lse| < 20: fp32 rounding of its terms gives ~1e-6.
    snprintf(name, sizeof name, "%s lse", what);
    ok &= test_compare(name, lse, t->lse_ref, (int64_t)c.n_heads * c.nq, 1e-12, lse_atol, 1e-6);
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
    snprintf(buf, len, "%s d=%d nq=%d nk=%d h=%d/%d %s qpos0=%lld kpos0=%lld", tag, c->head_dim,
             c->nq, c->nk, c->n_heads, c->n_kv_heads, c->causal ? "causal" : "full",
             (long long)c->q_pos0, (long long)c->k_pos0);
}

// flash_cpu over all keys at once.
static int test_flash(const attn_data *t) {
    const attn_case c = t->c;
    float *o = poisoned((int64_t)c.nq * t->o_stride), *lse = poisoned((int64_t)c.n_heads * c.nq);
    flash_args a = args_for(t, o, lse, 0, c.nk);
    flash_cpu(&a);
    char what[160];
    describe(what, sizeof what, &c, "flash");
    int ok = check(t, what, o, lse, 2e-6, 4e-6);
    free(o); free(lse);
    return ok;
}

// flash_cpu over G uneven key blocks, each merged into a running (o, lse) that starts empty.
static int test_merge(const attn_data *t, int G) {
    const attn_case c = t->c;
    const int64_t n_o = (int64_t)c.nq * t->o_stride, n_lse = (int64_t)c.n_heads * c.nq;
    float *o = poisoned(n_o), *lse = poisoned(n_lse);
    float *ob = burst_malloc((size_t)n_o * sizeof(float)), *lb = burst_malloc((size_t)n_lse * sizeof(float));
    for (int64_t i = 0; i < c.nq; i++)
        for (int64_t x = 0; x < (int64_t)c.n_heads * c.head_dim; x++) o[i * t->o_stride + x] = 0.0f;
    for (int64_t i = 0; i < n_lse; i++) lse[i] = -INFINITY;
    // Cut points: random, sorted, so blocks are uneven and some may be empty.
    int64_t cut[9] = {0};
    for (int g = 1; g < G; g++) cut[g] = (int64_t)(test_uniform(0.0f, 1.0f) * c.nk);
    cut[G] = c.nk;
    for (int g = 1; g < G; g++)
        for (int x = g; x > 1 && cut[x] < cut[x - 1]; x--) { int64_t s = cut[x]; cut[x] = cut[x - 1]; cut[x - 1] = s; }
    for (int g = 0; g < G; g++) {
        flash_args a = args_for(t, ob, lb, cut[g], (int)(cut[g + 1] - cut[g]));
        flash_cpu(&a);
        online_softmax_merge(&(online_softmax_args){
            .o = o, .lse = lse, .o_b = ob, .lse_b = lb, .o_stride = t->o_stride,
            .o_b_stride = t->o_stride, .n = c.nq, .n_heads = c.n_heads, .head_dim = c.head_dim});
    }
    char what[160], tag[32];
    snprintf(tag, sizeof tag, "merge G=%d", G);
    describe(what, sizeof what, &c, tag);
    // Each merge adds a few fp32 roundings of o and lse: a small multiple of the flash bound.
    int ok = check(t, what, o, lse, 4e-6, 8e-6);
    free(o); free(lse); free(ob); free(lb);
    return ok;
}

int main(void) {
    test_seed("test_flash_attn");
    // GQA pairs (n_heads, n_kv_heads) cycle over the cases: ratios 1, 2, 4.
    static const int gqa[3][2] = {{2, 2}, {4, 2}, {4, 1}};
    static const int dims[3] = {64, 128, 40};
    // (nq, nk): single rows, sizes below, at and above the 64 tile, and long blocks.
    static const int sizes[][2] = {{1, 1}, {7, 7}, {1, 1000}, {7, 100}, {64, 64}, {100, 7},
                                   {100, 1000}, {1000, 100}, {1000, 1000}, {64, 4097}};
    int fails = 0, n = 0, which = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int causal = 0; causal <= 1; causal++)
            // Offsets under causal: 0 (aligned diagonal); queries at the end of the keys (a
            // chunk of prefill); keys starting half-way into the queries (the first rows and
            // first query tiles see nothing); keys wholly after the queries (all empty).
            for (int off = 0; off < (causal ? 4 : 1); off++) {
                int nq = sizes[s][0], nk = sizes[s][1];
                int64_t q_pos0 = 1000, k_pos0 = 1000;
                if (off == 1) q_pos0 = k_pos0 + nk - nq;
                if (off == 2) k_pos0 = q_pos0 + nq / 2;
                if (off == 3) k_pos0 = q_pos0 + nq;
                // Every 9 consecutive cases cover all (head_dim, GQA) pairs.
                const int *hp = gqa[(which / 3) % 3];
                attn_case c = {nq, nk, dims[which % 3], hp[0], hp[1], causal, q_pos0, k_pos0};
                which++;
                attn_data t;
                data_init(&t, c);
                reference(&t);
                fails += !test_flash(&t);
                n++;
                if (off == 1 || off == 2 || (!causal && s % 3 == 0)) {
                    static const int G[3] = {1, 3, 8};
                    fails += !test_merge(&t, G[n % 3]);
                    n++;
                }
                data_free(&t);
            }
    // One long causal square block with d=128: many tiles, the full diagonal, one head.
    attn_case big = {4097, 4097, 128, 1, 1, 1, 0, 0};
    attn_data t;
    data_init(&t, big);
    reference(&t);
    fails += !test_flash(&t);
    fails += !test_merge(&t, 8);
    n += 2;
    data_free(&t);
    printf("%s: %d of %d checks failed\n", fails ? "FAIL" : "ok", fails, n);
    return fails ? 1 : 0;
}
