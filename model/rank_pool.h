// Runs one function on G ranks at once: rank 0 on the calling thread, ranks 1..G-1 on threads the
// pool owns, each with its own OpenMP team of threads_per_rank threads. rank_pool_run returns
// when every rank has returned. One caller thread at a time.
#pragma once

typedef struct rank_pool rank_pool;

rank_pool *rank_pool_new(int n_ranks, int threads_per_rank);
void rank_pool_free(rank_pool *p);
void rank_pool_run(rank_pool *p, void (*fn)(void *arg, int rank), void *arg);
