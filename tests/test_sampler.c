/* Sampler tests on hand-made logits. */
#include <math.h>

#include "../include/plumb.h"
#include "../core/util.h"
#include "helpers.h"

static float logits[8] = {0.1f, 2.0f, 1.5f, -1.0f, 1.9f, 0.0f, -3.0f, 0.5f};

static plumb_sampler *make(float temp, int top_k, float top_p, float min_p, float rep, uint64_t seed) {
    plumb_sampler_params p = {.temp = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                              .repeat_penalty = rep, .repeat_last_n = 4, .seed = seed};
    plumb_sampler *s = plumb_sampler_new(&p, 8);
    cr_assert_not_null(s);
    return s;
}

Test(sampler, greedy_is_argmax) {
    plumb_sampler *s = make(0, 0, 1, 0, 1, 1);
    cr_expect_eq(plumb_sample(s, logits), 1);
    plumb_sampler_free(s);
}

/* is_greedy says exactly when plumb_sample is the argmax of the logits given */
Test(sampler, is_greedy_only_without_temperature_or_penalty) {
    plumb_sampler *g = make(0, 0, 1, 0, 1.0f, 1), *pen = make(0, 0, 1, 0, 1.3f, 1), *hot = make(0.8f, 40, 0.95f, 0.05f, 1.0f, 1);
    cr_expect(plumb_sampler_is_greedy(g));
    cr_expect(!plumb_sampler_is_greedy(pen), "a repetition penalty changes the logits first");
    cr_expect(!plumb_sampler_is_greedy(hot));
    plumb_sampler_accept(pen, 1); /* token 1 penalized: 2.0 / 1.3 < 1.9, so the penalized pick differs from the argmax */
    cr_expect_eq(plumb_sample(pen, logits), 4);
    cr_expect_eq(plumb_sample(g, logits), plumb_argmax(logits, 8));
    plumb_sampler_free(g);
    plumb_sampler_free(pen);
    plumb_sampler_free(hot);
}

Test(sampler, same_seed_same_tokens_other_seed_differs) {
    int a[64], b[64], c[64], differ = 0;
    plumb_sampler *s1 = make(1.0f, 0, 1, 0, 1, 42), *s2 = make(1.0f, 0, 1, 0, 1, 42), *s3 = make(1.0f, 0, 1, 0, 1, 43);
    for (int i = 0; i < 64; i++) {
        a[i] = plumb_sample(s1, logits);
        b[i] = plumb_sample(s2, logits);
        c[i] = plumb_sample(s3, logits);
        cr_expect_eq(a[i], b[i]);
        differ += a[i] != c[i];
    }
    cr_expect_gt(differ, 0, "another seed should give another sequence");
    plumb_sampler_free(s1);
    plumb_sampler_free(s2);
    plumb_sampler_free(s3);
}

Test(sampler, top_k_1_and_tiny_top_p_are_greedy) {
    plumb_sampler *k1 = make(1.5f, 1, 1, 0, 1, 7), *p0 = make(1.5f, 0, 0.01f, 0, 1, 7);
    for (int i = 0; i < 50; i++) {
        cr_expect_eq(plumb_sample(k1, logits), 1);
        cr_expect_eq(plumb_sample(p0, logits), 1);
    }
    plumb_sampler_free(k1);
    plumb_sampler_free(p0);
}

Test(sampler, top_k_limits_candidates) {
    plumb_sampler *s = make(5.0f, 3, 1, 0, 1, 9);
    int seen[8] = {0};
    for (int i = 0; i < 500; i++) seen[plumb_sample(s, logits)]++;
    /* top 3 logits: ids 1 (2.0), 4 (1.9), 2 (1.5) */
    for (int v = 0; v < 8; v++) {
        if (v == 1 || v == 4 || v == 2) cr_expect_gt(seen[v], 0, "id %d never drawn", v);
        else cr_expect_eq(seen[v], 0, "id %d outside top-k drawn", v);
    }
    plumb_sampler_free(s);
}

Test(sampler, min_p_drops_unlikely) {
    /* at temp 1, p(id 6) / p(id 1) = e^-5 < 0.05 */
    plumb_sampler *s = make(1.0f, 0, 1, 0.05f, 1, 3);
    for (int i = 0; i < 2000; i++) cr_expect_neq(plumb_sample(s, logits), 6);
    plumb_sampler_free(s);
}

Test(sampler, frequencies_follow_softmax) {
    plumb_sampler *s = make(1.0f, 0, 1, 0, 1, 11);
    int n = 20000, seen[8] = {0};
    for (int i = 0; i < n; i++) seen[plumb_sample(s, logits)]++;
    double z = 0;
    for (int v = 0; v < 8; v++) z += exp(logits[v]);
    for (int v = 0; v < 8; v++) {
        double p = exp(logits[v]) / z, f = (double)seen[v] / n;
        cr_expect_lt(fabs(f - p), 0.02, "id %d: frequency %.3f vs probability %.3f", v, f, p);
    }
    plumb_sampler_free(s);
}

Test(sampler, repetition_penalty_moves_greedy) {
    plumb_sampler *s = make(0, 0, 1, 0, 1.5f, 1);
    plumb_sampler_accept(s, 1); /* 2.0 / 1.5 = 1.33 < 1.9 */
    cr_expect_eq(plumb_sample(s, logits), 4);
    plumb_sampler_free(s);
}

/* plumb_argmax against the one-pass loop it replaces, over lengths around
 * its 16-lane blocks, with ties (the first wins), NaNs (never picked) and
 * all-equal rows. */
Test(sampler, argmax_matches_reference) {
    plumb_rng rng;
    plumb_rng_seed(&rng, 3);
    for (int n = 1; n <= 70; n++)
        for (int trial = 0; trial < 20; trial++) {
            float x[70];
            for (int i = 0; i < n; i++) x[i] = (float)(int)(plumb_rng_f32(&rng) * 8) - 4; /* few values: many ties */
            if (trial % 5 == 4) x[(int)(plumb_rng_f32(&rng) * n)] = NAN;
            int want = -1;
            for (int i = 0; i < n; i++)
                if (!isnan(x[i]) && (want < 0 || x[i] > x[want])) want = i;
            if (want < 0) want = 0;
            cr_assert_eq(plumb_argmax(x, n), want, "n %d trial %d: %d vs %d", n, trial, plumb_argmax(x, n), want);
        }
    float same[33];
    for (int i = 0; i < 33; i++) same[i] = 1.5f;
    cr_expect_eq(plumb_argmax(same, 33), 0);
    float only_nan[3] = {NAN, NAN, NAN};
    cr_expect_eq(plumb_argmax(only_nan, 3), 0);
}
