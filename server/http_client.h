// A minimal blocking HTTP client for `burst load`: one POST per connection, sent as HTTP/1.0 so
// the server streams the body without chunked encoding and closes the connection at its end (a
// server that answers in chunks anyway, as llama.cpp's llama-server does, is decoded, and its last
// chunk ends the response).
// The body is handed to a callback as it arrives, so streamed tokens can be timed as they come.
//
// Stateless; every function is safe from any thread. No TLS (plain http:// only).
#pragma once
#include <stddef.h>

#include "common/burst.h"

typedef struct {
    char host[256], port[8];
    char prefix[256]; // path before the API's routes ("" or "/something")
} http_url;

// Parses "http://HOST[:PORT][/PREFIX]" (PORT defaults to 80).
burst_status http_url_parse(const char *url, http_url *u, burst_error *err);

typedef void (*http_body_fn)(void *ctx, const char *data, size_t n);

// POSTs a JSON body to prefix + path; *status is the response's status code.
burst_status http_post(const http_url *u, const char *path, const char *api_key, const char *body, int *status,
                       http_body_fn on_body, void *ctx, burst_error *err);
