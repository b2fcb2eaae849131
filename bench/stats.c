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
    plumb_stats s = {0, 0, 0, 0, 0, 0, n};
    if (n <= 0) return s;
    double *c = malloc(sizeof(double) * (size_t)n);
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    s.min = c[0];
    s.max = c[n - 1];
    s.median = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    for (int i = 0; i < n; i++) s.mean += c[i] / n;
    s.p90 = percentile(c, n, 0.90);
    s.p99 = percentile(c, n, 0.99);
    free(c);
    return s;
}

/* Software prefetch 2 KiB ahead plus 16-byte vector loads (SSE2 / NEON width, so any build of the bench runs
 * them) into four independent accumulators: the loop is bound by memory,
 * not by load issue. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

double plumb_measure_read_bandwidth(int n_threads) {
    const size_t n = (size_t)2048 << 20; /* 2 GiB: far beyond any cache (L3s of 260 MiB exist) */
    v2u64 *buf = malloc(n);
    if (!buf) return 0;
    const size_t vecs = n / sizeof(v2u64);
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < vecs; i++) buf[i] = (v2u64){i, i + 1}; /* first touch by the reading threads */
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 5; pass++) {
        uint64_t total = 0;
        double t0 = plumb_time_s();
#pragma omp parallel num_threads(n_threads) reduction(^ : total)
        {
            v2u64 a = {0, 0}, b = a, c = a, d = a;
#pragma omp for schedule(static)
            for (size_t i = 0; i < vecs; i += 4) {
                __builtin_prefetch(&buf[i] + 128, 0, 3); /* 2 KiB ahead, as the kernels do */
                a ^= buf[i];
                b ^= buf[i + 1];
                c ^= buf[i + 2];
                d ^= buf[i + 3];
            }
            v2u64 r = a ^ b ^ c ^ d;
            total ^= r[0] ^ r[1];
        }
        double bw = (double)n / (plumb_time_s() - t0);
        sink += total;
        if (bw > best) best = bw;
    }
    free(buf);
    return best;
}
