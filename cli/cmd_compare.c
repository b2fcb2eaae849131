/* cmd_compare.c — plumb compare A.json B.json: speedup ratios between two
 * bench records, only where the conditions match. It refuses, saying why,
 * when the runs differ in model, prompt or output length, concurrency or
 * the number of tokens generated: such a ratio would not be a speedup. Each
 * ratio says whether the two runs generated the same greedy tokens (their
 * picks' hashes): a faster run whose tokens differ changed the arithmetic. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *s_(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static long long i_(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double st(json_t *o, const char *k, const char *f) { return json_number_value(json_object_get(json_object_get(o, k), f)); }

static json_t *load(const char *path) {
    json_error_t e;
    json_t *r = json_load_file(path, 0, &e);
    if (!r) {
        cli_fail("compare", "%s: not readable JSON (%s, line %d)", path, e.text, e.line);
        return NULL;
    }
    if (!json_is_array(json_object_get(r, "runs"))) {
        cli_fail("compare", "%s: not a plumb bench record (no \"runs\")", path);
        json_decref(r);
        return NULL;
    }
    return r;
}

/* Appends to why the conditions that differ; returns how many. */
static int differences(json_t *a, json_t *b, char *why, size_t n) {
    int d = 0;
#define DIFF(cond, ...) do { if (cond) { size_t l = strlen(why); snprintf(why + l, n - l, __VA_ARGS__); d++; } } while (0)
    if (!strcmp(s_(a, "type"), s_(b, "type")))
        DIFF(strcmp(s_(a, "sha256"), s_(b, "sha256")), " model differs (sha256 %.12s vs %.12s);", s_(a, "sha256"), s_(b, "sha256"));
    else
        DIFF(strcmp(s_(a, "source_model"), s_(b, "source_model")), " model differs (%s vs %s);", s_(a, "source_model"), s_(b, "source_model"));
    DIFF(i_(a, "prompt_tokens") != i_(b, "prompt_tokens"), " prompt length %lld vs %lld;", i_(a, "prompt_tokens"), i_(b, "prompt_tokens"));
    DIFF(i_(a, "max_output_tokens") != i_(b, "max_output_tokens"), " output length %lld vs %lld;", i_(a, "max_output_tokens"), i_(b, "max_output_tokens"));
    DIFF(i_(a, "concurrency") != i_(b, "concurrency"), " concurrency %lld vs %lld;", i_(a, "concurrency"), i_(b, "concurrency"));
    DIFF(i_(a, "generated_tokens") / (i_(a, "requests") ? i_(a, "requests") : 1) != i_(b, "generated_tokens") / (i_(b, "requests") ? i_(b, "requests") : 1),
         " generated tokens per request %lld vs %lld;", i_(a, "generated_tokens") / (i_(a, "requests") ? i_(a, "requests") : 1),
         i_(b, "generated_tokens") / (i_(b, "requests") ? i_(b, "requests") : 1));
#undef DIFF
    return d;
}

static void label(json_t *r, char *buf, size_t n) {
    snprintf(buf, n, "%s %s %lldt p%lld", s_(r, "type"), s_(r, "backend"), i_(r, "threads"), i_(r, "prompt_tokens"));
}

int cmd_compare(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: plumb compare BASELINE.json CANDIDATE.json\n"
               "  Pairs runs by type, backend, threads and prompt length (or the two runs, when each\n"
               "  record has one) and prints candidate/baseline ratios of medians with their spread.\n");
        return 0;
    }
    if (argc != 3) return cli_fail("compare", "usage: plumb compare BASELINE.json CANDIDATE.json");
    json_t *A = load(argv[1]), *B = load(argv[2]);
    if (!A || !B) { json_decref(A); json_decref(B); return 1; }
    json_t *ra = json_object_get(A, "runs"), *rb = json_object_get(B, "runs");
    int compared = 0, refused = 0;
    size_t i, j;
    json_t *a, *b;
    printf("baseline:  %s (%s, %s)\ncandidate: %s (%s, %s)\n\n", argv[1], s_(A, "date"), s_(A, "plumb_version"), argv[2], s_(B, "date"), s_(B, "plumb_version"));
    json_array_foreach(ra, i, a) {
        json_t *match = NULL;
        if (json_array_size(ra) == 1 && json_array_size(rb) == 1) match = json_array_get(rb, 0);
        else
            json_array_foreach(rb, j, b)
                if (!strcmp(s_(a, "type"), s_(b, "type")) && !strcmp(s_(a, "backend"), s_(b, "backend")) && i_(a, "threads") == i_(b, "threads") &&
                    i_(a, "prompt_tokens") == i_(b, "prompt_tokens")) { match = b; break; }
        char la[96], lb[96], why[512] = "";
        label(a, la, sizeof la);
        if (!match) { printf("%-28s no run with the same type, backend, threads and prompt length in %s\n", la, argv[2]); continue; }
        label(match, lb, sizeof lb);
        if (differences(a, match, why, sizeof why)) {
            printf("%-28s vs %-28s REFUSED:%s\n", la, lb, why);
            refused++;
            continue;
        }
        const double dm = st(match, "decode_tps", "median") / st(a, "decode_tps", "median");
        const double dlo = st(match, "decode_tps", "min") / st(a, "decode_tps", "max"), dhi = st(match, "decode_tps", "max") / st(a, "decode_tps", "min");
        const double pm = st(match, "prefill_tps", "median") / st(a, "prefill_tps", "median");
        const double plo = st(match, "prefill_tps", "min") / st(a, "prefill_tps", "max"), phi = st(match, "prefill_tps", "max") / st(a, "prefill_tps", "min");
        const double tm = st(a, "ttft_ms", "p50") / st(match, "ttft_ms", "p50");
        /* the same greedy tokens? (records from before the picks' hash have none) */
        const char *ha = s_(a, "greedy_picks_fnv1a"), *hb = s_(match, "greedy_picks_fnv1a");
        const char *picks = !*ha || !*hb ? "not recorded" : !strcmp(ha, hb) ? "the same" : "DIFFERENT";
        printf("%-28s -> %-28s decode %.2fx [%.2f-%.2f], prefill %.2fx [%.2f-%.2f], TTFT %.2fx shorter  (%.2f -> %.2f tok/s); greedy tokens %s\n", la,
               lb, dm, dlo, dhi, pm, plo, phi, tm, st(a, "decode_tps", "median"), st(match, "decode_tps", "median"), picks);
        compared++;
    }
    printf("\n%d comparisons, %d refused. Ratios are candidate/baseline medians; [ranges] pair the extremes of the repetitions.\n", compared, refused);
    json_decref(A);
    json_decref(B);
    return compared == 0 || refused ? 1 : 0;
}
