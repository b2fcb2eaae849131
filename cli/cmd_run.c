/* cmd_run.c — plumb run: load a model, feed a prompt, stream a generation,
 * report speed and memory on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/util.h"
#include "../include/plumb.h"
#include "../simd/kernels.h"
#include "cli.h"

static const char *run_help =
    "usage: plumb run -m MODEL.gguf [-p PROMPT | -f FILE] [options]\n"
    "  -n N               tokens to generate (default 128; -1 = until EOS or the context is full)\n"
    "  -t N|all           threads (default: all cores)\n"
    "  -c N               context size (default: the model's, at most 4096)\n"
    CLI_SAMPLER_HELP
    "  --numa MODE        off (default), distribute, isolate, mirror: NUMA placement\n"
    "  -ngl N|all         run the last N layers (all: the whole model) on the GPU through the CUDA plugin\n"
    "  --exact            dequantize weights to f32 for every product (reference arithmetic)\n"
    "  --ignore-eos       keep generating past the end-of-sequence token\n"
    "  --no-bos           do not prepend the BOS token\n"
    "  --show-ids         print prompt and generated token ids on stderr\n"
    "  --no-display-prompt  print only the generated text\n";

static void print_piece(const plumb_model *m, plumb_token t) {
    char piece[256];
    const int len = plumb_token_to_piece(m, t, piece, sizeof piece);
    if (len > 0) {
        fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
    }
}

/* a greedy chain's steps as they arrive: printed, stopped at the end of
 * text (not printed, not counted) or at the token limit */
typedef struct {
    const plumb_model *m;
    plumb_sampler *s;
    plumb_token *toks;
    int next_pos, *n_gen, limit, ignore_eos;
} run_stream;
static int stream_step(void *user, int step, const plumb_token *picks) {
    run_stream *rs = user;
    const plumb_token t = picks[0];
    rs->toks[rs->next_pos + step] = t;
    if (t == plumb_token_eos(rs->m) && !rs->ignore_eos) return 1;
    plumb_sampler_accept(rs->s, t);
    print_piece(rs->m, t);
    return ++*rs->n_gen >= rs->limit;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    int n_predict = 128, ignore_eos = 0, no_bos = 0, show_ids = 0, display_prompt = 1, seed_given = 0;
    plumb_ctx_params cp = plumb_ctx_default_params();
    plumb_sampler_params sp = plumb_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(run_help, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) rc = cli_str(argc, argv, &i, &model_path);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) rc = cli_str(argc, argv, &i, &prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) rc = cli_str(argc, argv, &i, &prompt_file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) rc = cli_int(argc, argv, &i, -1, 1 << 24, &n_predict);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) rc = cli_threads(argc, argv, &i, &cp.n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) rc = cli_int(argc, argv, &i, 0, 1 << 22, &cp.n_ctx);
        else if ((rc = cli_sampler_flag(argc, argv, &i, &sp, &seed_given)) != 0) rc = rc < 0;
        else if (!strcmp(a, "--numa")) rc = cli_str(argc, argv, &i, &cp.numa);
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) rc = cli_gpu_layers(argc, argv, &i, &cp.n_gpu_layers);
        else if (!strcmp(a, "--exact")) cp.exact = 1;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--no-bos")) no_bos = 1;
        else if (!strcmp(a, "--show-ids")) show_ids = 1;
        else if (!strcmp(a, "--no-display-prompt")) display_prompt = 0;
        else return cli_fail("run", "unknown option '%s' (plumb run --help lists them)", a);
        if (rc) return 2;
    }
    if (!model_path) return cli_fail("run", "no model given (-m MODEL.gguf)");
    if (prompt && prompt_file) return cli_fail("run", "give -p or -f, not both");
    char *file_text = NULL;
    if (prompt_file) {
        FILE *fp = fopen(prompt_file, "rb");
        if (!fp) return cli_fail("run", "cannot open prompt file '%s'", prompt_file);
        fseek(fp, 0, SEEK_END);
        long sz = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        file_text = malloc((size_t)(sz > 0 ? sz : 0) + 1);
        size_t got = file_text ? fread(file_text, 1, (size_t)(sz > 0 ? sz : 0), fp) : 0;
        fclose(fp);
        if (!file_text) return cli_fail("run", "out of memory");
        file_text[got] = 0;
        prompt = file_text;
    }
    if (!prompt) prompt = "";
    if (!seed_given) sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);

    int status = 1;
    plumb_model *m = NULL;
    plumb_ctx *c = NULL;
    plumb_sampler *s = NULL;
    plumb_token *toks = NULL;
    double t0 = plumb_time_s();
    m = plumb_model_load(model_path);
    if (!m) { cli_fail("run", "%s", plumb_last_error()); goto out; }
    c = plumb_ctx_new(m, &cp);
    if (!c) { cli_fail("run", "%s", plumb_last_error()); goto out; }
    double t_load = plumb_time_s() - t0;
    if (cp.n_gpu_layers) fprintf(stderr, "plumb: %s%s\n", plumb_ctx_gpu_status(c), plumb_ctx_gpu_layers(c) ? "" : "; running on the CPU");
    const int n_ctx = plumb_ctx_n_ctx(c);
    toks = malloc(sizeof(plumb_token) * (size_t)n_ctx);
    if (!toks) { cli_fail("run", "out of memory"); goto out; }
    int add_bos = !no_bos && plumb_add_bos(m);
    int n_prompt = plumb_tokenize(m, prompt, strlen(prompt), add_bos, toks, n_ctx);
    if (n_prompt < 0) { cli_fail("run", "%s (context %d; raise -c)", plumb_last_error(), n_ctx); goto out; }
    if (n_prompt == 0) { cli_fail("run", "empty prompt and the model has no BOS token to start from"); goto out; }
    s = plumb_sampler_new(&sp, plumb_n_vocab(m));
    if (!s) { cli_fail("run", "%s", plumb_last_error()); goto out; }
    for (int i = 0; i < n_prompt; i++) plumb_sampler_accept(s, toks[i]);

    fprintf(stderr, "plumb: %s | %s %s | %d threads | kernels %s | ctx %d | seed %llu%s\n", model_path,
            plumb_model_hparams(m)->arch, plumb_model_weight_type(m), cp.n_threads ? cp.n_threads : plumb_default_threads(),
            plumb_kernels_active()->name, n_ctx, (unsigned long long)sp.seed, cp.exact ? " | exact" : "");
    if (show_ids) {
        fprintf(stderr, "prompt ids (%d):", n_prompt);
        for (int i = 0; i < n_prompt; i++) fprintf(stderr, " %d", toks[i]);
        fprintf(stderr, "\n");
    }
    if (display_prompt) {
        fputs(prompt, stdout);
        fflush(stdout);
    }

    double tp0 = plumb_time_s();
    if (plumb_eval(c, toks, n_prompt, 0)) { cli_fail("run", "%s", plumb_last_error()); goto out; }
    double t_prompt = plumb_time_s() - tp0;

    int limit = n_predict < 0 ? n_ctx - n_prompt : n_predict;
    if (limit > n_ctx - n_prompt) limit = n_ctx - n_prompt;
    int n_gen = 0, pos = n_prompt;
    double tg0 = plumb_time_s();
    const int chained = limit > 1 && plumb_sampler_is_greedy(s) && plumb_ctx_greedy_chained(c);
    if (chained) {
        /* greedy on a GPU holding the whole model: the first pick here, the
         * rest as one chain whose steps run back to back on the device */
        plumb_token t = plumb_sample(s, plumb_get_logits(c));
        toks[pos] = t;
        if (t != plumb_token_eos(m) || ignore_eos) {
            n_gen = 1;
            print_piece(m, t);
            run_stream rs = {m, s, toks, pos + 1, &n_gen, limit, ignore_eos};
            if (plumb_decode_greedy(c, 1, &t, &pos, &(int){0}, limit - 1, stream_step, &rs) < 0) { cli_fail("run", "%s", plumb_last_error()); goto out; }
        }
    }
    for (; !chained && n_gen < limit; n_gen++) {
        plumb_token t = plumb_sample(s, plumb_get_logits(c));
        toks[pos] = t;
        if (t == plumb_token_eos(m) && !ignore_eos) break;
        print_piece(m, t);
        if (n_gen + 1 == limit || pos + 1 >= n_ctx) { n_gen++; break; }
        if (plumb_eval(c, &t, 1, pos)) { cli_fail("run", "%s", plumb_last_error()); goto out; }
        pos++;
    }
    double t_gen = plumb_time_s() - tg0;
    printf("\n");
    if (show_ids) {
        fprintf(stderr, "generated ids (%d):", n_gen);
        for (int i = 0; i < n_gen; i++) fprintf(stderr, " %d", toks[n_prompt + i]);
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "\nload:       %8.1f ms\n", t_load * 1e3);
    fprintf(stderr, "prompt:     %8.1f ms / %d tokens (%.2f tokens/s)\n", t_prompt * 1e3, n_prompt, n_prompt / t_prompt);
    fprintf(stderr, "generation: %8.1f ms / %d tokens (%.2f tokens/s)%s\n", t_gen * 1e3, n_gen, n_gen > 0 ? n_gen / t_gen : 0.0,
            chained && plumb_ctx_greedy_chained(c) ? ", a greedy chain on the GPU" : "");
    fprintf(stderr, "memory:     peak RSS %.1f MiB, context buffers %.1f MiB", plumb_peak_rss_bytes() / 1048576.0, plumb_ctx_bytes(c) / 1048576.0);
    if (plumb_ctx_gpu_layers(c)) fprintf(stderr, ", GPU %.1f MiB", plumb_ctx_gpu_peak_bytes(c) / 1048576.0);
    fprintf(stderr, "\n");
    status = 0;
out:
    free(toks);
    free(file_text);
    plumb_sampler_free(s);
    plumb_ctx_free(c);
    plumb_model_free(m);
    return status;
}
