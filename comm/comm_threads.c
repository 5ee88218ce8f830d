// In-process transport (comm/comm.h): ranks are threads sharing one address space. A ring step
// is a memcpy from rank-1's send buffer into this rank's recv buffer, done by this rank's helper
// thread so that the calling thread goes on computing. All state sits under one mutex and one
// condition variable: with G <= a few dozen ranks the lock is never the bottleneck.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

typedef struct {
    const void *send; // this step's send buffer, read by rank+1's helper
    void *recv;       // this step's recv buffer, written by this rank's helper
    size_t bytes;
    uint64_t posted;   // ring steps started
    uint64_t received; // ring steps whose recv is filled
    uint64_t consumed; // ring steps whose send buffer rank+1 has copied
    const void *gather_send; // all-gather: this rank's contribution
    pthread_t helper;
} rank_state;

struct comm {
    comm_group *g;
    int rank;
};

struct comm_group {
    int n;
    void (*transfer)(void *dst, const void *src, size_t bytes);
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int barrier_count;
    uint64_t barrier_gen;
    rank_state *ranks; // (n)
    comm *handles;     // (n)
};

static void *helper_main(void *arg) {
    comm *c = arg;
    comm_group *g = c->g;
    rank_state *me = &g->ranks[c->rank], *prev = &g->ranks[(c->rank + g->n - 1) % g->n];
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && (me->received == me->posted || prev->posted <= me->received))
            pthread_cond_wait(&g->cv, &g->mu);
        if (g->stop) break;
        BURST_ASSERT(prev->bytes == me->bytes && "ring step: sender and receiver sizes differ");
        const void *src = prev->send;
        pthread_mutex_unlock(&g->mu);
        g->transfer(me->recv, src, me->bytes);
        pthread_mutex_lock(&g->mu);
        me->received++;
        prev->consumed++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

comm_group *comm_threads_group_new(int n_ranks, void (*transfer)(void *dst, const void *src, size_t bytes)) {
    BURST_ASSERT(n_ranks >= 1);
    comm_group *g = burst_calloc(1, sizeof *g);
    g->n = n_ranks;
    g->transfer = transfer ? transfer : host_copy;
    g->ranks = burst_calloc((size_t)n_ranks, sizeof *g->ranks);
    g->handles = burst_calloc((size_t)n_ranks, sizeof *g->handles);
    BURST_CHECK_GEN(pthread_mutex_init(&g->mu, NULL), 0, strerror);
    BURST_CHECK_GEN(pthread_cond_init(&g->cv, NULL), 0, strerror);
    for (int r = 0; r < n_ranks; r++) {
        g->handles[r] = (comm){.g = g, .rank = r};
        BURST_CHECK_GEN(pthread_create(&g->ranks[r].helper, NULL, helper_main, &g->handles[r]), 0, strerror);
    }
    return g;
}

void comm_threads_group_free(comm_group *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    for (int r = 0; r < g->n; r++) BURST_CHECK_GEN(pthread_join(g->ranks[r].helper, NULL), 0, strerror);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->ranks);
    free(g->handles);
    free(g);
}

comm *comm_threads_rank(comm_group *g, int rank) {
    BURST_ASSERT(rank >= 0 && rank < g->n);
    return &g->handles[rank];
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->g->n; }

burst_status comm_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    comm_group *g = c->g;
    rank_state *me = &g->ranks[c->rank];
    pthread_mutex_lock(&g->mu);
    if (me->posted != me->received || me->posted != me->consumed) {
        pthread_mutex_unlock(&g->mu);
        return BURST_FAIL(err, BURST_ERR_INVALID, "rank %d: ring step started before the last one was waited for", c->rank);
    }
    me->send = send;
    me->recv = recv;
    me->bytes = bytes;
    me->posted++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return BURST_OK;
}

burst_status comm_ring_wait(comm *c, burst_error *err) {
    (void)err;
    comm_group *g = c->g;
    rank_state *me = &g->ranks[c->rank];
    pthread_mutex_lock(&g->mu);
    while (me->received != me->posted || me->consumed != me->posted) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return BURST_OK;
}

burst_status comm_barrier(comm *c, burst_error *err) {
    (void)err;
    comm_group *g = c->g;
    pthread_mutex_lock(&g->mu);
    uint64_t gen = g->barrier_gen;
    if (++g->barrier_count == g->n) {
        g->barrier_count = 0;
        g->barrier_gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->barrier_gen) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return BURST_OK;
}

burst_status comm_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    comm_group *g = c->g;
    g->ranks[c->rank].gather_send = send; // read by others only after the barrier
    burst_status st = comm_barrier(c, err);
    for (int r = 0; !st && r < g->n; r++)
        g->transfer((char *)recv + (size_t)r * bytes, g->ranks[r].gather_send, bytes);
    return st ? st : comm_barrier(c, err); // nobody reuses its send buffer before all have copied
}
