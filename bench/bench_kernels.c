/* bench_kernels.c — matrix-vector throughput per weight type and kernel set,
 * against this machine's read bandwidth measured in the same run.
 *
 *   make bench-kernels && build/bench-kernels [rows cols [TYPES [hot]]]
 *
 * TYPES is a comma-separated list of type names (e.g. q4_0,q8_0); default all.
 * "hot" reads one copy of the matrix every rep: with a matrix that fits the
 * cache (e.g. 256 x 2048) that is the kernel's arithmetic ceiling, which says
 * whether a kernel short of the bandwidth limit is bound by its instructions.
 *
 * For each type: GB/s of weights streamed by plumb_matmul (one token) at 1
 * thread and all threads, as a fraction of the measured read bandwidth.
 * Timings are medians of repeated runs; min-max is printed beside them. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/util.h"
#include "../quant/quant.h"
#include "../simd/kernels.h"
#include "stats.h"

/* Whether NAME is in the comma-separated LIST (case-insensitive). */
static int name_listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncasecmp(p, name, n)) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

int main(int argc, char **argv) {
    const int rows = argc > 2 ? atoi(argv[1]) : 5632, cols = argc > 2 ? atoi(argv[2]) : 2048;
    const int hot = argc > 4 && !strcmp(argv[4], "hot"), reps = hot ? 201 : 31, n_threads = omp_get_max_threads();
    printf("# plumb kernel bench: %d x %d matrix-vector, %d reps%s, %s, cpu: %s\n", rows, cols, reps, hot ? " on one cache-resident copy" : "",
           plumb_kernels_active()->name, plumb_cpu_features());
    double bw1 = plumb_measure_read_bandwidth(1), bwn = plumb_measure_read_bandwidth(n_threads);
    printf("# read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n\n", bw1 / 1e9, bwn / 1e9, n_threads);
    printf("| type | kernels | threads | GB/s median | min-max | %% of read bandwidth |\n|---|---|---|---|---|---|\n");
    const uint32_t types[] = {PLUMB_TYPE_F32, PLUMB_TYPE_F16, PLUMB_TYPE_BF16, PLUMB_TYPE_Q8_0, PLUMB_TYPE_Q4_0,
                              PLUMB_TYPE_Q4_1, PLUMB_TYPE_Q4_K, PLUMB_TYPE_Q5_K, PLUMB_TYPE_Q6_K};
    /* Several copies of the matrix so consecutive reps read from memory, not cache. */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const plumb_type_traits *t = plumb_type_get(types[ti]);
        if (argc > 3 && !name_listed(argv[3], t->name)) continue;
        const size_t rb = plumb_type_row_bytes(types[ti], (uint64_t)cols), bytes = rb * (size_t)rows;
        /* 1 GiB of copies: well beyond the last-level cache */
        const int copies = hot ? 1 : (int)(1.1e9 / (double)bytes) + 2 > 256 ? 256 : (int)(1.1e9 / (double)bytes) + 2;
        uint8_t *w = malloc(bytes * (size_t)copies);
        float *row = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)cols),
              *y = malloc(sizeof(float) * (size_t)rows);
        void *act = malloc(plumb_matmul_act_bytes(types[ti], cols, 1) + 64);
        plumb_rng rng;
        plumb_rng_seed(&rng, 1);
        for (int c = 0; c < cols; c++) x[c] = plumb_rng_f32(&rng) - 0.5f;
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) row[c] = (plumb_rng_f32(&rng) - 0.5f) * 0.1f;
            t->from_float(row, w + (size_t)r * rb, cols);
        }
        for (int k = 1; k < copies; k++) memcpy(w + bytes * (size_t)k, w, bytes);
        const plumb_kernels *sets[] = {plumb_kernels_scalar(), plumb_kernels_active()};
        for (int si = 0; si < 2; si++) {
            if (si == 1 && sets[1] == sets[0]) break;
            plumb_kernels_select(sets[si]->name);
            /* the fast sets read 8-row repacked copies where they have kernels for them, as in a model */
            plumb_matrix packed[256];
            int n_packed = si == 1 ? copies : 0;
            for (int c = 0; c < n_packed; c++) {
                packed[c] = (plumb_matrix){types[ti], rows, cols, rb, w + bytes * (size_t)c, "bench", NULL};
                plumb_matrix_repack(&packed[c]);
            }
            int thr[2] = {1, n_threads};
            for (int ti2 = 0; ti2 < (n_threads > 1 ? 2 : 1); ti2++) {
                omp_set_num_threads(thr[ti2]);
                double gbs[256];
                for (int rep = 0; rep < reps; rep++) {
                    plumb_matrix m = {types[ti], rows, cols, rb, w + bytes * (size_t)(rep % copies), "bench", NULL};
                    if (n_packed) m = packed[rep % copies];
                    double t0 = plumb_time_s();
                    plumb_matmul(&m, x, 1, y, act, 0);
                    gbs[rep] = (double)bytes / (plumb_time_s() - t0) / 1e9;
                }
                plumb_stats s = plumb_stats_of(gbs, reps);
                double bw = thr[ti2] == 1 ? bw1 : bwn;
                printf("| %s | %s | %d | %.1f | %.1f-%.1f | %.0f%% |\n", t->name, sets[si]->name, thr[ti2], s.median, s.min, s.max,
                       100.0 * s.median * 1e9 / bw);
                fflush(stdout);
            }
            for (int c = 0; c < n_packed; c++) plumb_dealloc((void *)packed[c].packed);
        }
        plumb_kernels_select(sets[1]->name);
        omp_set_num_threads(n_threads);
        free(w); free(row); free(x); free(y); free(act);
    }
    return 0;
}
