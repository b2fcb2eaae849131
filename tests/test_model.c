/* End-to-end model tests on real trained weights: the reference greedy
 * outputs in ../shared, the llama2.c converter, batch vs token-by-token
 * agreement, and the int8-activation path against the exact f32 path. */
#include <math.h>

#include "../include/plumb.h"
#include "../models/convert.h"
#include "../quant/quant.h"
#include "../simd/kernels.h"
#include "helpers.h"

/* Greedy generation: returns the number of tokens generated into ids and
 * appends their text (after the prompt text) to text. */
static int greedy(plumb_model *m, int exact, const int *prompt, int n_prompt, int n_gen, int *ids, char *text, size_t cap) {
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.exact = exact;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    cr_assert_not_null(c, "%s", plumb_last_error());
    cr_assert_eq(plumb_eval(c, prompt, n_prompt, 0), 0, "%s", plumb_last_error());
    size_t len = strlen(text);
    for (int i = 0; i < n_gen; i++) {
        const float *l = plumb_get_logits(c);
        int best = 0;
        for (int v = 1; v < plumb_n_vocab(m); v++)
            if (l[v] > l[best]) best = v;
        ids[i] = best;
        char piece[64];
        int k = plumb_token_to_piece(m, best, piece, sizeof piece);
        if (k > 0 && len + (size_t)k < cap) { memcpy(text + len, piece, (size_t)k); len += (size_t)k; text[len] = 0; }
        cr_assert_eq(plumb_eval(c, &best, 1, n_prompt + i), 0, "%s", plumb_last_error());
    }
    plumb_ctx_free(c);
    return n_gen;
}

static const int stories_ids[40] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396,
                                    267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385,
                                    328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426};

static void check_stories260k(const char *path) {
    plumb_model *m = plumb_model_load(path);
    cr_assert_not_null(m, "%s", plumb_last_error());
    int prompt[5] = {1, 403, 407, 261, 378}, ids[256];
    char text[4096] = "Once upon a time";
    greedy(m, 0, prompt, 5, 256, ids, text, sizeof text);
    for (int i = 0; i < 40; i++) cr_expect_eq(ids[i], stories_ids[i], "step %d: %d, expected %d", i, ids[i], stories_ids[i]);
    char *ref = slurp(shared_file("reference/stories260K.greedy.once-upon-a-time.txt"), NULL);
    cr_assert_not_null(ref);
    size_t rl = strlen(ref);
    while (rl && (ref[rl - 1] == '\n')) ref[--rl] = 0;
    cr_expect_eq(strncmp(text, ref, rl), 0, "256-step text differs:\n got: %s\nwant: %s", text, ref);
    free(ref);
    plumb_model_free(m);
}

Test(model, stories260k_reference_greedy) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    check_stories260k(p);
}

Test(model, llama2c_converter_reproduces_reference) {
    const char *bin = shared_file("models/stories260K.bin"), *tok = shared_file("models/tok512.bin");
    REQUIRE_SHARED(bin);
    const char *out = tmp_path("s260-converted.gguf");
    cr_assert_eq(plumb_convert_llama2c(bin, tok, out), 0, "%s", plumb_last_error());
    check_stories260k(out);
    /* the converted vocabulary is the one llama.cpp's converter wrote */
    plumb_model *a = plumb_model_load(out), *b = plumb_model_load(shared_file("models/stories260K.gguf"));
    cr_assert(a && b);
    cr_assert_eq(plumb_n_vocab(a), plumb_n_vocab(b));
    for (int i = 0; i < plumb_n_vocab(a); i++)
        cr_expect_str_eq(plumb_token_text(a, i), plumb_token_text(b, i), "token %d", i);
    plumb_model_free(a);
    plumb_model_free(b);
    remove(out);
}

Test(model, llama2c_converter_rejects_bad_input) {
    const char *tok = shared_file("models/tok512.bin");
    REQUIRE_SHARED(tok);
    /* the tokenizer file is not a checkpoint: its header is implausible or its size wrong */
    cr_expect_neq(plumb_convert_llama2c(tok, tok, tmp_path("bad.gguf")), 0);
    cr_expect_neq(plumb_convert_llama2c("/nonexistent.bin", tok, tmp_path("bad.gguf")), 0);
    cr_expect(strstr(plumb_last_error(), "cannot open") != NULL);
}

Test(model, tinystories656k_q8_0_exact_reference) {
    const char *p = shared_file("models/TinyStories-656K-Q8_0.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    cr_assert_not_null(m, "%s", plumb_last_error());
    int ids[64];
    char text[2048] = "";
    greedy(m, 1, (int[]){1, 80, 147, 201, 282, 57}, 6, 40, ids, text, sizeof text);
    const char *want1 = ", a little girl named Lily lived in a small house. She loved to eat yummy food. One day, she saw a "
                        "small bird on the ground. The bird was sad because it could not eat it.";
    cr_expect_eq(strncmp(text, want1, strlen(want1)), 0, "got: %s", text);
    text[0] = 0;
    greedy(m, 1, (int[]){1, 80, 1288, 67}, 4, 24, ids, text, sizeof text);
    const char *want2 = " and a girl were walking in the park. One day she saw a small bird flying in the sk";
    cr_expect_eq(strncmp(text, want2, strlen(want2)), 0, "got: %s", text);
    plumb_model_free(m);
}

/* Teacher-forced comparison of the int8-activation path with the exact path
 * over a 256-token text (the exact path's own greedy continuation). */
Test(model, int8_path_agrees_with_exact) {
    const char *p = shared_file("models/TinyStories-656K-Q8_0.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    cr_assert_not_null(m);
    enum { N = 256 };
    int toks[N + 6] = {1, 80, 147, 201, 282, 57};
    char text[8192] = "";
    greedy(m, 1, toks, 6, N, toks + 6, text, sizeof text);
    plumb_ctx_params ep = plumb_ctx_default_params(), fp = ep;
    ep.exact = 1;
    plumb_ctx *ce = plumb_ctx_new(m, &ep), *cf = plumb_ctx_new(m, &fp);
    cr_assert(ce && cf);
    cr_assert_eq(plumb_eval_all_logits(ce, toks, N, 0), 0);
    cr_assert_eq(plumb_eval_all_logits(cf, toks, N, 0), 0);
    int nv = plumb_n_vocab(m), agree = 0;
    double kl_sum = 0, kl_max = 0;
    for (int i = 0; i < N; i++) {
        const float *a = plumb_get_logits_ith(ce, i), *b = plumb_get_logits_ith(cf, i);
        int ba = 0, bb = 0;
        double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
        for (int v = 1; v < nv; v++) {
            if (a[v] > a[ba]) ba = v;
            if (b[v] > b[bb]) bb = v;
            ma = fmax(ma, a[v]);
            mb = fmax(mb, b[v]);
        }
        for (int v = 0; v < nv; v++) { za += exp(a[v] - ma); zb += exp(b[v] - mb); }
        for (int v = 0; v < nv; v++) {
            double pa = exp(a[v] - ma) / za, lpa = a[v] - ma - log(za), lpb = b[v] - mb - log(zb);
            kl += pa * (lpa - lpb);
        }
        agree += ba == bb;
        kl_sum += kl;
        kl_max = fmax(kl_max, kl);
    }
    fprintf(stderr, "int8 vs exact over %d positions: top-1 agreement %.1f%%, KL mean %.6f max %.6f\n", N,
            100.0 * agree / N, kl_sum / N, kl_max);
    cr_expect_geq(agree, (int)ceil(0.95 * N), "top-1 agreement %d/%d below 95%%", agree, N);
    cr_expect_lt(kl_sum / N, 0.01, "mean KL %.5f", kl_sum / N);
    plumb_ctx_free(ce);
    plumb_ctx_free(cf);
    plumb_model_free(m);
}

/* A prefill batch must give the same logits as feeding tokens one by one. */
Test(model, batch_equals_sequential) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    plumb_ctx *a = plumb_ctx_new(m, NULL), *b = plumb_ctx_new(m, NULL);
    cr_assert(m && a && b);
    int toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (i * 37 + 11) % 512;
    cr_assert_eq(plumb_eval_all_logits(a, toks, 100, 0), 0); /* spans two forward chunks */
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(plumb_eval(b, &toks[i], 1, i), 0);
        const float *la = plumb_get_logits_ith(a, i), *lb = plumb_get_logits(b);
        float maxd = 0;
        for (int v = 0; v < 512; v++) maxd = fmaxf(maxd, fabsf(la[v] - lb[v]));
        cr_expect_lt(maxd, 1e-3f, "position %d differs by %g", i, maxd);
    }
    plumb_ctx_free(a);
    plumb_ctx_free(b);
    plumb_model_free(m);
}

Test(model, eval_errors) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = 8;
    plumb_ctx *c = plumb_ctx_new(m, &cp);
    cr_assert(m && c);
    int t[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    cr_expect_neq(plumb_eval(c, t, 9, 0), 0);
    cr_expect(strstr(plumb_last_error(), "context full") != NULL, "%s", plumb_last_error());
    int bad = 512;
    cr_expect_neq(plumb_eval(c, &bad, 1, 0), 0);
    cr_expect(strstr(plumb_last_error(), "outside the vocabulary") != NULL);
    plumb_ctx_free(c);
    plumb_model_free(m);
}

/* Synthetic models: every generated type loads and runs to finite logits. */
Test(model, synthetic_models_run) {
    const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        plumb_synth_params sp = {.shape = {.name = "t", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512,
                                           .n_vocab = 600, .n_ctx = 128, .rope_freq_base = 10000.f, .arch = "llama"},
                                 .type = (uint32_t)plumb_type_from_name(types[i]), .seed = 5};
        const char *out = tmp_path("synth.gguf");
        cr_assert_eq(plumb_make_synthetic(&sp, out), 0, "%s: %s", types[i], plumb_last_error());
        plumb_model *m = plumb_model_load(out);
        cr_assert_not_null(m, "%s: %s", types[i], plumb_last_error());
        cr_expect_str_eq(plumb_model_weight_type(m), plumb_type_name(sp.type));
        plumb_ctx *c = plumb_ctx_new(m, NULL);
        int toks[4] = {1, 300, 301, 302};
        cr_assert_eq(plumb_eval(c, toks, 4, 0), 0);
        const float *l = plumb_get_logits(c);
        for (int v = 0; v < 600; v++) cr_assert(isfinite(l[v]), "%s: logit %d not finite", types[i], v);
        plumb_ctx_free(c);
        plumb_model_free(m);
        remove(out);
    }
}

/* Several sequences in one batch give the logits each gets alone, and the
 * paged KV cache gives its blocks back. */
Test(model, batched_sequences_match_single) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 3;
    plumb_ctx *c = plumb_ctx_new(m, &cp), *single = plumb_ctx_new(m, NULL);
    cr_assert(m && c && single);
    const int s0 = plumb_seq_open(c), s1 = plumb_seq_open(c), s2 = plumb_seq_open(c);
    cr_assert(s0 >= 0 && s1 >= 0 && s2 >= 0);
    cr_expect_lt(plumb_seq_open(c), 0, "a fourth sequence must be refused");
    const int free0 = plumb_kv_free_positions(c);
    /* prompts of lengths 5, 20 and 3, all prefilled in one batch */
    int toks[28], pos[28], seq[28];
    int8_t want[28] = {0};
    const int len[3] = {5, 20, 3}, ids[3] = {s0, s1, s2};
    int n = 0, last[3];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < len[s]; i++, n++) {
            toks[n] = (s * 97 + i * 31 + 7) % 512;
            pos[n] = i;
            seq[n] = ids[s];
            if (i == len[s] - 1) { want[n] = 1; last[s] = n; }
        }
    plumb_batch b = {n, toks, pos, seq, want};
    cr_assert_eq(plumb_decode(c, &b), 0, "%s", plumb_last_error());
    cr_expect_eq(plumb_kv_free_positions(c), free0 - 16 * (1 + 2 + 1));
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(plumb_eval(single, toks + last[s] - len[s] + 1, len[s], 0), 0);
        const float *a = plumb_batch_logits(c, s), *e = plumb_get_logits(single);
        float maxd = 0;
        for (int v = 0; v < 512; v++) maxd = fmaxf(maxd, fabsf(a[v] - e[v]));
        cr_expect_lt(maxd, 1e-3f, "sequence %d differs by %g", s, maxd);
    }
    /* greedy picks of the rows together: plumb_argmax of each; rows past the decode's are refused */
    int picks[3] = {-1, -1, -1};
    cr_assert_eq(plumb_batch_argmax(c, 0, 3, picks), 0, "%s", plumb_last_error());
    for (int s = 0; s < 3; s++) cr_expect_eq(picks[s], plumb_argmax(plumb_batch_logits(c, s), 512), "row %d", s);
    cr_expect_eq(plumb_batch_argmax(c, 1, 2, picks), 0);
    cr_expect_eq(picks[0], plumb_argmax(plumb_batch_logits(c, 1), 512));
    cr_expect_lt(plumb_batch_argmax(c, 2, 2, picks), 0, "a fourth row must be refused");
    cr_expect_lt(plumb_batch_argmax(c, -1, 1, picks), 0);
    plumb_seq_close(c, s1);
    cr_expect_eq(plumb_kv_free_positions(c), free0 - 16 * 2);
    /* asking for more blocks than are free is refused without changes */
    int big_t[251], big_p[251], big_s[251];
    for (int i = 0; i < 251; i++) { big_t[i] = 5; big_p[i] = 5 + i; big_s[i] = s0; }
    plumb_batch bb = {251, big_t, big_p, big_s, NULL};
    int before = plumb_kv_free_positions(c);
    cr_expect_eq(plumb_decode(c, &bb), PLUMB_ERR_KV_FULL, "%s", plumb_last_error());
    cr_expect_eq(plumb_kv_free_positions(c), before);
    plumb_ctx_free(c);
    plumb_ctx_free(single);
    plumb_model_free(m);
}

/* plumb_decode_greedy's callback: records each step's picks, stops after stop_after steps */
typedef struct {
    int n, steps, stop_after;
    int picks[64][2];
} greedy_log;
static int log_step(void *user, int step, const plumb_token *picks) {
    greedy_log *g = user;
    cr_assert_eq(step, g->steps, "steps arrive in order");
    for (int i = 0; i < g->n; i++) g->picks[step][i] = picks[i];
    g->steps++;
    return g->steps == g->stop_after;
}

/* Two sequences decoded greedily together (on the CPU: step by step) give
 * the reference greedy ids of stories260K for the one with its prompt, and
 * the picks of token-at-a-time decoding for the other; a stop from the
 * callback leaves the sequences at the steps done. */
Test(model, greedy_decode_of_two_sequences) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    plumb_model *m = plumb_model_load(p);
    cr_assert_not_null(m, "%s", plumb_last_error());
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    plumb_ctx *c = plumb_ctx_new(m, &cp), *single = plumb_ctx_new(m, NULL);
    cr_assert(c && single);
    const int s0 = plumb_seq_open(c), s1 = plumb_seq_open(c);
    int toks[8] = {1, 403, 407, 261, 378, 1, 300, 301}, pos[8] = {0, 1, 2, 3, 4, 0, 1, 2}, seq[8] = {s0, s0, s0, s0, s0, s1, s1, s1};
    int8_t want[8] = {0, 0, 0, 0, 1, 0, 0, 1};
    plumb_batch b = {8, toks, pos, seq, want};
    cr_assert_eq(plumb_decode(c, &b), 0, "%s", plumb_last_error());
    int first[2], at[2] = {5, 3}, seqs[2] = {s0, s1};
    cr_assert_eq(plumb_batch_argmax(c, 0, 2, first), 0);
    cr_expect_eq(first[0], stories_ids[0]);
    greedy_log g = {.n = 2, .stop_after = 0};
    cr_assert_eq(plumb_decode_greedy(c, 2, first, at, seqs, 39, log_step, &g), 39, "%s", plumb_last_error());
    cr_expect_eq(g.steps, 39);
    for (int i = 0; i < 39; i++) cr_expect_eq(g.picks[i][0], stories_ids[i + 1], "step %d: %d, expected %d", i, g.picks[i][0], stories_ids[i + 1]);
    cr_expect_eq(plumb_seq_length(c, s0), 5 + 39);
    cr_expect_eq(plumb_seq_length(c, s1), 3 + 39);
    /* the second sequence against one token at a time in a context of its own */
    cr_assert_eq(plumb_eval(single, toks + 5, 3, 0), 0);
    int cur = plumb_argmax(plumb_get_logits(single), 512);
    cr_expect_eq(cur, first[1]);
    for (int i = 0; i < 39; i++) {
        cr_assert_eq(plumb_eval(single, &cur, 1, 3 + i), 0);
        cur = plumb_argmax(plumb_get_logits(single), 512);
        cr_expect_eq(g.picks[i][1], cur, "sequence 2, step %d", i);
    }
    /* a stop after 10 steps: 10 done, the sequence holds those positions only */
    greedy_log h = {.n = 1, .stop_after = 10};
    int tok = g.picks[38][0], p0 = 44;
    cr_expect_eq(plumb_decode_greedy(c, 1, &tok, &p0, &s0, 50, log_step, &h), 10, "%s", plumb_last_error());
    cr_expect_eq(plumb_seq_length(c, s0), 54);
    /* refused: nothing to do, a sequence twice, a gap, past the context, a token outside the vocabulary */
    int two[2] = {s0, s0}, tt[2] = {5, 5}, pp[2] = {54, 55}, bad = 512, gap = 56;
    cr_expect_lt(plumb_decode_greedy(c, 1, &tok, &p0, &s0, 0, log_step, &h), 0);
    cr_expect_lt(plumb_decode_greedy(c, 2, tt, pp, two, 3, log_step, &h), 0);
    cr_expect_lt(plumb_decode_greedy(c, 1, &tok, &gap, &s0, 3, log_step, &h), 0);
    cr_expect_lt(plumb_decode_greedy(c, 1, &tok, &pp[0], &s0, 75, log_step, &h), 0);
    cr_expect_lt(plumb_decode_greedy(c, 1, &bad, &pp[0], &s0, 3, log_step, &h), 0);
    cr_expect_eq(plumb_seq_length(c, s0), 54, "a refused call changes nothing");
    cr_expect_eq(plumb_ctx_greedy_chained(c), 0, "no GPU: step by step");
    plumb_ctx_free(c);
    plumb_ctx_free(single);
    plumb_model_free(m);
}

/* A synthetic two-layer model (loaded fresh, so repacking and NUMA copies
 * are redone) under the context cp makes: logits after a 6-token prompt
 * chunk ([0]) and after two single-token decode steps ([1]). */
static void prompt_and_decode(const char *path, const plumb_ctx_params *cp, float out[2][600]) {
    const int prompt[6] = {1, 300, 301, 302, 17, 5}, next[2] = {40, 41};
    plumb_model *m = plumb_model_load(path);
    cr_assert_not_null(m, "%s", plumb_last_error());
    plumb_ctx *c = plumb_ctx_new(m, cp);
    cr_assert_not_null(c, "%s", plumb_last_error());
    cr_assert_eq(plumb_eval(c, prompt, 6, 0), 0, "%s", plumb_last_error());
    memcpy(out[0], plumb_get_logits(c), sizeof out[0]);
    for (int i = 0; i < 2; i++) cr_assert_eq(plumb_eval(c, &next[i], 1, 6 + i), 0, "%s", plumb_last_error());
    memcpy(out[1], plumb_get_logits(c), sizeof out[1]);
    plumb_ctx_free(c);
    plumb_model_free(m);
}

static const char *synthetic_600(const char *file, uint32_t type, int n_head, int n_head_kv, uint64_t seed) {
    plumb_synth_params sp = {.shape = {.name = "t", .n_embd = 256, .n_layer = 2, .n_head = n_head, .n_head_kv = n_head_kv, .n_ff = 512,
                                       .n_vocab = 600, .n_ctx = 128, .rope_freq_base = 10000.f, .arch = "llama"},
                             .type = type, .seed = seed};
    const char *out = tmp_path(file);
    cr_assert_eq(plumb_make_synthetic(&sp, out), 0, "%s", plumb_last_error());
    return out;
}

static void expect_same_logits(float got[2][600], float ref[2][600], const char *what) {
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 600; v++)
            cr_assert_eq(got[k][v], ref[k][v], "%s logit %d: %g %s vs %g", k ? "decode" : "prompt", v, got[k][v], what, ref[k][v]);
}

/* path's logits with 2 threads, then again with the environment variable
 * var = value (and numa mode, if not NULL) set for that run: the same, bit
 * for bit */
static void expect_same_logits_with(const char *path, const char *var, const char *value, const char *numa, const char *what) {
    float ref[2][600], got[2][600];
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_threads = 2;
    prompt_and_decode(path, &cp, ref);
    setenv(var, value, 1);
    if (numa) cp.numa = numa;
    prompt_and_decode(path, &cp, got);
    unsetenv(var);
    expect_same_logits(got, ref, what);
    remove(path);
}

/* --numa mirror: with copies forced on this one-node machine, each thread
 * reads its own copy of every repacked matrix (thread i copy i % 2), and
 * the logits are those of the unmirrored model, bit for bit. */
Test(model, numa_mirror_copies_give_the_same_logits) {
    expect_same_logits_with(synthetic_600("mirror.gguf", PLUMB_TYPE_Q4_0, 4, 2, 9), "PLUMB_NUMA_MIRROR_COPIES", "2", "mirror", "mirrored");
}

/* The KV cache split by head into node parts (as --numa distribute lays it
 * out on a multi-node machine), planned here on a synthetic two-node
 * topology: the same logits, bit for bit, for prompt chunks and decode. */
Test(model, numa_split_kv_cache_gives_the_same_logits) {
    expect_same_logits_with(synthetic_600("kvsplit.gguf", PLUMB_TYPE_Q4_K, 8, 4, 5), "PLUMB_KV_SPLIT", "numa:2 core:1 pu:1", NULL, "split");
}

/* synthetic_600 with the Qwen2 shape's biases on q, k and v */
static const char *synthetic_600_bias(const char *file, uint32_t type, uint64_t seed) {
    plumb_synth_params sp = {.shape = {.name = "t", .n_embd = 256, .n_layer = 2, .n_head = 8, .n_head_kv = 2, .n_ff = 512, .n_vocab = 600,
                                       .n_ctx = 128, .rope_freq_base = 10000.f, .qkv_bias = 1, .arch = "qwen2"},
                             .type = type, .seed = seed};
    const char *out = tmp_path(file);
    cr_assert_eq(plumb_make_synthetic(&sp, out), 0, "%s", plumb_last_error());
    return out;
}

/* A decode step run in one parallel region (the team pass: residual adds
 * folded into the next product's prologue, the small steps split between
 * threads, spin barriers) gives the region-per-product loop's logits bit for
 * bit: both activation forms (Q4_0/Q8_0 blocks of 32, K-quants' of 256),
 * grouped-query heads, q/k/v biases with NEOX RoPE, and 2 threads or 7
 * (uneven parts, more threads than this machine's cores: the barrier's
 * waiters must yield). */
Test(model, token_region_gives_the_same_logits) {
    const uint32_t types[] = {PLUMB_TYPE_Q4_0, PLUMB_TYPE_Q4_K, PLUMB_TYPE_Q8_0, PLUMB_TYPE_Q6_K};
    for (int i = 0; i < 5; i++) {
        const char *path = i < 4 ? synthetic_600("region.gguf", types[i], 8, i % 2 ? 2 : 8, 20 + i) : synthetic_600_bias("region.gguf", PLUMB_TYPE_Q5_K, 7);
        for (int threads = 2; threads <= 7; threads += 5) {
            float ref[2][600], got[2][600];
            plumb_ctx_params cp = plumb_ctx_default_params();
            cp.n_threads = threads;
            prompt_and_decode(path, &cp, got);
            setenv("PLUMB_TOKEN_REGION", "0", 1);
            prompt_and_decode(path, &cp, ref);
            unsetenv("PLUMB_TOKEN_REGION");
            expect_same_logits(got, ref, "token region");
        }
        remove(path);
    }
}

/* Partial offload through a stand-in plugin (tests/mock_backend.c: its
 * "layers" map the hidden states elementwise): the host's layers, the
 * hand-over of x and the host's head after the device's layer give the
 * same logits whether the host's decode step runs in one parallel region or
 * a region per product, and the device's layer changed them. */
Test(model, partial_offload_host_side) {
    const char *mock = getenv("PLUMB_MOCK_BACKEND");
    if (!mock || access(mock, R_OK)) cr_skip_test("needs PLUMB_MOCK_BACKEND, the stand-in plugin `make test` builds");
    setenv("PLUMB_CUDA_PLUGIN", mock, 1);
    const char *path = synthetic_600("offload.gguf", PLUMB_TYPE_Q4_0, 8, 2, 31);
    float cpu[2][600], got[2][600], ref[2][600];
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_threads = 2;
    prompt_and_decode(path, &cp, cpu);
    cp.n_gpu_layers = 1;
    prompt_and_decode(path, &cp, got);
    setenv("PLUMB_TOKEN_REGION", "0", 1);
    prompt_and_decode(path, &cp, ref);
    unsetenv("PLUMB_TOKEN_REGION");
    expect_same_logits(got, ref, "one region, partial offload");
    int differ = 0;
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 600; v++) differ |= got[k][v] != cpu[k][v];
    cr_assert(differ, "the stand-in device's layer changed no logit: was the plugin loaded?");
    remove(path);
}

/* Single-token products with threads stealing each other's rows give the
 * static split's logits bit for bit: every 8-row group is computed once, by
 * the same kernel, whichever thread takes it. 7 threads (uneven shares) on
 * this 2-core machine: some are descheduled mid-loop and the others steal. */
Test(model, row_stealing_gives_the_same_logits) {
    float ref[2][600], got[2][600];
    for (int t = 0; t < 2; t++) {
        const char *path = synthetic_600("steal.gguf", t ? PLUMB_TYPE_Q4_K : PLUMB_TYPE_Q4_0, 8, 4, 11);
        plumb_ctx_params cp = plumb_ctx_default_params();
        cp.n_threads = 7;
        plumb_matmul_set_row_steal(0);
        prompt_and_decode(path, &cp, ref);
        plumb_matmul_set_row_steal(1);
        prompt_and_decode(path, &cp, got);
        expect_same_logits(got, ref, t ? "Q4_K stealing" : "Q4_0 stealing");
        remove(path);
    }
}
