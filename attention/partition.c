#include "partition.h"

#include "common/burst.h"

// Start of chunk c when n tokens are cut into k near-equal chunks (sizes differ by at most one).
static int64_t chunk_start(int64_t n, int64_t k, int64_t c) { return c * n / k; }

static seq_run chunk(int64_t n, int64_t k, int64_t c) {
    int64_t s = chunk_start(n, k, c);
    return (seq_run){.start = s, .len = chunk_start(n, k, c + 1) - s};
}

seq_part partition_zigzag(int64_t n, int n_ranks, int rank) {
    BURST_ASSERT(n >= 0 && n_ranks >= 1 && rank >= 0 && rank < n_ranks);
    int64_t k = 2 * (int64_t)n_ranks;
    seq_part p = {.n_runs = 2, .run = {chunk(n, k, rank), chunk(n, k, k - 1 - rank)}};
    seq_part_coalesce(&p);
    return p;
}

seq_part partition_contiguous(int64_t n, int n_ranks, int rank) {
    BURST_ASSERT(n >= 0 && n_ranks >= 1 && rank >= 0 && rank < n_ranks);
    seq_part p = {.n_runs = 1, .run = {chunk(n, n_ranks, rank)}};
    seq_part_coalesce(&p);
    return p;
}

int64_t seq_part_len(const seq_part *p) {
    int64_t len = 0;
    for (int i = 0; i < p->n_runs; i++) len += p->run[i].len;
    return len;
}

void seq_part_coalesce(seq_part *p) {
    int n = 0;
    for (int i = 0; i < p->n_runs; i++) {
        const seq_run r = p->run[i];
        if (r.len == 0) continue;
        if (n > 0 && p->run[n - 1].start + p->run[n - 1].len == r.start) p->run[n - 1].len += r.len;
        else p->run[n++] = r;
    }
    p->n_runs = n;
}

void seq_part_shift(seq_part *p, int64_t offset) {
    for (int i = 0; i < p->n_runs; i++) p->run[i].start += offset;
}

seq_part seq_part_last(const seq_part *p, int64_t k) {
    int first = p->n_runs;
    int64_t over = -k; // rows of run `first` on that are not wanted (once >= 0)
    while (over < 0 && first > 0) over += p->run[--first].len;
    seq_part last = {0};
    for (int i = first; over >= 0 && i < p->n_runs; i++) last.run[last.n_runs++] = p->run[i];
    if (last.n_runs) last.run[0].start += over, last.run[0].len -= over;
    return last;
}
