// comm/net: net_self_connected on a socket joined to itself (bound, then connected to its own
// address: TCP simultaneous open, what net_connect meets when it dials a free port of the
// ephemeral range and the kernel picks that port for it) and on both ends of a real connection;
// net_connect to a port nobody listens on gives up at its deadline, naming the address.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/net.h"

static int failures;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

// A loopback socket bound to a free port and connected to that same address; -1 if the system
// refuses.
static int self_joined(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, len) || getsockname(s, (struct sockaddr *)&a, &len) ||
        connect(s, (struct sockaddr *)&a, len)) {
        if (s >= 0) close(s);
        return -1;
    }
    return s;
}

int main(void) {
    int s = self_joined();
    check(s >= 0 && net_self_connected(s), "a socket connected to its own address and port is self-connected");
    if (s >= 0) close(s);

    const net_addr lo = net_loopback(0);
    int listener = -1, client = -1, server = -1;
    uint16_t port = 0;
    burst_error err;
    net_addr peer;
    int ok = !net_listen(&lo, 0, &listener, &port, &err) && !net_connect(&lo, port, burst_now() + 5, &client, &err) &&
             !net_accept(listener, burst_now() + 5, &server, &peer, &err);
    check(ok && !net_self_connected(client) && !net_self_connected(server),
          "both ends of a connection to a listener are not self-connected");
    if (client >= 0) close(client);
    if (server >= 0) close(server);
    if (listener >= 0) close(listener); // nobody listens on port now

    char want[64];
    snprintf(want, sizeof want, "connect to 127.0.0.1:%u", port);
    burst_status st = net_connect(&lo, port, burst_now(), &client, &err);
    check(st == BURST_ERR_IO && strstr(err.msg, want) && strstr(err.msg, "gave up"),
          "net_connect to a port nobody listens on gives up at its deadline, naming the address");
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures != 0;
}
