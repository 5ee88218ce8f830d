// Online-softmax merge (contract in attention/online_softmax.h), fp32.
//
// With L = log(exp(lse) + exp(lse_b)) computed as mx + log(exp(lse - mx) + exp(lse_b - mx)),
// mx = max(lse, lse_b), the merged row is o*exp(lse - L) + o_b*exp(lse_b - L). The -INFINITY
// cases are handled first so that no inf - inf appears.
#include "attention/online_softmax.h"

#include <math.h>

#include "common/burst.h"

void online_softmax_merge(const online_softmax_args *a) {
    BURST_ASSERT(a->n >= 0 && a->n_heads > 0 && a->head_dim > 0 && "bad merge sizes");
    const int d = a->head_dim;
    const int64_t rows = (int64_t)a->n * a->n_heads;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; t++) {
        int64_t i = t / a->n_heads;
        int h = (int)(t % a->n_heads);
        float *o = a->o + i * a->o_stride + (int64_t)h * d;
        const float *ob = a->o_b + i * a->o_b_stride + (int64_t)h * d;
        float *lse = &a->lse[(int64_t)h * a->n + i];
        float lb = a->lse_b[(int64_t)h * a->n + i];
        if (lb == -INFINITY) continue;   // empty partial: nothing to add
        if (*lse == -INFINITY) {         // empty running result: take the partial
            for (int c = 0; c < d; c++) o[c] = ob[c];
            *lse = lb;
            continue;
        }
        float mx = fmaxf(*lse, lb);
        float wa = expf(*lse - mx), wb = expf(lb - mx);
        float inv = 1.0f / (wa + wb);
        for (int c = 0; c < d; c++) o[c] = (o[c] * wa + ob[c] * wb) * inv;
        *lse = mx + logf(wa + wb);
    }
}
