// One .safetensors file: an 8-byte little-endian header length N, N bytes of JSON header
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}),
// then the tensor data, offsets relative to byte 8 + N.
//
// st_open maps the file read-only and checks every header entry before anyone reads data:
// dtype is F32/F16/BF16, 0 <= ndim <= 4, dims >= 0, begin <= end <= data size, byte size equals
// numel * dtype size, data aligned to the dtype size, no two tensors overlap. (Duplicate names,
// which a JSON object may hold, are caught by weights_open across all files at once.)
// Every error is one line naming the file and the tensor.
//
// Memory: the st_file owns the mapping, the tensor array and the names; everything stays valid
// until st_close. Thread safety: read-only after st_open returns, so any thread may read it.
#pragma once
#include "weights.h"

typedef struct {
    char *path;               // as given to st_open
    const uint8_t *map;       // (map_bytes) the whole file, PROT_READ
    size_t map_bytes;
    weights_tensor *tensors;  // (n_tensors) in header order; data points into map
    int64_t n_tensors;
    size_t data_bytes;        // sum of the tensors' byte sizes
} st_file;

// Maps and validates path. On failure *out is NULL and err holds the line.
burst_status st_open(const char *path, st_file **out, burst_error *err);
void st_close(st_file *f);
