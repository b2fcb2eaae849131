/* cmd_chat.c — plumb chat: an interactive conversation in the terminal.
 * The whole conversation is re-rendered through the chat template each
 * turn; only the tokens after the part already in the KV cache are run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/util.h"
#include "../include/plumb.h"
#include "cli.h"

static const char *chat_help =
    "usage: plumb chat -m MODEL.gguf [options]\n"
    "  Reads your messages from standard input, one per line; an empty line or end of input ends the chat.\n"
    "  --chat-template NAME  chatml, llama3, llama2, llama2-sys, mistral, phi3, gemma, zephyr\n"
    "                        (default: recognised from the model's tokenizer.chat_template)\n"
    "  --system TEXT         system message\n"
    "  -n N                  most tokens per reply (default 512)\n"
    "  -c N                  context size   -t N  threads\n" CLI_SAMPLER_HELP;

typedef struct { plumb_chat_message *m; int n, cap; } history;

static int add_msg(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        plumb_chat_message *nm = realloc(h->m, sizeof *nm * (size_t)cap);
        if (!nm) return -1;
        h->m = nm;
        h->cap = cap;
    }
    h->m[h->n].role = role;
    h->m[h->n].content = strdup(content);
    return h->m[h->n++].content ? 0 : -1;
}

int cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *family = NULL, *system = NULL;
    int n_reply = 512, seed_given = 0;
    plumb_ctx_params cp = plumb_ctx_default_params();
    plumb_sampler_params sp = plumb_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(chat_help, stdout); return 0; }
        else if (!strcmp(a, "-m")) rc = cli_str(argc, argv, &i, &model_path);
        else if (!strcmp(a, "--chat-template")) rc = cli_str(argc, argv, &i, &family);
        else if (!strcmp(a, "--system") || !strcmp(a, "-sys")) rc = cli_str(argc, argv, &i, &system);
        else if (!strcmp(a, "-n")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &n_reply);
        else if (!strcmp(a, "-c")) rc = cli_int(argc, argv, &i, 0, 1 << 22, &cp.n_ctx);
        else if (!strcmp(a, "-t")) rc = cli_threads(argc, argv, &i, &cp.n_threads);
        else if ((rc = cli_sampler_flag(argc, argv, &i, &sp, &seed_given)) != 0) rc = rc < 0;
        else return cli_fail("chat", "unknown option '%s' (plumb chat --help)", a);
        if (rc) return 2;
    }
    if (!model_path) return cli_fail("chat", "no model given (-m MODEL.gguf)");
    if (family) {
        int known = 0;
        for (const char *const *f = plumb_chat_templates(); *f; f++) known |= !strcmp(*f, family);
        if (!known) return cli_fail("chat", "unknown chat template '%s' (plumb chat --help lists them)", family);
    }
    if (!seed_given) sp.seed = (uint64_t)time(NULL);
    int status = 1;
    history h = {0};
    plumb_ctx *c = NULL;
    plumb_sampler *s = NULL;
    plumb_token *toks = NULL;
    char *reply = NULL, *prompt = NULL;
    plumb_model *m = plumb_model_load(model_path);
    if (!m) { cli_fail("chat", "%s", plumb_last_error()); goto out; }
    if (!family) {
        const char *tmpl = NULL;
        family = plumb_chat_template_detect(m, &tmpl);
        if (!family) {
            cli_fail("chat", "%s; pass --chat-template NAME (chatml, llama3, llama2, mistral, phi3, gemma, zephyr)",
                     tmpl ? "the model's chat template is not one plumb recognises" : "the model has no chat template");
            goto out;
        }
    }
    c = plumb_ctx_new(m, &cp);
    s = c ? plumb_sampler_new(&sp, plumb_n_vocab(m)) : NULL;
    const int n_ctx = c ? plumb_ctx_n_ctx(c) : 0;
    toks = malloc(sizeof(plumb_token) * (size_t)(n_ctx + 1));
    reply = malloc((size_t)n_reply * 64 + 1);
    if (!c || !s || !toks || !reply) { cli_fail("chat", "%s", plumb_last_error()); goto out; }
    const int tty = isatty(0);
    fprintf(stderr, "plumb chat: %s, template %s, context %d. An empty line or end of input ends the chat.\n", model_path, family, n_ctx);
    if (system && add_msg(&h, "system", system)) goto oom;
    int n_past = 0; /* tokens of the conversation already in the cache */
    plumb_token *cached = malloc(sizeof(plumb_token) * (size_t)(n_ctx + 1));
    if (!cached) goto oom;
    char line[8192];
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) break;
        if (add_msg(&h, "user", line)) goto oom;
        free(prompt);
        prompt = plumb_chat_format(family, h.m, h.n, 1);
        if (!prompt) { cli_fail("chat", "%s", plumb_last_error()); break; }
        int n = plumb_tokenize_special(m, prompt, strlen(prompt), plumb_add_bos(m), 1, toks, n_ctx);
        if (n < 0 || n >= n_ctx) { cli_fail("chat", "context full: the conversation needs more than %d tokens (raise -c)", n_ctx); break; }
        int keep = 0;
        while (keep < n_past && keep < n - 1 && cached[keep] == toks[keep]) keep++;
        if (plumb_eval(c, toks + keep, n - keep, keep)) { cli_fail("chat", "%s", plumb_last_error()); break; }
        memcpy(cached, toks, sizeof(plumb_token) * (size_t)n);
        n_past = n;
        size_t rl = 0;
        reply[0] = 0;
        for (int g = 0; g < n_reply && n_past < n_ctx; g++) {
            plumb_token t = plumb_sample(s, plumb_get_logits(c));
            if (plumb_token_is_end_of_turn(m, t)) break;
            char piece[256];
            int k = plumb_token_to_piece(m, t, piece, sizeof piece);
            if (k > 0) {
                fwrite(piece, 1, (size_t)k, stdout);
                fflush(stdout);
                if (rl + (size_t)k < (size_t)n_reply * 64) { memcpy(reply + rl, piece, (size_t)k); rl += (size_t)k; reply[rl] = 0; }
            }
            cached[n_past] = t;
            if (plumb_eval(c, &t, 1, n_past)) { cli_fail("chat", "%s", plumb_last_error()); goto done; }
            n_past++;
        }
        fputs("\n", stdout);
        fflush(stdout);
        if (add_msg(&h, "assistant", reply)) goto oom;
    }
done:
    free(cached);
    status = 0;
    goto out;
oom:
    cli_fail("chat", "out of memory");
out:
    for (int i = 0; i < h.n; i++) free((void *)h.m[i].content);
    free(h.m);
    free(toks);
    free(reply);
    free(prompt);
    plumb_sampler_free(s);
    plumb_ctx_free(c);
    plumb_model_free(m);
    return status;
}
