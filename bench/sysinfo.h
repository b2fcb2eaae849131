/* sysinfo.h — facts about this machine and process for experiment records. */
#ifndef PLUMB_SYSINFO_H
#define PLUMB_SYSINFO_H

#include <stddef.h>

typedef struct {
    char cpu[128];       /* model name */
    char features[160];  /* SIMD features plumb can use */
    int cores;           /* CPUs this process may run on */
    double mem_gib;      /* total RAM */
    char os[200];
    long llc_bytes;      /* last-level cache size, 0 if unknown */
} plumb_sysinfo;

void plumb_sysinfo_get(plumb_sysinfo *s);
void plumb_now_iso8601(char *buf, size_t n);   /* "2026-12-02T14:30:00Z" */
/* Peak resident set since the last reset (VmHWM), in bytes. */
size_t plumb_peak_rss_now(void);
/* Resets the peak-RSS high-water mark (Linux clear_refs); 0 if it worked. */
int plumb_peak_rss_reset(void);

#endif
