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

/* Prints "plumb <cmd>: message" to stderr and returns 1 (the exit code). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Flag value parsing: argv[*i] is the flag; advances *i past the value.
 * Each returns 0, or -1 after printing what is wrong. */
int cli_str(int argc, char **argv, int *i, const char **out);
int cli_int(int argc, char **argv, int *i, long min, long max, int *out);
int cli_u64(int argc, char **argv, int *i, uint64_t *out);
int cli_float(int argc, char **argv, int *i, double min, double max, float *out);

/* "-t" values: a number, or "all" / 0 for every core. */
int cli_threads(int argc, char **argv, int *i, int *out);

#endif
