// The processes ("nodes") that together run one model's G ranks, on one machine or several.
// Node 0, the leader (burstd or burst generate), listens on the coordinator address; nodes
// 1..P-1 (burst worker) connect to it and get their node number in the order they arrive. Each
// node runs a contiguous range of the ranks (cluster_ranks). The leader's connections then carry
// the start-up exchange (cluster_allgather: the model's options, a transport's addresses, NCCL's
// unique id) and, after it, the leader's commands to the workers (cluster_broadcast), in order.
// The ranks' own data never passes here: it goes through a comm transport (comm/comm.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/burst.h"
#include "net.h"

typedef struct cluster cluster;

// Every node holds the same key (the BURST_CLUSTER_KEY of its environment; NULL or "": none, which
// only matches none). The leader admits a worker, and the worker its leader, only when the other
// proves it holds the key (HMAC-SHA-256 over fresh nonces: the key never crosses the wire); a
// connection that cannot is dropped with a line saying why. The data that follows is not
// encrypted: the key keeps out processes that reach the ports, not those that watch the network.
//
// Leader: listens on addr ("host:port", "[ipv6]:port") and waits until n_nodes - 1 workers have joined, or
// timeout_s has passed.
burst_status cluster_lead(const char *addr, int n_nodes, double timeout_s, const char *key, cluster **out,
                          burst_error *err);
// Worker: connects to the leader at addr, retrying until timeout_s (the leader may start later).
burst_status cluster_join(const char *addr, double timeout_s, const char *key, cluster **out, burst_error *err);
void cluster_free(cluster *c);

int cluster_node(const cluster *c);  // 0 on the leader; NULL cluster: 0
int cluster_nodes(const cluster *c); // P; NULL cluster: 1
// 32 bytes every node of this cluster derives from the key and a nonce of this run: a transport's
// connections carry it, so that only the cluster's own processes are taken (comm_tcp).
const uint8_t *cluster_secret(const cluster *c);
// n random bytes from the system.
burst_status cluster_random(void *buf, size_t n, burst_error *err);
// The address at which this node reaches node i's machine.
const net_addr *cluster_host(const cluster *c, int node);
// The ranks node `node` runs out of n_ranks: [*first, *first + *count), an even split. With a
// NULL cluster: all of them.
void cluster_ranks(const cluster *c, int node, int n_ranks, int *first, int *count);

// Every node passes `bytes` bytes; all (n_nodes * bytes) gets every node's, in node order. Every
// node must call it, with the same size.
burst_status cluster_allgather(cluster *c, const void *mine, void *all, size_t bytes, burst_error *err);
// Leader: sends one message to every worker. Worker: receives the next one (*msg is malloc'd).
burst_status cluster_broadcast(cluster *c, const void *msg, size_t bytes, burst_error *err);
burst_status cluster_receive(cluster *c, void **msg, size_t *bytes, burst_error *err);
