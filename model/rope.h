// Rotary position embedding's frequencies, with the rope_scaling of long-context checkpoints.
// Pair j of a head (dimensions j and j + head_dim/2, rotate-half layout) turns by the angle
// pos * rope_inv_freq(p, j), and cos and sin are multiplied by p.mscale:
//   inv_freq(j) = theta^(-2j / head_dim) * ((1 - r_j) + r_j / factor),
//   r_j = clamp((j - ramp_lo) / (ramp_hi - ramp_lo), 0, 1).
// No scaling: factor 1. Linear: r_j = 1 for every j (every frequency divided by factor). YaRN
// (Peng et al. 2023, as vLLM and the authors' code compute it): the pairs that turn more than beta_fast
// times over the original context keep their frequency (r = 0), those that turn fewer than
// beta_slow times are divided by factor (r = 1), a linear ramp between, and mscale is the
// attention factor. The function is shared by the CPU and CUDA backends, in double.
#pragma once
#include <math.h>

#include "weights/weights.h"

#ifdef __CUDACC__
#define ROPE_FN __host__ __device__ static inline
#else
#define ROPE_FN static inline
#endif

typedef struct {
    double theta, factor, ramp_lo, ramp_hi;
    float mscale;
} rope_params;

rope_params rope_params_of(const llama_config *c);

ROPE_FN double rope_inv_freq(const rope_params *p, int j, int head_dim) {
    double r = (j - p->ramp_lo) / (p->ramp_hi - p->ramp_lo);
    r = r < 0 ? 0 : r > 1 ? 1 : r;
    return pow(p->theta, -2.0 * j / head_dim) * ((1 - r) + r / p->factor);
}
