#define _POSIX_C_SOURCE 200809L
#include "http_client.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

burst_status http_url_parse(const char *url, http_url *u, burst_error *err) {
    *u = (http_url){.port = "80"};
    if (strncmp(url, "http://", 7))
        return BURST_FAIL(err, BURST_ERR_INVALID, "--url %s: want http://HOST[:PORT][/PREFIX]", url);
    const char *host = url + 7, *path = strchr(host, '/'), *end = path ? path : host + strlen(host);
    const char *colon = memchr(host, ':', (size_t)(end - host));
    size_t host_len = (size_t)((colon ? colon : end) - host);
    if (!host_len || host_len >= sizeof u->host || (colon && (end - colon - 1 < 1 || end - colon - 1 >= (long)sizeof u->port)))
        return BURST_FAIL(err, BURST_ERR_INVALID, "--url %s: want http://HOST[:PORT][/PREFIX]", url);
    memcpy(u->host, host, host_len);
    if (colon) snprintf(u->port, sizeof u->port, "%.*s", (int)(end - colon - 1), colon + 1);
    snprintf(u->prefix, sizeof u->prefix, "%s", path ? path : "");
    size_t n = strlen(u->prefix);
    if (n && u->prefix[n - 1] == '/') u->prefix[n - 1] = 0;
    return BURST_OK;
}

static int connect_to(const http_url *u, burst_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(u->host, u->port, &hints, &ai);
    if (rc) return BURST_FAIL(err, BURST_ERR_IO, "%s:%s: %s", u->host, u->port, gai_strerror(rc)), -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen)) close(fd), fd = -1;
    }
    if (fd < 0) BURST_FAIL(err, BURST_ERR_IO, "%s:%s: connect: %s", u->host, u->port, strerror(errno));
    freeaddrinfo(ai);
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return 0;
        p += k, n -= (size_t)k;
    }
    return 1;
}

// A chunked body (RFC 9112 7.1) decoded as it arrives: a hex size line, that many bytes and a CRLF,
// again, until a chunk of size 0.
typedef struct {
    unsigned long long left; // bytes of the chunk in hand still to hand on
    int crlf;                // bytes of the CRLF after a chunk's data still to skip
    char line[64];           // the size line so far (an extension past it is cut off)
    size_t n_line;
    int done, bad;           // the last chunk came; a size line without a size
} unchunk;

// Hands p[0, n) of the body on: as it is without chunks (c NULL), else decoded.
static void hand_on(unchunk *c, const char *p, size_t n, http_body_fn on_body, void *ctx) {
    if (!c) on_body(ctx, p, n);
    while (c && n && !c->done && !c->bad) {
        if (c->left) {
            size_t k = n < c->left ? n : (size_t)c->left;
            on_body(ctx, p, k);
            p += k, n -= k, c->left -= k;
            c->crlf = c->left ? 0 : 2;
        } else if (c->crlf) {
            p++, n--, c->crlf--;
        } else if (*p != '\n') {
            if (c->n_line < sizeof c->line - 1) c->line[c->n_line++] = *p;
            p++, n--;
        } else {
            p++, n--;
            c->line[c->n_line] = 0, c->n_line = 0;
            char *end;
            c->left = strtoull(c->line, &end, 16);
            c->bad = end == c->line;
            c->done = !c->bad && !c->left;
        }
    }
}

// 1 where the response's header block [head, end) says Transfer-Encoding: chunked (lowered in place).
static int chunked_body(char *head, char *end) {
    for (char *p = head; p < end; p++) *p = (char)tolower((unsigned char)*p);
    const char saved = *end;
    *end = 0;
    char *te = strstr(head, "\r\ntransfer-encoding:");
    *end = saved;
    if (!te) return 0;
    for (te += 20; *te == ' ' || *te == '\t'; te++) {}
    return !strncmp(te, "chunked", 7);
}

burst_status http_post(const http_url *u, const char *path, const char *api_key, const char *body, int *status,
                       http_body_fn on_body, void *ctx, burst_error *err) {
    int fd = connect_to(u, err);
    if (fd < 0) return BURST_ERR_IO;
    char head[1024];
    int n = snprintf(head, sizeof head, "POST %s%s HTTP/1.0\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s%s%s\r\n", u->prefix, path, u->host, u->port, strlen(body),
                     api_key ? "Authorization: Bearer " : "", api_key ? api_key : "", api_key ? "\r\n" : "");
    burst_status st = BURST_OK;
    if (n >= (int)sizeof head || !send_all(fd, head, (size_t)n) || !send_all(fd, body, strlen(body))) {
        st = BURST_FAIL(err, BURST_ERR_IO, "%s:%s%s: send: %s", u->host, u->port, path, strerror(errno));
        goto done;
    }
    // Headers first (up to the blank line), then the body as it comes until the server closes, or,
    // where it answers in chunks anyway (as llama.cpp's server does), until the last chunk: such a
    // server may keep the connection open.
    char buf[16384];
    size_t have = 0;
    char *body_at = NULL;
    ssize_t k;
    unchunk c = {0}, *chunks = NULL;
    while ((!chunks || !(chunks->done || chunks->bad)) &&
           (k = recv(fd, body_at ? buf : buf + have, body_at ? sizeof buf : sizeof buf - 1 - have, 0)) > 0) {
        if (body_at) {
            hand_on(chunks, buf, (size_t)k, on_body, ctx);
            continue;
        }
        have += (size_t)k;
        buf[have] = 0;
        if (!(body_at = strstr(buf, "\r\n\r\n"))) {
            if (have == sizeof buf - 1) break;
            continue;
        }
        if (sscanf(buf, "HTTP/%*s %d", status) != 1) {
            body_at = NULL;
            break;
        }
        if (chunked_body(buf, body_at + 2)) chunks = &c;
        body_at += 4;
        if (buf + have > body_at) hand_on(chunks, body_at, (size_t)(buf + have - body_at), on_body, ctx);
    }
    if (k < 0 || !body_at || c.bad) st = BURST_FAIL(err, BURST_ERR_IO, "%s:%s%s: %s", u->host, u->port, path,
                                                    k < 0 ? strerror(errno) : !body_at ? "no HTTP response header"
                                                                                       : "a chunk without a size");
done:
    close(fd);
    return st;
}
