// Communication among the G ranks that share a sequence: the ring step of BurstAttention (send to
// rank+1, receive from rank-1, asynchronous so that the transfer overlaps compute), all-gather
// and barrier. One comm handle per rank, used by that rank's thread only.
//
// Transports: comm_threads.c (ranks are threads of one process; buffers in host memory, or
// device memory on one GPU for virtual ranks), and NCCL (CUDA issue). The calls below are
// shaped so that NCCL fits them unchanged: a ring step is a grouped send+recv, completion is
// comm_wait, and every rank must call the collectives in the same order.
// Buffers passed to comm_ring_start must stay untouched until comm_wait returns.
#pragma once
#include "../common/burst.h"

typedef struct comm comm;
typedef struct comm_group comm_group;

// In-process transport: a group of G ranks, each a thread of this process. The group owns one
// helper thread per rank that performs its transfers; free it after every rank has stopped.
// transfer copies bytes between two ranks' buffers, synchronously, from any thread (NULL: memcpy,
// for host memory; a GPU backend passes a device copy, so virtual ranks can share one GPU).
// A buffer handed to the transport must be complete (device work that writes it finished).
comm_group *comm_threads_group_new(int n_ranks, void (*transfer)(void *dst, const void *src, size_t bytes));
void comm_threads_group_free(comm_group *g);
comm *comm_threads_rank(comm_group *g, int rank);

int comm_rank(const comm *c);
int comm_size(const comm *c);

// Starts one ring step: bytes from send go to rank+1, bytes from rank-1 arrive in recv. At most
// one step is in flight per rank; comm_wait completes it (recv is filled and send is free).
burst_status comm_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
burst_status comm_ring_wait(comm *c, burst_error *err);

// recv (n_ranks * bytes) = every rank's send (bytes), in rank order.
burst_status comm_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
burst_status comm_barrier(comm *c, burst_error *err);
