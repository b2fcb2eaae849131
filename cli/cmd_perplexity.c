/* cmd_perplexity.c — plumb perplexity: llama.cpp's method. The text is cut
 * into chunks of CTX tokens (each starting with BOS where the model uses
 * one); every chunk is evaluated from scratch and only its second half is
 * scored, so each scored token has at least CTX/2 tokens of context.
 * --kl-base saves the reference log-probabilities of the scored positions;
 * --kl compares a (quantized) model against them: KL divergence percentiles,
 * top-1 agreement and the change in the probability of the right token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/stats.h"
#include "../core/util.h"
#include "../include/plumb.h"
#include "cli.h"

#define KL_MAGIC 0x504c4b4cu /* "LKLP" */

typedef struct {
    uint32_t magic, n_vocab, n_ctx, n_chunks, n_tokens;
} kl_header;

static void log_softmax(const float *l, int n, float *out) {
    double max = l[0], z = 0;
    for (int i = 1; i < n; i++) max = fmax(max, l[i]);
    for (int i = 0; i < n; i++) z += exp(l[i] - max);
    const double lz = log(z) + max;
    for (int i = 0; i < n; i++) out[i] = (float)(l[i] - lz);
}

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *text_file = NULL, *kl_base = NULL, *kl = NULL;
    int n_ctx = 512, max_chunks = 0, threads = 0, exact = 0, ngl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: plumb perplexity -m MODEL.gguf -f TEXT [-c CTX (512)] [--chunks N] [-t N] [--exact] [-ngl N|all]\n"
                   "         [--kl-base OUT.bin | --kl BASE.bin]\n");
            return 0;
        } else if (!strcmp(a, "-m")) rc = cli_str(argc, argv, &i, &model);
        else if (!strcmp(a, "-f")) rc = cli_str(argc, argv, &i, &text_file);
        else if (!strcmp(a, "-c")) rc = cli_int(argc, argv, &i, 8, 1 << 20, &n_ctx);
        else if (!strcmp(a, "--chunks")) rc = cli_int(argc, argv, &i, 0, 1 << 20, &max_chunks);
        else if (!strcmp(a, "-t")) rc = cli_threads(argc, argv, &i, &threads);
        else if (!strcmp(a, "--kl-base")) rc = cli_str(argc, argv, &i, &kl_base);
        else if (!strcmp(a, "--kl")) rc = cli_str(argc, argv, &i, &kl);
        else if (!strcmp(a, "--exact")) exact = 1;
        else if (!strcmp(a, "-ngl")) rc = cli_gpu_layers(argc, argv, &i, &ngl);
        else return cli_fail("perplexity", "unknown option '%s'", a);
        if (rc) return 2;
    }
    if (!model || !text_file) return cli_fail("perplexity", "-m MODEL and -f TEXT are required");
    if (kl_base && kl) return cli_fail("perplexity", "give --kl-base or --kl, not both");
    FILE *tf = fopen(text_file, "rb");
    if (!tf) return cli_fail("perplexity", "cannot open '%s'", text_file);
    fseek(tf, 0, SEEK_END);
    long len = ftell(tf);
    fseek(tf, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, tf) != (size_t)len) { fclose(tf); free(text); return cli_fail("perplexity", "cannot read '%s'", text_file); }
    fclose(tf);
    text[len] = 0;

    int status = 1;
    plumb_model *m = plumb_model_load(model);
    plumb_ctx *c = NULL;
    plumb_token *toks = NULL;
    float *lp = NULL, *base_lp = NULL;
    double *kls = NULL;
    FILE *kf = NULL;
    if (!m) { cli_fail("perplexity", "%s", plumb_last_error()); goto out; }
    const int max_tok = (int)len + 16, nv = plumb_n_vocab(m);
    toks = malloc(sizeof(plumb_token) * (size_t)max_tok);
    int n_tok = toks ? plumb_tokenize(m, text, (size_t)len, plumb_add_bos(m), toks, max_tok) : -1;
    if (n_tok < 0) { cli_fail("perplexity", "%s", plumb_last_error()); goto out; }
    int n_chunks = n_tok / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) { cli_fail("perplexity", "the text has %d tokens, fewer than one chunk of %d (lower -c)", n_tok, n_ctx); goto out; }
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.exact = exact;
    cp.n_gpu_layers = ngl;
    c = plumb_ctx_new(m, &cp);
    if (!c) { cli_fail("perplexity", "%s", plumb_last_error()); goto out; }
    if (ngl) fprintf(stderr, "perplexity: %s\n", plumb_ctx_gpu_status(c));
    const int first = n_ctx / 2, per_chunk = n_ctx - 1 - first;
    const long n_scored = (long)per_chunk * n_chunks;
    lp = malloc(sizeof(float) * (size_t)nv);
    kl_header h = {KL_MAGIC, (uint32_t)nv, (uint32_t)n_ctx, (uint32_t)n_chunks, (uint32_t)n_tok};
    if (kl_base) {
        kf = fopen(kl_base, "wb");
        if (!kf || fwrite(&h, sizeof h, 1, kf) != 1 || fwrite(toks, sizeof(plumb_token), (size_t)n_tok, kf) != (size_t)n_tok) { cli_fail("perplexity", "cannot write '%s'", kl_base); goto out; }
    } else if (kl) {
        kl_header bh;
        kf = fopen(kl, "rb");
        if (!kf || fread(&bh, sizeof bh, 1, kf) != 1 || bh.magic != KL_MAGIC) { cli_fail("perplexity", "'%s' is not a plumb --kl-base file", kl); goto out; }
        if (bh.n_vocab != h.n_vocab || bh.n_ctx != h.n_ctx || bh.n_tokens != h.n_tokens || bh.n_chunks < h.n_chunks) {
            cli_fail("perplexity", "'%s' was made with other settings (vocab %u, ctx %u, %u tokens, %u chunks) than this run (vocab %u, ctx %u, %u tokens, %u chunks)",
                     kl, bh.n_vocab, bh.n_ctx, bh.n_tokens, bh.n_chunks, h.n_vocab, h.n_ctx, h.n_tokens, h.n_chunks);
            goto out;
        }
        plumb_token *bt = malloc(sizeof(plumb_token) * (size_t)n_tok);
        int same = bt && fread(bt, sizeof(plumb_token), (size_t)n_tok, kf) == (size_t)n_tok && !memcmp(bt, toks, sizeof(plumb_token) * (size_t)n_tok);
        free(bt);
        if (!same) { cli_fail("perplexity", "'%s' was made from another text or tokenizer", kl); goto out; }
        base_lp = malloc(sizeof(float) * (size_t)nv);
        kls = malloc(sizeof(double) * (size_t)n_scored);
    }
    uint16_t *half = malloc(sizeof(uint16_t) * (size_t)nv);
    double nll = 0, nll2 = 0, dp_sum = 0, max_dlp = 0;
    long count = 0, same_top = 0;
    const int bos = plumb_token_bos(m);
    double t0 = plumb_time_s();
    fprintf(stderr, "perplexity: %d tokens, %d chunks of %d, scoring %d positions per chunk\n", n_tok, n_chunks, n_ctx, per_chunk);
    for (int ch = 0; ch < n_chunks; ch++) {
        plumb_token *chunk = toks + (size_t)ch * n_ctx;
        plumb_token saved = chunk[0];
        if (plumb_add_bos(m) && bos >= 0) chunk[0] = bos;
        int rc = plumb_eval_all_logits(c, chunk, n_ctx, 0);
        chunk[0] = saved;
        if (rc) { cli_fail("perplexity", "%s", plumb_last_error()); free(half); goto out; }
        for (int j = first; j < n_ctx - 1; j++) {
            log_softmax(plumb_get_logits_ith(c, j), nv, lp);
            const plumb_token next = chunk[j + 1];
            nll -= lp[next];
            nll2 += (double)lp[next] * lp[next];
            if (kl_base) {
                for (int v = 0; v < nv; v++) half[v] = plumb_fp32_to_fp16(lp[v]);
                if (fwrite(half, sizeof(uint16_t), (size_t)nv, kf) != (size_t)nv) { cli_fail("perplexity", "write failed"); free(half); goto out; }
            } else if (kl) {
                if (fread(half, sizeof(uint16_t), (size_t)nv, kf) != (size_t)nv) { cli_fail("perplexity", "'%s' is truncated", kl); free(half); goto out; }
                double k = 0;
                int ta = 0, tb = 0;
                for (int v = 0; v < nv; v++) {
                    base_lp[v] = plumb_fp16_to_fp32(half[v]);
                    k += exp(base_lp[v]) * (base_lp[v] - lp[v]);
                    if (base_lp[v] > -20 && fabs(base_lp[v] - lp[v]) > max_dlp) max_dlp = fabs(base_lp[v] - lp[v]);
                    if (base_lp[v] > base_lp[ta]) ta = v;
                    if (lp[v] > lp[tb]) tb = v;
                }
                kls[count] = k < 0 ? 0 : k;
                same_top += ta == tb;
                dp_sum += exp(lp[next]) - exp(base_lp[next]);
            }
            count++;
        }
        fprintf(stderr, "[%d]%.4f ", ch + 1, exp(nll / count));
    }
    free(half);
    const double mean = nll / count, var = nll2 / count - mean * mean, se = sqrt(var > 0 ? var / count : 0);
    printf("\nFinal estimate: PPL = %.4f +/- %.4f over %ld tokens (%d chunks of %d) in %.1f s\n", exp(mean), exp(mean) * se, count, n_chunks, n_ctx,
           plumb_time_s() - t0);
    if (kl) {
        plumb_stats s = plumb_stats_of(kls, (int)count);
        printf("KL divergence vs %s: mean %.6f, median %.6f, p90 %.6f, p99 %.6f, max %.6f\n", kl, s.mean, s.median, s.p90, s.p99, s.max);
        printf("Same top token: %.2f%%   Mean delta-p of the right token: %+.4f%%   Max |delta log-prob| (tokens above e^-20): %.4f\n",
               100.0 * same_top / count, 100.0 * dp_sum / count, max_dlp);
    }
    if (kl_base) printf("saved reference log-probabilities of %ld positions to %s\n", count, kl_base);
    status = 0;
out:
    if (kf && fclose(kf) != 0 && kl_base && status == 0) status = cli_fail("perplexity", "write failed for '%s'", kl_base);
    free(text); free(toks); free(lp); free(base_lp); free(kls);
    plumb_ctx_free(c);
    plumb_model_free(m);
    return status;
}
