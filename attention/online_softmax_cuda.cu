// Online-softmax merge on the GPU (contract in attention/online_softmax_cuda.h; CPU twin in
// attention/online_softmax.c, the same formula and -INFINITY rules).
//
// Memory-bound: one warp per (row, head), lanes stride over head_dim; the two lse values and the
// weights are computed once per warp. Launch: 256 threads (8 rows) per block; the grid spans the
// n * n_heads rows of the largest call, times the calls (up to MAX_MERGE_CALLS a launch, so that
// a step's decoding sequences merge in one launch, not one each). It moves 12 bytes per element
// (read o and o_b, write o): at 3 TB/s, by estimate (not timed), a merge of 64K rows x 32 heads x
// 128 takes ~1.1 ms, against ~100 ms of attention for such a block.
#include <math.h>

#include "attention/online_softmax_cuda.h"
#include "common/cuda_check.h"

namespace {

constexpr int ROWS_PER_BLOCK = 8;

// The calls of one launch, by value as kernel parameters; grid.y runs over them.
constexpr int MAX_MERGE_CALLS = 56;
struct merge_calls {
    online_softmax_args a[MAX_MERGE_CALLS];
};
static_assert(sizeof(merge_calls) <= 4096, "kernel parameters past 4 KB need CUDA 12.1 and Volta");

__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK) merge_kernel(const __grid_constant__ merge_calls calls) {
    const online_softmax_args &a = calls.a[blockIdx.y];
    const int64_t t = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (t >= (int64_t)a.n * a.n_heads) return;
    const int lane = threadIdx.x % 32, d = a.head_dim;
    const int64_t i = t / a.n_heads;
    const int h = (int)(t % a.n_heads);
    float *o = a.o + i * a.o_stride + (int64_t)h * d;
    const float *ob = a.o_b + i * a.o_b_stride + (int64_t)h * d;
    float *lse = &a.lse[(int64_t)h * a.n + i];
    const float la = *lse, lb = a.lse_b[(int64_t)h * a.n + i];
    if (lb == -INFINITY) return; // empty partial
    const bool take = la == -INFINITY; // empty running result: copy the partial
    float wa = 0.0f, wb = 1.0f, inv = 1.0f, merged = lb;
    if (!take) { // the CPU twin's formula (attention/online_softmax.c), in its order
        const float mx = fmaxf(la, lb);
        wa = expf(la - mx);
        wb = expf(lb - mx);
        inv = 1.0f / (wa + wb);
        merged = mx + logf(wa + wb);
    }
    for (int c = lane; c < d; c += 32) o[c] = take ? ob[c] : (o[c] * wa + ob[c] * wb) * inv;
    __syncwarp(); // every lane has read *lse before lane 0 overwrites it
    if (lane == 0) *lse = merged;
}

} // namespace

extern "C" void online_softmax_merge_cuda(const online_softmax_args *calls, int n, cudaStream_t stream) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    for (int first = 0; first < n; first += MAX_MERGE_CALLS) {
        merge_calls m;
        const int count = n - first < MAX_MERGE_CALLS ? n - first : MAX_MERGE_CALLS;
        int64_t most = 0; // rows (query row, head) of the largest call
        for (int j = 0; j < count; j++) {
            const online_softmax_args *a = &calls[first + j];
            BURST_ASSERT(a->n >= 0 && a->n_heads > 0 && a->head_dim > 0 && "bad merge sizes");
            m.a[j] = *a;
            if ((int64_t)a->n * a->n_heads > most) most = (int64_t)a->n * a->n_heads;
        }
        if (most == 0) continue;
        const unsigned blocks = (unsigned)((most + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
        merge_kernel<<<dim3(blocks, (unsigned)count), 32 * ROWS_PER_BLOCK, 0, stream>>>(m);
        CUDA_CHECK(cudaGetLastError());
    }
}
