// Ring attention on G CPU ranks (threads, one core each): time per ring step split into local
// compute and waiting for the K/V transfer, to show that the transfer hides behind compute. The
// ranks talk through the in-process transport, or with --tcp 1 over loopback TCP (comm_tcp.c,
// the transport of CPU ranks on several machines). --kv-bf16 1 holds K/V in bf16, as a bf16 KV
// cache does (half the bytes on the ring; the CPU widens each tile, or, with AMX, multiplies it
// as stored: BURST_AMX=0 times the vector loops). --qp-bf16 1 rounds Q and P to bf16 where AMX or
// AVX512-BF16 runs a tile, as the cpu-bf16 backend does (flash_args.qp_bf16).
//   bench_ring [--ranks G] [--heads H] [--kv-heads K] [--head-dim D] [--tcp 0|1] [--kv-bf16 0|1] [--qp-bf16 0|1] N [N ...]
// Causal, zigzag partition, random inputs; one run per N (no warm-up: one step is seconds long).
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/ring.h"

// The CPU's attention with Q and P rounded to bf16 (--qp-bf16 1), in ring_cpu_ops's place.
static void attend_qp_bf16(void *ctx, const flash_args *a) {
    flash_args rounded = *a;
    rounded.qp_bf16 = 1;
    flash_cpu(&rounded, 1);
}
static attn_ops qp_bf16_ops; // ring_cpu_ops but for attend (main)

typedef struct {
    int N, G, H, K, D, rank, qp_bf16;
    burst_dtype kv_dtype;
    comm_group *grp;
    double secs;
    ring_stats stats;
} job;

static void *rank_main(void *p) {
    job *j = p;
    omp_set_num_threads(1);
    seq_part parts[64];
    int64_t max_rows = 0;
    for (int r = 0; r < j->G; r++) {
        parts[r] = partition_zigzag(j->N, j->G, r);
        if (seq_part_len(&parts[r]) > max_rows) max_rows = seq_part_len(&parts[r]);
    }
    int64_t n = seq_part_len(&parts[j->rank]), dim = (int64_t)j->H * j->D, kv_dim = (int64_t)j->K * j->D;
    float *q = burst_malloc(sizeof(float) * (size_t)(n * dim)), *o = burst_malloc(sizeof(float) * (size_t)(n * dim));
    char *k = burst_malloc(dtype_size(j->kv_dtype) * (size_t)(n * kv_dim));
    float *lse = burst_malloc(sizeof(float) * (size_t)(n * j->H));
    void *work = burst_malloc(ring_workspace_bytes(j->G, n, max_rows, j->H, j->K, j->D, j->kv_dtype));
    unsigned seed = 1234u + (unsigned)j->rank;
    for (int64_t i = 0; i < n * dim; i++) q[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < n * kv_dim; i++) {
        float x = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
        if (j->kv_dtype == DTYPE_F32) ((float *)k)[i] = x;
        else ((uint16_t *)k)[i] = f32_to_bf16(x);
    }
    ring_args a = {.c = comm_group_rank(j->grp, j->rank), .ops = j->qp_bf16 ? &qp_bf16_ops : NULL, .q = q, .k = k, .v = k, .kv_dtype = j->kv_dtype, .o = o, .lse = lse,
                   .q_stride = dim, .o_stride = dim, .q_part = parts[j->rank], .k_parts = parts,
                   .n_heads = j->H, .n_kv_heads = j->K, .head_dim = j->D, .causal = 1,
                   .scale = 0.125f, .max_block_rows = max_rows, .work = work};
    *ring_stats_self() = (ring_stats){0};
    burst_error err;
    double t0 = burst_now();
    if (ring_attention(&a, &err)) fprintf(stderr, "E %s\n", err.msg), exit(1);
    j->secs = burst_now() - t0;
    j->stats = *ring_stats_self();
    free(q), free(o), free(k), free(lse), free(work);
    return NULL;
}

int main(int argc, char **argv) {
    int G = 2, H = 4, K = 2, D = 64, tcp = 0, kv_bf16 = 0, qp_bf16 = 0, first_n = 1;
    qp_bf16_ops = ring_cpu_ops, qp_bf16_ops.attend = attend_qp_bf16;
    for (; first_n + 1 < argc && argv[first_n][0] == '-'; first_n += 2) {
        int v = atoi(argv[first_n + 1]);
        if (!strcmp(argv[first_n], "--ranks")) G = v;
        else if (!strcmp(argv[first_n], "--heads")) H = v;
        else if (!strcmp(argv[first_n], "--kv-heads")) K = v;
        else if (!strcmp(argv[first_n], "--head-dim")) D = v;
        else if (!strcmp(argv[first_n], "--tcp")) tcp = v;
        else if (!strcmp(argv[first_n], "--kv-bf16")) kv_bf16 = v;
        else if (!strcmp(argv[first_n], "--qp-bf16")) qp_bf16 = v;
        else return fprintf(stderr, "unknown option %s\n", argv[first_n]), 2;
    }
    if (first_n >= argc || G < 1 || G > 64) {
        fprintf(stderr, "usage: bench_ring [--ranks G] [--heads H] [--kv-heads K] [--head-dim D] [--tcp 0|1] [--kv-bf16 0|1] [--qp-bf16 0|1] N [N ...]\n");
        return 2;
    }
    printf("ring attention, causal zigzag, G=%d ranks x 1 thread, heads %d (kv %d), d %d, K/V %s, Q and P %s, %s transport\n",
           G, H, K, D, kv_bf16 ? "bf16" : "f32", qp_bf16 ? "bf16 (on AMX or AVX512-BF16)" : "f32", tcp ? "loopback TCP" : "in-process");
    printf("%8s %10s %14s %18s %8s\n", "N", "total s", "compute/step", "wait/transfer", "wait %");
    for (int i = first_n; i < argc; i++) {
        job jobs[64];
        pthread_t th[64];
        comm_group *grp = NULL;
        burst_error err;
        if (!tcp) grp = comm_threads_group_new(G, NULL);
        else if (comm_tcp_group_new(NULL, G, 600, &grp, &err)) return fprintf(stderr, "E %s\n", err.msg), 1;
        for (int r = 0; r < G; r++) {
            jobs[r] = (job){.N = atoi(argv[i]), .G = G, .H = H, .K = K, .D = D, .rank = r, .qp_bf16 = qp_bf16, .grp = grp,
                            .kv_dtype = kv_bf16 ? DTYPE_BF16 : DTYPE_F32};
            pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        }
        double total = 0, comp = 0, wait = 0;
        int64_t steps = 0, transfers = 0;
        for (int r = 0; r < G; r++) {
            pthread_join(th[r], NULL);
            total = jobs[r].secs > total ? jobs[r].secs : total;
            comp += jobs[r].stats.compute_s, wait += jobs[r].stats.wait_s, steps += jobs[r].stats.steps;
            transfers += jobs[r].stats.transfers;
        }
        comm_group_free(grp);
        printf("%8d %10.3f %11.2f ms %15.3f ms %7.2f%%\n", jobs[0].N, total, 1e3 * comp / steps,
               transfers ? 1e3 * wait / transfers : 0.0, 100 * wait / (comp + wait));
    }
    return 0;
}
