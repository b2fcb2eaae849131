/* neon.c — NEON kernels for aarch64 (Apple Silicon, Graviton, Raspberry Pi).
 * Scalar twins: scalar.c and quant.c. */
#include "kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>

#include "../core/util.h"

static float dot_f32(int n, const float *a, const float *b) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), s2 = vdupq_n_f32(0), s3 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f32_w(int n, const void *w, const void *x) { return dot_f32(n, w, x); }

/* att[0..len) = e^(att - max), summed in order; returns 1 / the sum */
static inline float softmax_exp(float *att, int len) {
    float max = -INFINITY, sum = 0;
    for (int p = 0; p < len; p++) max = att[p] > max ? att[p] : max;
    for (int p = 0; p < len; p++) sum += att[p] = expf(att[p] - max);
    return 1.0f / sum;
}

/* Values of NH (1, 2 or 4) heads, columns [i, i + 16): four registers a
 * head, each column summed over the positions in order (one fused
 * multiply-add a position), whatever NH is. */
#define NEON_VALUES16(NH)                                                                                                      \
    static inline void values_##NH##x16(int len, int hd, const float *att, const float *const *v, int i, const float *inv,  \
                                        float *out) {                                                                          \
        float32x4_t o[NH][4];                                                                                                  \
        for (int h = 0; h < NH; h++) o[h][0] = o[h][1] = o[h][2] = o[h][3] = vdupq_n_f32(0);                                   \
        for (int p = 0; p < len; p++) {                                                                                        \
            const float *vp = v[p] + i;                                                                                        \
            const float32x4_t v0 = vld1q_f32(vp), v1 = vld1q_f32(vp + 4), v2 = vld1q_f32(vp + 8), v3 = vld1q_f32(vp + 12);     \
            for (int h = 0; h < NH; h++) {                                                                                     \
                const float a = att[(size_t)h * len + p];                                                                      \
                o[h][0] = vfmaq_n_f32(o[h][0], v0, a), o[h][1] = vfmaq_n_f32(o[h][1], v1, a);                                  \
                o[h][2] = vfmaq_n_f32(o[h][2], v2, a), o[h][3] = vfmaq_n_f32(o[h][3], v3, a);                                  \
            }                                                                                                                  \
        }                                                                                                                      \
        for (int h = 0; h < NH; h++) {                                                                                         \
            float *oh = out + (size_t)h * hd + i;                                                                              \
            vst1q_f32(oh, vmulq_n_f32(o[h][0], inv[h])), vst1q_f32(oh + 4, vmulq_n_f32(o[h][1], inv[h]));                      \
            vst1q_f32(oh + 8, vmulq_n_f32(o[h][2], inv[h])), vst1q_f32(oh + 12, vmulq_n_f32(o[h][3], inv[h]));                 \
        }                                                                                                                      \
    }
NEON_VALUES16(1)
NEON_VALUES16(2)
NEON_VALUES16(4)
#undef NEON_VALUES16

/* The weighted values of nh (1, 2 or 4) heads whose probabilities att holds
 * (nh x len, unnormalized; inv: 1 / each head's sum): out nh x hd */
static void values_heads(int hd, int len, int nh, const float *att, const float *const *v, const float *inv, float *out) {
    int i0 = 0;
    for (; i0 + 16 <= hd; i0 += 16)
        if (nh == 4) values_4x16(len, hd, att, v, i0, inv, out);
        else if (nh == 2) values_2x16(len, hd, att, v, i0, inv, out);
        else values_1x16(len, hd, att, v, i0, inv, out);
    for (int h = 0; h < nh; h++)
        for (int i = i0; i < hd; i++) { /* head sizes that are not a multiple of 16 */
            float s = 0;
            for (int p = 0; p < len; p++) s += att[(size_t)h * len + p] * v[p][i];
            out[(size_t)h * hd + i] = s * inv[h];
        }
}

/* Attention for one query head (scalar twin: scalar.c); the weighted sum of
 * values keeps 16 output floats in four registers across all positions. */
static void attend(int hd, int len, const float *q, const float *const *k, const float *const *v, float scale, float *att, float *out) {
    for (int p = 0; p < len; p++) att[p] = dot_f32(hd, q, k[p]) * scale;
    const float inv = softmax_exp(att, len);
    values_heads(hd, len, 1, att, v, &inv, out);
}

/* Query heads q[0..g) of one KV group against its cache at once (the AVX2
 * twin: avx2.c): each key row is read once for all g heads, each value row
 * once for four heads, instead of once a head; every float is computed as
 * attend computes it (the same scores, softmax_exp and values_heads), so the
 * results are attend's bit for bit. att: g x len, out: g x hd. */
#define GROUP_AHEAD 16 /* positions: the rows lie a KV row apart, which no hardware prefetcher follows */
static void attend_group(int hd, int len, int g, const float *q, const float *const *k, const float *const *v, float scale, float *att,
                         float *out) {
    for (int p = 0; p < len; p++) {
        if (p + GROUP_AHEAD < len)
            for (int i = 0; i < hd; i += 16) __builtin_prefetch(k[p + GROUP_AHEAD] + i, 0, 3), __builtin_prefetch(v[p + GROUP_AHEAD] + i, 0, 2);
        for (int h = 0; h < g; h++) att[(size_t)h * len + p] = dot_f32(hd, q + (size_t)h * hd, k[p]) * scale;
    }
    for (int h0 = 0; h0 < g;) {
        const int nh = g - h0 >= 4 ? 4 : g - h0 >= 2 ? 2 : 1;
        float inv[4];
        for (int h = 0; h < nh; h++) inv[h] = softmax_exp(att + (size_t)(h0 + h) * len, len);
        values_heads(hd, len, nh, att + (size_t)h0 * len, v, inv, out + (size_t)h0 * hd);
        h0 += nh;
    }
}

static float dot_f16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(w + i));
        s0 = vfmaq_f32(s0, vcvt_f32_f16(vget_low_f16(h)), vld1q_f32(x + i));
        s1 = vfmaq_f32(s1, vcvt_f32_f16(vget_high_f16(h)), vld1q_f32(x + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += plumb_fp16_to_fp32(w[i]) * x[i];
    return s;
}

static float dot_bf16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(w + i);
        float32x4_t w0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        float32x4_t w1 = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h), 16));
        s0 = vfmaq_f32(s0, w0, vld1q_f32(x + i));
        s1 = vfmaq_f32(s1, w1, vld1q_f32(x + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += plumb_bf16_to_fp32(w[i]) * x[i];
    return s;
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
    for (; i < n; i++) y[i] = plumb_fp16_to_fp32(x[i]);
}

static volatile int32_t neon_peak_sink; /* where the compute ceilings' sums go */

/* the f32 compute ceiling (plumb_kernels.f32_peak): vfmaq_f32 on 16 accumulators */
static int64_t f32_peak(int64_t rounds) {
    enum { ACCS = 16 };
    float32x4_t acc[ACCS], a = vdupq_n_f32(1e-9f), b = vdupq_n_f32(1.0f);
    #pragma GCC unroll 16
    for (int i = 0; i < ACCS; i++) acc[i] = vdupq_n_f32((float)i);
    for (int64_t r = 0; r < rounds; r++) {
        __asm__("" : "+w"(a), "+w"(b));
        #pragma GCC unroll 16
        for (int i = 0; i < ACCS; i++) acc[i] = vfmaq_f32(acc[i], a, b);
    }
    #pragma GCC unroll 16
    for (int i = 1; i < ACCS; i++) acc[0] = vaddq_f32(acc[0], acc[i]);
    neon_peak_sink = (int32_t)vaddvq_f32(acc[0]);
    return rounds * ACCS * 4;
}

/* the quantized dot products, baseline ARMv8 */
#define NQ(x) x##_neon
#define NQ_DOT16(acc, a, b) vpadalq_s16(vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b))), vmull_high_s8(a, b))
#include "neon_quant.inc"
#undef NQ
#undef NQ_DOT16

/* ... and with the dot-product instruction (run only where the CPU reports it) */
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#define NQ(x) x##_neon_dp
#define NQ_DOT16(acc, a, b) vdotq_s32(acc, a, b)
#include "neon_quant.inc"
#undef NQ
#undef NQ_DOT16
#pragma GCC pop_options

/* activation quantization is a small fraction of a matmul: the reference serves */
#define NEON_TABLE(NAME, SFX)                                                                                                         \
    {                                                                                                                                 \
        .name = NAME, .dot_f32 = dot_f32, .attend = attend, .attend_group = attend_group,                                               \
        .dot = {                                                                                                                      \
            [PLUMB_TYPE_F32] = dot_f32_w,                                                                                             \
            [PLUMB_TYPE_F16] = dot_f16_w,                                                                                             \
            [PLUMB_TYPE_BF16] = dot_bf16_w,                                                                                           \
            [PLUMB_TYPE_Q8_0] = dot_q8_0##SFX,                                                                                        \
            [PLUMB_TYPE_Q4_0] = dot_q4_0##SFX,                                                                                        \
            [PLUMB_TYPE_Q4_1] = dot_q4_1##SFX,                                                                                        \
            [PLUMB_TYPE_Q4_K] = dot_q4_K##SFX,                                                                                        \
            [PLUMB_TYPE_Q5_K] = dot_q5_K##SFX,                                                                                        \
            [PLUMB_TYPE_Q6_K] = dot_q6_K##SFX,                                                                                        \
        },                                                                                                                            \
        .f16_to_f32 = f16_to_f32, .quantize_q8a = plumb_quantize_q8a, .quantize_q8K = plumb_quantize_q8_K,                            \
        .silu_mul = plumb_silu_mul_ref, .int8_peak = int8_peak##SFX, .f32_peak = f32_peak,                                            \
    }

static const plumb_kernels neon = NEON_TABLE("neon", _neon);
static const plumb_kernels neon_dotprod = NEON_TABLE("neon-dotprod", _neon_dp);

const plumb_kernels *plumb_kernels_neon(void) { return &neon; }
const plumb_kernels *plumb_kernels_neon_dotprod(void) { return &neon_dotprod; }
#else
const plumb_kernels *plumb_kernels_neon(void) { return NULL; }
const plumb_kernels *plumb_kernels_neon_dotprod(void) { return NULL; }
#endif
