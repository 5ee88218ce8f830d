#define _GNU_SOURCE // accept4
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int net_is_v6(const net_addr *a) { return memcmp(a->b, V4_MAPPED, sizeof V4_MAPPED) != 0; }

static net_addr v4(uint32_t host_order) {
    net_addr a;
    memcpy(a.b, V4_MAPPED, sizeof V4_MAPPED);
    uint32_t n = htonl(host_order);
    memcpy(a.b + 12, &n, 4);
    return a;
}

net_addr net_any(int v6) { return v6 ? (net_addr){{0}} : v4(INADDR_ANY); }

net_addr net_loopback(int v6) { return v6 ? (net_addr){.b[15] = 1} : v4(INADDR_LOOPBACK); }

static net_addr addr_of(const struct sockaddr_storage *ss) {
    net_addr a;
    if (ss->ss_family == AF_INET) {
        memcpy(a.b, V4_MAPPED, sizeof V4_MAPPED);
        memcpy(a.b + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else {
        memcpy(a.b, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
    return a;
}

static uint16_t port_of(const struct sockaddr_storage *ss) {
    return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                          : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

// The socket address of ip:port, in ip's family; returns its length.
static socklen_t sockaddr_of(const net_addr *ip, uint16_t port, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    if (!net_is_v6(ip)) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET, s4->sin_port = htons(port);
        memcpy(&s4->sin_addr, ip->b + 12, 4);
        return sizeof *s4;
    }
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6, s6->sin6_port = htons(port);
    memcpy(&s6->sin6_addr, ip->b, 16);
    return sizeof *s6;
}

burst_status net_resolve(const char *addr, net_addr *ip, uint16_t *port, burst_error *err) {
    const char *colon = strrchr(addr, ':'), *host = addr, *host_end = colon;
    if (addr[0] == '[') { // [v6]:port
        host = addr + 1;
        host_end = strchr(addr, ']');
        if (!host_end || host_end[1] != ':') colon = NULL;
    } else if (colon && memchr(addr, ':', (size_t)(colon - addr))) {
        return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': an IPv6 address goes in brackets: [%.*s]:PORT", addr,
                          (int)(colon - addr), addr);
    }
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || host_end == host || colon[1] == '\0' || *end || p < 0 || p > 65535)
        return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': want HOST:PORT or [IPV6]:PORT", addr);
    char name[256];
    if ((size_t)(host_end - host) >= sizeof name) return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': host too long", addr);
    memcpy(name, host, (size_t)(host_end - host));
    name[host_end - host] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc) return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': %s", addr, gai_strerror(rc));
    struct sockaddr_storage ss = {0};
    memcpy(&ss, res->ai_addr, res->ai_addrlen);
    *ip = addr_of(&ss);
    *port = (uint16_t)p;
    freeaddrinfo(res);
    return BURST_OK;
}

void net_format(char *out, size_t cap, const net_addr *ip, uint16_t port) {
    char host[INET6_ADDRSTRLEN];
    int v6 = net_is_v6(ip);
    inet_ntop(v6 ? AF_INET6 : AF_INET, v6 ? (const void *)ip->b : (const void *)(ip->b + 12), host, sizeof host);
    if (port) snprintf(out, cap, v6 ? "[%s]:%u" : "%s:%u", host, port);
    else snprintf(out, cap, "%s", host);
}

// Ring steps are large and latency matters for the small collectives: no Nagle delay. A peer
// machine that dies or drops off the network would leave a receive waiting forever: keepalive
// probes find it silent within about 30 s (a live peer's kernel answers them, however long its
// compute), and the failure then shuts the process's other connections (comm_tcp.c).
static void tune(int fd) {
    int one = 1, idle_s = 15, interval_s = 5, probes = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

burst_status net_listen(const net_addr *ip, uint16_t port, int *fd, uint16_t *bound, burst_error *err) {
    char where[64];
    net_format(where, sizeof where, ip, port);
    struct sockaddr_storage sa;
    socklen_t len = sockaddr_of(ip, port, &sa);
    int s = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;
    if (s < 0) return BURST_FAIL(err, BURST_ERR_IO, "socket for %s: %s", where, strerror(errno));
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa.ss_family == AF_INET6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); // :: takes IPv4 too
    if (bind(s, (struct sockaddr *)&sa, len) || listen(s, 128) || getsockname(s, (struct sockaddr *)&sa, &len)) {
        int e = errno;
        close(s);
        return BURST_FAIL(err, BURST_ERR_IO, "listen on %s: %s", where, strerror(e));
    }
    *fd = s;
    *bound = port_of(&sa);
    return BURST_OK;
}

burst_status net_accept(int listen_fd, double deadline, int *fd, net_addr *peer_ip, burst_error *err) {
    for (;;) {
        double left = deadline - burst_now();
        if (left <= 0) return BURST_FAIL(err, BURST_ERR_IO, "timed out waiting for a connection");
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR) return BURST_FAIL(err, BURST_ERR_IO, "poll: %s", strerror(errno));
        if (n <= 0) continue;
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int s = accept4(listen_fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return BURST_FAIL(err, BURST_ERR_IO, "accept: %s", strerror(errno));
        }
        tune(s);
        *fd = s;
        *peer_ip = addr_of(&sa);
        return BURST_OK;
    }
}

burst_status net_connect(const net_addr *ip, uint16_t port, double deadline, int *fd, burst_error *err) {
    char where[64];
    net_format(where, sizeof where, ip, port);
    struct sockaddr_storage sa;
    socklen_t len = sockaddr_of(ip, port, &sa);
    for (;;) {
        int s = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return BURST_FAIL(err, BURST_ERR_IO, "socket for %s: %s", where, strerror(errno));
        int e = connect(s, (struct sockaddr *)&sa, len) ? errno : net_self_connected(s) ? ECONNREFUSED : 0;
        if (!e) {
            tune(s);
            *fd = s;
            return BURST_OK;
        }
        close(s);
        // Refused or unreachable: the peer may not be up yet; try again until the deadline.
        if (burst_now() >= deadline)
            return BURST_FAIL(err, BURST_ERR_IO, "connect to %s: %s (gave up)", where, strerror(e));
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    }
}

int net_self_connected(int fd) {
    struct sockaddr_storage me = {0}, peer = {0};
    socklen_t me_len = sizeof me, peer_len = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &me_len) || getpeername(fd, (struct sockaddr *)&peer, &peer_len))
        return 0;
    net_addr a = addr_of(&me), b = addr_of(&peer);
    return me.ss_family == peer.ss_family && port_of(&me) == port_of(&peer) && !memcmp(&a, &b, sizeof a);
}

net_addr net_peer_ip(int fd) {
    struct sockaddr_storage sa = {0};
    socklen_t len = sizeof sa;
    getpeername(fd, (struct sockaddr *)&sa, &len);
    return addr_of(&sa);
}

burst_status net_send(int fd, const void *buf, size_t bytes, burst_error *err) {
    const char *p = buf;
    while (bytes > 0) {
        ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return BURST_FAIL(err, BURST_ERR_IO, "send: timed out: the peer took nothing for the node timeout");
        if (n < 0) return BURST_FAIL(err, BURST_ERR_IO, "send: %s", strerror(errno));
        p += n, bytes -= (size_t)n;
    }
    return BURST_OK;
}

burst_status net_set_timeout(int fd, double seconds, burst_error *err) {
    struct timeval tv = {.tv_sec = (time_t)seconds, .tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        return BURST_FAIL(err, BURST_ERR_IO, "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO): %s", strerror(errno));
    return BURST_OK;
}

burst_status net_recv(int fd, void *buf, size_t bytes, burst_error *err) {
    char *p = buf;
    while (bytes > 0) {
        ssize_t n = recv(fd, p, bytes, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return BURST_FAIL(err, BURST_ERR_IO, "receive: timed out: the peer sent nothing for the node timeout");
        if (n < 0) return BURST_FAIL(err, BURST_ERR_IO, "receive: %s", strerror(errno));
        if (n == 0) return BURST_FAIL(err, BURST_ERR_IO, "receive: connection closed by the peer");
        p += n, bytes -= (size_t)n;
    }
    return BURST_OK;
}
