// In-process transport (comm/comm.h): ranks are threads sharing one address space. A ring step
// is a copy from rank-1's send buffer into this rank's recv buffer, done by this rank's helper
// thread so that the calling thread goes on computing. All state sits under one mutex and one
// condition variable: with G <= a few dozen ranks the lock is never the bottleneck.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

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

typedef struct {
    void (*transfer)(void *dst, const void *src, size_t bytes);
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int barrier_count;
    uint64_t barrier_gen;
    rank_state *ranks; // (n)
} threads_state;

static threads_state *state(const comm *c) { return c->g->impl; }

static void *helper_main(void *arg) {
    comm *c = arg;
    threads_state *t = state(c);
    int n = c->g->n;
    rank_state *me = &t->ranks[c->rank], *prev = &t->ranks[(c->rank + n - 1) % n];
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && (me->received == me->posted || prev->posted <= me->received))
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) break;
        BURST_ASSERT(prev->bytes == me->bytes && "ring step: sender and receiver sizes differ");
        const void *src = prev->send;
        pthread_mutex_unlock(&t->mu);
        t->transfer(me->recv, src, me->bytes);
        pthread_mutex_lock(&t->mu);
        me->received++;
        prev->consumed++;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static burst_status threads_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    threads_state *t = state(c);
    rank_state *me = &t->ranks[c->rank];
    pthread_mutex_lock(&t->mu);
    if (me->posted != me->received || me->posted != me->consumed) {
        pthread_mutex_unlock(&t->mu);
        return BURST_FAIL(err, BURST_ERR_INVALID, "rank %d: ring step started before the last one was waited for", c->rank);
    }
    me->send = send;
    me->recv = recv;
    me->bytes = bytes;
    me->posted++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return BURST_OK;
}

static burst_status threads_ring_wait(comm *c, burst_error *err) {
    (void)err;
    threads_state *t = state(c);
    rank_state *me = &t->ranks[c->rank];
    pthread_mutex_lock(&t->mu);
    while (me->received != me->posted || me->consumed != me->posted) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return BURST_OK;
}

static burst_status threads_barrier(comm *c, burst_error *err) {
    (void)err;
    threads_state *t = state(c);
    pthread_mutex_lock(&t->mu);
    uint64_t gen = t->barrier_gen;
    if (++t->barrier_count == c->g->n) {
        t->barrier_count = 0;
        t->barrier_gen++;
        pthread_cond_broadcast(&t->cv);
    } else {
        while (gen == t->barrier_gen) pthread_cond_wait(&t->cv, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return BURST_OK;
}

static burst_status threads_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    threads_state *t = state(c);
    t->ranks[c->rank].gather_send = send; // read by others only after the barrier
    burst_status st = threads_barrier(c, err);
    for (int r = 0; !st && r < c->g->n; r++)
        t->transfer((char *)recv + (size_t)r * bytes, t->ranks[r].gather_send, bytes);
    return st ? st : threads_barrier(c, err); // nobody reuses its send buffer before all have copied
}

static void threads_group_free(comm_group *g) {
    threads_state *t = g->impl;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int r = 0; r < g->n; r++) BURST_CHECK_GEN(pthread_join(t->ranks[r].helper, NULL), 0, strerror);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->ranks);
    free(t);
    comm_group_release(g);
}

static const comm_ops threads_ops = {
    .ring_start = threads_ring_start,
    .ring_wait = threads_ring_wait,
    .allgather = threads_allgather,
    .barrier = threads_barrier,
    .group_free = threads_group_free,
};

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

comm_group *comm_threads_group_new(int n_ranks, void (*transfer)(void *dst, const void *src, size_t bytes)) {
    threads_state *t = burst_calloc(1, sizeof *t);
    t->transfer = transfer ? transfer : host_copy;
    t->ranks = burst_calloc((size_t)n_ranks, sizeof *t->ranks);
    BURST_CHECK_GEN(pthread_mutex_init(&t->mu, NULL), 0, strerror);
    BURST_CHECK_GEN(pthread_cond_init(&t->cv, NULL), 0, strerror);
    comm_group *g = comm_group_alloc(&threads_ops, n_ranks, 0, n_ranks, t);
    for (int r = 0; r < n_ranks; r++)
        BURST_CHECK_GEN(pthread_create(&t->ranks[r].helper, NULL, helper_main, &g->ranks[r]), 0, strerror);
    return g;
}
