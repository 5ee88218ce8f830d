#include "rank_pool.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

typedef struct {
    rank_pool *pool;
    int rank;
    pthread_t thread;
} worker;

struct rank_pool {
    int n_ranks, threads_per_rank;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t job;    // jobs started
    int pending;     // workers still running the current job
    int stop;
    void (*fn)(void *arg, int rank);
    void *arg;
    worker *workers; // (n_ranks - 1): ranks 1..G-1
};

static void *worker_main(void *p) {
    worker *w = p;
    rank_pool *pool = w->pool;
    omp_set_num_threads(pool->threads_per_rank);
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->job == seen) pthread_cond_wait(&pool->cv, &pool->mu);
        if (pool->stop) break;
        seen = pool->job;
        pthread_mutex_unlock(&pool->mu);
        pool->fn(pool->arg, w->rank);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0) pthread_cond_broadcast(&pool->cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

rank_pool *rank_pool_new(int n_ranks, int threads_per_rank) {
    BURST_ASSERT(n_ranks >= 1 && threads_per_rank >= 1);
    rank_pool *p = burst_calloc(1, sizeof *p);
    p->n_ranks = n_ranks;
    p->threads_per_rank = threads_per_rank;
    BURST_CHECK_GEN(pthread_mutex_init(&p->mu, NULL), 0, strerror);
    BURST_CHECK_GEN(pthread_cond_init(&p->cv, NULL), 0, strerror);
    p->workers = burst_calloc((size_t)n_ranks, sizeof *p->workers);
    for (int r = 1; r < n_ranks; r++) {
        p->workers[r] = (worker){.pool = p, .rank = r};
        BURST_CHECK_GEN(pthread_create(&p->workers[r].thread, NULL, worker_main, &p->workers[r]), 0, strerror);
    }
    return p;
}

void rank_pool_free(rank_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int r = 1; r < p->n_ranks; r++) BURST_CHECK_GEN(pthread_join(p->workers[r].thread, NULL), 0, strerror);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

void rank_pool_run(rank_pool *p, void (*fn)(void *arg, int rank), void *arg) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n_ranks - 1;
    p->job++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    omp_set_num_threads(p->threads_per_rank);
    fn(arg, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
