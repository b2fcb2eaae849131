/* cli.h — helpers shared by the plumb subcommands. */
#ifndef PLUMB_CLI_H
#define PLUMB_CLI_H

#include <stdint.h>

/* Each subcommand: argv[0] is the subcommand name. Returns the exit code. */
int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_loadtest(int argc, char **argv);

/* Prints "plumb <cmd>: message" to stderr and returns 1 (the exit code). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Flag value parsing: argv[*i] is the flag; advances *i past the value.
 * Each returns 0, or -1 after printing what is wrong. */
int cli_str(int argc, char **argv, int *i, const char **out);
int cli_int(int argc, char **argv, int *i, long min, long max, int *out);
int cli_u64(int argc, char **argv, int *i, uint64_t *out);
int cli_float(int argc, char **argv, int *i, double min, double max, float *out);

/* Sampling flags shared by run and chat (--temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, -s/--seed). Returns 1 if argv[*i] was
 * one (value consumed), 0 if not, -1 on a bad value. */
struct plumb_sampler_params_s;
int cli_sampler_flag(int argc, char **argv, int *i, void *sampler_params, int *seed_given);
#define CLI_SAMPLER_HELP \
    "  --temp T           temperature (default 0.8; 0 = greedy)\n" \
    "  --top-k K          (default 40; 0 = off)\n" \
    "  --top-p P          (default 0.95; 1 = off)\n" \
    "  --min-p P          (default 0.05; 0 = off)\n" \
    "  --repeat-penalty R (default 1.0 = off)   --repeat-last-n N (default 64)\n" \
    "  -s, --seed S       sampling seed (default: random, printed)\n"

/* "-ngl" values: a layer count, or "all" (-1). */
int cli_gpu_layers(int argc, char **argv, int *i, int *out);

/* "-t" values: a number, or "all" / 0 for every core. */
int cli_threads(int argc, char **argv, int *i, int *out);

#endif
