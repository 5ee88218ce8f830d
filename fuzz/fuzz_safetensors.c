// libFuzzer target: st_open (weights/safetensors.h) on arbitrary file contents. It must answer a
// file or an error and never crash or leak; a file it accepts must keep the header's promises: each
// tensor numel x dtype size bytes, inside the mapping, aligned to its dtype, none overlapping. The
// target reads every byte of every tensor, so data outside the mapping faults. The input becomes
// the contents of one in-memory file (memfd), which st_open reaches through /proc/self/fd.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "weights/safetensors.h"

static volatile unsigned sink; // keeps the reads of the data

// The path of a file that now holds data[0..n).
static const char *input_file(const uint8_t *data, size_t n) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        if ((fd = memfd_create("fuzz_input", 0)) < 0) perror("memfd_create"), exit(1);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || (n && pwrite(fd, data, n, 0) != (ssize_t)n)) perror("input_file"), exit(1);
    return path;
}

static int by_start(const void *a, const void *b) {
    const weights_tensor *x = *(const weights_tensor *const *)a, *y = *(const weights_tensor *const *)b;
    return (x->data > y->data) - (x->data < y->data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    st_file *f;
    burst_error err;
    if (st_open(input_file(data, n), &f, &err)) return 0;
    const weights_tensor **order = malloc(sizeof *order * (size_t)(f->n_tensors ? f->n_tensors : 1));
    unsigned sum = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const weights_tensor *t = order[i] = &f->tensors[i];
        const uint8_t *p = t->data;
        if (t->nbytes != (size_t)t->numel * dtype_size(t->dtype) || (uintptr_t)p % dtype_size(t->dtype) ||
            p < f->map + 8 || p + t->nbytes > f->map + f->map_bytes)
            abort();
        for (size_t j = 0; j < t->nbytes; j++) sum += p[j];
    }
    qsort(order, (size_t)f->n_tensors, sizeof *order, by_start);
    const uint8_t *reached = NULL; // the furthest end of the non-empty tensors so far
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const uint8_t *p = order[i]->data;
        if (!order[i]->nbytes) continue;
        if (reached && p < reached) abort();
        if (!reached || p + order[i]->nbytes > reached) reached = p + order[i]->nbytes;
    }
    sink = sum;
    free(order);
    st_close(f);
    return 0;
}
