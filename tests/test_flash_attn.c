// attention/: the CPU flash-attention twin against a float64 naive reference over a grid of
// shapes (head_dim, nq/nk not multiples of the tile, causal with position offsets that leave
// key blocks fully, partly or not masked, GQA ratio 1/2/4, padded row strides), and the
// online-softmax merge: attention over G uneven key blocks merged equals attention over all keys.
// Both also take several calls at once (a step's sequences), each held to its own reference.
// Every other case passes K/V in bf16 (a bf16 KV cache), drawn as bf16 values so that the
// reference sees the same numbers and the fp32 bounds hold. Where the CPU has AMX, the bf16 cases
// of more than 8 query rows and head_dim 64 or 128 take it (attention/flash_amx.h). Every bf16 case
// runs again with Q and P rounded to bf16 (flash_args.qp_bf16, cpu-bf16's), which off AMX takes
// AVX512-BF16's dot products where the build has them (attention/flash_pairs.h: head_dim a multiple
// of 32); ctest runs this twice, the second time with BURST_AMX=0.
#include <math.h>
#include <omp.h>
#include <string.h>

#include "attention/flash.h"
#include "attention/flash_pairs.h"
#include "attention/online_softmax.h"
#include "common/amx.h"
#include "common/burst.h"
#include "tests/attention_ref.h"

// flash_args.qp_bf16 (cpu-bf16): where the call's query tiles run on AMX or AVX512-BF16 (more than
// 8 query rows, head_dim a multiple of 32), Q and P rounded to bf16 move O and lse by ~2^-9 of the
// scores (seen up to 4e-3; bounds as the GPU's bf16 attention's), and they must move where some key
// is visible; elsewhere the same bits as without it (o_exact, lse_exact).
static int test_flash_qp_bf16(const attn_data *t, const float *o_exact, const float *lse_exact) {
    const attn_case c = t->c;
    const int64_t n_o = (int64_t)c.nq * t->o_stride, n_lse = (int64_t)c.n_heads * c.nq;
    float *o = poisoned(n_o), *lse = poisoned(n_lse);
    flash_args a = args_for(t, o, lse, 0, c.nk);
    a.qp_bf16 = 1;
    flash_cpu(&a, 1);
    char what[160];
    describe(what, sizeof what, &c, "flash qp_bf16");
    double moved = 0;
    for (int64_t i = 0; i < c.nq; i++)
        for (int64_t x = 0; x < (int64_t)c.n_heads * c.head_dim; x++)
            moved = fmax(moved, fabs((double)o[i * t->o_stride + x] - o_exact[i * t->o_stride + x]));
    int ok;
    if ((amx_usable() || flash_pairs_applies(&a)) && c.head_dim % 32 == 0 && c.nq > 8) {
        ok = check(t, what, o, lse, 1e-4, 2e-2, 2e-2, 1e-4, 2e-2, 2e-2);
        const int some_visible = !c.causal || c.k_pos0 < c.q_pos0 + c.nq;
        if (some_visible && moved == 0) printf("FAIL %s: O the same as with float32 Q and P (not rounded)\n", what);
        ok &= !some_visible || moved > 0;
    } else {
        ok = memcmp(o, o_exact, sizeof(float) * (size_t)n_o) == 0 && memcmp(lse, lse_exact, sizeof(float) * (size_t)n_lse) == 0;
        if (!ok) printf("FAIL %s: off AMX, not the bits of float32 Q and P (O moved by %.3g)\n", what, moved);
    }
    free(o); free(lse);
    return ok;
}

// flash_cpu over all keys at once.
static int test_flash(const attn_data *t) {
    const attn_case c = t->c;
    float *o = poisoned((int64_t)c.nq * t->o_stride), *lse = poisoned((int64_t)c.n_heads * c.nq);
    flash_args a = args_for(t, o, lse, 0, c.nk);
    flash_cpu(&a, 1);
    char what[160];
    describe(what, sizeof what, &c, "flash");
    // O is a convex combination of v in [-1, 1]: errors are absolute, set by fp32 rounding of
    // scores, exp and sums over up to ~4K keys (seen up to 2e-7); nmse at fp32 class (seen up to
    // 2e-12, the long rows with small outputs). lse is about log(nk) + max score, |lse| < 20:
    // fp32 rounding of its terms gives ~1e-6. Its nmse bound is loose (1e-9) because lse can be
    // near 0 (one key, a small score: seen 3.7e-12 at |lse| = 0.02); the atol carries the check.
    int ok = check(t, what, o, lse, 1e-10, 2e-6, 1e-5, 1e-9, 4e-6, 1e-6);
    if (c.kv_dtype == DTYPE_BF16) ok &= test_flash_qp_bf16(t, o, lse);
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
        flash_cpu(&a, 1);
        online_softmax_merge(&(online_softmax_args){
            .o = o, .lse = lse, .o_b = ob, .lse_b = lb, .o_stride = t->o_stride,
            .o_b_stride = t->o_stride, .n = c.nq, .n_heads = c.n_heads, .head_dim = c.head_dim}, 1);
    }
    char what[160], tag[32];
    snprintf(tag, sizeof tag, "merge G=%d", G);
    describe(what, sizeof what, &c, tag);
    // Each merge adds a few fp32 roundings of o and lse: a small multiple of the flash bound.
    int ok = check(t, what, o, lse, 1e-10, 4e-6, 1e-5, 1e-9, 8e-6, 1e-6);
    free(o); free(lse); free(ob); free(lb);
    return ok;
}

// One flash_cpu of several calls of different shapes (a step's sequences, a prefill chunk beside
// them): head_dim, GQA, K/V dtype, causal offsets, one call longer than a tile; each against its
// float64 reference, as test_flash holds one call.
static int test_flash_batch(void) {
    enum { CALLS = 6 };
    static const attn_case cases[CALLS] = {
        {1, 1000, 128, 4, 1, 1, 999, 0, DTYPE_BF16}, {1, 7, 40, 2, 2, 1, 6, 0, DTYPE_F32},
        {100, 1000, 64, 4, 2, 1, 900, 0, DTYPE_F32}, {3, 70, 128, 2, 1, 0, 1000, 1000, DTYPE_BF16},
        {1, 1, 64, 2, 2, 1, 0, 0, DTYPE_F32}, {2, 1700, 128, 4, 4, 1, 1698, 0, DTYPE_BF16},
    };
    attn_data t[CALLS];
    flash_args calls[CALLS];
    float *o[CALLS], *lse[CALLS];
    for (int j = 0; j < CALLS; j++) {
        data_init(&t[j], cases[j]);
        reference(&t[j]);
        o[j] = poisoned((int64_t)cases[j].nq * t[j].o_stride), lse[j] = poisoned((int64_t)cases[j].n_heads * cases[j].nq);
        calls[j] = args_for(&t[j], o[j], lse[j], 0, cases[j].nk);
    }
    flash_cpu(calls, CALLS);
    int ok = 1;
    for (int j = 0; j < CALLS; j++) {
        char what[160], tag[32];
        snprintf(tag, sizeof tag, "flash batch call %d", j);
        describe(what, sizeof what, &cases[j], tag);
        ok &= check(&t[j], what, o[j], lse[j], 1e-10, 2e-6, 1e-5, 1e-9, 4e-6, 1e-6); // test_flash's bounds
        free(o[j]), free(lse[j]), data_free(&t[j]);
    }
    return ok;
}

// Scores that rise along the keys in steps (K rows from 300 on scaled by 5, from 600 on by 10, from
// 900 on by 30: row maxima near 4, 20, 40 and 120), so that a row's max passes its running max by
// more than softmax_tile's lazy margin (8): the state must be rescaled, and e^(s - m) would
// overflow past 88 if m did not move. f32 and bf16 K/V (AMX's path where the CPU has it), a causal
// chunk at the end of the keys and one not causal. Bounds 50x test_flash's: float32's rounding of a
// score grows with its size (up to ~130 here, ~3 there).
static int test_flash_rising_scores(void) {
    int ok = 1;
    for (int bf16 = 0; bf16 <= 1; bf16++)
        for (int causal = 0; causal <= 1; causal++) {
            const attn_case c = {200, 1000, 64, 2, 1, causal, 800, 0, bf16 ? DTYPE_BF16 : DTYPE_F32};
            attn_data t;
            data_init(&t, c);
            for (int64_t i = 0; i < c.nk * t.kv_stride; i++) {
                const int64_t j = i / t.kv_stride;
                t.k[i] *= j >= 900 ? 30.0f : j >= 600 ? 10.0f : j >= 300 ? 5.0f : 1.0f;
                if (bf16) t.k16[i] = f32_to_bf16(t.k[i]), t.k[i] = bf16_to_f32(t.k16[i]);
            }
            reference(&t);
            float *o = poisoned((int64_t)c.nq * t.o_stride), *lse = poisoned((int64_t)c.n_heads * c.nq);
            flash_args a = args_for(&t, o, lse, 0, c.nk);
            flash_cpu(&a, 1);
            char what[160];
            describe(what, sizeof what, &c, "flash rising scores");
            ok &= check(&t, what, o, lse, 5e-9, 1e-4, 5e-4, 5e-8, 2e-4, 5e-5);
            free(o), free(lse), data_free(&t);
        }
    return ok;
}

// Prefill calls that read the same K and V (on AMX each thread keeps a KV head's K and V^T for the
// calls that name it): a call on the first 300 keys, then two on all 1000 (the zeros past key 300
// must not carry over; the third reuses the second's), each as it is alone. Non-causal, one query
// tile of 128 per head on one thread, so that the thread reads K/V through all three calls.
static int test_flash_shared_kv(void) {
    const attn_case c = {128, 1000, 128, 2, 1, 0, 0, 0, DTYPE_BF16};
    static const int nks[3] = {300, 1000, 1000};
    attn_data t;
    data_init(&t, c);
    const int64_t n_o = (int64_t)c.nq * t.o_stride, n_lse = (int64_t)c.n_heads * c.nq;
    float *o[3], *lse[3], *o_alone = poisoned(n_o), *lse_alone = poisoned(n_lse);
    flash_args calls[3];
    for (int j = 0; j < 3; j++) o[j] = poisoned(n_o), lse[j] = poisoned(n_lse), calls[j] = args_for(&t, o[j], lse[j], 0, nks[j]);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    flash_cpu(calls, 3);
    int ok = 1;
    for (int j = 0; j < 3; j++) {
        flash_args alone = args_for(&t, o_alone, lse_alone, 0, nks[j]);
        flash_cpu(&alone, 1);
        const int same = !memcmp(o[j], o_alone, sizeof(float) * (size_t)n_o) && !memcmp(lse[j], lse_alone, sizeof(float) * (size_t)n_lse);
        printf("%s flash call %d of 3 on one K/V (%d keys): O and lse bit for bit as alone\n", same ? "ok  " : "FAIL", j, nks[j]);
        ok &= same;
    }
    omp_set_num_threads(threads);
    for (int j = 0; j < 3; j++) free(o[j]), free(lse[j]);
    free(o_alone), free(lse_alone), data_free(&t);
    return ok;
}

// A decode call whose chunks are fewer than the threads is split into ranges of KV heads too:
// 5 threads over one chunk of 8 KV heads (ranges of 1 and 2), 7 over three chunks (ranges of 2 and
// 3), GQA 2 so that a range carries its query heads.
static int test_flash_head_ranges(void) {
    static const struct { int threads; attn_case c; } cases[] = {
        {5, {1, 300, 64, 16, 8, 1, 299, 0, DTYPE_F32}},
        {7, {2, 1100, 40, 16, 8, 1, 1200, 101, DTYPE_BF16}},
    };
    const int threads = omp_get_max_threads();
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_data t;
        data_init(&t, cases[i].c);
        reference(&t);
        omp_set_num_threads(cases[i].threads);
        char what[160], tag[48];
        snprintf(tag, sizeof tag, "flash on %d threads", cases[i].threads);
        describe(what, sizeof what, &t.c, tag);
        float *o = poisoned((int64_t)t.c.nq * t.o_stride), *lse = poisoned((int64_t)t.c.n_heads * t.c.nq);
        flash_args a = args_for(&t, o, lse, 0, t.c.nk);
        flash_cpu(&a, 1);
        omp_set_num_threads(threads);
        ok &= check(&t, what, o, lse, 1e-10, 2e-6, 1e-5, 1e-9, 4e-6, 1e-6); // test_flash's bounds
        free(o), free(lse), data_free(&t);
    }
    return ok;
}

// A decode call's result does not depend on the thread count or on the calls beside it (the
// chunks of keys are fixed; only head ranges follow the threads): bit for bit the same O and lse
// on 1, 2 and 5 threads, alone and beside a prefill call and another decode call.
static int test_flash_deterministic(void) {
    static const attn_case cases[3] = {{2, 1500, 128, 8, 4, 1, 1600, 101, DTYPE_BF16},
                                       {1, 900, 64, 4, 4, 1, 899, 0, DTYPE_F32},
                                       {70, 200, 64, 4, 2, 1, 130, 0, DTYPE_F32}};
    attn_data t[3];
    float *o[3], *lse[3], *o1 = NULL, *lse1 = NULL;
    flash_args calls[3];
    for (int j = 0; j < 3; j++) {
        data_init(&t[j], cases[j]);
        o[j] = poisoned((int64_t)cases[j].nq * t[j].o_stride), lse[j] = poisoned((int64_t)cases[j].n_heads * cases[j].nq);
        calls[j] = args_for(&t[j], o[j], lse[j], 0, cases[j].nk);
    }
    const int64_t n_o = (int64_t)cases[0].nq * t[0].o_stride, n_lse = (int64_t)cases[0].n_heads * cases[0].nq;
    const int threads = omp_get_max_threads();
    int ok = 1;
    static const int runs[4][2] = {{1, 1}, {2, 1}, {5, 1}, {2, 3}}; // (threads, calls)
    for (int r = 0; r < 4; r++) {
        omp_set_num_threads(runs[r][0]);
        flash_cpu(calls, runs[r][1]);
        if (r == 0) {
            o1 = burst_malloc(sizeof(float) * (size_t)n_o), lse1 = burst_malloc(sizeof(float) * (size_t)n_lse);
            memcpy(o1, o[0], sizeof(float) * (size_t)n_o), memcpy(lse1, lse[0], sizeof(float) * (size_t)n_lse);
            continue;
        }
        const int same = !memcmp(o1, o[0], sizeof(float) * (size_t)n_o) && !memcmp(lse1, lse[0], sizeof(float) * (size_t)n_lse);
        printf("%s flash decode call on %d threads with %d call(s): O and lse bit for bit as on 1 thread alone\n",
               same ? "ok  " : "FAIL", runs[r][0], runs[r][1]);
        ok &= same;
    }
    omp_set_num_threads(threads);
    free(o1), free(lse1);
    for (int j = 0; j < 3; j++) free(o[j]), free(lse[j]), data_free(&t[j]);
    return ok;
}

// One online_softmax_merge of several calls of different shapes (a step's sequences): rows
// n = 0, 1, 3, 70; padded row strides, whose padding must stay as it was; empty running results
// and empty partials. Each call against a float64 merge of the same inputs.
static int test_merge_batch(void) {
    enum { CALLS = 6 };
    static const int shape[CALLS][4] = {{1, 8, 128, 0}, {0, 3, 37, 5}, {3, 3, 37, 5}, {70, 1, 1, 2}, {1, 32, 8, 0}, {3, 2, 64, 3}};
    online_softmax_args calls[CALLS];
    double *ref_o[CALLS], *ref_lse[CALLS];
    for (int j = 0; j < CALLS; j++) {
        const int n = shape[j][0], heads = shape[j][1], d = shape[j][2];
        const int64_t stride = (int64_t)heads * d + shape[j][3], n_o = n * stride, n_lse = (int64_t)n * heads;
        float *o = test_alloc_guarded(n_o), *ob = burst_malloc(sizeof(float) * (size_t)(n_o + 1));
        float *lse = test_alloc_guarded(n_lse), *lb = burst_malloc(sizeof(float) * (size_t)(n_lse + 1));
        test_fill(o, n_o, -1, 1), test_fill(ob, n_o, -1, 1), test_fill(lse, n_lse, -5, 5), test_fill(lb, n_lse, -5, 5);
        for (int64_t i = 0; i < n_lse; i++) {
            if (i % 5 == 1) lse[i] = -INFINITY; // empty running result (with o = 0)
            if (i % 7 == 1) lb[i] = -INFINITY;  // empty partial; row 1 of 35 is both
        }
        ref_o[j] = malloc(sizeof(double) * (size_t)(n_o + 1)), ref_lse[j] = malloc(sizeof(double) * (size_t)(n_lse + 1));
        for (int64_t i = 0; i < n_o; i++) ref_o[j][i] = o[i]; // padding included: it must not change
        for (int64_t i = 0; i < n; i++)
            for (int h = 0; h < heads; h++) {
                const int64_t li = (int64_t)h * n + i;
                double la = lse[li], lbv = lb[li], *r = ref_o[j] + i * stride + (int64_t)h * d;
                const float *x = ob + i * stride + (int64_t)h * d;
                if (la == -INFINITY)
                    for (int c = 0; c < d; c++) o[i * stride + h * d + c] = 0.0f, r[c] = 0.0;
                ref_lse[j][li] = la;
                if (lbv == -INFINITY) continue;
                double L = la == -INFINITY ? lbv : fmax(la, lbv) + log(exp(la - fmax(la, lbv)) + exp(lbv - fmax(la, lbv)));
                for (int c = 0; c < d; c++) r[c] = r[c] * exp(la - L) + x[c] * exp(lbv - L);
                ref_lse[j][li] = L;
            }
        calls[j] = (online_softmax_args){.o = o, .lse = lse, .o_b = ob, .lse_b = lb, .o_stride = stride,
                                         .o_b_stride = stride, .n = n, .n_heads = heads, .head_dim = d};
    }
    online_softmax_merge(calls, CALLS);
    int ok = 1;
    for (int j = 0; j < CALLS; j++) {
        const online_softmax_args *a = &calls[j];
        const int64_t n_o = a->n * a->o_stride, n_lse = (int64_t)a->n * a->n_heads;
        char what[96];
        snprintf(what, sizeof what, "merge batch call %d (n=%d heads=%d d=%d) O", j, a->n, a->n_heads, a->head_dim);
        ok &= test_compare(what, a->o, ref_o[j], n_o, 1e-12, 1e-6, 1e-6) && test_guard_ok(a->o, n_o, what);
        snprintf(what, sizeof what, "merge batch call %d (n=%d heads=%d d=%d) lse", j, a->n, a->n_heads, a->head_dim);
        ok &= test_compare(what, a->lse, ref_lse[j], n_lse, 1e-12, 1e-6, 1e-6) && test_guard_ok(a->lse, n_lse, what);
        free(a->o), free((void *)a->o_b), free(a->lse), free((void *)a->lse_b), free(ref_o[j]), free(ref_lse[j]);
    }
    return ok;
}

int main(void) {
    test_seed("test_flash_attn");
    // GQA pairs (n_heads, n_kv_heads) cycle over the cases: ratios 1, 2, 4.
    static const int gqa[3][2] = {{2, 2}, {4, 2}, {4, 1}};
    static const int dims[3] = {64, 128, 40};
    // (nq, nk): single rows, sizes below, at and above the 64 tile, and long blocks. Up to 8 rows
    // a call is a decode call, split into chunks of 512 keys: one key past a chunk, exactly two
    // chunks, many; 9 rows are not split. Query tiles of more than 8 rows
    // (64 and the rest) end in 1, 2 and 3 rows past a multiple of 4: 9, 10, 75 = 64 + 11. AMX's
    // query tiles of 128: 1000 = 7 x 128 + 104, 130 = 128 + 2; its key tiles of 128 (bf16 cases):
    // 1000, 4097, 700, 300 and 200 keys end in part-filled ones, 100, 90 and 7 fill one in part.
    static const int sizes[][2] = {{1, 1}, {7, 7}, {1, 1000}, {7, 100}, {64, 64}, {100, 7},
                                   {100, 1000}, {1000, 100}, {1000, 1000}, {64, 4097},
                                   {3, 513}, {8, 1024}, {1, 4099}, {9, 700}, {75, 300}, {10, 90}, {130, 200}};
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
    data_free(&t);
    // head_dim 96, a multiple of 32 but not of 64: flash_pairs' P V ends in a block of 32 dims.
    data_init(&t, (attn_case){75, 300, 96, 4, 2, 1, 1000, 1000, DTYPE_BF16});
    reference(&t);
    fails += !test_flash(&t);
    fails += !test_merge_batch();
    fails += !test_flash_batch();
    fails += !test_flash_head_ranges();
    fails += !test_flash_deterministic();
    fails += !test_flash_shared_kv();
    fails += !test_flash_rising_scores();
    n += 9;
    data_free(&t);
    printf("flash: AMX %s\n", amx_usable() ? "on (bf16 K/V, head_dim 64 and 128)" : "off");
    printf("%s: %d of %d checks failed\n", fails ? "FAIL" : "ok", fails, n);
    return fails ? 1 : 0;
}
