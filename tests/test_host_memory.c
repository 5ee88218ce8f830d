// common/host_memory: MemAvailable within the cgroup limits, on fake /proc and /sys/fs/cgroup
// trees written for each case (v2 in a container and under systemd, v1, hybrid, none); the bytes
// in 2 MB pages of the mappings that hold a range, from a fake smaps and from this process's own
// after it asked for them; whether a VM's host takes freed memory back, from fake sysfs trees.
#include <string.h>
#include <sys/mman.h>
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

// host_huge_page_bytes on a fake smaps: a program's text, a file mapping, an anonymous one.
static int check_smaps(void) {
    static const char *const files[] = {"proc/self/smaps",
                                        "00400000-00600000 r-xp 00000000 fd:00 1 /usr/bin/burstd\n"
                                        "Size:               2048 kB\n"
                                        "AnonHugePages:      2048 kB\n"
                                        "FilePmdMapped:         0 kB\n"
                                        "7f0000000000-7f0000800000 r--p 00000000 fd:00 2 /m/model.safetensors\n"
                                        "Size:               8192 kB\n"
                                        "AnonHugePages:         0 kB\n"
                                        "FilePmdMapped:      6144 kB\n"
                                        "VmFlags: rd mr mw me hg\n"
                                        "7f0000800000-7f0000c00000 rw-p 00000000 00:00 0\n"
                                        "AnonHugePages:      4096 kB\n"
                                        "FilePmdMapped:         0 kB\n",
                                        NULL};
    static const struct {
        const char *what;
        uintptr_t p;
        size_t bytes, want;
    } cases[] = {
        {"inside the file mapping", 0x7f0000100000, 0x100000, 6144 << 10},
        {"up to the anonymous mapping's first byte, not into it", 0x7f0000700000, 0x100000, 6144 << 10},
        {"across the file and the anonymous mapping", 0x7f00007ff000, 0x2000, (6144 + 4096) << 10},
        {"in no mapping", 0x1000000, 4096, 0},
    };
    tree(files);
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = host_huge_page_bytes(root, (const void *)cases[i].p, cases[i].bytes);
        ok &= got == cases[i].want;
        printf("%s %2d smaps, %s: %zu (want %zu)\n", got == cases[i].want ? "ok  " : "FAIL", ++n_case,
               cases[i].what, got, cases[i].want);
    }
    const size_t none = host_huge_page_bytes("/nonexistent", (void *)0x1000, 1);
    printf("%s %2d smaps, none to read: %zu (want 0)\n", none ? "FAIL" : "ok  ", ++n_case, none);
    return ok && !none;
}

// host_reports_free_pages on fake /sys/bus/virtio trees: a balloon with and without the reporting
// feature, another device with that bit, none.
static int check_reporting(void) {
#define DEV "sys/bus/virtio/devices/"
    static const struct {
        const char *what;
        int want;
        const char *files[10];
    } cases[] = {
        {"no virtio devices", 0, {NULL}},
        {"a balloon that reports free pages", 1,
         {DEV "virtio0/device", "0x0002\n", DEV "virtio0/features", "0010001001100100\n", DEV "virtio3/device",
          "0x0005\n", DEV "virtio3/features", "0110010100000000\n", NULL}},
        {"a balloon that does not", 0, {DEV "virtio0/device", "0x0005\n", DEV "virtio0/features", "0110000100000000\n", NULL}},
        {"bit 5 on a block device", 0, {DEV "virtio1/device", "0x0002\n", DEV "virtio1/features", "0000010000000000\n", NULL}},
        {"a balloon without its features", 0, {DEV "virtio0/device", "0x0005\n", NULL}},
    };
#undef DEV
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tree(cases[i].files);
        const int got = host_reports_free_pages(root);
        ok &= got == cases[i].want;
        printf("%s %2d free page reporting, %s: %d (want %d)\n", got == cases[i].want ? "ok  " : "FAIL", ++n_case,
               cases[i].what, got, cases[i].want);
    }
    return ok;
}

// An anonymous 10 MB mapping, asked for 2 MB pages and written: some of it in 2 MB pages (where the
// kernel has transparent huge pages and does not refuse them).
static int check_huge_pages(void) {
    enum { MB = 1 << 20 };
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        fclose(f);
    }
    char *p = mmap(NULL, 10 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return perror("mmap"), 0;
    if (!strstr(mode, "[always]") && !strstr(mode, "[madvise]")) {
        printf("ok   %2d huge pages: not checked, this kernel has no transparent huge pages (%s)\n", ++n_case, mode);
        return munmap(p, 10 * MB), 1;
    }
    const int advised = host_huge_pages(p, 10 * MB);
    memset(p, 1, 10 * MB);
    const size_t huge = host_huge_page_bytes("", p + 3 * MB, MB); // the mapping's, not only this range's
    const int ok = advised == 0 && huge >= 2 * MB;
    printf("%s %2d huge pages: advice %s, %zu of 10 MB in 2 MB pages (want 2 MB or more)\n", ok ? "ok  " : "FAIL", ++n_case,
           advised ? "refused" : "taken", huge);
    munmap(p, 10 * MB);
    return ok;
}

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
    return !(ok & check_smaps() & check_reporting() & check_huge_pages());
}
