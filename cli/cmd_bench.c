/* cmd_bench.c — plumb bench: baseline vs optimized on the same model, the
 * same prompt and output lengths, at concurrency 1; repeated runs after a
 * warm-up, medians with min-max; peak memory; a quality spot check; and a
 * full experiment record (JSON + Markdown) saying how to reproduce it. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../bench/harness.h"
#include "../bench/report.h"
#include "../bench/sysinfo.h"
#include "../core/backend.h"
#include "../core/util.h"
#include "../include/plumb.h"
#include "../models/convert.h"
#include "../quant/quant.h"
#include "../simd/kernels.h"
#include "cli.h"

#define MAX_LIST 16

static const char *bench_help =
    "usage: plumb bench [-m MODEL.gguf ...] [options]\n"
    "  With no -m, writes (once, to models-cache/) a small synthetic model and compares\n"
    "  F16, Q8_0 and Q4_0 on this machine in about a minute.\n"
    "  -m FILE          model (repeatable)\n"
    "  --types LIST     precisions to compare, e.g. f16,q8_0,q4_0 (made from the model with\n"
    "                   plumb quantize, cached in models-cache/); default: the model as it is\n"
    "  --backends LIST  cpu,cuda (default cpu)\n"
    "  -t, --threads LIST  e.g. 1,2,all (default 1,all)\n"
    "  -p LIST          prompt lengths in tokens (default 128)\n"
    "  -n N             generated tokens per request, never stopping early (default 64)\n"
    "  --batch LIST     sequences decoded together, e.g. 1,8,64 (default 1): aggregate tokens/s\n"
    "  --ngl LIST       layers on the GPU for the cuda backend, e.g. 11,all (default all)\n"
    "  --reps N         measured repetitions (default 3)   --warmup N (default 1)\n"
    "  -o PREFIX        write PREFIX.json and PREFIX.md (default bench/out/bench-DATE)\n"
    "  --report DIR     also write DIR/index.html with SVG charts\n"
    "  --no-quality     skip the quality spot check\n"
    "  --no-paired      skip the paired limit: after a CPU run at batch 1, its decode again\n"
    "                   with a read pass over one token's bytes before each token, giving\n"
    "                   each token's speed against the bandwidth measured beside it\n"
    "  --exact          dequantize-then-f32 arithmetic instead of int8 activations\n";

static int split_list(const char *s, char out[][32], int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= 32) return -1;
        memcpy(out[n], p, len);
        out[n][len] = 0;
        n++;
        p += len;
        if (*p == ',') p++;
    }
    return *p ? -1 : n;
}

/* bits per weight ranking, to choose the reference for the quality check */
static int precision_rank(const char *type) {
    const char *order[] = {"F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_1", "Q4_0"};
    for (int i = 0; i < 9; i++)
        if (!strcasecmp(order[i], type)) return i;
    return 99;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int ensure_dir(const char *d) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", d);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(tmp, 0755); *p = '/'; }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

typedef struct {
    char path[512], source[512], type[16], sha256[65];
} variant;

/* The model file holding `type` made from `src` (quantized once into models-cache/). */
static int make_variant(const char *src, const char *type, variant *v) {
    plumb_model *m = plumb_model_load(src);
    if (!m) return -1;
    const char *have = plumb_model_weight_type(m);
    int same = !strcasecmp(have, type);
    plumb_model_free(m);
    snprintf(v->source, sizeof v->source, "%s", src);
    snprintf(v->type, sizeof v->type, "%s", type);
    for (char *p = v->type; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    if (same) {
        snprintf(v->path, sizeof v->path, "%s", src);
        return 0;
    }
    int t = plumb_type_from_name(type);
    if (t < 0) return plumb_set_error("unknown type '%s'", type);
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    char stem[256];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strstr(stem, ".gguf");
    if (dot) *dot = 0;
    if (ensure_dir("models-cache")) return plumb_set_error("cannot create models-cache/");
    snprintf(v->path, sizeof v->path, "models-cache/%s.%s.gguf", stem, v->type);
    struct stat ss, vs;
    if (stat(v->path, &vs) == 0 && stat(src, &ss) == 0 && vs.st_mtime >= ss.st_mtime) return 0;
    fprintf(stderr, "bench: quantizing %s -> %s\n", src, v->path);
    return plumb_quantize_file(src, v->path, t, 0);
}

static json_t *stats_json(const plumb_stats *s) {
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:i}", "median", s->median, "min", s->min, "max", s->max, "mean", s->mean,
                     "p10", s->p10, "p50", s->median, "p90", s->p90, "p99", s->p99, "n", s->n);
}

static void human_cmd(int argc, char **argv, char *buf, size_t n) {
    snprintf(buf, n, "plumb");
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(buf);
        int quote = strpbrk(argv[i], " \t'\"") != NULL;
        snprintf(buf + len, n - len, quote ? " '%s'" : " %s", argv[i]);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *models[MAX_LIST];
    int n_models = 0, n_gen = 64, reps = 3, warmup = 1, quality = 1, exact = 0, paired = 1;
    char types[MAX_LIST][32], backends[MAX_LIST][32] = {"cpu"}, threads_s[MAX_LIST][32] = {"1", "all"}, prompts_s[MAX_LIST][32] = {"128"};
    char batch_s[MAX_LIST][32] = {"1"}, ngl_s[MAX_LIST][32] = {"all"};
    int n_types = 0, n_backends = 1, n_threads = 2, n_prompts = 1, n_batches = 1, n_ngl = 1;
    const char *out_prefix = NULL, *report_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_help, stdout); return 0; }
        else if (!strcmp(a, "-m")) { rc = cli_str(argc, argv, &i, &v); if (!rc && n_models < MAX_LIST) models[n_models++] = v; }
        else if (!strcmp(a, "--types")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_types = split_list(v, types, MAX_LIST)) <= 0) return cli_fail("bench", "bad --types list '%s'", v); }
        else if (!strcmp(a, "--backends")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_backends = split_list(v, backends, MAX_LIST)) <= 0) return cli_fail("bench", "bad --backends list '%s'", v); }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_threads = split_list(v, threads_s, MAX_LIST)) <= 0) return cli_fail("bench", "bad --threads list '%s'", v); }
        else if (!strcmp(a, "-p")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_prompts = split_list(v, prompts_s, MAX_LIST)) <= 0) return cli_fail("bench", "bad -p list '%s'", v); }
        else if (!strcmp(a, "--batch")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_batches = split_list(v, batch_s, MAX_LIST)) <= 0) return cli_fail("bench", "bad --batch list '%s'", v); }
        else if (!strcmp(a, "--ngl")) { rc = cli_str(argc, argv, &i, &v); if (!rc && (n_ngl = split_list(v, ngl_s, MAX_LIST)) <= 0) return cli_fail("bench", "bad --ngl list '%s'", v); }
        else if (!strcmp(a, "-n")) rc = cli_int(argc, argv, &i, 1, 1 << 16, &n_gen);
        else if (!strcmp(a, "--reps")) rc = cli_int(argc, argv, &i, 1, 1000, &reps);
        else if (!strcmp(a, "--warmup")) rc = cli_int(argc, argv, &i, 0, 100, &warmup);
        else if (!strcmp(a, "-o")) rc = cli_str(argc, argv, &i, &out_prefix);
        else if (!strcmp(a, "--report")) rc = cli_str(argc, argv, &i, &report_dir);
        else if (!strcmp(a, "--no-quality")) quality = 0;
        else if (!strcmp(a, "--no-paired")) paired = 0;
        else if (!strcmp(a, "--exact")) exact = 1;
        else return cli_fail("bench", "unknown option '%s' (plumb bench --help)", a);
        if (rc) return 2;
    }
    int threads[MAX_LIST], prompts[MAX_LIST];
    for (int i = 0; i < n_threads; i++) {
        char *end;
        threads[i] = !strcmp(threads_s[i], "all") ? plumb_default_threads() : (int)strtol(threads_s[i], &end, 10);
        if (threads[i] <= 0 || (strcmp(threads_s[i], "all") && *end)) return cli_fail("bench", "bad thread count '%s'", threads_s[i]);
    }
    for (int i = 0; i < n_prompts; i++) {
        char *end;
        prompts[i] = (int)strtol(prompts_s[i], &end, 10);
        if (prompts[i] <= 0 || *end || prompts[i] > 1 << 16) return cli_fail("bench", "bad prompt length '%s'", prompts_s[i]);
    }
    for (int b = 0; b < n_backends; b++)
        if (strcmp(backends[b], "cpu") && strcmp(backends[b], "cuda")) return cli_fail("bench", "unknown backend '%s' (cpu, cuda)", backends[b]);
    int batches[MAX_LIST], ngls[MAX_LIST];
    for (int i = 0; i < n_batches; i++) {
        char *end;
        batches[i] = (int)strtol(batch_s[i], &end, 10);
        if (batches[i] <= 0 || *end || batches[i] > 4096) return cli_fail("bench", "bad batch size '%s'", batch_s[i]);
    }
    for (int i = 0; i < n_ngl; i++) {
        char *end;
        ngls[i] = !strcmp(ngl_s[i], "all") ? -1 : (int)strtol(ngl_s[i], &end, 10);
        if (ngls[i] == 0 || (ngls[i] > 0 && *end)) return cli_fail("bench", "bad --ngl value '%s' (a layer count or all)", ngl_s[i]);
    }

    /* the built-in default: a small synthetic model, three precisions */
    const char *default_model = "models-cache/mini-60m.F16.gguf";
    if (n_models == 0) {
        if (ensure_dir("models-cache")) return cli_fail("bench", "cannot create models-cache/");
        if (!file_exists(default_model)) {
            plumb_synth_params sp = {.shape = *plumb_shape_find("mini-60m"), .type = PLUMB_TYPE_F16, .seed = 1};
            fprintf(stderr, "bench: writing the default synthetic model %s (random weights, mini-60m shape)\n", default_model);
            if (plumb_make_synthetic(&sp, default_model)) return cli_fail("bench", "%s", plumb_last_error());
        }
        models[n_models++] = default_model;
        if (n_types == 0) {
            n_types = 3;
            strcpy(types[0], "f16"); strcpy(types[1], "q8_0"); strcpy(types[2], "q4_0");
        }
    }
    variant vars[MAX_LIST * MAX_LIST];
    int n_vars = 0;
    for (int mi = 0; mi < n_models; mi++) {
        if (n_types == 0) {
            plumb_model *m = plumb_model_load(models[mi]);
            if (!m) return cli_fail("bench", "%s", plumb_last_error());
            if (make_variant(models[mi], plumb_model_weight_type(m), &vars[n_vars])) { plumb_model_free(m); return cli_fail("bench", "%s", plumb_last_error()); }
            plumb_model_free(m);
            n_vars++;
        } else {
            for (int ti = 0; ti < n_types; ti++, n_vars++)
                if (make_variant(models[mi], types[ti], &vars[n_vars])) return cli_fail("bench", "%s", plumb_last_error());
        }
    }

    plumb_sysinfo si;
    plumb_sysinfo_get(&si);
    char date[32], cmdline[2048];
    plumb_now_iso8601(date, sizeof date);
    human_cmd(argc, argv, cmdline, sizeof cmdline);
    fprintf(stderr, "bench: measuring read bandwidth ...\n");
    double bw_at[MAX_LIST];
    for (int i = 0; i < n_threads; i++) bw_at[i] = plumb_measure_read_bandwidth(threads[i], NULL);
    const double bw = plumb_measure_read_bandwidth(plumb_default_threads(), NULL);
    /* prefill's ceiling: the kernel table's int8 multiply-add (quantized types) or f32 FMA (float types, --exact) */
    const plumb_kernels *kt = plumb_kernels_active();
    double peak_i8[MAX_LIST], peak_f32[MAX_LIST];
    for (int i = 0; i < n_threads; i++) {
        peak_i8[i] = plumb_measure_compute_peak(kt, threads[i], 0);
        peak_f32[i] = plumb_measure_compute_peak(kt, threads[i], 1);
    }
    /* the GPU, when asked for */
    char gpu_name[128] = "none", gpu_why[512] = "";
    double gpu_bw = 0;
    for (int b = 0; b < n_backends; b++)
        if (!strcmp(backends[b], "cuda")) {
            const plumb_backend_iface *g = plumb_backend_cuda(gpu_why, sizeof gpu_why);
            size_t fr, tot;
            char err[256];
            if (g && g->device_info(gpu_name, sizeof gpu_name, &fr, &tot, err, sizeof err) == 0) {
                fprintf(stderr, "bench: measuring %s copy bandwidth ...\n", gpu_name);
                gpu_bw = g->copy_bandwidth();
            } else {
                fprintf(stderr, "bench: cuda backend skipped: %s\n", gpu_why);
            }
        }

    json_t *root = json_object(), *runs = json_array(), *qual = json_array();
    json_object_set_new(root, "plumb_version", json_string(plumb_version()));
    json_object_set_new(root, "date", json_string(date));
    json_object_set_new(root, "command", json_string(cmdline));
    json_object_set_new(root, "machine", json_pack("{s:s,s:s,s:i,s:f,s:s,s:s,s:f}", "cpu", si.cpu, "cpu_features", si.features, "cores", si.cores,
                                                  "memory_gib", si.mem_gib, "os", si.os, "gpu", gpu_name, "read_bandwidth_gbs", bw / 1e9));
    if (gpu_bw > 0) json_object_set_new(json_object_get(root, "machine"), "gpu_copy_bandwidth_gbs", json_real(gpu_bw / 1e9));
    json_object_set_new(json_object_get(root, "machine"), "last_level_cache_mib", json_real((double)si.llc_bytes / 1048576.0));
    json_t *peaks = json_array();
    for (int i = 0; i < n_threads; i++)
        json_array_append_new(peaks, json_pack("{s:i,s:s,s:f,s:f}", "threads", threads[i], "kernels", kt->name, "int8_gmacs", peak_i8[i] / 1e9, "f32_gmacs",
                                               peak_f32[i] / 1e9));
    json_object_set_new(json_object_get(root, "machine"), "compute_peak", peaks);
    json_object_set_new(root, "settings", json_pack("{s:i,s:i,s:i,s:i,s:s,s:b}", "max_output_tokens", n_gen, "reps", reps, "warmup", warmup,
                                                   "concurrency", 1, "prompt", "built-in English text, tokenized and repeated to length", "exact", exact));
    json_object_set_new(json_object_get(root, "settings"), "paired_limit", json_boolean(paired));

    printf("\nplumb bench — %s — %s (%s), %d cores, read bandwidth %.1f GB/s\n", date, si.cpu, si.features, si.cores, bw / 1e9);
    printf("compute peak (%s kernels, multiply-adds in registers), GMAC/s int8 / f32:", kt->name);
    for (int i = 0; i < n_threads; i++) printf("%s %.0f / %.0f at %d thread%s", i ? "," : "", peak_i8[i] / 1e9, peak_f32[i] / 1e9, threads[i], threads[i] > 1 ? "s" : "");
    printf("\nprompt tokens %s, %d generated tokens per request (no early stop), %d reps after %d warm-up, concurrency 1\n\n",
           prompts_s[0], n_gen, reps, warmup);
    if (gpu_bw > 0) printf("GPU: %s, copy bandwidth %.0f GB/s (read + written)\n", gpu_name, gpu_bw / 1e9);
    printf("| model | type | backend | threads | batch | prompt | prefill tok/s | prefill %% of peak | TTFT ms | decode tok/s | limit tok/s | %% of limit | paired %% of limit | peak RSS MiB | peak VRAM MiB |\n");
    printf("|---|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|---|---:|---:|\n");
    int failures = 0;
    for (int vi = 0; vi < n_vars; vi++) {
        variant *v = &vars[vi];
        if (plumb_sha256_file(v->path, v->sha256)) return cli_fail("bench", "%s", plumb_last_error());
        plumb_peak_rss_reset();
        plumb_model *m = plumb_model_load(v->path);
        if (!m) return cli_fail("bench", "%s", plumb_last_error());
        const size_t load_peak = plumb_peak_rss_now();
        const double bpt = (double)plumb_model_bytes_per_token(m);
        const double macs = (double)plumb_model_layer_macs_per_token(m);
        const int float_type = !strcmp(v->type, "F32") || !strcmp(v->type, "F16") || !strcmp(v->type, "BF16");
        if (si.llc_bytes > 0 && bpt < 1.5 * (double)si.llc_bytes)
            fprintf(stderr, "bench: note: %s reads %.0f MiB per token, within 1.5x of the %.0f MiB last-level cache: decode can beat the "
                            "memory-bandwidth limit, which then says little\n", v->type, bpt / 1048576, (double)si.llc_bytes / 1048576);
        for (int b = 0; b < n_backends; b++) {
            const int cuda = !strcmp(backends[b], "cuda");
            if (cuda && gpu_bw <= 0) continue;
            for (int gi = 0; gi < (cuda ? n_ngl : 1); gi++)
            for (int ti = 0; ti < n_threads; ti++)
                for (int bi = 0; bi < n_batches; bi++)
                for (int pi = 0; pi < n_prompts; pi++) {
                    bench_config cfg = {prompts[pi], n_gen, reps, warmup, threads[ti], exact, cuda ? ngls[gi] : 0, batches[bi]};
                    bench_result r;
                    /* CPU decode's limit: the read bandwidth measured just before and just after this
                     * run, at its thread count (a shared host's bandwidth moves from minute to minute,
                     * so one figure from the start of the bench would make the ratio noise) */
                    /* the measurements' 2 GiB buffer must not count as the run's peak memory: the
                     * peak is reset after each, and the run's is taken with the load's */
                    const double bw_before = cuda ? 0 : plumb_measure_read_bandwidth(threads[ti], NULL);
                    if (!cuda) plumb_peak_rss_reset();
                    if (bench_run(m, &cfg, &r)) {
                        fprintf(stderr, "bench: %s %s threads %d batch %d: %s\n", v->path, backends[b], threads[ti], batches[bi], plumb_last_error());
                        failures++;
                        continue;
                    }
                    /* decode reads the weights once per step for the whole batch */
                    const int all_gpu = cuda && r.gpu_layers == plumb_model_hparams(m)->n_layer;
                    const size_t peak_run = plumb_peak_rss_now();
                    const double rss = (double)(peak_run > load_peak ? peak_run : load_peak) / 1048576.0;
                    int read_loop = 0; /* the loop that gave bw_after */
                    const double bw_after = cuda ? 0 : plumb_measure_read_bandwidth(threads[ti], &read_loop);
                    if (!cuda) plumb_peak_rss_reset();
                    /* the same decode again, each token beside a read pass of its bytes (not in the
                     * run's figures: the passes push the weights out of the caches) */
                    bench_paired pr = {0};
                    char paired_s[48] = "-";
                    if (!cuda && batches[bi] == 1 && paired) {
                        if (bench_paired_limit(m, &cfg, &pr)) {
                            fprintf(stderr, "bench: %s threads %d: paired limit: %s\n", v->path, threads[ti], plumb_last_error());
                            failures++;
                        } else
                            snprintf(paired_s, sizeof paired_s, "%.0f%% [%.0f-%.0f]", 100 * pr.fraction.median, 100 * pr.fraction.p10, 100 * pr.fraction.p90);
                        plumb_peak_rss_reset();
                    }
                    const double cpu_bw = cuda ? bw_at[ti] : 0.5 * (bw_before + bw_after);
                    const double limit = (all_gpu ? gpu_bw : cpu_bw) / bpt * batches[bi];
                    char be[48];
                    if (cuda) snprintf(be, sizeof be, "cuda -ngl %s", ngl_s[gi]);
                    else snprintf(be, sizeof be, "cpu");
                    /* prefill's multiply-adds a second (the layers' matrices) against the CPU's ceiling */
                    const double peak = cuda ? 0 : float_type || exact ? peak_f32[ti] : peak_i8[ti];
                    char peak_s[16] = "-";
                    if (peak > 0) snprintf(peak_s, sizeof peak_s, "%.0f%%", 100 * r.prefill_tps.median * macs / peak);
                    printf("| %s | %s | %s | %d | %d | %d | %.1f [%.1f-%.1f] | %s | %.0f | %.2f [%.2f-%.2f] | %.1f | %.0f%% | %s | %.0f | %.0f |\n", v->source, v->type, be,
                           threads[ti], batches[bi], prompts[pi], r.prefill_tps.median, r.prefill_tps.min, r.prefill_tps.max, peak_s, r.ttft_ms.median,
                           r.decode_tps.median, r.decode_tps.min, r.decode_tps.max, limit, 100 * r.decode_tps.median / limit, paired_s, rss, r.gpu_peak_mib);
                    fflush(stdout);
                    json_t *run = json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:I,s:f}", "model", v->path, "source_model", v->source,
                                            "sha256", v->sha256, "params", (json_int_t)plumb_model_n_params(m), "type", v->type, "backend", be,
                                            "kernels", cuda ? "cuda" : plumb_kernels_active()->name, "threads", threads[ti], "concurrency", batches[bi],
                                            "requests", r.reps * batches[bi], "prompt_tokens", r.n_prompt, "max_output_tokens", r.n_gen,
                                            "generated_tokens", (json_int_t)r.generated_tokens, "total_time_s", r.total_s);
                    json_object_set_new(run, "gpu_layers", json_integer(r.gpu_layers));
                    char picks_s[24];
                    snprintf(picks_s, sizeof picks_s, "%016llx", (unsigned long long)r.picks_hash);
                    json_object_set_new(run, "greedy_picks_fnv1a", json_string(picks_s));
                    json_object_set_new(run, "greedy_picks_same_every_rep", json_boolean(r.picks_stable));
                    fprintf(stderr, "bench: %s %s %s batch %d prompt %d: greedy picks fnv1a %s (%s)\n", v->source, v->type, be, batches[bi], prompts[pi],
                            picks_s, r.picks_stable ? "the same in every rep" : "REPS DIFFER");
                    if (cuda) json_object_set_new(run, "gpu", json_string(r.gpu_status));
                    /* how the decode steps ran: a condition of the run like the backend (see plumb_decode_greedy) */
                    json_object_set_new(run, "decode_loop", json_string(r.greedy_chained ? "greedy chain on the GPU" : "step by step"));
                    json_object_set_new(run, "input_token_range", json_pack("[i,i]", r.n_prompt, r.n_prompt));
                    json_object_set_new(run, "prefill_tps", stats_json(&r.prefill_tps));
                    json_object_set_new(run, "decode_tps", stats_json(&r.decode_tps));
                    json_object_set_new(run, "ttft_ms", stats_json(&r.ttft_ms));
                    json_object_set_new(run, "inter_token_ms", stats_json(&r.itl_ms));
                    json_object_set_new(run, "latency_ms", stats_json(&r.e2e_ms));
                    json_object_set_new(run, "peak_rss_mib", json_real(rss));
                    json_object_set_new(run, "peak_vram_mib", cuda ? json_real(r.gpu_peak_mib) : json_null());
                    json_object_set_new(run, "weight_bytes_per_token", json_integer((json_int_t)bpt));
                    json_object_set_new(run, "decode_limit_tps", json_real(limit));
                    json_object_set_new(run, "layer_macs_per_token", json_integer((json_int_t)macs));
                    if (peak > 0) {
                        json_object_set_new(run, "compute_peak_gmacs", json_pack("{s:s,s:f}", "kind", float_type || exact ? "f32" : "int8", "gmacs", peak / 1e9));
                        json_object_set_new(run, "prefill_fraction_of_peak", json_real(r.prefill_tps.median * macs / peak));
                    }
                    if (!cuda) json_object_set_new(run, "read_bandwidth_gbs_before_after", json_pack("[f,f]", bw_before / 1e9, bw_after / 1e9));
                    if (!cuda) json_object_set_new(run, "read_loop_after", json_string(plumb_read_loop_name(read_loop)));
                    json_object_set_new(run, "decode_fraction_of_limit", json_real(r.decode_tps.median / limit));
                    if (pr.n) {
                        json_t *pj = json_pack("{s:i,s:s,s:o,s:f,s:f}", "pairs", pr.n, "read_loop", plumb_read_loop_name(pr.loop), "fraction_of_limit",
                                               stats_json(&pr.fraction), "token_ms_median", pr.token_ms.median, "read_gbs_median", pr.read_gbs.median);
                        json_object_set_new(run, "paired_limit", pj);
                    }
                    json_array_append_new(runs, run);
                }
        }
        plumb_model_free(m);
    }
    json_object_set_new(root, "runs", runs);

    /* speedups against the first variant, same backend, threads and lengths */
    if (n_vars > 1 && json_array_size(runs) > 1) {
        printf("\nspeedup of decode (prefill) against %s, same threads and lengths (ratio of medians):\n", vars[0].type);
        size_t i, j;
        json_t *a, *b;
        json_array_foreach(runs, i, a) {
            if (strcmp(json_string_value(json_object_get(a, "model")), vars[0].path)) continue;
            json_array_foreach(runs, j, b) {
                if (j == i || json_integer_value(json_object_get(a, "threads")) != json_integer_value(json_object_get(b, "threads")) ||
                    json_integer_value(json_object_get(a, "prompt_tokens")) != json_integer_value(json_object_get(b, "prompt_tokens")) ||
                    strcmp(json_string_value(json_object_get(a, "backend")), json_string_value(json_object_get(b, "backend"))) ||
                    strcmp(json_string_value(json_object_get(a, "source_model")), json_string_value(json_object_get(b, "source_model"))))
                    continue;
                double da = json_real_value(json_object_get(json_object_get(a, "decode_tps"), "median"));
                double db = json_real_value(json_object_get(json_object_get(b, "decode_tps"), "median"));
                double pa = json_real_value(json_object_get(json_object_get(a, "prefill_tps"), "median"));
                double pb = json_real_value(json_object_get(json_object_get(b, "prefill_tps"), "median"));
                printf("  %-6s %d threads, p%lld: decode %.2fx, prefill %.2fx\n", json_string_value(json_object_get(b, "type")),
                       (int)json_integer_value(json_object_get(b, "threads")), (long long)json_integer_value(json_object_get(b, "prompt_tokens")),
                       db / da, pb / pa);
            }
        }
    }

    /* quality spot check: each precision against the highest one of the same source */
    if (quality) {
        printf("\nquality spot check (greedy, 32 tokens after a fixed 16-token prompt; top-1 and KL teacher-forced on the reference's text):\n");
        for (int mi = 0; mi < n_models; mi++) {
            int ref = -1;
            for (int vi = 0; vi < n_vars; vi++)
                if (!strcmp(vars[vi].source, models[mi]) && (ref < 0 || precision_rank(vars[vi].type) < precision_rank(vars[ref].type))) ref = vi;
            plumb_model *rm = ref >= 0 ? plumb_model_load(vars[ref].path) : NULL;
            for (int vi = 0; rm && vi < n_vars; vi++) {
                if (vi == ref || strcmp(vars[vi].source, models[mi])) continue;
                plumb_model *cm = plumb_model_load(vars[vi].path);
                bench_quality q;
                if (!cm || bench_quality_check(rm, cm, 32, plumb_default_threads(), &q)) {
                    fprintf(stderr, "bench: quality check %s: %s\n", vars[vi].type, plumb_last_error());
                    plumb_model_free(cm);
                    continue;
                }
                printf("  %s vs %s: top-1 agreement %.1f%%, KL mean %.4f max %.4f\n    %-5s: %s\n    %-5s: %s\n", vars[vi].type, vars[ref].type,
                       100 * q.top1, q.kl_mean, q.kl_max, vars[ref].type, q.ref_text, vars[vi].type, q.text);
                json_array_append_new(qual, json_pack("{s:s,s:s,s:i,s:f,s:f,s:f,s:s,s:s}", "type", vars[vi].type, "reference_type", vars[ref].type,
                                                      "positions", q.n, "top1_agreement", q.top1, "kl_mean", q.kl_mean, "kl_max", q.kl_max,
                                                      "reference_text", q.ref_text, "text", q.text));
                plumb_model_free(cm);
            }
            plumb_model_free(rm);
        }
    }
    json_object_set_new(root, "quality", qual);

    char prefix[512];
    if (out_prefix) snprintf(prefix, sizeof prefix, "%s", out_prefix);
    else {
        char stamp[32];
        snprintf(stamp, sizeof stamp, "%s", date);
        for (char *p = stamp; *p; p++) if (*p == ':') *p = '-';
        ensure_dir("bench/out");
        snprintf(prefix, sizeof prefix, "bench/out/bench-%s", stamp);
    }
    char jpath[600], mpath[600];
    snprintf(jpath, sizeof jpath, "%s.json", prefix);
    snprintf(mpath, sizeof mpath, "%s.md", prefix);
    int rc = 0;
    if (json_dump_file(root, jpath, JSON_INDENT(2)) != 0) rc = cli_fail("bench", "cannot write %s", jpath);
    if (!rc && bench_write_markdown(root, mpath)) rc = cli_fail("bench", "%s", plumb_last_error());
    if (!rc && report_dir && bench_write_html(root, report_dir)) rc = cli_fail("bench", "%s", plumb_last_error());
    if (!rc) printf("\nrecord: %s, %s%s%s\nreproduce: %s\n", jpath, mpath, report_dir ? ", report in " : "", report_dir ? report_dir : "", cmdline);
    json_decref(root);
    return rc ? rc : failures ? 1 : 0;
}
