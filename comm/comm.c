// Public wrappers over a transport's function table.
#include <stdlib.h>

#include "comm_impl.h"

comm_group *comm_group_alloc(const comm_ops *ops, int n, void *impl) {
    BURST_ASSERT(n >= 1);
    comm_group *g = burst_calloc(1, sizeof *g);
    *g = (comm_group){.ops = ops, .n = n, .impl = impl};
    g->ranks = burst_calloc((size_t)n, sizeof *g->ranks);
    for (int r = 0; r < n; r++) g->ranks[r] = (comm){.g = g, .rank = r};
    return g;
}

void comm_group_release(comm_group *g) {
    free(g->ranks);
    free(g);
}

void comm_group_free(comm_group *g) {
    if (g) g->ops->group_free(g);
}

comm *comm_group_rank(comm_group *g, int rank) {
    BURST_ASSERT(rank >= 0 && rank < g->n);
    return &g->ranks[rank];
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->g->n; }

burst_status comm_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    BURST_ASSERT(send && recv);
    return c->g->ops->ring_start(c, send, recv, bytes, err);
}

burst_status comm_ring_wait(comm *c, burst_error *err) { return c->g->ops->ring_wait(c, err); }

burst_status comm_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    BURST_ASSERT(send && recv);
    return c->g->ops->allgather(c, send, recv, bytes, err);
}

burst_status comm_barrier(comm *c, burst_error *err) { return c->g->ops->barrier(c, err); }

#ifndef BURST_WITH_NCCL
burst_status comm_nccl_group_new(int n_ranks, comm_group **out, burst_error *err) {
    (void)n_ranks;
    *out = NULL;
    return BURST_FAIL(err, BURST_ERR_INVALID, "nccl: this build has no NCCL (configure with CUDA and NCCL found)");
}
#endif
