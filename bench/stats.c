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
 * not by load issue. Four loops: one run per thread without and with
 * software prefetch 2 KiB ahead, and with prefetch each thread's share read
 * as two or four runs at once (its halves or quarters, 4 KiB of each in
 * turn), as the kernels read Q8_0/Q4_0/Q4_1 groups as two. Which is fastest
 * depends on the machine and the moment: on the 2-core EPYC development
 * host, nine passes of each over 2 GiB (bench/results/s21-cpu/throwaway),
 * medians at one thread 31.6 / 34.7 / 37.5 GB/s for one / two / four runs,
 * at two threads 57.7 / 66.0 / 71.2, and in another minute 33.5 / 35.4 /
 * 38.4 and 53.2 / 60.7 / 54.1; one run with prefetch read 5-11% less than
 * without. The limit is the fastest: the readers' best, not ours. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

static const struct { int runs, prefetch; } read_loops[PLUMB_READ_LOOPS] = {{1, 0}, {1, 1}, {2, 1}, {4, 1}};

/* vectors [lo, hi) (a multiple of 4 apart) */
static inline __attribute__((always_inline)) v2u64 read_span(const v2u64 *v, size_t lo, size_t hi, const int prefetch) {
    v2u64 a = {0, 0}, b = a, c = a, d = a;
    for (size_t i = lo; i < hi; i += 4) {
        if (prefetch) __builtin_prefetch(&v[i] + 128, 0, 3);
        a ^= v[i];
        b ^= v[i + 1];
        c ^= v[i + 2];
        d ^= v[i + 3];
    }
    return a ^ b ^ c ^ d;
}

/* one thread's share of a read pass, in an enclosing parallel region;
 * inlined with runs and prefetch constants, so each loop is written once */
static inline __attribute__((always_inline)) v2u64 read_share(const v2u64 *v, size_t vecs, const int runs, const int prefetch) {
    const size_t me = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads(), quads = vecs / 4;
    const size_t lo = quads * me / nt * 4, hi = quads * (me + 1) / nt * 4;
    const size_t part = (hi - lo) / (4 * (size_t)runs) * 4, slice = 4096 / sizeof(v2u64);
    v2u64 r = {0, 0};
    for (size_t i = 0; runs > 1 && i < part; i += slice) {
        const size_t n = part - i < slice ? part - i : slice;
        for (int k = 0; k < runs; k++) r ^= read_span(v, lo + k * part + i, lo + k * part + i + n, prefetch);
    }
    return r ^ read_span(v, runs > 1 ? lo + runs * part : lo, hi, prefetch); /* one run: all of it */
}

static uint64_t read_loop(const v2u64 *v, size_t vecs, int n_threads, int loop) {
    uint64_t total = 0;
#pragma omp parallel num_threads(n_threads) reduction(^ : total)
    {
        v2u64 r;
        switch (loop) {
        case 0: r = read_share(v, vecs, read_loops[0].runs, read_loops[0].prefetch); break;
        case 1: r = read_share(v, vecs, read_loops[1].runs, read_loops[1].prefetch); break;
        case 2: r = read_share(v, vecs, read_loops[2].runs, read_loops[2].prefetch); break;
        default: r = read_share(v, vecs, read_loops[3].runs, read_loops[3].prefetch); break;
        }
        total ^= r[0] ^ r[1];
    }
    return total;
}

const char *plumb_read_loop_name(int loop) {
    static const char *names[PLUMB_READ_LOOPS] = {"one run", "one run, prefetch", "two runs, prefetch", "four runs, prefetch"};
    return loop >= 0 && loop < PLUMB_READ_LOOPS ? names[loop] : "?";
}

double plumb_read_pass_s(const void *buf, size_t bytes, int n_threads, int loop) {
    const double t0 = plumb_time_s();
    const uint64_t total = read_loop(buf, bytes / sizeof(v2u64) / 4 * 4, n_threads, loop);
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

double plumb_measure_read_bandwidth(int n_threads, int *fastest_loop) {
    const size_t n = (size_t)2048 << 20; /* 2 GiB: far beyond any cache (L3s of 508 MiB exist) */
    void *buf = plumb_read_buffer(n, n_threads);
    if (!buf) return 0;
    double best = 0;
    for (int pass = 0; pass < 2 * PLUMB_READ_LOOPS; pass++) { /* each loop twice, in turn */
        const int loop = pass % PLUMB_READ_LOOPS;
        const double bw = (double)n / plumb_read_pass_s(buf, n, n_threads, loop);
        if (bw > best) {
            best = bw;
            if (fastest_loop) *fastest_loop = loop;
        }
    }
    free(buf);
    return best;
}

/* ---- the compute ceiling ---- */

double plumb_measure_compute_peak(const plumb_kernels *k, int n_threads, int f32) {
    int64_t (*loop)(int64_t) = f32 ? k->f32_peak : k->int8_peak;
    if (!loop || n_threads < 1) return 0;
    /* rounds for about 20 ms a thread, from a first short run */
    int64_t rounds = 4096;
    for (;;) {
        const double t0 = plumb_time_s();
        loop(rounds);
        const double dt = plumb_time_s() - t0;
        if (dt > 2e-3 || rounds > ((int64_t)1 << 40)) {
            rounds = (int64_t)((double)rounds * 20e-3 / (dt > 0 ? dt : 1e-6)) + 1;
            break;
        }
        rounds *= 4;
    }
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        int64_t done = 0;
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(n_threads) reduction(+ : done)
        {
#pragma omp barrier
#pragma omp master
            t0 = plumb_time_s();
            done += loop(rounds);
#pragma omp barrier
#pragma omp master
            t1 = plumb_time_s();
        }
        if (t1 > t0 && done / (t1 - t0) > best) best = (double)done / (t1 - t0);
    }
    return best;
}
