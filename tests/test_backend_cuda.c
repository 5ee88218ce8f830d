// model/backend_cuda against its twin, the CPU backend: every op on fresh random inputs of awkward
// sizes (1, 7 and 1000 rows; widths that are not multiples of 8 where the op allows; padded
// strides; positions up to 10^6; weights stored as F32, F16 and BF16), in both modes: "cuda-fp32"
// (float32 throughout) and "cuda" (bf16 weights, GEMM and flash-attention operands; decode
// attention of up to DECODE_CUDA_MAX_ROWS rows stays fp32); rmsnorm, matmul and swiglu with
// float32 and bf16 activations in both (model/backend.h's act dtype). Output
// buffers carry guard words on the device; padding between strided rows must stay untouched.
// Skips (77) when no CUDA device is present.
#include <cuda_runtime_api.h>

#include "attention/decode_cuda.h"
#include "attention/flash_cudnn.h"
#include "common/cuda_check.h"
#include "model/backend_cuda.h"
#include "tests/test_util.h"

// Tolerances, with their reasons.
// Seen on an H100 (worst nmse over all cases): fp32 mode matmul 1.8e-13, attention 1.2e-13,
// rmsnorm 7e-15, rope 1.4e-15, merge 1.7e-15; bf16 mode matmul 1.3e-5, flash attention 7.7e-6,
// embed/rmsnorm with F32/F16 weights 3e-6. Split-KV attention (attention/decode_cuda.h) is fp32
// like the CPU twin: F32 bounds; the H100 saw nmse up to 1.1e-11 (at 33000 keys, where the twin's
// one fp32 P V accumulator dominates: a float32 simulation of it gives nmse 1.9e-11 and max error
// 1.1e-7 against float64).
// Element-wise fp32 ops (rmsnorm, rope, swiglu, add, merge) differ from the CPU only by the
// order of a sum, expf/logf/sincos ulps and FMA contraction: a few float ulps (~1e-7 relative).
// 1e-5 leaves room; values near zero after cancellation (rope) get atol 1e-6 (inputs are O(1)).
#define F32_RTOL 1e-5
#define F32_ATOL 1e-6
#define F32_NMSE 1e-10
// bf16 mode rounds every F32/F16 weight to bf16 (2^-9 relative): embed/rmsnorm outputs move by
// that much; 2^-8 allows for one more float rounding. nmse: (2^-9)^2 / 3 for uniform rounding.
#define W16_RTOL (1.0 / 256)
#define W16_NMSE 1e-5
// bf16 GEMM: both operands rounded (2^-9 each), independent errors over the sum: an output's
// error has a standard deviation of about 2^-9 x sqrt(2) x sqrt(sum_j (x_j w_j)^2), whatever the
// sum cancels to (one output of 17 terms that cancelled to 0.09 was seen 0.0034 off, 3.7%).
// Elementwise bound: 5 such deviations of the largest output's term norm. The nmse is ~1e-5 over
// many outputs; under 1000 outputs it is left to chance and atol/rtol decide alone.
#define MM16_NMSE 1e-4
#define MM16_RTOL 1e-2
#define MM16_ATOL_TERMS 1.4e-2
// fp32 GEMM: cuBLAS sums in another order over up to 1003 terms: ~1e-7 of the terms' norm, whatever
// the sum cancels to; elementwise bound 1e-5 of the largest output's term norm. Under 1000 outputs
// the nmse is left out, as above: one output that cancels to near 0 (the (1, 17) weight at one
// row) makes that difference a large relative error (test_backend_cpu's 1e-10 bound failed so).
#define MM32_ATOL_TERMS 1e-5
// bf16 flash attention (Q/K/V rounded, P rounded before P V): test_flash_cuda sees O errors up to
// 1.3e-3 with rounded inputs in the reference; rounding the inputs adds about as much again.
#define FA16_NMSE 1e-4
#define FA16_ATOL 1e-2
#define FA16_RTOL 1e-2
// Scores move by ~2^-9 x |q||k| scale, lse by a weighted mean of that: a row that sees one key
// takes its score's error whole, here sd 2.3e-3 (simulated: past 1e-2 at 2e-5 a value, past 1.2e-2
// at 1e-6, and 12 such values a run); 1.5e-2 is 6.6 sd.
#define FA16_LSE_ATOL 1.5e-2
#define FA16_LSE_NMSE 1    // lse can sit near 0 (nq = nk = 1: 0.1672 for 0.1692, nmse 1.3e-4): atol decides
// bf16 outputs (an act dtype of bf16): the GPU's and the CPU's float32 results may round to
// neighbouring bf16 values, one ulp apart (2^-7 of the value at most), on top of the op's error.
#define BF16_ULP (1.0 / 128)
#define BF16_OUT_NMSE 1e-5

static int failures;

static void check(int ok) { failures += !ok; }

// ---- device buffers with guard words ----

// A cudaMemcpy from pageable memory may return before its DMA lands, and the backend's stream
// does not wait for the legacy stream: synchronize the device before the backend reads the copy.
// The copy starts skew words into the allocation (off its 256-byte alignment), which the returned
// pointer is (cudaFree it).
static float *dev_upload_skewed(const float *h, int64_t n, int skew) { // h holds n floats plus guard words
    float *d;
    CUDA_CHECK(cudaMalloc((void **)&d, (size_t)(skew + n + TEST_GUARD_WORDS) * 4));
    CUDA_CHECK(cudaMemcpy(d + skew, h, (size_t)(n + TEST_GUARD_WORDS) * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}
static float *dev_upload(const float *h, int64_t n) { return dev_upload_skewed(h, n, 0); }
// Through the backend: its stream is non-blocking, so a plain cudaMemcpy would not wait for it.
static void dev_download(burst_backend *gpu, float *h, const float *d, int64_t n) {
    backend_to_host(gpu, h, d, n + TEST_GUARD_WORDS);
}
static float *host_random(int64_t n, float lo, float hi) {
    float *h = test_alloc_guarded(n);
    test_fill(h, n, lo, hi);
    return h;
}
static float *host_clone(const float *h, int64_t n) {
    float *c = test_alloc_guarded(n);
    memcpy(c, h, (size_t)(n + TEST_GUARD_WORDS) * 4);
    return c;
}

// got (GPU, downloaded with its guard words) against want (CPU backend).
static int compare(const char *what, const float *got, const float *want, int64_t n, double nmse,
                   double atol, double rtol) {
    double *ref = burst_malloc((size_t)(n + 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = want[i];
    int ok = test_compare(what, got, ref, n, nmse, atol, rtol) && test_guard_ok(got, n, what);
    free(ref);
    return ok;
}

// ---- activations of either dtype (backend_act_dtype) ----

// A host buffer of n activations of dtype dt: test_act_words(dt, n) floats of storage, then guard words.
static float *host_act(burst_dtype dt, int64_t n, float lo, float hi) {
    float *h = test_alloc_guarded(test_act_words(dt, n));
    if (dt == DTYPE_F32) test_fill(h, n, lo, hi);
    else {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)h)[i] = f32_to_bf16(test_uniform(lo, hi));
        if (n % 2) ((uint16_t *)h)[n] = 0; // the half word before the guards
    }
    return h;
}

// compare() for n activations of dt; bf16 ones allow one ulp more, and its nmse on top of the op's:
// BF16_OUT_NMSE, or under 1000 outputs BF16_ULP^2, what one output of a few alone adds when rounded
// the other way (swiglu of n = 1: ~1.5e-5 an element by simulation, nmse (2^-8)^2 to (2^-7)^2).
static int compare_act(const char *what, burst_dtype dt, const float *got, const float *want, int64_t n, double nmse,
                       double atol, double rtol) {
    if (dt == DTYPE_F32) return compare(what, got, want, n, nmse, atol, rtol);
    float *g = test_alloc_guarded(n), *w = test_alloc_guarded(n);
    for (int64_t i = 0; i < n; i++) g[i] = test_act_value(dt, got, i), w[i] = test_act_value(dt, want, i);
    int ok = compare(what, g, w, n, nmse + (n >= 1000 ? BF16_OUT_NMSE : BF16_ULP * BF16_ULP), atol, rtol + BF16_ULP) &&
             test_guard_ok(got, test_act_words(dt, n), what);
    free(g), free(w);
    return ok;
}

// ---- weights in each stored dtype ----

// A bf16-rounded value with |x| >= 2^-14 is exact in f16: encode it bit by bit.
static uint16_t f16_bits_exact(float x) {
    uint32_t u;
    float r = bf16_to_f32(f32_to_bf16(x));
    if (fabsf(r) < 6.103515625e-05f) r = copysignf(6.103515625e-05f, r);
    memcpy(&u, &r, 4);
    uint32_t sign = (u >> 16) & 0x8000u, exp = ((u >> 23) & 0xff) - 127 + 15, man = (u >> 13) & 0x3ff;
    return (uint16_t)(sign | (exp << 10) | man);
}

typedef struct {
    weights_tensor t;
    void *data;
    float *approx; // the stored values as floats (tiny f16 values aside): for error bounds
} test_weight;

static test_weight make_weight(burst_dtype dt, int64_t rows, int64_t cols, float lo, float hi) {
    test_weight w = {.t = {.name = "test.weight", .dtype = dt, .ndim = rows ? 2 : 1}};
    int64_t n = (rows ? rows : 1) * cols;
    w.t.shape[0] = rows ? rows : cols;
    w.t.shape[1] = cols;
    w.t.numel = n;
    w.t.nbytes = (size_t)n * dtype_size(dt);
    w.data = burst_malloc(w.t.nbytes);
    w.approx = burst_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float x = test_uniform(lo, hi);
        w.approx[i] = dt == DTYPE_F32 ? x : bf16_to_f32(f32_to_bf16(x));
        if (dt == DTYPE_F32) ((float *)w.data)[i] = x;
        else if (dt == DTYPE_BF16) ((uint16_t *)w.data)[i] = f32_to_bf16(x);
        else ((uint16_t *)w.data)[i] = f16_bits_exact(x);
    }
    w.t.data = w.data;
    return w;
}

typedef struct {
    burst_backend *cpu, *gpu;
    int fp32;
} backends;

static void load_weight(const backends *B, const test_weight *w, burst_weight *cw, burst_weight *gw) {
    burst_error err;
    BURST_ASSERT(!backend_weight(B->cpu, &w->t, cw, &err));
    if (backend_weight(B->gpu, &w->t, gw, &err)) {
        printf("FAIL weight upload: %s\n", err.msg);
        exit(1);
    }
}

static const burst_dtype DTYPES[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
static const int NS[] = {1, 7, 1000};

// ---- the ops ----

static void test_embed(const backends *B) {
    for (int di = 0; di < 3; di++)
        for (int ni = 0; ni < 3; ni++) {
            const int n = NS[ni], vocab = 50, dim = 13 + 987 * (ni == 2);
            test_weight w = make_weight(DTYPES[di], vocab, dim, -1, 1);
            burst_weight cw, gw;
            load_weight(B, &w, &cw, &gw);
            int *tok = burst_malloc((size_t)n * sizeof(int));
            for (int i = 0; i < n; i++) tok[i] = (int)(test_rand_u64() % vocab);
            float *want = host_random((int64_t)n * dim, -1, 1), *got = host_clone(want, (int64_t)n * dim);
            float *d = dev_upload(got, (int64_t)n * dim);
            backend_embed(B->cpu, want, &cw, tok, n);
            backend_embed(B->gpu, d, &gw, tok, n);
            dev_download(B->gpu, got, d, (int64_t)n * dim);
            char what[96];
            snprintf(what, sizeof what, "embed %s n=%d dim=%d", dtype_name(DTYPES[di]), n, dim);
            int exact = B->fp32 || DTYPES[di] == DTYPE_BF16;
            check(compare(what, got, want, (int64_t)n * dim, exact ? 0 : W16_NMSE, 0, exact ? 0 : W16_RTOL));
            CUDA_CHECK(cudaFree(d));
            free(want), free(got), free(tok), free(w.data), free(w.approx);
        }
}

static void test_rmsnorm(const backends *B) {
    for (int di = 0; di < 3; di++)
        for (int ni = 0; ni < 3; ni++)
            for (int variant = 0; variant < 3; variant++) { // to F32, in place, to BF16
                const int n = NS[ni], dim = ni == 1 ? 4096 : 1001, in_place = variant == 1;
                const burst_dtype out = variant == 2 ? DTYPE_BF16 : DTYPE_F32;
                const int64_t len = (int64_t)n * dim, words = test_act_words(out, len);
                test_weight w = make_weight(DTYPES[di], 0, dim, 0.5f, 1.5f);
                burst_weight cw, gw;
                load_weight(B, &w, &cw, &gw);
                float *x = host_random(len, -2, 2), *want = in_place ? x : host_act(out, len, -1, 1);
                float *got = host_clone(want, words), *dx = dev_upload(x, len), *dout = in_place ? dx : dev_upload(got, words);
                backend_rmsnorm(B->gpu, dout, out, dx, &gw, n, 1e-5f);
                backend_rmsnorm(B->cpu, want, out, x, &cw, n, 1e-5f);
                dev_download(B->gpu, got, dout, words);
                char what[96];
                snprintf(what, sizeof what, "rmsnorm %s n=%d dim=%d %s", dtype_name(DTYPES[di]), n, dim,
                         in_place ? "in place" : dtype_name(out));
                int exact = B->fp32 || DTYPES[di] == DTYPE_BF16;
                check(compare_act(what, out, got, want, len, exact ? F32_NMSE : W16_NMSE, F32_ATOL, exact ? F32_RTOL : W16_RTOL));
                CUDA_CHECK(cudaFree(dx));
                if (!in_place) {
                    CUDA_CHECK(cudaFree(dout));
                    free(want);
                }
                free(x), free(got), free(w.data), free(w.approx);
            }
}

// A matmul's output on the GPU (got) against the CPU's (want), n x rows of ot, within the bounds
// that x (n x cols of xt) and the weight's values (w_approx) set.
static int compare_matmul(const backends *B, const char *what, burst_dtype xt, const float *x, burst_dtype ot,
                          const float *got, const float *want, const float *w_approx, int n, int rows, int cols) {
    // The largest sqrt(sum_j (x_j w_j)^2), from the squares taken once and the (i, o) pairs side by
    // side: term by term it took ~16 s of host time a run (both modes), inside a GPU's lease.
    double *x2 = burst_malloc(sizeof(double) * (size_t)n * cols), *w2 = burst_malloc(sizeof(double) * (size_t)rows * cols);
    for (int64_t i = 0; i < (int64_t)n * cols; i++) x2[i] = (double)test_act_value(xt, x, i) * test_act_value(xt, x, i);
    for (int64_t i = 0; i < (int64_t)rows * cols; i++) w2[i] = (double)w_approx[i] * w_approx[i];
    double most = 0; // largest sum_j (x_j w_j)^2
    #pragma omp parallel for reduction(max : most) schedule(static)
    for (int64_t io = 0; io < (int64_t)n * rows; io++) {
        const double *a = x2 + io / rows * cols, *b = w2 + io % rows * cols;
        double ss[4] = {0, 0, 0, 0}; // four chains, so that the adds do not wait on each other
        int j = 0;
        for (; j + 4 <= cols; j += 4)
            for (int k = 0; k < 4; k++) ss[k] += a[j + k] * b[j + k];
        for (; j < cols; j++) ss[0] += a[j] * b[j];
        const double sum = ss[0] + ss[1] + ss[2] + ss[3];
        if (sum > most) most = sum;
    }
    const double terms = sqrt(most);
    free(x2), free(w2);
    if (B->fp32)
        return compare_act(what, ot, got, want, (int64_t)n * rows, n * rows >= 1000 ? F32_NMSE : 1,
                           MM32_ATOL_TERMS * terms, F32_RTOL);
    return compare_act(what, ot, got, want, (int64_t)n * rows, n * rows >= 1000 ? MM16_NMSE : 1, MM16_ATOL_TERMS * terms,
                       MM16_RTOL);
}

// out = x W^T with x and out in each act dtype, and out += x W^T (backend_matmul_add).
static void test_matmul(const backends *B) {
    // (rows, cols) of W. Accumulated over 1, 7 or 8 rows (8: the most that split; on (100, 2048)
    // they fill the partial sums' buffer), (100, 2048) and (77, 2048) run split-K
    // (model/backend_cuda.cu), 77 rows putting the partial sums at odd offsets; (100, 2050), not a
    // multiple of 32 columns, one GEMM (nor of 4: split-K's slices would leave columns out).
    static const int shapes[][2] = {{77, 1003}, {300, 64}, {1, 17}, {100, 2048}, {77, 2048}, {100, 2050}};
    enum { SHAPES = sizeof shapes / sizeof shapes[0] };
    static const int ns[] = {1, 7, 8, 1000};
    // (x, out, accumulate): float32 throughout, accumulated, bf16 in and out, bf16 in accumulated
    static const struct { burst_dtype x, out; int acc; } variants[] = {
        {DTYPE_F32, DTYPE_F32, 0}, {DTYPE_F32, DTYPE_F32, 1}, {DTYPE_BF16, DTYPE_BF16, 0}, {DTYPE_BF16, DTYPE_F32, 1}};
    for (int vi = 0; vi < 4; vi++)
        for (int di = 0; di < 3; di++)
            for (int si = 0; si < SHAPES; si++)
                for (int ni = 0; ni < (int)(sizeof ns / sizeof ns[0]); ni++) {
                    const int n = ns[ni], rows = shapes[si][0], cols = shapes[si][1], acc = variants[vi].acc;
                    const burst_dtype xt = variants[vi].x, ot = variants[vi].out;
                    const int64_t out_words = test_act_words(ot, (int64_t)n * rows);
                    test_weight w = make_weight(DTYPES[di], rows, cols, -1, 1);
                    burst_weight cw, gw;
                    load_weight(B, &w, &cw, &gw);
                    float *x = host_act(xt, (int64_t)n * cols, -1, 1), *want = host_act(ot, (int64_t)n * rows, -1, 1);
                    float *got = host_clone(want, out_words);
                    float *dx = dev_upload(x, test_act_words(xt, (int64_t)n * cols)), *dout = dev_upload(got, out_words);
                    if (acc) {
                        backend_matmul_add(B->gpu, dout, dx, xt, &gw, n);
                        backend_matmul_add(B->cpu, want, x, xt, &cw, n);
                    } else {
                        backend_matmul(B->gpu, dout, ot, dx, xt, &gw, n);
                        backend_matmul(B->cpu, want, ot, x, xt, &cw, n);
                    }
                    dev_download(B->gpu, got, dout, out_words);
                    char what[128];
                    snprintf(what, sizeof what, "matmul %s n=%d W=(%d,%d) x %s %s %s", dtype_name(DTYPES[di]), n, rows,
                             cols, dtype_name(xt), acc ? "+=" : "to", dtype_name(ot));
                    check(compare_matmul(B, what, xt, x, ot, got, want, w.approx, n, rows, cols));
                    CUDA_CHECK(cudaFree(dx));
                    CUDA_CHECK(cudaFree(dout));
                    free(x), free(want), free(got), free(w.data), free(w.approx);
                }
}

// backend_matmul_group: weights loaded as one group (backend_weight_group) into outputs in one
// buffer, against the CPU's matmul of each weight; the words between outputs must stay untouched.
// Each run of neighbours of one shape whose outputs are equally spaced, with words between them or
// none, is one batched GEMM (where fp32 mode does not want bf16 outputs: there every weight alone):
// one GEMM for a group of one shape, two for grouped-query attention's Q apart and its K and V
// together, or for a third output placed further off; three for weights given in reverse order.
enum group_layout { SPACED, PACKED, REVERSED, UNEVEN };
static void test_matmul_group(const backends *B) {
    enum { GAP = 5 };
    static const struct { int count, rows[3], cols; enum group_layout layout; int gemms; } cases[] = {
        {3, {77, 77, 77}, 1003, SPACED, 1}, {3, {77, 77, 77}, 1003, PACKED, 1}, {3, {77, 77, 77}, 1003, REVERSED, 3},
        {3, {77, 77, 77}, 1003, UNEVEN, 2}, {2, {300, 300}, 64, SPACED, 1},     {3, {40, 24, 24}, 130, SPACED, 2}};
    static const struct { burst_dtype x, out; } variants[] = {{DTYPE_F32, DTYPE_F32}, {DTYPE_BF16, DTYPE_F32},
                                                              {DTYPE_BF16, DTYPE_BF16}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int vi = 0; vi < 3; vi++)
            for (int di = 0; di < 3; di++)
                for (int ni = 0; ni < 3; ni++) {
                    const int count = cases[ci].count, cols = cases[ci].cols, n = NS[ni];
                    const enum group_layout layout = cases[ci].layout;
                    const burst_dtype xt = variants[vi].x, ot = variants[vi].out;
                    test_weight w[3];
                    const weights_tensor *t[3];
                    burst_weight cw[3], gw[3];
                    const burst_weight *gws[3];
                    int64_t span = 0, at[3], total; // words from one output to the next; each output's first word
                    for (int i = 0; i < count; i++) {
                        w[i] = make_weight(DTYPES[di], cases[ci].rows[i], cols, -1, 1);
                        t[i] = &w[i].t;
                        int64_t words = test_act_words(ot, (int64_t)n * cases[ci].rows[i]) + (layout == PACKED ? 0 : GAP);
                        if (words > span) span = words;
                    }
                    for (int i = 0; i < count; i++) at[i] = (i + (layout == UNEVEN && i == count - 1)) * span;
                    total = at[count - 1] + span;
                    burst_error err;
                    BURST_ASSERT(!backend_weight_group(B->cpu, t, count, cw, &err));
                    if (backend_weight_group(B->gpu, t, count, gw, &err)) {
                        printf("FAIL weight group upload: %s\n", err.msg);
                        exit(1);
                    }
                    int order[3]; // output i is x times weight order[i]
                    for (int i = 0; i < count; i++) order[i] = layout == REVERSED ? count - 1 - i : i, gws[i] = &gw[order[i]];
                    float *x = host_act(xt, (int64_t)n * cols, -1, 1), *start = host_random(total, -1, 1);
                    float *got = host_clone(start, total), *dx = dev_upload(x, test_act_words(xt, (int64_t)n * cols));
                    float *dout = dev_upload(got, total);
                    void *outs[3];
                    for (int i = 0; i < count; i++) outs[i] = dout + at[i];
                    const int gemms = backend_matmul_group(B->gpu, outs, ot, dx, xt, gws, count, n);
                    const int want_gemms = B->fp32 && ot == DTYPE_BF16 ? count : cases[ci].gemms;
                    dev_download(B->gpu, got, dout, total);
                    static const char *layouts[] = {"spaced", "packed", "reversed", "uneven"};
                    char what[160];
                    snprintf(what, sizeof what, "matmul group of %d (%s) %s n=%d W=(%d,%d) x %s to %s", count,
                             layouts[layout], dtype_name(DTYPES[di]), n, cases[ci].rows[0], cols, dtype_name(xt),
                             dtype_name(ot));
                    if (gemms != want_gemms) printf("FAIL %s: %d GEMMs, want %d\n", what, gemms, want_gemms);
                    check(gemms == want_gemms);
                    unsigned char *written = burst_calloc((size_t)total, 1);
                    for (int i = 0; i < count; i++) {
                        const int rows = cases[ci].rows[order[i]];
                        const int64_t words = test_act_words(ot, (int64_t)n * rows);
                        float *want = host_act(ot, (int64_t)n * rows, -1, 1), *got_i = test_alloc_guarded(words);
                        memcpy(got_i, got + at[i], (size_t)words * 4); // (the whole buffer's guards: below)
                        memset(written + at[i], 1, (size_t)words);
                        backend_matmul(B->cpu, want, ot, x, xt, &cw[order[i]], n);
                        check(compare_matmul(B, what, xt, x, ot, got_i, want, w[order[i]].approx, n, rows, cols));
                        free(want), free(got_i);
                    }
                    for (int64_t j = 0; j < total; j++)
                        if (!written[j] && memcmp(&got[j], &start[j], 4)) {
                            printf("FAIL %s: word %lld, outside every output, was written\n", what, (long long)j);
                            check(0);
                            break;
                        }
                    check(test_guard_ok(got, total, what));
                    CUDA_CHECK(cudaFree(dx));
                    CUDA_CHECK(cudaFree(dout));
                    free(x), free(start), free(got), free(written);
                    for (int i = 0; i < count; i++) free(w[i].data), free(w[i].approx);
                }
}

// q and k turned in one call, against the CPU's.
static void test_rope(const backends *B) {
    // (n_heads, n_kv_heads, head_dim); 13 and 11 heads: two of the GPU kernel's groups of 8 each,
    // the second one short, k's groups after q's
    static const int dims[][3] = {{1, 1, 8}, {3, 1, 10}, {13, 11, 128}};
    for (int si = 0; si < 3; si++)
        for (int ni = 0; ni < 3; ni++) {
            const int n = NS[ni], heads = dims[si][0], kv_heads = dims[si][1], hd = dims[si][2];
            const int64_t len = (int64_t)n * heads * hd, len_k = (int64_t)n * kv_heads * hd;
            int64_t *pos = burst_malloc((size_t)n * sizeof(int64_t));
            for (int i = 0; i < n; i++) pos[i] = si == 1 ? i : (int64_t)(test_rand_u64() % 1000000);
            // No scaling; linear; YaRN (its ramp falls inside head_dim 128's pairs).
            llama_config cfg = {.head_dim = hd, .rope_theta = si == 2 ? 500000.0f : 10000.0f, .rope_factor = 1};
            if (si == 1) cfg.rope_scaling = ROPE_SCALING_LINEAR, cfg.rope_factor = 4;
            if (si == 2)
                cfg.rope_scaling = ROPE_SCALING_YARN, cfg.rope_factor = 16, cfg.rope_original_ctx = 4096,
                cfg.rope_beta_fast = 32, cfg.rope_beta_slow = 1, cfg.rope_attention_factor = 1.277f;
            rope_params rp = rope_params_of(&cfg);
            float *want = host_random(len, -1, 1), *got = host_clone(want, len), *d = dev_upload(got, len);
            float *want_k = host_random(len_k, -1, 1), *got_k = host_clone(want_k, len_k), *d_k = dev_upload(got_k, len_k);
            backend_rope(B->gpu, d, heads, d_k, kv_heads, pos, n, hd, &rp);
            backend_rope(B->cpu, want, heads, want_k, kv_heads, pos, n, hd, &rp);
            dev_download(B->gpu, got, d, len);
            dev_download(B->gpu, got_k, d_k, len_k);
            char what[96];
            snprintf(what, sizeof what, "rope n=%d heads=%d/%d head_dim=%d theta=%g scaling %d", n, heads, kv_heads, hd,
                     cfg.rope_theta, (int)cfg.rope_scaling);
            check(compare(what, got, want, len, F32_NMSE, F32_ATOL, F32_RTOL));
            check(compare(what, got_k, want_k, len_k, F32_NMSE, F32_ATOL, F32_RTOL));
            CUDA_CHECK(cudaFree(d));
            CUDA_CHECK(cudaFree(d_k));
            free(want), free(got), free(want_k), free(got_k), free(pos);
        }
}

static void test_elementwise(const backends *B) {
    // 8 and 40000 go in 16-byte vectors (SwiGLU), and the last 40000 one element a thread: its
    // buffers start a word past the 16-byte alignment (skew). (A copy of one job is a
    // cudaMemcpyAsync at any alignment: test_batch runs the copy kernel's unaligned moves.)
    static const int64_t lens[] = {1, 7, 37003, 8, 40000, 40000};
    for (int li = 0; li < 6; li++)
        for (int op = 0; op < 3; op++) { // swiglu in float32, in bf16, copy
            const int64_t n = lens[li];
            const int skew = li == 5;
            const burst_dtype dt = op == 1 ? DTYPE_BF16 : DTYPE_F32;
            const int64_t words = test_act_words(dt, n);
            float *want = host_act(dt, n, -8, 8), *y = host_act(dt, n, -2, 2), *got = host_clone(want, words);
            float *d = dev_upload_skewed(got, words, skew), *dy = dev_upload_skewed(y, words, skew);
            float *dd = d + skew, *ddy = dy + skew;
            if (op < 2) backend_swiglu(B->gpu, dd, ddy, dt, n), backend_swiglu(B->cpu, want, y, dt, n);
            else backend_copy(B->gpu, &(copy_job){dd, ddy, (size_t)n * 4}, 1), backend_copy(B->cpu, &(copy_job){want, y, (size_t)n * 4}, 1);
            dev_download(B->gpu, got, dd, words);
            char what[64];
            snprintf(what, sizeof what, "%s n=%lld%s", op < 2 ? (op ? "swiglu bf16" : "swiglu f32") : "copy", (long long)n,
                     skew ? " off 16-byte alignment" : "");
            check(op == 2 ? compare(what, got, want, n, 0, 0, 0) : compare_act(what, dt, got, want, n, F32_NMSE, F32_ATOL, F32_RTOL));
            CUDA_CHECK(cudaFree(d));
            CUDA_CHECK(cudaFree(dy));
            free(want), free(y), free(got);
        }
}

// backend_convert, the way K/V rows enter the KV cache: bit for bit the CPU's rounding, at
// aligned and unaligned destinations (a cache row of odd width starts at any even byte).
static void test_convert(const backends *B) {
    static const int64_t lens[] = {1, 7, 37003};
    for (int li = 0; li < 3; li++)
        for (int to = 0; to < 2; to++)
            for (int skew = 0; skew < 2; skew++) {
                const int64_t n = lens[li];
                const burst_dtype dt = to ? DTYPE_BF16 : DTYPE_F32;
                const size_t es = dtype_size(dt), bytes = (size_t)(n + skew) * es;
                float *x = host_random(n, -8, 8);
                // ties between two bf16 values, which round to the even one
                for (int64_t i = 0; i < n; i += 5) x[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + (float)(i % 3) / 128 + 1.0f / 256);
                float *dx = dev_upload(x, n);
                char *want = calloc(1, bytes), *got = calloc(1, bytes), *d = backend_alloc(B->gpu, bytes);
                backend_convert(B->cpu, want + skew * es, dt, x, n);
                backend_convert(B->gpu, d + skew * es, dt, dx, n);
                backend_sync(B->gpu);
                CUDA_CHECK(cudaMemcpy(got, d, bytes, cudaMemcpyDeviceToHost));
                int ok = memcmp(got, want, bytes) == 0;
                printf("%s convert to %s n=%lld at element %d: %s\n", ok ? "ok  " : "FAIL", dtype_name(dt), (long long)n,
                       skew, ok ? "bit-identical to the CPU" : "differs from the CPU");
                check(ok);
                backend_release(B->gpu, d);
                CUDA_CHECK(cudaFree(dx));
                free(x), free(want), free(got);
            }
}

typedef struct {
    int nq, nk, heads, kv_heads, d;
    int64_t q_pos0, k_pos0;
    int causal, pad; // pad: extra elements between rows of q, k/v and o
    int bf16_kv;     // K/V passed as bf16 (a bf16 KV cache)
} attn_case;

// A device copy of n bf16 values.
static uint16_t *dev_upload16(const uint16_t *h, int64_t n) {
    uint16_t *d;
    CUDA_CHECK(cudaMalloc((void **)&d, (size_t)(n + 1) * 2));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}

// Runs cases[0..n) on the CPU and the GPU, one backend_attention each, or (batch) one
// backend_attention_batch for all on each side, and compares every case's O and lse.
static void test_attention_cases(const backends *B, const attn_case *cases, int n, int batch) {
    typedef struct {
        int64_t nq_el, nl;
        float *q, *k, *v, *o_want, *o_got, *l_want, *l_got, *dq, *dk, *dv, *d_o, *dl;
        uint16_t *k16, *v16, *dk16, *dv16;
    } bufs;
    bufs *u = burst_calloc((size_t)n + 1, sizeof *u);
    flash_args *cpu = burst_calloc((size_t)n + 1, sizeof *cpu), *gpu = burst_calloc((size_t)n + 1, sizeof *gpu);
    for (int i = 0; i < n; i++) {
        const attn_case c = cases[i];
        bufs *b = &u[i];
        const int64_t qs = (int64_t)c.heads * c.d + c.pad, ks = (int64_t)c.kv_heads * c.d + 3 * c.pad;
        const int64_t nk_el = c.nk * ks;
        b->nq_el = c.nq * qs, b->nl = (int64_t)c.heads * c.nq;
        b->q = host_random(b->nq_el, -3, 3), b->k = host_random(nk_el, -1, 1), b->v = host_random(nk_el, -1, 1);
        b->o_want = host_random(b->nq_el, -1, 1), b->o_got = host_clone(b->o_want, b->nq_el);
        b->l_want = host_random(b->nl, -1, 1), b->l_got = host_clone(b->l_want, b->nl);
        b->dq = dev_upload(b->q, b->nq_el), b->dk = dev_upload(b->k, nk_el), b->dv = dev_upload(b->v, nk_el);
        b->d_o = dev_upload(b->o_got, b->nq_el), b->dl = dev_upload(b->l_got, b->nl);
        b->k16 = calloc((size_t)nk_el + 1, 2), b->v16 = calloc((size_t)nk_el + 1, 2);
        for (int64_t j = 0; j < nk_el; j++) b->k16[j] = f32_to_bf16(b->k[j]), b->v16[j] = f32_to_bf16(b->v[j]);
        b->dk16 = dev_upload16(b->k16, nk_el), b->dv16 = dev_upload16(b->v16, nk_el);
        cpu[i] = (flash_args){.q = b->q, .k = b->k, .v = b->v, .o = b->o_want, .lse = b->l_want, .q_stride = qs,
                              .kv_stride = ks, .o_stride = qs, .nq = c.nq, .nk = c.nk, .n_heads = c.heads,
                              .n_kv_heads = c.kv_heads, .head_dim = c.d, .q_pos0 = c.q_pos0, .k_pos0 = c.k_pos0,
                              .causal = c.causal, .scale = 1.0f / sqrtf((float)c.d),
                              .kv_dtype = c.bf16_kv ? DTYPE_BF16 : DTYPE_F32};
        if (c.bf16_kv) cpu[i].k = b->k16, cpu[i].v = b->v16;
        gpu[i] = cpu[i];
        gpu[i].q = b->dq, gpu[i].o = b->d_o, gpu[i].lse = b->dl;
        gpu[i].k = c.bf16_kv ? (const void *)b->dk16 : b->dk, gpu[i].v = c.bf16_kv ? (const void *)b->dv16 : b->dv;
    }
    if (batch) backend_attention_batch(B->cpu, cpu, n), backend_attention_batch(B->gpu, gpu, n);
    for (int i = 0; !batch && i < n; i++) backend_attention(B->cpu, &cpu[i]), backend_attention(B->gpu, &gpu[i]);
    for (int i = 0; i < n; i++) {
        const attn_case c = cases[i];
        bufs *b = &u[i];
        dev_download(B->gpu, b->o_got, b->d_o, b->nq_el);
        dev_download(B->gpu, b->l_got, b->dl, b->nl);
        // else the split-KV kernel (attention/decode_cuda.h), fp32
        const int flash = !B->fp32 && c.nq > DECODE_CUDA_MAX_ROWS && (c.d == 64 || c.d == 128) && cpu[i].q_stride % 2 == 0;
        char what[180];
        snprintf(what, sizeof what, "attention%s%s nq=%d nk=%d heads=%d/%d d=%d pos0=%lld/%lld causal=%d pad=%d kv %s",
                 flash ? "(flash bf16)" : "(split-kv fp32)", batch ? " batch" : "", c.nq, c.nk, c.heads, c.kv_heads,
                 c.d, (long long)c.q_pos0, (long long)c.k_pos0, c.causal, c.pad, c.bf16_kv ? "bf16" : "f32");
        char what_l[190];
        snprintf(what_l, sizeof what_l, "%s lse", what);
        if (flash) {
            check(compare(what, b->o_got, b->o_want, b->nq_el, FA16_NMSE, FA16_ATOL, FA16_RTOL));
            check(compare(what_l, b->l_got, b->l_want, b->nl, FA16_LSE_NMSE, FA16_LSE_ATOL, 0));
        } else {
            check(compare(what, b->o_got, b->o_want, b->nq_el, F32_NMSE, F32_ATOL, F32_RTOL));
            // lse nmse only over 1000 values or more: nq = nk = 1's one lse is its score, ~N(0, 1),
            // from two fp32 dot products ~8e-8 apart (simulated): past 1e-5 of it in 0.5% of runs a mode.
            check(compare(what_l, b->l_got, b->l_want, b->nl, b->nl >= 1000 ? F32_NMSE : 1, F32_ATOL, F32_RTOL));
        }
        void *dbufs[] = {b->dq, b->dk, b->dv, b->d_o, b->dl, b->dk16, b->dv16};
        for (int j = 0; j < 7; j++) CUDA_CHECK(cudaFree(dbufs[j]));
        free(b->q), free(b->k), free(b->v), free(b->k16), free(b->v16), free(b->o_want), free(b->o_got);
        free(b->l_want), free(b->l_got);
    }
    free(u), free(cpu), free(gpu);
}

static void test_attention(const backends *B) {
    static const attn_case cases[] = {
        {7, 7, 4, 2, 8, 0, 0, 1, 0, 0},           // stories260K's shape: split-KV in both modes
        {1, 1000, 3, 1, 20, 999, 0, 1, 5, 0},     // decode, head_dim not a multiple of 8, scalar loads
        {1, 33000, 32, 8, 128, 33000, 0, 0, 0, 0}, // decode of a GQA 4 model after 33K tokens (split)
        {1, 20000, 8, 8, 64, 19999, 0, 1, 4, 0},  // decode, causal, padded rows
        {8, 4000, 8, 2, 128, 3992, 0, 1, 0, 0},   // DECODE_CUDA_MAX_ROWS rows: split-KV in both modes
        {9, 500, 4, 2, 128, 491, 0, 1, 0, 0},     // one row more: flash in bf16 mode
        {1000, 1000, 4, 4, 64, 0, 0, 1, 0, 0},    // a prefill chunk
        {7, 1007, 8, 2, 128, 1000, 0, 1, 8, 0},   // a chunk after 1000 cached tokens, GQA 4, padded rows
        {33, 77, 2, 2, 128, 0, 50, 0, 3, 0},      // not causal, keys at an offset, odd strides: split-KV
        {7, 20, 2, 1, 64, 0, 5, 1, 0, 0},         // rows 0..4 see no key: O = 0, lse = -inf
        {1, 1, 1, 1, 64, 0, 0, 1, 0, 0},
        {1100, 1100, 4, 4, 128, 0, 0, 1, 0, 0},   // >= 1024 rows: cuDNN when built (flash_cudnn.h)
        {1030, 3000, 8, 2, 64, 1970, 0, 1, 8, 0}, // cuDNN, diagonal at an offset, GQA 4, padded rows
        {1024, 500, 4, 2, 128, 0, 600, 1, 0, 0},  // rows see no key: cuDNN declines, flash_cuda runs
        // A bf16 KV cache: read in place where rows are aligned, else packed (flash) or read with
        // scalar loads (split-KV).
        {7, 7, 4, 2, 8, 0, 0, 1, 0, 1},           // split-KV on bf16 K/V, scalar loads
        {1, 33000, 32, 8, 128, 33000, 0, 0, 0, 1}, // decode of a GQA 4 model after 33K tokens (split)
        {3, 1000, 4, 1, 64, 997, 0, 1, 8, 1},     // a few decode rows, padded rows
        {9, 500, 4, 2, 128, 491, 0, 1, 0, 1},     // flash in bf16 mode, the cache read in place
        {33, 77, 2, 2, 128, 0, 50, 0, 3, 1},      // rows not 16-byte aligned: packed / scalar loads
        {1000, 1000, 4, 4, 64, 0, 0, 1, 0, 1},    // a prefill chunk
        {1100, 2100, 4, 2, 128, 1000, 0, 1, 0, 1},// cuDNN on a chunk after 1000 cached tokens
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_attention_cases(B, &cases[i], 1, 0);
}

// backend_convert_batch and backend_attention_batch (the G = 1 decode step: every sequence's
// cache writes, then every sequence's attention), and backend_copy's batches, against the CPU, on
// a GPU backend made with BURST_BATCHED_DECODE=batched: one launch for many calls, or one call at
// a time.
static void test_batch(const backends *B) {
    static const attn_case step[] = {
        // one decode row per sequence, caches of several lengths (one launch when batched)
        {1, 1000, 32, 8, 128, 999, 0, 1, 0, 1}, {1, 1, 32, 8, 128, 0, 0, 1, 0, 1}, {1, 4097, 32, 8, 128, 4096, 0, 1, 0, 1},
        {1, 77, 32, 8, 128, 76, 0, 1, 0, 1},
        // a prefill chunk and drafted rows beside them: flash in bf16 mode, another kernel instance
        {1100, 2100, 32, 8, 128, 1000, 0, 1, 0, 1}, {5, 300, 32, 8, 128, 295, 0, 1, 0, 1},
    };
    test_attention_cases(B, step, (int)(sizeof step / sizeof step[0]), 1);
    // the rows of 170 cache writes, more than one launch takes, in both cache dtypes; one of them a
    // prefill chunk's, large enough to go apart from the batch
    enum { JOBS = 170 };
    for (int to = 0; to < 2; to++) {
        const burst_dtype dt = to ? DTYPE_BF16 : DTYPE_F32;
        int64_t at[JOBS + 1];
        at[0] = 0;
        for (int i = 0; i < JOBS; i++)
            at[i + 1] = at[i] + (i == 7 ? 0 : i == 11 ? 70001 : i % 3 ? 1024 : 1 + (int64_t)(test_rand_u64() % 5000));
        const int64_t n = at[JOBS];
        const size_t bytes = (size_t)n * dtype_size(dt) + 16;
        float *x = host_random(n, -8, 8), *dx = dev_upload(x, n);
        char *want = calloc(1, bytes), *got = calloc(1, bytes), *d = backend_alloc(B->gpu, bytes);
        convert_job cj[JOBS], gj[JOBS];
        for (int i = 0; i < JOBS; i++) { // destinations in reverse order: jobs are independent
            const int64_t dst = n - at[i + 1];
            cj[i] = (convert_job){want + dst * dtype_size(dt), x + at[i], at[i + 1] - at[i]};
            gj[i] = (convert_job){d + dst * dtype_size(dt), dx + at[i], at[i + 1] - at[i]};
        }
        backend_convert_batch(B->cpu, dt, cj, JOBS);
        backend_convert_batch(B->gpu, dt, gj, JOBS);
        backend_sync(B->gpu);
        CUDA_CHECK(cudaMemcpy(got, d, bytes, cudaMemcpyDeviceToHost));
        int ok = memcmp(got, want, bytes) == 0;
        printf("%s convert batch of %d jobs to %s, %lld elements: %s\n", ok ? "ok  " : "FAIL", JOBS, dtype_name(dt),
               (long long)n, ok ? "bit-identical to the CPU" : "differs from the CPU");
        check(ok);
        backend_release(B->gpu, d);
        CUDA_CHECK(cudaFree(dx));
        free(x), free(want), free(got);
    }
    // backend_copy of 170 jobs, more than one launch takes, each in its own 16-byte aligned
    // slot: sizes of 0 to 4800 bytes; every 4th job of a size that is not a multiple of 16 (byte
    // by byte), every 8th also from an odd address; one of 70001 bytes (it goes apart from the
    // batch); destinations in reverse order.
    enum { COPIES = 170 };
    int64_t at[COPIES + 1], len[COPIES];
    at[0] = 0;
    for (int i = 0; i < COPIES; i++) {
        len[i] = i == 9 ? 0 : i == 13 ? 70001 : i % 4 ? 16 * (int64_t)(test_rand_u64() % 300) : 1 + (int64_t)(test_rand_u64() % 4800);
        at[i + 1] = at[i] + (len[i] + 1 + 15) / 16 * 16;
    }
    const size_t bytes = (size_t)at[COPIES];
    char *src = malloc(bytes + 1), *want = calloc(1, bytes + 1), *got = calloc(1, bytes + 1), *d_src, *d_dst;
    for (size_t i = 0; i < bytes; i++) src[i] = (char)test_rand_u64();
    CUDA_CHECK(cudaMalloc((void **)&d_src, bytes + 1));
    CUDA_CHECK(cudaMemcpy(d_src, src, bytes + 1, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize()); // see dev_upload
    d_dst = backend_alloc(B->gpu, bytes + 1);
    copy_job cj[COPIES], gj[COPIES];
    for (int i = 0; i < COPIES; i++) {
        const size_t from = (size_t)at[i] + (i % 8 == 0), dst = bytes - (size_t)at[i + 1];
        cj[i] = (copy_job){want + dst, src + from, (size_t)len[i]};
        gj[i] = (copy_job){d_dst + dst, d_src + from, (size_t)len[i]};
    }
    backend_copy(B->cpu, cj, COPIES);
    backend_copy(B->gpu, gj, COPIES);
    backend_sync(B->gpu);
    CUDA_CHECK(cudaMemcpy(got, d_dst, bytes + 1, cudaMemcpyDeviceToHost));
    int ok = memcmp(got, want, bytes + 1) == 0;
    printf("%s copy batch of %d jobs, %zu bytes: %s\n", ok ? "ok  " : "FAIL", COPIES, bytes,
           ok ? "identical to the CPU" : "differs from the CPU");
    check(ok);
    backend_release(B->gpu, d_dst);
    CUDA_CHECK(cudaFree(d_src));
    free(src), free(want), free(got);
}

// backend_merge of one batch: the six shapes of NS x dims (padded rows in the first), then 60
// decode rows (one per sequence), more calls than one launch takes.
static void test_merge(const backends *B) {
    enum { SHAPES = 6, CALLS = SHAPES + 60 };
    static const int dims[][2] = {{3, 20}, {8, 128}};
    online_softmax_args want[CALLS], got[CALLS];
    for (int j = 0; j < CALLS; j++) {
        const int n = j < SHAPES ? NS[j % 3] : 1, heads = dims[j < 3 ? 0 : 1][0], d = dims[j < 3 ? 0 : 1][1];
        const int64_t stride = (int64_t)heads * d + (j < 3 ? 7 : 0), n_o = n * stride, nl = (int64_t)heads * n;
        float *o = host_random(n_o, -1, 1), *ob = host_random(n_o, -1, 1);
        float *l = host_random(nl, -5, 5), *lb = host_random(nl, -5, 5);
        for (int64_t i = j; i < nl; i += 5) (i % 2 ? l : lb)[i] = -INFINITY; // empty partials
        want[j] = (online_softmax_args){.o = o, .lse = l, .o_b = ob, .lse_b = lb, .o_stride = stride,
                                        .o_b_stride = stride, .n = n, .n_heads = heads, .head_dim = d};
        got[j] = want[j];
        got[j].o = dev_upload(o, n_o), got[j].o_b = dev_upload(ob, n_o), got[j].lse = dev_upload(l, nl);
        got[j].lse_b = dev_upload(lb, nl);
    }
    backend_merge(B->cpu, want, CALLS);
    backend_merge(B->gpu, got, CALLS);
    for (int j = 0; j < CALLS; j++) {
        const online_softmax_args *w = &want[j], *g = &got[j];
        const int64_t n_o = w->n * w->o_stride, nl = (int64_t)w->n_heads * w->n;
        float *o = test_alloc_guarded(n_o), *l = test_alloc_guarded(nl);
        dev_download(B->gpu, o, g->o, n_o);
        dev_download(B->gpu, l, g->lse, nl);
        char what[96];
        snprintf(what, sizeof what, "merge batch call %d n=%d heads=%d d=%d", j, w->n, w->n_heads, w->head_dim);
        check(compare(what, o, w->o, n_o, F32_NMSE, F32_ATOL, F32_RTOL));
        snprintf(what, sizeof what, "merge batch call %d n=%d heads=%d d=%d lse", j, w->n, w->n_heads, w->head_dim);
        check(compare(what, l, w->lse, nl, F32_NMSE, F32_ATOL, F32_RTOL));
        const float *bufs[] = {g->o, g->o_b, g->lse, g->lse_b};
        for (int i = 0; i < 4; i++) CUDA_CHECK(cudaFree((void *)bufs[i]));
        free(w->o), free((void *)w->o_b), free(w->lse), free((void *)w->lse_b), free(o), free(l);
    }
}

// The float64 buckets of row x (cols) at temperature t, exp((x - max) / t) a column, laid end to
// end in column order: returns their sum; column k's bucket is [*start, *end) (0 <= k < cols).
static double bucket_of(const float *x, int64_t cols, float t, int64_t k, double *start, double *end) {
    double max = -INFINITY, total = 0;
    *start = *end = 0;
    for (int64_t j = 0; j < cols; j++) max = x[j] > max ? x[j] : max;
    for (int64_t j = 0; j < cols; j++) {
        if (j == k) *start = total;
        total += exp(((double)x[j] - max) / t);
        if (j == k) *end = total;
    }
    return total;
}

// Whether id is a draw of unit u from row x (cols) at temperature t > 0 up to float sums: u times
// the float64 sum of exp((x - max) / t) falls in id's bucket, the buckets in id order, widened by
// 2e-5 of the sum either way. (The kernel's sums of 256 slices, each of up to 125 terms, then of
// the slices, stay within ~1e-6 of the sum; a float sum term by term over 32000, the CPU's, drifts
// to ~1e-5, so the two pick other ids in a few rows in a hundred.)
static int draw_fits(const float *x, int64_t cols, float t, float u, int id) {
    if (id < 0 || id >= cols) return 0;
    double start, end;
    const double total = bucket_of(x, cols, t, id, &start, &end), r = (double)u * total, tol = 2e-5 * total;
    return r >= start - tol && r <= end + tol;
}

// Units just under the end of a bucket, on rows where half the columns are -inf (no bucket): the
// kernel's walk through its slice adds in another order than the slice's sum it chose the slice
// by, and where rounding leaves the unit between the two, the draw must still be a column with a
// bucket (before, the slice's last column: -inf for half the slices). A numpy float32 simulation
// of the old walk on rows like these drew a -inf column in 17 of 4000.
static void test_sample_bucket_ends(const backends *B) {
    enum { ROWS = 4000, COLS = 4000 };
    const int64_t n = (int64_t)ROWS * COLS;
    float *x = test_alloc_guarded(n), *temperature = burst_malloc(sizeof(float) * ROWS), *unit = burst_malloc(sizeof(float) * ROWS);
    for (int r = 0; r < ROWS; r++) {
        float *row = x + (int64_t)r * COLS;
        for (int c = 0; c < COLS; c++)
            row[c] = c && test_uniform(0, 1) < 0.5f ? -INFINITY : 3 * (test_uniform(-1, 1) + test_uniform(-1, 1));
        temperature[r] = test_uniform(0.5f, 2);
        int end = (int)(test_rand_u64() % COLS); // a finite column's bucket end, at or after a random column
        while (row[end] == -INFINITY) end = (end + 1) % COLS;
        double start, upto;
        const double total = bucket_of(row, COLS, temperature[r], end, &start, &upto);
        unit[r] = fminf((float)(upto / total * (1 - test_uniform(0, 2e-7f))), 0x1.fffffep-1f); // (units are under 1)
    }
    float *d = dev_upload(x, n);
    int *got = burst_malloc(sizeof(int) * ROWS), none = 0, unfit = 0;
    backend_sample(B->gpu, got, d, ROWS, COLS, temperature, unit);
    for (int r = 0; r < ROWS; r++) {
        const float *row = x + (int64_t)r * COLS;
        none += got[r] < 0 || got[r] >= COLS || row[got[r]] == -INFINITY;
        unfit += !draw_fits(row, COLS, temperature[r], unit[r], got[r]);
    }
    const int ok = none == 0 && unfit == 0;
    printf("%s sample drawn at bucket ends, %d rows of %d columns, half -inf: %d -inf columns drawn, %d ids not draws "
           "of their units\n", ok ? "ok  " : "FAIL", ROWS, COLS, none, unfit);
    check(ok);
    CUDA_CHECK(cudaFree(d));
    free(x), free(temperature), free(unit), free(got);
}

// backend_sample against the CPU's. Greedy (temperature NULL) on test_fill_argmax_rows' rows (ties,
// a row of -INFINITY, one whose largest value is its last): the CPU's indices. At temperatures
// (every third row greedy: the CPU's index) on bell-shaped logits, units from 0 to under 1: every
// drawn id a draw of its unit (draw_fits); how many differ from the CPU's is printed. A guard word
// after the ids must stay.
static void test_sample(const backends *B) {
    static const int rows_of[] = {1, 7, 70};
    // (the draw's 256 slices: of 125 columns each at 32000; of 126 at 32003, the last short or empty)
    static const int64_t cols_of[] = {1, 37, 32000, 32003};
    for (int ri = 0; ri < 3; ri++)
        for (int ci = 0; ci < 4; ci++) {
            const int rows = rows_of[ri];
            const int64_t cols = cols_of[ci], n = rows * cols;
            float *x = test_alloc_guarded(n);
            test_fill_argmax_rows(x, rows, cols);
            float *d = dev_upload(x, n);
            int *want = calloc((size_t)rows, sizeof(int)), *got = calloc((size_t)rows + 1, sizeof(int));
            got[rows] = -7;
            backend_sample(B->cpu, want, x, rows, cols, NULL, NULL);
            backend_sample(B->gpu, got, d, rows, cols, NULL, NULL);
            int ok = memcmp(got, want, sizeof(int) * (size_t)rows) == 0;
            printf("%s sample greedy rows=%d cols=%lld: %s\n", ok ? "ok  " : "FAIL", rows, (long long)cols,
                   ok ? "the CPU's indices" : "indices differ from the CPU's");
            check(ok);
            CUDA_CHECK(cudaFree(d));
            float *temperature = calloc((size_t)rows, sizeof(float)), *unit = calloc((size_t)rows, sizeof(float));
            for (int64_t i = 0; i < n; i++) x[i] = 3 * (test_uniform(-1, 1) + test_uniform(-1, 1) + test_uniform(-1, 1));
            for (int r = 0; r < rows; r++)
                temperature[r] = r % 3 ? test_uniform(0.2f, 2) : 0, unit[r] = r == 1 ? 0 : r == 2 ? 0.99999994f : test_uniform(0, 1);
            d = dev_upload(x, n);
            backend_sample(B->cpu, want, x, rows, cols, temperature, unit);
            backend_sample(B->gpu, got, d, rows, cols, temperature, unit);
            int fit = got[rows] == -7, other = 0;
            for (int r = 0; r < rows; r++) {
                other += got[r] != want[r];
                if (temperature[r] <= 0 ? got[r] != want[r] : !draw_fits(x + r * cols, cols, temperature[r], unit[r], got[r])) {
                    if (fit) printf("  row %d (T %g, u %.8f): id %d, the CPU's %d\n", r, temperature[r], unit[r], got[r], want[r]);
                    fit = 0;
                }
            }
            ok = fit;
            printf("%s sample drawn rows=%d cols=%lld: %d of the ids other than the CPU's, %s\n", ok ? "ok  " : "FAIL", rows,
                   (long long)cols, other, fit ? "all draws of their units" : "some not draws of their units");
            check(ok);
            CUDA_CHECK(cudaFree(d));
            free(x), free(want), free(got), free(temperature), free(unit);
        }
}

// Buffers from backend_alloc are zeroed device memory; release gives them back.
static void test_alloc(const backends *B) {
    const int64_t n = 1003;
    float *d = backend_alloc(B->gpu, (size_t)n * 4), *h = host_random(n, 1, 2);
    backend_to_host(B->gpu, h, d, n);
    int zero = 1;
    for (int64_t i = 0; i < n; i++) zero &= h[i] == 0.0f;
    printf("%s alloc: %lld floats zeroed\n", zero ? "ok  " : "FAIL", (long long)n);
    check(zero && test_guard_ok(h, n, "to_host"));
    backend_release(B->gpu, d);
    free(h);
}

// Device memory the attention calls[0..n) take from the GPU: the backend's buffers they grow.
static size_t attention_took(const backends *B, const flash_args *calls, int n) {
    size_t free0, free1, total;
    backend_sync(B->gpu);
    CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    backend_attention_batch(B->gpu, calls, n);
    backend_sync(B->gpu);
    CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    return free0 > free1 ? free0 - free1 : 0;
}

// The memory check's count of the attention's own buffers (backend_attention_transient_bytes)
// against what calls take from the device, within 2 MB pages. A decode step of 24 sequences, one
// row each, over 20000 keys of an f32 cache (in both modes): the split-KV workspace grows to
// what it asks, which for one-row calls over that many keys is decode_cuda_workspace_bound_floats
// itself, and the count must hold three times that (dev_grow). A step over 300 keys (3 splits)
// runs first: CUDA loads a kernel at its first launch, which may take device memory inside the
// window measured (the flash kernel's first call below is there for the same reason); its
// workspace (1.2 MB) is then freed as the measured step's grows. Then, in bf16 mode, one flash-path
// call of 2048 rows over those keys: its bf16 Q (and O, were it cuDNN's) and K/V copies, 361 MB.
// Without cuDNN (cudnn 0) both flash calls are too small for a plan (flash_cudnn_worth), so our
// flash kernel runs, a first one of 1024 rows over 64 keys loading it: the count less its margin
// for cuDNN (what 0 rows count) must hold what they take. With cuDNN (cudnn 1: a backend under
// BURST_FLASH=cudnn, and the thread's first cuDNN call) the one call also makes cuDNN's handle,
// loads its kernels and builds a plan: the whole count must hold it, and it must take more than
// the four copies (our kernel, had cuDNN declined, makes no O copy).
static void test_attention_transient(const backends *B, int cudnn) {
    enum { HEADS = 32, D = 128, NQ = 2048, NK = 20000, WARM_NQ = 1024, WARM_NK = 64, SEQS = 24, WARM_DECODE_NK = 300 };
    const int64_t w = (int64_t)HEADS * D;
    float *q = backend_alloc(B->gpu, sizeof(float) * NQ * w), *o = backend_alloc(B->gpu, sizeof(float) * NQ * w);
    float *k = backend_alloc(B->gpu, sizeof(float) * NK * w), *v = backend_alloc(B->gpu, sizeof(float) * NK * w);
    float *lse = backend_alloc(B->gpu, sizeof(float) * NQ * HEADS);
    const size_t margin = backend_attention_transient_bytes(B->gpu, 0, 0, 0, HEADS, HEADS, D, DTYPE_F32);
    flash_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .q_stride = w, .kv_stride = w, .o_stride = w,
                    .nq = 1, .nk = NK, .n_heads = HEADS, .n_kv_heads = HEADS, .head_dim = D,
                    .q_pos0 = NK - 1, .causal = 1, .scale = 0.088f, .kv_dtype = DTYPE_F32};
    if (!cudnn) {
        flash_args step[SEQS];
        for (int i = 0; i < SEQS; i++) step[i] = a, step[i].q += i * w, step[i].o += i * w, step[i].lse += i * HEADS;
        for (int i = 0; i < SEQS; i++) step[i].nk = WARM_DECODE_NK, step[i].q_pos0 = WARM_DECODE_NK - 1;
        attention_took(B, step, SEQS);
        for (int i = 0; i < SEQS; i++) step[i].nk = NK, step[i].q_pos0 = NK - 1;
        const size_t asked = sizeof(float) * decode_cuda_workspace_bound_floats(SEQS, SEQS, HEADS, HEADS, D),
                     took = attention_took(B, step, SEQS),
                     counted = backend_attention_transient_bytes(B->gpu, SEQS, SEQS, 0, HEADS, HEADS, D, DTYPE_F32) - margin;
        const int ok = took > 0 && took <= asked + ((size_t)2 << 20) && counted >= 3 * asked;
        printf("%s attention transient: a decode step of %d sequences took %.1f MB of device memory (the bound: %.1f MB), "
               "the memory check counts %.1f MB besides its %.0f MB margin\n", ok ? "ok  " : "FAIL", SEQS, took / 1e6,
               asked / 1e6, counted / 1e6, margin / 1e6);
        check(ok);
    }
    if (!B->fp32) { // (fp32 mode: the split-KV kernel alone, no copies)
        a.nq = WARM_NQ, a.nk = WARM_NK, a.q_pos0 = NK - NQ;
        if (!cudnn) attention_took(B, &a, 1);
        a.nq = NQ, a.nk = NK;
        const size_t took = attention_took(B, &a, 1),
                     counted = backend_attention_transient_bytes(B->gpu, NQ, 1, NK, HEADS, HEADS, D, DTYPE_F32) -
                               (cudnn ? 0 : margin);
        const size_t copies = (size_t)(2 * NQ + 2 * NK) * w * 2;
        const int ok = took <= counted + ((size_t)8 << 20) && (!cudnn || took > copies);
        printf("%s attention transient: a %s call took %.1f MB of device memory (the copies: %.1f MB), the memory "
               "check counts %.1f MB%s\n", ok ? "ok  " : "FAIL", cudnn ? "first cuDNN" : "flash kernel", took / 1e6,
               copies / 1e6, counted / 1e6, cudnn ? " with its margin" : " besides its margin");
        check(ok);
    }
    float *bufs[] = {q, o, k, v, lse};
    for (int i = 0; i < 5; i++) backend_release(B->gpu, bufs[i]);
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("skip: no CUDA device\n");
        return TEST_SKIP;
    }
    test_seed("test_backend_cuda");
    unsetenv("BURST_FLASH"); // (the tests choose the attention path where they need one)
    for (int fp32 = 1; fp32 >= 0; fp32--) {
        backends B = {.cpu = backend_cpu_new(0, 0, 0), .fp32 = fp32};
        burst_error err;
        if (backend_new(fp32 ? "cuda-fp32" : "cuda", 0, 0, 0, &B.gpu, &err)) {
            printf("FAIL backend_new: %s\n", err.msg);
            return 1;
        }
        printf("== backend %s\n", backend_name(B.gpu));
        test_alloc(&B);
        test_attention_transient(&B, 0);
        if (!fp32 && flash_cudnn_compiled()) { // (before test_attention: this thread's first cuDNN call)
            backends Bc = B;
            setenv("BURST_FLASH", "cudnn", 1);
            if (backend_new("cuda", 0, 0, 0, &Bc.gpu, &err)) {
                printf("FAIL backend_new: %s\n", err.msg);
                return 1;
            }
            unsetenv("BURST_FLASH");
            test_attention_transient(&Bc, 1);
            // The attention cases again, now with cuDNN on every block of 1024 rows or more: the
            // default backend sends only blocks whose plan pays (flash_cudnn_worth) to cuDNN, and
            // no case here is that large, so only this run checks the backend's cuDNN calls.
            printf("== backend %s, BURST_FLASH=cudnn: attention\n", backend_name(Bc.gpu));
            test_attention(&Bc);
            backend_free(Bc.gpu);
        }
        test_embed(&B);
        test_rmsnorm(&B);
        test_matmul(&B);
        test_matmul_group(&B);
        test_rope(&B);
        test_elementwise(&B);
        test_convert(&B);
        test_attention(&B);
        test_merge(&B);
        test_sample(&B);
        test_sample_bucket_ends(&B);
        for (int batched = 0; batched < 2; batched++) {
            backends Bb = B;
            setenv("BURST_BATCHED_DECODE", batched ? "1" : "0", 1);
            if (backend_new(fp32 ? "cuda-fp32" : "cuda", 0, 0, 0, &Bb.gpu, &err)) {
                printf("FAIL backend_new: %s\n", err.msg);
                return 1;
            }
            printf("== backend %s, BURST_BATCHED_DECODE=%d\n", backend_name(Bb.gpu), batched);
            test_batch(&Bb);
            backend_free(Bb.gpu);
        }
        unsetenv("BURST_BATCHED_DECODE");
        backend_free(B.gpu);
        backend_free(B.cpu);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
