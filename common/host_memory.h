// The host memory a process may still take: MemAvailable, within the memory limits of the
// cgroups it runs in (v2, or v1's memory controller), as a container or a systemd unit sets them;
// and the size of the pages that back it.
#pragma once
#include <stddef.h>

// Bytes free to this process, or 0 when unknown. root prefixes every path read (/proc and
// /sys/fs/cgroup): "" for this machine, a directory for tests.
size_t host_memory_free(const char *root);

// Asks the kernel to back the pages of [p, p + bytes) with 2 MB pages (transparent huge pages,
// madvise(MADV_HUGEPAGE)): one TLB entry then covers 512 times the bytes, and a decode step,
// which streams over every weight and the whole KV cache, waits less on page walks. For a file
// mapping the advice holds for the pages read in after it (pages already in the page cache keep
// their size). Ranges under HOST_HUGE_PAGE, where no such page fits, are left alone. Returns 0,
// or -1 where the kernel takes no such advice (no THP).
int host_huge_pages(void *p, size_t bytes);
enum { HOST_HUGE_PAGE = 2 << 20 }; // x86-64's and (with 4 KB base pages) arm64's

// Whether this machine is a VM whose host takes freed memory back: a virtio balloon that reports
// free pages (feature VIRTIO_BALLOON_F_REPORTING, bit 5 of root/sys/bus/virtio/devices/*/features
// on a device of type 5). The host discards the free blocks it is told of, 2 MB and larger, so a
// fresh 2 MB page waits on the host at its first write: 2.5 s a GB on such a VM against 0.37 for
// 4 KB pages (and 0.05 where it did not wait).
int host_reports_free_pages(const char *root);

// Bytes that the kernel maps in 2 MB pages (AnonHugePages and FilePmdMapped) in the mappings
// that hold any of [p, p + bytes), from root/proc/self/smaps; 0 when unknown.
size_t host_huge_page_bytes(const char *root, const void *p, size_t bytes);
