// The CPU backend's ops that take an activation dtype (model/backend.h: rmsnorm's output, matmul's
// input and output and its accumulating form, swiglu and matmul_swiglu), in float32 and bf16,
// against float64 on fresh random inputs of awkward sizes: token counts on both sides of the
// matmul's few-token path and across its GEMM's panels and token blocks, weights whose rows and
// columns are not multiples of the GEMM's register tiles, row blocks and column blocks, stored as
// F32, F16 and BF16. The bf16
// forms are the CUDA backend's bf16 mode's specification (tests/test_backend_cuda.c holds it to
// them). Every output carries guard words after its last element. Every F16 weight value, through
// embed and the matmul's paths (a few tokens convert in registers, the GEMM a block at a time, AMX
// in bf16 parts), and x's every float32 bit through each. Where the CPU has AMX, ctest runs this
// twice, the second time with BURST_AMX=0 (the float32 GEMM).
// And rope against float64 angles; argmax, greedy sampling's pick, against a plain scan on rows full
// of ties; and AMX's rounding of float32 to bf16 against the scalar one.
#include "attention/flash_pairs.h"
#include "common/amx.h"
#include "common/avx512.h"
#include "common/host_memory.h"
#include "model/backend.h"
#include "model/matmul_cpu.h"
#include "model/quantize_cpu.h"
#include "model/sampler.h"
#include "tests/test_util.h"

// float32 results: sums in another order than float64's over up to 600 terms.
#define F32_RTOL 1e-5
// bf16 results: one rounding to nearest even, at most half an ulp (2^-8 of the value), on top.
#define BF16_RTOL (1.0 / 256 + 1e-5)

static int failures;

static void check(int ok) { failures += !ok; }

// A buffer of n activations of dtype dt with guard words right after them (bf16: n rounded up to
// a whole number of floats), filled with the rounding of values in [lo, hi); `as_f64` gets the
// values it holds. F16 only as weights.
typedef struct {
    burst_dtype dt;
    int64_t n;
    float *p;
    double *as_f64;
} act_buf;

// The half with bits h, computed apart from the backend's conversions.
static double f16_value(uint16_t h) {
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

// A half near v (|v| < 65504): v's top mantissa bits; 0 below 2^-14.
static uint16_t f16_near(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    int e = (int)(u >> 23 & 0xff) - 112;
    return (uint16_t)((u >> 16 & 0x8000) | (e > 0 ? (uint32_t)e << 10 | (u >> 13 & 0x3ff) : 0));
}

static act_buf act_random(burst_dtype dt, int64_t n, float lo, float hi) {
    act_buf a = {.dt = dt, .n = n, .p = test_alloc_guarded(test_act_words(dt, n)),
                 .as_f64 = burst_malloc((size_t)(n + 1) * sizeof(double))};
    for (int64_t i = 0; i < n; i++) {
        float v = test_uniform(lo, hi);
        if (dt == DTYPE_F32) a.as_f64[i] = a.p[i] = v;
        else if (dt == DTYPE_F16) a.as_f64[i] = f16_value(((uint16_t *)a.p)[i] = f16_near(v));
        else a.as_f64[i] = bf16_to_f32(((uint16_t *)a.p)[i] = f32_to_bf16(v));
    }
    return a;
}

static void act_free(act_buf *a) { free(a->p), free(a->as_f64); }

// Checks a's n values against ref, and its guard words: nmse within nmse_scale times rtol^2.
static void act_check_scaled(const char *what, const act_buf *a, const double *ref, double atol, double nmse_scale) {
    float *got = burst_malloc((size_t)(a->n + 1) * sizeof(float));
    for (int64_t i = 0; i < a->n; i++) got[i] = test_act_value(a->dt, a->p, i);
    double rtol = a->dt == DTYPE_F32 ? F32_RTOL : BF16_RTOL;
    check(test_compare(what, got, ref, a->n, rtol * rtol * nmse_scale, atol, rtol) &&
          test_guard_ok(a->p, test_act_words(a->dt, a->n), what));
    free(got);
}

static void act_check(const char *what, const act_buf *a, const double *ref, double atol) {
    act_check_scaled(what, a, ref, atol, 1);
}

// A weight (rows, cols) stored as dt, with its values in float64.
typedef struct {
    burst_weight w;
    double *as_f64;
} test_weight;

static test_weight weight_random(burst_dtype dt, int64_t rows, int64_t cols, float lo, float hi) {
    act_buf a = act_random(dt, rows * cols, lo, hi);
    return (test_weight){.w = {.dtype = dt, .data = a.p, .rows = rows, .cols = cols}, .as_f64 = a.as_f64};
}

static const burst_dtype DTS[] = {DTYPE_F32, DTYPE_BF16}, WEIGHT_DTS[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

static void test_rmsnorm(burst_backend *be) {
    static const int ns[] = {1, 7, 70}, dims[] = {1, 13, 300};
    for (int wi = 0; wi < 3; wi++)
        for (int oi = 0; oi < 2; oi++)
            for (int k = 0; k < 3; k++) {
                const int n = ns[k], dim = dims[k];
                test_weight w = weight_random(WEIGHT_DTS[wi], 1, dim, 0.5f, 1.5f);
                act_buf x = act_random(DTYPE_F32, (int64_t)n * dim, -2, 2), out = act_random(DTS[oi], (int64_t)n * dim, -1, 1);
                double *ref = burst_malloc((size_t)n * dim * sizeof(double));
                for (int i = 0; i < n; i++) {
                    const double *xi = x.as_f64 + (int64_t)i * dim;
                    double ss = 0;
                    for (int j = 0; j < dim; j++) ss += xi[j] * xi[j];
                    for (int j = 0; j < dim; j++) ref[(int64_t)i * dim + j] = xi[j] / sqrt(ss / dim + 1e-5) * w.as_f64[j];
                }
                backend_rmsnorm(be, out.p, out.dt, x.p, &w.w, n, 1e-5f);
                char what[96];
                snprintf(what, sizeof what, "rmsnorm weight %s to %s n=%d dim=%d", dtype_name(WEIGHT_DTS[wi]), dtype_name(DTS[oi]), n, dim);
                act_check(what, &out, ref, 1e-6);
                free(ref), free((void *)w.w.data), free(w.as_f64), act_free(&x), act_free(&out);
            }
}

// w as the CPU backend wbe holds it (backend_weight: on AMX, BF16 weights and cpu-bf16's F16 ones in
// AMX tiles; cpu-bf16 rounds F16 to bf16), as_f64 rounded with it.
static burst_weight weight_held(burst_backend *wbe, test_weight *w) {
    const int64_t rows = w->w.rows, cols = w->w.cols;
    const weights_tensor t = {.name = "random", .dtype = w->w.dtype, .ndim = 2, .shape = {rows, cols}, .numel = rows * cols,
                              .nbytes = (size_t)(rows * cols) * dtype_size(w->w.dtype), .data = w->w.data};
    burst_weight held;
    burst_error err;
    check(backend_weight(wbe, &t, &held, &err) == BURST_OK);
    const int round_f16 = t.dtype == DTYPE_F16 && backend_act_dtype(wbe) == DTYPE_BF16;
    const int tiles = amx_usable() && (t.dtype == DTYPE_BF16 || round_f16);
    check(held.amx_tiles == tiles && (held.data != t.data) == (tiles || round_f16));
    for (int64_t i = 0; held.dtype != t.dtype && i < rows * cols; i++) w->as_f64[i] = bf16_to_f32(f32_to_bf16((float)w->as_f64[i]));
    return held;
}

// out = x W^T in every dtype pairing, and out += x W^T; with held, the BF16 and F16 weights as
// cpu-bf16 holds them (weight_held), where every token count reads AMX tiles.
static void test_matmul(burst_backend *be, int held) {
    // 131 rows x 600 columns: register tiles of 6 rows (4 vectors of tokens, AVX-512; 2 on AVX2), 8
    // (3 vectors) or 12 (2 or 1), blocks of 512 or 256 columns with a rest; 400 rows: each of the 3
    // threads' shares of 132 or 136 rows, a block of 96 (or two of 48) and a rest; 300 tokens:
    // panels of 64 or 16, blocks of 256 or 128, a last panel of 44 (3 vectors); a last panel of 1
    // vector at 70 tokens, of 2 at 90, of one token more than a vector at 49 (3 x 16 + 1: 4
    // vectors), at 41 and 105 (2 x 16 + 9, or 5 x 8 + 1; after a whole panel at 105). Below 44
    // tokens with float32 x on AVX-512 (32 on AVX2, 25 on column pairs: bf16 x by BF16 weights with
    // AVX512-BF16), tiles of 5 (AVX2: 2; pairs: 4) rows, each by 4 (6; 8) tokens at a time: 41 = 10
    // x 4 + 1, 19 = 4 x 4 + 3 (3 x 6 + 1; 2 x 8 + 3), 13 = 3 x 4 + 1 (8 + 5), 24 = 3 x 8 on pairs
    // (25: their GEMM); of one row for one or two tokens. With AMX, 150 x 96 BF16: a block of 128
    // rows read in place (19 to 49 tokens), then 22 rows copied; 600 tokens: AMX's sums for 512
    // tokens, then for 88, the weights copied for the first 512 and kept for the rest (131 x 600:
    // three slices of 256 columns kept side by side).
    // In tiles, rows and columns padded to 32 (1 x 1 to 32 x 32); 70 tokens: three blocks of 32
    // tokens, 41: two (a few tokens: all the columns at once), 300 tokens by 600 columns: three
    // slices of 256; 520: a second block of 512 tokens whose 8 take one tile of 16 tokens.
    static const int ns[] = {1, 2, 6, 7, 12, 13, 19, 24, 25, 41, 49, 70, 90, 105, 300, 520, 600}, shapes[][2] = {{1, 1}, {17, 13}, {33, 300}, {131, 600}, {150, 96}, {400, 40}};
    for (int wi = held; wi < 3; wi++)
        for (int xi = 0; xi < 2; xi++)
            for (int oi = 0; oi < 3; oi++) // F32, BF16, F32 accumulated
                for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++)
                    for (int k = 0; k < (int)(sizeof ns / sizeof ns[0]); k++) {
                        const int n = ns[k], rows = shapes[si][0], cols = shapes[si][1], acc = oi == 2;
                        test_weight w = weight_random(WEIGHT_DTS[wi], rows, cols, -1, 1);
                        burst_backend *wbe = held ? backend_cpu_new(3, 1, 0) : NULL;
                        const burst_weight W = held ? weight_held(wbe, &w) : w.w;
                        act_buf x = act_random(DTS[xi], (int64_t)n * cols, -1, 1);
                        act_buf out = act_random(oi == 1 ? DTYPE_BF16 : DTYPE_F32, (int64_t)n * rows, -1, 1);
                        double *ref = burst_malloc((size_t)n * rows * sizeof(double)), terms = 0, ref2 = 0, mag2 = 0;
                        for (int i = 0; i < n; i++)
                            for (int r = 0; r < rows; r++) {
                                const double o = acc ? out.as_f64[(int64_t)i * rows + r] : 0;
                                double s = o, abs_sum = 0;
                                for (int j = 0; j < cols; j++) {
                                    double t = x.as_f64[(int64_t)i * cols + j] * w.as_f64[(int64_t)r * cols + j];
                                    s += t, abs_sum += fabs(t);
                                }
                                ref[(int64_t)i * rows + r] = s;
                                if (abs_sum > terms) terms = abs_sum;
                                ref2 += s * s, mag2 += (fabs(o) + fabs(s - o)) * (fabs(o) + fabs(s - o));
                            }
                        if (acc) backend_matmul_add(be, out.p, x.p, x.dt, &W, n);
                        else backend_matmul(be, out.p, out.dt, x.p, x.dt, &W, n);
                        char what[128];
                        snprintf(what, sizeof what, "matmul weight %s%s x %s %s %s n=%d W=(%d,%d)", dtype_name(WEIGHT_DTS[wi]),
                                 W.amx_tiles ? " in tiles" : W.dtype != w.w.dtype ? " as bf16" : "", dtype_name(x.dt),
                                 acc ? "+=" : "to", dtype_name(out.dt), n, rows, cols);
                        // float32 sums: relative to sum |x w|. out += x W^T adds the old out o to the product
                        // p, which may cancel it: p's rounding (half an ulp of p, where x is float32 and the
                        // product is inexact) is then relative to |o| + |p|, not to |o + p|, so the nmse is
                        // held relative to that (the same bound where nothing cancels). With W 1 x 1 and one
                        // token the nmse is one element's squared relative error: seed 7 (x F32, weight F16)
                        // had o + p = -6.0e-4 off by 6.3e-9, nmse 1.1e-10 over rtol^2 = 1e-10; over 60 seeds
                        // x 2 AMX modes the 5 such cases with float32 x came above 1e-3 of the bound 15
                        // times in 600, so (P(ratio > t) ~ 1/sqrt(t)) ~1e-3 a case, ~4e-3 a run, failed.
                        act_check_scaled(what, &out, ref, F32_RTOL * (terms + 1), acc && ref2 > 0 ? fmax(1, mag2 / ref2) : 1);
                        free(ref), free((void *)w.w.data), free(w.as_f64), act_free(&x), act_free(&out);
                        if (wbe) backend_free(wbe);
                    }
}

// cpu-bf16 multiplies float32 x by BF16 weights as bf16 (model/backend_cpu.c's rounds_x), and by
// F32 ones as it is: the same bits as "cpu" (be) given x rounded, or x as it is, on the few-token
// path and the GEMM; held: the BF16 weight as cpu-bf16 holds it (its copies freed with it).
static void test_bf16_rounds_x(burst_backend *be, int held) {
    burst_backend *bf = backend_cpu_new(3, 1, 0);
    static const int ns[] = {1, 7, 40};
    for (int wi = 0; wi < 2; wi++)
        for (int k = 0; k < 3; k++) {
            const burst_dtype wdt = wi ? DTYPE_F32 : DTYPE_BF16;
            const int n = ns[k], rows = 33, cols = 300;
            test_weight w = weight_random(wdt, rows, cols, -1, 1);
            const burst_weight W = held && !wi ? weight_held(bf, &w) : w.w;
            act_buf x = act_random(DTYPE_F32, (int64_t)n * cols, -1, 1);
            uint16_t *xr = burst_malloc(sizeof *xr * (size_t)(n * cols));
            for (int64_t i = 0; i < n * cols; i++) xr[i] = f32_to_bf16(x.p[i]);
            float *got = burst_malloc(sizeof *got * (size_t)(n * rows)), *want = burst_malloc(sizeof *want * (size_t)(n * rows));
            backend_matmul(bf, got, DTYPE_F32, x.p, DTYPE_F32, &W, n);
            if (wi) backend_matmul(be, want, DTYPE_F32, x.p, DTYPE_F32, &W, n);
            else backend_matmul(be, want, DTYPE_F32, xr, DTYPE_BF16, &W, n);
            const int same = memcmp(got, want, sizeof *got * (size_t)(n * rows)) == 0;
            printf("%s cpu-bf16 matmul of float32 x by %s weights%s: the bits of cpu's with x %s, n=%d\n", same ? "ok  " : "FAIL",
                   dtype_name(wdt), W.amx_tiles ? " in tiles" : "", wi ? "as it is" : "rounded to bf16", n);
            check(same);
            free(xr), free(got), free(want), free((void *)w.w.data), free(w.as_f64), act_free(&x);
        }
    backend_free(bf);
}

// Every half as an F16 weight: embed gives each exactly (NaN as NaN, signed zeros); matmuls with
// one-hot rows of x give each finite one, through the path of 2 tokens (converted in registers),
// of 32 (the GEMM's widened blocks) and of 128 (AMX's two bf16 parts, where the CPU has AMX).
static void test_f16_weights(burst_backend *be) {
    enum { ROWS = 2048, COLS = 32 }; // 65536 halves; the first 63488 are the finite ones of either sign
    uint16_t *h = burst_malloc(sizeof(uint16_t) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) h[i] = (uint16_t)(i < 31744 ? i : i < 63488 ? 0x8000 + i - 31744 : i - 31744);
    burst_weight W = {.dtype = DTYPE_F16, .data = h, .rows = ROWS, .cols = COLS};
    enum { MAX_N = 4 * COLS };
    float *got = burst_malloc(sizeof(float) * ROWS * COLS), *x = burst_malloc(sizeof(float) * MAX_N * COLS);
    int *tokens = burst_malloc(sizeof(int) * ROWS), bad = 0;
    for (int i = 0; i < ROWS; i++) tokens[i] = i;
    backend_embed(be, got, &W, tokens, ROWS);
    for (int i = 0; i < ROWS * COLS; i++) {
        double want = f16_value(h[i]);
        if (isnan(want) ? !isnan(got[i]) : got[i] != want || !signbit(got[i]) != !signbit(want))
            if (bad++ < 3) printf("  embed half 0x%04x: got %.9g want %.9g\n", h[i], got[i], want);
    }
    float *out = burst_malloc(sizeof(float) * ROWS * MAX_N);
    static const int ns[] = {2, COLS, MAX_N}; // 2 one-hot rows a call, then 32 in one, then 128
    for (int k = 0; k < 3; k++)
        for (int n = ns[k], j0 = 0; j0 < COLS; j0 += n) {
            memset(x, 0, sizeof(float) * MAX_N * COLS);
            for (int i = 0; i < n; i++) x[i * COLS + (j0 + i) % COLS] = 1;
            backend_matmul(be, out, DTYPE_F32, x, DTYPE_F32, &W, n);
            for (int i = 0; i < n; i++)
                for (int r = 0; r < 63488 / COLS; r++) { // out[i][r] = W[r][(j0 + i) % COLS]
                    double want = f16_value(h[r * COLS + (j0 + i) % COLS]);
                    if (out[i * ROWS + r] != want && bad++ < 3)
                        printf("  matmul n=%d half 0x%04x: got %.9g want %.9g\n", n, h[r * COLS + (j0 + i) % COLS], out[i * ROWS + r], want);
                }
        }
    printf("%s every F16 weight through embed and matmul\n", bad ? "FAIL" : "ok  ");
    check(!bad);
    free(h), free(got), free(x), free(tokens), free(out);
}

// x's every float32 bit reaches the sums: weights with one power of two a row (0.5 to 8, either
// sign) times random float32 x give x times that power exactly, on every path and for every weight
// dtype (AMX splits x into three bf16 parts; a lost part loses x's low bits); with held, as `cpu`
// holds the weights (BF16 in AMX tiles on AMX: still exact).
static void test_matmul_exact(burst_backend *be, int held) {
    enum { MAX_ROWS = 150 };
    static const int ns[] = {3, 40, 300}, shapes[][2] = {{70, 333}, {MAX_ROWS, 96}}; // 150 x 96: as in test_matmul
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < 2; si++)
            for (int k = 0; k < 3; k++) {
                const int n = ns[k], rows = shapes[si][0], cols = shapes[si][1];
                test_weight w = weight_random(WEIGHT_DTS[wi], rows, cols, 0, 0);
                int col[MAX_ROWS];
                for (int r = 0; r < rows; r++) {
                    col[r] = (int)test_uniform(0, cols) % cols;
                    float v = ldexpf(test_uniform(0, 1) < 0.5f ? -1 : 1, (int)test_uniform(-1, 4));
                    w.as_f64[r * cols + col[r]] = v;
                    if (WEIGHT_DTS[wi] == DTYPE_F32) ((float *)w.w.data)[r * cols + col[r]] = v;
                    else ((uint16_t *)w.w.data)[r * cols + col[r]] = WEIGHT_DTS[wi] == DTYPE_F16 ? f16_near(v) : f32_to_bf16(v);
                }
                burst_backend *wbe = held ? backend_cpu_new(3, 0, 0) : NULL;
                const burst_weight W = held ? weight_held(wbe, &w) : w.w;
                act_buf x = act_random(DTYPE_F32, (int64_t)n * cols, -4, 4), out = act_random(DTYPE_F32, (int64_t)n * rows, 0, 0);
                backend_matmul(be, out.p, DTYPE_F32, x.p, DTYPE_F32, &W, n);
                int bad = 0;
                for (int i = 0; i < n; i++)
                    for (int r = 0; r < rows; r++) {
                        double want = x.as_f64[(int64_t)i * cols + col[r]] * w.as_f64[r * cols + col[r]];
                        if (out.p[(int64_t)i * rows + r] != want && bad++ < 3)
                            printf("  token %d row %d: got %.9g want %.9g\n", i, r, out.p[(int64_t)i * rows + r], want);
                    }
                printf("%s matmul of x by powers of two exact: weight %s%s n=%d W=(%d,%d)\n", bad ? "FAIL" : "ok  ",
                       dtype_name(WEIGHT_DTS[wi]), W.amx_tiles ? " in tiles" : "", n, rows, cols);
                check(!bad);
                free((void *)w.w.data), free(w.as_f64), act_free(&x), act_free(&out);
                if (wbe) backend_free(wbe);
            }
}

// The integer Q4 weight W holds at row r, column j (model/quantize_cpu.h's layout: column c of group
// g is byte c % 4 of the group's dword c % 16 / 4, its low 4 bits for c < 16; span j / 512 of 256
// bytes holds dword d of its group g % 16 at 64d + 4 (g % 16)).
static int q4_int(const burst_weight *W, int r, int j) {
    const int g = j / 32, c = j % 32;
    const uint8_t byte = ((const uint8_t *)W->data)[r * q4_row_bytes(W->cols) + j / 512 * 256 + 64 * (c % 16 / 4) + 4 * (g % 16) + c % 4];
    return (c < 16 ? byte & 15 : byte >> 4) - 8;
}

// The integer Q8 or Q4 weight W holds at row r, column j.
static int weight_int(const burst_weight *W, int r, int j) {
    return W->dtype == DTYPE_Q4 ? q4_int(W, r, j) : ((const int8_t *)W->data)[(int64_t)r * W->cols + j];
}

// The integer products matmul_ints sums: x's row quantized as a Q8 weight's group (the largest
// magnitude over 127 its scale, each rounded to the nearest), times W's integers, a group at a
// time, times both scales, in float64.
static double int_dot(const burst_weight *W, int r, const double *x) {
    const int64_t cols = W->cols, groups = q_groups(cols);
    double sum = 0;
    for (int64_t g = 0; g < groups; g++) {
        const int64_t j0 = g * Q_GROUP, j1 = j0 + Q_GROUP < cols ? j0 + Q_GROUP : cols;
        float amax = 0;
        for (int64_t j = j0; j < j1; j++) amax = fmaxf(amax, fabsf((float)x[j]));
        const float inv = amax > 0 ? 127 / amax : 0;
        int64_t dot = 0;
        for (int64_t j = j0; j < j1; j++) dot += (int64_t)weight_int(W, r, (int)j) * (int64_t)rintf((float)x[j] * inv);
        sum += (double)dot * (double)(W->scales[r * groups + g] * (amax / 127));
    }
    return sum;
}

// Q8 and Q4 weights (backend_weight with quant) from F32, F16 and BF16 ones. Q8: every value within
// half its group's scale, the scale the group's largest magnitude over 127 (a group of zeros: 0).
// Q4: the scale the group's largest magnitude, signed, over -8, every integer the nearest multiple
// of it (clamped to -8..7), and the columns past a row's end 8. Both: embed and
// weight_to_f32 (a span across rows) give integer x scale in float32; matmuls of float32 and bf16 x
// on every path (Q8: a row of one or two tokens a group at a time, the few-token tiles, the GEMM:
// float32 weights, or bf16 on column pairs; Q4: x quantized too, where matmul_cpu_quantizes_x
// says so (every count with AVX2 or AVX-512, in blocks of 16 tokens from 17 on, a span or a few at a
// time; but from 256 tokens of bf16 x on column pairs, and from 4 without either, the GEMM; with
// AVX2 alone, Q8 as Q4 at every count) against float64 of those values (rounded to bf16 where
// matmul_cpu_rounds_weights says so), or of the integer products (int_dot).
// Columns past a whole group (31, 100), one group (64), past a span of 16 groups (600, 1111; 800: 9
// groups past it, one past half a span, which AVX2's integers take a half at a time).
static void test_quantized(burst_backend *be, burst_dtype quant) {
    static const int ns[] = {1, 2, 3, 7, 25, 43, 44, 49, 79, 80, 300};
    static const int shapes[][2] = {{1, 1}, {17, 31}, {33, 64}, {9, 100}, {131, 600}, {3, 800}, {5, 1111}};
    burst_backend *qbe = backend_cpu_new(3, 0, quant);
    int rounded_somewhere = 0, ints_somewhere = 0;
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
            const int rows = shapes[si][0], cols = shapes[si][1], groups = (cols + Q_GROUP - 1) / Q_GROUP;
            test_weight w = weight_random(WEIGHT_DTS[wi], rows, cols, -1, 1);
            for (int j = 0; j < cols && j < Q_GROUP; j++) { // row 0's first group all zeros
                w.as_f64[j] = 0;
                if (WEIGHT_DTS[wi] == DTYPE_F32) ((float *)w.w.data)[j] = 0;
                else ((uint16_t *)w.w.data)[j] = 0;
            }
            const weights_tensor t = {.name = "random", .dtype = w.w.dtype, .ndim = 2, .shape = {rows, cols},
                                      .numel = (int64_t)rows * cols, .nbytes = (size_t)rows * cols * dtype_size(w.w.dtype),
                                      .data = w.w.data};
            burst_weight W;
            burst_error err;
            check(backend_weight(qbe, &t, &W, &err) == BURST_OK);
            int bad = W.dtype != quant || W.data == t.data || !W.scales || W.rows != rows || W.cols != cols;
            double *q = burst_calloc((size_t)rows * cols, sizeof(double)); // the values W holds
            for (int r = 0; !bad && quant == DTYPE_Q4 && r < rows; r++) {
                for (int j = cols; j < (cols + 511) / 512 * 512; j++) // the last span's padding
                    if (q4_int(&W, r, j) != 0 && bad++ < 3) printf("  row %d column %d past the end: %d\n", r, j, q4_int(&W, r, j));
                for (int g = 0; g < groups; g++) {
                    const int j0 = g * Q_GROUP, j1 = j0 + Q_GROUP < cols ? j0 + Q_GROUP : cols;
                    float mx = 0, mn = 0;
                    for (int j = j0; j < j1; j++) mx = fmaxf(mx, (float)w.as_f64[r * cols + j]), mn = fminf(mn, (float)w.as_f64[r * cols + j]);
                    const float d0 = (-mn > mx ? mn : mx) / -8, id = d0 != 0 ? 1 / d0 : 0, scale = W.scales[r * groups + g];
                    if (memcmp(&scale, &d0, sizeof d0) && bad++ < 3) printf("  row %d group %d: scale %.9g, want %.9g\n", r, g, scale, d0);
                    for (int j = j0; j < j1; j++) {
                        const int v = q4_int(&W, r, j), want = (int)fminf(fmaxf(rintf((float)w.as_f64[r * cols + j] * id), -8), 7);
                        if (v != want && bad++ < 3) printf("  row %d column %d: %d, want %d\n", r, j, v, want);
                        q[r * cols + j] = (float)v * scale;
                    }
                }
            }
            for (int r = 0; quant == DTYPE_Q8 && W.dtype == DTYPE_Q8 && r < rows; r++)
                for (int g = 0; g < groups; g++) {
                    float amax = 0;
                    for (int j = g * Q_GROUP; j < cols && j < (g + 1) * Q_GROUP; j++) amax = fmaxf(amax, (float)fabs(w.as_f64[r * cols + j]));
                    const float scale = W.scales[r * groups + g];
                    if (scale != amax / 127 && bad++ < 3) printf("  row %d group %d: scale %.9g, want %.9g\n", r, g, scale, amax / 127);
                    for (int j = g * Q_GROUP; j < cols && j < (g + 1) * Q_GROUP; j++) {
                        const int8_t v = ((const int8_t *)W.data)[r * cols + j];
                        q[r * cols + j] = (double)v * scale;
                        // half a scale, and float32's rounding of 127 / amax, of w times it (up to 127.5: ulps of
                        // 7.6e-6) and of the scale near a tie: a seed saw 1.2e-5 (1795843287), 3e-5 bounds them
                        if ((v < -127 || fabs(q[r * cols + j] - w.as_f64[r * cols + j]) > scale * (0.5 + 3e-5)) && bad++ < 3)
                            printf("  row %d column %d: %d x %.9g for %.9g\n", r, j, v, scale, w.as_f64[r * cols + j]);
                    }
                }
            float *got = burst_malloc(sizeof(float) * (size_t)rows * cols), span[1200];
            int *tokens = burst_malloc(sizeof(int) * (size_t)rows);
            for (int r = 0; r < rows; r++) tokens[r] = r;
            backend_embed(be, got, &W, tokens, rows);
            for (int64_t i = 0; !bad && i < (int64_t)rows * cols; i++)
                if (got[i] != (float)q[i] && bad++ < 3) printf("  embed element %lld: %.9g, want %.9g\n", (long long)i, got[i], q[i]);
            const int64_t first = cols / 2 + 3 < (int64_t)rows * cols ? cols / 2 + 3 : 0;
            const int64_t span_n = (int64_t)rows * cols - first < 1200 ? (int64_t)rows * cols - first : 1200;
            weight_to_f32(&W, first, span_n, span);
            for (int64_t i = 0; i < span_n; i++)
                if (memcmp(&span[i], &got[first + i], sizeof(float)) && bad++ < 3)
                    printf("  weight_to_f32 from %lld, element %lld: %.9g, want %.9g\n", (long long)first, (long long)i, span[i], got[first + i]);
            printf("%s %s from %s W=(%d,%d): values, scales, embed, a span of %lld\n", bad ? "FAIL" : "ok  ",
                   dtype_name(quant), dtype_name(WEIGHT_DTS[wi]), rows, cols, (long long)span_n);
            check(!bad);
            for (int xi = 0; xi < 2; xi++)
                for (int k = 0; k < (int)(sizeof ns / sizeof ns[0]); k++) {
                    const int n = ns[k], ints = matmul_cpu_quantizes_x(DTS[xi], &W, n);
                    const int rounds = !ints && matmul_cpu_rounds_weights(DTS[xi], &W);
                    rounded_somewhere |= rounds, ints_somewhere |= ints;
                    act_buf x = act_random(DTS[xi], (int64_t)n * cols, -1, 1), out = act_random(DTYPE_F32, (int64_t)n * rows, 0, 0);
                    double *ref = burst_malloc(sizeof(double) * (size_t)n * rows), terms = 0;
                    for (int i = 0; i < n; i++)
                        for (int r = 0; r < rows; r++) {
                            double s = 0, abs_sum = 0;
                            for (int j = 0; j < cols; j++) {
                                const double wv = rounds ? bf16_to_f32(f32_to_bf16((float)q[r * cols + j])) : q[r * cols + j];
                                s += x.as_f64[(int64_t)i * cols + j] * wv, abs_sum += fabs(x.as_f64[(int64_t)i * cols + j] * wv);
                            }
                            ref[(int64_t)i * rows + r] = ints ? int_dot(&W, r, x.as_f64 + (int64_t)i * cols) : s;
                            if (abs_sum > terms) terms = abs_sum;
                        }
                    backend_matmul(be, out.p, DTYPE_F32, x.p, x.dt, &W, n);
                    char what[128];
                    snprintf(what, sizeof what, "matmul %s from %s%s%s x %s n=%d W=(%d,%d)", dtype_name(quant), dtype_name(WEIGHT_DTS[wi]),
                             rounds ? " (as bf16)" : "", ints ? " (int8)" : "", dtype_name(x.dt), n, rows, cols);
                    act_check(what, &out, ref, F32_RTOL * (terms + 1));
                    // in integers, each token's row the same bits as the token's alone (its sums in the same order)
                    float *alone = burst_malloc(sizeof(float) * (size_t)rows);
                    int differ = 0;
                    for (int i = 0; ints && i < n; i++) {
                        backend_matmul(be, alone, DTYPE_F32, (const char *)x.p + (size_t)i * cols * dtype_size(x.dt), x.dt, &W, 1);
                        differ += memcmp(alone, (const float *)out.p + (size_t)i * rows, sizeof(float) * (size_t)rows) != 0;
                    }
                    if (ints && n > 1) printf("%s %s: %d of %d rows differ from the token's alone\n", differ ? "FAIL" : "ok  ", what, differ, n);
                    check(!differ);
                    free(alone), free(ref), act_free(&x), act_free(&out);
                }
            backend_matmul(be, got, DTYPE_F32, span, DTYPE_F32, &W, 0); // no tokens (a rank without rows): nothing, no crash
            free(q), free(got), free(tokens), free((void *)w.w.data), free(w.as_f64);
        }
    // where the CPU multiplies bf16 (AVX512-BF16), bf16 x by quantized weights ran on column pairs
    // somewhere; x by Q4 ones (and Q8 ones with AVX2 alone) in integers somewhere
    const int want_ints = quant == DTYPE_Q4 || Q8_INTS;
    printf("%s %s on column pairs: %s; in integers: %s\n",
           rounded_somewhere == matmul_cpu_bf16_products() && ints_somewhere == want_ints ? "ok  " : "FAIL",
           dtype_name(quant), rounded_somewhere ? "ran" : "not in this build", ints_somewhere ? "ran" : "not");
    check(rounded_somewhere == matmul_cpu_bf16_products() && ints_somewhere == want_ints);
    backend_free(qbe);
}

// Gates up to 120 either way too: e^-|g| below float32's range (0 past -87) on both sides.
static void test_swiglu(burst_backend *be) {
    static const int64_t lens[] = {1, 7, 3001, 3001};
    static const float gate_max[] = {8, 8, 8, 120};
    for (int di = 0; di < 2; di++)
        for (int k = 0; k < 4; k++) {
            const int64_t n = lens[k];
            act_buf gate = act_random(DTS[di], n, -gate_max[k], gate_max[k]), up = act_random(DTS[di], n, -2, 2);
            double *ref = burst_malloc((size_t)n * sizeof(double));
            for (int64_t i = 0; i < n; i++) ref[i] = gate.as_f64[i] / (1 + exp(-gate.as_f64[i])) * up.as_f64[i];
            backend_swiglu(be, gate.p, up.p, gate.dt, n);
            char what[64];
            snprintf(what, sizeof what, "swiglu %s n=%lld gate within %g", dtype_name(gate.dt), (long long)n, gate_max[k]);
            act_check(what, &gate, ref, 1e-6);
            check(test_guard_ok(up.p, test_act_words(up.dt, n), "swiglu's up"));
            free(ref), act_free(&gate), act_free(&up);
        }
}

// The MLP's gate and up projections with SwiGLU, against SwiGLU in float64 of the backend's own
// float32 projections (test_matmul holds those to float64): from the sums themselves where the
// AMX matmul fuses the three (both weights in tiles, `held`), from the projections rounded to the
// activation dtype where the three ops run one after the other. Gate rows past 32 and 128 (tiles
// and blocks), tokens past a tile of 16, a block of 32 and one of 512.
static void test_matmul_swiglu(burst_backend *be, int held) {
    static const int ns[] = {1, 7, 41, 520}, shapes[][2] = {{17, 13}, {150, 96}, {131, 600}};
    for (int wi = 1; wi < 3; wi++) // F16, BF16
        for (int di = 0; di < 2; di++)
            for (int si = 0; si < 3; si++)
                for (int k = 0; k < 4; k++) {
                    const int n = ns[k], rows = shapes[si][0], cols = shapes[si][1];
                    test_weight wg = weight_random(WEIGHT_DTS[wi], rows, cols, -0.5f, 0.5f), wu = weight_random(WEIGHT_DTS[wi], rows, cols, -0.5f, 0.5f);
                    burst_backend *wbe = held ? backend_cpu_new(3, 1, 0) : NULL;
                    const burst_weight Wg = held ? weight_held(wbe, &wg) : wg.w, Wu = held ? weight_held(wbe, &wu) : wu.w;
                    const int fused = Wg.amx_tiles && Wu.amx_tiles;
                    act_buf x = act_random(DTS[di], (int64_t)n * cols, -1, 1), out = act_random(DTS[di], (int64_t)n * rows, -1, 1);
                    act_buf up = act_random(DTS[di], (int64_t)n * rows, -1, 1);
                    float *g = burst_malloc(sizeof(float) * (size_t)(n * rows)), *u = burst_malloc(sizeof(float) * (size_t)(n * rows));
                    backend_matmul(be, g, DTYPE_F32, x.p, x.dt, &Wg, n);
                    backend_matmul(be, u, DTYPE_F32, x.p, x.dt, &Wu, n);
                    double *ref = burst_malloc(sizeof(double) * (size_t)(n * rows));
                    for (int64_t i = 0; i < (int64_t)n * rows; i++) {
                        const double gi = fused || x.dt == DTYPE_F32 ? g[i] : bf16_to_f32(f32_to_bf16(g[i]));
                        const double ui = fused || x.dt == DTYPE_F32 ? u[i] : bf16_to_f32(f32_to_bf16(u[i]));
                        ref[i] = gi / (1 + exp(-gi)) * ui;
                    }
                    backend_matmul_swiglu(be, out.p, x.p, x.dt, &Wg, &Wu, up.p, n);
                    char what[128];
                    snprintf(what, sizeof what, "matmul_swiglu weights %s%s %s n=%d W=(%d,%d)", dtype_name(WEIGHT_DTS[wi]),
                             fused ? " in tiles (fused)" : Wg.dtype != wg.w.dtype ? " as bf16" : "", dtype_name(x.dt), n, rows, cols);
                    act_check(what, &out, ref, 1e-6);
                    free(g), free(u), free(ref), free((void *)wg.w.data), free(wg.as_f64), free((void *)wu.w.data), free(wu.as_f64);
                    act_free(&x), act_free(&out), act_free(&up);
                    if (wbe) backend_free(wbe);
                }
}

// backend_alloc's buffers (the KV cache) ask for 2 MB pages, but not on a VM whose host takes freed
// memory back (host_reports_free_pages): there their first writes would wait on it.
static void test_buffer_pages(void) {
    burst_backend *be = backend_cpu_new(2, 0, 0);
    void *p = backend_alloc(be, (size_t)4 << 20);
    const int advised = test_huge_advice(p), want = !host_reports_free_pages("");
    printf("%s backend_alloc: 4 MB %s 2 MB pages%s\n", advised < 0 || advised == want ? "ok  " : "FAIL",
           advised < 0 ? "(not checked: no THP or no smaps) for" : advised ? "asking for" : "not asking for",
           want ? "" : ", on a VM whose host takes freed memory back");
    check(advised < 0 || advised == want);
    backend_release(be, p);
    backend_free(be);
}

// backend_weight on every half: "cpu" hands back the mapping itself, "cpu-bf16" a copy rounded to
// bf16 (to nearest even, from the half's exact value; NaN stays NaN), as the CUDA backend uploads it,
// laid out as AMX tiles where the CPU has AMX, in memory that asks for 2 MB pages (a copy of 2.1
// MB); embed reads every value back (in tiles: 16000 x 67, rows and columns past a whole tile),
// and weight_to_f32 a span across rows.
static void test_weight_bf16_copy(void) {
    enum { ROWS = 16000, COLS = 67 };
    uint16_t *h = burst_malloc(sizeof(uint16_t) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) h[i] = (uint16_t)i;
    const weights_tensor t = {.name = "every half", .dtype = DTYPE_F16, .ndim = 2, .shape = {ROWS, COLS},
                              .numel = ROWS * COLS, .nbytes = sizeof(uint16_t) * ROWS * COLS, .data = h};
    float *got = burst_malloc(sizeof(float) * ROWS * COLS);
    int *tokens = burst_malloc(sizeof(int) * ROWS), bad = 0;
    for (int i = 0; i < ROWS; i++) tokens[i] = i;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        burst_backend *be = backend_cpu_new(2, bf16, 0);
        burst_weight w;
        burst_error err;
        check(backend_weight(be, &t, &w, &err) == BURST_OK);
        bad += w.rows != ROWS || w.cols != COLS || w.dtype != (bf16 ? DTYPE_BF16 : DTYPE_F16) || (w.data == h) == bf16 ||
               w.amx_tiles != (bf16 && amx_usable()) || (bf16 && !test_huge_advice(w.data));
        backend_embed(be, got, &w, tokens, ROWS);
        // the tiles' padding (columns 67-95, rows 1000-1023; matmul_amx.h's layout) holds zeros, which
        // x's padding (zeros too) may multiply: a NaN or infinity there would reach the sums
        enum { K_TILES = (COLS + 31) / 32, ROWS_PAD = (ROWS + 31) / 32 * 32 };
        for (int r = 0; w.amx_tiles && r < ROWS_PAD; r++)
            for (int c = r < ROWS ? COLS : 0; c < K_TILES * 32; c++)
                bad += ((const uint16_t *)w.data)[(r / 16 * K_TILES + c / 32) * 512 + c % 32 / 2 * 32 + r % 16 * 2 + c % 2] != 0;
        float span[300]; // elements across rows, from within one, as weight_to_f32 may be asked for them
        weight_to_f32(&w, 12345, 300, span);
        bad += memcmp(span, got + 12345, sizeof span) != 0;
        for (int i = 0; i < ROWS * COLS; i++) {
            const double want = f16_value(h[i]), rounded = bf16 ? bf16_to_f32(f32_to_bf16((float)want)) : want;
            const int same = isnan(want) ? isnan(got[i]) : got[i] == (float)rounded && !signbit(got[i]) == !signbit(want);
            if (!same && bad++ < 3) printf("  half 0x%04x: got %.9g want %.9g%s\n", h[i], got[i], rounded, bf16 ? " rounded" : "");
        }
        backend_free(be);
    }
    printf("%s F16 weights: the mapping on cpu, rounded to bf16%s on cpu-bf16\n", bad ? "FAIL" : "ok  ",
           amx_usable() ? " in AMX tiles" : "");
    check(!bad);
    free(h), free(got), free(tokens);
}

// x (n rows of h heads of d) turned at positions pos by float64 angles: the reference.
static double *rope_ref(const act_buf *x, const int64_t *pos, int n, int h, int d, const rope_params *p) {
    const int half = d / 2;
    double *ref = burst_malloc((size_t)n * h * d * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            const double a = (double)pos[i] * rope_inv_freq(p, j, d), c = cos(a) * p->mscale, sn = sin(a) * p->mscale;
            for (int hh = 0; hh < h; hh++) {
                const int64_t o = ((int64_t)i * h + hh) * d + j;
                ref[o] = x->as_f64[o] * c - x->as_f64[o + half] * sn;
                ref[o + half] = x->as_f64[o + half] * c + x->as_f64[o] * sn;
            }
        }
    return ref;
}

// Rotary embedding of n rows of q (h heads) and k (hk heads) at positions pos, in place, against
// float64 angles of the same frequencies.
static void check_rope(burst_backend *be, const int64_t *pos, int n, int h, int hk, int d, const rope_params *p,
                       const char *what) {
    act_buf q = act_random(DTYPE_F32, (int64_t)n * h * d, -2, 2), k = act_random(DTYPE_F32, (int64_t)n * hk * d, -2, 2);
    double *ref_q = rope_ref(&q, pos, n, h, d, p), *ref_k = rope_ref(&k, pos, n, hk, d, p);
    backend_rope(be, q.p, h, k.p, hk, pos, n, d, p);
    char what_k[96];
    snprintf(what_k, sizeof what_k, "%s (k, %d heads)", what, hk);
    act_check(what, &q, ref_q, 1e-6);
    act_check(what_k, &k, ref_k, 1e-6);
    free(ref_q), free(ref_k), act_free(&q), act_free(&k);
}

// head_dims from one pair to 150, positions past float32's exact angles, plain and scaled
// frequencies (a ramp, an mscale). Then the backend's table of the last positions' angles: the same
// positions again (kept), the same count at other positions, other parameters, and back.
static void test_rope(burst_backend *be) {
    static const int head_dims[] = {2, 6, 128, 300}, n_heads[] = {3, 1, 2, 3}, n_kv_heads[] = {1, 1, 2, 2};
    static const rope_params params[] = {{10000, 1, 0, 1, 1.0f}, {500000, 8, 10, 40, 1.25f}};
    static const int64_t pos[] = {0, 1, 17, 4095, 100003}, other[] = {0, 1, 17, 4096, 100003};
    const int n = (int)(sizeof pos / sizeof pos[0]);
    char what[64];
    for (int pi = 0; pi < 2; pi++)
        for (int k = 0; k < 4; k++) {
            snprintf(what, sizeof what, "rope head_dim=%d heads=%d %s", head_dims[k], n_heads[k], pi ? "scaled" : "plain");
            check_rope(be, pos, n, n_heads[k], n_kv_heads[k], head_dims[k], &params[pi], what);
        }
    static const struct { const int64_t *pos; int p; const char *what; } seq[] = {
        {pos, 0, "rope table: positions"}, {pos, 0, "rope table: the same again"}, {other, 0, "rope table: one position moved"},
        {other, 1, "rope table: other parameters"}, {pos, 0, "rope table: back to the first"}};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) check_rope(be, seq[i].pos, n, 2, 1, 128, &params[seq[i].p], seq[i].what);
}

// backend_sample, greedy, against a plain scan on test_fill_argmax_rows' rows (ties, a row of
// -INFINITY: index 0, one whose largest value is its last); at temperatures (every other row
// greedy), against model/sampler.h's draw of each row with its unit.
static void test_sample(burst_backend *be) {
    static const int rows_of[] = {1, 7, 70};
    static const int64_t cols_of[] = {1, 5, 32000};
    for (int ri = 0; ri < 3; ri++)
        for (int ci = 0; ci < 3; ci++) {
            const int rows = rows_of[ri];
            const int64_t cols = cols_of[ci];
            float *x = burst_malloc(sizeof(float) * (size_t)(rows * cols));
            test_fill_argmax_rows(x, rows, cols);
            int *got = burst_malloc(sizeof(int) * (size_t)(rows + 1)), want_ok = 1;
            got[rows] = -7; // a guard
            backend_sample(be, got, x, rows, cols, NULL, NULL);
            for (int r = 0; r < rows; r++) {
                int64_t best = 0;
                for (int64_t j = 0; j < cols; j++)
                    if ((double)x[r * cols + j] > (double)x[r * cols + best]) best = j;
                if (got[r] != best) {
                    if (want_ok) printf("  argmax row %d: got %d want %lld\n", r, got[r], (long long)best);
                    want_ok = 0;
                }
            }
            float *temperature = burst_malloc(sizeof(float) * (size_t)rows), *unit = burst_malloc(sizeof(float) * (size_t)rows);
            for (int r = 0; r < rows; r++) temperature[r] = r % 2 ? test_uniform(0.2f, 2) : 0, unit[r] = test_uniform(0, 1);
            backend_sample(be, got, x, rows, cols, temperature, unit);
            struct sampler_cand *scratch = burst_malloc(sizeof *scratch * (size_t)cols);
            for (int r = 0; r < rows; r++) {
                const int want = sampler_pick_unfiltered(x + r * cols, (int)cols, temperature[r], unit[r], scratch);
                if (got[r] != want) {
                    if (want_ok) printf("  drawn row %d (T %g, u %g): got %d want %d\n", r, temperature[r], unit[r], got[r], want);
                    want_ok = 0;
                }
            }
            free(scratch), free(temperature), free(unit);
            want_ok &= got[rows] == -7;
            printf("%s sample rows=%d cols=%lld: greedy, and drawn at temperatures\n", want_ok ? "ok  " : "FAIL", rows, (long long)cols);
            check(want_ok);
            free(x), free(got);
        }
}

// The AVX-512 rounding to bf16 (AMX's operand rounded to one part, and the GEMM's bf16 outputs:
// bf16_nearest_x16) gives f32_to_bf16's bits: ties either way, the largest finite values (which
// round to infinity), subnormals, infinities, NaNs, and random bit patterns. Where this build has
// no AVX-512 there is nothing to check.
static void test_bf16_nearest(void) {
#ifdef BURST_AVX512
    enum { N = 1 << 16 };
    static const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                                     0x00000001u, 0x80008000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                     0xffffffffu, 0x00000000u, 0x80000000u, 0x3f80ffffu};
    static uint32_t u[N];
    int bad = 0;
    for (int i = 0; i < N; i++) u[i] = i < 16 ? edges[i] : (uint32_t)test_rand_u64();
    for (int i = 0; i < N; i += 16) {
        uint16_t got[16];
        _mm256_storeu_si256((__m256i *)got, bf16_nearest_x16(_mm512_loadu_ps((const float *)&u[i])));
        for (int j = 0; j < 16; j++) {
            float f;
            memcpy(&f, &u[i + j], 4);
            if (got[j] != f32_to_bf16(f) && bad++ < 3)
                printf("  0x%08x: got 0x%04x want 0x%04x\n", u[i + j], got[j], f32_to_bf16(f));
        }
    }
    printf("%s bf16_nearest_x16 = f32_to_bf16 on %d values\n", bad ? "FAIL" : "ok  ", N);
    check(!bad);
#endif
}

// What the memory check counts for attention (backend_attention_transient_bytes): each of the
// backend's 3 threads' copy of one KV head's K and V, keys padded to 32 (1000 -> 1024) on AMX, to
// 64 (1024) off it: 2 bytes a value on AMX and for cpu-bf16's AVX512-BF16 dot products on a bf16
// cache, 4 (float32) for the vector loops.
static void test_attention_transient(void) {
    for (int bf16_backend = 0; bf16_backend < 2; bf16_backend++) {
        burst_backend *be = backend_cpu_new(3, bf16_backend, 0);
        const size_t bf16 = backend_attention_transient_bytes(be, 64, 4, 1000, 8, 2, 128, DTYPE_BF16);
        const size_t f32 = backend_attention_transient_bytes(be, 64, 4, 1000, 8, 2, 128, DTYPE_F32);
        const int pairs = bf16_backend && flash_pairs_applies(&(flash_args){.head_dim = 128, .kv_dtype = DTYPE_BF16, .qp_bf16 = 1});
        const size_t values = (size_t)3 * 2 * 1024 * 128, want_bf16 = values * (amx_usable() || pairs ? 2 : 4);
        const int ok = bf16 == want_bf16 && f32 == values * 4;
        printf("%s attention transient bytes (%s): bf16 cache %zu (want %zu), f32 cache %zu (want %zu)\n", ok ? "ok  " : "FAIL",
               bf16_backend ? "cpu-bf16" : "cpu", bf16, want_bf16, f32, values * 4);
        failures += !ok;
        backend_free(be);
    }
}

// What the memory check counts for a matmul (backend_matmul_transient_bytes) covers what matmul_ints
// allocates for 512 tokens by 4096 columns on 64 threads: each token's x as int8 with its groups'
// sums and scales (640 bytes a span of 512 columns), and each thread's sums of 16 rows a token (16
// floats a sum; 8 with AVX2 alone). 64 threads' sums outgrow the GEMM's buffers, which the count
// alone once held.
static void test_matmul_transient(void) {
    burst_backend *be = backend_cpu_new(64, 0, 0);
#if defined(__AVX2__) && !defined(BURST_AVX512)
    const size_t sum_bytes = 8 * sizeof(float);
#else
    const size_t sum_bytes = 16 * sizeof(float);
#endif
    const size_t want = (size_t)512 * 8 * 640 + (size_t)64 * 16 * 512 * sum_bytes, got = backend_matmul_transient_bytes(be, 512, 4096);
    printf("%s matmul transient bytes: %zu (want at least %zu)\n", got >= want ? "ok  " : "FAIL", got, want);
    failures += got < want;
    backend_free(be);
}

int main(void) {
    test_seed("test_backend_cpu");
    test_bf16_nearest();
    test_weight_bf16_copy();
    test_buffer_pages();
    printf("matmul: AMX %s\n", amx_usable() ? "on" : "off");
    burst_backend *be = backend_cpu_new(3, 0, 0); // a thread count that splits the tiles unevenly
    test_rmsnorm(be);
    test_matmul(be, 0);
    test_matmul(be, 1);
    test_matmul_exact(be, 0);
    test_matmul_exact(be, 1);
    test_bf16_rounds_x(be, 0);
    test_bf16_rounds_x(be, 1);
    test_f16_weights(be);
    test_quantized(be, DTYPE_Q8);
    test_quantized(be, DTYPE_Q4);
    test_swiglu(be);
    test_matmul_swiglu(be, 0);
    test_matmul_swiglu(be, 1);
    test_rope(be);
    test_sample(be);
    test_attention_transient();
    test_matmul_transient();
    backend_free(be);
    printf("%d failures\n", failures);
    return failures != 0;
}
