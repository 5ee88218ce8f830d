// The host memory a process may still take: MemAvailable, within the memory limits of the
// cgroups it runs in (v2, or v1's memory controller), as a container or a systemd unit sets them.
#pragma once
#include <stddef.h>

// Bytes free to this process, or 0 when unknown. root prefixes every path read (/proc and
// /sys/fs/cgroup): "" for this machine, a directory for tests.
size_t host_memory_free(const char *root);
