// Reads a small JSON file (config.json, model.safetensors.index.json) and parses it with cJSON.
// Errors name the file and, for malformed JSON, the byte where parsing stopped.
//
// Memory: the caller owns the returned tree (cJSON_Delete). Thread-safe (no shared state).
#pragma once
#include <cjson/cJSON.h>

#include "../common/burst.h"

#define JSON_FILE_MAX_BYTES (64u << 20) // far above any real config or index file

burst_status json_file_load(const char *path, cJSON **out, burst_error *err);

// 1 when s has no control characters (a JSON string may hold "\n"), so that it can go into a
// one-line error message.
int json_printable(const char *s);
// s itself when printable, else "(unprintable)".
const char *json_show(const char *s);
