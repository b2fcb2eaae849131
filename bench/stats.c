#include "stats.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double q) {
    double pos = q * (n - 1);
    int i = (int)pos;
    return i + 1 < n ? sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

plumb_stats plumb_stats_of(const double *v, int n) {
    plumb_stats s = {0, 0, 0, 0, 0, 0, n, 0};
    if (n <= 0) return s;
    double *c = malloc(sizeof(double) * (size_t)n);
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    s.min = c[0];
    s.max = c[n - 1];
    s.median = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    for (int i = 0; i < n; i++) s.mean += c[i] / n;
    s.p10 = percentile(c, n, 0.10);
    s.p90 = percentile(c, n, 0.90);
    s.p99 = percentile(c, n, 0.99);
    free(c);
    return s;
}

/* 16-byte vector loads (SSE2 / NEON width, so any build of the bench runs
 * them) into four independent accumulators, so the loop is bound by memory,
 * not by load issue; with or without software prefetch 2 KiB ahead, as the
 * kernels do. Which is faster depends on the machine (on the 2-core EPYC
 * development host the hardware prefetchers alone read ~5% more), and the
 * limit is the faster one: the readers' best, not ours. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

/* one thread's share of a read pass, in an enclosing parallel region;
 * inlined with prefetch a constant, so each loop is written once */
static inline __attribute__((always_inline)) v2u64 read_share(const v2u64 *v, size_t vecs, const int prefetch) {
    v2u64 a = {0, 0}, b = a, c = a, d = a;
#pragma omp for schedule(static)
    for (size_t i = 0; i < vecs; i += 4) {
        if (prefetch) __builtin_prefetch(&v[i] + 128, 0, 3);
        a ^= v[i];
        b ^= v[i + 1];
        c ^= v[i + 2];
        d ^= v[i + 3];
    }
    return a ^ b ^ c ^ d;
}

static uint64_t read_loop(const v2u64 *v, size_t vecs, int n_threads, int prefetch) {
    uint64_t total = 0;
#pragma omp parallel num_threads(n_threads) reduction(^ : total)
    {
        const v2u64 r = prefetch ? read_share(v, vecs, 1) : read_share(v, vecs, 0);
        total ^= r[0] ^ r[1];
    }
    return total;
}

double plumb_read_pass_s(const void *buf, size_t bytes, int n_threads, int prefetch) {
    const double t0 = plumb_time_s();
    const uint64_t total = read_loop(buf, bytes / sizeof(v2u64) / 4 * 4, n_threads, prefetch);
    const double dt = plumb_time_s() - t0;
    static volatile uint64_t sink;
    sink += total; /* the loads are used */
    return dt;
}

void *plumb_read_buffer(size_t bytes, int n_threads) {
    v2u64 *buf = malloc(bytes);
    if (!buf) return NULL;
    const size_t vecs = bytes / sizeof(v2u64);
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < vecs; i++) buf[i] = (v2u64){i, i + 1}; /* first touch by the reading threads */
    return buf;
}

double plumb_measure_read_bandwidth(int n_threads, int *prefetch_faster) {
    const size_t n = (size_t)2048 << 20; /* 2 GiB: far beyond any cache (L3s of 508 MiB exist) */
    void *buf = plumb_read_buffer(n, n_threads);
    if (!buf) return 0;
    double best = 0;
    for (int pass = 0; pass < 6; pass++) { /* with and without prefetch in turn */
        const double bw = (double)n / plumb_read_pass_s(buf, n, n_threads, pass & 1);
        if (bw > best) {
            best = bw;
            if (prefetch_faster) *prefetch_faster = pass & 1;
        }
    }
    free(buf);
    return best;
}
