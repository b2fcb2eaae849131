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

/* ---- bit-exactness against llama.cpp's llama-quantize ----
 * Expected hashes: SHA-256 over all tensor data (tensors in name order) of files written
 * by llama.cpp's llama-quantize --pure (build of 2025-02-20, c392e50) from
 * the same F32 inputs, measured by hand with `plumb info --hash`. */
#include "../core/gguf.h"
#include "../models/convert.h"

static void tensor_data_hash(const char *path, char hex[65]) {
    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", plumb_last_error());
    cr_assert_eq(gguf_tensor_data_sha256(f, hex), 0);
    gguf_close(f);
}

static void expect_quantized_hash(const char *f32_path, const char *type, const char *want) {
    char out[512], hex[65];
    snprintf(out, sizeof out, "%s", tmp_path(type));
    cr_assert_eq(plumb_quantize_file(f32_path, out, plumb_type_from_name(type), 0), 0, "%s", plumb_last_error());
    tensor_data_hash(out, hex);
    cr_expect_str_eq(hex, want, "%s differs from llama-quantize's output", type);
    remove(out);
}

Test(quant, q8_0_q4_0_q4_1_match_llama_cpp_on_trained_weights) {
    const char *src = shared_file("models/TinyStories-656K-Q8_0.gguf");
    REQUIRE_SHARED(src);
    char f32[512], hex[65];
    snprintf(f32, sizeof f32, "%s", tmp_path("ts-f32.gguf"));
    cr_assert_eq(plumb_quantize_file(src, f32, PLUMB_TYPE_F32, 0), 0, "%s", plumb_last_error());
    tensor_data_hash(f32, hex); /* the dequantized input llama.cpp was given */
    cr_assert_str_eq(hex, "3face4a6c17a1e701a36ffd84bdb8f8fd5ed0f6dcb2af13d831d605e674e9b4d", "F32 input changed");
    expect_quantized_hash(f32, "q8_0", "eefd5f95afeffcadb21a5b3d71718ba34c517b8120fd6cf9b8e59fec118c0684");
    expect_quantized_hash(f32, "q4_0", "e00a4a6ff1e44c220f26296299942c9f62d4e98869d3a5975abb8e3fc9e4ca83");
    expect_quantized_hash(f32, "q4_1", "df738bf702152a85a4f501c35186a4cfdfa4fe44ae6d0ad6010b5511ab954308");
    remove(f32);
}

Test(quant, k_quants_match_llama_cpp) {
    /* plumb mkmodel --shape custom --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab-size 512 --type f32 */
    plumb_synth_params sp = {.shape = {.name = "custom", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512,
                                       .n_vocab = 512, .n_ctx = 2048, .rope_freq_base = 10000.f, .arch = "llama"},
                             .type = PLUMB_TYPE_F32, .seed = 0};
    char f32[512], hex[65];
    snprintf(f32, sizeof f32, "%s", tmp_path("syn-f32.gguf"));
    cr_assert_eq(plumb_make_synthetic(&sp, f32), 0, "%s", plumb_last_error());
    tensor_data_hash(f32, hex);
    cr_assert_str_eq(hex, "52d34fb8cdf84d02406e7253bef15cefcaacbee4c55cf236607d1ac89fa8144d", "F32 input changed");
    expect_quantized_hash(f32, "q4_k", "d74ff72d94a1ffbd6bc2f0badf2cb605dcf38bcb3259d287e1b018ef27118585");
    expect_quantized_hash(f32, "q5_k", "6ccf51ca274ce6266269816e6efb47bf12a3d5f75df6364267eedbbca8ef6140");
    expect_quantized_hash(f32, "q6_k", "e841d8d61781c3001ff13a2ffba1cb0fe1051e3f15309b0e5741686156f962ad");
    remove(f32);
}
