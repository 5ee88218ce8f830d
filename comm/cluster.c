#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hmac.h"
#include "net.h"

#define CLUSTER_MAGIC 0x54535242u // "BRST"
#define CLUSTER_VERSION 3u
#define CLUSTER_MAX_NODES 1024

struct cluster {
    int node, n_nodes;
    int *fd;         // leader: (n_nodes) connection to each worker (fd[0] unused); worker: fd[0] to the leader
    net_addr *hosts; // (n_nodes)
    char addr[64];   // the coordinator, for messages
    uint8_t secret[SHA256_BYTES];
};

typedef struct {
    uint32_t magic, version, node, n_nodes;
} cluster_hello;

burst_status cluster_random(void *buf, size_t n, burst_error *err) {
    if (getrandom(buf, n, 0) != (ssize_t)n) return BURST_FAIL(err, BURST_ERR_IO, "getrandom: too few bytes");
    return BURST_OK;
}

// HMAC under the cluster key (none: the empty key) of a label and two 32-byte values.
static void prove(const char *key, const char *label, const uint8_t a[SHA256_BYTES], const uint8_t b[SHA256_BYTES],
                  uint8_t out[SHA256_BYTES]) {
    const void *parts[] = {label, a, b};
    size_t lens[] = {strlen(label), SHA256_BYTES, b ? SHA256_BYTES : 0};
    hmac_sha256(key ? key : "", key ? strlen(key) : 0, parts, lens, 3, out);
}

static cluster *cluster_new(int node, int n_nodes, const char *addr) {
    cluster *c = burst_calloc(1, sizeof *c);
    *c = (cluster){.node = node, .n_nodes = n_nodes};
    c->fd = burst_malloc(sizeof(int) * (size_t)n_nodes);
    for (int i = 0; i < n_nodes; i++) c->fd[i] = -1;
    c->hosts = burst_calloc((size_t)n_nodes, sizeof(net_addr));
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    return c;
}

void cluster_free(cluster *c) {
    if (!c) return;
    for (int i = 0; i < c->n_nodes; i++)
        if (c->fd[i] >= 0) close(c->fd[i]);
    free(c->fd), free(c->hosts), free(c);
}

// Leader: a joining worker says hello with its nonce, gets the leader's nonce and proof of the
// key, and answers with its own proof; the leader says whether it took it. Each side proves the
// key over both nonces, so neither the key nor a replayable answer crosses the wire. A worker must
// answer promptly: a stray connection that says nothing is dropped, not waited on.
static burst_status admit_worker(int fd, const char *key, burst_error *err) {
    cluster_hello h;
    uint8_t theirs[SHA256_BYTES], ours[SHA256_BYTES], proof[SHA256_BYTES], want[SHA256_BYTES];
    burst_status st;
    if ((st = net_set_timeout(fd, 10, err)) || (st = net_recv(fd, &h, sizeof h, err))) return st;
    if (h.magic != CLUSTER_MAGIC || h.version != CLUSTER_VERSION)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "not a burst worker (or another version): magic %08x version %u",
                          h.magic, h.version);
    if ((st = net_recv(fd, theirs, sizeof theirs, err)) || (st = cluster_random(ours, sizeof ours, err))) return st;
    prove(key, "burst leader", theirs, ours, proof);
    if ((st = net_send(fd, ours, sizeof ours, err)) || (st = net_send(fd, proof, sizeof proof, err)) ||
        (st = net_recv(fd, proof, sizeof proof, err)))
        return st;
    prove(key, "burst worker", ours, theirs, want);
    uint32_t taken = hmac_equal(proof, want);
    if ((st = net_send(fd, &taken, sizeof taken, err))) return st;
    if (!taken) return BURST_FAIL(err, BURST_ERR_INVALID, "another cluster key (BURST_CLUSTER_KEY)");
    return net_set_timeout(fd, 0, err);
}

burst_status cluster_lead(const char *addr, int n_nodes, double timeout_s, const char *key, cluster **out,
                          burst_error *err) {
    *out = NULL;
    if (n_nodes < 2 || n_nodes > CLUSTER_MAX_NODES)
        return BURST_FAIL(err, BURST_ERR_INVALID, "%d nodes (want 2..%d)", n_nodes, CLUSTER_MAX_NODES);
    net_addr ip;
    uint16_t port, bound;
    int lfd;
    burst_status st;
    if ((st = net_resolve(addr, &ip, &port, err)) || (st = net_listen(&ip, port, &lfd, &bound, err))) return st;
    cluster *c = cluster_new(0, n_nodes, addr);
    c->hosts[0] = net_loopback(net_is_v6(&ip)); // the leader reaches its own machine on loopback
    double deadline = burst_now() + timeout_s;
    LOG_I("cluster: waiting for %d worker(s) on %s", n_nodes - 1, addr);
    if (!key || !*key) LOG_W("cluster: BURST_CLUSTER_KEY is not set: any process that reaches %s can join", addr);
    for (int node = 1; node < n_nodes;) {
        int fd;
        net_addr peer;
        burst_error e;
        if ((st = net_accept(lfd, deadline, &fd, &peer, &e))) {
            BURST_FAIL(err, st, "cluster on %s: %d of %d worker(s) joined in %.0f s (%s)", addr, node - 1,
                       n_nodes - 1, timeout_s, e.msg);
            break;
        }
        char who[64];
        net_format(who, sizeof who, &peer, 0);
        if (admit_worker(fd, key, &e)) {
            LOG_W("cluster: dropped a connection from %s: %s", who, e.msg);
            close(fd);
            continue;
        }
        c->fd[node] = fd, c->hosts[node] = peer;
        LOG_I("cluster: node %d of %d joined from %s", node, n_nodes, who);
        node++;
    }
    close(lfd);
    // Each worker learns its number, every node's address (node 0: the one it dialled) and this
    // cluster's nonce, from which every node derives the secret its transports check.
    uint8_t nonce[SHA256_BYTES];
    if (!st) st = cluster_random(nonce, sizeof nonce, err);
    for (int node = 1; !st && node < n_nodes; node++) {
        cluster_hello h = {CLUSTER_MAGIC, CLUSTER_VERSION, (uint32_t)node, (uint32_t)n_nodes};
        burst_error e;
        if ((st = net_send(c->fd[node], &h, sizeof h, &e)) ||
            (st = net_send(c->fd[node], c->hosts, sizeof(net_addr) * (size_t)n_nodes, &e)) ||
            (st = net_send(c->fd[node], nonce, sizeof nonce, &e)))
            BURST_FAIL(err, st, "cluster: node %d lost (%s)", node, e.msg);
    }
    if (st) {
        cluster_free(c);
        return st;
    }
    prove(key, "burst cluster", nonce, NULL, c->secret);
    *out = c;
    return BURST_OK;
}

burst_status cluster_join(const char *addr, double timeout_s, const char *key, cluster **out, burst_error *err) {
    *out = NULL;
    net_addr ip;
    uint32_t taken = 0;
    uint16_t port;
    int fd;
    burst_status st;
    burst_error e;
    if ((st = net_resolve(addr, &ip, &port, err)) || (st = net_connect(&ip, port, burst_now() + timeout_s, &fd, err)))
        return st;
    cluster_hello h = {CLUSTER_MAGIC, CLUSTER_VERSION, 0, 0};
    uint8_t ours[SHA256_BYTES], theirs[SHA256_BYTES], proof[SHA256_BYTES], want[SHA256_BYTES];
    if ((st = cluster_random(ours, sizeof ours, err))) {
        close(fd);
        return st;
    }
    if ((st = net_send(fd, &h, sizeof h, &e)) || (st = net_send(fd, ours, sizeof ours, &e)) ||
        (st = net_recv(fd, theirs, sizeof theirs, &e)) || (st = net_recv(fd, proof, sizeof proof, &e))) {
        close(fd);
        return BURST_FAIL(err, st, "cluster at %s refused us (%s)", addr, e.msg);
    }
    prove(key, "burst leader", ours, theirs, want);
    if (!hmac_equal(proof, want)) {
        close(fd);
        return BURST_FAIL(err, BURST_ERR_INVALID, "the leader at %s has another cluster key (BURST_CLUSTER_KEY differs, "
                          "or is set on one side only)", addr);
    }
    prove(key, "burst worker", theirs, ours, proof);
    if ((st = net_send(fd, proof, sizeof proof, &e)) || (st = net_recv(fd, &taken, sizeof taken, &e)) || !taken ||
        (st = net_recv(fd, &h, sizeof h, &e))) {
        close(fd);
        if (!st) return BURST_FAIL(err, BURST_ERR_INVALID, "the leader at %s refused our cluster key", addr);
        return BURST_FAIL(err, st, "cluster at %s refused us (%s)", addr, e.msg);
    }
    if (h.magic != CLUSTER_MAGIC || h.version != CLUSTER_VERSION || h.n_nodes < 2 ||
        h.n_nodes > CLUSTER_MAX_NODES || h.node < 1 || h.node >= h.n_nodes) {
        close(fd);
        return BURST_FAIL(err, BURST_ERR_FORMAT, "cluster at %s: not a burst leader of this version", addr);
    }
    cluster *c = cluster_new((int)h.node, (int)h.n_nodes, addr);
    c->fd[0] = fd;
    uint8_t nonce[SHA256_BYTES];
    if ((st = net_recv(fd, c->hosts, sizeof(net_addr) * h.n_nodes, &e)) || (st = net_recv(fd, nonce, sizeof nonce, &e))) {
        cluster_free(c);
        return BURST_FAIL(err, st, "cluster at %s lost (%s)", addr, e.msg);
    }
    prove(key, "burst cluster", nonce, NULL, c->secret);
    c->hosts[0] = net_peer_ip(fd);
    *out = c;
    return BURST_OK;
}

int cluster_node(const cluster *c) { return c ? c->node : 0; }
const uint8_t *cluster_secret(const cluster *c) { return c->secret; }
int cluster_nodes(const cluster *c) { return c ? c->n_nodes : 1; }

const net_addr *cluster_host(const cluster *c, int node) {
    BURST_ASSERT(c && node >= 0 && node < c->n_nodes);
    return &c->hosts[node];
}

void cluster_ranks(const cluster *c, int node, int n_ranks, int *first, int *count) {
    int P = cluster_nodes(c);
    BURST_ASSERT(node >= 0 && node < P && n_ranks >= P);
    *first = (int)((int64_t)node * n_ranks / P);
    *count = (int)((int64_t)(node + 1) * n_ranks / P) - *first;
}

// One framed message: its size, then its bytes.
static burst_status send_msg(int fd, const void *msg, size_t bytes, burst_error *err) {
    uint64_t n = bytes;
    burst_status st = net_send(fd, &n, sizeof n, err);
    return st ? st : net_send(fd, msg, bytes, err);
}

burst_status cluster_allgather(cluster *c, const void *mine, void *all, size_t bytes, burst_error *err) {
    char *out = all;
    memcpy(out + (size_t)c->node * bytes, mine, bytes);
    burst_status st;
    burst_error e;
    if (c->node != 0) {
        if ((st = send_msg(c->fd[0], mine, bytes, &e)) || (st = net_recv(c->fd[0], all, (size_t)c->n_nodes * bytes, &e)))
            return BURST_FAIL(err, st, "leader at %s lost (%s)", c->addr, e.msg);
        return BURST_OK;
    }
    for (int node = 1; node < c->n_nodes; node++) {
        uint64_t n;
        if ((st = net_recv(c->fd[node], &n, sizeof n, &e)) ||
            (n == bytes && (st = net_recv(c->fd[node], out + (size_t)node * bytes, bytes, &e))))
            return BURST_FAIL(err, st, "cluster: node %d lost (%s)", node, e.msg);
        if (n != bytes)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "cluster: node %d sent %llu bytes where %zu were due", node,
                              (unsigned long long)n, bytes);
    }
    for (int node = 1; node < c->n_nodes; node++)
        if ((st = net_send(c->fd[node], all, (size_t)c->n_nodes * bytes, &e)))
            return BURST_FAIL(err, st, "cluster: node %d lost (%s)", node, e.msg);
    return BURST_OK;
}

burst_status cluster_broadcast(cluster *c, const void *msg, size_t bytes, burst_error *err) {
    BURST_ASSERT(c->node == 0);
    burst_error e;
    for (int node = 1; node < c->n_nodes; node++)
        if (send_msg(c->fd[node], msg, bytes, &e))
            return BURST_FAIL(err, BURST_ERR_IO, "cluster: node %d lost (%s)", node, e.msg);
    return BURST_OK;
}

burst_status cluster_receive(cluster *c, void **msg, size_t *bytes, burst_error *err) {
    BURST_ASSERT(c->node != 0);
    *msg = NULL;
    uint64_t n;
    burst_error e;
    if (net_recv(c->fd[0], &n, sizeof n, &e))
        return BURST_FAIL(err, BURST_ERR_IO, "leader at %s lost (%s)", c->addr, e.msg);
    if (n > ((uint64_t)1 << 32))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "leader at %s sent a message of %llu bytes", c->addr, (unsigned long long)n);
    *msg = burst_malloc(n ? (size_t)n : 1);
    if (net_recv(c->fd[0], *msg, (size_t)n, &e)) {
        free(*msg), *msg = NULL;
        return BURST_FAIL(err, BURST_ERR_IO, "leader at %s lost (%s)", c->addr, e.msg);
    }
    *bytes = (size_t)n;
    return BURST_OK;
}
