// common/host_memory: MemAvailable within the cgroup limits, on fake /proc and /sys/fs/cgroup
// trees written for each case (v2 in a container and under systemd, v1, hybrid, none).
#include <sys/stat.h>

#include "common/host_memory.h"
#include "tests/test_util.h"

static char root[64];
static int n_case;

// Writes text to root/rel, making its directories.
static void put(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(path);
        exit(1);
    }
}

// A fresh tree: pairs of (relative path, text), up to a NULL path.
static void tree(const char *const *files) {
    snprintf(root, sizeof root, "/tmp/test_host_memory.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        exit(1);
    }
    for (; files[0]; files += 2) put(files[0], files[1]);
}

static int expect(const char *what, size_t want) {
    size_t got = host_memory_free(root);
    int ok = got == want;
    printf("%s %2d %s: %zu (want %zu)\n", ok ? "ok  " : "FAIL", ++n_case, what, got, want);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) printf("warning: could not remove %s\n", root);
    return ok;
}

#define MEMINFO "proc/meminfo", "MemTotal:       4000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\n"
#define CG "sys/fs/cgroup/"
#define SELF "proc/self/cgroup"
#define UNIT CG "system.slice/burstd.service/"
#define V1_NO_LIMIT "hierarchical_memory_limit 9223372036854771712\ntotal_rss 7\n"

int main(void) {
    static const struct {
        const char *what;
        size_t want;
        const char *files[16]; // (path, text) pairs, then NULL
    } cases[] = {
        {"nothing to read", 0, {NULL}},
        {"MemAvailable alone", 1024000, {MEMINFO, NULL}},
        {"v2 container: its limit less its anonymous memory (page cache is free)", 400000,
         {MEMINFO, SELF, "0::/\n", CG "memory.max", "700000\n", CG "memory.stat", "anon 300000\nfile 9000000\n", NULL}},
        {"v2 without a limit", 1024000,
         {MEMINFO, SELF, "0::/\n", CG "memory.max", "max\n", CG "memory.stat", "anon 300000\n", NULL}},
        {"v2 systemd unit: the tighter of the unit and its slice", 250000,
         {MEMINFO, SELF, "0::/system.slice/burstd.service\n", UNIT "memory.max", "900000\n", UNIT "memory.stat",
          "anon 100000\n", CG "system.slice/memory.max", "600000\n", CG "system.slice/memory.stat", "anon 350000\n", NULL}},
        {"v2 systemd unit, no limit on the slice", 400000,
         {MEMINFO, SELF, "0::/system.slice/burstd.service\n", UNIT "memory.max", "500000\n", UNIT "memory.stat",
          "anon 100000\n", CG "system.slice/memory.max", "max\n", NULL}},
        {"v2 path not on the mount: the mount's root", 800000,
         {MEMINFO, SELF, "0::/docker/4f2a\n", CG "memory.max", "800000\n", CG "memory.stat", "anon 0\n", NULL}},
        {"v2 over its limit: 1 byte, not unknown", 1,
         {MEMINFO, SELF, "0::/\n", CG "memory.max", "700000\n", CG "memory.stat", "anon 900000\n", NULL}},
        {"v1 host path: its hierarchical limit less total_rss", 600000,
         {MEMINFO, SELF, "5:cpuset:/\n4:memory:/process_api/x\n1:cpu:/\n", CG "memory/process_api/x/memory.stat",
          "rss 5\nhierarchical_memory_limit 800000\ntotal_rss 200000\n", CG "memory/memory.stat", V1_NO_LIMIT, NULL}},
        {"v1 container without a limit (2^63 - 4096)", 1024000,
         {MEMINFO, SELF, "4:memory:/docker/4f2a\n", CG "memory/memory.stat", V1_NO_LIMIT, NULL}},
        {"hybrid: v1's memory controller holds the limit", 400000,
         {MEMINFO, SELF, "0::/user.slice\n7:cpuacct,memory:/user.slice\n", CG "memory/user.slice/memory.stat",
          "hierarchical_memory_limit 500000\ntotal_rss 100000\n", CG "user.slice/memory.max", "200000\n", NULL}},
        {"no MemAvailable: the cgroup alone", 400000,
         {SELF, "0::/\n", CG "memory.max", "700000\n", CG "memory.stat", "anon 300000\n", NULL}},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tree(cases[i].files);
        ok &= expect(cases[i].what, cases[i].want);
    }
    return ok ? 0 : 1;
}
