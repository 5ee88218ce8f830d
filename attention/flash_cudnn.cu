// The flash-attention forward through cuDNN 9 (contract in attention/flash_cudnn.h; our own kernel
// is attention/flash_cuda.cu, its CPU twin attention/flash_cpu.c).
//
// Graph (cuDNN backend API; cuDNN recognises this pattern and runs it as one fused flash kernel):
//   S = Q K^T (fp32) -> S * scale -> [causal: keep where row + shift >= col, else -inf]
//   -> M = max_row S, E = exp(S - M), Z = sum_row E, Stats = M + log Z, P = E / Z (bf16)
//   -> O = P V.
// Query row i / key column j of one block sit at positions q_pos0 + i / k_pos0 + j, so the
// contract's k_pos0 + j <= q_pos0 + i is row + shift >= col with shift = q_pos0 - k_pos0: the
// causal diagonal with an offset, which cuDNN takes as a "right bound" band (shift >= 0; a negative
// shift leaves rows with no key, which we do not hand to cuDNN). Stats is the natural-log
// log-sum-exp of the scaled scores in (heads, nq) order: our lse, written in place.
// O: cuDNN writes bf16 O into a staging buffer, widened to fp32 with our row stride afterwards
// (one extra rounding, 2^-9 relative). Asked for fp32 O, cuDNN 9 (the H100 machine's wheel)
// finalized the plan and then wrote bf16 pairs into the fp32 buffer: O is never fp32 here.
//
// Plans: built once per shape per thread (heuristics mode A, first engine config that finalizes)
// and cached with their descriptors; a shape no engine takes is cached as refused, so a fallback
// costs one lookup after the first time.
//
// Written from the cuDNN backend documentation and a reading of how cudnn-frontend's SDPA node
// lays out the same graph; no frontend code is used.
//
// Measured (H100 80GB HBM3, cuDNN 9 from the torch 2.11 wheel, B=1, 32 heads, d=128, bf16 in,
// fp32 out; bench/bench_flash_attn.cu with bench/torch_attention_anchor.py in the same call):
//   N      causal  ours ms  TFLOP/s   flash_cudnn ms  TFLOP/s   torch flash / torch cuDNN TFLOP/s
//   4K     1       0.586    234       0.308           446       252 / 468
//   4K     0       0.900    306       0.460           598       338 / 617
//   16K    1       6.95     317       3.53            623       340 / 647
//   16K    0       14.1     313       7.53            584       340 / 619
//   32K    1       26.4     333       13.2            665       343 / 673
//   32K    0       52.8     333       29.2            603       358 / 637
// The staging copy of O costs flash_cudnn a few percent against torch's cuDNN call. A plan
// (first call of a shape) took 0.07-0.08 s at 16K-32K, execution included; test_flash_cuda's
// 122 cases: every shape with a key for every row was taken, nq = 1 and nk = 1 included.
// A server meets new shapes with every new prompt length. Time to first token of a random 7B on
// the H100 (bench_prefill, chunks of 8192, lengths in this order; first prompt of a length /
// median of later ones, s), by model/backend_cuda.cu's choice (BURST_FLASH):
//   N        3000         4096         5000         16000        32768
//   auto     0.093/0.088  0.159/0.119  0.163/0.155  0.713/0.576  1.595/1.403  (flash_cudnn_worth)
//   cudnn    0.261/0.088  0.230/0.121  0.283/0.156  0.725/0.569  1.493/1.407  (plan at first sight)
//   ours     0.097/0.093  0.126/0.129  0.163/0.166  0.674/0.680  1.832/1.840  (flash_cuda only)
#include "attention/flash_cudnn.h"

#ifndef BURST_WITH_CUDNN

extern "C" burst_status flash_cudnn(const flash_cuda_args *a, cudaStream_t stream, burst_error *err) {
    (void)a;
    (void)stream;
    return BURST_FAIL(err, BURST_ERR_INVALID, "flash_cudnn: burst was built without cuDNN");
}
extern "C" int flash_cudnn_compiled(void) { return 0; }
extern "C" int flash_cudnn_worth(const flash_cuda_args *a) {
    (void)a;
    return 0;
}
extern "C" void flash_cudnn_release(void) {}

#else

#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include <vector>

#include "common/cuda_check.h"

namespace {

typedef cudnnBackendDescriptor_t desc_t;

// Tensor ids in the variant pack; virtual tensors are numbered after them.
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_SHIFT, UID_FIRST_VIRTUAL };

constexpr size_t MAX_PLANS = 32; // per thread; the oldest is dropped beyond this
constexpr size_t MAX_SEEN = 64;  // shapes flash_cudnn_worth counts per thread, the oldest dropped
// flash_cudnn_worth: a plan costs 0.1-0.17 s (H100, 7B prefill) and then saves about half of
// flash_cuda's time, some 6e-15 s per unit of work below, on each of a forward pass's layers (32
// or more) that meet the same shape: it pays within one pass from 0.1 s / (32 x 6e-15) ~ 5e11
// units on. 4e11 also sends a 32K prompt's blocks against its first 16K keys to cuDNN at once.
constexpr double PLAN_WORK = 4e11; // visible (row, key) pairs x n_heads x head_dim
constexpr int PLAN_AFTER = 64;     // calls of a smaller shape, two passes of 32 layers: it recurs

// Everything the graph bakes in (all 64-bit: no padding, compared bytewise). shifted: causal with
// q_pos0 != k_pos0 (the shift itself is a run-time value, as the scale is).
struct plan_key {
    int64_t nq, nk, n_heads, n_kv_heads, head_dim, causal;
    int64_t q_stride, kv_stride, shifted;
    bool operator==(const plan_key &o) const { return memcmp(this, &o, sizeof o) == 0; }
};

struct shape4 {
    int64_t dim[4], stride[4];
};

// Builds one graph: every descriptor it creates is kept for the plan's lifetime. The first failing
// call is remembered (status, step) and makes every later call a no-op, so the graph reads top to
// bottom and is checked once at the end.
struct graph_builder {
    std::vector<desc_t> owned, ops;
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    const char *step = "";
    int64_t next_uid = UID_FIRST_VIRTUAL;

    void check(cudnnStatus_t s, const char *what) {
        if (status == CUDNN_STATUS_SUCCESS && s != CUDNN_STATUS_SUCCESS) { status = s; step = what; }
    }
    desc_t make(cudnnBackendDescriptorType_t type, const char *what) {
        desc_t d = nullptr;
        if (status != CUDNN_STATUS_SUCCESS) return nullptr;
        check(cudnnBackendCreateDescriptor(type, &d), what);
        if (d) owned.push_back(d);
        return d;
    }
    void set(desc_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
             const void *v, const char *what) {
        if (status == CUDNN_STATUS_SUCCESS) check(cudnnBackendSetAttribute(d, name, type, n, v), what);
    }
    void finalize(desc_t d, const char *what) {
        if (status == CUDNN_STATUS_SUCCESS) check(cudnnBackendFinalize(d), what);
    }
    void set_desc(desc_t d, cudnnBackendAttributeName_t name, desc_t v, const char *what) {
        set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
    }

    // uid 0 makes a virtual tensor (an intermediate that never reaches memory).
    desc_t tensor(cudnnDataType_t type, const shape4 &s, int64_t uid, bool by_value, const char *what) {
        const bool is_virtual = uid == 0;
        if (is_virtual) uid = next_uid++;
        const int64_t ndim = 4, align = by_value ? 4 : 16;
        desc_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, ndim, s.dim, what);
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, ndim, s.stride, what);
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
        if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
        finalize(t, what);
        return t;
    }
    desc_t scalar(cudnnDataType_t type, int64_t uid, const char *what) {
        return tensor(type, shape4{{1, 1, 1, 1}, {1, 1, 1, 1}}, uid, true, what);
    }
    void op(desc_t o, const char *what) {
        finalize(o, what);
        if (status == CUDNN_STATUS_SUCCESS) ops.push_back(o);
    }

    // y = mode(x[, b][, t]) computed in prec; axis >= 0 only for GEN_INDEX.
    void pointwise_into(desc_t y, cudnnPointwiseMode_t mode, cudnnDataType_t prec, desc_t x, desc_t b,
                        desc_t t, int64_t axis, const char *what) {
        desc_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
        set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
        if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
        finalize(pw, what);
        desc_t o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
        set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what);
        set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what);
        if (b) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, what);
        if (t) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, what);
        set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what);
        op(o, what);
    }
    desc_t pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnDataType_t out, const shape4 &s,
                     desc_t x, desc_t b, desc_t t, int64_t axis, const char *what) {
        desc_t y = tensor(out, s, 0, false, what);
        pointwise_into(y, mode, prec, x, b, t, axis, what);
        return y;
    }
    void reduction_into(desc_t y, cudnnReduceTensorOp_t mode, desc_t x, const char *what) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        desc_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
        set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
        set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
        finalize(r, what);
        desc_t o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
        set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, what);
        set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what);
        set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what);
        op(o, what);
    }
    void matmul_into(desc_t c, desc_t a, desc_t b, const char *what) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        desc_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
        set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
        finalize(m, what);
        desc_t o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
        set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
        set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
        set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
        set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, what);
        op(o, what);
    }
};

// The attention graph of the header comment, as operations of the builder (not yet a plan).
void attention_graph(graph_builder &g, const plan_key &k) {
    const int64_t h = k.n_heads, hk = k.n_kv_heads, sq = k.nq, skv = k.nk, d = k.head_dim;
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32,
                          boolean = CUDNN_DATA_BOOLEAN;
    // Dimensions (batch 1, head, row, column); rows of Q/K/V/O are the caller's strided rows.
    const shape4 q_s = {{1, h, sq, d}, {sq * k.q_stride, d, k.q_stride, 1}};
    const shape4 kt_s = {{1, hk, d, skv}, {skv * k.kv_stride, d, 1, k.kv_stride}}; // K^T
    const shape4 v_s = {{1, hk, skv, d}, {skv * k.kv_stride, d, k.kv_stride, 1}};
    const shape4 o_s = {{1, h, sq, d}, {sq * h * d, d, h * d, 1}}; // staged packed
    const shape4 s_s = {{1, h, sq, skv}, {h * sq * skv, sq * skv, skv, 1}};
    const shape4 row_s = {{1, h, sq, 1}, {h * sq, sq, 1, 1}};

    desc_t q = g.tensor(bf16, q_s, UID_Q, false, "Q");
    desc_t kt = g.tensor(bf16, kt_s, UID_K, false, "K");
    desc_t v = g.tensor(bf16, v_s, UID_V, false, "V");
    desc_t o = g.tensor(bf16, o_s, UID_O, false, "O");
    desc_t stats = g.tensor(f32, row_s, UID_STATS, false, "Stats");

    desc_t s = g.tensor(f32, s_s, 0, false, "S");
    g.matmul_into(s, q, kt, "Q K^T");
    s = g.pointwise(CUDNN_POINTWISE_MUL, f32, f32, s_s, s, g.scalar(f32, UID_SCALE, "scale"), nullptr, -1, "scale");
    if (k.causal) {
        desc_t row = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, i32, s_s, s, nullptr, nullptr, 2, "row index");
        desc_t col = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, i32, s_s, s, nullptr, nullptr, 3, "column index");
        if (k.shifted)
            row = g.pointwise(CUDNN_POINTWISE_ADD, i32, i32, s_s, row, g.scalar(i32, UID_SHIFT, "shift"), nullptr,
                              -1, "row + shift");
        desc_t keep = g.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, boolean, s_s, row, col, nullptr, -1, "causal test");
        s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, f32, s_s, s, g.scalar(f32, UID_NEG_INF, "-inf"), keep,
                        -1, "causal mask");
    }
    desc_t m = g.tensor(f32, row_s, 0, false, "max");
    g.reduction_into(m, CUDNN_REDUCE_TENSOR_MAX, s, "row max");
    desc_t e = g.pointwise(CUDNN_POINTWISE_SUB, f32, f32, s_s, s, m, nullptr, -1, "S - max");
    e = g.pointwise(CUDNN_POINTWISE_EXP, f32, f32, s_s, e, nullptr, nullptr, -1, "exp");
    desc_t z = g.tensor(f32, row_s, 0, false, "sum");
    g.reduction_into(z, CUDNN_REDUCE_TENSOR_ADD, e, "row sum");
    desc_t log_z = g.pointwise(CUDNN_POINTWISE_LOG, f32, f32, row_s, z, nullptr, nullptr, -1, "log sum");
    g.pointwise_into(stats, CUDNN_POINTWISE_ADD, f32, m, log_z, nullptr, -1, "max + log sum");
    desc_t p = g.pointwise(CUDNN_POINTWISE_DIV, f32, bf16, s_s, e, z, nullptr, -1, "P");
    g.matmul_into(o, p, v, "P V");
}

struct plan_entry {
    plan_key key;
    desc_t plan;               // nullptr: no engine takes this shape
    std::vector<desc_t> owned; // every descriptor behind the plan
    int64_t workspace;
    char why[160];             // for a refused shape: what cuDNN said
};

// One per thread (see the header): handle for the current device, plans, buffers. Freed by
// flash_cudnn_release, and when the thread ends: a ring rank's thread ends when its model is
// freed, and its plans and buffers (hundreds of MB at 32K) would otherwise outlive the model.
struct thread_cache {
    int device = -1;
    cudnnHandle_t handle = nullptr;
    std::vector<plan_entry> plans; // oldest first
    std::vector<std::pair<plan_key, int>> seen; // flash_cudnn_worth's calls per shape, oldest first
    void *workspace = nullptr, *o16 = nullptr;
    size_t workspace_bytes = 0, o16_bytes = 0;
    void release();
    ~thread_cache() { release(); }
};
thread_local thread_cache tc;

void destroy_all(std::vector<desc_t> &v) {
    for (size_t i = v.size(); i-- > 0;) cudnnBackendDestroyDescriptor(v[i]);
    v.clear();
}

void thread_cache::release() {
    for (plan_entry &e : plans) destroy_all(e.owned);
    plans.clear();
    seen.clear();
    if (workspace) CUDA_CHECK(cudaFree(workspace));
    if (o16) CUDA_CHECK(cudaFree(o16));
    if (handle) CUDNN_CHECK(cudnnDestroy(handle));
    device = -1, handle = nullptr, workspace = o16 = nullptr, workspace_bytes = o16_bytes = 0;
}

// Builds the plan for key, or a refused entry that says why.
plan_entry build_plan(const plan_key &key) {
    plan_entry e = {key, nullptr, {}, 0, ""};
    graph_builder g;
    attention_graph(g, key);
    desc_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(), g.ops.data(),
          "operation graph");
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &tc.handle, "operation graph");
    g.finalize(graph, "operation graph");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    desc_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    g.finalize(heur, "heuristics");
    int64_t n = 0;
    if (g.status == CUDNN_STATUS_SUCCESS)
        g.check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                         nullptr), "heuristics count");
    std::vector<desc_t> cfg;
    for (int64_t i = 0; i < n; i++) cfg.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configs"));
    if (g.status == CUDNN_STATUS_SUCCESS && n > 0)
        g.check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n,
                                         cfg.data()), "heuristics results");
    // The first engine config whose plan finalizes; the others' failures are expected.
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; g.status == CUDNN_STATUS_SUCCESS && i < n && !e.plan; i++) {
        desc_t plan = nullptr;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) break;
        last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &tc.handle);
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = cudnnBackendFinalize(plan);
        int64_t got = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                            &e.workspace);
        if (last == CUDNN_STATUS_SUCCESS) {
            e.plan = plan;
            g.owned.push_back(plan);
        } else {
            cudnnBackendDestroyDescriptor(plan);
        }
    }
    if (!e.plan) {
        if (g.status != CUDNN_STATUS_SUCCESS)
            snprintf(e.why, sizeof e.why, "%s: %s", g.step, cudnnGetErrorString(g.status));
        else
            snprintf(e.why, sizeof e.why, "none of %lld engine configs finalized (last: %s)", (long long)n,
                     cudnnGetErrorString(last));
        destroy_all(g.owned);
    }
    e.owned.swap(g.owned);
    return e;
}

// The calling thread's plan for key, or null.
plan_entry *cached_plan(const plan_key &key) {
    for (plan_entry &e : tc.plans)
        if (e.key == key) return &e;
    return nullptr;
}

// The cached entry for key, built on first use.
plan_entry &plan_for(const plan_key &key) {
    if (plan_entry *e = cached_plan(key)) return *e;
    if (tc.plans.size() >= MAX_PLANS) {
        destroy_all(tc.plans.front().owned);
        tc.plans.erase(tc.plans.begin());
    }
    const double t0 = burst_now();
    tc.plans.push_back(build_plan(key));
    // A new prompt length waits for its shapes' plans: how long, per shape, is worth seeing.
    plan_entry &e = tc.plans.back();
    LOG_I("cuDNN attention plan for %lld rows x %lld keys%s%s: %s in %.3f s", (long long)key.nq, (long long)key.nk,
          key.causal ? ", causal" : "", key.shifted ? " (shifted)" : "", e.plan ? "built" : "refused", burst_now() - t0);
    return e;
}

void *grow(void **buf, size_t *have, size_t need) {
    if (need > *have) {
        if (*buf) CUDA_CHECK(cudaFree(*buf)); // synchronises: no queued work still reads it
        CUDA_CHECK(cudaMalloc(buf, need));
        *have = need;
    }
    return *buf;
}

// O (nq, heads*d) bf16, packed -> fp32 rows of o_stride, 8 elements a thread: one 16-byte load,
// two 16-byte stores (flash_cudnn takes head_dim % 8 == 0 and 16-byte-aligned O rows only). A
// 64-bit division per 8 elements, not per element as before: at 32K rows of 7B that was ~10^10
// instructions a layer, more time than the 0.8 GB it moves.
__global__ void widen_o(const uint4 *src, float4 *dst, int64_t rows, int64_t width8, int64_t stride4) {
    const int64_t n = rows * width8;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / width8, j = t - r * width8;
        const uint4 v = src[t];
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
        const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]), c = __bfloat1622float2(h[2]),
                     d = __bfloat1622float2(h[3]);
        float4 *out = dst + r * stride4 + 2 * j;
        out[0] = make_float4(a.x, a.y, b.x, b.y);
        out[1] = make_float4(c.x, c.y, d.x, d.y);
    }
}

void run_plan(const plan_entry &e, const flash_cuda_args *a, cudaStream_t stream) {
    float scale = a->scale, neg_inf = -INFINITY;
    int32_t shift = (int32_t)(a->q_pos0 - a->k_pos0);
    const int64_t width = (int64_t)a->n_heads * a->head_dim;
    void *o = grow(&tc.o16, &tc.o16_bytes, (size_t)a->nq * width * 2);
    void *ws = e.workspace ? grow(&tc.workspace, &tc.workspace_bytes, (size_t)e.workspace) : nullptr;
    int64_t uids[8] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_SHIFT};
    void *ptrs[8] = {(void *)a->q, (void *)a->k, (void *)a->v, o, a->lse, &scale, &neg_inf, &shift};
    const int64_t n = e.key.causal ? (e.key.shifted ? 8 : 7) : 6;
    desc_t vp;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnSetStream(tc.handle, stream));
    CUDNN_CHECK(cudnnBackendExecute(tc.handle, e.plan, vp));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(vp));
    const int64_t total = a->nq * width / 8;
    const int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    widen_o<<<blocks, 256, 0, stream>>>((const uint4 *)o, (float4 *)a->o, a->nq, width / 8, a->o_stride / 4);
    CUDA_CHECK(cudaGetLastError());
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// A causal block whose every key is visible to every row is a full block: one plan for all.
bool is_causal(const flash_cuda_args *a) { return a->causal && a->q_pos0 - a->k_pos0 < (int64_t)a->nk - 1; }

plan_key key_of(const flash_cuda_args *a) {
    const bool causal = is_causal(a);
    return {a->nq, a->nk, a->n_heads, a->n_kv_heads, a->head_dim, causal, a->q_stride, a->kv_stride,
            causal && a->q_pos0 != a->k_pos0};
}

} // namespace

extern "C" int flash_cudnn_compiled(void) { return 1; }

extern "C" void flash_cudnn_release(void) { tc.release(); }

extern "C" burst_status flash_cudnn(const flash_cuda_args *a, cudaStream_t stream, burst_error *err) {
    const int64_t shift = a->q_pos0 - a->k_pos0;
    const int causal = is_causal(a);
    if (a->nq <= 0 || a->nk <= 0 || (causal && shift < 0))
        return BURST_FAIL(err, BURST_ERR_INVALID, "flash_cudnn: nq %d nk %d q_pos0-k_pos0 %lld: rows with no key",
                          a->nq, a->nk, (long long)shift);
    if (a->head_dim % 8 || a->q_stride % 8 || a->kv_stride % 8 || a->o_stride % 4 || !aligned16(a->q) ||
        !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->o) || !aligned16(a->lse))
        return BURST_FAIL(err, BURST_ERR_INVALID, "flash_cudnn: head_dim %d, strides or pointers not 16-byte aligned",
                          a->head_dim);
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads)
        return BURST_FAIL(err, BURST_ERR_INVALID, "flash_cudnn: %d heads over %d KV heads", a->n_heads, a->n_kv_heads);
    int device;
    CUDA_CHECK(cudaGetDevice(&device));
    if (device != tc.device) {
        flash_cudnn_release();
        CUDNN_CHECK(cudnnCreate(&tc.handle));
        tc.device = device;
    }
    const plan_entry &e = plan_for(key_of(a));
    if (!e.plan)
        return BURST_FAIL(err, BURST_ERR_INVALID, "flash_cudnn: nq %d nk %d heads %d/%d d %d causal %d: %s", a->nq,
                          a->nk, a->n_heads, a->n_kv_heads, a->head_dim, causal, e.why);
    run_plan(e, a, stream);
    return BURST_OK;
}

extern "C" int flash_cudnn_worth(const flash_cuda_args *a) {
    const plan_key key = key_of(a);
    int device;
    CUDA_CHECK(cudaGetDevice(&device));
    if (device == tc.device && cached_plan(key)) return 1;
    // Row i sees min(nk, shift + i + 1) keys when causal: rows below m see shift + i + 1, the rest nk.
    const double nq = a->nq, nk = a->nk, shift = (double)(a->q_pos0 - a->k_pos0);
    const double m = key.causal ? fmax(0.0, fmin(nq, nk - shift)) : 0.0;
    const double pairs = key.causal ? m * shift + m * (m + 1) / 2 + (nq - m) * nk : nq * nk;
    if (pairs * a->n_heads * a->head_dim >= PLAN_WORK) return 1;
    for (auto &s : tc.seen)
        if (s.first == key) return ++s.second >= PLAN_AFTER;
    if (tc.seen.size() >= MAX_SEEN) tc.seen.erase(tc.seen.begin());
    tc.seen.push_back({key, 1});
    return PLAN_AFTER <= 1;
}

#endif
