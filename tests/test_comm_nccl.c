// The NCCL transport on this machine's GPUs (G = number of GPUs, at most 4): a ring step moves
// every rank's device buffer to rank+1, all-gather collects all ranks' buffers in rank order, and
// the barrier returns; contents are checked byte for byte on fresh random data. Exit 77 without
// a GPU.
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "comm/comm.h"
#include "tests/test_util.h"

enum { N_FLOATS = 100003 }; // not a multiple of any transfer chunk

typedef struct {
    comm_group *g;
    int rank, ok;
    float *host; // (G, N_FLOATS) every rank's data
} job;

static void *rank_main(void *arg) {
    job *j = arg;
    comm *c = comm_group_rank(j->g, j->rank);
    int G = comm_size(c);
    size_t bytes = N_FLOATS * sizeof(float);
    float *send, *recv, *all, *back = malloc(bytes * (size_t)G);
    cudaSetDevice(j->rank);
    cudaMalloc((void **)&send, bytes), cudaMalloc((void **)&recv, bytes), cudaMalloc((void **)&all, bytes * (size_t)G);
    cudaMemcpy(send, j->host + (size_t)j->rank * N_FLOATS, bytes, cudaMemcpyHostToDevice);
    cudaMemset(recv, 0xff, bytes);
    burst_error err;
    j->ok = !comm_ring_start(c, send, recv, bytes, &err) && !comm_ring_wait(c, &err);
    cudaMemcpy(back, recv, bytes, cudaMemcpyDeviceToHost);
    int prev = (j->rank + G - 1) % G;
    int ring_ok = j->ok && !memcmp(back, j->host + (size_t)prev * N_FLOATS, bytes);
    j->ok = ring_ok && !comm_allgather(c, send, all, bytes, &err) && !comm_barrier(c, &err);
    cudaMemcpy(back, all, bytes * (size_t)G, cudaMemcpyDeviceToHost);
    int gather_ok = j->ok && !memcmp(back, j->host, bytes * (size_t)G);
    printf("%s rank %d of %d: ring step from rank %d %s, all-gather %s\n", ring_ok && gather_ok ? "ok  " : "FAIL",
           j->rank, G, prev, ring_ok ? "equal" : "differs", gather_ok ? "equal" : "differs");
    j->ok = ring_ok && gather_ok;
    cudaFree(send), cudaFree(recv), cudaFree(all), free(back);
    return NULL;
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("skip: no CUDA device\n");
        return TEST_SKIP;
    }
    test_seed("test_comm_nccl");
    int G = count < 4 ? count : 4;
    comm_group *g;
    burst_error err;
    if (comm_nccl_group_new(NULL, G, 600, &g, &err)) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    float *host = malloc(sizeof(float) * N_FLOATS * (size_t)G);
    test_fill(host, (int64_t)N_FLOATS * G, -1, 1);
    job jobs[4];
    pthread_t th[4];
    for (int r = 0; r < G; r++) {
        jobs[r] = (job){.g = g, .rank = r, .host = host};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    int ok = 1;
    for (int r = 0; r < G; r++) pthread_join(th[r], NULL), ok &= jobs[r].ok;
    comm_group_free(g);
    free(host);
    return ok ? 0 : 1;
}
