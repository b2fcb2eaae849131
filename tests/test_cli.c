/* The plumb binary as a user meets it: exit codes and messages for bad
 * input, and the main commands end to end. PLUMB_BIN names the binary. */
#include <jansson.h>
#include <sys/wait.h>

#include "../core/gguf.h"
#include "../quant/quant.h"

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
    char args[2048];
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

/* plumb info --json: a file with a string that is not UTF-8, a metadata
 * array, a tokenizer array (its length unless --all-keys) and two tensors */
Test(cli, info_json) {
    char path[512], args[700];
    snprintf(path, sizeof path, "%s", tmp_path("cli-info.gguf"));
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "general.name", "bad\xff byte");
    gguf_w_u32(w, "llama.block_count", 3);
    const float fs[] = {0.5f, 2.0f};
    gguf_w_arr_f32(w, "test.factors", fs, 2);
    const char *toks[] = {"<unk>", "a", "b"};
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const int64_t ne_a[2] = {32, 2}, ne_b[1] = {8};
    gguf_w_tensor(w, "a.weight", PLUMB_TYPE_Q8_0, 2, ne_a);
    gguf_w_tensor(w, "b.weight", PLUMB_TYPE_F32, 1, ne_b);
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    const uint8_t q[68] = {1};
    const float b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_eq(gguf_w_begin(w, fp), 0);
    cr_assert_eq(gguf_w_tensor_data(w, fp, q, sizeof q), 0);
    cr_assert_eq(gguf_w_tensor_data(w, fp, b, sizeof b), 0);
    cr_assert_eq(gguf_w_finish(w), 0);
    fclose(fp);
    gguf_writer_free(w);

    snprintf(args, sizeof args, "info %s --json", path);
    cmd_result r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "not JSON (%s): %s", je.text, r.out);
    json_t *meta = json_object_get(j, "metadata"), *tensors = json_object_get(j, "tensors");
    cr_expect_str_eq(json_string_value(json_object_get(j, "architecture")), "llama");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "general.name")), "bad\xef\xbf\xbd byte");
    cr_expect_eq(json_integer_value(json_object_get(meta, "llama.block_count")), 3);
    cr_expect_eq(json_array_size(json_object_get(meta, "test.factors")), 2);
    cr_expect_float_eq(json_real_value(json_array_get(json_object_get(meta, "test.factors"), 1)), 2.0, 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(meta, "tokenizer.ggml.tokens"), "length")), 3);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "tokenizer"), "tokens")), 3);
    cr_assert_eq(json_array_size(tensors), 2);
    json_t *t0 = json_array_get(tensors, 0);
    cr_expect_str_eq(json_string_value(json_object_get(t0, "name")), "a.weight");
    cr_expect_str_eq(json_string_value(json_object_get(t0, "type")), "Q8_0");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(t0, "shape"), 0)), 32);
    cr_expect_eq(json_integer_value(json_object_get(t0, "bytes")), 68);
    cr_expect_eq(json_integer_value(json_object_get(j, "parameters")), 72);
    cr_expect_eq(json_integer_value(json_object_get(j, "tensor_bytes")), 100);
    json_decref(j);
    done(&r);

    snprintf(args, sizeof args, "info %s --json --all-keys --hash", path);
    r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "not JSON (%s): %s", je.text, r.out);
    json_t *tok = json_object_get(json_object_get(j, "metadata"), "tokenizer.ggml.tokens");
    cr_expect_eq(json_array_size(tok), 3);
    cr_expect_str_eq(json_string_value(json_array_get(tok, 1)), "a");
    const char *all = json_string_value(json_object_get(j, "tensor_data_sha256"));
    cr_assert(all && strlen(all) == 64, "%s", r.out);
    cr_expect(json_string_value(json_object_get(json_array_get(json_object_get(j, "tensors"), 1), "sha256")) != NULL);
    char want[80];
    snprintf(want, sizeof want, "%s  all tensor data", all);
    json_decref(j);
    done(&r);
    snprintf(args, sizeof args, "info %s --hash", path); /* the text form's total is the same hash */
    r = run(args);
    cr_expect(strstr(r.out, want) != NULL, "%s", r.out);
    done(&r);
    EXPECT_FAILS("info --topology --json", 1, "no JSON form");
    remove(path);
}

/* ---- bench, compare, perplexity ---- */

Test(cli, bench_record_and_compare) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    char a[512], b[512], c[512], rep[512], args[2048];
    snprintf(a, sizeof a, "%s", tmp_path("bench-a"));
    snprintf(b, sizeof b, "%s", tmp_path("bench-b"));
    snprintf(c, sizeof c, "%s", tmp_path("bench-c"));
    snprintf(rep, sizeof rep, "%s", tmp_path("report"));
    snprintf(args, sizeof args, "bench -m %s -t 1 -p 16 -n 8 --reps 2 --warmup 0 --no-quality -o %s --report %s", p, a, rep);
    cmd_result r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "| F32 | cpu | 1 | 1 | 16 |") != NULL, "%s", r.out); /* threads 1, batch 1, prompt 16 */
    done(&r);
    char path[600];
    snprintf(path, sizeof path, "%s.json", a);
    char *json = slurp(path, NULL);
    cr_assert_not_null(json);
    const char *fields[] = {"\"date\"", "\"sha256\": \"270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d\"", "\"cpu\"",
                            "\"threads\": 1", "\"concurrency\": 1", "\"requests\": 2", "\"input_token_range\"", "\"max_output_tokens\": 8",
                            "\"generated_tokens\": 16", "\"total_time_s\"", "\"p99\"", "\"peak_rss_mib\"", "\"read_bandwidth_gbs\"",
                            "\"decode_limit_tps\"", "\"command\"", "\"paired_limit\"", "\"fraction_of_limit\"",
                            "\"compute_peak\"", "\"int8_gmacs\"", "\"layer_macs_per_token\"", "\"prefill_fraction_of_peak\"",
                            "\"greedy_picks_same_every_rep\": true"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) cr_expect(strstr(json, fields[i]) != NULL, "record lacks %s", fields[i]);
    /* the greedy picks' hash: the same when the decode loop runs step by step (PLUMB_BENCH_STEPS) */
    const char *hk = strstr(json, "\"greedy_picks_fnv1a\": \"");
    cr_assert_not_null(hk, "record lacks greedy_picks_fnv1a");
    char hash[17] = "";
    memcpy(hash, hk + strlen("\"greedy_picks_fnv1a\": \""), 16);
    free(json);
    setenv("PLUMB_BENCH_STEPS", "1", 1);
    snprintf(args, sizeof args, "bench -m %s -t 1 -p 16 -n 8 --reps 1 --warmup 0 --no-quality -o %s", p, c);
    r = run(args);
    unsetenv("PLUMB_BENCH_STEPS");
    cr_expect_eq(r.code, 0, "%s", r.err);
    char want_line[64];
    snprintf(want_line, sizeof want_line, "greedy picks fnv1a %s (the same in every rep)", hash);
    cr_expect(strstr(r.err, want_line) != NULL, "step-by-step picks differ from the chained run's %s: %s", hash, r.err);
    done(&r);
    snprintf(path, sizeof path, "%s/index.html", rep);
    char *html = slurp(path, NULL);
    cr_assert_not_null(html);
    cr_expect(strstr(html, "<svg") && strstr(html, "Decode tokens/s"));
    free(html);
    /* same conditions: compared; other output length: refused with the reason */
    snprintf(args, sizeof args, "bench -m %s -t 1 -p 16 -n 8 --reps 2 --warmup 0 --no-quality -o %s", p, b);
    r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    done(&r);
    snprintf(args, sizeof args, "bench -m %s -t 1 -p 16 -n 12 --reps 2 --warmup 0 --no-quality -o %s", p, c);
    r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    done(&r);
    snprintf(args, sizeof args, "compare %s.json %s.json", a, b);
    r = run(args);
    cr_expect_eq(r.code, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "decode ") && strstr(r.out, "1 comparisons, 0 refused"), "%s", r.out);
    cr_expect(strstr(r.out, "greedy tokens the same") != NULL, "%s", r.out); /* the same model and settings */
    done(&r);
    snprintf(args, sizeof args, "compare %s.json %s.json", a, c);
    r = run(args);
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.out, "REFUSED") && strstr(r.out, "output length 8 vs 12"), "%s", r.out);
    done(&r);
    EXPECT_FAILS("compare /etc/hostname /etc/hostname", 1, "not readable JSON");
}

Test(cli, perplexity_and_kl) {
    const char *p = shared_file("models/stories260K.gguf"), *t = shared_file("reference/stories260K.greedy.once-upon-a-time.txt");
    REQUIRE_SHARED(p);
    char base[512], args[2048];
    snprintf(base, sizeof base, "%s", tmp_path("kl.bin"));
    snprintf(args, sizeof args, "perplexity -m %s -f %s -c 32 --kl-base %s", p, t, base);
    cmd_result r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    double ppl = 0;
    const char *f = strstr(r.out, "PPL = ");
    cr_assert_not_null(f, "%s", r.out);
    sscanf(f, "PPL = %lf", &ppl);
    /* the model's own greedy text: very predictable to it */
    cr_expect(ppl > 1.0 && ppl < 4.0, "perplexity %g", ppl);
    done(&r);
    snprintf(args, sizeof args, "perplexity -m %s -f %s -c 32 --kl %s", p, t, base);
    r = run(args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "Same top token: 100.00%") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "KL divergence") != NULL);
    done(&r);
    snprintf(args, sizeof args, "perplexity -m %s -f %s -c 16 --kl %s", p, t, base);
    EXPECT_FAILS(args, 1, "other settings");
    remove(base);
}

Test(cli, chat_from_stdin) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    char args[1024];
    snprintf(args, sizeof args, "chat -m %s -n 8 --temp 0", p);
    EXPECT_FAILS(args, 1, "has no chat template; pass --chat-template");
    const char *bin = getenv("PLUMB_BIN") ? getenv("PLUMB_BIN") : "./plumb";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "printf 'Hello\\nAgain\\n' | %s chat -m %s -n 8 --temp 0 --chat-template chatml 2>/dev/null", bin, p);
    FILE *fp = popen(cmd, "r");
    cr_assert_not_null(fp);
    char out[4096] = "";
    size_t n = fread(out, 1, sizeof out - 1, fp);
    out[n] = 0;
    cr_expect_eq(pclose(fp), 0);
    int lines = 0;
    for (char *q = out; *q; q++) lines += *q == '\n';
    cr_expect_geq(lines, 2, "two replies expected: %s", out);
    snprintf(args, sizeof args, "chat -m %s --chat-template nope", p);
    EXPECT_FAILS(args, 1, "unknown chat template 'nope'");
}
