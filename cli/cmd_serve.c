/* cmd_serve.c — plumb serve: the OpenAI-compatible HTTP server. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../include/plumb.h"
#include "../server/server.h"
#include "cli.h"

static volatile int stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static const char *serve_help =
    "usage: plumb serve -m MODEL.gguf [options]\n"
    "  --host ADDR         IPv4 address to bind (default 127.0.0.1)\n"
    "  --port N            (default 8080)\n"
    "  --parallel N        sequences decoded together (default 4)\n"
    "  -c N                KV cache positions shared by all sequences (default parallel x 2048)\n"
    "  -t N                threads   --numa off|distribute|isolate|mirror  NUMA placement\n"
    "  -ngl N|all          run the last N layers (all: the whole model) on the GPU through the CUDA plugin\n"
    "  --step-tokens N     most tokens one scheduler step runs, prompt chunks and one per decoding sequence\n"
    "                      (default 256, at least --parallel): smaller keeps tokens flowing to streams while\n"
    "                      prompts arrive, larger finishes prompts sooner\n"
    "  --queue N           waiting requests before answering 503 (default 64)\n"
    "  --api-key KEY       require Authorization: Bearer KEY (401 otherwise)\n"
    "  --rate-limit R      requests per second allowed (429 above; default off)\n"
    "  --alias NAME        model id reported by /v1/models\n"
    "  --chat-template NAME  override the model's chat template\n"
    "  -n N                default max_tokens (default 256)\n"
    "  --max-body BYTES    largest request body (default 1048576; 413 above)\n";

int cmd_serve(int argc, char **argv) {
    plumb_serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .max_queue = 64, .default_max_tokens = 256, .max_body = 1 << 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(serve_help, stdout); return 0; }
        else if (!strcmp(a, "-m")) rc = cli_str(argc, argv, &i, &o.model_path);
        else if (!strcmp(a, "--host")) rc = cli_str(argc, argv, &i, &o.host);
        else if (!strcmp(a, "--port")) rc = cli_int(argc, argv, &i, 1, 65535, &o.port);
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) rc = cli_int(argc, argv, &i, 1, 1024, &o.parallel);
        else if (!strcmp(a, "-c")) rc = cli_int(argc, argv, &i, 0, 1 << 22, &o.n_ctx);
        else if (!strcmp(a, "-t")) rc = cli_threads(argc, argv, &i, &o.threads);
        else if (!strcmp(a, "--queue")) rc = cli_int(argc, argv, &i, 0, 1 << 20, &o.max_queue);
        else if (!strcmp(a, "--api-key")) rc = cli_str(argc, argv, &i, &o.api_key);
        else if (!strcmp(a, "--rate-limit")) { float r; rc = cli_float(argc, argv, &i, 0, 1e6, &r); o.rate_limit = r; }
        else if (!strcmp(a, "--alias")) rc = cli_str(argc, argv, &i, &o.model_name);
        else if (!strcmp(a, "--chat-template")) rc = cli_str(argc, argv, &i, &o.chat_template);
        else if (!strcmp(a, "-n")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &o.default_max_tokens);
        else if (!strcmp(a, "--max-body")) rc = cli_int(argc, argv, &i, 1024, 1 << 30, &o.max_body);
        else if (!strcmp(a, "--exact")) o.exact = 1;
        else if (!strcmp(a, "--numa")) rc = cli_str(argc, argv, &i, &o.numa);
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) rc = cli_gpu_layers(argc, argv, &i, &o.n_gpu_layers);
        else if (!strcmp(a, "--step-tokens")) rc = cli_int(argc, argv, &i, 1, 1 << 16, &o.step_tokens);
        else return cli_fail("serve", "unknown option '%s' (plumb serve --help)", a);
        if (rc) return 2;
    }
    if (!o.model_path) return cli_fail("serve", "no model given (-m MODEL.gguf)");
    if (o.chat_template) {
        int known = 0;
        for (const char *const *f = plumb_chat_templates(); *f; f++) known |= !strcmp(*f, o.chat_template);
        if (!known) return cli_fail("serve", "unknown chat template '%s'", o.chat_template);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    o.stop_flag = &stop_requested;
    return plumb_serve(&o);
}
