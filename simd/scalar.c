/* scalar.c — portable reference kernels. These define the right answer; the
 * SIMD tables must agree with them (tests/test_kernels.c). */
#include <math.h>

#include "../core/util.h"
#include "kernels.h"

static float dot_f32(int n, const float *a, const float *b) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f32_w(int n, const void *w, const void *x) { return dot_f32(n, w, x); }

static void attend(int hd, int len, const float *q, const float *const *k, const float *const *v, float scale, float *att, float *out) {
    float max = -INFINITY, sum = 0;
    for (int p = 0; p < len; p++) {
        att[p] = dot_f32(hd, q, k[p]) * scale;
        if (att[p] > max) max = att[p];
    }
    for (int p = 0; p < len; p++) sum += att[p] = expf(att[p] - max);
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int p = 0; p < len; p++)
        for (int i = 0; i < hd; i++) out[i] += att[p] * v[p][i];
    for (int i = 0; i < hd; i++) out[i] /= sum;
}

static float dot_f16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    float s = 0;
    for (int i = 0; i < n; i++) s += plumb_fp16_to_fp32(w[i]) * x[i];
    return s;
}

static float dot_bf16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    float s = 0;
    for (int i = 0; i < n; i++) s += plumb_bf16_to_fp32(w[i]) * x[i];
    return s;
}

static void dot8_q8_0(int n, const void *w, const void *a, float *out) { plumb_dot8_ref(PLUMB_TYPE_Q8_0, n, w, a, out); }
static void dot8_q4_0(int n, const void *w, const void *a, float *out) { plumb_dot8_ref(PLUMB_TYPE_Q4_0, n, w, a, out); }

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = plumb_fp16_to_fp32(x[i]);
}

void plumb_silu_mul_ref(int64_t n, const float *gate, const float *up, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static const plumb_kernels scalar = {
    .name = "scalar",
    .dot_f32 = dot_f32,
    .attend = attend,
    .dot = {
        [PLUMB_TYPE_F32] = dot_f32_w,
        [PLUMB_TYPE_F16] = dot_f16_w,
        [PLUMB_TYPE_BF16] = dot_bf16_w,
        [PLUMB_TYPE_Q8_0] = plumb_dot_q8_0_q8a_ref,
        [PLUMB_TYPE_Q4_0] = plumb_dot_q4_0_q8a_ref,
        [PLUMB_TYPE_Q4_1] = plumb_dot_q4_1_q8a_ref,
        [PLUMB_TYPE_Q4_K] = plumb_dot_q4_K_q8K_ref,
        [PLUMB_TYPE_Q5_K] = plumb_dot_q5_K_q8K_ref,
        [PLUMB_TYPE_Q6_K] = plumb_dot_q6_K_q8K_ref,
    },
    /* the reference for the repacked kernels; too slow to be chosen for real use */
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0, [PLUMB_TYPE_Q4_0] = dot8_q4_0},
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = plumb_quantize_q8a,
    .quantize_q8K = plumb_quantize_q8_K,
    .silu_mul = plumb_silu_mul_ref,
};

const plumb_kernels *plumb_kernels_scalar(void) { return &scalar; }
