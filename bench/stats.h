/* stats.h — medians and spreads of repeated measurements, and the machine's
 * read bandwidth (the decode speed limit's denominator). */
#ifndef PLUMB_BENCH_STATS_H
#define PLUMB_BENCH_STATS_H

typedef struct { double median, min, max, mean, p90, p99; int n; } plumb_stats;

/* median, min, max, mean and the 90th/99th percentiles (linear interpolation) */
plumb_stats plumb_stats_of(const double *v, int n);
/* Bytes/s reading a buffer much larger than the caches with n_threads
 * threads (best of several passes). */
double plumb_measure_read_bandwidth(int n_threads);

#endif
