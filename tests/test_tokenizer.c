/* Tokenizer tests: the reference prompts of the shared models, and
 * llama.cpp's tokenizer suite for the SentencePiece vocabularies. */
#include "../include/plumb.h"
#include "helpers.h"

static void expect_ids(const char *model, const char *text, int add_bos, const int *want, int n_want) {
    plumb_model *m = plumb_model_load(model);
    cr_assert_not_null(m, "%s", plumb_last_error());
    plumb_token got[256];
    int n = plumb_tokenize(m, text, strlen(text), add_bos, got, 256);
    cr_assert_eq(n, n_want, "'%s': %d tokens, expected %d", text, n, n_want);
    for (int i = 0; i < n; i++) cr_expect_eq(got[i], want[i], "'%s' token %d: %d, expected %d", text, i, got[i], want[i]);
    plumb_model_free(m);
}

Test(tokenizer, stories260k_prompt) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    expect_ids(p, "Once upon a time", 1, (int[]){1, 403, 407, 261, 378}, 5);
}

Test(tokenizer, tinystories656k_prompts) {
    const char *p = shared_file("models/TinyStories-656K-Q8_0.gguf");
    REQUIRE_SHARED(p);
    expect_ids(p, "Once upon a time", 1, (int[]){1, 80, 147, 201, 282, 57}, 6);
    expect_ids(p, "Hello", 1, (int[]){1, 80, 1288, 67}, 4);
}

Test(tokenizer, too_small_buffer_is_an_error) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    cr_assert_not_null(m);
    plumb_token t[2];
    cr_expect_lt(plumb_tokenize(m, "Once upon a time", 16, 1, t, 2), 0);
    cr_expect(strstr(plumb_last_error(), "needs 5 tokens") != NULL, "%s", plumb_last_error());
    plumb_model_free(m);
}

/* Runs one vocab's .inp/.out pair: every string must give exactly the listed
 * ids (no BOS), and detokenize back to itself. Returns failures. */
static int run_vocab_suite(const char *name, int *n_cases) {
    char gguf[256], inp[256], out[256];
    snprintf(gguf, sizeof gguf, "models/vocab/ggml-vocab-%s.gguf", name);
    snprintf(inp, sizeof inp, "%s.inp", shared_file(gguf));
    snprintf(out, sizeof out, "%s.out", shared_file(gguf));
    plumb_model *m = plumb_model_load_vocab(shared_file(gguf));
    cr_assert_not_null(m, "%s", plumb_last_error());
    char *in_text = slurp(inp, NULL), *out_text = slurp(out, NULL);
    cr_assert(in_text && out_text);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *s = in_text, *o = out_text;
    int fails = 0;
    *n_cases = 0;
    for (char *e; (e = strstr(s, sep)) != NULL; s = e + strlen(sep)) {
        *e = 0;
        char *ol = o, *oe = strchr(o, '\n');
        if (oe) { *oe = 0; o = oe + 1; } else o += strlen(o);
        int want[512], n_want = 0;
        for (char *tok = strtok(ol, " "); tok; tok = strtok(NULL, " ")) want[n_want++] = atoi(tok);
        plumb_token got[512];
        int n = plumb_tokenize(m, s, strlen(s), 0, got, 512);
        int ok = n == n_want;
        for (int i = 0; ok && i < n; i++) ok = got[i] == want[i];
        /* detokenize: SPM drops the leading space it added; BPE adds none */
        char text[4096];
        int len = 0;
        for (int i = 0; ok && i < n; i++) {
            int k = plumb_token_to_piece(m, got[i], text + len, (int)sizeof text - len);
            if (k > 0) len += k;
        }
        text[len] = 0;
        const int spm = !strcmp(plumb_tokenizer_kind(m), "llama");
        const char *round = spm && text[0] == ' ' ? text + 1 : text;
        if (ok && strcmp(round, s) != 0) ok = 0;
        if (!ok) {
            fails++;
            cr_log_warn("%s: case %d '%s' failed (%d tokens, want %d)", name, *n_cases, s, n, n_want);
        }
        (*n_cases)++;
    }
    cr_log_info("vocab %s: %d/%d passed", name, *n_cases - fails, *n_cases);
    fprintf(stderr, "vocab %s: %d/%d cases passed\n", name, *n_cases - fails, *n_cases);
    free(in_text);
    free(out_text);
    plumb_model_free(m);
    return fails;
}

Test(tokenizer, llama_spm_suite) {
    REQUIRE_SHARED(shared_file("models/vocab/ggml-vocab-llama-spm.gguf"));
    int n;
    int fails = run_vocab_suite("llama-spm", &n);
    cr_expect_gt(n, 40);
    cr_expect_eq(fails, 0, "%d of %d llama-spm cases failed", fails, n);
}

Test(tokenizer, phi3_spm_suite) {
    REQUIRE_SHARED(shared_file("models/vocab/ggml-vocab-phi-3.gguf"));
    int n;
    int fails = run_vocab_suite("phi-3", &n);
    cr_expect_gt(n, 40);
    cr_expect_eq(fails, 0, "%d of %d phi-3 cases failed", fails, n);
}

/* Byte-level BPE vocabularies of llama.cpp's suite. */
#define BPE_SUITE(fn, name)                                                                      \
    Test(tokenizer, fn) {                                                                        \
        REQUIRE_SHARED(shared_file("models/vocab/ggml-vocab-" name ".gguf"));                    \
        int n;                                                                                   \
        int fails = run_vocab_suite(name, &n);                                                   \
        cr_expect_gt(n, 40);                                                                     \
        cr_expect_eq(fails, 0, "%d of %d " name " cases failed", fails, n);                      \
    }
BPE_SUITE(gpt2_suite, "gpt-2")
BPE_SUITE(falcon_suite, "falcon")
BPE_SUITE(starcoder_suite, "starcoder")
BPE_SUITE(deepseek_coder_suite, "deepseek-coder")

Test(tokenizer, bpe_vocabularies_without_gguf_are_reported) {
    /* llama-bpe and qwen2 ship only their .inp/.out (the vocabularies are too large) */
    const char *p = shared_file("models/vocab/ggml-vocab-qwen2.gguf.inp");
    REQUIRE_SHARED(p);
    if (access(shared_file("models/vocab/ggml-vocab-qwen2.gguf"), R_OK) != 0)
        cr_skip_test("ggml-vocab-qwen2.gguf and ggml-vocab-llama-bpe.gguf are not in ../shared: their suites cannot run");
}

Test(tokenizer, special_tokens_parsed_when_asked) {
    const char *p = shared_file("models/vocab/ggml-vocab-gpt-2.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load_vocab(p);
    cr_assert_not_null(m, "%s", plumb_last_error());
    const char *text = "a<|endoftext|>b";
    plumb_token t[32];
    int n = plumb_tokenize_special(m, text, strlen(text), 0, 1, t, 32);
    cr_assert_eq(n, 3, "%d tokens", n);
    cr_expect_str_eq(plumb_token_text(m, t[1]), "<|endoftext|>");
    int n2 = plumb_tokenize_special(m, text, strlen(text), 0, 0, t, 32);
    cr_expect_gt(n2, 3, "without parse_special the control token is plain text");
    plumb_model_free(m);
}
