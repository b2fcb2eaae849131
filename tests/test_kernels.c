/* Every compiled-in kernel table against the scalar reference. */
#include "helpers.h"
#include "kernel_cases.h"

static void check(const plumb_kernels *k) {
    kc_result r = kernel_check_table(k);
    fprintf(stderr, "kernels %s: %d checks passed, %d failed\n", k->name, r.passed, r.failed);
    cr_expect_eq(r.failed, 0, "%s: %d kernel checks failed (see stderr)", k->name, r.failed);
    cr_expect_gt(r.passed, 50);
}

Test(kernels, scalar_is_self_consistent) { check(plumb_kernels_scalar()); }

Test(kernels, avx2_matches_scalar) {
    if (plumb_kernels_select("avx2") != 0) cr_skip_test("AVX2/FMA/F16C not available: %s", plumb_last_error());
    check(plumb_kernels_avx2());
}

Test(kernels, avx2_vnni_matches_scalar) {
    if (plumb_kernels_select("avx2-vnni") != 0) cr_skip_test("AVX-VNNI not available: %s", plumb_last_error());
    check(plumb_kernels_avx2_vnni());
}

Test(kernels, avx512_vnni_matches_scalar) {
    if (plumb_kernels_select("avx512-vnni") != 0) cr_skip_test("AVX-512 VNNI not available: %s", plumb_last_error());
    check(plumb_kernels_avx512_vnni());
}

Test(kernels, neon_matches_scalar) {
    if (!plumb_kernels_neon()) cr_skip_test("not an aarch64 build (make neon-test runs these under qemu)");
    check(plumb_kernels_neon());
}

Test(kernels, neon_dotprod_matches_scalar) {
    if (!plumb_kernels_neon_dotprod()) cr_skip_test("not an aarch64 build (make neon-test runs these under qemu)");
    if (plumb_kernels_select("neon-dotprod") != 0) cr_skip_test("no dot-product instruction: %s", plumb_last_error());
    check(plumb_kernels_neon_dotprod());
}

Test(kernels, select_rejects_unknown) {
    cr_expect_neq(plumb_kernels_select("sse9"), 0);
    cr_expect(strstr(plumb_last_error(), "unknown kernel set") != NULL);
}

/* The matmul driver: exact and int8 paths, batch of tokens, against a plain loop. */
Test(kernels, matmul_driver) {
    const int rows = 37, cols = 512, n_tok = 3;
    const uint32_t types[] = {PLUMB_TYPE_F16, PLUMB_TYPE_Q8_0, PLUMB_TYPE_Q4_K};
    plumb_rng rng;
    plumb_rng_seed(&rng, 5);
    for (int ti = 0; ti < 3; ti++) {
        const plumb_type_traits *t = plumb_type_get(types[ti]);
        size_t rb = plumb_type_row_bytes(types[ti], cols);
        uint8_t *w = malloc(rb * rows);
        float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n_tok * cols);
        float *y = malloc(sizeof(float) * n_tok * rows), *ye = malloc(sizeof(float) * n_tok * rows);
        kc_random(wf, rows * cols, &rng, 0.1f);
        kc_random(x, n_tok * cols, &rng, 1.0f);
        for (int r = 0; r < rows; r++) t->from_float(wf + r * cols, w + r * rb, cols);
        for (int r = 0; r < rows; r++) t->to_float(w + r * rb, wf + r * cols, cols);
        plumb_matrix m = {types[ti], rows, cols, rb, w, "w", NULL, 0, {NULL}};
        void *act = malloc(plumb_matmul_act_bytes(types[ti], cols, n_tok) + 1);
        plumb_matmul(&m, x, n_tok, y, act, 0);
        plumb_matmul(&m, x, n_tok, ye, act, 1);
        for (int tk = 0; tk < n_tok; tk++)
            for (int r = 0; r < rows; r++) {
                double ref = 0, abs_sum = 0;
                for (int c = 0; c < cols; c++) {
                    ref += (double)wf[r * cols + c] * x[tk * cols + c];
                    abs_sum += fabs((double)wf[r * cols + c] * x[tk * cols + c]);
                }
                cr_expect(kc_close(ye[tk * rows + r], ref, abs_sum), "%s exact [%d][%d]: %g vs %g", t->name, tk, r, ye[tk * rows + r], ref);
                /* int8 activations: error of 8-bit rounding, ~1% of the magnitude */
                cr_expect(fabs(y[tk * rows + r] - ref) <= 0.02 * abs_sum + 1e-4, "%s int8 [%d][%d]: %g vs %g", t->name, tk, r, y[tk * rows + r], ref);
            }
        free(w); free(wf); free(x); free(y); free(ye); free(act);
    }
}

/* The fused multi-matrix product equals separate products. */
Test(kernels, matmul_n_equals_separate) {
    const int cols = 512, rows[3] = {64, 16, 16};
    plumb_rng rng;
    plumb_rng_seed(&rng, 9);
    const uint32_t types[2] = {PLUMB_TYPE_Q4_0, PLUMB_TYPE_F16};
    for (int ti = 0; ti < 2; ti++) {
        const plumb_type_traits *t = plumb_type_get(types[ti]);
        const size_t rb = plumb_type_row_bytes(types[ti], cols);
        plumb_matrix m[3];
        uint8_t *w[3];
        float *x = malloc(sizeof(float) * cols), *row = malloc(sizeof(float) * cols);
        kc_random(x, cols, &rng, 1.0f);
        float *ya[3], *yb[3];
        for (int i = 0; i < 3; i++) {
            w[i] = malloc(rb * (size_t)rows[i]);
            for (int r = 0; r < rows[i]; r++) { kc_random(row, cols, &rng, 0.1f); t->from_float(row, w[i] + (size_t)r * rb, cols); }
            m[i] = (plumb_matrix){types[ti], rows[i], cols, rb, w[i], "m", NULL, 0, {NULL}};
            plumb_matrix_repack(&m[i]);
            ya[i] = calloc((size_t)rows[i], sizeof(float));
            yb[i] = calloc((size_t)rows[i], sizeof(float));
        }
        void *act = malloc(plumb_matmul_act_bytes(PLUMB_TYPE_Q4_0, cols, 1) + 64);
        const plumb_matrix *mp[3] = {&m[0], &m[1], &m[2]};
        plumb_matmul_n(mp, 3, x, 1, ya, act, 0);
        for (int i = 0; i < 3; i++) plumb_matmul(&m[i], x, 1, yb[i], act, 0);
        for (int i = 0; i < 3; i++)
            for (int r = 0; r < rows[i]; r++) cr_expect_float_eq(ya[i][r], yb[i][r], 1e-6f, "%s matrix %d row %d", t->name, i, r);
        for (int i = 0; i < 3; i++) { plumb_dealloc((void *)m[i].packed); free(w[i]); free(ya[i]); free(yb[i]); }
        free(x); free(row); free(act);
    }
}

/* The SwiGLU product equals the two products followed by silu(g) * u, one
 * token over repacked weights (side by side per row group) and three tokens
 * (separate products). */
Test(kernels, matmul_swiglu_equals_products_then_silu) {
    const int cols = 256, rows = 48;
    plumb_rng rng;
    plumb_rng_seed(&rng, 11);
    const uint32_t types[2] = {PLUMB_TYPE_Q4_0, PLUMB_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++)
        for (int n_tok = 1; n_tok <= 3; n_tok += 2) {
            const plumb_type_traits *t = plumb_type_get(types[ti]);
            const size_t rb = plumb_type_row_bytes(types[ti], cols);
            plumb_matrix m[2];
            uint8_t *w[2];
            float *x = malloc(sizeof(float) * cols * n_tok), *row = malloc(sizeof(float) * cols);
            kc_random(x, cols * n_tok, &rng, 1.0f);
            for (int i = 0; i < 2; i++) {
                w[i] = malloc(rb * rows);
                for (int r = 0; r < rows; r++) { kc_random(row, cols, &rng, 0.3f); t->from_float(row, w[i] + (size_t)r * rb, cols); }
                m[i] = (plumb_matrix){types[ti], rows, cols, rb, w[i], "m", NULL, 0, {NULL}};
                plumb_matrix_repack(&m[i]);
            }
            float *out = calloc((size_t)rows * n_tok, sizeof(float)), *scratch = calloc((size_t)rows * n_tok, sizeof(float));
            float *g = calloc((size_t)rows * n_tok, sizeof(float)), *u = calloc((size_t)rows * n_tok, sizeof(float));
            void *act = malloc(plumb_matmul_act_bytes(types[ti], cols, n_tok) + 64);
            plumb_matmul_swiglu(&m[0], &m[1], x, n_tok, out, scratch, act, 0);
            plumb_matmul(&m[0], x, n_tok, g, act, 0);
            plumb_matmul(&m[1], x, n_tok, u, act, 0);
            int nonzero = 0;
            for (int i = 0; i < rows * n_tok; i++) {
                const float want = g[i] / (1.0f + expf(-g[i])) * u[i];
                cr_expect_float_eq(out[i], want, 1e-5f * (1 + fabsf(want)), "%s n_tok %d [%d]: %g vs %g", t->name, n_tok, i, out[i], want);
                nonzero += out[i] != 0;
            }
            cr_expect_gt(nonzero, rows * n_tok / 2, "%s: the outputs are mostly zero", t->name);
            for (int i = 0; i < 2; i++) { plumb_dealloc((void *)m[i].packed); free(w[i]); }
            free(x); free(row); free(out); free(scratch); free(g); free(u); free(act);
        }
}

/* Repacking a matrix the caller allocated leaves its bytes as they were (the
 * pages are given back only on request, for file mappings), so the exact
 * path over W->data still reads the weights. */
Test(kernels, repack_keeps_caller_memory) {
    const int rows = 64, cols = 2048;
    const size_t rb = plumb_type_row_bytes(PLUMB_TYPE_Q8_0, cols), bytes = rb * rows; /* ~136 KiB: many pages */
    uint8_t *w = malloc(bytes), *copy = malloc(bytes);
    float *row = malloc(sizeof(float) * cols);
    plumb_rng rng;
    plumb_rng_seed(&rng, 5);
    for (int r = 0; r < rows; r++) { kc_random(row, cols, &rng, 0.2f); plumb_type_get(PLUMB_TYPE_Q8_0)->from_float(row, w + (size_t)r * rb, cols); }
    memcpy(copy, w, bytes);
    plumb_matrix m = {PLUMB_TYPE_Q8_0, rows, cols, rb, w, "m", NULL, 0, {NULL}};
    cr_assert_eq(plumb_matrix_repack(&m), 0);
    if (!m.packed) cr_skip_test("the active kernel set (%s) keeps no repacked copy", plumb_kernels_active()->name);
    cr_expect(memcmp(w, copy, bytes) == 0, "plumb_matrix_repack changed the caller's weights");
    plumb_dealloc((void *)m.packed);
    free(w); free(copy); free(row);
}

/* One token over repacked weights read as 1, 2, 3 or 4 runs at once
 * (PLUMB_WEIGHT_RUNS): the same rows, up to the order of the float sums.
 * Row lengths give several slices with a short last one (Q8_0: 47 blocks in
 * slices of 15), and 11 groups leave groups over after the runs' halves. */
Test(kernels, matmul_weight_runs_agree) {
    const uint32_t types[] = {PLUMB_TYPE_Q8_0, PLUMB_TYPE_Q4_0, PLUMB_TYPE_Q4_1, PLUMB_TYPE_Q4_K, PLUMB_TYPE_Q5_K, PLUMB_TYPE_Q6_K};
    const int rows = 88;
    plumb_rng rng;
    plumb_rng_seed(&rng, 13);
    for (int ti = 0; ti < 6; ti++) {
        const plumb_type_traits *t = plumb_type_get(types[ti]);
        const int cols = t->block_size == 32 ? 32 * 47 : 256 * 7;
        const size_t rb = plumb_type_row_bytes(types[ti], cols);
        uint8_t *w[2] = {malloc(rb * rows), malloc(rb * rows)};
        float *x = malloc(sizeof(float) * cols), *row = malloc(sizeof(float) * cols);
        kc_random(x, cols, &rng, 1.0f);
        plumb_matrix m[2];
        for (int i = 0; i < 2; i++) {
            for (int r = 0; r < rows; r++) { kc_random(row, cols, &rng, 0.2f); t->from_float(row, w[i] + (size_t)r * rb, cols); }
            m[i] = (plumb_matrix){types[ti], rows, cols, rb, w[i], "m", NULL, 0, {NULL}};
            plumb_matrix_repack(&m[i]);
        }
        if (!m[0].packed) cr_skip_test("the active kernel set (%s) keeps no repacked copy", plumb_kernels_active()->name);
        void *act = malloc(plumb_matmul_act_bytes(types[ti], cols, 1) + 64);
        float y[4][2][88], sw[4][88], scratch[88];
        for (int runs = 1; runs <= 4; runs++) {
            char v[2] = {(char)('0' + runs), 0};
            setenv("PLUMB_WEIGHT_RUNS", v, 1);
            const plumb_matrix *mp[2] = {&m[0], &m[1]};
            float *ys[2] = {y[runs - 1][0], y[runs - 1][1]};
            plumb_matmul_n(mp, 2, x, 1, ys, act, 0);
            plumb_matmul_swiglu(&m[0], &m[1], x, 1, sw[runs - 1], scratch, act, 0);
        }
        unsetenv("PLUMB_WEIGHT_RUNS");
        for (int runs = 2; runs <= 4; runs++)
            for (int r = 0; r < rows; r++) {
                for (int i = 0; i < 2; i++) {
                    const float want = y[0][i][r], got = y[runs - 1][i][r];
                    cr_expect_float_eq(got, want, 1e-5f * (1 + fabsf(want)), "%s %d runs matrix %d row %d: %g vs %g", t->name, runs, i, r, got, want);
                }
                cr_expect_float_eq(sw[runs - 1][r], sw[0][r], 1e-5f * (1 + fabsf(sw[0][r])), "%s %d runs swiglu row %d", t->name, runs, r);
            }
        for (int i = 0; i < 2; i++) { plumb_dealloc((void *)m[i].packed); free(w[i]); }
        free(x); free(row); free(act);
    }
}
