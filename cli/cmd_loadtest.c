/* cmd_loadtest.c — plumb loadtest: sweeps concurrency against any
 * OpenAI-compatible server (plumb's, llama.cpp's, vLLM's) with libcurl's
 * multi interface, streaming every request, and finds the knee: the level
 * after which throughput stops growing while latency keeps climbing. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../bench/stats.h"
#include "../bench/sysinfo.h"
#include "../core/util.h"
#include "../include/plumb.h"
#include "cli.h"

typedef struct {
    CURL *h;
    struct curl_slist *hdr;
    char *body;
    char line[65536];
    size_t line_len;
    double t_start, t_first, t_last;
    double *gaps;            /* inter-token gaps (s) */
    int n_gaps, cap_gaps, chunks, done, failed, http_status;
    long prompt_tokens, completion_tokens;
    char err[160];
} lt_req;

static const char *words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "river", "light", "stone", "winter", "garden", "music"};

static char *make_prompt(int n_words, int salt) {
    char *p = malloc((size_t)n_words * 8 + 1), *q = p;
    for (int i = 0; i < n_words; i++) q += sprintf(q, "%s%s", i ? " " : "", words[(i * 7 + salt) % 16]);
    return p;
}

static void on_data(lt_req *r, const char *data) {
    if (!strcmp(data, "[DONE]")) { r->done = 1; return; }
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    json_t *err = json_object_get(j, "error");
    if (err) {
        r->failed = 1;
        snprintf(r->err, sizeof r->err, "%s", json_string_value(json_object_get(err, "message")) ? json_string_value(json_object_get(err, "message")) : "error");
    }
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *txt = json_object_get(c0, "text");
    if (!txt) txt = json_object_get(json_object_get(c0, "delta"), "content");
    const double now = plumb_time_s();
    if (json_is_string(txt) && json_string_length(txt) > 0) {
        if (!r->chunks) r->t_first = now;
        else {
            if (r->n_gaps == r->cap_gaps) {
                r->cap_gaps = r->cap_gaps ? 2 * r->cap_gaps : 256;
                r->gaps = realloc(r->gaps, sizeof(double) * (size_t)r->cap_gaps);
            }
            r->gaps[r->n_gaps++] = now - r->t_last;
        }
        r->t_last = now;
        r->chunks++;
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        r->prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = (long)json_integer_value(json_object_get(u, "completion_tokens"));
    }
    json_decref(j);
}

static size_t on_write(char *ptr, size_t size, size_t n, void *ud) {
    lt_req *r = ud;
    size_t len = size * n;
    for (size_t i = 0; i < len; i++) {
        if (ptr[i] == '\n') {
            r->line[r->line_len] = 0;
            if (r->line_len > 6 && !strncmp(r->line, "data: ", 6)) on_data(r, r->line + 6);
            else if (r->line_len > 1 && r->line[0] == '{') on_data(r, r->line); /* a JSON error body */
            r->line_len = 0;
        } else if (r->line_len + 1 < sizeof r->line) r->line[r->line_len++] = ptr[i];
    }
    return len;
}

static void start(CURLM *multi, lt_req *r, const char *url, const char *api_key, const char *body) {
    memset(r, 0, offsetof(lt_req, gaps));
    r->h = curl_easy_init();
    r->body = strdup(body);
    r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        r->hdr = curl_slist_append(r->hdr, auth);
    }
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, 600L);
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    r->t_start = plumb_time_s();
    curl_multi_add_handle(multi, r->h);
}

typedef struct {
    int concurrency, ok, failed;
    double wall_s, req_per_s, out_tok_per_s;
    long out_tokens, prompt_min, prompt_max;
    plumb_stats ttft, tpot, itl, e2e;
} level_result;

static json_t *sj(const plumb_stats *s) {
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "mean", s->mean * 1e3, "p50", s->median * 1e3, "p90", s->p90 * 1e3, "p99", s->p99 * 1e3, "min", s->min * 1e3,
                     "max", s->max * 1e3);
}

static int run_level(const char *url, const char *api_key, const char *model, int chat, int conc, int n_req, int prompt_words, int max_tokens,
                     level_result *out) {
    CURLM *multi = curl_multi_init();
    lt_req *reqs = calloc((size_t)n_req, sizeof *reqs);
    double *ttft = malloc(sizeof(double) * (size_t)n_req), *tpot = malloc(sizeof(double) * (size_t)n_req), *e2e = malloc(sizeof(double) * (size_t)n_req);
    size_t n_itl = 0, cap_itl = 1024;
    double *itl = malloc(sizeof(double) * cap_itl);
    memset(out, 0, sizeof *out);
    out->concurrency = conc;
    out->prompt_min = -1;
    int launched = 0, running = 0, finished = 0;
    const double t0 = plumb_time_s();
    while (finished < n_req) {
        while (running < conc && launched < n_req) {
            char *prompt = make_prompt(prompt_words, launched);
            json_t *b = chat ? json_pack("{s:s,s:[{s:s,s:s}],s:i,s:b,s:{s:b},s:b,s:f}", "model", model, "messages", "role", "user", "content", prompt,
                                         "max_tokens", max_tokens, "stream", 1, "stream_options", "include_usage", 1, "ignore_eos", 1, "temperature", 0.0)
                             : json_pack("{s:s,s:s,s:i,s:b,s:{s:b},s:b,s:f}", "model", model, "prompt", prompt, "max_tokens", max_tokens, "stream", 1,
                                         "stream_options", "include_usage", 1, "ignore_eos", 1, "temperature", 0.0);
            char *body = json_dumps(b, JSON_COMPACT);
            start(multi, &reqs[launched], url, api_key, body);
            free(body);
            json_decref(b);
            free(prompt);
            launched++;
            running++;
        }
        int still;
        curl_multi_perform(multi, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            lt_req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            const double t_end = plumb_time_s();
            if (msg->data.result != CURLE_OK || status != 200 || r->failed || r->chunks == 0) {
                out->failed++;
                if (out->failed <= 3)
                    fprintf(stderr, "loadtest: request failed: %s%s (HTTP %ld)\n", msg->data.result != CURLE_OK ? curl_easy_strerror(msg->data.result) : "",
                            r->err, status);
            } else {
                const long toks = r->completion_tokens > 0 ? r->completion_tokens : r->chunks;
                ttft[out->ok] = r->t_first - r->t_start;
                e2e[out->ok] = t_end - r->t_start;
                tpot[out->ok] = toks > 1 ? (r->t_last - r->t_first) / (double)(toks - 1) : 0;
                out->out_tokens += toks;
                if (r->prompt_tokens > 0) {
                    if (out->prompt_min < 0 || r->prompt_tokens < out->prompt_min) out->prompt_min = r->prompt_tokens;
                    if (r->prompt_tokens > out->prompt_max) out->prompt_max = r->prompt_tokens;
                }
                for (int g = 0; g < r->n_gaps; g++) {
                    if (n_itl == cap_itl) itl = realloc(itl, sizeof(double) * (cap_itl *= 2));
                    itl[n_itl++] = r->gaps[g];
                }
                out->ok++;
            }
            curl_multi_remove_handle(multi, msg->easy_handle);
            curl_easy_cleanup(msg->easy_handle);
            curl_slist_free_all(r->hdr);
            free(r->body);
            free(r->gaps);
            r->gaps = NULL;
            running--;
            finished++;
        }
        if (finished < n_req) curl_multi_poll(multi, NULL, 0, 50, NULL);
    }
    out->wall_s = plumb_time_s() - t0;
    out->req_per_s = out->ok / out->wall_s;
    out->out_tok_per_s = (double)out->out_tokens / out->wall_s;
    out->ttft = plumb_stats_of(ttft, out->ok);
    out->tpot = plumb_stats_of(tpot, out->ok);
    out->e2e = plumb_stats_of(e2e, out->ok);
    out->itl = plumb_stats_of(itl, (int)n_itl);
    free(reqs); free(ttft); free(tpot); free(e2e); free(itl);
    curl_multi_cleanup(multi);
    return 0;
}

static void write_svg(const char *path, const level_result *lv, int n) {
    FILE *fp = fopen(path, "w");
    if (!fp) return;
    double max_t = 1, max_l = 1;
    for (int i = 0; i < n; i++) {
        if (lv[i].out_tok_per_s > max_t) max_t = lv[i].out_tok_per_s;
        if (lv[i].e2e.median * 1e3 > max_l) max_l = lv[i].e2e.median * 1e3;
    }
    const int W = 640, H = 360, L = 60, R = 60, T = 30, B = 50;
    fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(fp, "<text x=\"%d\" y=\"18\">output tokens/s (blue, left) and p50 latency ms (red, right) vs concurrency</text>\n", L);
    fprintf(fp, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", L, H - B,
            W - R, H - B, L, T, L, H - B);
    for (int pass = 0; pass < 2; pass++) {
        fprintf(fp, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", pass ? "#c0392b" : "#2e6da4");
        for (int i = 0; i < n; i++) {
            const double x = L + (n > 1 ? (double)i / (n - 1) : 0.5) * (W - L - R);
            const double v = pass ? lv[i].e2e.median * 1e3 / max_l : lv[i].out_tok_per_s / max_t;
            fprintf(fp, "%.1f,%.1f ", x, H - B - v * (H - T - B));
        }
        fprintf(fp, "\"/>\n");
    }
    for (int i = 0; i < n; i++) {
        const double x = L + (n > 1 ? (double)i / (n - 1) : 0.5) * (W - L - R);
        fprintf(fp, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, H - B + 16, lv[i].concurrency);
    }
    fprintf(fp, "<text x=\"%d\" y=\"%d\">%.0f tok/s</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f ms</text>\n", 4, T + 4, max_t, W - 4, T + 4, max_l);
    fprintf(fp, "</svg>\n");
    fclose(fp);
}

int cmd_loadtest(int argc, char **argv) {
    const char *url = "http://127.0.0.1:8080/v1", *model = NULL, *api_key = NULL, *levels_s = "1,2,4,8,16", *out_prefix = NULL;
    int n_req = 40, prompt_tokens = 128, max_tokens = 128, chat = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: plumb loadtest --url http://127.0.0.1:8080/v1 --model NAME [--concurrency 1,2,4,8] [--requests 40]\n"
                   "         [--prompt-tokens 128] [--max-tokens 128] [--chat] [--api-key K] [-o PREFIX]\n"
                   "  Streams every request (closed loop: each level keeps N requests in flight), asks for\n"
                   "  exactly max-tokens (ignore_eos), and reports throughput, TTFT, TPOT, inter-token and\n"
                   "  end-to-end latency percentiles per level, the knee, a JSON + Markdown record and an SVG curve.\n"
                   "  --prompt-tokens counts the server's tokens: a probe request calibrates the prompt's words.\n");
            return 0;
        } else if (!strcmp(a, "--url")) rc = cli_str(argc, argv, &i, &url);
        else if (!strcmp(a, "--model")) rc = cli_str(argc, argv, &i, &model);
        else if (!strcmp(a, "--api-key")) rc = cli_str(argc, argv, &i, &api_key);
        else if (!strcmp(a, "--concurrency")) rc = cli_str(argc, argv, &i, &levels_s);
        else if (!strcmp(a, "--requests")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &n_req);
        else if (!strcmp(a, "--prompt-tokens")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &prompt_tokens);
        else if (!strcmp(a, "--max-tokens")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &max_tokens);
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "-o")) rc = cli_str(argc, argv, &i, &out_prefix);
        else return cli_fail("loadtest", "unknown option '%s'", a);
        if (rc) return 2;
    }
    if (!model) return cli_fail("loadtest", "--model NAME is required (see GET %s/models)", url);
    int levels[32], n_levels = 0;
    for (const char *p = levels_s; *p && n_levels < 32;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) return cli_fail("loadtest", "bad --concurrency list '%s'", levels_s);
        levels[n_levels++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return cli_fail("loadtest", "bad --concurrency list '%s'", levels_s);
    }
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s/%s", url, chat ? "chat/completions" : "completions");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    level_result lv[32];
    char date[32];
    plumb_now_iso8601(date, sizeof date);
    /* --prompt-tokens counts the server's tokens: probe requests (the first
     * prompts the levels send: their words differ, so do their token counts)
     * say how many the words make, and the words are scaled to the asked count */
    int prompt_words = prompt_tokens;
    long probe_tokens = -1;
    for (int round = 0; round < 2; round++) {
        level_result probe;
        run_level(endpoint, api_key, model, chat, 1, 4, prompt_words, 1, &probe);
        probe_tokens = probe.ok > 0 && probe.prompt_min > 0 ? (probe.prompt_min + probe.prompt_max + 1) / 2 : -1;
        if (probe_tokens <= 0 || probe_tokens == prompt_tokens) break;
        const long scaled = ((long)prompt_words * prompt_tokens + probe_tokens / 2) / probe_tokens;
        if (scaled == prompt_words || scaled < 1) break;
        prompt_words = (int)scaled;
    }
    printf("plumb loadtest — %s — %s, model %s, %d requests per level, %d prompt words (%s%ld tokens on this server, middle of the probes' range), %d output tokens\n\n", date, endpoint,
           model, n_req, prompt_words, probe_tokens > 0 ? "" : "server gave no count; asked ", probe_tokens > 0 ? probe_tokens : (long)prompt_tokens,
           max_tokens);
    printf("| concurrency | ok | failed | req/s | output tok/s | TTFT ms p50/p90/p99 | TPOT ms p50/p90/p99 | ITL ms p50/p99 | latency ms p50/p90/p99 |\n");
    printf("|---:|---:|---:|---:|---:|---|---|---|---|\n");
    int any_ok = 0;
    for (int i = 0; i < n_levels; i++) {
        run_level(endpoint, api_key, model, chat, levels[i], n_req, prompt_words, max_tokens, &lv[i]);
        level_result *r = &lv[i];
        any_ok |= r->ok > 0;
        printf("| %d | %d | %d | %.2f | %.1f | %.0f/%.0f/%.0f | %.1f/%.1f/%.1f | %.1f/%.1f | %.0f/%.0f/%.0f |\n", r->concurrency, r->ok, r->failed, r->req_per_s,
               r->out_tok_per_s, r->ttft.median * 1e3, r->ttft.p90 * 1e3, r->ttft.p99 * 1e3, r->tpot.median * 1e3, r->tpot.p90 * 1e3, r->tpot.p99 * 1e3,
               r->itl.median * 1e3, r->itl.p99 * 1e3, r->e2e.median * 1e3, r->e2e.p90 * 1e3, r->e2e.p99 * 1e3);
        fflush(stdout);
    }
    /* the knee: the last level whose doubling still bought >= 10% throughput */
    int knee = n_levels - 1;
    for (int i = 0; i + 1 < n_levels; i++)
        if (lv[i + 1].out_tok_per_s < 1.10 * lv[i].out_tok_per_s) { knee = i; break; }
    if (n_levels > 1) {
        if (knee + 1 < n_levels)
            printf("\nknee: concurrency %d — beyond it throughput grows < 10%% (%.1f -> %.1f tok/s) while p50 latency goes %.0f -> %.0f ms\n",
                   lv[knee].concurrency, lv[knee].out_tok_per_s, lv[knee + 1].out_tok_per_s, lv[knee].e2e.median * 1e3, lv[knee + 1].e2e.median * 1e3);
        else
            printf("\nno knee within the levels tried: throughput still grew >= 10%% at concurrency %d\n", lv[n_levels - 1].concurrency);
        printf("throughput at the highest level vs concurrency 1: %.2fx\n", lv[n_levels - 1].out_tok_per_s / (lv[0].out_tok_per_s > 0 ? lv[0].out_tok_per_s : 1));
    }
    if (out_prefix) {
        json_t *root = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:b}", "date", date, "plumb_version", plumb_version(), "endpoint", endpoint, "model", model,
                                 "requests_per_level", n_req, "prompt_words", prompt_words, "max_output_tokens", max_tokens, "chat", chat);
        plumb_sysinfo si;
        plumb_sysinfo_get(&si);
        json_object_set_new(root, "client_machine", json_pack("{s:s,s:i}", "cpu", si.cpu, "cores", si.cores));
        json_t *arr = json_array();
        for (int i = 0; i < n_levels; i++) {
            level_result *r = &lv[i];
            json_t *o = json_pack("{s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:I,s:[I,I]}", "concurrency", r->concurrency, "total_requests", n_req, "succeeded", r->ok,
                                  "failed", r->failed, "total_time_s", r->wall_s, "requests_per_s", r->req_per_s, "output_tokens_per_s", r->out_tok_per_s,
                                  "generated_tokens", (json_int_t)r->out_tokens, "input_token_range", (json_int_t)r->prompt_min, (json_int_t)r->prompt_max);
            json_object_set_new(o, "ttft_ms", sj(&r->ttft));
            json_object_set_new(o, "tpot_ms", sj(&r->tpot));
            json_object_set_new(o, "inter_token_ms", sj(&r->itl));
            json_object_set_new(o, "latency_ms", sj(&r->e2e));
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "levels", arr);
        json_object_set_new(root, "knee_concurrency", json_integer(lv[knee].concurrency));
        char p[600];
        snprintf(p, sizeof p, "%s.json", out_prefix);
        json_dump_file(root, p, JSON_INDENT(2));
        json_decref(root);
        snprintf(p, sizeof p, "%s.svg", out_prefix);
        write_svg(p, lv, n_levels);
        printf("record: %s.json, curve: %s.svg\n", out_prefix, out_prefix);
    }
    curl_global_cleanup();
    return any_ok ? 0 : 1;
}
