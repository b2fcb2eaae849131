/* The plumb binary as a user meets it: exit codes and messages for bad
 * input, and the main commands end to end. PLUMB_BIN names the binary. */
#include <sys/wait.h>

#include "helpers.h"

typedef struct { int code; char *out, *err; } cmd_result;

static cmd_result run(const char *args) {
    const char *bin = getenv("PLUMB_BIN") ? getenv("PLUMB_BIN") : "./plumb";
    char cmd[2048];
    const char *o = tmp_path("cli.out"), *e = tmp_path("cli.err");
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s </dev/null", bin, args, o, e);
    int st = system(cmd);
    cmd_result r = {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), slurp(o, NULL), slurp(e, NULL)};
    cr_assert(r.out && r.err);
    remove(o);
    remove(e);
    return r;
}

static void done(cmd_result *r) { free(r->out); free(r->err); }

#define EXPECT_FAILS(args, code_, needle)                                                              \
    do {                                                                                               \
        cmd_result r_ = run(args);                                                                     \
        cr_expect_eq(r_.code, code_, "'%s' exited %d, expected %d; stderr: %s", args, r_.code, code_, r_.err); \
        cr_expect(strstr(r_.err, needle) != NULL, "'%s' stderr lacks '%s': %s", args, needle, r_.err); \
        done(&r_);                                                                                     \
    } while (0)

Test(cli, usage_and_unknown_commands) {
    EXPECT_FAILS("", 2, "usage: plumb COMMAND");
    EXPECT_FAILS("frobnicate", 2, "unknown command 'frobnicate'");
    cmd_result r = run("--version");
    cr_expect_eq(r.code, 0);
    cr_expect(strstr(r.out, "plumb 0.") != NULL);
    done(&r);
}

Test(cli, run_rejects_bad_input) {
    EXPECT_FAILS("run", 1, "no model given");
    EXPECT_FAILS("run -m /nonexistent/model.gguf -p hi", 1, "cannot open");
    EXPECT_FAILS("run -m x.gguf -n abc", 2, "expects an integer");
    EXPECT_FAILS("run -m x.gguf -t", 2, "needs a value");
    EXPECT_FAILS("run -m x.gguf --temp -1", 2, "expects a number");
    EXPECT_FAILS("run -m x.gguf --bogus", 1, "unknown option '--bogus'");
    EXPECT_FAILS("run -m /etc/passwd", 1, "not a GGUF file");
    EXPECT_FAILS("info /etc/hostname", 1, "GGUF");
    EXPECT_FAILS("mkmodel --shape nope -o /tmp/x.gguf", 1, "unknown shape 'nope'");
    EXPECT_FAILS("quantize a.gguf b.gguf q9_9", 1, "unknown type 'q9_9'");
}

Test(cli, run_reference_text) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    char args[600];
    snprintf(args, sizeof args, "run -m %s -p 'Once upon a time' -n 40 --temp 0", p);
    cmd_result r = run(args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.") == r.out,
              "%s", r.out);
    cr_expect(strstr(r.err, "generation:") && strstr(r.err, "tokens/s") && strstr(r.err, "peak RSS"), "%s", r.err);
    done(&r);
    /* a context too small for the prompt is a clear error */
    snprintf(args, sizeof args, "run -m %s -p 'Once upon a time' -c 3", p);
    EXPECT_FAILS(args, 1, "raise -c");
}

Test(cli, mkmodel_quantize_info_run) {
    char m[512], q[512]; /* own copies: tmp_path's buffers are reused */
    snprintf(m, sizeof m, "%s", tmp_path("cli-model.gguf"));
    snprintf(q, sizeof q, "%s", tmp_path("cli-model-q4.gguf"));
    char args[1024];
    snprintf(args, sizeof args, "mkmodel --shape custom --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab-size 1000 --type f16 -o %s", m);
    cmd_result r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    done(&r);
    snprintf(args, sizeof args, "quantize %s %s q4_k_m", m, q);
    r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    done(&r);
    snprintf(args, sizeof args, "info %s", q);
    r = run(args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "Q4_K") && strstr(r.out, "Q6_K") && strstr(r.out, "blk.0.ffn_down.weight"), "%s", r.out);
    done(&r);
    snprintf(args, sizeof args, "run -m %s -p 'abc def' -n 8 -s 3 -t 2", q);
    r = run(args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "Q4_K") && strstr(r.err, "8 tokens"), "%s", r.err);
    done(&r);
    remove(m);
    remove(q);
}
