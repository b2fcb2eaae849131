/* harness.c — timed runs and quality checks for plumb bench. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/util.h"

static const char *bench_text =
    "The old lighthouse keeper climbed the spiral stairs every evening, counting each step as his father had "
    "taught him. At the top he trimmed the wick, polished the great lens, and watched the ships pass far out "
    "on the grey water. One winter night a storm rolled in from the north, and the light was all that stood "
    "between the fishing boats and the rocks below. ";

int bench_prompt(const plumb_model *m, int n, plumb_token *out) {
    plumb_token buf[512];
    int k = plumb_tokenize(m, bench_text, strlen(bench_text), 0, buf, 512);
    int bos = plumb_token_bos(m);
    int i = 0;
    if (bos >= 0 && n > 0) out[i++] = bos;
    if (k > 0) {
        for (; i < n; i++) out[i] = buf[(i - (bos >= 0)) % k];
    } else { /* no tokenizer plumb can run: fixed pseudo-random ids */
        plumb_rng r;
        plumb_rng_seed(&r, 42);
        for (; i < n; i++) out[i] = (plumb_token)(3 + plumb_rng_u64(&r) % (uint64_t)(plumb_n_vocab(m) - 3));
    }
    return n;
}

/* One run = one request per sequence: every sequence gets its prompt
 * (prefilled together), then cfg->n_gen decode steps each advance all
 * sequences by one greedy token. With batch 1 that is a plain request. */
/* plumb_decode_greedy's callback: each step's inter-token time, as the host sees its picks arrive */
typedef struct {
    double *itl; /* where the next step's time goes (NULL: a warm-up rep) */
    double t_prev;
    int steps;
    int n;          /* sequences: picks a step */
    uint64_t *hash; /* the rep's picks hash */
} itl_clock;

/* the picks of one step (n sequences) into an FNV-1a hash */
static void hash_picks(uint64_t *h, const plumb_token *picks, int n) {
    for (int s = 0; s < n; s++) {
        const uint32_t v = (uint32_t)picks[s];
        for (int b = 0; b < 4; b++) *h = (*h ^ ((v >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
    }
}
#define PICKS_HASH_START 0xcbf29ce484222325ull

static int itl_step(void *user, int step, const plumb_token *picks) {
    itl_clock *ck = user;
    const double t = plumb_time_s();
    if (ck->itl) ck->itl[ck->steps] = (t - ck->t_prev) * 1e3;
    ck->steps++;
    ck->t_prev = t;
    hash_picks(ck->hash, picks, ck->n);
    return 0;
}

int bench_run(plumb_model *m, const bench_config *cfg, bench_result *out) {
    const int B = cfg->batch > 0 ? cfg->batch : 1, P = cfg->n_prompt, G = cfg->n_gen;
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = B * (P + G + 16);
    cp.n_threads = cfg->threads;
    cp.exact = cfg->exact;
    cp.n_seq_max = B;
    cp.n_gpu_layers = cfg->n_gpu_layers;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    if (!c) return -1;
    memset(out, 0, sizeof *out);
    out->gpu_layers = plumb_ctx_gpu_layers(c);
    snprintf(out->gpu_status, sizeof out->gpu_status, "%s", plumb_ctx_gpu_status(c));
    if (cfg->n_gpu_layers && !out->gpu_layers) {
        plumb_set_error("%s", plumb_ctx_gpu_status(c));
        plumb_ctx_free(c);
        return -1;
    }
    const int total = cfg->warmup + cfg->reps;
    int n_itl = 0, rc = 0;
    plumb_token *prompt = malloc(sizeof(plumb_token) * (size_t)P), *toks = malloc(sizeof(plumb_token) * (size_t)B * (size_t)P);
    int *pos = malloc(sizeof(int) * (size_t)B * (size_t)P), *seq = malloc(sizeof(int) * (size_t)B * (size_t)P), *ids = malloc(sizeof(int) * (size_t)B);
    int8_t *want = malloc((size_t)B * (size_t)P);
    plumb_token *cur = malloc(sizeof(plumb_token) * (size_t)B);
    double *pre = calloc((size_t)total, sizeof(double)), *dec = calloc((size_t)total, sizeof(double)), *ttft = calloc((size_t)total, sizeof(double)),
           *e2e = calloc((size_t)total, sizeof(double)), *itl = calloc((size_t)cfg->reps * (size_t)G + 1, sizeof(double));
    if (!prompt || !toks || !pos || !seq || !ids || !want || !cur || !pre || !dec || !ttft || !e2e || !itl) { rc = plumb_set_error("out of memory"); goto out; }
    bench_prompt(m, P, prompt);
    double measured_s = 0, in_decode_s = 0, in_pick_s = 0;
    long n_steps = 0, n_picks = 0, picks_differ = 0;
    uint64_t first_hash = 0;
    int picks_stable = 1;
    const int step_report = getenv("PLUMB_BENCH_STEPS") != NULL, nv = plumb_n_vocab(m);
    for (int r = 0; r < total && !rc; r++) {
        const int measured = r >= cfg->warmup;
        for (int s = 0; s < B; s++) {
            plumb_seq_close(c, s);
            ids[s] = plumb_seq_open(c);
        }
        /* every sequence its own prompt: the shared text, rotated */
        int n = 0;
        for (int s = 0; s < B; s++)
            for (int i = 0; i < P; i++, n++) {
                toks[n] = i == 0 ? prompt[0] : prompt[1 + (i - 1 + s * 7) % (P > 1 ? P - 1 : 1)];
                pos[n] = i;
                seq[n] = ids[s];
                want[n] = i == P - 1;
            }
        double t0 = plumb_time_s();
        plumb_batch pb = {n, toks, pos, seq, want};
        if (plumb_decode(c, &pb)) { rc = -1; break; }
        double t1 = plumb_time_s();
        if (plumb_batch_argmax(c, 0, B, cur)) { rc = -1; break; }
        double t_first = plumb_time_s(), t_prev = t_first, checking_s = 0;
        uint64_t hash = PICKS_HASH_START;
        hash_picks(&hash, cur, B);
        if (!step_report) { /* the G steps as one greedy run: chained on the GPU when it holds the model */
            for (int s = 0; s < B; s++) pos[s] = P;
            itl_clock ck = {measured ? itl + n_itl : NULL, t_first, 0, B, &hash};
            const int got = plumb_decode_greedy(c, B, cur, pos, ids, G, itl_step, &ck);
            if (got < 0) { rc = -1; break; }
            if (got != G) { rc = plumb_set_error("greedy decode stopped after %d of %d steps", got, G); break; }
            if (measured) n_itl += G;
            t_prev = ck.t_prev;
        }
        for (int g = 0; step_report && g < G && !rc; g++) {
            for (int s = 0; s < B; s++) {
                toks[s] = cur[s];
                pos[s] = P + g;
                seq[s] = ids[s];
                want[s] = 1;
            }
            plumb_batch db = {B, toks, pos, seq, want};
            const double td = plumb_time_s();
            if (plumb_decode(c, &db)) { rc = -1; break; }
            const double tp = plumb_time_s();
            /* greedy picks: the GPU's when it has the head, else one sequence per thread */
            if (plumb_batch_argmax(c, 0, B, cur)) { rc = -1; break; }
            double t = plumb_time_s();
            hash_picks(&hash, cur, B);
            if (measured) {
                itl[n_itl++] = (t - t_prev) * 1e3;
                in_decode_s += tp - td;
                in_pick_s += t - tp;
                n_steps++;
            }
            t_prev = t;
            /* the picks (the GPU's, when it has the head) against the host's own argmax of the same logits, not timed */
            for (int s = 0; s < B; s++, n_picks++) picks_differ += cur[s] != plumb_argmax(plumb_batch_logits(c, s), nv);
            const double tc = plumb_time_s();
            checking_s += tc - t_prev;
            t_prev = tc;
        }
        if (rc) break;
        if (r == 0) first_hash = hash;
        else picks_stable &= hash == first_hash;
        pre[r] = (double)B * P / (t1 - t0);
        ttft[r] = (t_first - t0) * 1e3;
        dec[r] = (double)B * G / (t_prev - t_first - checking_s);
        e2e[r] = (t_prev - t0 - checking_s) * 1e3;
        if (measured) measured_s += t_prev - t0 - checking_s;
    }
    if (!rc) {
        const int w = cfg->warmup;
        out->reps = cfg->reps;
        out->n_prompt = P;
        out->n_gen = G;
        out->generated_tokens = (long)cfg->reps * G * B;
        out->total_s = measured_s;
        out->prefill_tps = plumb_stats_of(pre + w, cfg->reps);
        out->decode_tps = plumb_stats_of(dec + w, cfg->reps);
        out->ttft_ms = plumb_stats_of(ttft + w, cfg->reps);
        out->e2e_ms = plumb_stats_of(e2e + w, cfg->reps);
        out->itl_ms = plumb_stats_of(itl, n_itl);
        if (step_report && n_steps) /* where a decode step's wall time goes, outside any backend's own timers */
            fprintf(stderr, "bench: batch %d: %ld decode steps, per step ms: plumb_decode %.3f, greedy picks %.3f, rest %.3f; picks differing from the host's argmax: %ld of %ld\n",
                    B, n_steps, 1e3 * in_decode_s / n_steps, 1e3 * in_pick_s / n_steps,
                    out->itl_ms.mean - 1e3 * (in_decode_s + in_pick_s) / n_steps, picks_differ, n_picks);
        out->gpu_peak_mib = (double)plumb_ctx_gpu_peak_bytes(c) / 1048576.0;
        out->greedy_chained = plumb_ctx_greedy_chained(c);
        out->picks_hash = first_hash;
        out->picks_stable = picks_stable;
        snprintf(out->gpu_status, sizeof out->gpu_status, "%s", plumb_ctx_gpu_status(c)); /* now with how the greedy steps ran */
    }
out:
    free(prompt); free(toks); free(pos); free(seq); free(ids); free(want); free(cur);
    free(pre); free(dec); free(ttft); free(e2e); free(itl);
    plumb_ctx_free(c);
    return rc;
}

int bench_paired_limit(plumb_model *m, const bench_config *cfg, bench_paired *out) {
    const int P = cfg->n_prompt, G = cfg->n_gen;
    memset(out, 0, sizeof *out);
    if (G < 1 || P < 1) return plumb_set_error("paired limit: needs a prompt and generated tokens");
    /* parts of one token's bytes, 2 GiB or more in all: the part read before
     * a token was last read at least three parts (three tokens' bytes) before */
    const size_t part = (size_t)plumb_model_bytes_per_token(m) / 64 * 64;
    size_t n_parts = ((size_t)2048 << 20) / (part ? part : 1) + 1;
    if (n_parts < 4) n_parts = 4;
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = P + G + 16;
    cp.n_threads = cfg->threads;
    cp.exact = cfg->exact;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    if (!c) return -1;
    int rc = 0;
    char *buf = plumb_read_buffer(part * n_parts, cfg->threads);
    plumb_token *prompt = malloc(sizeof(plumb_token) * (size_t)P);
    double *tok_ms = malloc(sizeof(double) * 2 * (size_t)G), *gbs = malloc(sizeof(double) * 2 * (size_t)G), *frac = malloc(sizeof(double) * 2 * (size_t)G);
    if (!buf || !prompt || !tok_ms || !gbs || !frac) { rc = plumb_set_error("out of memory (paired limit: a %zu MiB read buffer)", part * n_parts >> 20); goto out; }
    bench_prompt(m, P, prompt);
    if (plumb_eval(c, prompt, P, 0)) { rc = -1; goto out; }
    plumb_token tok = plumb_argmax(plumb_get_logits(c), plumb_n_vocab(m));
    for (int g = 0; g < G; g++) {
        const double read_s = plumb_read_pass_s(buf + part * ((size_t)g % n_parts), part, cfg->threads, g % PLUMB_READ_LOOPS);
        const double t0 = plumb_time_s();
        if (plumb_eval(c, &tok, 1, P + g)) { rc = -1; goto out; }
        tok = plumb_argmax(plumb_get_logits(c), plumb_n_vocab(m));
        const double tok_s = plumb_time_s() - t0;
        tok_ms[g] = 1e3 * tok_s;
        gbs[g] = (double)part / read_s / 1e9;
        frac[g] = read_s / tok_s;
    }
    /* the fastest loop's pairs (token g read with loop g % LOOPS) */
    double best = -1;
    double *lf = frac + G, *lt = tok_ms + G, *lg = gbs + G; /* (the arrays' second halves) */
    for (int loop = 0; loop < PLUMB_READ_LOOPS && loop < G; loop++) {
        int n = 0;
        for (int g = loop; g < G; g += PLUMB_READ_LOOPS) lf[n] = frac[g], lt[n] = tok_ms[g], lg[n++] = gbs[g];
        const plumb_stats read = plumb_stats_of(lg, n);
        if (read.median <= best) continue;
        best = read.median;
        *out = (bench_paired){.n = n, .loop = loop, .fraction = plumb_stats_of(lf, n), .token_ms = plumb_stats_of(lt, n), .read_gbs = read};
    }
out:
    free(buf); free(prompt); free(tok_ms); free(gbs); free(frac);
    plumb_ctx_free(c);
    return rc;
}

static void append_piece(const plumb_model *m, plumb_token t, char *text, size_t cap) {
    char piece[64];
    int k = plumb_token_to_piece(m, t, piece, sizeof piece - 1);
    size_t len = strlen(text);
    for (int i = 0; i < k && len + 1 < cap; i++) text[len++] = piece[i] == '\n' ? ' ' : piece[i];
    text[len] = 0;
}

/* greedy continuation of prompt; ids into seq[n_prompt..n_prompt+n) */
static int greedy(plumb_model *m, int threads, plumb_token *seq, int n_prompt, int n, char *text, size_t cap) {
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = n_prompt + n + 1;
    cp.n_threads = threads;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    if (!c) return -1;
    int rc = plumb_eval(c, seq, n_prompt, 0);
    text[0] = 0;
    for (int i = 0; i < n && !rc; i++) {
        seq[n_prompt + i] = plumb_argmax(plumb_get_logits(c), plumb_n_vocab(m));
        append_piece(m, seq[n_prompt + i], text, cap);
        rc = plumb_eval(c, &seq[n_prompt + i], 1, n_prompt + i);
    }
    plumb_ctx_free(c);
    return rc;
}

int bench_quality_check(plumb_model *ref, plumb_model *cand, int n, int threads, bench_quality *q) {
    if (plumb_n_vocab(ref) != plumb_n_vocab(cand)) return plumb_set_error("models have different vocabularies");
    const int n_prompt = 16, nv = plumb_n_vocab(ref);
    plumb_token seq[16 + 256], own[16 + 256];
    if (n > 256) n = 256;
    bench_prompt(ref, n_prompt, seq);
    memcpy(own, seq, sizeof(plumb_token) * n_prompt);
    if (greedy(ref, threads, seq, n_prompt, n, q->ref_text, sizeof q->ref_text) ||
        greedy(cand, threads, own, n_prompt, n, q->text, sizeof q->text))
        return -1;
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = n_prompt + n + 1;
    cp.n_threads = threads;
    plumb_ctx *cr = plumb_ctx_new(ref, &cp), *cc = plumb_ctx_new(cand, &cp);
    int rc = (!cr || !cc) ? -1 : 0;
    if (!rc) rc = plumb_eval_all_logits(cr, seq, n_prompt + n - 1, 0) || plumb_eval_all_logits(cc, seq, n_prompt + n - 1, 0);
    if (!rc) {
        int agree = 0;
        double kl_sum = 0, kl_max = 0;
        for (int i = n_prompt - 1; i < n_prompt + n - 1; i++) {
            const float *a = plumb_get_logits_ith(cr, i), *b = plumb_get_logits_ith(cc, i);
            double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
            for (int v = 1; v < nv; v++) { ma = fmax(ma, a[v]); mb = fmax(mb, b[v]); }
            for (int v = 0; v < nv; v++) { za += exp(a[v] - ma); zb += exp(b[v] - mb); }
            const double lza = log(za), lzb = log(zb);
            for (int v = 0; v < nv; v++) {
                const double la = a[v] - ma - lza, lb = b[v] - mb - lzb;
                kl += exp(la) * (la - lb);
            }
            agree += plumb_argmax(a, nv) == plumb_argmax(b, nv);
            kl_sum += kl;
            kl_max = fmax(kl_max, kl);
        }
        q->n = n;
        q->top1 = (double)agree / n;
        q->kl_mean = kl_sum / n;
        q->kl_max = kl_max;
    }
    plumb_ctx_free(cr);
    plumb_ctx_free(cc);
    return rc;
}
