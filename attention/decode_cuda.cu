// Split-KV decode attention on the GPU (contract in attention/decode_cuda.h; CPU twin and
// specification in attention/flash_cpu.c).
//
// Algorithm (flash-decoding). Decode is memory bound: a query row moves 8*d bytes of fp32 K/V (4*d
// of bf16) per key for 4*d FLOPs per head, so every K/V byte should leave memory once and the whole GPU should
// be reading. A block takes up to NV query vectors (row i of query head h; the vectors of one KV
// head's group are numbered v = i*group + h%group), holds them in registers pre-scaled by
// scale*log2(e), and walks the keys of its split: each of its 4 warps loads KEYS K/V rows at a time
// (lanes over head_dim, float4 loads when aligned: 4 KB in flight per warp), scores them against
// every vector (one warp-shuffle reduction each) and folds them into its online-softmax state
// (max m, sum l, unnormalised o, log2 domain), rescaling once per step when the max moves. The 4
// warps' states merge through shared memory. With one split the block writes O and lse; else the
// split's normalised partial and its lse go to the workspace, and merge_splits_kernel (one warp per
// (head, row)) combines the splits with the online-softmax weights exp(lse_s - max).
//
// Launch: grid (vector chunks, key splits, n_kv_heads), 128 threads, static shared memory
// 4 warps x NV x 32*EPL floats (16 KB at NV=8, d <= 128). Splits: enough that the blocks fill
// BLOCKS_PER_SM per SM, none under MIN_SPLIT_KEYS keys (a split writes NV*d floats of partial
// against 8*d*keys bytes read: 3% at most). Compiled instances: float4 or scalar loads x head_dim
// up to 128 or 256 x NV = 1, 2, 4, 8 (the smallest that holds the group's vectors) x K/V fp32 or
// bf16; ptxas (sm_90a) gave the fp32 ones 56 (NV=1) to 217 (NV=8, d=256) registers and no spills.
//
// Measured (H100 80GB HBM3, `bash bench/gpu_decode.sh`: `bench_flash_attn decode`, one query row,
// 32 heads, d=128, fp32 K/V, us per call and GB/s of K/V read, against the old pack + flash path):
//   heads/kv  N       old us   GB/s   split-KV us  GB/s   speedup
//   32/32     4096    246.8    544    78.4         1712   3.15x
//   32/32     32768   1750.8   613    382.0        2811   4.58x
//   32/32     131072  6908.8   622    1416.7       3032   4.88x
//   32/8      4096    185.1    181    60.4         555    3.06x
//   32/8      32768   1335.2   201    165.2        1624   8.08x
//   32/8      131072  5283.7   203    430.8        2492   12.26x
// Short caches stay below the copy bandwidth (3.0 TB/s): BLOCKS_PER_SM and MIN_SPLIT_KEYS are
// not tuned against these numbers yet.
#include <cuda_bf16.h>
#include <math.h>

#include <algorithm>

#include "attention/decode_cuda.h"
#include "common/cuda_check.h"

namespace {

constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int MAX_VECS = 8;        // query vectors a block holds
constexpr int MAX_HEAD_DIM = 256;  // 8 elements a lane
constexpr int MIN_SPLIT_KEYS = 128;
constexpr int BLOCKS_PER_SM = 4;
constexpr int MERGE_WARPS = 4;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

struct params {
    const float *q;
    const void *k, *v;        // kv_dtype
    float *o, *lse;
    float *part_o, *part_lse; // workspace: (splits, n_heads, nq, head_dim), (splits, n_heads, nq)
    int64_t q_stride, kv_stride, o_stride;
    int nq, nk, n_heads, head_dim;
    int group, n_vecs;        // n_heads / n_kv_heads; nq * group vectors per KV head
    int64_t q_pos0, k_pos0;
    int causal;
    int split_keys, n_splits;
    float scale_log2;         // scale * log2(e)
};

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// 4 consecutive elements at p (aligned to 4 of them) as floats.
__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

// Lane `lane` owns elements (c*32 + lane)*VEC + t of a head_dim row of T (float or bf16), kept
// as floats x[c*VEC + t]; elements at or past d read as 0.
template <int VEC, int EPL, typename T>
__device__ __forceinline__ void load_row(float (&x)[EPL], const T *__restrict__ row, int d, int lane) {
#pragma unroll
    for (int c = 0; c < EPL / VEC; c++) {
        const int e = (c * 32 + lane) * VEC;
        if constexpr (VEC == 4) {
            const float4 t = e < d ? load4(row + e) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            x[4 * c] = t.x, x[4 * c + 1] = t.y, x[4 * c + 2] = t.z, x[4 * c + 3] = t.w;
        } else {
            x[c] = e < d ? widen(row[e]) : 0.0f;
        }
    }
}

// Block (chunk, split, hk) of call p: the keys of one split for NV vectors of KV head hk.
template <int VEC, int EPL, int NV, typename KV>
__device__ __forceinline__ void decode_block(const params &p, int chunk, int split, int hk) {
    constexpr int KEYS = 16 / EPL; // K/V rows a warp loads per step
    __shared__ __align__(16) float s_acc[WARPS][NV][EPL * 32];
    __shared__ float s_m[WARPS][NV], s_l[WARPS][NV];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, d = p.head_dim;
    const int v0 = chunk * NV;
    const int64_t k0 = (int64_t)split * p.split_keys;

    // The block's vectors, and how many keys of this split each sees: [k0, k0 + n_vis[r]).
    float q[NV][EPL], acc[NV][EPL], m[NV], l[NV];
    int n_vis[NV], n_keys = 0;
#pragma unroll
    for (int r = 0; r < NV; r++) {
        const int v = v0 + r, i = v / p.group, h = hk * p.group + v % p.group;
        int64_t end = v < p.n_vecs ? p.nk : 0; // keys [0, end) visible to the vector
        if (p.causal) end = min(end, max((int64_t)0, p.q_pos0 + i + 1 - p.k_pos0));
        n_vis[r] = (int)min(max(end - k0, (int64_t)0), (int64_t)p.split_keys);
        n_keys = max(n_keys, n_vis[r]);
#pragma unroll
        for (int e = 0; e < EPL; e++) q[r][e] = 0.0f, acc[r][e] = 0.0f;
        if (v < p.n_vecs) load_row<VEC, EPL>(q[r], p.q + i * p.q_stride + (int64_t)h * d, d, lane);
#pragma unroll
        for (int e = 0; e < EPL; e++) q[r][e] *= p.scale_log2;
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }

    const KV *kh = (const KV *)p.k + k0 * p.kv_stride + (int64_t)hk * d;
    const KV *vh = (const KV *)p.v + k0 * p.kv_stride + (int64_t)hk * d;
    for (int j0 = warp * KEYS; j0 < n_keys; j0 += WARPS * KEYS) {
        float kr[KEYS][EPL], vr[KEYS][EPL];
#pragma unroll
        for (int u = 0; u < KEYS; u++) { // rows past n_keys repeat the last one, masked below
            const int64_t j = min(j0 + u, n_keys - 1);
            load_row<VEC, EPL>(kr[u], kh + j * p.kv_stride, d, lane);
            load_row<VEC, EPL>(vr[u], vh + j * p.kv_stride, d, lane);
        }
#pragma unroll
        for (int r = 0; r < NV; r++) {
            float s[KEYS], mx = m[r];
#pragma unroll
            for (int u = 0; u < KEYS; u++) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) dot = fmaf(q[r][e], kr[u][e], dot);
#pragma unroll
                for (int off = 16; off; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
                s[u] = j0 + u < n_vis[r] ? dot : -INFINITY;
                mx = fmaxf(mx, s[u]);
            }
            if (mx > m[r]) { // the xor reduction leaves every lane the same sums: a uniform branch
                const float alpha = exp2f(m[r] - mx); // 0 while nothing was visible
                l[r] *= alpha;
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[r][e] *= alpha;
                m[r] = mx;
            }
#pragma unroll
            for (int u = 0; u < KEYS; u++) {
                const float pr = s[u] == -INFINITY ? 0.0f : exp2f(s[u] - m[r]);
                l[r] += pr;
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[r][e] = fmaf(pr, vr[u][e], acc[r][e]);
            }
        }
    }

    // Merge the warps' states; warp w finishes vectors w, w + WARPS, ...
#pragma unroll
    for (int r = 0; r < NV; r++) {
        if (lane == 0) {
            s_m[warp][r] = m[r];
            s_l[warp][r] = l[r];
        }
#pragma unroll
        for (int c = 0; c < EPL / VEC; c++) {
            float *dst = &s_acc[warp][r][(c * 32 + lane) * VEC];
            if constexpr (VEC == 4) *reinterpret_cast<float4 *>(dst) = make_float4(acc[r][4 * c], acc[r][4 * c + 1], acc[r][4 * c + 2], acc[r][4 * c + 3]);
            else *dst = acc[r][c];
        }
    }
    __syncthreads();
    for (int r = warp; r < NV && v0 + r < p.n_vecs; r += WARPS) {
        float mx = -INFINITY, sum = 0.0f, wt[WARPS];
#pragma unroll
        for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, s_m[w][r]);
#pragma unroll
        for (int w = 0; w < WARPS; w++) {
            wt[w] = s_m[w][r] == -INFINITY ? 0.0f : exp2f(s_m[w][r] - mx);
            sum += s_l[w][r] * wt[w];
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int v = v0 + r, i = v / p.group, h = hk * p.group + v % p.group;
        const int64_t t = (int64_t)h * p.nq + i, part = (int64_t)split * p.n_heads * p.nq + t;
        float *out = p.n_splits == 1 ? p.o + i * p.o_stride + (int64_t)h * d : p.part_o + part * d;
        for (int e = lane; e < d; e += 32) {
            float x = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; w++) x = fmaf(s_acc[w][r][e], wt[w], x);
            out[e] = x * inv;
        }
        if (lane == 0) (p.n_splits == 1 ? p.lse[t] : p.part_lse[part]) = sum > 0.0f ? mx * LN2 + logf(sum) : -INFINITY;
    }
}

// Calls of one launch of decode_batch_kernel, all of the same chunks (same_launch): the calls'
// parameters (blocks past a call's splits return at once). By value, as kernel parameters: no upload to wait
// for, nothing for a CUDA graph to track; __grid_constant__ lets the kernel index them in place.
struct batch_params {
    params call[DECODE_CUDA_MAX_BATCH];
    int n, n_kv_heads;
};
static_assert(sizeof(batch_params) <= 4096, "kernel parameters past 4 KB need CUDA 12.1 and Volta");

template <int VEC, int EPL, int NV, typename KV>
__global__ void __launch_bounds__(THREADS) decode_kernel(const __grid_constant__ params p) {
    decode_block<VEC, EPL, NV, KV>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// grid.z runs over (call, KV head).
template <int VEC, int EPL, int NV, typename KV>
__global__ void __launch_bounds__(THREADS) decode_batch_kernel(const __grid_constant__ batch_params b) {
    const int c = blockIdx.z / b.n_kv_heads, hk = blockIdx.z % b.n_kv_heads;
    if ((int)blockIdx.y >= b.call[c].n_splits) return;
    decode_block<VEC, EPL, NV, KV>(b.call[c], blockIdx.x, blockIdx.y, hk);
}

__device__ __forceinline__ float split_weight(float lse, float mx) { // exp(lse - mx), 0 for empty splits
    return lse == -INFINITY ? 0.0f : expf(lse - mx);
}

// One warp per (head, row) t = h*nq + i: O and lse over all splits.
__device__ __forceinline__ void merge_splits(const params &p, int64_t block) {
    const int64_t rows = (int64_t)p.n_heads * p.nq, t = block * MERGE_WARPS + threadIdx.x / 32;
    if (t >= rows) return;
    const int lane = threadIdx.x % 32, d = p.head_dim, h = (int)(t / p.nq), i = (int)(t % p.nq);
    const float *lse_t = p.part_lse + t; // split s at lse_t[s * rows]
    float mx = -INFINITY, sum = 0.0f;
    for (int s = lane; s < p.n_splits; s += 32) mx = fmaxf(mx, lse_t[s * rows]);
    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    for (int s = lane; s < p.n_splits; s += 32) sum += split_weight(lse_t[s * rows], mx);
    for (int off = 16; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float *o = p.o + i * p.o_stride + (int64_t)h * d;
    for (int e = lane; e < d; e += 32) {
        float x = 0.0f;
        for (int s = 0; s < p.n_splits; s++) x = fmaf(split_weight(lse_t[s * rows], mx), p.part_o[(s * rows + t) * d + e], x);
        o[e] = x * inv;
    }
    if (lane == 0) p.lse[t] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
}

__global__ void __launch_bounds__(32 * MERGE_WARPS) merge_splits_kernel(const __grid_constant__ params p) {
    merge_splits(p, blockIdx.x);
}

// grid.y runs over the calls; those of one split have nothing to merge.
__global__ void __launch_bounds__(32 * MERGE_WARPS) merge_splits_batch_kernel(const __grid_constant__ batch_params b) {
    const params &p = b.call[blockIdx.y];
    if (p.n_splits > 1) merge_splits(p, blockIdx.x);
}

// A launch of kernel(p) through the caller's launcher (common/cuda_launch.h), or straight.
template <typename P> void launch(void (*kernel)(const P), const P &p, dim3 grid, int threads, const cuda_launcher *l,
                                  cudaStream_t s) {
    void *args[] = {(void *)&p};
    cuda_launch(l, (const void *)kernel, grid, dim3((unsigned)threads), args, s);
}

// The kernel instance for NV vectors a block, with params (one call) or batch_params.
template <int VEC, int EPL, int NV, typename KV> void launch_nv(const params &p, dim3 grid, const cuda_launcher *l, cudaStream_t s) {
    launch(decode_kernel<VEC, EPL, NV, KV>, p, grid, THREADS, l, s);
}
template <int VEC, int EPL, int NV, typename KV> void launch_nv(const batch_params &b, dim3 grid, const cuda_launcher *l, cudaStream_t s) {
    launch(decode_batch_kernel<VEC, EPL, NV, KV>, b, grid, THREADS, l, s);
}

template <int VEC, int EPL, typename KV, typename P>
void launch_decode(const P &p, int nv, dim3 grid, const cuda_launcher *l, cudaStream_t s) {
    switch (nv) {
    case 1: launch_nv<VEC, EPL, 1, KV>(p, grid, l, s); break;
    case 2: launch_nv<VEC, EPL, 2, KV>(p, grid, l, s); break;
    case 4: launch_nv<VEC, EPL, 4, KV>(p, grid, l, s); break;
    default: launch_nv<VEC, EPL, MAX_VECS, KV>(p, grid, l, s); break;
    }
}

// The instance for these loads, head_dim (<= 128 or <= 256) and K/V dtype.
template <typename P>
void launch_decode(const P &p, burst_dtype kv, bool vec4, int head_dim, int nv, dim3 grid, const cuda_launcher *l, cudaStream_t s) {
    using BF = __nv_bfloat16;
    if (kv == DTYPE_F32) {
        if (vec4) head_dim <= 128 ? launch_decode<4, 4, float>(p, nv, grid, l, s) : launch_decode<4, 8, float>(p, nv, grid, l, s);
        else head_dim <= 128 ? launch_decode<1, 4, float>(p, nv, grid, l, s) : launch_decode<1, 8, float>(p, nv, grid, l, s);
    } else {
        if (vec4) head_dim <= 128 ? launch_decode<4, 4, BF>(p, nv, grid, l, s) : launch_decode<4, 8, BF>(p, nv, grid, l, s);
        else head_dim <= 128 ? launch_decode<1, 4, BF>(p, nv, grid, l, s) : launch_decode<1, 8, BF>(p, nv, grid, l, s);
    }
}

struct plan {
    int nv, chunks;          // vectors per block (1, 2, 4 or 8), blocks per KV head to hold them all
    int split_keys, splits;  // keys per split, splits
};

// Vectors a block holds for n_vecs of them: the fewest of 1, 2, 4, 8 that hold them, at most 8.
int vecs_per_block(int64_t n_vecs) {
    int nv = 1;
    while (nv < MAX_VECS && nv < n_vecs) nv *= 2;
    return nv;
}

// Key splits that bring a call of `blocks` blocks a split to BLOCKS_PER_SM blocks on each of n_sm
// SMs: the most plan_for gives it (fewer where the keys run out first).
int64_t splits_to_fill(int64_t blocks, int n_sm) {
    return std::max((int64_t)1, ((int64_t)BLOCKS_PER_SM * n_sm + blocks - 1) / blocks);
}

// The split over keys [0, k_end) that some row can see, for a GPU of n_sm SMs (nq > 0).
plan plan_for(const flash_args *a, int n_sm) {
    const int64_t n_vecs = (int64_t)a->nq * (a->n_heads / a->n_kv_heads);
    plan pl;
    pl.nv = vecs_per_block(n_vecs);
    pl.chunks = (int)((n_vecs + pl.nv - 1) / pl.nv);
    int64_t k_end = a->nk;
    if (a->causal) k_end = std::min(k_end, std::max((int64_t)0, a->q_pos0 + a->nq - a->k_pos0));
    const int64_t want = splits_to_fill((int64_t)pl.chunks * a->n_kv_heads, n_sm);
    int64_t keys = (k_end + want - 1) / want;
    keys = std::max((int64_t)MIN_SPLIT_KEYS, (keys + 15) / 16 * 16); // whole steps of 4 warps
    pl.split_keys = (int)keys;
    pl.splits = (int)std::max((int64_t)1, (k_end + keys - 1) / keys);
    return pl;
}

int sm_count() {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
}

bool args_ok(const flash_args *a) {
    return (a->kv_dtype == DTYPE_F32 || a->kv_dtype == DTYPE_BF16) && a->n_kv_heads > 0 && a->n_heads > 0 &&
           a->n_heads % a->n_kv_heads == 0 && a->nq >= 0 && a->nk >= 0 &&
           a->head_dim >= 1 && a->head_dim <= MAX_HEAD_DIM;
}

size_t workspace_floats(const flash_args *a, const plan &pl) {
    return pl.splits > 1 ? (size_t)pl.splits * a->n_heads * a->nq * (a->head_dim + 1) : 0;
}

burst_status check_args(const flash_args *a, burst_error *err) {
    if (a->head_dim < 1 || a->head_dim > MAX_HEAD_DIM)
        return BURST_FAIL(err, BURST_ERR_INVALID, "head_dim %d unsupported (want 1..%d)", a->head_dim, MAX_HEAD_DIM);
    if (!args_ok(a))
        return BURST_FAIL(err, BURST_ERR_INVALID, "nq %d / nk %d / heads %d / kv heads %d / K/V %s out of range (want "
                          "n_heads a positive multiple of n_kv_heads, K/V F32 or BF16)", a->nq, a->nk, a->n_heads, a->n_kv_heads,
                          dtype_name(a->kv_dtype));
    return BURST_OK;
}

// The kernels' parameters for call a under plan pl, its split partials at workspace.
params params_for(const flash_args *a, const plan &pl, float *workspace) {
    const int group = a->n_heads / a->n_kv_heads;
    return params{
        .q = a->q, .k = a->k, .v = a->v, .o = a->o, .lse = a->lse, .part_o = workspace,
        .part_lse = workspace ? workspace + (size_t)pl.splits * a->n_heads * a->nq * a->head_dim : nullptr,
        .q_stride = a->q_stride, .kv_stride = a->kv_stride, .o_stride = a->o_stride,
        .nq = a->nq, .nk = a->nk, .n_heads = a->n_heads, .head_dim = a->head_dim,
        .group = group, .n_vecs = a->nq * group, .q_pos0 = a->q_pos0, .k_pos0 = a->k_pos0,
        .causal = a->causal, .split_keys = pl.split_keys, .n_splits = pl.splits, .scale_log2 = a->scale * LOG2E};
}

// 4-element loads need every row start aligned to 4 elements.
bool vec4_for(const flash_args *a) {
    const size_t kv4 = 4 * dtype_size(a->kv_dtype);
    return a->head_dim % 4 == 0 && a->q_stride % 4 == 0 && a->kv_stride % 4 == 0 && (uintptr_t)a->q % 16 == 0 &&
           ((uintptr_t)a->k | (uintptr_t)a->v) % kv4 == 0;
}

// Calls that can share a launch (with their plans): the same kernel instance, KV heads and
// chunks. The grid is chunks x the most splits: a call of many chunks (prefill rows, fp32 mode)
// beside calls of many splits (long caches) would start mostly idle blocks.
bool same_launch(const flash_args *a, const plan &pa, const flash_args *b, const plan &pb) {
    return a->kv_dtype == b->kv_dtype && vec4_for(a) == vec4_for(b) && (a->head_dim <= 128) == (b->head_dim <= 128) &&
           a->n_kv_heads == b->n_kv_heads && pa.nv == pb.nv && pa.chunks == pb.chunks;
}

// Workspace floats of call a on a GPU of n_sm SMs (0 for calls decode_cuda refuses or skips).
size_t call_workspace(const flash_args *a, int n_sm) {
    return args_ok(a) && a->nq > 0 ? workspace_floats(a, plan_for(a, n_sm)) : 0;
}

} // namespace

extern "C" int decode_cuda_splits(const flash_args *a) {
    return args_ok(a) && a->nq > 0 ? plan_for(a, sm_count()).splits : 1;
}

extern "C" size_t decode_cuda_workspace_floats(const flash_args *a) { return call_workspace(a, sm_count()); }

extern "C" size_t decode_cuda_batch_workspace_floats(const flash_args *calls, int n) {
    const int n_sm = sm_count();
    size_t total = 0;
    for (int i = 0; i < n; i++) total += call_workspace(&calls[i], n_sm);
    return total;
}

// Bounds for a set of calls of nq_i rows (sum R, n calls) on n_sm SMs: a call's splits never
// pass splits_to_fill of its blocks, and a call of more rows has no fewer blocks than one of a
// single row (nv grows with the rows only up to the 8 a block holds), so no more splits than
// `one_row` below. Its workspace, splits x n_heads x nq x (d+1) floats, is then at most
// one_row x n_heads x nq x (d+1): summed, R rows' worth. And a call that splits at all has fewer
// than BLOCKS_PER_SM x n_sm blocks, so splits < 2 x BLOCKS_PER_SM x n_sm / blocks, while
// blocks x nv >= n_heads x nq: its workspace is under 2 x BLOCKS_PER_SM x n_sm x nv x (d+1),
// whatever its rows: summed, n calls' worth.
extern "C" size_t decode_cuda_workspace_bound_floats(int max_rows, int max_calls, int n_heads, int n_kv_heads,
                                                     int head_dim) {
    if (max_rows <= 0 || max_calls <= 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads) return 0;
    const int n_sm = sm_count(), group = n_heads / n_kv_heads, nv = vecs_per_block(group);
    const int64_t one_row = splits_to_fill((int64_t)((group + nv - 1) / nv) * n_kv_heads, n_sm);
    const int64_t by_rows = one_row * n_heads * max_rows;
    const int64_t by_calls = (int64_t)2 * BLOCKS_PER_SM * n_sm * MAX_VECS * max_calls;
    return (size_t)std::min(by_rows, by_calls) * (size_t)(head_dim + 1);
}

extern "C" burst_status decode_cuda(const flash_args *a, float *workspace, size_t workspace_floats_given,
                                    const cuda_launcher *launcher, cudaStream_t stream, burst_error *err) {
    burst_status st = check_args(a, err);
    if (st || a->nq == 0) return st;
    const plan pl = plan_for(a, sm_count());
    const size_t need = workspace_floats(a, pl);
    if (workspace_floats_given < need)
        return BURST_FAIL(err, BURST_ERR_INVALID, "workspace of %zu floats, want %zu", workspace_floats_given, need);
    const params p = params_for(a, pl, workspace);
    launch_decode(p, a->kv_dtype, vec4_for(a), a->head_dim, pl.nv,
                  dim3((unsigned)pl.chunks, (unsigned)pl.splits, (unsigned)a->n_kv_heads), launcher, stream);
    if (pl.splits > 1) {
        const int64_t rows = (int64_t)a->n_heads * a->nq;
        launch(merge_splits_kernel, p, dim3((unsigned)((rows + MERGE_WARPS - 1) / MERGE_WARPS)), 32 * MERGE_WARPS, launcher, stream);
    }
    return BURST_OK;
}

extern "C" burst_status decode_cuda_batch(const flash_args *calls, int n, float *workspace, size_t workspace_floats_given,
                                          const cuda_launcher *launcher, cudaStream_t stream, burst_error *err) {
    burst_status st;
    for (int i = 0; i < n; i++)
        if ((st = check_args(&calls[i], err))) return st;
    // Each call's plan, and its split partials in turn in the workspace.
    const int n_sm = sm_count();
    plan *pl = (plan *)burst_calloc((size_t)n + 1, sizeof *pl);
    size_t *offset = (size_t *)burst_malloc(sizeof(size_t) * (size_t)(n + 1));
    offset[0] = 0;
    for (int i = 0; i < n; i++) {
        if (calls[i].nq > 0) pl[i] = plan_for(&calls[i], n_sm);
        offset[i + 1] = offset[i] + (calls[i].nq > 0 ? workspace_floats(&calls[i], pl[i]) : 0);
    }
    if (workspace_floats_given < offset[n]) {
        st = BURST_FAIL(err, BURST_ERR_INVALID, "workspace of %zu floats, want %zu", workspace_floats_given, offset[n]);
        free(pl), free(offset);
        return st;
    }
    // Launches of up to DECODE_CUDA_MAX_BATCH calls that share a kernel instance, in order of
    // their first call.
    char *done = (char *)burst_calloc((size_t)n + 1, 1);
    for (int first = 0; first < n; first++) {
        if (done[first] || calls[first].nq == 0) continue;
        batch_params b = {.n = 0, .n_kv_heads = calls[first].n_kv_heads};
        int max_splits = 1;
        int64_t max_rows = 1;
        for (int i = first; i < n && b.n < DECODE_CUDA_MAX_BATCH; i++) {
            if (done[i] || calls[i].nq == 0 || !same_launch(&calls[first], pl[first], &calls[i], pl[i])) continue;
            b.call[b.n++] = params_for(&calls[i], pl[i], pl[i].splits > 1 ? workspace + offset[i] : nullptr);
            max_splits = std::max(max_splits, pl[i].splits);
            max_rows = std::max(max_rows, (int64_t)calls[i].n_heads * calls[i].nq);
            done[i] = 1;
        }
        launch_decode(b, calls[first].kv_dtype, vec4_for(&calls[first]), calls[first].head_dim, pl[first].nv,
                      dim3((unsigned)pl[first].chunks, (unsigned)max_splits, (unsigned)(b.n * b.n_kv_heads)), launcher, stream);
        if (max_splits > 1) {
            const dim3 grid((unsigned)((max_rows + MERGE_WARPS - 1) / MERGE_WARPS), (unsigned)b.n);
            launch(merge_splits_batch_kernel, b, grid, 32 * MERGE_WARPS, launcher, stream);
        }
    }
    free(pl), free(offset), free(done);
    return BURST_OK;
}
