/* main.c — the plumb command: one binary, subcommands. */
#include <stdio.h>
#include <string.h>

#include "../include/plumb.h"
#include "cli.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text: plumb run -m MODEL.gguf -p PROMPT [-n N] [-t T] [--temp T] ..."},
    {"chat", cmd_chat, "interactive chat through the model's chat template: plumb chat -m MODEL.gguf [--system TEXT]"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching: plumb serve -m MODEL.gguf [--port 8080 --parallel 4]"},
    {"loadtest", cmd_loadtest, "sweep concurrency against an OpenAI-compatible server: plumb loadtest --url URL --model NAME"},
    {"bench", cmd_bench, "measure speed honestly: plumb bench [-m MODEL --types f16,q8_0,q4_0 -t 1,all -p 128 -n 64 --reps 5]"},
    {"compare", cmd_compare, "speedups between two bench records, refusing unlike conditions: plumb compare A.json B.json"},
    {"perplexity", cmd_perplexity, "quality: plumb perplexity -m MODEL -f TEXT [-c CTX] [--kl-base F | --kl F]"},
    {"info", cmd_info, "describe a GGUF file: plumb info FILE.gguf [--all-tensors]"},
    {"mkmodel", cmd_mkmodel, "write a synthetic model of a real shape: plumb mkmodel --shape NAME --type TYPE -o OUT.gguf"},
    {"quantize", cmd_quantize, "re-encode a model: plumb quantize IN.gguf OUT.gguf TYPE"},
    {"convert-llama2c", cmd_convert_llama2c, "llama2.c checkpoint to GGUF: plumb convert-llama2c MODEL.bin TOKENIZER.bin OUT.gguf"},
};

static void usage(FILE *to) {
    fprintf(to, "plumb %s — CPU-first quantized LLM inference\n\nusage: plumb COMMAND [options]\n\n", plumb_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(to, "  %-16s %s\n", commands[i].name, commands[i].help);
    fprintf(to, "\nplumb COMMAND --help shows a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("plumb %s\n", plumb_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "plumb: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
