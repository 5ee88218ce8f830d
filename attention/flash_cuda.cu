// Flash-attention forward on the GPU (contract in attention/flash_cuda.h; CPU twin and
// specification in attention/flash_cpu.c).
//
// Algorithm (FlashAttention-2 forward). One block owns BQ query rows of one head and walks the
// key tiles of BK keys that those rows can see; each warp owns BQ/WARPS rows (WM m16 tiles).
// S = Q K^T and O += P V run on the tensor cores with mma.sync.m16n8k16 (bf16 in, fp32
// accumulate); operands come from shared memory through ldmatrix (.trans for V), with rows
// stored as 16-byte chunks XOR-swizzled by (row & 7) so ldmatrix is conflict-free. The softmax is
// online, in the log2 domain (exp2 of FFMA-folded scale), with the row max/sum kept per thread
// and reduced over the 4 threads of a quad. K/V tiles are double-buffered with cp.async (zero
// fill past nk): tile j+1 loads while tile j computes. Causal: key tiles after the tile's last
// query are never visited, only tiles straddling the diagonal (or nk) run the masking code
// (a template flag), and query tiles are launched heaviest first.
//
// Launch: grid (ceil(nq/BQ), n_heads), WARPS*32 threads, dynamic shared memory
// (BQ + 4*BK) * head_dim * 2 bytes (96 KB for 128x64, d=128: two blocks per SM).
//
// Measured (H100 80GB HBM3, CUDA 13.0, B=1, 32 heads, d=128, bf16 in, fp32 out;
// bench/bench_flash_attn.cu, with bench/torch_attention_anchor.py in the same run; two runs on
// two machines, which differed by ~3% for torch too):
//   N      causal  ours ms   TFLOP/s     torch flash   cuDNN (TFLOP/s)
//   4K     1       0.58-0.59  232-237    247-257       418-480
//   4K     0       0.91-0.93  296-302    333-344       586-593
//   16K    1       6.80-6.96  316-323    344           630-636
//   16K    0       13.1-13.5  326-335    328-341       627-680
//   64K    1       112-116    302-314    343           574-606
//   64K    0       211-216    326-334    344-354       622-624
//   128K   1       418-431    327-337    312-313       548-551
// Tile sweep at N=16K (causal / full TFLOP/s): 128x64 with 4 warps (32 rows a warp, 255
// registers, 192 bytes spilled) 311-321 / 326-335, the default; 128x64/8 warps 296-302 / 295-302;
// the same capped at 128 registers for two blocks per SM 278-280 / 288 (spills); 128x32/4 warps
// 266-291 / 282-292 (twice the O rescales per key); 64x64/4 warps, two blocks per SM, 298-299 /
// 298-305. Packing P to bf16 inside the softmax loop and 32-bit tile-local mask arithmetic left
// registers, spills and time unchanged within the run-to-run spread. Next: wgmma/TMA (sm_90a).
#include <cuda_bf16.h>
#include <math.h>

#include "attention/flash_cuda.h"
#include "common/cuda_check.h"

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16-byte async copy global -> shared; src_bytes = 0 fills the 16 bytes with zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d[4] += a[4] (16x16, row) * b[2] (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float exp2_approx(float x) { // exp2(-inf) = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of D bf16 per row, swizzled.
template <int D> __device__ __forceinline__ uint32_t swz(int row, int chunk) {
    return (uint32_t)(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

// Loads rows [0, R) of a tile (row r at g + r*stride) into swizzled shared memory; rows at or
// past n_valid are zero-filled (so masked keys never bring NaN into P V).
template <int D, int R, int THREADS>
__device__ __forceinline__ void load_tile(uint32_t dst, const __nv_bfloat16 *g, int64_t stride,
                                          int n_valid) {
    constexpr int CHUNKS = D / 8;
    static_assert(R * CHUNKS % THREADS == 0, "tile chunks must split evenly over the threads");
#pragma unroll
    for (int it = 0; it < R * CHUNKS / THREADS; it++) {
        const int x = it * THREADS + threadIdx.x, row = x / CHUNKS, ch = x % CHUNKS;
        bool ok = row < n_valid;
        const __nv_bfloat16 *src = g + (ok ? (int64_t)row * stride + ch * 8 : 0);
        cp_async16(dst + swz<D>(row, ch), src, ok ? 16 : 0);
    }
}

struct kernel_params {
    const __nv_bfloat16 *q, *k, *v;
    float *o, *lse;
    int64_t q_stride, kv_stride, o_stride;
    int nq, nk, group; // group = n_heads / n_kv_heads
    int64_t q_pos0, k_pos0;
    int causal;
    float scale_log2; // scale * log2(e)
};

template <int D, int BQ, int BK, int WARPS> struct tiles {
    static constexpr int THREADS = WARPS * 32;
    static constexpr int WM = BQ / (16 * WARPS); // m16 tiles per warp
    static constexpr int NS = BK / 8;            // n8 tiles of S per row block
    static constexpr int NO = D / 8;             // n8 tiles of O
    static constexpr size_t SMEM = (size_t)(BQ + 4 * BK) * D * 2; // Q, K[2], V[2]
    static_assert(WM >= 1 && BQ == WM * 16 * WARPS, "BQ must be a multiple of 16*WARPS");
    static_assert(D % 64 == 0 && BK % 16 == 0, "swizzle needs >= 8 chunks per row");
};

// S (WM x NS n8 tiles of a warp) for one key tile, then the online-softmax update of the running
// max m / partial sum l and rescaling of o, then O += P V. MASK: some element of
// this tile is past nk or after its query's position.
template <int D, int BQ, int BK, int WARPS, bool MASK>
__device__ __forceinline__ void tile_step(const kernel_params &p, uint32_t sq, uint32_t sk,
                                          uint32_t sv, int64_t q0, int64_t k0,
                                          float (&o)[tiles<D, BQ, BK, WARPS>::WM][D / 8][4],
                                          float (&m)[tiles<D, BQ, BK, WARPS>::WM][2],
                                          float (&l)[tiles<D, BQ, BK, WARPS>::WM][2]) {
    using T = tiles<D, BQ, BK, WARPS>;
    constexpr int WM = T::WM, NS = T::NS, NO = T::NO;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    // Keys of this tile that exist, and the causal diagonal offset, clamped to small ints.
    const int n_valid = (int)min((int64_t)BK, p.nk - k0);
    const int diag = p.causal ? (int)max(min(p.q_pos0 + q0 - p.k_pos0 - k0, (int64_t)BK), (int64_t)-(BQ + BK)) : BK;
    float s[WM][NS][4];
    uint32_t pk[WM][NS][2]; // P in bf16 pairs, [.][n][r]: row half r, columns t*2, t*2+1 of tile n
#pragma unroll
    for (int i = 0; i < WM; i++)
#pragma unroll
        for (int n = 0; n < NS; n++) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;

    // S = Q K^T: A from Q rows of this warp, B pairs of n8 tiles of K rows (K is "col" B).
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        uint32_t a[WM][4];
#pragma unroll
        for (int i = 0; i < WM; i++)
            ldmatrix_x4(a[i], sq + swz<D>((warp * WM + i) * 16 + (lane & 15), ks * 2 + (lane >> 4)));
#pragma unroll
        for (int np = 0; np < NS / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, sk + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
            for (int i = 0; i < WM; i++) {
                mma_bf16(s[i][2 * np], a[i], b[0], b[1]);
                mma_bf16(s[i][2 * np + 1], a[i], b[2], b[3]);
            }
        }
    }

    // Online softmax per row half (r = 0: row g, r = 1: row g + 8 of each m16 tile).
#pragma unroll
    for (int i = 0; i < WM; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (MASK) { // in tile coordinates: column c of row q is visible iff c < n_valid, c <= q + diag
                const int row = (warp * WM + i) * 16 + g + 8 * r;
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int col = n * 8 + t * 2 + e;
                        if (col >= n_valid || col > row + diag) s[i][n][2 * r + e] = -INFINITY;
                    }
            }
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NS; n++) mx = fmaxf(mx, fmaxf(s[i][n][2 * r], s[i][n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[i][r], mx * p.scale_log2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new; // row sees nothing yet
            const float alpha = exp2_approx(m[i][r] - m_use);
            m[i][r] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float x0 = exp2_approx(fmaf(s[i][n][2 * r], p.scale_log2, -m_use));
                const float x1 = exp2_approx(fmaf(s[i][n][2 * r + 1], p.scale_log2, -m_use));
                sum += x0 + x1;
                pk[i][n][r] = pack_bf16(x0, x1);
            }
            l[i][r] = l[i][r] * alpha + sum;
#pragma unroll
            for (int n = 0; n < NO; n++) { o[i][n][2 * r] *= alpha; o[i][n][2 * r + 1] *= alpha; }
        }

    // O += P V: P packed from the S accumulators (C layout = A layout of the next MMA), V .trans.
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sv + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
#pragma unroll
            for (int i = 0; i < WM; i++) {
                const uint32_t a[4] = {pk[i][2 * kk][0], pk[i][2 * kk][1], pk[i][2 * kk + 1][0], pk[i][2 * kk + 1][1]};
                mma_bf16(o[i][2 * dp], a, b[0], b[1]);
                mma_bf16(o[i][2 * dp + 1], a, b[2], b[3]);
            }
        }
    }
}

template <int D, int BQ, int BK, int WARPS, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB) flash_fwd_kernel(const kernel_params p) {
    using T = tiles<D, BQ, BK, WARPS>;
    constexpr int WM = T::WM, NO = T::NO, THREADS = T::THREADS;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sq = smem_addr(smem);
    const uint32_t sk0 = sq + BQ * D * 2, sv0 = sk0 + 2 * BK * D * 2;

    // Causal: the last query tiles see the most keys, so they go first.
    const int qt = p.causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int h = blockIdx.y, hk = h / p.group;
    const int64_t q0 = (int64_t)qt * BQ;
    const int nq_tile = (int)min((int64_t)BQ, p.nq - q0);

    // Keys visible to some row of the tile: [0, k_end); to every row, and unmasked: [0, k_full).
    int64_t k_end = p.nk, k_full = p.nk;
    if (p.causal) {
        k_end = max((int64_t)0, min(k_end, p.q_pos0 + q0 + nq_tile - p.k_pos0));
        k_full = max((int64_t)0, min(k_full, p.q_pos0 + q0 + 1 - p.k_pos0));
    }
    const int n_kt = (int)((k_end + BK - 1) / BK);
    const int n_full = (int)(k_full / BK); // tiles [0, n_full) need no mask

    float o[WM][NO][4], m[WM][2], l[WM][2];
#pragma unroll
    for (int i = 0; i < WM; i++) {
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < NO; n++) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    }

    const __nv_bfloat16 *kg = p.k + (int64_t)hk * D, *vg = p.v + (int64_t)hk * D;
    if (n_kt > 0) {
        load_tile<D, BQ, THREADS>(sq, p.q + q0 * p.q_stride + (int64_t)h * D, p.q_stride, nq_tile);
        const int nk0 = (int)min((int64_t)BK, (int64_t)p.nk);
        load_tile<D, BK, THREADS>(sk0, kg, p.kv_stride, nk0);
        load_tile<D, BK, THREADS>(sv0, vg, p.kv_stride, nk0);
        cp_async_commit();
    }
    for (int kt = 0; kt < n_kt; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < n_kt) { // prefetch the next tile into the other buffer
            const int64_t k1 = (int64_t)(kt + 1) * BK;
            const int nv = (int)min((int64_t)BK, p.nk - k1);
            load_tile<D, BK, THREADS>(sk0 + (buf ^ 1) * BK * D * 2, kg + k1 * p.kv_stride, p.kv_stride, nv);
            load_tile<D, BK, THREADS>(sv0 + (buf ^ 1) * BK * D * 2, vg + k1 * p.kv_stride, p.kv_stride, nv);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint32_t sk = sk0 + buf * BK * D * 2, sv = sv0 + buf * BK * D * 2;
        if (kt < n_full) tile_step<D, BQ, BK, WARPS, false>(p, sq, sk, sv, q0, (int64_t)kt * BK, o, m, l);
        else tile_step<D, BQ, BK, WARPS, true>(p, sq, sk, sv, q0, (int64_t)kt * BK, o, m, l);
        __syncthreads(); // the buffer is refilled by the next iteration's prefetch
    }

    // Normalise and store: each quad holds 8 consecutive floats of a row per n8 tile.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < WM; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = l[i][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = (warp * WM + i) * 16 + g + 8 * r;
            if (row >= nq_tile) continue;
            const int64_t qi = q0 + row;
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            float *orow = p.o + qi * p.o_stride + (int64_t)h * D;
#pragma unroll
            for (int n = 0; n < NO; n++)
                *reinterpret_cast<float2 *>(orow + n * 8 + t * 2) =
                    make_float2(o[i][n][2 * r] * inv, o[i][n][2 * r + 1] * inv);
            if (t == 0)
                p.lse[(int64_t)h * p.nq + qi] = sum > 0.0f ? m[i][r] * LN2 + logf(sum) : -INFINITY;
        }
}

// MINB: blocks per SM asked of the register allocator (__launch_bounds__).
template <int D, int BQ, int BK, int WARPS, int MINB>
void launch(const kernel_params &p, int n_heads, cudaStream_t stream) {
    using T = tiles<D, BQ, BK, WARPS>;
    auto kernel = flash_fwd_kernel<D, BQ, BK, WARPS, MINB>;
    // The attribute belongs to the kernel on the current device: set for the launching one each
    // time (cheap beside a launch), as ranks on other GPUs launch it too.
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::SMEM));
    dim3 grid((unsigned)((p.nq + BQ - 1) / BQ), (unsigned)n_heads);
    kernel<<<grid, T::THREADS, T::SMEM, stream>>>(p);
    CUDA_CHECK(cudaGetLastError());
}

template <int D> void launch_tiles(const kernel_params &p, int n_heads, flash_cuda_tiles tiles, cudaStream_t s) {
    switch (tiles) {
    case FLASH_CUDA_TILES_DEFAULT:
    case FLASH_CUDA_TILES_128x64_W4: launch<D, 128, 64, 4, 1>(p, n_heads, s); break;
    case FLASH_CUDA_TILES_128x64_W8: launch<D, 128, 64, 8, 1>(p, n_heads, s); break;
    case FLASH_CUDA_TILES_128x64_W8_2: launch<D, 128, 64, 8, 2>(p, n_heads, s); break;
    case FLASH_CUDA_TILES_128x32_W4: launch<D, 128, 32, 4, 1>(p, n_heads, s); break;
    case FLASH_CUDA_TILES_64x64_W4: launch<D, 64, 64, 4, 2>(p, n_heads, s); break;
    case FLASH_CUDA_TILES_COUNT: break;
    }
}

} // namespace

extern "C" const char *const flash_cuda_tiles_name[FLASH_CUDA_TILES_COUNT] = {
    "default", "128x64/w4", "128x64/w8", "128x64/w8x2", "128x32/w4", "64x64/w4x2"};

extern "C" burst_status flash_cuda_with_tiles(const flash_cuda_args *a, flash_cuda_tiles tiles,
                                              cudaStream_t stream, burst_error *err) {
    if (a->head_dim != 64 && a->head_dim != 128)
        return BURST_FAIL(err, BURST_ERR_INVALID, "head_dim %d unsupported (want 64 or 128)", a->head_dim);
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads != 0)
        return BURST_FAIL(err, BURST_ERR_INVALID, "n_heads %d not a multiple of n_kv_heads %d", a->n_heads, a->n_kv_heads);
    if (a->q_stride % 8 || a->kv_stride % 8 || a->o_stride % 2 || ((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v) % 16 || (uintptr_t)a->o % 8)
        return BURST_FAIL(err, BURST_ERR_INVALID, "q/k/v rows must be 16-byte aligned, o rows 8-byte aligned");
    if (a->nq < 0 || a->nk < 0 || tiles < 0 || tiles >= FLASH_CUDA_TILES_COUNT)
        return BURST_FAIL(err, BURST_ERR_INVALID, "nq %d / nk %d / tiles %d out of range", a->nq, a->nk, (int)tiles);
    if (a->nq == 0) return BURST_OK;
    kernel_params p = {
        (const __nv_bfloat16 *)a->q, (const __nv_bfloat16 *)a->k, (const __nv_bfloat16 *)a->v,
        a->o, a->lse, a->q_stride, a->kv_stride, a->o_stride, a->nq, a->nk,
        a->n_heads / a->n_kv_heads, a->q_pos0, a->k_pos0, a->causal, a->scale * LOG2E};
    if (a->head_dim == 64) launch_tiles<64>(p, a->n_heads, tiles, stream);
    else launch_tiles<128>(p, a->n_heads, tiles, stream);
    return BURST_OK;
}

extern "C" burst_status flash_cuda(const flash_cuda_args *a, cudaStream_t stream, burst_error *err) {
    return flash_cuda_with_tiles(a, FLASH_CUDA_TILES_DEFAULT, stream, err);
}
