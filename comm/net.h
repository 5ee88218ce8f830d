// Blocking TCP over IPv4 or IPv6 for the processes of a cluster (comm/cluster.h) and the TCP
// transport (comm_tcp.c): whole-buffer send and receive, listen, connect with retries until a
// deadline. Errors come back as burst_status with the peer's address and the system's reason; a
// closed peer is an error, never a signal (SIGPIPE is not raised).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/burst.h"

// An IPv6 address, IPv4 ones mapped into it (::ffff:a.b.c.d). A socket takes the family of its
// address, so IPv4 works on machines without IPv6.
typedef struct {
    uint8_t b[16];
} net_addr;

int net_is_v6(const net_addr *a);
net_addr net_any(int v6);      // 0.0.0.0, or :: (which takes IPv4 too)
net_addr net_loopback(int v6); // 127.0.0.1 or ::1
// "host:port" or "[ipv6]:port" -> address and port (host byte order). The host may be a name.
burst_status net_resolve(const char *addr, net_addr *ip, uint16_t *port, burst_error *err);
// "a.b.c.d:port" or "[v6]:port"; port 0: the address alone.
void net_format(char *out, size_t cap, const net_addr *ip, uint16_t port);

// Listens on ip:port (port 0: any free port); *bound is the port in use.
burst_status net_listen(const net_addr *ip, uint16_t port, int *fd, uint16_t *bound, burst_error *err);
// Accepts one connection before the deadline (burst_now() seconds); *peer_ip is the peer's address.
burst_status net_accept(int listen_fd, double deadline, int *fd, net_addr *peer_ip, burst_error *err);
// Connects, retrying while the peer is not listening yet, until the deadline. A connection to
// itself counts as refused: with nobody listening on a port of the ephemeral range, the kernel
// may give the socket that very port and join it to itself (TCP simultaneous open), which would
// then hold the port the peer is about to listen on.
burst_status net_connect(const net_addr *ip, uint16_t port, double deadline, int *fd, burst_error *err);
// 1 when fd is connected to itself (its own address and port at both ends).
int net_self_connected(int fd);
// The address of the far end of a connected socket.
net_addr net_peer_ip(int fd);

// From now on a send or receive on fd that moves no byte for `seconds` fails ("timed out"): a
// peer process that hangs (alive, so keepalive cannot tell) fails the transfer instead of
// stalling it forever.
burst_status net_set_timeout(int fd, double seconds, burst_error *err);

burst_status net_send(int fd, const void *buf, size_t bytes, burst_error *err);
burst_status net_recv(int fd, void *buf, size_t bytes, burst_error *err); // all bytes, or an error
