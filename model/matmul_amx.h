// The CPU matmul on Intel AMX (model/matmul_amx.c), from a few tokens on, where the CPU, the compiler
// (-march with AMX-BF16) and the kernel allow it; BURST_AMX=0 in the environment turns it off.
#pragma once
#include "backend.h"

// The most bytes matmul_amx allocates for a call of n tokens by a weight of cols columns (0 where
// AMX is not usable).
size_t matmul_amx_transient_bytes(int n, int64_t cols, int n_threads);

// As matmul_cpu (model/matmul_cpu.h) for BF16 and F16 weights; returns 0, having done nothing,
// where AMX is not usable, W is F32, or n is below the count where AMX gains for W's dtype.
int matmul_amx(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
               const burst_weight *W, int n, int n_threads);
