// The GPU twin of attention/online_softmax.h: folds a partial (o_b, lse_b) into a running
// (o, lse) in place, fp32, same layouts and -INFINITY rules; n calls with disjoint outputs at once. Device buffers owned by the caller;
// the launch is asynchronous on the given stream and thread-safe for disjoint outputs.
#pragma once
#include <cuda_runtime_api.h>

#include "attention/online_softmax.h"

#ifdef __cplusplus
extern "C" {
#endif

void online_softmax_merge_cuda(const online_softmax_args *calls, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
