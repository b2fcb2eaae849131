#define _GNU_SOURCE
#include "sysinfo.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "../core/util.h"
#include "../simd/kernels.h"

void plumb_sysinfo_get(plumb_sysinfo *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->cpu, sizeof s->cpu, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (fp && fgets(line, sizeof line, fp)) {
        char *c = strchr(line, ':');
        if (c && (!strncmp(line, "model name", 10) || !strncmp(line, "Model", 5))) {
            c += 2;
            c[strcspn(c, "\n")] = 0;
            snprintf(s->cpu, sizeof s->cpu, "%s", c);
            break;
        }
    }
    if (fp) fclose(fp);
    snprintf(s->features, sizeof s->features, "%s", plumb_cpu_features());
    cpu_set_t set;
    s->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    s->mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024 * 1024);
    /* the kernel's cache topology first: in a VM, CPUID (behind sysconf) can
     * describe the host's whole L3 rather than the slice this CPU shares */
    s->llc_bytes = 0;
    FILE *cf = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (!cf) cf = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r");
    if (cf) {
        long v = 0;
        char unit = 0;
        if (fscanf(cf, "%ld%c", &v, &unit) >= 1) s->llc_bytes = v * (unit == 'K' ? 1024L : unit == 'M' ? 1048576L : 1L);
        fclose(cf);
    }
    if (s->llc_bytes <= 0) s->llc_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (s->llc_bytes <= 0) s->llc_bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (s->llc_bytes < 0) s->llc_bytes = 0;
    struct utsname u;
    if (uname(&u) == 0) snprintf(s->os, sizeof s->os, "%s %s %s", u.sysname, u.release, u.machine);
}

void plumb_now_iso8601(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

size_t plumb_peak_rss_now(void) {
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    if (fp) fclose(fp);
    return kb ? kb * 1024 : plumb_peak_rss_bytes();
}

int plumb_peak_rss_reset(void) {
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    if (!fp) return -1;
    int ok = fputs("5", fp) >= 0;
    return fclose(fp) == 0 && ok ? 0 : -1;
}
