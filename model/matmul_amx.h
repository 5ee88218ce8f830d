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

// out (n, W_gate.rows) of out_dtype = silu(x W_gate^T) x (x W_up^T), W_up of W_gate's shape (as
// backend_matmul_swiglu asserts), per element in float32 (model/swiglu.h), x read once for both;
// returns 0, having done nothing, where AMX is not usable or either weight is not in tiles.
int matmul_amx_swiglu(void *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype, const burst_weight *W_gate,
                      const burst_weight *W_up, int n, int n_threads);

// A weight laid out as AMX tiles (burst_weight.amx_tiles), read by matmul_amx at every token count
// with no copy: rows and columns padded with zeros to 32, tile (i, k) (rows [16 i, 16 i + 16) x
// columns [32 k, 32 k + 32)) at AMX_TILE_ELEMS (i * k_tiles + k), as AMX's B operand: tile row c / 2
// holds the 16 rows' columns (c, c + 1), row r's pair at 2 r; bf16 (F16 weights rounded to the
// nearest). Its bytes; the copy of W into dst; and elements [first, first + n) of W (in row order,
// as weight_to_f32) back as float32.
size_t amx_tiles_bytes(int64_t rows, int64_t cols);
void amx_tiles_from(uint16_t *dst, const burst_weight *W, int n_threads);
void amx_tiles_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst);
