// A kernel launch that the caller may take over. A module whose launches' parameters change from
// call to call (attention/decode_cuda.h: key counts, splits) launches through a cuda_launcher
// when given one, so that the CUDA backend can record those launches into a CUDA graph and, on
// later steps, patch the recorded nodes' parameters instead of recording the step again
// (model/backend_cuda.cu). With none, the launch goes straight to the stream.
#pragma once
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

typedef struct cuda_launcher {
    // Launches (or records, or patches) func<<<grid, block, 0, stream>>>(args...): args as for
    // cudaLaunchKernel, one pointer per kernel parameter, read before the call returns.
    void (*launch)(void *ctx, const void *func, dim3 grid, dim3 block, void **args, cudaStream_t stream);
    void *ctx;
} cuda_launcher;

static inline void cuda_launch(const cuda_launcher *l, const void *func, dim3 grid, dim3 block, void **args,
                               cudaStream_t stream) {
    if (l) l->launch(l->ctx, func, grid, block, args, stream);
    else CUDA_CHECK(cudaLaunchKernel(func, grid, block, args, 0, stream));
}
