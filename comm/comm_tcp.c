// TCP transport (comm/comm.h): rank r holds a connection to rank r+1 and one from rank r-1,
// wherever they run. Each connection has a helper thread (a "mover") that sends or receives one
// buffer when asked, so a ring step runs beside the rank's compute; all-gather is G-1 ring steps
// that pass the blocks along, barrier an all-gather of one byte.
//
// Set-up: every process listens on a free port, the ports go round the cluster (every listener
// exists before anyone dials), each rank dials its successor's process and names itself with the
// cluster's secret (cluster_secret), then each process accepts its ranks' predecessors. A failed
// transfer shuts every connection of the process down, so no rank of it stays blocked and the
// peers see the loss too.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_impl.h"
#include "hmac.h"
#include "net.h"

#define TCP_MAGIC 0x50435442u   // "BTCP"
#define TCP_CONNECT_TIMEOUT_S 60.0

typedef struct tcp_group tcp_group;

typedef struct {
    tcp_group *t;
    int fd, peer, rank, sending; // the connection to (sending) or from rank peer
    pthread_t thread;
    char *buf;
    size_t bytes;
    int pending; // a buffer was handed over and is not moved yet
    burst_status st;
    burst_error err;
} mover;

typedef struct {
    mover out, in;
} tcp_rank;

struct tcp_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, failed;
    int started; // the movers' threads run
    int n_local;
    tcp_rank *ranks; // (n_local)
};

static tcp_rank *rank_of(const comm *c) { return &((tcp_group *)c->g->impl)->ranks[c->rank - c->g->first]; }

// After one failure nothing of this process may wait on a peer: wake every blocked transfer.
static void fail_all(tcp_group *t) {
    t->failed = 1;
    for (int i = 0; i < t->n_local; i++) {
        if (t->ranks[i].out.fd >= 0) shutdown(t->ranks[i].out.fd, SHUT_RDWR);
        if (t->ranks[i].in.fd >= 0) shutdown(t->ranks[i].in.fd, SHUT_RDWR);
    }
}

static void *mover_main(void *p) {
    mover *mv = p;
    tcp_group *t = mv->t;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && !mv->pending) pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) break;
        int failed = t->failed;
        pthread_mutex_unlock(&t->mu);
        burst_error e;
        burst_status st = failed ? BURST_ERR_IO
                          : mv->sending ? net_send(mv->fd, mv->buf, mv->bytes, &e)
                                        : net_recv(mv->fd, mv->buf, mv->bytes, &e);
        if (failed) snprintf(e.msg, sizeof e.msg, "an earlier transfer of this process failed");
        pthread_mutex_lock(&t->mu);
        if (st) {
            mv->st = BURST_FAIL(&mv->err, st, "tcp: rank %d %s rank %d: %s", mv->rank,
                                mv->sending ? "sending to" : "receiving from", mv->peer, e.msg);
            if (!t->failed) fail_all(t);
        }
        mv->pending = 0;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static burst_status tcp_ring_start(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    (void)err;
    tcp_group *t = c->g->impl;
    tcp_rank *R = rank_of(c);
    pthread_mutex_lock(&t->mu);
    BURST_ASSERT(!R->out.pending && !R->in.pending);
    R->out.buf = (char *)send, R->out.bytes = bytes, R->out.pending = 1, R->out.st = BURST_OK;
    R->in.buf = recv, R->in.bytes = bytes, R->in.pending = 1, R->in.st = BURST_OK;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return BURST_OK;
}

static burst_status tcp_ring_wait(comm *c, burst_error *err) {
    tcp_group *t = c->g->impl;
    tcp_rank *R = rank_of(c);
    pthread_mutex_lock(&t->mu);
    while (R->out.pending || R->in.pending) pthread_cond_wait(&t->cv, &t->mu);
    burst_status st = R->out.st ? R->out.st : R->in.st;
    if (st) *err = R->out.st ? R->out.err : R->in.err;
    pthread_mutex_unlock(&t->mu);
    return st;
}

// Ring all-gather: at step s a rank passes on block (rank - s) and receives block (rank - s - 1).
static burst_status tcp_allgather(comm *c, const void *send, void *recv, size_t bytes, burst_error *err) {
    int n = c->g->n;
    char *all = recv;
    memmove(all + (size_t)c->rank * bytes, send, bytes);
    burst_status st = BURST_OK;
    for (int s = 0; !st && s < n - 1; s++) {
        int out = (c->rank - s + n) % n, in = (c->rank - s - 1 + n) % n;
        if (!(st = tcp_ring_start(c, all + (size_t)out * bytes, all + (size_t)in * bytes, bytes, err)))
            st = tcp_ring_wait(c, err);
    }
    return st;
}

static burst_status tcp_barrier(comm *c, burst_error *err) {
    char one = 1, *all = burst_malloc((size_t)c->g->n);
    burst_status st = tcp_allgather(c, &one, all, 1, err);
    free(all);
    return st;
}

static void tcp_group_free(comm_group *g) {
    tcp_group *t = g->impl;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_local; i++) {
        mover *mv[2] = {&t->ranks[i].out, &t->ranks[i].in};
        for (int j = 0; j < 2; j++) {
            if (t->started) BURST_CHECK_GEN(pthread_join(mv[j]->thread, NULL), 0, strerror);
            if (mv[j]->fd >= 0) close(mv[j]->fd);
        }
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t->ranks);
    free(t);
    comm_group_release(g);
}

static const comm_ops tcp_ops = {
    .ring_start = tcp_ring_start,
    .ring_wait = tcp_ring_wait,
    .allgather = tcp_allgather,
    .barrier = tcp_barrier,
    .group_free = tcp_group_free,
};

// The node that runs rank r.
static int node_of(const cluster *cl, int n_ranks, int r) {
    for (int node = 0;; node++) {
        int first, count;
        cluster_ranks(cl, node, n_ranks, &first, &count);
        if (r < first + count) return node;
    }
}

// A rank's hello to its successor: who it is, and the cluster's secret (only the cluster's own
// processes know it).
typedef struct {
    uint32_t magic, rank;
    uint8_t secret[SHA256_BYTES];
} tcp_hello;

// Dials each local rank's successor, then accepts each local rank's predecessor.
static burst_status connect_ring(tcp_group *t, cluster *cl, int n, int first, int lfd, const uint32_t *ports,
                                 const uint8_t *secret, burst_error *err) {
    double deadline = burst_now() + TCP_CONNECT_TIMEOUT_S;
    burst_status st;
    for (int i = 0; i < t->n_local; i++) {
        int to = (first + i + 1) % n, node = node_of(cl, n, to);
        net_addr host = cl ? *cluster_host(cl, node) : net_loopback(0);
        tcp_hello hello = {TCP_MAGIC, (uint32_t)(first + i), {0}};
        memcpy(hello.secret, secret, SHA256_BYTES);
        mover *out = &t->ranks[i].out;
        out->peer = to;
        if ((st = net_connect(&host, (uint16_t)ports[node], deadline, &out->fd, err)) ||
            (st = net_send(out->fd, &hello, sizeof hello, err)))
            return st;
    }
    for (int i = 0; i < t->n_local; i++) {
        int fd;
        net_addr peer;
        tcp_hello hello;
        if ((st = net_accept(lfd, deadline, &fd, &peer, err))) return st;
        if ((st = net_recv(fd, &hello, sizeof hello, err))) {
            close(fd);
            return st;
        }
        int to = (int)((hello.rank + 1) % (uint32_t)n) - first;
        if (hello.magic != TCP_MAGIC || !hmac_equal(hello.secret, secret) || hello.rank >= (uint32_t)n || to < 0 ||
            to >= t->n_local || t->ranks[to].in.fd >= 0) {
            close(fd);
            char who[64];
            net_format(who, sizeof who, &peer, 0);
            return BURST_FAIL(err, BURST_ERR_FORMAT, "tcp: unexpected connection from %s (magic %08x, rank %u%s)", who,
                              hello.magic, hello.rank, hmac_equal(hello.secret, secret) ? "" : ", not this cluster's secret");
        }
        t->ranks[to].in.fd = fd;
        t->ranks[to].in.peer = (int)hello.rank;
    }
    return BURST_OK;
}

burst_status comm_tcp_group_new(cluster *cl, int n_ranks, double stall_s, comm_group **out, burst_error *err) {
    *out = NULL;
    int P = cluster_nodes(cl), node = cluster_node(cl), first, count;
    if (n_ranks < P) return BURST_FAIL(err, BURST_ERR_INVALID, "tcp: %d ranks over %d nodes (want at least one each)", n_ranks, P);
    cluster_ranks(cl, node, n_ranks, &first, &count);
    int lfd;
    uint16_t port;
    // Alone, everything stays on loopback; in a cluster the other machines must reach us, at an
    // address of the family the cluster uses.
    net_addr any = cl ? net_any(net_is_v6(cluster_host(cl, 0))) : net_loopback(0);
    burst_status st = net_listen(&any, 0, &lfd, &port, err);
    if (st) return st;
    uint32_t *ports = burst_calloc((size_t)P, sizeof(uint32_t)), mine = port;
    if (cl) st = cluster_allgather(cl, &mine, ports, sizeof mine, err);
    else ports[0] = mine;
    tcp_group *t = burst_calloc(1, sizeof *t);
    t->n_local = count;
    t->ranks = burst_calloc((size_t)count, sizeof *t->ranks);
    for (int i = 0; i < count; i++) {
        t->ranks[i].out = (mover){.t = t, .fd = -1, .rank = first + i, .sending = 1};
        t->ranks[i].in = (mover){.t = t, .fd = -1, .rank = first + i};
    }
    BURST_CHECK_GEN(pthread_mutex_init(&t->mu, NULL), 0, strerror);
    BURST_CHECK_GEN(pthread_cond_init(&t->cv, NULL), 0, strerror);
    uint8_t alone[SHA256_BYTES]; // one process's ranks: a secret of its own
    if (!st && !cl) st = cluster_random(alone, sizeof alone, err);
    if (!st) st = connect_ring(t, cl, n_ranks, first, lfd, ports, cl ? cluster_secret(cl) : alone, err);
    for (int i = 0; !st && i < count; i++)
        if (!(st = net_set_timeout(t->ranks[i].out.fd, stall_s, err))) st = net_set_timeout(t->ranks[i].in.fd, stall_s, err);
    close(lfd);
    free(ports);
    comm_group *g = comm_group_alloc(&tcp_ops, n_ranks, first, count, t);
    if (st) {
        tcp_group_free(g);
        return st;
    }
    for (int i = 0; i < count; i++) {
        BURST_CHECK_GEN(pthread_create(&t->ranks[i].out.thread, NULL, mover_main, &t->ranks[i].out), 0, strerror);
        BURST_CHECK_GEN(pthread_create(&t->ranks[i].in.thread, NULL, mover_main, &t->ranks[i].in), 0, strerror);
    }
    t->started = 1;
    *out = g;
    return BURST_OK;
}
