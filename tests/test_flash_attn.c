// attention/: the CPU flash-attention twin against a float64 naive reference over a grid of
// shapes (head_dim, nq/nk not multiples of the tile, causal with position offsets that leave
// key blocks fully, partly or not masked, GQA ratio 1/2/4, padded row strides), and the
// online-softmax merge: attention over G uneven key blocks merged equals attention over all keys.
// Every other case passes K/V in bf16 (a bf16 KV cache), drawn as bf16 values so that the
// reference sees the same numbers and the fp32 bounds hold.
#include <math.h>

#include "attention/flash.h"
#include "attention/online_softmax.h"
#include "common/burst.h"
#include "tests/attention_ref.h"

// flash_cpu over all keys at once.
static int test_flash(const attn_data *t) {
    const attn_case c = t->c;
    float *o = poisoned((int64_t)c.nq * t->o_stride), *lse = poisoned((int64_t)c.n_heads * c.nq);
    flash_args a = args_for(t, o, lse, 0, c.nk);
    flash_cpu(&a);
    char what[160];
    describe(what, sizeof what, &c, "flash");
    // O is a convex combination of v in [-1, 1]: errors are absolute, set by fp32 rounding of
    // scores, exp and sums over up to ~4K keys (seen up to 2e-7); nmse at fp32 class (seen up to
    // 2e-12, the long rows with small outputs). lse is about log(nk) + max score, |lse| < 20:
    // fp32 rounding of its terms gives ~1e-6. Its nmse bound is loose (1e-9) because lse can be
    // near 0 (one key, a small score: seen 3.7e-12 at |lse| = 0.02); the atol carries the check.
    int ok = check(t, what, o, lse, 1e-10, 2e-6, 1e-5, 1e-9, 4e-6, 1e-6);
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
    int ok = check(t, what, o, lse, 1e-10, 4e-6, 1e-5, 1e-9, 8e-6, 1e-6);
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
                attn_case c = {nq, nk, dims[which % 3], hp[0], hp[1], causal, q_pos0, k_pos0,
                               which % 2 ? DTYPE_BF16 : DTYPE_F32};
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
    attn_case big = {4097, 4097, 128, 1, 1, 1, 0, 0, DTYPE_F32};
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
