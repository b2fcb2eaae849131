/* Quantization format tests: half/bfloat conversion, and for every type a
 * quantize -> dequantize round trip within the format's error bound. */
#include <math.h>

#include "../core/util.h"
#include "../quant/quant.h"
#include "helpers.h"

Test(quant, fp16_round_trip_is_exact_for_every_half) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = plumb_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        cr_assert_eq(plumb_fp32_to_fp16(f), h, "half 0x%04x -> %g -> 0x%04x", h, f, plumb_fp32_to_fp16(f));
    }
}

Test(quant, fp16_rounds_to_nearest_even) {
    cr_expect_eq(plumb_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* halfway, even stays */
    cr_expect_eq(plumb_fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02); /* halfway, rounds up to even */
    cr_expect_eq(plumb_fp32_to_fp16(70000.0f), 0x7c00);
    cr_expect_eq(plumb_fp32_to_fp16(-1e-8f), 0x8000);
    cr_expect_eq(plumb_fp32_to_fp16(6e-8f), 0x0001);              /* smallest subnormal */
}

Test(quant, bf16_conversion) {
    cr_expect_eq(plumb_fp32_to_bf16(1.0f), 0x3f80);
    cr_expect_float_eq(plumb_bf16_to_fp32(0x4049), 3.140625f, 0);
    cr_expect_eq(plumb_fp32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie to even */
}

/* relative RMS error bound per type on N(0,1)-like data */
static void round_trip(uint32_t type, double max_rel_rms) {
    const plumb_type_traits *t = plumb_type_get(type);
    cr_assert_not_null(t);
    const int n = 4096;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *q = malloc(plumb_type_row_bytes(type, n));
    plumb_rng r;
    plumb_rng_seed(&r, 123);
    for (int i = 0; i < n; i++) x[i] = (plumb_rng_f32(&r) + plumb_rng_f32(&r) + plumb_rng_f32(&r) - 1.5f) * 2;
    x[17] = 9.0f; /* an outlier */
    t->from_float(x, q, n);
    t->to_float(q, y, n);
    double err = 0, ref = 0;
    for (int i = 0; i < n; i++) {
        err += (x[i] - y[i]) * (x[i] - y[i]);
        ref += x[i] * x[i];
    }
    double rel = sqrt(err / ref);
    cr_expect_lt(rel, max_rel_rms, "%s: relative RMS error %.5f", t->name, rel);
    /* quantizing the dequantized values again must be stable */
    uint8_t *q2 = malloc(plumb_type_row_bytes(type, n));
    t->from_float(y, q2, n);
    float *z = malloc(sizeof(float) * n);
    t->to_float(q2, z, n);
    double drift = 0;
    for (int i = 0; i < n; i++) drift = fmax(drift, fabs(z[i] - y[i]));
    cr_expect_lt(drift, 0.05, "%s: re-quantization drift %.4f", t->name, drift);
    free(x); free(y); free(q); free(q2); free(z);
}

Test(quant, round_trips) {
    round_trip(PLUMB_TYPE_F16, 1e-3);
    round_trip(PLUMB_TYPE_BF16, 5e-3);
    round_trip(PLUMB_TYPE_Q8_0, 0.01);
    round_trip(PLUMB_TYPE_Q6_K, 0.03);
    round_trip(PLUMB_TYPE_Q5_K, 0.05);
    round_trip(PLUMB_TYPE_Q4_K, 0.10);
    round_trip(PLUMB_TYPE_Q4_1, 0.12);
    round_trip(PLUMB_TYPE_Q4_0, 0.15);
}

Test(quant, q4_0_known_block) {
    /* max |x| = 16 at x[31] = -16 -> d = 2, value = (q - 8) * 2 */
    float x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    block_q4_0 b;
    plumb_type_get(PLUMB_TYPE_Q4_0)->from_float(x, &b, 32);
    cr_expect_float_eq(plumb_fp16_to_fp32(b.d), 2.0f, 0);
    plumb_type_get(PLUMB_TYPE_Q4_0)->to_float(&b, y, 32);
    cr_expect_float_eq(y[0], -16.0f, 0);
    cr_expect_float_eq(y[1], -14.0f, 0); /* -15 rounds half-up in units of 2: (-7.5+8.5)=1 -> -14 */
    cr_expect_float_eq(y[30], 14.0f, 0); /* 14 / 2 = 7 -> q = 15 */
}

Test(quant, type_names_and_sizes) {
    cr_expect_eq(plumb_type_from_name("q4_k"), PLUMB_TYPE_Q4_K);
    cr_expect_eq(plumb_type_from_name("Q8_0"), PLUMB_TYPE_Q8_0);
    cr_expect_eq(plumb_type_from_name("nope"), -1);
    cr_expect_eq(sizeof(block_q4_0), 18);
    cr_expect_eq(sizeof(block_q4_1), 20);
    cr_expect_eq(sizeof(block_q8_0), 34);
    cr_expect_eq(sizeof(block_q4_K), 144);
    cr_expect_eq(sizeof(block_q5_K), 176);
    cr_expect_eq(sizeof(block_q6_K), 210);
    cr_expect_eq(plumb_type_row_bytes(PLUMB_TYPE_Q4_K, 4096), 16 * 144);
    cr_expect_eq(plumb_type_row_bytes(PLUMB_TYPE_Q4_K, 100), 0, "not a whole number of blocks");
    cr_expect_null(plumb_type_get(4), "ggml's removed Q4_2 id is unknown");
}
