#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static _Thread_local char last_error[512];

int plumb_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *plumb_last_error(void) { return last_error[0] ? last_error : "no error"; }

double plumb_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

size_t plumb_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

/* Each accounted block carries a 64-byte header holding its size, so frees
 * can be subtracted and the payload stays 64-byte aligned for SIMD loads. */
#define ALLOC_HEADER 64
static size_t alloc_current, alloc_peak;

static void *account(void *raw, size_t n) {
    if (!raw) return NULL;
    *(size_t *)raw = n;
    size_t now = __atomic_add_fetch(&alloc_current, n, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&alloc_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&alloc_peak, &peak, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return (char *)raw + ALLOC_HEADER;
}

void *plumb_alloc(size_t n, const char *what) {
    void *raw = NULL;
    if (n > SIZE_MAX - ALLOC_HEADER || posix_memalign(&raw, 64, n + ALLOC_HEADER) != 0) {
        plumb_set_error("out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    return account(raw, n);
}

void *plumb_calloc(size_t n, const char *what) {
    void *p = plumb_alloc(n, what);
    if (p) memset(p, 0, n);
    return p;
}

void plumb_dealloc(void *p) {
    if (!p) return;
    void *raw = (char *)p - ALLOC_HEADER;
    __atomic_sub_fetch(&alloc_current, *(size_t *)raw, __ATOMIC_RELAXED);
    free(raw);
}

size_t plumb_alloc_current(void) { return __atomic_load_n(&alloc_current, __ATOMIC_RELAXED); }
size_t plumb_alloc_peak(void) { return __atomic_load_n(&alloc_peak, __ATOMIC_RELAXED); }

char *plumb_utf8_clean(const char *p, size_t n) {
    char *o = malloc(n * 3 + 1);
    size_t k = 0;
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        const uint8_t c = (uint8_t)p[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && i + len <= n && !(len == 2 && c < 0xC2);
        for (size_t j = 1; ok && j < len; j++) ok = ((uint8_t)p[i + j] & 0xC0) == 0x80;
        if (ok && len == 3) {
            const uint32_t cp = ((c & 0x0Fu) << 12) | (((uint8_t)p[i + 1] & 0x3Fu) << 6) | ((uint8_t)p[i + 2] & 0x3Fu);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok && len == 4) {
            const uint32_t cp = ((c & 0x07u) << 18) | (((uint8_t)p[i + 1] & 0x3Fu) << 12) | (((uint8_t)p[i + 2] & 0x3Fu) << 6) | ((uint8_t)p[i + 3] & 0x3Fu);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) { memcpy(o + k, p + i, len); k += len; i += len; }
        else { memcpy(o + k, "\xef\xbf\xbd", 3); k += 3; i++; }
    }
    o[k] = 0;
    return o;
}
