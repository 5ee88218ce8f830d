// Public wrappers over a transport's function table.
#include <stdlib.h>

#include "comm_impl.h"

comm_group *comm_group_alloc(const comm_ops *ops, int n, int first, int n_local, void *impl) {
    BURST_ASSERT(n >= 1 && first >= 0 && n_local >= 1 && first + n_local <= n);
    comm_group *g = burst_calloc(1, sizeof *g);
    *g = (comm_group){.ops = ops, .n = n, .first = first, .n_local = n_local, .impl = impl};
    g->ranks = burst_calloc((size_t)n_local, sizeof *g->ranks);
    for (int i = 0; i < n_local; i++) g->ranks[i] = (comm){.g = g, .rank = first + i};
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
    BURST_ASSERT(rank >= g->first && rank < g->first + g->n_local);
    return &g->ranks[rank - g->first];
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
burst_status comm_nccl_group_new(cluster *cl, int n_ranks, double stall_s, comm_group **out, burst_error *err) {
    (void)cl, (void)n_ranks, (void)stall_s;
    *out = NULL;
    return BURST_FAIL(err, BURST_ERR_INVALID, "nccl: this build has no NCCL (configure with CUDA and NCCL found)");
}
#endif
