// NCCL transport (comm/comm.h): one process drives G GPUs, rank r on GPU r, each with its own
// communicator (ncclCommInitAll), communication stream and completion event. A ring step is a
// grouped ncclSend to rank+1 and ncclRecv from rank-1 on the communication stream, so the
// transfer runs beside the attention kernels of the compute stream; comm_ring_wait waits for
// its event. Buffers are device memory, complete before they are handed over (the ring syncs the
// compute stream first). Multi-node launch is not built yet.
#include <nccl.h>
#include <stdlib.h>

#include "common/cuda_check.h"
#include "comm_impl.h"

#define NCCL_CHECK(expr) BURST_CHECK_GEN((expr), ncclSuccess, ncclGetErrorString)

typedef struct {
    ncclComm_t nc;
    cudaStream_t stream;
    cudaEvent_t done; // the last ring step's transfer
    int *token;       // device: one int for the barrier's all-reduce
} nccl_rank;

static nccl_rank *rank_of(const comm *c) { return &((nccl_rank *)c->g->impl)[c->rank]; }

static burst_status nccl_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    (void)err;
    nccl_rank *R = rank_of(c);
    int n = c->g->n;
    CUDA_CHECK(cudaSetDevice(c->rank));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(send, bytes, ncclUint8, (c->rank + 1) % n, R->nc, R->stream));
    NCCL_CHECK(ncclRecv(recv, bytes, ncclUint8, (c->rank + n - 1) % n, R->nc, R->stream));
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(R->done, R->stream));
    return BURST_OK;
}

static burst_status nccl_ring_wait(comm *c, burst_error *err) {
    (void)err;
    CUDA_CHECK(cudaEventSynchronize(rank_of(c)->done));
    return BURST_OK;
}

static burst_status nccl_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    (void)err;
    nccl_rank *R = rank_of(c);
    CUDA_CHECK(cudaSetDevice(c->rank));
    NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, R->nc, R->stream));
    CUDA_CHECK(cudaStreamSynchronize(R->stream));
    return BURST_OK;
}

static burst_status nccl_barrier(comm *c, burst_error *err) {
    (void)err;
    nccl_rank *R = rank_of(c);
    CUDA_CHECK(cudaSetDevice(c->rank));
    NCCL_CHECK(ncclAllReduce(R->token, R->token, 1, ncclInt, ncclSum, R->nc, R->stream));
    CUDA_CHECK(cudaStreamSynchronize(R->stream));
    return BURST_OK;
}

static void nccl_group_free(comm_group *g) {
    nccl_rank *ranks = g->impl;
    for (int r = 0; r < g->n; r++) {
        CUDA_CHECK(cudaSetDevice(r));
        NCCL_CHECK(ncclCommDestroy(ranks[r].nc));
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

burst_status comm_nccl_group_new(int n_ranks, comm_group **out, burst_error *err) {
    *out = NULL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0, cudaGetLastError();
    if (n_ranks < 1 || n_ranks > count)
        return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl: %d ranks need one GPU each, %d found", n_ranks, count);
    nccl_rank *ranks = burst_calloc((size_t)n_ranks, sizeof *ranks);
    ncclComm_t *ncs = burst_calloc((size_t)n_ranks, sizeof *ncs);
    int *devs = burst_calloc((size_t)n_ranks, sizeof *devs);
    for (int r = 0; r < n_ranks; r++) devs[r] = r;
    ncclResult_t rc = ncclCommInitAll(ncs, n_ranks, devs);
    if (rc != ncclSuccess) {
        free(ranks), free(ncs), free(devs);
        return BURST_FAIL(err, BURST_ERR_DEVICE, "nccl: ncclCommInitAll over %d GPUs: %s", n_ranks,
                          ncclGetErrorString(rc));
    }
    for (int r = 0; r < n_ranks; r++) {
        CUDA_CHECK(cudaSetDevice(r));
        ranks[r].nc = ncs[r];
        CUDA_CHECK(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ranks[r].done, cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc((void **)&ranks[r].token, sizeof(int)));
        CUDA_CHECK(cudaMemset(ranks[r].token, 0, sizeof(int)));
    }
    free(ncs), free(devs);
    *out = comm_group_alloc(&nccl_ops, n_ranks, ranks);
    return BURST_OK;
}
