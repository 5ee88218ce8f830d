// attention/ on the GPU: flash_cuda (bf16 Q/K/V, fp32 O) against the float64 reference computed
// from the same bf16-rounded inputs and against the CPU twin, over awkward sizes, causal with
// position offsets, GQA 1/2/4, head_dim 64 and 128, every compiled tile shape on one case each;
// and online_softmax_merge_cuda: G uneven key blocks merged on the GPU equal attention over all.
// Then the same grid through flash_cudnn when the build has cuDNN, a declined case falling back
// to flash_cuda as in the backend: declining is a failure for the shapes the backend sends to
// cuDNN (1024 query rows or more, every row seeing a key), a note for the others. Then
// decode_cuda (fp32 Q, fp32 or bf16 K/V read in place) against the float64 reference: nq 1..8
// against nk from 0 to 33000, GQA 1/2/4/8, head_dim 64/128 and odd ones, causal rows that see all,
// part or none of the keys, and larger nq as fp32 mode sends them; every third case with bf16 K/V.
// Skips (77) when no CUDA device is present.
#include <cuda_runtime_api.h>

#include "attention/decode_cuda.h"
#include "attention/flash_cuda.h"
#include "attention/flash_cudnn.h"
#include "attention/online_softmax_cuda.h"
#include "common/cuda_check.h"
#include "tests/attention_ref.h"

// Rounds x to bf16 in place (nearest even) and uploads the bits.
static uint16_t *upload_bf16(float *x, int64_t n) {
    uint16_t *h = burst_malloc((size_t)(n + 1) * 2), *d;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(x[i]), x[i] = bf16_to_f32(h[i]);
    CUDA_CHECK(cudaMalloc((void **)&d, (size_t)(n + 1) * 2));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// A host buffer of n floats plus guard words, mirrored on the device with the same contents.
static float *device_copy(const float *h, int64_t n) {
    float *d;
    CUDA_CHECK(cudaMalloc((void **)&d, (size_t)(n + TEST_GUARD_WORDS) * 4));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)(n + TEST_GUARD_WORDS) * 4, cudaMemcpyHostToDevice));
    return d;
}
static void download(float *h, const float *d, int64_t n) {
    CUDA_CHECK(cudaMemcpy(h, d, (size_t)(n + TEST_GUARD_WORDS) * 4, cudaMemcpyDeviceToHost));
}

typedef struct {
    uint16_t *q, *k, *v; // device bf16 copies of the rounded inputs
} gpu_inputs;

static flash_cuda_args cuda_args(const attn_data *t, const gpu_inputs *g, float *o, float *lse,
                                 int64_t k_begin, int nk) {
    flash_args a = args_for(t, NULL, NULL, k_begin, nk);
    return (flash_cuda_args){
        .q = g->q, .k = g->k + k_begin * t->kv_stride, .v = g->v + k_begin * t->kv_stride,
        .o = o, .lse = lse, .q_stride = a.q_stride, .kv_stride = a.kv_stride, .o_stride = a.o_stride,
        .nq = a.nq, .nk = a.nk, .n_heads = a.n_heads, .n_kv_heads = a.n_kv_heads,
        .head_dim = a.head_dim, .q_pos0 = a.q_pos0, .k_pos0 = a.k_pos0, .causal = a.causal,
        .scale = a.scale};
}

// The reference uses the same bf16-rounded Q/K/V, so what remains is the kernel's own rounding:
// P is rounded to bf16 before P V (2^-9 relative per term): O errors seen up to 1.3e-3 absolute
// (v in [-1, 1]) and nmse up to 2e-6 on an H100. Products of bf16 are exact in fp32, so lse sees
// only fp32 sums and ex2.approx (2^-22): seen up to 1e-6. cuDNN rounds P the same way and stages
// O in bf16 (one more 2^-9 relative rounding): its cases reach nmse 4.8e-6, inside the same bounds.
#define GPU_O_NMSE 1e-4
#define GPU_O_ATOL 1e-2
#define GPU_O_RTOL 1e-2
#define GPU_LSE_ATOL 1e-4
#define GPU_LSE_RTOL 1e-5

enum { IMPL_FLASH_CUDA, IMPL_CUDNN };
static const char *const impl_name[2] = {"cuda", "cudnn"};
static int cudnn_declined; // cases where cuDNN declined and flash_cuda ran instead

// Runs the implementation under test. cuDNN declining a case (BURST_ERR_INVALID) falls back to
// flash_cuda, as model/backend_cuda.cu does, with cuDNN's reason left in declined->msg (empty
// when not declined).
static burst_status run_flash(const flash_cuda_args *a, int impl, flash_cuda_tiles tiles, burst_error *declined,
                              burst_error *err) {
    declined->msg[0] = 0;
    if (impl == IMPL_CUDNN) {
        burst_status s = flash_cudnn(a, 0, declined);
        if (s != BURST_ERR_INVALID) return s;
    }
    return flash_cuda_with_tiles(a, tiles, 0, err);
}

// 1 when passed; a case that cuDNN declined although the backend would send it there fails.
static int test_case(attn_case c, int impl, flash_cuda_tiles tiles, int merge_g) {
    attn_data t;
    data_init(&t, c);
    gpu_inputs g = {upload_bf16(t.q, c.nq * t.q_stride), upload_bf16(t.k, c.nk * t.kv_stride),
                    upload_bf16(t.v, c.nk * t.kv_stride)};
    reference(&t); // from the rounded inputs
    const int64_t n_o = (int64_t)c.nq * t.o_stride, n_lse = (int64_t)c.n_heads * c.nq;
    float *o = poisoned(n_o), *lse = poisoned(n_lse);
    float *d_o = device_copy(o, n_o), *d_lse = device_copy(lse, n_lse);
    burst_error err;
    char what[200], tag[64];
    int ok = 1;
    if (merge_g == 0) {
        flash_cuda_args a = cuda_args(&t, &g, d_o, d_lse, 0, c.nk);
        burst_error why;
        burst_status s = run_flash(&a, impl, tiles, &why, &err);
        if (s != BURST_OK) { printf("FAIL %s: %s\n", impl_name[impl], err.msg); ok = 0; }
        if (why.msg[0]) {
            const int must = c.nq >= 1024 && !(c.causal && c.q_pos0 < c.k_pos0);
            describe(what, sizeof what, &c, "cudnn");
            printf("%s %s: declined: %s\n", must ? "FAIL" : "note", what, why.msg);
            ok &= !must;
            cudnn_declined++;
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        download(o, d_o, n_o);
        download(lse, d_lse, n_lse);
        snprintf(tag, sizeof tag, "%s %s", impl_name[impl], flash_cuda_tiles_name[tiles]);
        describe(what, sizeof what, &c, tag);
        ok &= check(&t, what, o, lse, GPU_O_NMSE, GPU_O_ATOL, GPU_O_RTOL, 1e-8, GPU_LSE_ATOL, GPU_LSE_RTOL);
        // Against the CPU twin on the same rounded inputs: the same bound, the twin being exact
        // to ~1e-7 here.
        float *oc = poisoned(n_o), *lc = poisoned(n_lse);
        flash_args ac = args_for(&t, oc, lc, 0, c.nk);
        flash_cpu(&ac, 1);
        for (int64_t i = 0; i < c.nq; i++)
            for (int64_t x = 0; x < (int64_t)c.n_heads * c.head_dim; x++)
                t.o_ref[i * c.n_heads * c.head_dim + x] = oc[i * t.o_stride + x];
        for (int64_t i = 0; i < n_lse; i++) t.lse_ref[i] = lc[i];
        snprintf(tag, sizeof tag, "%s-vs-cpu %s", impl_name[impl], flash_cuda_tiles_name[tiles]);
        describe(what, sizeof what, &c, tag);
        ok &= check(&t, what, o, lse, GPU_O_NMSE, GPU_O_ATOL, GPU_O_RTOL, 1e-8, GPU_LSE_ATOL, GPU_LSE_RTOL);
        free(oc); free(lc);
    } else {
        // Running result starts empty (O = 0, lse = -inf); partials land in a second buffer.
        for (int64_t i = 0; i < c.nq; i++)
            for (int64_t x = 0; x < (int64_t)c.n_heads * c.head_dim; x++) o[i * t.o_stride + x] = 0.0f;
        for (int64_t i = 0; i < n_lse; i++) lse[i] = -INFINITY;
        CUDA_CHECK(cudaMemcpy(d_o, o, (size_t)n_o * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_lse, lse, (size_t)n_lse * 4, cudaMemcpyHostToDevice));
        float *d_ob, *d_lb;
        CUDA_CHECK(cudaMalloc((void **)&d_ob, (size_t)n_o * 4));
        CUDA_CHECK(cudaMalloc((void **)&d_lb, (size_t)n_lse * 4));
        int64_t cut[9] = {0};
        for (int x = 1; x < merge_g; x++) cut[x] = (int64_t)(test_uniform(0.0f, 1.0f) * c.nk);
        cut[merge_g] = c.nk;
        for (int x = 1; x < merge_g; x++)
            for (int y = x; y > 1 && cut[y] < cut[y - 1]; y--) { int64_t s = cut[y]; cut[y] = cut[y - 1]; cut[y - 1] = s; }
        for (int b = 0; b < merge_g; b++) {
            flash_cuda_args a = cuda_args(&t, &g, d_ob, d_lb, cut[b], (int)(cut[b + 1] - cut[b]));
            burst_error why;
            if (run_flash(&a, impl, FLASH_CUDA_TILES_DEFAULT, &why, &err) != BURST_OK) {
                printf("FAIL %s: %s\n", impl_name[impl], err.msg);
                ok = 0;
            }
            online_softmax_merge_cuda(&(online_softmax_args){
                .o = d_o, .lse = d_lse, .o_b = d_ob, .lse_b = d_lb, .o_stride = t.o_stride,
                .o_b_stride = t.o_stride, .n = c.nq, .n_heads = c.n_heads, .head_dim = c.head_dim}, 1, 0);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        download(o, d_o, n_o);
        download(lse, d_lse, n_lse);
        snprintf(tag, sizeof tag, "%s merge G=%d", impl_name[impl], merge_g);
        describe(what, sizeof what, &c, tag);
        ok &= check(&t, what, o, lse, GPU_O_NMSE, GPU_O_ATOL, GPU_O_RTOL, 1e-8, GPU_LSE_ATOL, GPU_LSE_RTOL);
        CUDA_CHECK(cudaFree(d_ob));
        CUDA_CHECK(cudaFree(d_lb));
    }
    CUDA_CHECK(cudaFree(d_o)); CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(g.q)); CUDA_CHECK(cudaFree(g.k)); CUDA_CHECK(cudaFree(g.v));
    free(o); free(lse);
    data_free(&t);
    return ok;
}

// decode_cuda is fp32 throughout on the same inputs as the reference. Scores: fp32 dot products
// of head_dim terms (|q k| <= 4) and q pre-scaled by scale*log2(e): ~2e-7 absolute. O is a convex
// combination of v in [-1, 1] accumulated in fp32 by each warp over at most nk/4 keys, then merged
// over warps and splits: relative error ~eps*sqrt(keys) <= 5e-6, absolute under 1e-6 (the O of long
// rows is small, ~0.005 at 33K keys); nmse ~1e-11 at worst. lse = max + log(sum over the keys):
// the sum's relative error (<= 5e-6) is lse's absolute error; |lse| < 15. The nmse bounds are
// loose because an lse near 0 (one key, a small score) makes its nmse large for a small error;
// atol/rtol carry the check.
#define DEC_O_NMSE 1e-10
#define DEC_O_ATOL 1e-6
#define DEC_O_RTOL 1e-5
#define DEC_LSE_NMSE 1e-9
#define DEC_LSE_ATOL 1e-5
#define DEC_LSE_RTOL 1e-6

static void *upload_bytes(const void *x, size_t bytes) {
    void *d;
    CUDA_CHECK(cudaMalloc(&d, bytes + 4));
    CUDA_CHECK(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
    return d;
}

// Runs cases[0..n) through decode_cuda one by one, or (batched) through one decode_cuda_batch;
// 1 when each matches the float64 reference (strides padded, guard words intact).
static int test_decode_cases(const attn_case *cases, int n, int batched) {
    attn_data *t = burst_calloc((size_t)n, sizeof *t);
    flash_args *a = burst_calloc((size_t)n, sizeof *a);
    float **o = burst_calloc((size_t)n, sizeof *o), **lse = burst_calloc((size_t)n, sizeof *lse);
    void **dev = burst_calloc(5 * (size_t)n, sizeof *dev); // per case: o, lse, q, k, v
    for (int i = 0; i < n; i++) {
        const attn_case c = cases[i];
        data_init(&t[i], c);
        reference(&t[i]);
        const int64_t n_o = (int64_t)c.nq * t[i].o_stride, n_lse = (int64_t)c.n_heads * c.nq;
        o[i] = poisoned(n_o), lse[i] = poisoned(n_lse);
        const int bf16 = c.kv_dtype == DTYPE_BF16;
        const size_t kv_bytes = (size_t)(c.nk * t[i].kv_stride) * dtype_size(c.kv_dtype);
        void **d = dev + 5 * i;
        d[0] = device_copy(o[i], n_o), d[1] = device_copy(lse[i], n_lse);
        d[2] = upload_bytes(t[i].q, (size_t)(c.nq * t[i].q_stride) * 4);
        d[3] = upload_bytes(bf16 ? (const void *)t[i].k16 : t[i].k, kv_bytes);
        d[4] = upload_bytes(bf16 ? (const void *)t[i].v16 : t[i].v, kv_bytes);
        a[i] = args_for(&t[i], d[0], d[1], 0, c.nk);
        a[i].q = d[2], a[i].k = d[3], a[i].v = d[4];
    }
    burst_error err;
    int ok = 1;
    for (int i = 0; i < (batched ? 1 : n); i++) { // the batch, or each case alone
        const size_t n_ws = batched ? decode_cuda_batch_workspace_floats(a, n) : decode_cuda_workspace_floats(&a[i]);
        float *ws = NULL;
        if (n_ws) CUDA_CHECK(cudaMalloc((void **)&ws, n_ws * 4));
        burst_status st = batched ? decode_cuda_batch(a, n, ws, n_ws, NULL, 0, &err) : decode_cuda(&a[i], ws, n_ws, NULL, 0, &err);
        if (st != BURST_OK) printf("FAIL decode: %s\n", err.msg), ok = 0;
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaFree(ws));
    }
    for (int i = 0; i < n; i++) {
        const attn_case c = cases[i];
        download(o[i], dev[5 * i], (int64_t)c.nq * t[i].o_stride);
        download(lse[i], dev[5 * i + 1], (int64_t)c.n_heads * c.nq);
        char what[200], tag[48];
        snprintf(tag, sizeof tag, "decode splits=%d%s", decode_cuda_splits(&a[i]), batched ? " batched" : "");
        describe(what, sizeof what, &c, tag);
        ok &= check(&t[i], what, o[i], lse[i], DEC_O_NMSE, DEC_O_ATOL, DEC_O_RTOL, DEC_LSE_NMSE, DEC_LSE_ATOL, DEC_LSE_RTOL);
        for (int b = 0; b < 5; b++) CUDA_CHECK(cudaFree(dev[5 * i + b]));
        free(o[i]), free(lse[i]);
        data_free(&t[i]);
    }
    free(t), free(a), free(o), free(lse), free(dev);
    return ok;
}

static int test_decode_case(attn_case c) { return test_decode_cases(&c, 1, 0); }

// decode_cuda_batch: calls of one launch (a step's sequences: one row each, caches of every
// length, empty ones), more than DECODE_CUDA_MAX_BATCH of them (several launches), and a mix
// that needs several kernel instances; every call against its own reference. Returns the failures.
static int test_decode_batch(int *n) {
    int fails = 0;
    attn_case step[DECODE_CUDA_MAX_BATCH + 5];
    const int n_step = DECODE_CUDA_MAX_BATCH + 5;
    for (int i = 0; i < n_step; i++) { // GQA 4, d = 128, bf16 cache: 1 to 5000 keys, causal
        const int nk = i == 3 ? 0 : 1 + (int)(test_rand_u64() % 5000);
        step[i] = (attn_case){1, nk, 128, 32, 8, 1, nk > 0 ? nk - 1 : 0, 0, DTYPE_BF16};
    }
    fails += !test_decode_cases(step, 5, 1);
    fails += !test_decode_cases(step, n_step, 1);
    static const attn_case mixed[] = {
        {1, 1000, 128, 32, 8, 1, 999, 0, DTYPE_BF16}, {3, 1000, 128, 32, 8, 1, 997, 0, DTYPE_BF16}, // other vectors a block
        {2, 500, 64, 16, 8, 1, 498, 0, DTYPE_BF16},                                                 // the first's launch: other d, GQA
        {1, 300, 64, 8, 8, 0, 300, 0, DTYPE_F32},     {2, 33000, 128, 8, 2, 1, 32998, 0, DTYPE_F32}, // other instances, heads
        {1, 7, 37, 4, 2, 1, 6, 0, DTYPE_BF16},        {8, 4097, 256, 8, 8, 0, 4097, 0, DTYPE_F32},  // scalar loads; d 256
        {0, 100, 128, 32, 8, 1, 100, 0, DTYPE_BF16},  {1, 1, 128, 32, 8, 1, 0, 0, DTYPE_BF16},      // no rows; one key
        {5, 50, 128, 32, 8, 1, 100, 102, DTYPE_BF16},                                                // rows that see no key
    };
    fails += !test_decode_cases(mixed, (int)(sizeof mixed / sizeof mixed[0]), 1);
    *n += 3;
    return fails;
}

// The decode grid; returns the failures and adds the cases run to *n.
static int test_decode(int *n) {
    static const int nqs[] = {1, 2, 3, 5, DECODE_CUDA_MAX_ROWS};
    static const int nks[] = {0, 1, 7, 63, 1000, 4097, 33000};
    // (n_heads, n_kv_heads): GQA 1, 4, 4, 8, 2, 1; past 4097 keys only the ones with <= 8 KV heads
    // (the 32-KV-head cache of 33K keys is 1 GB of test data).
    static const int heads[][2] = {{32, 32}, {32, 8}, {12, 3}, {16, 2}, {8, 4}, {8, 8}};
    int fails = 0, which = 0;
    for (size_t k = 0; k < sizeof nks / sizeof nks[0]; k++)
        for (size_t q = 0; q < sizeof nqs / sizeof nqs[0]; q++)
            for (int pos = 0; pos < 4; pos++, which++) {
                const int nq = nqs[q], nk = nks[k];
                const int *hp = heads[which % 6];
                if (nk > 4097 && hp[1] > 8) hp = heads[5];
                // 0: not causal, the query after the cache (llama.c's attend_replicated);
                // 1: causal, queries past the keys: every row sees every key;
                // 2: causal, queries inside the keys: row i sees nk/2 + i of them;
                // 3: causal, keys after the first rows: rows 0..(nq-1)/2 see none.
                int64_t q_pos0 = nk, k_pos0 = 0;
                if (pos == 2) q_pos0 = nk / 2 - 1;
                if (pos == 3) q_pos0 = 100, k_pos0 = 100 + (nq + 1) / 2;
                attn_case c = {nq, nk, which % 2 ? 128 : 64, hp[0], hp[1], pos > 0, q_pos0, k_pos0,
                               which % 3 ? DTYPE_F32 : DTYPE_BF16};
                fails += !test_decode_case(c);
                (*n)++;
            }
    // Odd head dims (scalar loads for 37; 8 elements a lane for 200 and 256) and larger nq, as
    // fp32 mode and the shapes flash_cuda does not take send them (several blocks of vectors).
    static const attn_case more[] = {
        {1, 4097, 80, 32, 8, 0, 4097, 0, DTYPE_F32},    {3, 1000, 96, 12, 3, 1, 998, 0, DTYPE_BF16},
        {2, 1000, 37, 4, 2, 1, 999, 0, DTYPE_F32},      {8, 4097, 37, 8, 8, 0, 4097, 0, DTYPE_BF16},
        {1, 33000, 256, 8, 8, 0, 33000, 0, DTYPE_F32},  {5, 1000, 200, 8, 2, 1, 997, 0, DTYPE_BF16},
        {33, 1000, 128, 8, 2, 1, 967, 0, DTYPE_F32},    {200, 300, 64, 4, 4, 1, 100, 0, DTYPE_BF16},
        {1000, 100, 64, 4, 2, 1, 0, 50, DTYPE_F32},     {13, 7, 16, 6, 2, 0, 0, 0, DTYPE_BF16},
        {1, 33000, 256, 8, 8, 0, 33000, 0, DTYPE_BF16}, {2, 1000, 37, 4, 2, 1, 999, 0, DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++, (*n)++) fails += !test_decode_case(more[i]);
    return fails;
}

// decode_cuda_workspace_bound_floats against decode_cuda_batch_workspace_floats: random steps
// (calls of 1 row, a few, or hundreds, over 0 to 200000 keys, causal or not, every head layout)
// never ask more than the bound; steps of one-row calls over 2^24 keys (past 16 x splits^2, so that
// rounding keys a split up to 16 costs no split) ask exactly that. Returns
// the failures; adds its checks to *n.
static int test_decode_bound(int *n) {
    static const int heads[][2] = {{32, 32}, {32, 8}, {12, 3}, {16, 2}, {8, 4}, {64, 8}, {40, 40}, {4, 1}};
    static const int dims[] = {64, 128, 37, 256};
    enum { STEPS = 2000, MAX_CALLS = 40 };
    flash_args calls[MAX_CALLS];
    int fails = 0;
    for (int step = 0; step < STEPS + 8; step++) {
        const int tight = step >= STEPS; // then one step of one-row calls per head layout
        const int *hp = heads[tight ? step - STEPS : (int)(test_rand_u64() % 8)], d = dims[test_rand_u64() % 4];
        const int n_calls = 1 + (int)(test_rand_u64() % MAX_CALLS);
        int rows = 0;
        for (int i = 0; i < n_calls; i++) {
            const int kind = (int)(test_rand_u64() % 4);
            const int nq = tight || kind < 2 ? 1 : kind == 2 ? 1 + (int)(test_rand_u64() % 8) : 1 + (int)(test_rand_u64() % 1500);
            const int nk = tight ? 1 << 24 : (int)(test_rand_u64() % 200001);
            calls[i] = (flash_args){.nq = nq, .nk = nk, .n_heads = hp[0], .n_kv_heads = hp[1], .head_dim = d,
                                    .q_pos0 = nk - (int64_t)(test_rand_u64() % (nk + 1)), .causal = !tight && kind % 2,
                                    .kv_dtype = DTYPE_BF16};
            rows += nq;
        }
        const size_t asked = decode_cuda_batch_workspace_floats(calls, n_calls),
                     bound = decode_cuda_workspace_bound_floats(rows, n_calls, hp[0], hp[1], d);
        const int ok = tight ? asked == bound : asked <= bound;
        if (!ok || tight)
            printf("%s decode bound: %d calls of %d rows, heads %d/%d, d=%d: %zu floats asked, bound %zu%s\n",
                   ok ? "ok  " : "FAIL", n_calls, rows, hp[0], hp[1], d, asked, bound, tight ? " (want equal)" : "");
        fails += !ok;
    }
    *n += STEPS + 8;
    return fails;
}

// flash_cudnn_worth (attention/flash_cudnn.h): a small shape whose plan flash_cudnn has built is
// taken at once; a large block at once; a small new shape from its 64th call on; a causal block
// counts the (row, key) pairs it sees. Returns the failures; adds its checks to *n.
static int test_worth(int *n) {
    attn_case c = {5, 77, 64, 4, 4, 0, 500, 500, DTYPE_F32};
    attn_data t;
    data_init(&t, c);
    gpu_inputs g = {upload_bf16(t.q, c.nq * t.q_stride), upload_bf16(t.k, c.nk * t.kv_stride),
                    upload_bf16(t.v, c.nk * t.kv_stride)};
    float *d_o = device_copy(t.q, (int64_t)c.nq * t.o_stride), *d_lse = device_copy(t.q, (int64_t)c.n_heads * c.nq);
    const flash_cuda_args planned = cuda_args(&t, &g, d_o, d_lse, 0, c.nk);
    burst_error err;
    int fails = 0;
    if (flash_cudnn(&planned, 0, &err)) printf("FAIL worth: flash_cudnn declined nq=5 nk=77: %s\n", err.msg), fails++;
    const int got = flash_cudnn_worth(&planned);
    printf("%s worth nq=5 nk=77 after flash_cudnn built its plan: %d (want 1)\n", got ? "ok  " : "FAIL", got);
    fails += !got;
    // O rows that are not 16-byte aligned, which its widening of O cannot store: declined.
    flash_cuda_args odd_stride = planned, odd_start = planned;
    odd_stride.o_stride += 1, odd_start.o += 1;
    const int declined = flash_cudnn(&odd_stride, 0, &err) == BURST_ERR_INVALID && flash_cudnn(&odd_start, 0, &err) == BURST_ERR_INVALID;
    printf("%s cuDNN declines O rows off 16 bytes (stride %lld, start + 4 bytes)\n", declined ? "ok  " : "FAIL",
           (long long)odd_stride.o_stride);
    fails += !declined;
    *n += 2;
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(d_o)); CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(g.q)); CUDA_CHECK(cudaFree(g.k)); CUDA_CHECK(cudaFree(g.v));
    data_free(&t);
    static const struct {
        int nq, nk, heads, d, causal, shift, calls, want_from; // want 1 from call want_from on
    } cases[] = {
        {8192, 13000, 32, 128, 0, 0, 1, 1},     // 4.4e11 units of work: pays within one pass
        {8192, 13000, 32, 128, 1, 0, 64, 64},   // causal: 8192 x 8193 / 2 pairs, 1.4e11, counted
        {8192, 16384, 32, 128, 1, 8192, 1, 1},  // after 8192 earlier keys: 4.1e11 (half of all: 2.7e11)
        {1234, 1500, 4, 64, 0, 0, 70, 64},      // small and new: from the 64th call on
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int h = cases[i].heads, d = cases[i].d;
        const flash_cuda_args a = {.q_stride = h * d + 8, .kv_stride = h * d + 8, .nq = cases[i].nq, .nk = cases[i].nk,
                                   .n_heads = h, .n_kv_heads = h, .head_dim = d, .q_pos0 = 500 + cases[i].shift, .k_pos0 = 500,
                                   .causal = cases[i].causal};
        int ok = 1, first = 0;
        for (int call = 1; call <= cases[i].calls; call++) {
            const int got = flash_cudnn_worth(&a);
            if (got && !first) first = call;
            ok &= got == (call >= cases[i].want_from);
        }
        printf("%s worth nq=%d nk=%d heads=%d d=%d causal=%d shift=%d: first 1 at call %d of %d (want %d)\n",
               ok ? "ok  " : "FAIL", cases[i].nq, cases[i].nk, h, d, cases[i].causal, cases[i].shift, first,
               cases[i].calls, cases[i].want_from);
        fails += !ok;
        (*n)++;
    }
    return fails;
}

int main(void) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("skip: no CUDA device\n");
        return TEST_SKIP;
    }
    test_seed("test_flash_cuda");
    static const int gqa[3][2] = {{4, 4}, {4, 2}, {8, 2}};
    static const int sizes[][2] = {{1, 1}, {7, 300}, {100, 1000}, {1000, 100}, {333, 777},
                                   {130, 4097}, {2049, 2049}, {1100, 3000}};
    const int last_impl = flash_cudnn_compiled() ? IMPL_CUDNN : IMPL_FLASH_CUDA;
    int fails = 0, n = 0;
    for (int impl = IMPL_FLASH_CUDA; impl <= last_impl; impl++) {
        int which = 0;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int causal = 0; causal <= 1; causal++)
                for (int off = 0; off < (causal ? 4 : 1); off++) {
                    int nq = sizes[s][0], nk = sizes[s][1];
                    int64_t q_pos0 = 500, k_pos0 = 500; // offsets as in test_flash_attn
                    if (off == 1) q_pos0 = k_pos0 + nk - nq;
                    if (off == 2) k_pos0 = q_pos0 + nq / 2;
                    if (off == 3) k_pos0 = q_pos0 + nq;
                    const int *hp = gqa[(which / 2) % 3];
                    attn_case c = {nq, nk, which % 2 ? 128 : 64, hp[0], hp[1], causal, q_pos0, k_pos0, DTYPE_F32};
                    fails += !test_case(c, impl, FLASH_CUDA_TILES_DEFAULT, 0);
                    n++;
                    if (off == 1 || off == 2) {
                        static const int G[3] = {1, 3, 8};
                        fails += !test_case(c, impl, FLASH_CUDA_TILES_DEFAULT, G[which % 3]);
                        n++;
                    }
                    which++;
                }
    }
    // One cuDNN plan (causal with a shift, the same shape) run at two shifts: the shift is a run-time
    // value of the plan, not part of its key.
    for (int shift = 700; flash_cudnn_compiled() && shift <= 1900; shift += 1200) {
        attn_case c = {1100, 3000, 128, 8, 2, 1, 500 + shift, 500, DTYPE_F32};
        fails += !test_case(c, IMPL_CUDNN, FLASH_CUDA_TILES_DEFAULT, 0);
        n++;
    }
    // Every compiled tile shape, both head dims, on an uneven causal case with an offset.
    for (int tl = 1; tl < FLASH_CUDA_TILES_COUNT; tl++)
        for (int d = 64; d <= 128; d += 64) {
            attn_case c = {777, 1500, d, 8, 2, 1, 1000, 277, DTYPE_F32};
            fails += !test_case(c, IMPL_FLASH_CUDA, (flash_cuda_tiles)tl, 0);
            n++;
        }
    if (flash_cudnn_compiled()) fails += test_worth(&n);
    fails += test_decode(&n);
    fails += test_decode_batch(&n);
    fails += test_decode_bound(&n);
    printf("%s: %d of %d cases failed (cuDNN %s, declined %d)\n", fails ? "FAIL" : "ok", fails, n,
           flash_cudnn_compiled() ? "built" : "not built", cudnn_declined);
    return fails ? 1 : 0;
}
