// NCCL transport (comm/comm.h): each process drives its share of the G ranks, its i-th rank on
// its GPU i, each rank with its own communicator, communication stream and completion event.
// The leader makes NCCL's unique id and the cluster carries it to every node (comm/cluster.h);
// every process then joins its ranks with ncclCommInitRank, inside one NCCL group since one
// thread initialises several GPUs. A ring step is a grouped ncclSend to rank+1 and ncclRecv
// from rank-1 on the communication stream, so the transfer runs beside the attention kernels of
// the compute stream; comm_ring_wait waits for its event. Buffers are device memory, complete
// before they are handed over (the ring syncs the compute stream first).
//
// NCCL waits for a peer forever: a rank whose peer process is stuck (or gone without NCCL
// noticing) would hang, and the server with it. So every wait polls the operation's event: when
// NCCL reports an asynchronous error (a peer's connection failed), or the operation has not
// finished after stall_s seconds, the rank aborts its communicator (which also ends its kernels
// that still wait) and fails with BURST_ERR_DEVICE; every later call on that rank fails too.
// Freeing the group aborts its communicators too, so that freeing never waits for a peer.
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>

#include "common/cuda_check.h"
#include "comm_impl.h"

#define NCCL_CHECK(expr) BURST_CHECK_GEN((expr), ncclSuccess, ncclGetErrorString)

typedef struct {
    ncclComm_t nc;
    cudaStream_t stream;
    cudaEvent_t done; // the last operation (ring step, all-gather, barrier)
    int *token;       // device: one int for the barrier's all-reduce
    double stall_s;   // how long an operation may take before the rank gives up
    int aborted;      // the communicator was aborted: nothing more runs on it
} nccl_rank;

static int device_of(const comm *c) { return c->rank - c->g->first; }
static nccl_rank *rank_of(const comm *c) { return &((nccl_rank *)c->g->impl)[device_of(c)]; }

static burst_status check_alive(const comm *c, burst_error *err) {
    if (!rank_of(c)->aborted) return BURST_OK;
    return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl rank %d: its communicator was aborted after an earlier failure", c->rank);
}

// Waits until the operation `what` (recorded in R->done) has finished; see the top of the file.
static burst_status wait_done(comm *c, const char *what, burst_error *err) {
    nccl_rank *R = rank_of(c);
    double start = burst_now();
    for (;;) {
        cudaError_t q = cudaEventQuery(R->done);
        if (q == cudaSuccess) return BURST_OK;
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        (void)cudaGetLastError(); // "not ready" is also this thread's last error: a later launch check would take it for its own
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(R->nc, &async));
        double waited = burst_now() - start;
        if (async != ncclSuccess || waited > R->stall_s) {
            NCCL_CHECK(ncclCommAbort(R->nc));
            R->aborted = 1;
            if (async != ncclSuccess)
                return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl rank %d: %s failed: %s (communicator aborted)", c->rank,
                                  what, ncclGetErrorString(async));
            return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl rank %d: %s unfinished after %.0f s: a peer is stuck or gone "
                              "(communicator aborted)", c->rank, what, waited);
        }
        sched_yield();
    }
}

static burst_status nccl_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    burst_status st = check_alive(c, err);
    if (st) return st;
    nccl_rank *R = rank_of(c);
    int n = c->g->n;
    CUDA_CHECK(cudaSetDevice(device_of(c)));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(send, bytes, ncclUint8, (c->rank + 1) % n, R->nc, R->stream));
    NCCL_CHECK(ncclRecv(recv, bytes, ncclUint8, (c->rank + n - 1) % n, R->nc, R->stream));
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(R->done, R->stream));
    return BURST_OK;
}

static burst_status nccl_ring_wait(comm *c, burst_error *err) {
    burst_status st = check_alive(c, err);
    return st ? st : wait_done(c, "ring step", err);
}

static burst_status nccl_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    burst_status st = check_alive(c, err);
    if (st) return st;
    nccl_rank *R = rank_of(c);
    CUDA_CHECK(cudaSetDevice(device_of(c)));
    NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, R->nc, R->stream));
    CUDA_CHECK(cudaEventRecord(R->done, R->stream));
    return wait_done(c, "all-gather", err);
}

static burst_status nccl_barrier(comm *c, burst_error *err) {
    burst_status st = check_alive(c, err);
    if (st) return st;
    nccl_rank *R = rank_of(c);
    CUDA_CHECK(cudaSetDevice(device_of(c)));
    NCCL_CHECK(ncclAllReduce(R->token, R->token, 1, ncclInt, ncclSum, R->nc, R->stream));
    CUDA_CHECK(cudaEventRecord(R->done, R->stream));
    return wait_done(c, "barrier", err);
}

static void nccl_group_free(comm_group *g) {
    nccl_rank *ranks = g->impl;
    for (int r = 0; r < g->n_local; r++) {
        CUDA_CHECK(cudaSetDevice(r));
        // Abort, not destroy: destroy first finalizes with the peers, and would wait forever for a
        // node the cluster has lost. Every operation has finished (each wait returns only then),
        // so abort only frees. An aborted communicator is freed already.
        if (!ranks[r].aborted) NCCL_CHECK(ncclCommAbort(ranks[r].nc));
        CUDA_CHECK(cudaStreamDestroy(ranks[r].stream));
        CUDA_CHECK(cudaEventDestroy(ranks[r].done));
        CUDA_CHECK(cudaFree(ranks[r].token));
    }
    free(ranks);
    comm_group_release(g);
}

static const comm_ops nccl_ops = {
    .ring_start = nccl_ring_start,
    .ring_wait = nccl_ring_wait,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .group_free = nccl_group_free,
};

burst_status comm_nccl_group_new(cluster *cl, int n_ranks, double stall_s, comm_group **out, burst_error *err) {
    *out = NULL;
    int P = cluster_nodes(cl), count = 0, first, n_local;
    if (n_ranks < P) return BURST_FAIL(err, BURST_ERR_INVALID, "nccl: %d ranks over %d nodes (want at least one each)", n_ranks, P);
    cluster_ranks(cl, cluster_node(cl), n_ranks, &first, &n_local);
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0, cudaGetLastError();
    if (n_local > count)
        return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl: %d ranks on this node need one GPU each, %d found", n_local, count);
    ncclUniqueId id, *ids = burst_malloc(sizeof id * (size_t)P);
    if (cluster_node(cl) == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    burst_status st = BURST_OK;
    if (cl && !(st = cluster_allgather(cl, &id, ids, sizeof id, err))) id = ids[0]; // node 0's id
    free(ids);
    if (st) return st;
    nccl_rank *ranks = burst_calloc((size_t)n_local, sizeof *ranks);
    NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < n_local; i++) {
        CUDA_CHECK(cudaSetDevice(i));
        NCCL_CHECK(ncclCommInitRank(&ranks[i].nc, n_ranks, id, first + i));
    }
    ncclResult_t rc = ncclGroupEnd();
    if (rc != ncclSuccess) {
        free(ranks);
        return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl: ranks %d..%d of %d did not join: %s", first,
                          first + n_local - 1, n_ranks, ncclGetErrorString(rc));
    }
    for (int i = 0; i < n_local; i++) {
        CUDA_CHECK(cudaSetDevice(i));
        CUDA_CHECK(cudaStreamCreateWithFlags(&ranks[i].stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ranks[i].done, cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc((void **)&ranks[i].token, sizeof(int)));
        CUDA_CHECK(cudaMemset(ranks[i].token, 0, sizeof(int)));
        ranks[i].stall_s = stall_s;
    }
    *out = comm_group_alloc(&nccl_ops, n_ranks, first, n_local, ranks);
    return BURST_OK;
}
