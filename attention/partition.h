// How the tokens of a sequence are split among G ranks. Zigzag (for causal attention): the n
// tokens form 2G chunks of near-equal size and rank r owns chunks r and 2G-1-r, so every rank
// has the same amount of causal work (Megatron-LM context parallelism, ring-flash-attention).
// Contiguous: rank r owns the r-th of G near-equal slices. Any n >= 0 and G >= 1. A rank's runs
// are coalesced (seq_part_coalesce): one run for G = 1 and for the middle rank of zigzag, none
// when it owns no token. Pure functions, thread-safe.
#pragma once
#include <stdint.h>

#define PART_MAX_RUNS 4

typedef struct {
    int64_t start, len; // positions [start, start + len)
} seq_run;

typedef struct {
    int n_runs;
    seq_run run[PART_MAX_RUNS];
} seq_part;

seq_part partition_zigzag(int64_t n, int n_ranks, int rank);
seq_part partition_contiguous(int64_t n, int n_ranks, int rank);
int64_t seq_part_len(const seq_part *p);
// Drops empty runs and joins each run to the one before it when it continues it (start = the
// previous start + len), keeping row order: fewer, larger attention blocks over the same rows.
void seq_part_coalesce(seq_part *p);
// Adds offset to every run's start (positions of a segment that begins at offset).
void seq_part_shift(seq_part *p, int64_t offset);
// The runs of p's last k rows (0 <= k <= seq_part_len(p)), in row order.
seq_part seq_part_last(const seq_part *p, int64_t k);
