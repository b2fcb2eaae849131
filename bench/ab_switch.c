/* ab_switch.c — is a small decode speedup real on a noisy machine? Times
 * single-token decode steps of one model in one process with an
 * environment switch alternating between two values token by token (in
 * ABBA order, so neither side always follows the other), and reports each
 * side's per-token time (median, p10, p90, mean) and the ratio of medians.
 * Both sides see the same positions, the same cache and the same
 * neighbours on a shared host; comparing two runs of a benchmark, minutes
 * apart, does not (on the 2-core development machine run-to-run swings of
 * 10-20% hide a 2% change).
 *
 *   make bench-ab && build/bench-ab MODEL THREADS TOKENS VAR [A B]
 *
 * VAR must be a switch the forward pass reads at every step
 * (PLUMB_TOKEN_REGION); A and B default to 0 and 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/util.h"
#include "../include/plumb.h"

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *var, const char *value, double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, by_value);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    printf("%s=%-4s %4d tokens  median %8.3f ms  p10 %8.3f  p90 %8.3f  mean %8.3f\n", var, value, n, 1e3 * t[n / 2], 1e3 * t[n / 10],
           1e3 * t[n * 9 / 10], 1e3 * sum / n);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "usage: %s MODEL THREADS TOKENS VAR [A B]\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[2]), n = atoi(argv[3]);
    const char *var = argv[4], *val[2] = {argc == 7 ? argv[5] : "0", argc == 7 ? argv[6] : "1"};
    if (threads < 1 || n < 10) {
        fprintf(stderr, "THREADS must be >= 1 and TOKENS >= 10\n");
        return 2;
    }
    plumb_model *m = plumb_model_load(argv[1]);
    if (!m) {
        fprintf(stderr, "%s\n", plumb_last_error());
        return 1;
    }
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_threads = threads;
    cp.n_ctx = n + 16;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    double *t[2] = {malloc(sizeof(double) * (size_t)n), malloc(sizeof(double) * (size_t)n)};
    if (!c || !t[0] || !t[1]) {
        fprintf(stderr, "%s\n", c ? "out of memory" : plumb_last_error());
        return 1;
    }
    plumb_token prompt[8] = {1, 300, 301, 302, 17, 5, 6, 7};
    for (int i = 0; i < 8; i++) prompt[i] %= plumb_n_vocab(m);
    if (plumb_eval(c, prompt, 8, 0)) {
        fprintf(stderr, "%s\n", plumb_last_error());
        return 1;
    }
    int k[2] = {0, 0};
    plumb_token tok = 40;
    for (int i = 0; i < n; i++) {
        const int side = (i / 2 + i) % 2; /* A B B A A B B A ... */
        setenv(var, val[side], 1);
        const double t0 = plumb_time_s();
        if (plumb_eval(c, &tok, 1, 8 + i)) {
            fprintf(stderr, "%s\n", plumb_last_error());
            return 1;
        }
        t[side][k[side]++] = plumb_time_s() - t0;
        tok = (plumb_token)((tok * 7 + 13) % (plumb_n_vocab(m) - 3) + 3); /* any tokens: the time does not depend on them */
    }
    printf("# %s, %d threads, %d decode steps at positions 8..%d, %s alternating per token\n", argv[1], threads, n, 8 + n - 1, var);
    report(var, val[0], t[0], k[0]);
    report(var, val[1], t[1], k[1]);
    printf("median %s=%s / %s=%s: %.3f\n", var, val[1], var, val[0], t[1][k[1] / 2] / t[0][k[0] / 2]);
    plumb_ctx_free(c);
    plumb_model_free(m);
    free(t[0]);
    free(t[1]);
    return 0;
}
