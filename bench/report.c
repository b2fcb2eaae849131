#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/util.h"

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static double sfield(json_t *o, const char *k, const char *f) { return json_number_value(json_object_get(json_object_get(o, k), f)); }

/* the record's compute peaks: "avx512-vnni kernels, int8 / f32 GMAC/s 410 / 205 at 1 thread, ..." */
static const char *peak_line(json_t *machine) {
    static char buf[512];
    size_t i, n = 0;
    json_t *p;
    buf[0] = 0;
    json_array_foreach(json_object_get(machine, "compute_peak"), i, p) {
        if (!i) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s kernels, int8 / f32 GMAC/s", str(p, "kernels"));
        if (n < sizeof buf)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s %.0f / %.0f at %d thread%s", i ? "," : "", num(p, "int8_gmacs"), num(p, "f32_gmacs"),
                                  (int)num(p, "threads"), num(p, "threads") > 1 ? "s" : "");
        if (n >= sizeof buf) break;
    }
    return buf[0] ? buf : "not measured";
}

int bench_write_markdown(json_t *r, const char *path) {
    FILE *fp = fopen(path, "w");
    if (!fp) return plumb_set_error("%s: cannot create: %s", path, strerror(errno));
    json_t *m = json_object_get(r, "machine"), *s = json_object_get(r, "settings");
    fprintf(fp, "# plumb bench record\n\n");
    fprintf(fp, "- date: %s\n- plumb: %s\n- command: `%s`\n", str(r, "date"), str(r, "plumb_version"), str(r, "command"));
    fprintf(fp, "- machine: %s (%s), %d cores, %.1f GiB RAM, %s; GPU: %s\n", str(m, "cpu"), str(m, "cpu_features"), (int)num(m, "cores"),
            num(m, "memory_gib"), str(m, "os"), str(m, "gpu"));
    fprintf(fp, "- measured read bandwidth: %.1f GB/s at the start, all threads (each measurement the fastest of four read loops: one run a thread "
                "with and without software prefetch, two and four runs at once with it); a CPU run's decode limit is the mean of the bandwidth measured just "
                "before and just after it at its thread count (column 'read GB/s'), divided by the weight bytes read per token; 'paired' is the same "
                "decode again with a read pass over one token's bytes before each token, the four loops in turn: median [p10-p90] of read time / token time "
                "over the tokens of the loop that read fastest\n",
            num(m, "read_bandwidth_gbs"));
    fprintf(fp, "- concurrency %d; %d generated tokens per request, no early stop; %d measured reps after %d warm-up; prompt: %s\n",
            (int)num(s, "concurrency"), (int)num(s, "max_output_tokens"), (int)num(s, "reps"), (int)num(s, "warmup"), str(s, "prompt"));
    fprintf(fp, "- prefill %% of peak: the layers' matrices' multiply-adds a second in prefill (tok/s x their weights) over the kernel table's "
                "int8 multiply-add ceiling (float types: f32 FMA) at the run's threads, measured in registers at the start (%s)\n\n", peak_line(m));
    fprintf(fp, "| model | type | sha256 | backend | kernels | threads | requests | input tokens | output tokens | total s | prefill tok/s median [min-max] "
                "| prefill %% of peak | TTFT ms p50/p90/p99 | decode tok/s median [min-max] | inter-token ms mean/p50/p90/p99 | latency ms mean/p50/p90/p99 "
                "| read GB/s before/after | limit tok/s | %% of limit | paired %% of limit | peak RSS MiB |\n");
    fprintf(fp, "|---|---|---|---|---|---:|---:|---:|---:|---:|---|---:|---|---|---|---|---|---:|---:|---|---:|\n");
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(r, "runs"), i, run) {
        json_t *bw = json_object_get(run, "read_bandwidth_gbs_before_after");
        char bws[48] = "-";
        if (json_array_size(bw) == 2)
            snprintf(bws, sizeof bws, "%.1f/%.1f", json_number_value(json_array_get(bw, 0)), json_number_value(json_array_get(bw, 1)));
        json_t *pf = json_object_get(json_object_get(run, "paired_limit"), "fraction_of_limit");
        char pairs[48] = "-";
        if (pf) snprintf(pairs, sizeof pairs, "%.0f%% [%.0f-%.0f]", 100 * num(pf, "median"), 100 * num(pf, "p10"), 100 * num(pf, "p90"));
        char peak[16] = "-";
        if (json_object_get(run, "prefill_fraction_of_peak")) snprintf(peak, sizeof peak, "%.0f%%", 100 * num(run, "prefill_fraction_of_peak"));
        fprintf(fp, "| %s | %s | %.12s | %s | %s | %d | %d | %d | %d | %.1f | %.1f [%.1f-%.1f] | %s | %.0f/%.0f/%.0f | %.2f [%.2f-%.2f] | %.1f/%.1f/%.1f/%.1f "
                    "| %.0f/%.0f/%.0f/%.0f | %s | %.1f | %.0f%% | %s | %.0f |\n",
                str(run, "model"), str(run, "type"), str(run, "sha256"), str(run, "backend"), str(run, "kernels"), (int)num(run, "threads"),
                (int)num(run, "requests"), (int)num(run, "prompt_tokens"), (int)num(run, "generated_tokens"), num(run, "total_time_s"),
                sfield(run, "prefill_tps", "median"), sfield(run, "prefill_tps", "min"), sfield(run, "prefill_tps", "max"), peak, sfield(run, "ttft_ms", "p50"),
                sfield(run, "ttft_ms", "p90"), sfield(run, "ttft_ms", "p99"), sfield(run, "decode_tps", "median"), sfield(run, "decode_tps", "min"),
                sfield(run, "decode_tps", "max"), sfield(run, "inter_token_ms", "mean"), sfield(run, "inter_token_ms", "p50"), sfield(run, "inter_token_ms", "p90"),
                sfield(run, "inter_token_ms", "p99"), sfield(run, "latency_ms", "mean"), sfield(run, "latency_ms", "p50"), sfield(run, "latency_ms", "p90"),
                sfield(run, "latency_ms", "p99"), bws, num(run, "decode_limit_tps"), 100 * num(run, "decode_fraction_of_limit"), pairs, num(run, "peak_rss_mib"));
    }
    int gpu_runs = 0;
    json_array_foreach(json_object_get(r, "runs"), i, run) {
        if (!json_object_get(run, "gpu")) continue;
        if (!gpu_runs++) fprintf(fp, "\nGPU runs, in table order:\n\n");
        fprintf(fp, "- %s, batch %d: decode %s; %s\n", str(run, "backend"), (int)num(run, "concurrency"), str(run, "decode_loop"), str(run, "gpu"));
    }
    json_t *q = json_object_get(r, "quality");
    if (json_array_size(q)) {
        fprintf(fp, "\n## Quality spot check\n\n| type | reference | positions | top-1 agreement | KL mean | KL max |\n|---|---|---:|---:|---:|---:|\n");
        json_array_foreach(q, i, run)
            fprintf(fp, "| %s | %s | %d | %.1f%% | %.4f | %.4f |\n", str(run, "type"), str(run, "reference_type"), (int)num(run, "positions"),
                    100 * num(run, "top1_agreement"), num(run, "kl_mean"), num(run, "kl_max"));
        fprintf(fp, "\n");
        json_array_foreach(q, i, run)
            fprintf(fp, "- %s: `%s`\n- %s: `%s`\n", str(run, "reference_type"), str(run, "reference_text"), str(run, "type"), str(run, "text"));
    }
    return fclose(fp) == 0 ? 0 : plumb_set_error("%s: write failed", path);
}

/* ---- HTML + SVG ---- */

static void esc(FILE *fp, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", fp);
        else if (*s == '>') fputs("&gt;", fp);
        else if (*s == '&') fputs("&amp;", fp);
        else if (*s == '"') fputs("&quot;", fp);
        else fputc(*s, fp);
    }
}

/* Horizontal bar chart: one bar per label, value and [min-max] whisker. */
static void bar_chart(FILE *fp, const char *title, const char *unit, int n, char labels[][96], const double *v, const double *lo, const double *hi) {
    double max = 0;
    for (int i = 0; i < n; i++) max = hi[i] > max ? hi[i] : v[i] > max ? v[i] : max;
    if (max <= 0) max = 1;
    const int W = 720, left = 260, bar = 22, gap = 8, H = 40 + n * (bar + gap);
    fprintf(fp, "<h2>");
    esc(fp, title);
    fprintf(fp, "</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", W, H);
    for (int i = 0; i < n; i++) {
        const int y = 20 + i * (bar + gap);
        const double scale = (W - left - 90) / max;
        fprintf(fp, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"12\">", left - 6, y + 15);
        esc(fp, labels[i]);
        fprintf(fp, "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#4a7fb5\"/>", left, y, v[i] * scale, bar);
        fprintf(fp, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#222\"/>", left + lo[i] * scale, left + hi[i] * scale, y + bar / 2, y + bar / 2);
        fprintf(fp, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\">%.2f %s</text>\n", left + (hi[i] > v[i] ? hi[i] : v[i]) * scale + 6, y + 15, v[i], unit);
    }
    fprintf(fp, "</svg>\n");
}

int bench_write_html(json_t *r, const char *dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return plumb_set_error("%s: cannot create: %s", dir, strerror(errno));
    char path[600];
    snprintf(path, sizeof path, "%s/index.html", dir);
    FILE *fp = fopen(path, "w");
    if (!fp) return plumb_set_error("%s: cannot create: %s", path, strerror(errno));
    json_t *runs = json_object_get(r, "runs"), *m = json_object_get(r, "machine");
    size_t n = json_array_size(runs);
    if (n > 256) n = 256;
    char labels[256][96];
    double v[256], lo[256], hi[256], pv[256], plo[256], phi[256], sp[256], z[256];
    json_t *first = json_array_get(runs, 0);
    for (size_t i = 0; i < n; i++) {
        json_t *run = json_array_get(runs, i);
        snprintf(labels[i], sizeof labels[i], "%s %s %dt p%d", str(run, "type"), str(run, "backend"), (int)num(run, "threads"), (int)num(run, "prompt_tokens"));
        v[i] = sfield(run, "decode_tps", "median"); lo[i] = sfield(run, "decode_tps", "min"); hi[i] = sfield(run, "decode_tps", "max");
        pv[i] = sfield(run, "prefill_tps", "median"); plo[i] = sfield(run, "prefill_tps", "min"); phi[i] = sfield(run, "prefill_tps", "max");
        /* speedup against the first run at the same threads */
        double base = 0;
        size_t j;
        json_t *b;
        json_array_foreach(runs, j, b)
            if (!strcmp(str(b, "model"), str(first, "model")) && num(b, "threads") == num(run, "threads") && num(b, "prompt_tokens") == num(run, "prompt_tokens")) {
                base = sfield(b, "decode_tps", "median");
                break;
            }
        sp[i] = base > 0 ? v[i] / base : 0;
        z[i] = sp[i];
    }
    fprintf(fp, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>plumb bench</title>\n"
                "<style>body{font-family:sans-serif;margin:2em;max-width:900px}td,th{padding:2px 8px;border-bottom:1px solid #ddd;font-size:13px}</style>"
                "</head><body>\n<h1>plumb bench</h1>\n<p>");
    esc(fp, str(r, "date"));
    fprintf(fp, " &middot; ");
    esc(fp, str(m, "cpu"));
    fprintf(fp, " &middot; read bandwidth %.1f GB/s &middot; <code>", num(m, "read_bandwidth_gbs"));
    esc(fp, str(r, "command"));
    fprintf(fp, "</code></p>\n<p>Bars are medians; whiskers span min&ndash;max over the repetitions.</p>\n");
    bar_chart(fp, "Decode tokens/s", "tok/s", (int)n, labels, v, lo, hi);
    bar_chart(fp, "Prefill tokens/s", "tok/s", (int)n, labels, pv, plo, phi);
    bar_chart(fp, "Decode speedup vs the first configuration (same threads)", "x", (int)n, labels, sp, z, z);
    fprintf(fp, "<h2>Runs</h2><table><tr><th>configuration</th><th>decode tok/s</th><th>limit tok/s</th><th>prefill tok/s</th><th>peak RSS MiB</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        json_t *run = json_array_get(runs, i);
        fprintf(fp, "<tr><td>");
        esc(fp, labels[i]);
        fprintf(fp, "</td><td>%.2f</td><td>%.1f</td><td>%.1f</td><td>%.0f</td></tr>\n", v[i], num(run, "decode_limit_tps"), pv[i], num(run, "peak_rss_mib"));
    }
    fprintf(fp, "</table>\n</body></html>\n");
    return fclose(fp) == 0 ? 0 : plumb_set_error("%s: write failed", path);
}
