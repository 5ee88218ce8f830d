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

burst_status net_resolve(const char *addr, uint32_t *ip, uint16_t *port, burst_error *err) {
    const char *colon = strrchr(addr, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == addr || colon[1] == '\0' || *end || p < 0 || p > 65535)
        return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': want HOST:PORT", addr);
    char host[256];
    if ((size_t)(colon - addr) >= sizeof host) return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': host too long", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc) return BURST_FAIL(err, BURST_ERR_INVALID, "address '%s': %s", addr, gai_strerror(rc));
    *ip = ntohl(((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr);
    *port = (uint16_t)p;
    freeaddrinfo(res);
    return BURST_OK;
}

void net_format(char *out, size_t cap, uint32_t ip, uint16_t port) {
    int n = snprintf(out, cap, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
    if (port && n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, ":%u", port);
}

static struct sockaddr_in sockaddr_of(uint32_t ip, uint16_t port) {
    return (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(ip)};
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

burst_status net_listen(uint32_t ip, uint16_t port, int *fd, uint16_t *bound, burst_error *err) {
    char where[64];
    net_format(where, sizeof where, ip, port);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (s < 0) return BURST_FAIL(err, BURST_ERR_IO, "socket: %s", strerror(errno));
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = sockaddr_of(ip, port);
    socklen_t len = sizeof sa;
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) || listen(s, 128) ||
        getsockname(s, (struct sockaddr *)&sa, &len)) {
        int e = errno;
        close(s);
        return BURST_FAIL(err, BURST_ERR_IO, "listen on %s: %s", where, strerror(e));
    }
    *fd = s;
    *bound = ntohs(sa.sin_port);
    return BURST_OK;
}

burst_status net_accept(int listen_fd, double deadline, int *fd, uint32_t *peer_ip, burst_error *err) {
    for (;;) {
        double left = deadline - burst_now();
        if (left <= 0) return BURST_FAIL(err, BURST_ERR_IO, "timed out waiting for a connection");
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR) return BURST_FAIL(err, BURST_ERR_IO, "poll: %s", strerror(errno));
        if (n <= 0) continue;
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        int s = accept4(listen_fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return BURST_FAIL(err, BURST_ERR_IO, "accept: %s", strerror(errno));
        }
        tune(s);
        *fd = s;
        *peer_ip = ntohl(sa.sin_addr.s_addr);
        return BURST_OK;
    }
}

burst_status net_connect(uint32_t ip, uint16_t port, double deadline, int *fd, burst_error *err) {
    char where[64];
    net_format(where, sizeof where, ip, port);
    for (;;) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return BURST_FAIL(err, BURST_ERR_IO, "socket: %s", strerror(errno));
        struct sockaddr_in sa = sockaddr_of(ip, port);
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) {
            tune(s);
            *fd = s;
            return BURST_OK;
        }
        int e = errno;
        close(s);
        // Refused or unreachable: the peer may not be up yet; try again until the deadline.
        if (burst_now() >= deadline)
            return BURST_FAIL(err, BURST_ERR_IO, "connect to %s: %s (gave up)", where, strerror(e));
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    }
}

uint32_t net_peer_ip(int fd) {
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof sa;
    getpeername(fd, (struct sockaddr *)&sa, &len);
    return ntohl(sa.sin_addr.s_addr);
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
