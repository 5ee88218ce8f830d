// BurstAttention over G thread ranks (attention/ring.h) against a float64 naive reference:
// O and lse for G in {1,2,3,4,8}, N in {1,7,64,1000,4097}, causal (zigzag partition) and not
// (contiguous), GQA ratios 1/2/4, head_dim 64/128; and the sharded all-gather merge of decode.
// Every case runs with the ranks talking through the in-process transport, and all but the
// largest again over loopback TCP. Every other shape keeps K/V in bf16 (a bf16 KV cache): its K/V
// are rounded to bf16 first, so the float64 reference sees the same values and the bound stays.
// The transfer blocks have room for twice the rows any rank holds; only the rows held travel.
#include <pthread.h>

#include "attention/ring.h"
#include "tests/test_util.h"

typedef struct {
    int N, G, n_heads, n_kv, d, causal;
    int tcp; // comm over loopback TCP (comm_tcp.c) instead of threads
    burst_dtype kv_dtype;   // of the K/V the ranks hold: F32 or BF16
    const float *q, *k, *v; // full sequence: (N, heads, d), (N, kv, d)
    float *o;               // (N, heads, d) gathered by position
    float *lse;             // (heads, N) gathered by position
    comm_group *grp;
} ring_case;

typedef struct {
    ring_case *c;
    int rank;
    int rc;
} rank_job;

static seq_part part_of(const ring_case *c, int r) {
    return c->causal ? partition_zigzag(c->N, c->G, r) : partition_contiguous(c->N, c->G, r);
}

// Copies the rows of a seq_part out of a full (N, width) array into a packed one, or back.
static void gather_rows(float *dst, const float *src, const seq_part *p, int64_t width, int to_full) {
    int64_t row = 0;
    for (int t = 0; t < p->n_runs; t++)
        for (int64_t i = 0; i < p->run[t].len; i++, row++) {
            int64_t pos = p->run[t].start + i;
            if (to_full) memcpy(dst + pos * width, src + row * width, (size_t)width * sizeof(float));
            else memcpy(dst + row * width, src + pos * width, (size_t)width * sizeof(float));
        }
}

// A new copy of n floats in dtype t (F32, or BF16 for values already rounded to bf16).
static void *kv_rows(const float *x, int64_t n, burst_dtype t) {
    void *out = malloc(dtype_size(t) * (size_t)(n + 1));
    if (t == DTYPE_F32) memcpy(out, x, sizeof(float) * (size_t)n);
    else for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[i] = f32_to_bf16(x[i]);
    return out;
}

static void *rank_main(void *arg) {
    rank_job *job = arg;
    ring_case *c = job->c;
    int64_t dim = (int64_t)c->n_heads * c->d, kv_dim = (int64_t)c->n_kv * c->d, max_rows = 0;
    for (int r = 0; r < c->G; r++) {
        seq_part p = part_of(c, r);
        if (seq_part_len(&p) > max_rows) max_rows = seq_part_len(&p);
    }
    seq_part p = part_of(c, job->rank), parts[8];
    for (int r = 0; r < c->G; r++) parts[r] = part_of(c, r);
    int64_t n = seq_part_len(&p);
    float *q = malloc(sizeof(float) * (size_t)(n * dim + 1)), *k = malloc(sizeof(float) * (size_t)(n * kv_dim + 1));
    float *v = malloc(sizeof(float) * (size_t)(n * kv_dim + 1)), *o = test_alloc_guarded(n * dim);
    float *lse = test_alloc_guarded(n * c->n_heads);
    // A block's room past what any rank holds, as a KV cache's shard capacity leaves it: only the
    // rows held travel.
    const int64_t room = 2 * max_rows + 3;
    void *work = malloc(ring_workspace_bytes(c->G, n, room, c->n_heads, c->n_kv, c->d, c->kv_dtype));
    gather_rows(q, c->q, &p, dim, 0);
    gather_rows(k, c->k, &p, kv_dim, 0);
    gather_rows(v, c->v, &p, kv_dim, 0);
    void *ks = kv_rows(k, n * kv_dim, c->kv_dtype), *vs = kv_rows(v, n * kv_dim, c->kv_dtype);
    ring_args a = {.c = comm_group_rank(c->grp, job->rank), .q = q, .k = ks, .v = vs, .kv_dtype = c->kv_dtype, .o = o, .lse = lse,
                   .q_stride = dim, .o_stride = dim, .q_part = p, .k_parts = parts,
                   .n_heads = c->n_heads, .n_kv_heads = c->n_kv, .head_dim = c->d, .causal = c->causal,
                   .scale = 1.0f / sqrtf((float)c->d), .max_block_rows = room, .work = work};
    burst_error err;
    *ring_stats_self() = (ring_stats){0};
    job->rc = ring_attention(&a, &err) != BURST_OK;
    if (job->rc) printf("rank %d: %s\n", job->rank, err.msg);
    const int64_t want_bytes = (int64_t)(c->G - 1) * 2 * max_rows * kv_dim * (int64_t)dtype_size(c->kv_dtype);
    if (ring_stats_self()->bytes != want_bytes) {
        printf("rank %d sent %lld K/V bytes, want %lld (the rows held, not the room)\n", job->rank,
               (long long)ring_stats_self()->bytes, (long long)want_bytes);
        job->rc = 1;
    }
    job->rc |= !test_guard_ok(o, n * dim, "o") || !test_guard_ok(lse, n * c->n_heads, "lse");
    gather_rows(c->o, o, &p, dim, 1);
    // lse comes as one (heads, run len) block per run: scatter to (heads, N).
    int64_t row = 0;
    for (int t = 0; t < p.n_runs; t++) {
        for (int h = 0; h < c->n_heads; h++)
            for (int64_t i = 0; i < p.run[t].len; i++)
                c->lse[(int64_t)h * c->N + p.run[t].start + i] = lse[row * c->n_heads + h * p.run[t].len + i];
        row += p.run[t].len;
    }
    free(q), free(k), free(v), free(ks), free(vs), free(o), free(lse), free(work);
    return NULL;
}

// Naive float64 attention with positions 0..N-1.
static void reference(const ring_case *c, double *o, double *lse) {
    int64_t dim = (int64_t)c->n_heads * c->d, kv_dim = (int64_t)c->n_kv * c->d;
    double *s = malloc(sizeof(double) * (size_t)c->N);
    for (int h = 0; h < c->n_heads; h++) {
        int kh = h / (c->n_heads / c->n_kv);
        for (int i = 0; i < c->N; i++) {
            int nk = c->causal ? i + 1 : c->N;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < nk; j++) {
                double dot = 0;
                for (int e = 0; e < c->d; e++)
                    dot += (double)c->q[i * dim + h * c->d + e] * c->k[j * kv_dim + kh * c->d + e];
                s[j] = dot / sqrt((double)c->d);
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < nk; j++) sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < c->d; e++) {
                double acc = 0;
                for (int j = 0; j < nk; j++) acc += s[j] * c->v[j * kv_dim + kh * c->d + e];
                o[i * dim + h * c->d + e] = acc / sum;
            }
            lse[(int64_t)h * c->N + i] = mx + log(sum);
        }
    }
    free(s);
}

// The ranks talk through the in-process transport, or over loopback TCP (c->tcp).
static comm_group *new_group(const ring_case *c) {
    if (!c->tcp) return comm_threads_group_new(c->G, NULL);
    comm_group *g;
    burst_error err;
    if (comm_tcp_group_new(NULL, c->G, 600, &g, &err)) {
        fprintf(stderr, "tcp group of %d: %s\n", c->G, err.msg);
        exit(1);
    }
    return g;
}

static int run_ring(ring_case *c, const double *ref_o, const double *ref_lse) {
    c->grp = new_group(c);
    pthread_t th[8];
    rank_job jobs[8];
    for (int r = 0; r < c->G; r++) {
        jobs[r] = (rank_job){.c = c, .rank = r};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    int ok = 1;
    for (int r = 0; r < c->G; r++) pthread_join(th[r], NULL), ok &= !jobs[r].rc;
    comm_group_free(c->grp);
    char what[128];
    int64_t dim = (int64_t)c->n_heads * c->d;
    snprintf(what, sizeof what, "%s G=%d N=%d %s heads=%d kv=%d d=%d %s O", c->tcp ? "tcp" : "threads", c->G, c->N,
             c->causal ? "causal" : "full", c->n_heads, c->n_kv, c->d, dtype_name(c->kv_dtype));
    // float32 compute over sums of up to 4097 terms: relative error ~1e-6; 1e-5 is the bound.
    ok &= test_compare(what, c->o, ref_o, (int64_t)c->N * dim, 1e-10, 1e-5, 1e-5);
    snprintf(what, sizeof what, "G=%d N=%d lse", c->G, c->N);
    // lse may be near 0 (N = 1: one small score), where nmse is ill-conditioned: the elementwise
    // bound carries the check and the nmse bound only catches gross errors.
    ok &= test_compare(what, c->lse, ref_lse, (int64_t)c->N * c->n_heads, 1e-9, 1e-5, 1e-5);
    return ok;
}

// Decode: every rank holds the same nq queries and one contiguous shard of the keys (uneven,
// some empty); each attends to its shard and sharded_merge combines the partials. The queries
// come as two parts (two sequences of a step: the first row, then the rest), each with its own
// lse block, merged in one all-gather.
typedef struct {
    const ring_case *c;
    int rank, nq;
    const int64_t *shard_start; // (G + 1)
    float *o, *lse;             // per rank outputs (nq, dim), (heads, nq)
    int rc;
} merge_job;

static void *merge_rank_main(void *arg) {
    merge_job *j = arg;
    const ring_case *c = j->c;
    int64_t dim = (int64_t)c->n_heads * c->d, kv_dim = (int64_t)c->n_kv * c->d;
    int64_t k0 = j->shard_start[j->rank], nk = j->shard_start[j->rank + 1] - k0;
    void *k = kv_rows(c->k + k0 * kv_dim, nk * kv_dim, c->kv_dtype), *v = kv_rows(c->v + k0 * kv_dim, nk * kv_dim, c->kv_dtype);
    merge_part parts[2];
    int n_parts = 0;
    for (int row = 0; row < j->nq; n_parts++) {
        int n = row == 0 && j->nq > 1 ? 1 : j->nq - row;
        parts[n_parts] = (merge_part){.o = j->o + row * dim, .lse = j->lse + row * c->n_heads, .n = n};
        flash_args a = {.q = c->q + (int64_t)(c->N - j->nq + row) * dim, .k = k, .v = v, .kv_dtype = c->kv_dtype,
                        .o = parts[n_parts].o, .lse = parts[n_parts].lse, .q_stride = dim, .kv_stride = kv_dim,
                        .o_stride = dim, .nq = n, .nk = (int)nk, .n_heads = c->n_heads, .n_kv_heads = c->n_kv,
                        .head_dim = c->d, .q_pos0 = c->N - j->nq + row, .k_pos0 = k0, .causal = 0,
                        .scale = 1.0f / sqrtf((float)c->d)};
        flash_cpu(&a, 1);
        row += n;
    }
    free(k), free(v);
    float *work = malloc(sizeof(float) * (size_t)sharded_merge_work_floats(c->G, j->nq, c->n_heads, c->d));
    burst_error err;
    j->rc = sharded_merge(comm_group_rank(c->grp, j->rank), NULL, parts, n_parts, c->n_heads, c->d, work, &err) != BURST_OK;
    free(work);
    return NULL;
}

// The last nq queries of a non-causal case attend to all N keys through G shards.
static int run_sharded_merge(ring_case *c, const double *ref_o, const double *ref_lse, int nq) {
    int64_t dim = (int64_t)c->n_heads * c->d, starts[9] = {0};
    for (int r = 1; r < c->G; r++) starts[r] = (int64_t)(test_uniform(0, 1) * (c->N + 1));
    starts[c->G] = c->N;
    for (int r = 1; r < c->G; r++) // sorted cut points: shards may be empty
        for (int u = r; u > 1 && starts[u] < starts[u - 1]; u--) {
            int64_t t = starts[u]; starts[u] = starts[u - 1]; starts[u - 1] = t;
        }
    c->grp = new_group(c);
    pthread_t th[8];
    merge_job jobs[8];
    for (int r = 0; r < c->G; r++) {
        jobs[r] = (merge_job){.c = c, .rank = r, .nq = nq, .shard_start = starts,
                              .o = malloc(sizeof(float) * (size_t)(nq * dim)),
                              .lse = malloc(sizeof(float) * (size_t)(nq * c->n_heads))};
        pthread_create(&th[r], NULL, merge_rank_main, &jobs[r]);
    }
    int ok = 1;
    for (int r = 0; r < c->G; r++) pthread_join(th[r], NULL), ok &= !jobs[r].rc;
    comm_group_free(c->grp);
    double *ro = malloc(sizeof(double) * (size_t)(nq * dim)), *rl = malloc(sizeof(double) * (size_t)(nq * c->n_heads));
    for (int64_t i = 0; i < nq * dim; i++) ro[i] = ref_o[(int64_t)(c->N - nq) * dim + i];
    for (int row = 0; row < nq;) { // lse in the parts' blocks: (heads, 1) for row 0, then (heads, nq - 1)
        int n = row == 0 && nq > 1 ? 1 : nq - row;
        for (int h = 0; h < c->n_heads; h++)
            for (int i = 0; i < n; i++) rl[row * c->n_heads + h * n + i] = ref_lse[(int64_t)h * c->N + c->N - nq + row + i];
        row += n;
    }
    char what[96];
    for (int r = 0; r < c->G; r++) { // every rank ends with the same merged result
        snprintf(what, sizeof what, "%s sharded merge G=%d N=%d rank %d O", c->tcp ? "tcp" : "threads", c->G, c->N, r);
        ok &= test_compare(what, jobs[r].o, ro, nq * dim, 1e-10, 1e-5, 1e-5);
        snprintf(what, sizeof what, "%s sharded merge G=%d N=%d rank %d lse", c->tcp ? "tcp" : "threads", c->G, c->N, r);
        ok &= test_compare(what, jobs[r].lse, rl, nq * c->n_heads, 1e-9, 1e-5, 1e-5);
        free(jobs[r].o), free(jobs[r].lse);
    }
    free(ro), free(rl);
    return ok;
}

// seq_part_coalesce, and the coalesced partitions: G = 1's zigzag is one run, a middle rank's
// two chunks join, a rank without tokens has no run. Returns 1 when all hold.
static int test_coalesce(void) {
    seq_part p = {.n_runs = 4, .run = {{0, 0}, {0, 5}, {5, 3}, {10, 2}}}; // empty, joined pair, gap
    seq_part_coalesce(&p);
    int ok = p.n_runs == 2 && p.run[0].start == 0 && p.run[0].len == 8 && p.run[1].start == 10 && p.run[1].len == 2;
    seq_part one = partition_zigzag(10, 1, 0), mid = partition_zigzag(12, 3, 2), none = partition_zigzag(1, 2, 1);
    ok &= one.n_runs == 1 && one.run[0].start == 0 && one.run[0].len == 10;
    ok &= mid.n_runs == 1 && mid.run[0].start == 4 && mid.run[0].len == 4; // chunks 2 and 3 of 6
    ok &= none.n_runs == 0 && seq_part_len(&none) == 0;
    printf("%s seq_part_coalesce and coalesced partitions\n", ok ? "ok  " : "FAIL");
    return ok;
}

// seq_part_last: the last k rows of a part of three runs (one empty), whole runs and part of one.
// Returns 1 when all hold.
static int test_part_last(void) {
    const seq_part p = {.n_runs = 3, .run = {{0, 5}, {7, 0}, {20, 3}}};
    const seq_part none = seq_part_last(&p, 0), two = seq_part_last(&p, 2), three = seq_part_last(&p, 3),
                   four = seq_part_last(&p, 4), all = seq_part_last(&p, 8);
    int ok = none.n_runs == 0;
    ok &= two.n_runs == 1 && two.run[0].start == 21 && two.run[0].len == 2;
    ok &= three.n_runs == 1 && three.run[0].start == 20 && three.run[0].len == 3;
    ok &= seq_part_len(&four) == 4 && four.run[0].start == 4 && four.run[0].len == 1 && four.run[four.n_runs - 1].start == 20;
    ok &= all.n_runs == 3 && all.run[0].start == 0 && all.run[0].len == 5 && seq_part_len(&all) == 8;
    printf("%s seq_part_last\n", ok ? "ok  " : "FAIL");
    return ok;
}

// A rank holding more K/V rows than the transfer block's room is refused (BURST_ERR_INVALID, with
// the numbers) before anything is written: the outputs keep their contents. Returns 1 when so.
static int test_block_too_small(void) {
    comm_group *g = comm_threads_group_new(1, NULL);
    seq_part p = partition_contiguous(10, 1, 0);
    float q[10 * 4] = {0}, k[10 * 4] = {0}, v[10 * 4] = {0}, o[10 * 4], lse[10], work[64];
    for (int i = 0; i < 40; i++) o[i] = 7;
    ring_args a = {.c = comm_group_rank(g, 0), .q = q, .k = k, .v = v, .kv_dtype = DTYPE_F32, .o = o, .lse = lse,
                   .q_stride = 4, .o_stride = 4, .q_part = p, .k_parts = &p, .n_heads = 1, .n_kv_heads = 1,
                   .head_dim = 4, .causal = 1, .scale = 0.5f, .max_block_rows = 9, .work = work};
    burst_error err;
    burst_status st = ring_attention(&a, &err);
    int ok = st == BURST_ERR_INVALID && strstr(err.msg, "rank 0: 10 K/V rows exceed the block of 9") != NULL;
    for (int i = 0; i < 40; i++) ok &= o[i] == 7;
    printf("%s K/V rows past the block refused: %s\n", ok ? "ok  " : "FAIL", st ? err.msg : "it ran");
    comm_group_free(g);
    return ok;
}

int main(void) {
    test_seed("test_ring");
    static const int Ns[] = {1, 7, 64, 1000, 4097}, Gs[] = {1, 2, 3, 4, 8};
    // (heads, kv heads, head_dim, causal) per N. The float64 reference at N=4097 is the slow part,
    // so the largest N runs its own two small shapes.
    static const int shapes[][4] = {{4, 4, 64, 1}, {4, 2, 128, 0}, {8, 2, 64, 1}, {4, 1, 128, 1}, {2, 2, 128, 0}};
    static const int large_shapes[][4] = {{4, 2, 64, 1}, {2, 2, 64, 0}};
    int ok = test_coalesce() & test_part_last() & test_block_too_small();
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
        int N = Ns[ni], n_shapes = N > 1000 ? 2 : 5;
        for (int si = 0; si < n_shapes; si++) {
            const int *sh = N > 1000 ? large_shapes[si] : shapes[si];
            ring_case c = {.N = N, .n_heads = sh[0], .n_kv = sh[1], .d = sh[2], .causal = sh[3],
                           .kv_dtype = si % 2 ? DTYPE_BF16 : DTYPE_F32};
            int64_t dim = (int64_t)c.n_heads * c.d, kv_dim = (int64_t)c.n_kv * c.d;
            float *q = malloc(sizeof(float) * (size_t)(N * dim)), *k = malloc(sizeof(float) * (size_t)(N * kv_dim));
            float *v = malloc(sizeof(float) * (size_t)(N * kv_dim));
            test_fill(q, N * dim, -2, 2), test_fill(k, N * kv_dim, -2, 2), test_fill(v, N * kv_dim, -1, 1);
            for (int64_t i = 0; c.kv_dtype == DTYPE_BF16 && i < N * kv_dim; i++)
                k[i] = bf16_to_f32(f32_to_bf16(k[i])), v[i] = bf16_to_f32(f32_to_bf16(v[i]));
            c.q = q, c.k = k, c.v = v;
            c.o = malloc(sizeof(float) * (size_t)(N * dim));
            c.lse = malloc(sizeof(float) * (size_t)(N * c.n_heads));
            double *ro = malloc(sizeof(double) * (size_t)(N * dim)), *rl = malloc(sizeof(double) * (size_t)(N * c.n_heads));
            reference(&c, ro, rl);
            // TCP for the sizes below 4097 only, whose blocks (up to 1 MB) already take many
            // partial sends: the large cases are the slow part of this test under ASan.
            for (size_t gi = 0; gi < 2 * sizeof Gs / sizeof Gs[0]; gi++) {
                c.G = Gs[gi / 2], c.tcp = gi % 2;
                if (c.tcp && N > 1000) continue;
                ok &= run_ring(&c, ro, rl);
                if (!c.causal) ok &= run_sharded_merge(&c, ro, rl, N < 3 ? N : 3);
            }
            free(q), free(k), free(v), free(c.o), free(c.lse), free(ro), free(rl);
        }
    }
    printf("%s\n", ok ? "all passed" : "FAILED");
    return ok ? 0 : 1;
}
