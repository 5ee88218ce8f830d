// CUDA_CHECK, CUBLAS_CHECK and CUDNN_CHECK: the CHECK family's specialisations for CUDA runtime,
// cuBLAS and cuDNN calls (see common/burst.h). A failed call aborts through the abort hook with
// the expression, file:line, function and the library's error string. Usable from C and CUDA C++;
// follow every kernel launch with CUDA_CHECK(cudaGetLastError()).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common/burst.h"

#define CUDA_CHECK(expr) BURST_CHECK_GEN((expr), cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(expr) BURST_CHECK_GEN((expr), CUBLAS_STATUS_SUCCESS, cublasGetStatusString)

#ifdef BURST_WITH_CUDNN // defined for the code that links cuDNN (attention/flash_cudnn.cu)
#include <cudnn_graph.h>
#define CUDNN_CHECK(expr) BURST_CHECK_GEN((expr), CUDNN_STATUS_SUCCESS, cudnnGetErrorString)
#endif
