// Communication among the G ranks that share a sequence: the ring step of BurstAttention (send to
// rank+1, receive from rank-1, asynchronous so that the transfer overlaps compute), all-gather
// and barrier. One comm handle per rank, used by that rank's thread only; a group holds the
// handles of one process's ranks and is freed after every rank has stopped.
//
// Transports behind one interface (comm_impl.h):
//   - threads (comm_threads.c): ranks are threads of one process; a helper thread per rank moves
//     the data with a transfer function (memcpy for host memory, a device copy for GPU buffers,
//     so several virtual ranks can share one GPU);
//   - NCCL (comm_nccl.c, builds with BURST_NCCL): one GPU per rank, grouped ncclSend/ncclRecv
//     on a communication stream per rank, in one process or over the nodes of a cluster;
//   - TCP (comm_tcp.c): ranks spread over processes, on one machine or several (comm/cluster.h),
//     host memory only: the CPU backend across nodes, and the transport's own tests.
// A process holds the handles of its own ranks only (all of them, for threads).
// Every rank must call the collectives in the same order. A buffer handed to comm must be
// complete (device work that writes it finished) and, for a ring step, stay untouched until
// comm_ring_wait returns.
#pragma once
#include "../common/burst.h"
#include "cluster.h"

typedef struct comm comm;
typedef struct comm_group comm_group;

// transfer copies bytes between two ranks' buffers, synchronously, from any thread (NULL: memcpy).
comm_group *comm_threads_group_new(int n_ranks, void (*transfer)(void *dst, const void *src, size_t bytes));
// n_ranks ranks over the nodes of a cluster (NULL: this process alone), each node with its share
// (cluster_ranks). NCCL: one GPU per rank, a node's i-th rank on its GPU i; fails when NCCL is
// not built in or a node has fewer GPUs than ranks; an operation unfinished after stall_s seconds
// (or one NCCL reports failed) aborts the rank's communicator and fails. TCP: one connection to
// rank+1 and one from rank-1 per rank, each driven by a helper thread so that a ring step runs
// beside compute.
burst_status comm_nccl_group_new(cluster *cl, int n_ranks, double stall_s, comm_group **out, burst_error *err);
// stall_s: a TCP transfer that moves no byte this long fails (net_set_timeout).
burst_status comm_tcp_group_new(cluster *cl, int n_ranks, double stall_s, comm_group **out, burst_error *err);
void comm_group_free(comm_group *g);
comm *comm_group_rank(comm_group *g, int rank); // one of this process's ranks

int comm_rank(const comm *c);
int comm_size(const comm *c);

// Starts one ring step: bytes from send go to rank+1, bytes from rank-1 arrive in recv. At most
// one step is in flight per rank; comm_ring_wait completes it (recv is filled and send is free).
burst_status comm_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
burst_status comm_ring_wait(comm *c, burst_error *err);

// recv (n_ranks * bytes) = every rank's send (bytes), in rank order.
burst_status comm_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
burst_status comm_barrier(comm *c, burst_error *err);
