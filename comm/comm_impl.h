// Private to transports: the function table a transport fills, and the handles that carry it.
#pragma once
#include "comm.h"

typedef struct {
    burst_status (*ring_start)(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
    burst_status (*ring_wait)(comm *c, burst_error *err);
    burst_status (*allgather)(comm *c, const void *send, void *recv, size_t bytes, burst_error *err);
    burst_status (*barrier)(comm *c, burst_error *err);
    void (*group_free)(comm_group *g); // frees the transport's state, then the group
} comm_ops;

struct comm {
    comm_group *g;
    int rank;
};

struct comm_group {
    const comm_ops *ops;
    int n;
    comm *ranks; // (n)
    void *impl;  // the transport's state
};

// Allocates a group of n handles for a transport (freed by comm_group_release).
comm_group *comm_group_alloc(const comm_ops *ops, int n, void *impl);
void comm_group_release(comm_group *g);
