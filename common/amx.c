#include "common/amx.h"

#ifdef BURST_AMX_BUILD
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/burst.h"

// Linux hands AMX's 8 KB of tile registers to a process only when it asks (arch_prctl).
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_on;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_init(void) {
    const char *env = getenv("BURST_AMX");
    if (env && !strcmp(env, "0")) return;
    amx_on = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    if (amx_on)
        LOG_I("AMX: matmuls of BF16 and F16 weights, and prefill attention to a bf16 KV cache, run in bf16 tiles "
              "(float32-exact, but for cpu-bf16's bf16 inputs; BURST_AMX=0: off)");
    else LOG_W("AMX: the kernel refused the tile registers (%s); the float32 loops run instead", strerror(errno));
}

int amx_usable(void) {
    pthread_once(&amx_once, amx_init);
    return amx_on;
}

// Step k's tiles (rows [row0, row0 + 16) x columns [32 k, 32 k + 32), `parts` of them) as A tiles at d.
static void rows_to_a_step(uint16_t *d, const void *x, burst_dtype dtype, int64_t stride, int64_t n, int64_t cols,
                           int64_t row0, int64_t k, int parts) {
    for (int64_t t = 0; t < AMX_TILE; t++) { // the parts of row t, a row of d
        const int64_t row = row0 + t, left = row < n ? cols - k * AMX_TILE_K : 0;
        const int64_t at = (row < n ? row * stride : 0) + k * AMX_TILE_K;
        uint16_t *dt = d + t * AMX_TILE_K;
        if (dtype == DTYPE_F32)
            amx_split_32(_mm512_maskz_loadu_ps(mask_first16(left), (const float *)x + at),
                         _mm512_maskz_loadu_ps(mask_first16(left - 16), (const float *)x + at + 16), parts, dt, AMX_TILE_ELEMS);
        else {
            const __m512i h = _mm512_maskz_loadu_epi16(mask_first32(left), (const uint16_t *)x + at);
            if (dtype == DTYPE_BF16) _mm512_store_si512(dt, h);
            else amx_split_32(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), parts, dt,
                              AMX_TILE_ELEMS);
        }
    }
}

void amx_rows_to_a(uint16_t *dst, const void *x, burst_dtype dtype, int64_t stride, int64_t n, int64_t cols,
                   int64_t row0, int64_t k0, int64_t k_tiles, int parts) {
    for (int64_t k = 0; k < k_tiles; k++) rows_to_a_step(dst + k * parts * AMX_TILE_ELEMS, x, dtype, stride, n, cols, row0, k0 + k, parts);
}

void amx_rows_to_b(uint16_t *dst, const void *x, burst_dtype dtype, int64_t stride, int64_t n, int64_t cols,
                   int64_t row0, int64_t k0, int64_t k_tiles, int parts) {
    for (int64_t k = 0; k < k_tiles; k++) {
        uint16_t *d = dst + k * parts * AMX_TILE_ELEMS;
        rows_to_a_step(d, x, dtype, stride, n, cols, row0, k0 + k, parts);
        for (int p = 0; p < parts; p++) { // a row of 16 pairs becomes column t of the tile, while it is in L1
            __m512i r[AMX_TILE];
            for (int t = 0; t < AMX_TILE; t++) r[t] = _mm512_load_si512(d + p * AMX_TILE_ELEMS + t * AMX_TILE_K);
            transpose_16x16(r);
            for (int t = 0; t < AMX_TILE; t++) _mm512_store_si512(d + p * AMX_TILE_ELEMS + t * AMX_TILE_K, r[t]);
        }
    }
}
#else
int amx_usable(void) { return 0; }
#endif
