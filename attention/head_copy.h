// One KV head's K and V as a thread keeps them for the run of that head's query tiles it takes
// (attention/flash_cpu.c, off AMX): in the cache a head's rows are kv_stride values apart, each in
// a page of its own at LLaMA's shapes, where the CPU's prefetchers stop (the products' loads of
// them took ~20-28% of their time), and a prompt's K and V were laid out again (widened, or paired
// for AVX512-BF16) for every query tile that read them. The copy holds keys [0, keys) of the head
// whose rows are at of_k and of_v, whole tiles at a time, as the path's fill lays them out.
#pragma once
#include <stdint.h>

typedef struct head_copy head_copy;
typedef void head_fill(head_copy *h, int tile); // key tile `tile` of the head into h->k and h->v

struct head_copy {
    void *k, *v;             // the thread's buffers
    const void *of_k, *of_v; // the head copied; NULL: none yet
    int64_t stride;          // of the rows at of_k and of_v
    int nk, d, keys;         // the head's rows, the values of a row, the keys laid out so far
    head_fill *fill;
};

// h made to hold at least keys [0, keys) of the head of nk rows of d values at k and v, stride
// apart, tile_keys keys a tile; what it holds of the same head, laid out by the same fill, is kept.
static inline void head_copy_to(head_copy *h, head_fill *fill, const void *k, const void *v, int64_t stride, int nk,
                                int d, int keys, int tile_keys) {
    if (fill != h->fill || k != h->of_k || v != h->of_v || stride != h->stride || nk != h->nk || d != h->d)
        *h = (head_copy){.k = h->k, .v = h->v, .of_k = k, .of_v = v, .stride = stride, .nk = nk, .d = d, .fill = fill};
    for (; h->keys < keys; h->keys += tile_keys) fill(h, h->keys / tile_keys);
}
