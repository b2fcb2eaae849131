/* stats.h — medians and spreads of repeated measurements, and the machine's
 * read bandwidth (the decode speed limit's denominator). */
#ifndef PLUMB_BENCH_STATS_H
#define PLUMB_BENCH_STATS_H

#include <stddef.h>

typedef struct { double median, min, max, mean, p90, p99; int n; double p10; } plumb_stats;

/* median, min, max, mean and the 10th/90th/99th percentiles (linear interpolation) */
plumb_stats plumb_stats_of(const double *v, int n);
/* The read loops the bandwidth is measured with: a loop is 0 or these bits
 * (software prefetch; each thread's share read as two runs at once). */
enum { PLUMB_READ_PREFETCH = 1, PLUMB_READ_TWO_RUNS = 2, PLUMB_READ_LOOPS = 4 };
/* Bytes/s reading a buffer much larger than the caches with n_threads
 * threads: the best of eight passes, each loop twice in turn;
 * *fastest_loop (when not NULL): the loop of that best pass. */
double plumb_measure_read_bandwidth(int n_threads, int *fastest_loop);
/* A buffer of bytes, first touched by n_threads threads (NULL when out of
 * memory), and the seconds one read pass over bytes of it takes with
 * n_threads threads and the given loop. */
void *plumb_read_buffer(size_t bytes, int n_threads);
double plumb_read_pass_s(const void *buf, size_t bytes, int n_threads, int loop);

#endif
