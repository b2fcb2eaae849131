/* stats.h — medians and spreads of repeated measurements, and the machine's
 * read bandwidth (the decode speed limit's denominator). */
#ifndef PLUMB_BENCH_STATS_H
#define PLUMB_BENCH_STATS_H

#include <stddef.h>

typedef struct { double median, min, max, mean, p90, p99; int n; double p10; } plumb_stats;

/* median, min, max, mean and the 10th/90th/99th percentiles (linear interpolation) */
plumb_stats plumb_stats_of(const double *v, int n);
/* Bytes/s reading a buffer much larger than the caches with n_threads
 * threads: the best of six passes, with and without software prefetch in
 * turn; *prefetch_faster (when not NULL): whether that best pass prefetched. */
double plumb_measure_read_bandwidth(int n_threads, int *prefetch_faster);
/* A buffer of bytes, first touched by n_threads threads (NULL when out of
 * memory), and the seconds one read pass over bytes of it takes with
 * n_threads threads (the loop plumb_measure_read_bandwidth times,
 * prefetching or not). */
void *plumb_read_buffer(size_t bytes, int n_threads);
double plumb_read_pass_s(const void *buf, size_t bytes, int n_threads, int prefetch);

#endif
