// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the cluster's key check (comm/cluster.h):
// small, dependency-free, not fast (a few hundred bytes per connection).
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

void sha256(const void *msg, size_t n, uint8_t out[SHA256_BYTES]);
// HMAC-SHA-256 of the concatenation of n_parts messages (parts[i], lens[i]) under key.
void hmac_sha256(const void *key, size_t key_len, const void *const *parts, const size_t *lens, int n_parts,
                 uint8_t out[SHA256_BYTES]);
// Whether a and b are equal, in time that does not depend on where they differ.
int hmac_equal(const uint8_t a[SHA256_BYTES], const uint8_t b[SHA256_BYTES]);
