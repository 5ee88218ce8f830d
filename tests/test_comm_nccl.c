// The NCCL transport on this machine's GPUs (G = number of GPUs, at most 4): a ring step moves
// every rank's device buffer to rank+1, all-gather collects all ranks' buffers in rank order, and
// the barrier returns; contents are checked byte for byte on fresh random data, and no CUDA error
// is left behind (a wait polls its operation, and "not ready" must not linger as the thread's last
// error for a later launch check to find). Then the stall path on one rank: with a stall limit of
// 0 s an all-gather that is still running at its first poll aborts the communicator with
// BURST_ERR_DEVICE, the next operation fails at once, the group frees, and the GPU still works.
// Exit 77 without a GPU.
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "comm/comm.h"
#include "tests/test_util.h"

enum { N_FLOATS = 100003,  // not a multiple of any transfer chunk
       BIG_FLOATS = 1 << 26 }; // 256 MB: an all-gather still running when its wait first looks

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
    // Every rank runs every operation, whatever failed before: a rank that skipped one would leave
    // the others waiting for it until their stall limit.
    int ring_ran = !comm_ring_start(c, send, recv, bytes, &err) && !comm_ring_wait(c, &err);
    cudaMemcpy(back, recv, bytes, cudaMemcpyDeviceToHost);
    int prev = (j->rank + G - 1) % G;
    int ring_ok = ring_ran && !memcmp(back, j->host + (size_t)prev * N_FLOATS, bytes);
    int gather_ran = !comm_allgather(c, send, all, bytes, &err);
    gather_ran &= !comm_barrier(c, &err);
    cudaMemcpy(back, all, bytes * (size_t)G, cudaMemcpyDeviceToHost);
    int gather_ok = gather_ran && !memcmp(back, j->host, bytes * (size_t)G);
    float *big, *big_all;
    cudaMalloc((void **)&big, sizeof(float) * BIG_FLOATS), cudaMalloc((void **)&big_all, sizeof(float) * BIG_FLOATS * (size_t)G);
    int big_ran = !comm_allgather(c, big, big_all, sizeof(float) * BIG_FLOATS, &err);
    cudaFree(big), cudaFree(big_all);
    cudaError_t last = cudaGetLastError();
    printf("%s rank %d of %d: ring step from rank %d %s, all-gather %s, 256 MB all-gather %s, last CUDA error: %s\n",
           ring_ok && gather_ok && big_ran && last == cudaSuccess ? "ok  " : "FAIL", j->rank, G, prev,
           ring_ok ? "equal" : "differs", gather_ok ? "equal" : "differs", big_ran ? "ran" : err.msg, cudaGetErrorString(last));
    j->ok = ring_ok && gather_ok && big_ran && last == cudaSuccess;
    cudaFree(send), cudaFree(recv), cudaFree(all), free(back);
    return NULL;
}

// One rank, a stall limit of 0 s: see the top of the file. The copy is rarely done by its first
// poll; when it is, nothing was aborted and the path is reported as not run.
static int stall_aborts(void) {
    comm_group *g;
    burst_error err;
    if (comm_nccl_group_new(NULL, 1, 0, &g, &err)) {
        printf("FAIL one-rank group: %s\n", err.msg);
        return 0;
    }
    comm *c = comm_group_rank(g, 0);
    float *big, *big_all;
    cudaSetDevice(0);
    cudaMalloc((void **)&big, sizeof(float) * BIG_FLOATS), cudaMalloc((void **)&big_all, sizeof(float) * BIG_FLOATS);
    burst_status st = comm_allgather(c, big, big_all, sizeof(float) * BIG_FLOATS, &err);
    int ok = 1;
    if (st == BURST_OK) printf("note: the stall path did not run: the all-gather was done by its first poll\n");
    else {
        ok = st == BURST_ERR_DEVICE && strstr(err.msg, "unfinished after") != NULL;
        printf("%s a stalled all-gather aborts: %s\n", ok ? "ok  " : "FAIL", err.msg);
        burst_status next = comm_barrier(c, &err);
        int refused = next == BURST_ERR_DEVICE && strstr(err.msg, "aborted after an earlier failure") != NULL;
        printf("%s the next operation fails at once: %s\n", refused ? "ok  " : "FAIL", next ? err.msg : "it ran");
        ok &= refused;
    }
    comm_group_free(g);
    cudaFree(big), cudaFree(big_all);
    float *probe;
    int alive = cudaMalloc((void **)&probe, 4) == cudaSuccess && cudaMemset(probe, 0, 4) == cudaSuccess &&
                cudaDeviceSynchronize() == cudaSuccess && cudaFree(probe) == cudaSuccess;
    printf("%s the GPU works after the group is freed\n", alive ? "ok  " : "FAIL");
    return ok && alive;
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
    if (comm_nccl_group_new(NULL, G, 60, &g, &err)) {
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
    return !(ok & stall_aborts());
}
