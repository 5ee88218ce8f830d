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

void amx_rows_to_b(uint16_t *dst, const void *x, int x_bf16, int64_t stride, int64_t n, int64_t cols, int64_t b,
                   int64_t k_tiles, int parts) {
    for (int64_t k = 0; k < k_tiles; k++) {
        uint16_t *d = dst + (b * k_tiles + k) * parts * AMX_TILE_ELEMS;
        for (int64_t t = 0; t < AMX_TILE; t++) { // the parts of row t, a row of d
            const int64_t row = b * AMX_TILE + t, left = row < n ? cols - k * AMX_TILE_K : 0;
            const int64_t at = (row < n ? row * stride : 0) + k * AMX_TILE_K;
            if (x_bf16) _mm512_store_si512(d + t * AMX_TILE_K, _mm512_maskz_loadu_epi16(amx_first32(left), (const uint16_t *)x + at));
            else
                amx_split_32(_mm512_maskz_loadu_ps(amx_first16(left), (const float *)x + at),
                             _mm512_maskz_loadu_ps(amx_first16(left - 16), (const float *)x + at + 16), parts, d + t * AMX_TILE_K,
                             AMX_TILE_ELEMS);
        }
        for (int p = 0; p < parts; p++) { // a row of 16 pairs becomes column t of the tile
            __m512i r[AMX_TILE];
            for (int t = 0; t < AMX_TILE; t++) r[t] = _mm512_load_si512(d + p * AMX_TILE_ELEMS + t * AMX_TILE_K);
            amx_transpose_16x16(r);
            for (int t = 0; t < AMX_TILE; t++) _mm512_store_si512(d + p * AMX_TILE_ELEMS + t * AMX_TILE_K, r[t]);
        }
    }
}
#else
int amx_usable(void) { return 0; }
#endif
