#include "cli.h"

#include "../include/plumb.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "plumb %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int cli_str(int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "plumb %s: option %s needs a value\n", argv[0], argv[*i]);
        return -1;
    }
    *out = argv[++*i];
    return 0;
}

int cli_int(int argc, char **argv, int *i, long min, long max, int *out) {
    const char *s;
    if (cli_str(argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "plumb %s: %s expects an integer in [%ld, %ld], got '%s'\n", argv[0], argv[*i - 1], min, max, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_u64(int argc, char **argv, int *i, uint64_t *out) {
    const char *s;
    if (cli_str(argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "plumb %s: %s expects a non-negative integer, got '%s'\n", argv[0], argv[*i - 1], s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(int argc, char **argv, int *i, double min, double max, float *out) {
    const char *s;
    if (cli_str(argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "plumb %s: %s expects a number in [%g, %g], got '%s'\n", argv[0], argv[*i - 1], min, max, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int cli_threads(int argc, char **argv, int *i, int *out) {
    if (*i + 1 < argc && strcmp(argv[*i + 1], "all") == 0) {
        ++*i;
        *out = 0;
        return 0;
    }
    return cli_int(argc, argv, i, 0, 4096, out);
}

int cli_sampler_flag(int argc, char **argv, int *i, void *params, int *seed_given) {
    plumb_sampler_params *sp = params;
    const char *a = argv[*i];
    int rc;
    if (!strcmp(a, "--temp")) rc = cli_float(argc, argv, i, 0, 100, &sp->temp);
    else if (!strcmp(a, "--top-k")) rc = cli_int(argc, argv, i, 0, 1 << 30, &sp->top_k);
    else if (!strcmp(a, "--top-p")) rc = cli_float(argc, argv, i, 0, 1, &sp->top_p);
    else if (!strcmp(a, "--min-p")) rc = cli_float(argc, argv, i, 0, 1, &sp->min_p);
    else if (!strcmp(a, "--repeat-penalty")) rc = cli_float(argc, argv, i, 0.01, 100, &sp->repeat_penalty);
    else if (!strcmp(a, "--repeat-last-n")) rc = cli_int(argc, argv, i, 0, 1 << 20, &sp->repeat_last_n);
    else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        rc = cli_u64(argc, argv, i, &sp->seed);
        if (seed_given) *seed_given = 1;
    } else return 0;
    return rc ? -1 : 1;
}

int cli_gpu_layers(int argc, char **argv, int *i, int *out) {
    if (*i + 1 < argc && strcmp(argv[*i + 1], "all") == 0) {
        ++*i;
        *out = -1;
        return 0;
    }
    return cli_int(argc, argv, i, 0, 100000, out);
}
