#include "rope.h"

#include <math.h>

// The pair that turns `turns` times over `ctx` positions at the unscaled frequencies (a real index).
static double pair_turning(double turns, int head_dim, double theta, int ctx) {
    return head_dim * log(ctx / (turns * 6.283185307179586)) / (2 * log(theta));
}

rope_params rope_params_of(const llama_config *c) {
    rope_params p = {.theta = c->rope_theta, .factor = c->rope_factor, .ramp_lo = -1, .ramp_hi = 0, .mscale = 1};
    if (c->rope_scaling != ROPE_SCALING_YARN) return p; // none or linear: r = 1 from j = 0 on
    double lo = floor(pair_turning(c->rope_beta_fast, c->head_dim, c->rope_theta, c->rope_original_ctx));
    double hi = ceil(pair_turning(c->rope_beta_slow, c->head_dim, c->rope_theta, c->rope_original_ctx));
    p.ramp_lo = lo > 0 ? lo : 0;
    p.ramp_hi = hi < c->head_dim - 1 ? hi : c->head_dim - 1;
    if (p.ramp_lo == p.ramp_hi) p.ramp_hi += 0.001; // as the reference implementations, a step
    p.mscale = c->rope_attention_factor;
    return p;
}
