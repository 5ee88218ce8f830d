#define _DEFAULT_SOURCE // madvise
#include "host_memory.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// The first number after `key` at the start of a line of a text file, or 0 (none, no such
// file, or a word such as cgroup v2's "max").
static size_t read_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)) && sscanf(line + strlen(key), "%llu", &v) == 1) break;
    fclose(f);
    return (size_t)v;
}

// What a cgroup's limit leaves, given its limit and the anonymous memory of its subtree (its
// page cache is reclaimable, as MemAvailable counts the host's), or `avail` when it is tighter.
// v1 writes "no limit" as a number near 2^63.
static size_t within(size_t avail, size_t limit, size_t anon) {
    if (!limit || limit >= ((size_t)1 << 62)) return avail;
    size_t left = limit > anon ? limit - anon : 1;
    return !avail || left < avail ? left : avail;
}

// The cgroup of this process that holds its memory limits, its path into `path`: 1 for v1's
// memory controller ("N:...,memory,...:PATH"), which wins where systemd's hybrid layout lists
// both, 2 for cgroup v2 ("0::PATH"), 0 for none.
static int own_cgroup(const char *root, char *path, size_t cap) {
    char file[4096], line[4096];
    snprintf(file, sizeof file, "%s/proc/self/cgroup", root);
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    int version = 0;
    while (version != 1 && fgets(line, sizeof line, f)) {
        char *ctl = strchr(line, ':'), *p = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!p) continue;
        *ctl++ = 0, *p++ = 0, p[strcspn(p, "\n")] = 0;
        int v = !strcmp(line, "0") && !*ctl ? 2 : 0;
        for (char *c = strtok(ctl, ","); c; c = strtok(NULL, ",")) v = !strcmp(c, "memory") ? 1 : v;
        if (v) version = v, snprintf(path, cap, "%s", strcmp(p, "/") ? p : "");
    }
    fclose(f);
    return version;
}

size_t host_memory_free(const char *root) {
    char file[4160], path[2048], dir[4096];
    snprintf(file, sizeof file, "%s/proc/meminfo", root);
    size_t avail = read_number(file, "MemAvailable:") * 1024;
    int version = own_cgroup(root, path, sizeof path);
    if (version == 1) {
        // v1's memory.stat gives the tightest limit of the cgroup and its parents. A container
        // sees its own cgroup at the mount's root, where the host's path does not exist.
        snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory%s/memory.stat", root, path);
        if (access(dir, R_OK)) // not there: the mount's root
            snprintf(dir, sizeof dir, "%s/sys/fs/cgroup/memory/memory.stat", root);
        avail = within(avail, read_number(dir, "hierarchical_memory_limit "), read_number(dir, "total_rss "));
    } else if (version == 2) {
        // v2: every cgroup from this process's up to the mount's root may set memory.max.
        size_t top = (size_t)snprintf(dir, sizeof dir, "%s/sys/fs/cgroup", root);
        snprintf(dir + top, sizeof dir - top, "%s", path);
        for (;;) {
            size_t len = strlen(dir);
            snprintf(file, sizeof file, "%s/memory.max", dir);
            size_t limit = read_number(file, "");
            snprintf(file, sizeof file, "%s/memory.stat", dir);
            avail = within(avail, limit, read_number(file, "anon "));
            if (len <= top) break;
            *strrchr(dir, '/') = 0;
        }
    }
    return avail;
}

int host_huge_pages(void *p, size_t bytes) {
    if (bytes < HOST_HUGE_PAGE) return 0; // no 2 MB page fits in it
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = (uintptr_t)p / page * page;
    return madvise((void *)start, (uintptr_t)p + bytes - start, MADV_HUGEPAGE) ? -1 : 0;
}

size_t host_huge_page_bytes(const char *root, const void *p, size_t bytes) {
    char file[4160], line[4352];
    snprintf(file, sizeof file, "%s/proc/self/smaps", root);
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    const uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    size_t total = 0;
    int inside = 0; // the mapping whose lines follow holds some of [lo, hi)
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, kb;
        char key[64];
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2) // a mapping's first line: "start-end perms ..."
            inside = a < hi && lo < b;
        else if (inside && sscanf(line, "%63s %llu kB", key, &kb) == 2 &&
                 (!strcmp(key, "AnonHugePages:") || !strcmp(key, "FilePmdMapped:")))
            total += (size_t)kb * 1024;
    }
    fclose(f);
    return total;
}

int host_reports_free_pages(const char *root) {
    char path[4352], line[512];
    snprintf(path, sizeof path, "%s/sys/bus/virtio/devices", root);
    DIR *d = opendir(path);
    if (!d) return 0;
    int reports = 0;
    for (struct dirent *e; !reports && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/sys/bus/virtio/devices/%s/device", root, e->d_name);
        FILE *f = fopen(path, "r");
        const int balloon = f && fgets(line, sizeof line, f) && strtol(line, NULL, 16) == 5;
        if (f) fclose(f);
        if (!balloon) continue;
        snprintf(path, sizeof path, "%s/sys/bus/virtio/devices/%s/features", root, e->d_name);
        f = fopen(path, "r"); // a '0' or '1' per feature bit, bit 0 first
        reports = f && fgets(line, sizeof line, f) && strlen(line) > 5 && line[5] == '1';
        if (f) fclose(f);
    }
    closedir(d);
    return reports;
}
