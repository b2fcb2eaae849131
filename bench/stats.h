/* stats.h — medians and spreads of repeated measurements, and the machine's
 * read bandwidth (the decode speed limit's denominator). */
#ifndef PLUMB_BENCH_STATS_H
#define PLUMB_BENCH_STATS_H

#include <stddef.h>

#include "../simd/kernels.h"

typedef struct { double median, min, max, mean, p90, p99; int n; double p10; } plumb_stats;

/* median, min, max, mean and the 10th/90th/99th percentiles (linear interpolation) */
plumb_stats plumb_stats_of(const double *v, int n);
/* The bandwidth is measured with PLUMB_READ_LOOPS read loops, 0 .. LOOPS-1:
 * one run a thread, without and with software prefetch; two and four runs
 * a thread at once, with prefetch. Their names, for records: */
enum { PLUMB_READ_LOOPS = 4 };
const char *plumb_read_loop_name(int loop);
/* Bytes/s reading a buffer much larger than the caches with n_threads
 * threads: the best of eight passes, each loop twice in turn;
 * *fastest_loop (when not NULL): the loop of that best pass. */
double plumb_measure_read_bandwidth(int n_threads, int *fastest_loop);
/* A buffer of bytes, first touched by n_threads threads (NULL when out of
 * memory), and the seconds one read pass over bytes of it takes with
 * n_threads threads and the given loop. */
void *plumb_read_buffer(size_t bytes, int n_threads);
double plumb_read_pass_s(const void *buf, size_t bytes, int n_threads, int loop);

/* Multiply-adds per second the kernel table k's int8 multiply-add (f32 = 0)
 * or f32 fused multiply-add (f32 = 1) reaches with n_threads threads, all
 * in registers (plumb_kernels.int8_peak / f32_peak): the best of five
 * passes of about 20 ms. 0 where the table has no such loop. Prefill is
 * compute bound: its multiply-adds per second over this say how close it
 * is to the ceiling. */
double plumb_measure_compute_peak(const plumb_kernels *k, int n_threads, int f32);

#endif
