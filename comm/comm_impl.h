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
    int n;              // ranks in all, over every process
    int first, n_local; // the ranks of this process: first .. first + n_local - 1
    comm *ranks;        // (n_local)
    void *impl;         // the transport's state
};

// Allocates a group of n ranks, n_local of them (from first) in this process, for a transport
// (freed by comm_group_release).
comm_group *comm_group_alloc(const comm_ops *ops, int n, int first, int n_local, void *impl);
void comm_group_release(comm_group *g);
