// CUDA_CHECK: the CHECK family's specialisation for CUDA runtime calls (see common/burst.h).
// A failed call aborts through the abort hook with the expression, file:line, function and
// cudaGetErrorString. Usable from C and CUDA C++; follow every kernel launch with
// CUDA_CHECK(cudaGetLastError()).
#pragma once
#include <cuda_runtime_api.h>

#include "common/burst.h"

#define CUDA_CHECK(expr) BURST_CHECK_GEN((expr), cudaSuccess, cudaGetErrorString)
