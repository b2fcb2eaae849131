/* bench_kernels.c — matrix-vector throughput per weight type and kernel set,
 * against this machine's read bandwidth measured in the same run.
 *
 *   make bench-kernels && build/bench-kernels [rows cols [TYPES [hot]]]
 *                         build/bench-kernels attention [POSITIONS ...]
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

/* One token's attention over a TinyLlama-shaped cache (22 layers, 4 KV
 * heads of 64 floats, 8 query heads each, rows laid out as the paged cache
 * lays them: a 16-position block holds every layer's rows), one thread:
 * every head through attend, against each group through attend_group, the
 * two alternating rep by rep; best of the reps. */
static int bench_attention(int len) {
    enum { LAYERS = 22, KVH = 4, HD = 64, GROUP = 8, BLOCK = 16 };
    const plumb_kernels *k = plumb_kernels_active();
    const size_t row = KVH * HD, blocks = (size_t)(len + BLOCK - 1) / BLOCK, n = row * BLOCK * LAYERS * blocks;
    float *kc = malloc(sizeof(float) * n), *vc = malloc(sizeof(float) * n), *att = malloc(sizeof(float) * (size_t)len * GROUP);
    const float **kr = malloc(sizeof(float *) * (size_t)len), **vr = malloc(sizeof(float *) * (size_t)len);
    if (!kc || !vc || !att || !kr || !vr) return 1;
    plumb_rng rng;
    plumb_rng_seed(&rng, 2);
    for (size_t i = 0; i < n; i++) kc[i] = plumb_rng_f32(&rng) - 0.5f, vc[i] = plumb_rng_f32(&rng) - 0.5f;
    float q[GROUP * HD], out[GROUP * HD];
    for (int i = 0; i < GROUP * HD; i++) q[i] = plumb_rng_f32(&rng) - 0.5f;
    double best[2] = {1e9, 1e9};
    for (int rep = 0; rep < 40; rep++)
        for (int grouped = 0; grouped < 2; grouped++) {
            const double t0 = plumb_time_s();
            for (int l = 0; l < LAYERS; l++)
                for (int h = 0; h < KVH; h++) {
                    for (int p = 0; p < len; p++) {
                        const size_t off = (((size_t)(p / BLOCK) * LAYERS + (size_t)l) * BLOCK + (size_t)(p % BLOCK)) * row + (size_t)h * HD;
                        kr[p] = kc + off, vr[p] = vc + off;
                    }
                    if (grouped && k->attend_group) k->attend_group(HD, len, GROUP, q, kr, vr, 0.125f, att, out);
                    else
                        for (int j = 0; j < GROUP; j++) k->attend(HD, len, q + j * HD, kr, vr, 0.125f, att, out + j * HD);
                }
            const double dt = plumb_time_s() - t0;
            if (dt < best[grouped]) best[grouped] = dt;
        }
    printf("| %d | %s | %.3f | %.3f | %.2f |\n", len, k->name, 1e3 * best[0], 1e3 * best[1], best[1] / best[0]);
    free(kc), free(vc), free(att), free(kr), free(vr);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "attention")) { /* build/bench-kernels attention [LEN ...] */
        printf("# one token's attention, TinyLlama-1.1B shape, one thread: ms per token, best of 40\n\n");
        printf("| positions | kernels | per head (attend) | per KV group (attend_group) | ratio |\n|---|---|---|---|---|\n");
        for (int i = 2; i < argc || i == 2; i++)
            if (bench_attention(i < argc ? atoi(argv[i]) : 512)) return 1;
        return 0;
    }
    const int rows = argc > 2 ? atoi(argv[1]) : 5632, cols = argc > 2 ? atoi(argv[2]) : 2048;
    const int hot = argc > 4 && !strcmp(argv[4], "hot"), reps = hot ? 201 : 31, n_threads = omp_get_max_threads();
    printf("# plumb kernel bench: %d x %d matrix-vector, %d reps%s, %s, cpu: %s\n", rows, cols, reps, hot ? " on one cache-resident copy" : "",
           plumb_kernels_active()->name, plumb_cpu_features());
    double bw1 = plumb_measure_read_bandwidth(1, NULL), bwn = plumb_measure_read_bandwidth(n_threads, NULL);
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
                packed[c] = (plumb_matrix){.type = types[ti], .rows = rows, .cols = cols, .row_bytes = rb, .data = w + bytes * (size_t)c, .name = "bench"};
                plumb_matrix_repack(&packed[c]);
            }
            int thr[2] = {1, n_threads};
            for (int ti2 = 0; ti2 < (n_threads > 1 ? 2 : 1); ti2++) {
                omp_set_num_threads(thr[ti2]);
                double gbs[256];
                for (int rep = 0; rep < reps; rep++) {
                    plumb_matrix m = {.type = types[ti], .rows = rows, .cols = cols, .row_bytes = rb, .data = w + bytes * (size_t)(rep % copies), .name = "bench"};
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
