// Online-softmax merge of attention partials: folds a partial result (o_b, lse_b), computed over
// one block of keys, into a running result (o, lse) over the keys seen so far, in place. This is
// the step BurstAttention's ring runs after each K/V block; merging the partials of disjoint key
// blocks in any order gives attention over their union (up to fp32 rounding).
//
// Layouts are those of attention/flash.h: o rows (n, n_heads, head_dim) with a row stride in
// elements, lse (n_heads, n) contiguous, natural-log. An lse of -INFINITY marks an empty partial
// (a row that saw no key; its o is 0): merging it changes nothing, and merging into it copies.
// The caller owns every buffer. online_softmax_merge runs n such merges at once (a step's
// decoding sequences), whose outputs must not overlap; it is thread-safe for disjoint outputs
// and runs OpenMP threads over the rows of all n in one parallel region.
#pragma once
#include <stdint.h>

#ifdef __cplusplus // callable from CUDA C++
extern "C" {
#endif

typedef struct {
    float *o;           // (n, n_heads, head_dim), row i at o + i*o_stride: running, updated
    float *lse;         // (n_heads, n): running, updated
    const float *o_b;   // (n, n_heads, head_dim), row i at o_b + i*o_b_stride: the partial
    const float *lse_b; // (n_heads, n): the partial's
    int64_t o_stride, o_b_stride; // in elements
    int n, n_heads, head_dim;
} online_softmax_args;

void online_softmax_merge(const online_softmax_args *calls, int n);

// One row of one call: query row t / n_heads, head t % n_heads (t < n * n_heads). For a caller
// that folds several partials into one result from its own parallel region (flash_cpu's decode).
void online_softmax_merge_row(const online_softmax_args *a, int64_t t);

#ifdef __cplusplus
}
#endif
