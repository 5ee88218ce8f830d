// Blocking TCP over IPv4 for the processes of a cluster (comm/cluster.h) and the TCP transport
// (comm_tcp.c): whole-buffer send and receive, listen, connect with retries until a deadline.
// Errors come back as burst_status with the peer's address and the system's reason; a closed
// peer is an error, never a signal (SIGPIPE is not raised).
#pragma once
#include <stdint.h>

#include "common/burst.h"

// "host:port" -> IPv4 address and port, both in host byte order. The host may be a name.
burst_status net_resolve(const char *addr, uint32_t *ip, uint16_t *port, burst_error *err);
void net_format(char *out, size_t cap, uint32_t ip, uint16_t port); // "a.b.c.d:port" ("a.b.c.d" for port 0)

// Listens on ip:port (port 0: any free port); *bound is the port in use.
burst_status net_listen(uint32_t ip, uint16_t port, int *fd, uint16_t *bound, burst_error *err);
// Accepts one connection before the deadline (burst_now() seconds); *peer_ip is the peer's address.
burst_status net_accept(int listen_fd, double deadline, int *fd, uint32_t *peer_ip, burst_error *err);
// Connects, retrying while the peer is not listening yet, until the deadline.
burst_status net_connect(uint32_t ip, uint16_t port, double deadline, int *fd, burst_error *err);
// The address of the far end of a connected socket.
uint32_t net_peer_ip(int fd);

// From now on a send or receive on fd that moves no byte for `seconds` fails ("timed out"): a
// peer process that hangs (alive, so keepalive cannot tell) fails the transfer instead of
// stalling it forever.
burst_status net_set_timeout(int fd, double seconds, burst_error *err);

burst_status net_send(int fd, const void *buf, size_t bytes, burst_error *err);
burst_status net_recv(int fd, void *buf, size_t bytes, burst_error *err); // all bytes, or an error
