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
        LOG_I("AMX: matmuls of BF16 and F16 weights, and prefill attention to a bf16 KV cache, run in bf16 tiles, "
              "float32-exact (BURST_AMX=0: off)");
    else LOG_W("AMX: the kernel refused the tile registers (%s); the float32 loops run instead", strerror(errno));
}

int amx_usable(void) {
    pthread_once(&amx_once, amx_init);
    return amx_on;
}
#else
int amx_usable(void) { return 0; }
#endif
