// Online-softmax merge (contract in attention/online_softmax.h), fp32.
//
// With L = log(exp(lse) + exp(lse_b)) computed as mx + log(exp(lse - mx) + exp(lse_b - mx)),
// mx = max(lse, lse_b), the merged row is o*exp(lse - L) + o_b*exp(lse_b - L). The -INFINITY
// cases are handled first so that no inf - inf appears.
#include "attention/online_softmax.h"

#include <math.h>

#include "common/burst.h"

void online_softmax_merge_row(const online_softmax_args *a, int64_t t) {
    const int d = a->head_dim;
    int64_t i = t / a->n_heads;
    int h = (int)(t % a->n_heads);
    float *o = a->o + i * a->o_stride + (int64_t)h * d;
    const float *ob = a->o_b + i * a->o_b_stride + (int64_t)h * d;
    float *lse = &a->lse[(int64_t)h * a->n + i];
    float lb = a->lse_b[(int64_t)h * a->n + i];
    if (lb == -INFINITY) return; // empty partial: nothing to add
    if (*lse == -INFINITY) {     // empty running result: take the partial
        for (int c = 0; c < d; c++) o[c] = ob[c];
        *lse = lb;
        return;
    }
    float mx = fmaxf(*lse, lb);
    float wa = expf(*lse - mx), wb = expf(lb - mx);
    float inv = 1.0f / (wa + wb);
    for (int c = 0; c < d; c++) o[c] = (o[c] * wa + ob[c] * wb) * inv;
    *lse = mx + logf(wa + wb);
}

void online_softmax_merge(const online_softmax_args *calls, int n) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    for (int j = 0; j < n; j++)
        BURST_ASSERT(calls[j].n >= 0 && calls[j].n_heads > 0 && calls[j].head_dim > 0 && "bad merge sizes");
    // One parallel region; the calls' outputs are disjoint, so no barrier between them.
#pragma omp parallel
    for (int j = 0; j < n; j++) {
        const int64_t rows = (int64_t)calls[j].n * calls[j].n_heads;
#pragma omp for schedule(static) nowait
        for (int64_t t = 0; t < rows; t++) online_softmax_merge_row(&calls[j], t);
    }
}
