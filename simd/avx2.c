/* avx2.c — AVX2/FMA/F16C kernels. Compiled for generic x86-64 with these
 * functions alone targeting AVX2, and chosen at run time (matmul.c), so one
 * binary runs on any x86-64. Scalar twins: scalar.c and quant.c. */
#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../core/util.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))

TARGET static inline float hsum_ps(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

TARGET static float dot_f32(int n, const float *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TARGET static float dot_f32_w(int n, const void *w, const void *x) { return dot_f32(n, w, x); }

/* eight sums of eight vectors: lane j of the result is the sum of s[j] */
TARGET static inline __m256 hsum8_ps(__m256 s0, __m256 s1, __m256 s2, __m256 s3, __m256 s4, __m256 s5, __m256 s6, __m256 s7) {
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3)); /* 128-bit lanes: partial sums of s0..s3 */
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(s4, s5), _mm256_hadd_ps(s6, s7));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* e^x for eight floats, within 4e-7 (relative) of expf as the kernel case
 * checks it, over the range that matters (x in [-87.3, 88.7]; below, 0;
 * above, +inf): x = n ln2 + r with
 * |r| <= ln2/2 (ln2 in two parts, so r is exact enough), e^r by its degree-6
 * Taylor polynomial (Horner, FMA), times 2^n through the exponent bits. */
TARGET static inline __m256 exp8_ps(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7228f), lo = _mm256_set1_ps(-87.3365f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n as two factors: n reaches 128 at the top of the range, one past the largest exponent */
    const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23)),
                 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    p = _mm256_andnot_ps(under, p);
    return _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), over);
}

TARGET static void silu_mul(int64_t n, const float *gate, const float *up, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp8_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* Scores of one query head against eight cached keys: att[0..8) */
TARGET static inline void scores8(int hd, const float *q, const float *const *kp, float scale, float *att) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (int i = 0; i < hd; i += 8) {
        const __m256 qi = _mm256_loadu_ps(q + i);
        s0 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[0] + i), s0);
        s1 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[1] + i), s1);
        s2 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[2] + i), s2);
        s3 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[3] + i), s3);
        s4 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[4] + i), s4);
        s5 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[5] + i), s5);
        s6 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[6] + i), s6);
        s7 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(kp[7] + i), s7);
    }
    _mm256_storeu_ps(att, _mm256_mul_ps(hsum8_ps(s0, s1, s2, s3, s4, s5, s6, s7), _mm256_set1_ps(scale)));
}

/* att[0..len) = e^(att - max), returns 1 / their sum */
TARGET static inline float softmax_exp(float *att, int len) {
    float max = -INFINITY, sum = 0;
    for (int p = 0; p < len; p++) max = att[p] > max ? att[p] : max;
    int p = 0;
    if (len >= 8) {
        __m256 acc = _mm256_setzero_ps();
        const __m256 m = _mm256_set1_ps(max);
        for (; p + 8 <= len; p += 8) {
            const __m256 e = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(att + p), m));
            _mm256_storeu_ps(att + p, e);
            acc = _mm256_add_ps(acc, e);
        }
        sum = hsum_ps(acc);
    }
    for (; p < len; p++) sum += att[p] = expf(att[p] - max);
    return 1.0f / sum;
}

/* Attention for one query head (scalar twin: scalar.c). Scores come eight
 * positions at a time (one horizontal reduction per eight, not per
 * position); the weighted sum of values keeps 64 output floats in eight
 * registers across all positions. */
TARGET static void attend(int hd, int len, const float *q, const float *const *k, const float *const *v, float scale, float *att, float *out) {
    int p = 0;
    if (hd % 8 == 0)
        for (; p + 8 <= len; p += 8) scores8(hd, q, k + p, scale, att + p);
    for (; p < len; p++) att[p] = dot_f32(hd, q, k[p]) * scale;
    const float inv = softmax_exp(att, len);
    int i0 = 0;
    for (; i0 + 64 <= hd; i0 += 64) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0, o6 = o0, o7 = o0;
        for (p = 0; p < len; p++) {
            const __m256 a = _mm256_set1_ps(att[p]);
            const float *vp = v[p] + i0;
            o0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp), o0);
            o1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 8), o1);
            o2 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 16), o2);
            o3 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 24), o3);
            o4 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 32), o4);
            o5 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 40), o5);
            o6 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 48), o6);
            o7 = _mm256_fmadd_ps(a, _mm256_loadu_ps(vp + 56), o7);
        }
        const __m256 s = _mm256_set1_ps(inv);
        float *o = out + i0;
        _mm256_storeu_ps(o, _mm256_mul_ps(o0, s)); _mm256_storeu_ps(o + 8, _mm256_mul_ps(o1, s));
        _mm256_storeu_ps(o + 16, _mm256_mul_ps(o2, s)); _mm256_storeu_ps(o + 24, _mm256_mul_ps(o3, s));
        _mm256_storeu_ps(o + 32, _mm256_mul_ps(o4, s)); _mm256_storeu_ps(o + 40, _mm256_mul_ps(o5, s));
        _mm256_storeu_ps(o + 48, _mm256_mul_ps(o6, s)); _mm256_storeu_ps(o + 56, _mm256_mul_ps(o7, s));
    }
    for (int i = i0; i < hd; i++) { /* head sizes that are not a multiple of 64 */
        float o = 0;
        for (p = 0; p < len; p++) o += att[p] * v[p][i];
        out[i] = o * inv;
    }
}

/* Values for two heads of a group, columns [i, i + 32): eight registers
 * of sums, each summed over the positions in the order attend sums them. */
TARGET static inline void values_2x32(int len, const float *a0, const float *a1, const float *const *v, int i, float inv0, float inv1, float *out0,
                                      float *out1) {
    __m256 x0 = _mm256_setzero_ps(), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0, y3 = x0;
    for (int p = 0; p < len; p++) {
        const float *vp = v[p] + i;
        const __m256 v0 = _mm256_loadu_ps(vp), v1 = _mm256_loadu_ps(vp + 8), v2 = _mm256_loadu_ps(vp + 16), v3 = _mm256_loadu_ps(vp + 24);
        const __m256 b0 = _mm256_set1_ps(a0[p]), b1 = _mm256_set1_ps(a1[p]);
        x0 = _mm256_fmadd_ps(b0, v0, x0), x1 = _mm256_fmadd_ps(b0, v1, x1), x2 = _mm256_fmadd_ps(b0, v2, x2), x3 = _mm256_fmadd_ps(b0, v3, x3);
        y0 = _mm256_fmadd_ps(b1, v0, y0), y1 = _mm256_fmadd_ps(b1, v1, y1), y2 = _mm256_fmadd_ps(b1, v2, y2), y3 = _mm256_fmadd_ps(b1, v3, y3);
    }
    const __m256 s0 = _mm256_set1_ps(inv0), s1 = _mm256_set1_ps(inv1);
    _mm256_storeu_ps(out0 + i, _mm256_mul_ps(x0, s0)), _mm256_storeu_ps(out0 + i + 8, _mm256_mul_ps(x1, s0));
    _mm256_storeu_ps(out0 + i + 16, _mm256_mul_ps(x2, s0)), _mm256_storeu_ps(out0 + i + 24, _mm256_mul_ps(x3, s0));
    _mm256_storeu_ps(out1 + i, _mm256_mul_ps(y0, s1)), _mm256_storeu_ps(out1 + i + 8, _mm256_mul_ps(y1, s1));
    _mm256_storeu_ps(out1 + i + 16, _mm256_mul_ps(y2, s1)), _mm256_storeu_ps(out1 + i + 24, _mm256_mul_ps(y3, s1));
}

/* Query heads q[0..g) of one KV group against its cache at once: each key
 * row is brought in once for all of them, each value row once a pair of
 * heads (per head, a group of eight reads a long context's cache eight
 * times from memory: it outgrows the L2 at ~2000 positions for TinyLlama's
 * 64-float heads). Every output float is summed in the order attend sums
 * it, so the results are attend's, bit for bit, whatever the grouping.
 * att: g x len, out: g x hd. */
/* the scores of a group's g heads: att[h][0..len) */
#define GROUP_AHEAD 16 /* positions */
TARGET static inline void group_scores(int hd, int len, int g, const float *q, const float *const *k, const float *const *v, float scale, float *att) {
    int p = 0;
    for (; p + 8 <= len; p += 8) {
        for (int j = p + GROUP_AHEAD; j < p + GROUP_AHEAD + 8 && j < len; j++) /* (the rows lie a KV row apart: no hardware prefetcher follows them) */
            for (int i = 0; i < hd; i += 16) _mm_prefetch((const char *)(k[j] + i), _MM_HINT_T0), _mm_prefetch((const char *)(v[j] + i), _MM_HINT_T1);
        for (int h = 0; h < g; h++) scores8(hd, q + (size_t)h * hd, k + p, scale, att + (size_t)h * len + p);
    }
    for (; p < len; p++)
        for (int h = 0; h < g; h++) att[(size_t)h * len + p] = dot_f32(hd, q + (size_t)h * hd, k[p]) * scale;
}

/* softmax and values of heads [h, g) of a group whose scores att holds:
 * pairs of heads through values_2x32, an odd last head through attend */
TARGET static inline void group_values_from(int hd, int len, int g, int h, const float *q, const float *const *k, const float *const *v, float scale,
                                            float *att, float *out) {
    for (; h + 2 <= g; h += 2) {
        const float inv0 = softmax_exp(att + (size_t)h * len, len), inv1 = softmax_exp(att + (size_t)(h + 1) * len, len);
        for (int i = 0; i < hd; i += 32)
            values_2x32(len, att + (size_t)h * len, att + (size_t)(h + 1) * len, v, i, inv0, inv1, out + (size_t)h * hd, out + (size_t)(h + 1) * hd);
    }
    if (h < g) attend(hd, len, q + (size_t)h * hd, k, v, scale, att + (size_t)h * len, out + (size_t)h * hd);
}

TARGET static void attend_group(int hd, int len, int g, const float *q, const float *const *k, const float *const *v, float scale, float *att,
                                float *out) {
    if (hd % 64) { /* (attend sums the columns past a multiple of 64 one at a time) */
        for (int h = 0; h < g; h++) attend(hd, len, q + (size_t)h * hd, k, v, scale, att + (size_t)h * len, out + (size_t)h * hd);
        return;
    }
    group_scores(hd, len, g, q, k, v, scale, att);
    group_values_from(hd, len, g, 0, q, k, v, scale, att, out);
}

TARGET static float dot_f16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), s1);
    }
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += plumb_fp16_to_fp32(w[i]) * x[i];
    return s;
}

TARGET static float dot_bf16_w(int n, const void *wv, const void *xv) {
    const uint16_t *w = wv;
    const float *x = xv;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(w + i));
        __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(a)), 16));
        __m256 w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1)), 16));
        s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), s1);
    }
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += plumb_bf16_to_fp32(w[i]) * x[i];
    return s;
}

TARGET static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = plumb_fp16_to_fp32(x[i]);
}

/* Q6_K's 8-row kernels (AVX2 and AVX-512) prefetch 8 KiB ahead, a quarter
 * of a super-block group's lines (7 of 27) at each of its four (h, g) steps
 * rather than all 27 at its top: on the 2-core development machine
 * (AVX-512), six rounds alternating, TinyLlama Q6_K decode medians 27.43 ->
 * 28.33 tok/s at 1 thread, 46.75 -> 52.49 at 2; 8 KiB alone was slower,
 * spreading alone gained less (bench/results/s14-q6k-prefetch/). Off where
 * plumb_weight_prefetch is (Zen 4: simd/matmul.c says why). */
#ifndef Q6_K_AHEAD
#define Q6_K_AHEAD 8192
#endif
static inline __attribute__((always_inline)) void q6_K_prefetch_step(const uint8_t *group, int step, int pf) {
    if (!pf) return;
    enum { BYTES = 8 * sizeof(block_q6_K), STEP = (BYTES / 4 + 63) / 64 * 64 }; /* whole lines a step; the last step's are fewer */
    for (int l = STEP * step; l < STEP * (step + 1) && l < BYTES; l += 64) _mm_prefetch((const char *)group + Q6_K_AHEAD + l, _MM_HINT_T0);
}

#include "avx2_quant.inc"

/* ---- compute ceilings (plumb_kernels.int8_peak and f32_peak): 8
 * independent accumulators (16 with AVX-512's 32 registers), enough to
 * cover each instruction's latency at full throughput, as named variables
 * (an array of them is kept in memory at -O2). They start distinct, or the
 * compiler computes one for all; the operands go through an empty asm
 * statement each round, so nothing folds; the sums end in a volatile sink.
 * PEAK_FN(attributes, name, vector type, EACH8|EACH16, accumulators,
 * multiply-adds a step, operand, INIT(i), STEP(acc), ADD, SINK(tot)). ---- */
#define EACH8(M, X, Y) M(0, X, Y) M(1, X, Y) M(2, X, Y) M(3, X, Y) M(4, X, Y) M(5, X, Y) M(6, X, Y) M(7, X, Y)
#define EACH16(M, X, Y) EACH8(M, X, Y) M(8, X, Y) M(9, X, Y) M(10, X, Y) M(11, X, Y) M(12, X, Y) M(13, X, Y) M(14, X, Y) M(15, X, Y)
#define PEAK_DECL(i, V, INIT) V acc##i = INIT(i);
#define PEAK_STEP(i, STEP, _) acc##i = STEP(acc##i);
#define PEAK_SUM(i, ADD, _) tot = ADD(tot, acc##i);
#define PEAK_FN(ATTR, NAME, V, EACH, ACCS, MACS, OPERAND, INIT, STEP, ADD, SINK) \
    ATTR static int64_t NAME(int64_t rounds) {                                \
        V u = OPERAND, v = OPERAND, tot = INIT(0);                            \
        EACH(PEAK_DECL, V, INIT)                                              \
        for (int64_t r = 0; r < rounds; r++) {                                \
            __asm__("" : "+v"(u), "+v"(v));                                   \
            EACH(PEAK_STEP, STEP, 0)                                          \
        }                                                                     \
        EACH(PEAK_SUM, ADD, 0)                                                \
        peak_sink = (int32_t)(SINK(tot));                                     \
        return rounds * (ACCS) * (MACS);                                      \
    }
static volatile int32_t peak_sink;
#define I32X8(i) _mm256_set1_epi32(i)
#define F32X8(i) _mm256_set1_ps((float)(i))
#define LANE0_I256(t) _mm256_extract_epi32(t, 0)
#define LANE0_F256(t) _mm256_cvtss_f32(t)
/* the AVX2 kernels' multiply-add: vpmaddubsw, vpmaddwd by ones, vpaddd (32 int8 products); u passes the
 * empty asm before each, or every accumulator would share one product */
#define MADDUBS_STEP(acc) ({ __asm__("" : "+v"(u)); _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1))); })
#define FMA256_STEP(acc) _mm256_fmadd_ps(u, v, acc)
PEAK_FN(TARGET, int8_peak_avx2, __m256i, EACH8, 8, 32, _mm256_set1_epi8(1), I32X8, MADDUBS_STEP, _mm256_add_epi32, LANE0_I256)
PEAK_FN(TARGET, f32_peak_avx2, __m256, EACH8, 8, 8, _mm256_set1_ps(1.0f), F32X8, FMA256_STEP, _mm256_add_ps, LANE0_F256)

static const plumb_kernels avx2 = {
    .name = "avx2",
    .dot_f32 = dot_f32,
    .attend = attend,
    .attend_group = attend_group,
    .dot = {
        [PLUMB_TYPE_F32] = dot_f32_w,
        [PLUMB_TYPE_F16] = dot_f16_w,
        [PLUMB_TYPE_BF16] = dot_bf16_w,
        [PLUMB_TYPE_Q8_0] = AVX2_DOT_Q8_0,
        [PLUMB_TYPE_Q4_0] = AVX2_DOT_Q4_0,
        [PLUMB_TYPE_Q4_1] = AVX2_DOT_Q4_1,
        [PLUMB_TYPE_Q4_K] = AVX2_DOT_Q4_K,
        [PLUMB_TYPE_Q5_K] = AVX2_DOT_Q5_K,
        [PLUMB_TYPE_Q6_K] = AVX2_DOT_Q6_K,
    },
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_avx2, [PLUMB_TYPE_Q4_0] = dot8_q4_0_avx2, [PLUMB_TYPE_Q4_1] = dot8_q4_1_avx2, [PLUMB_TYPE_Q4_K] = dot8_q4_K_avx2, [PLUMB_TYPE_Q5_K] = dot8_q5_K_avx2, [PLUMB_TYPE_Q6_K] = dot8_q6_K_avx2},
    .gemm8 = {[PLUMB_TYPE_Q8_0] = gemm8_q8_0_avx2, [PLUMB_TYPE_Q4_0] = gemm8_q4_0_avx2, [PLUMB_TYPE_Q4_1] = gemm8_q4_1_avx2},
    .dot4t = AVX2_DOT4T_K,
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = AVX2_QUANTIZE_Q8A,
    .quantize_q8K = AVX2_QUANTIZE_Q8K,
    .silu_mul = silu_mul,
    .int8_peak = int8_peak_avx2,
    .f32_peak = f32_peak_avx2,
};

#define DPB256_STEP(acc) _mm256_dpbusd_avx_epi32(acc, u, v)
PEAK_FN(VNNI_TARGET, int8_peak_avx2_vnni, __m256i, EACH8, 8, 32, _mm256_set1_epi8(1), I32X8, DPB256_STEP, _mm256_add_epi32, LANE0_I256)

/* The same table with AVX-VNNI multiply-adds for the 32-wide block types. */
static const plumb_kernels avx2_vnni = {
    .name = "avx2-vnni",
    .dot_f32 = dot_f32,
    .attend = attend,
    .attend_group = attend_group,
    .dot = {
        [PLUMB_TYPE_F32] = dot_f32_w,
        [PLUMB_TYPE_F16] = dot_f16_w,
        [PLUMB_TYPE_BF16] = dot_bf16_w,
        [PLUMB_TYPE_Q8_0] = VNNI_DOT_Q8_0,
        [PLUMB_TYPE_Q4_0] = VNNI_DOT_Q4_0,
        [PLUMB_TYPE_Q4_1] = VNNI_DOT_Q4_1,
        [PLUMB_TYPE_Q4_K] = AVX2_DOT_Q4_K,
        [PLUMB_TYPE_Q5_K] = AVX2_DOT_Q5_K,
        [PLUMB_TYPE_Q6_K] = AVX2_DOT_Q6_K,
    },
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_vnni, [PLUMB_TYPE_Q4_0] = dot8_q4_0_vnni, [PLUMB_TYPE_Q4_1] = dot8_q4_1_vnni, [PLUMB_TYPE_Q4_K] = dot8_q4_K_vnni, [PLUMB_TYPE_Q5_K] = dot8_q5_K_vnni, [PLUMB_TYPE_Q6_K] = dot8_q6_K_vnni},
    .gemm8 = {[PLUMB_TYPE_Q8_0] = gemm8_q8_0_vnni, [PLUMB_TYPE_Q4_0] = gemm8_q4_0_vnni, [PLUMB_TYPE_Q4_1] = gemm8_q4_1_vnni},
    .dot4t = AVX2_DOT4T_K,
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = AVX2_QUANTIZE_Q8A,
    .quantize_q8K = AVX2_QUANTIZE_Q8K,
    .silu_mul = silu_mul,
    .int8_peak = int8_peak_avx2_vnni,
    .f32_peak = f32_peak_avx2,
};

const plumb_kernels *plumb_kernels_avx2(void) { return &avx2; }
const plumb_kernels *plumb_kernels_avx2_vnni(void) { return &avx2_vnni; }
#else
const plumb_kernels *plumb_kernels_avx2(void) { return NULL; }
const plumb_kernels *plumb_kernels_avx2_vnni(void) { return NULL; }
#endif

/* ---- AVX-512 VNNI: two repacked 8-row groups side by side in one 512-bit
 * register, so each vpdpbusd advances 16 rows x 4 activation bytes; four
 * tokens share every weight load (prefill, batched decode). ---- */
#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* Values for four heads of a group, columns [i, i + 64): sixteen 512-bit
 * sums (half the instructions of two passes of values_2x32), each float
 * summed over the positions in attend's order, so attend's results still. */
T512 static void values_4x64(int len, const float *a, int i, const float *inv, const float *const *v, float *out, int hd) {
    const float *a0 = a, *a1 = a + len, *a2 = a + 2 * (size_t)len, *a3 = a + 3 * (size_t)len;
    __m512 x0 = _mm512_setzero_ps(), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0, y3 = x0;
    __m512 z0 = x0, z1 = x0, z2 = x0, z3 = x0, w0 = x0, w1 = x0, w2 = x0, w3 = x0;
    for (int p = 0; p < len; p++) {
        const float *vp = v[p] + i;
        const __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16), v2 = _mm512_loadu_ps(vp + 32), v3 = _mm512_loadu_ps(vp + 48);
        const __m512 b0 = _mm512_set1_ps(a0[p]), b1 = _mm512_set1_ps(a1[p]), b2 = _mm512_set1_ps(a2[p]), b3 = _mm512_set1_ps(a3[p]);
        x0 = _mm512_fmadd_ps(b0, v0, x0), x1 = _mm512_fmadd_ps(b0, v1, x1), x2 = _mm512_fmadd_ps(b0, v2, x2), x3 = _mm512_fmadd_ps(b0, v3, x3);
        y0 = _mm512_fmadd_ps(b1, v0, y0), y1 = _mm512_fmadd_ps(b1, v1, y1), y2 = _mm512_fmadd_ps(b1, v2, y2), y3 = _mm512_fmadd_ps(b1, v3, y3);
        z0 = _mm512_fmadd_ps(b2, v0, z0), z1 = _mm512_fmadd_ps(b2, v1, z1), z2 = _mm512_fmadd_ps(b2, v2, z2), z3 = _mm512_fmadd_ps(b2, v3, z3);
        w0 = _mm512_fmadd_ps(b3, v0, w0), w1 = _mm512_fmadd_ps(b3, v1, w1), w2 = _mm512_fmadd_ps(b3, v2, w2), w3 = _mm512_fmadd_ps(b3, v3, w3);
    }
    const __m512 sums[4][4] = {{x0, x1, x2, x3}, {y0, y1, y2, y3}, {z0, z1, z2, z3}, {w0, w1, w2, w3}};
    for (int h = 0; h < 4; h++)
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(out + (size_t)h * hd + i + 16 * j, _mm512_mul_ps(sums[h][j], _mm512_set1_ps(inv[h])));
}

/* attend_group with four heads a values pass in 512-bit registers */
T512 static void attend_group_512(int hd, int len, int g, const float *q, const float *const *k, const float *const *v, float scale, float *att,
                                  float *out) {
    if (hd % 64 || g < 4) {
        attend_group(hd, len, g, q, k, v, scale, att, out);
        return;
    }
    group_scores(hd, len, g, q, k, v, scale, att);
    int h = 0;
    for (; h + 4 <= g; h += 4) {
        float inv[4];
        for (int j = 0; j < 4; j++) inv[j] = softmax_exp(att + (size_t)(h + j) * len, len);
        for (int i = 0; i < hd; i += 64) values_4x64(len, att + (size_t)h * len, i, inv, v, out + (size_t)h * hd, hd);
    }
    group_values_from(hd, len, g, h, q, k, v, scale, att, out);
}
#ifndef PF512 /* prefetch distance of the 512-bit kernels: as PREFETCH_AHEAD */
#define PF512 4096
#endif

T512 static inline int32_t load_i32_512(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#define Q4_STEP16(T, A)                                                                                      \
    l##T = _mm512_dpbusd_epi32(l##T, lo, _mm512_set1_epi32(load_i32_512(A[b].qs + 4 * s)));                 \
    h##T = _mm512_dpbusd_epi32(h##T, hi, _mm512_set1_epi32(load_i32_512(A[b].qs + 16 + 4 * s)))
#define Q4_FINISH16(T, A)                                                                                                          \
    acc##T = MIN ? _mm512_fmadd_ps(mw, _mm512_set1_ps(A[b].s),                                                                     \
                                   _mm512_fmadd_ps(dw, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(l##T, h##T)), _mm512_set1_ps(A[b].d)), acc##T)) \
                 : _mm512_fmadd_ps(dw, _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(l##T, h##T)), _mm512_set1_ps(A[b].d),               \
                                                       _mm512_set1_ps(8.0f * A[b].s)), acc##T)

/* the 16 rows' fp16 header vector at byte offset OFF of each group's block */
T512 static inline __m512 half16_512(const uint8_t *w0, const uint8_t *w1, int off) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(w0 + off))), _mm_loadu_si128((const __m128i *)(w1 + off)), 1));
}

/* Q4_0 (MIN = 0) and Q4_1 (MIN = 1: the minimums times each token's d * sum(a));
 * out[t][0..8) are group 0's rows, out[t][8..16) group 1's */
T512 static inline __attribute__((always_inline)) void gemm16_q4x_avx512(int n, const void *w0v, const void *w1v, const void *const *av, float *const *out, const int MIN) {
    const uint8_t *w0 = w0v, *w1 = w1v;
    const block_q8a *a0 = av[0], *a1 = av[1], *a2 = av[2], *a3 = av[3];
    const int header = MIN ? 32 : 16;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int b = 0; b < n / 32; b++, w0 += header + 8 * 16, w1 += header + 8 * 16) {
        /* fetch ahead: with a handful of tokens the product is as much a
         * stream over the weights as a computation */
        _mm_prefetch((const char *)w0 + 1024, _MM_HINT_T0);
        _mm_prefetch((const char *)w0 + 1024 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)w0 + 1024 + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)w1 + 1024, _MM_HINT_T0);
        _mm_prefetch((const char *)w1 + 1024 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)w1 + 1024 + 128, _MM_HINT_T0);
        __m512i l0 = _mm512_setzero_si512(), l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0, h3 = l0;
        for (int s = 0; s < 4; s++) {
            const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + header + 32 * s))),
                                                 _mm256_loadu_si256((const __m256i *)(w1 + header + 32 * s)), 1);
            const __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
            Q4_STEP16(0, a0); Q4_STEP16(1, a1); Q4_STEP16(2, a2); Q4_STEP16(3, a3);
        }
        const __m512 dw = half16_512(w0, w1, 0), mw = MIN ? half16_512(w0, w1, 16) : dw;
        Q4_FINISH16(0, a0); Q4_FINISH16(1, a1); Q4_FINISH16(2, a2); Q4_FINISH16(3, a3);
    }
    _mm512_storeu_ps(out[0], acc0); _mm512_storeu_ps(out[1], acc1); _mm512_storeu_ps(out[2], acc2); _mm512_storeu_ps(out[3], acc3);
}

T512 static void gemm16_q4_0_avx512(int n, const void *w0, const void *w1, const void *const *av, float *const *out) { gemm16_q4x_avx512(n, w0, w1, av, out, 0); }
T512 static void gemm16_q4_1_avx512(int n, const void *w0, const void *w1, const void *const *av, float *const *out) { gemm16_q4x_avx512(n, w0, w1, av, out, 1); }

/* Q8_0: the weights made unsigned by flipping their sign bits (x + 128, one
 * vpxord a step, shared by the four tokens) so vpdpbusd takes them as they
 * are: sum((x + 128) a) = sum(x a) + 128 sum(a), and the second term comes
 * off in floats with the block's d_a * sum(a) (block_q8a.s), as Q4_0's -8
 * does. The sign-carrying form (|x|, and each token's activations negated
 * where x < 0) cost a masked subtract per token and step; this one none. */
#define Q8_STEP16(T, A) i##T = _mm512_dpbusd_epi32(i##T, ux, _mm512_set1_epi32(load_i32_512(A[b].qs + 4 * s)))
#define Q8_FINISH16(T, A) \
    acc##T = _mm512_fmadd_ps(dw, _mm512_fmsub_ps(_mm512_cvtepi32_ps(i##T), _mm512_set1_ps(A[b].d), _mm512_set1_ps(128.0f * A[b].s)), acc##T)

T512 static void gemm16_q8_0_avx512(int n, const void *w0v, const void *w1v, const void *const *av, float *const *out) {
    const uint8_t *w0 = w0v, *w1 = w1v;
    const block_q8a *a0 = av[0], *a1 = av[1], *a2 = av[2], *a3 = av[3];
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int b = 0; b < n / 32; b++, w0 += 16 + 8 * 32, w1 += 16 + 8 * 32) {
        for (int l = 0; l < 272; l += 64) {
            _mm_prefetch((const char *)w0 + PF512 + l, _MM_HINT_T0);
            _mm_prefetch((const char *)w1 + PF512 + l, _MM_HINT_T0);
        }
        __m512i i0 = _mm512_setzero_si512(), i1 = i0, i2 = i0, i3 = i0;
        for (int s = 0; s < 8; s++) {
            const __m512i ux = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + 16 + 32 * s))),
                                                                   _mm256_loadu_si256((const __m256i *)(w1 + 16 + 32 * s)), 1),
                                                flip);
            Q8_STEP16(0, a0); Q8_STEP16(1, a1); Q8_STEP16(2, a2); Q8_STEP16(3, a3);
        }
        const __m512 dw = half16_512(w0, w1, 0);
        Q8_FINISH16(0, a0); Q8_FINISH16(1, a1); Q8_FINISH16(2, a2); Q8_FINISH16(3, a3);
    }
    _mm512_storeu_ps(out[0], acc0); _mm512_storeu_ps(out[1], acc1); _mm512_storeu_ps(out[2], acc2); _mm512_storeu_ps(out[3], acc3);
}

/* One token, one repacked 8-row group, with 512-bit registers: each load
 * takes two 32-byte steps of the group (rows 0-7 at step s in the low half,
 * at step s + 1 in the high half), and one vpermd gives each half its own
 * 4 activation bytes, so a block is half the instructions of dot8_q4_0_vnni.
 * At one thread the 256-bit kernel is compute bound (it streams ~75% of what
 * it reaches on cache-resident weights), so this is what moves decode. The
 * halves are summed once per block, then it is the 256-bit kernel's tail. */
T512 static inline __m512i act_pair_idx(int a, int b) { /* dword lanes 0-7 <- a, 8-15 <- b */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(a)), _mm256_set1_epi32(b), 1);
}

T512 static inline __m256i sum_halves(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

/* Q4_0 (MIN = 0) and Q4_1 (MIN = 1: the rows' minimums in a second header
 * vector, times the activation block's d * sum(a)); inlined into each
 * wrapper, so MIN is a constant there. */
T512 static inline __attribute__((always_inline)) void dot8_q4x_avx512(int n, const void *wv, const void *av, float *out, const int MIN) {
    const uint8_t *w = wv;
    const block_q8a *a = av;
    const int header = MIN ? 32 : 16;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i p01 = act_pair_idx(0, 1), p23 = act_pair_idx(2, 3), p45 = act_pair_idx(4, 5), p67 = act_pair_idx(6, 7);
    __m256 acc = _mm256_setzero_ps();
    const int pf = plumb_weight_prefetch;
    for (int b = 0; b < n / 32; b++, w += header + 8 * 16) {
        if (pf) {
            _mm_prefetch((const char *)w + PF512, _MM_HINT_T0);
            _mm_prefetch((const char *)w + PF512 + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)w + PF512 + 128, _MM_HINT_T0);
        }
        /* activation dwords 0-3 pair with the low nibbles of steps 0-3, dwords 4-7 with the high ones */
        const __m512i act = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[b].qs));
        const __m512i x01 = _mm512_loadu_si512((const void *)(w + header)), x23 = _mm512_loadu_si512((const void *)(w + header + 64));
        __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(x01, m4), _mm512_permutexvar_epi32(p01, act));
        __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(x23, m4), _mm512_permutexvar_epi32(p23, act));
        i0 = _mm512_dpbusd_epi32(i0, _mm512_and_si512(_mm512_srli_epi16(x01, 4), m4), _mm512_permutexvar_epi32(p45, act));
        i1 = _mm512_dpbusd_epi32(i1, _mm512_and_si512(_mm512_srli_epi16(x23, 4), m4), _mm512_permutexvar_epi32(p67, act));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w)), isum = _mm256_cvtepi32_ps(sum_halves(_mm512_add_epi32(i0, i1)));
        if (MIN) { /* d_w * d_a * sum(q*a) + m_w * s_a */
            acc = _mm256_fmadd_ps(dw, _mm256_mul_ps(isum, _mm256_set1_ps(a[b].d)), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 16))), _mm256_set1_ps(a[b].s), acc);
        } else /* d_w * (d_a * sum(q*a) - 8 * s_a) */
            acc = _mm256_fmadd_ps(dw, _mm256_fmsub_ps(isum, _mm256_set1_ps(a[b].d), _mm256_set1_ps(8.0f * a[b].s)), acc);
    }
    _mm256_storeu_ps(out, acc);
}

T512 static void dot8_q4_0_avx512(int n, const void *wv, const void *av, float *out) { dot8_q4x_avx512(n, wv, av, out, 0); }
T512 static void dot8_q4_1_avx512(int n, const void *wv, const void *av, float *out) { dot8_q4x_avx512(n, wv, av, out, 1); }

/* Q8_0 the same way: four 64-byte loads a block, |w| times the activations
 * carrying w's signs (vpdpbusd multiplies unsigned by signed bytes). */
T512 static void dot8_q8_0_avx512(int n, const void *wv, const void *av, float *out) {
    const uint8_t *w = wv;
    const block_q8a *a = av;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i idx[4] = {act_pair_idx(0, 1), act_pair_idx(2, 3), act_pair_idx(4, 5), act_pair_idx(6, 7)};
    __m256 acc = _mm256_setzero_ps();
    const int pf = plumb_weight_prefetch;
    for (int b = 0; b < n / 32; b++, w += 16 + 8 * 32) {
        if (pf)
            for (int l = 0; l < 272; l += 64) _mm_prefetch((const char *)w + PF512 + l, _MM_HINT_T0);
        const __m512i act = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[b].qs));
        __m512i i0 = zero, i1 = zero;
        for (int s = 0; s < 4; s += 2) {
            const __m512i x0 = _mm512_loadu_si512((const void *)(w + 16 + 64 * s)), x1 = _mm512_loadu_si512((const void *)(w + 16 + 64 * (s + 1)));
            const __m512i a0 = _mm512_permutexvar_epi32(idx[s], act), a1 = _mm512_permutexvar_epi32(idx[s + 1], act);
            i0 = _mm512_dpbusd_epi32(i0, _mm512_abs_epi8(x0), _mm512_mask_sub_epi8(a0, _mm512_movepi8_mask(x0), zero, a0));
            i1 = _mm512_dpbusd_epi32(i1, _mm512_abs_epi8(x1), _mm512_mask_sub_epi8(a1, _mm512_movepi8_mask(x1), zero, a1));
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[b].d)), _mm256_cvtepi32_ps(sum_halves(_mm512_add_epi32(i0, i1))), acc);
    }
    _mm256_storeu_ps(out, acc);
}

/* Q4_K (FIVE = 0) and Q5_K (FIVE = 1), 8 rows, with 512-bit registers: a
 * load takes two steps of a slice (rows 0-7 at step s in the low half, at
 * step s + 1 in the high half) and one vpermd gives each half its 4
 * activation bytes, as dot8_q4_0_avx512 does; the halves are added once per
 * sub-block, then it is the AVX2 kernel's per-row scaling. Q5_K's fifth
 * bits (the qh steps, loaded once per super-block) go in as 16 through a
 * byte mask (vptestmb) and a masked add. Inlined into each wrapper, so
 * FIVE is a constant there. */
T512 static inline __attribute__((always_inline)) void dot8_q45_K_avx512(int n, const void *wv, const void *av, float *out, const int FIVE) {
    const uint8_t *w = wv;
    const block_q8_K *a = av;
    const size_t group = 8 * (FIVE ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const __m512i m4 = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(0x10);
    /* activation dword pairs of steps (s, s+1): low nibbles, then high */
    const __m512i lo_idx[4] = {act_pair_idx(0, 1), act_pair_idx(2, 3), act_pair_idx(4, 5), act_pair_idx(6, 7)};
    const __m512i hi_idx[4] = {act_pair_idx(8, 9), act_pair_idx(10, 11), act_pair_idx(12, 13), act_pair_idx(14, 15)};
    __m256 acc = _mm256_setzero_ps();
    const int pf = plumb_weight_prefetch;
    for (int i = 0; i < n / QK_K; i++, w += group) {
        __m256i sc_lo, sc_hi, mins;
        k4x8_scales(w, a[i].bsums, &sc_lo, &sc_hi, &mins);
        __m512i qh[4];
        if (FIVE)
            for (int p = 0; p < 4; p++) qh[p] = _mm512_loadu_si512((const void *)(w + 128 + 64 * p));
        __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < QK_K / 64; j++) {
            const uint8_t *q = w + 128 + (FIVE ? 256 : 0) + 256 * j;
            /* a quarter of the super-block's lines, PF512 ahead, at each slice, not all at its
             * start (decode with bench-ab, token by token, three times at one and two threads:
             * Q4_K 0.97-0.99 of the time and 0.99, Q5_K 0.90-1.06 (median 0.96) and 0.96-1.06 (0.98)) */
            if (pf)
#pragma GCC unroll 6
                for (int l = j * (int)group / 256; l < (j + 1) * (int)group / 256; l++) _mm_prefetch((const char *)w + PF512 + 64 * l, _MM_HINT_T0);
            /* dwords 0-7: the low sub-block's activations, 8-15 the high one's */
            const __m512i act = _mm512_loadu_si512((const void *)(a[i].qs + 64 * j));
            const __m512i bit_lo = _mm512_set1_epi8((char)(1 << (2 * j))), bit_hi = _mm512_set1_epi8((char)(2 << (2 * j)));
            __m512i s_lo = _mm512_setzero_si512(), s_hi = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m512i x = _mm512_loadu_si512((const void *)(q + 64 * p));
                __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
                if (FIVE) {
                    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh[p], bit_lo), lo, b16);
                    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh[p], bit_hi), hi, b16);
                }
                s_lo = _mm512_dpbusd_epi32(s_lo, lo, _mm512_permutexvar_epi32(lo_idx[p], act));
                s_hi = _mm512_dpbusd_epi32(s_hi, hi, _mm512_permutexvar_epi32(hi_idx[p], act));
            }
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s_lo), K4X8_SCALE(sc_lo, sc_hi, 2 * j)));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s_hi), K4X8_SCALE(sc_lo, sc_hi, 2 * j + 1)));
        }
        acc = k4x8_finish(w, a[i].d, isum, mins, acc);
    }
    _mm256_storeu_ps(out, acc);
}

T512 static void dot8_q4_K_avx512(int n, const void *wv, const void *av, float *out) { dot8_q45_K_avx512(n, wv, av, out, 0); }
T512 static void dot8_q5_K_avx512(int n, const void *wv, const void *av, float *out) { dot8_q45_K_avx512(n, wv, av, out, 1); }

/* Q4_K (FIVE = 0) and Q5_K (FIVE = 1), two 8-row groups x four tokens
 * (prefill, batched decode), as gemm16_q4x_avx512 does the 32-wide types: a
 * register holds a step of group 0 (rows 0-7) in its low half and of group
 * 1 (rows 8-15) in its high half, so each 4-byte activation broadcast feeds
 * 16 rows and no permute is needed; the quants, Q5_K's fifth bits and the
 * 6-bit scales unpack once for the four tokens. out[t][0..8) are group 0's
 * rows, out[t][8..16) group 1's. */
T512 static inline __m512i pair512(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)), _mm256_loadu_si256((const __m256i *)p1), 1);
}

T512 static inline __attribute__((always_inline)) void gemm16_q45_K_avx512(int n, const void *w0v, const void *w1v, const void *const *av, float *const *out,
                                                                          const int FIVE) {
    const uint8_t *w0 = w0v, *w1 = w1v;
    const size_t group = 8 * (FIVE ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m2 = _mm512_set1_epi8(0x03), b16 = _mm512_set1_epi8(0x10);
    const __m512i w16 = _mm512_set1_epi32(0x00FF00FF), ff = _mm512_set1_epi32(0xFF);
    const block_q8_K *a[4] = {av[0], av[1], av[2], av[3]};
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < n / QK_K; i++, w0 += group, w1 += group) {
        /* the 16 rows' scales and mins (k4x8_scales, both groups at once) */
        const __m512i u0 = pair512(w0 + 32, w1 + 32), u1 = pair512(w0 + 64, w1 + 64), u2 = pair512(w0 + 96, w1 + 96);
        const __m512i sc_lo = _mm512_and_si512(u0, m6);
        const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), m2), 4));
        const __m512i mn_lo = _mm512_and_si512(u1, m6);
        const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), m2), 4));
        /* min bytes (k, k+2) of a lane as int16 words, for k = 0, 1, 4, 5 */
        const __m512i mn[4] = {_mm512_and_si512(mn_lo, w16), _mm512_and_si512(_mm512_srli_epi32(mn_lo, 8), w16), _mm512_and_si512(mn_hi, w16),
                               _mm512_and_si512(_mm512_srli_epi32(mn_hi, 8), w16)};
        __m512i isum[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        const uint8_t *q0 = w0 + 128 + (FIVE ? 256 : 0), *q1 = w1 + 128 + (FIVE ? 256 : 0);
        for (int j = 0; j < QK_K / 64; j++) {
            const __m512i bit_lo = _mm512_set1_epi8((char)(1 << (2 * j))), bit_hi = _mm512_set1_epi8((char)(2 << (2 * j)));
            __m512i s_lo[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
            __m512i s_hi[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++) {
                const __m512i x = pair512(q0 + 256 * j + 32 * st, q1 + 256 * j + 32 * st);
                __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
                if (FIVE) {
                    const __m512i qh = pair512(w0 + 128 + 32 * st, w1 + 128 + 32 * st);
                    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, bit_lo), lo, b16);
                    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, bit_hi), hi, b16);
                }
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const int8_t *aq = a[t][i].qs + 64 * j + 4 * st;
                    s_lo[t] = _mm512_dpbusd_epi32(s_lo[t], lo, _mm512_set1_epi32(load_i32_512(aq)));
                    s_hi[t] = _mm512_dpbusd_epi32(s_hi[t], hi, _mm512_set1_epi32(load_i32_512(aq + 32)));
                }
            }
            /* sub-blocks 2j and 2j + 1: their scales, a row per lane */
            const __m512i sl = _mm512_and_si512(_mm512_srli_epi32(2 * j < 4 ? sc_lo : sc_hi, 8 * ((2 * j) & 3)), ff);
            const __m512i sh = _mm512_and_si512(_mm512_srli_epi32(2 * j + 1 < 4 ? sc_lo : sc_hi, 8 * ((2 * j + 1) & 3)), ff);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(s_lo[t], sl), _mm512_mullo_epi32(s_hi[t], sh)));
        }
        const __m512 d = half16_512(w0, w1, 0), dmin = half16_512(w0, w1, 16);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            /* sum over sub-blocks of min_k x B_k (B_k: sub-block k's activation sum), as k4x8_scales */
            const __m256i b = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[t][i].bsums), _mm256_set1_epi16(1));
            const __m256i pairs = _mm256_shuffle_epi8(_mm256_packs_epi32(b, b), _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5,
                                                                                                 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7));
            const __m512i p = _mm512_castsi256_si512(pairs);
            __m512i mins = _mm512_madd_epi16(mn[0], _mm512_permutexvar_epi32(_mm512_set1_epi32(0), p));
            mins = _mm512_add_epi32(mins, _mm512_madd_epi16(mn[1], _mm512_permutexvar_epi32(_mm512_set1_epi32(1), p)));
            mins = _mm512_add_epi32(mins, _mm512_madd_epi16(mn[2], _mm512_permutexvar_epi32(_mm512_set1_epi32(4), p)));
            mins = _mm512_add_epi32(mins, _mm512_madd_epi16(mn[3], _mm512_permutexvar_epi32(_mm512_set1_epi32(5), p)));
            const __m512 da = _mm512_set1_ps(a[t][i].d);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(mins), acc[t]);
        }
    }
    for (int t = 0; t < 4; t++) _mm512_storeu_ps(out[t], acc[t]);
}

T512 static void gemm16_q4_K_avx512(int n, const void *w0, const void *w1, const void *const *av, float *const *out) { gemm16_q45_K_avx512(n, w0, w1, av, out, 0); }
T512 static void gemm16_q5_K_avx512(int n, const void *w0, const void *w1, const void *const *av, float *const *out) { gemm16_q45_K_avx512(n, w0, w1, av, out, 1); }

/* bits of LO where m4 is set (the low nibble), of HI elsewhere: vpternlogd's "m4 ? LO : HI" */
#define Q6_SELECT_LO(LO, HI) _mm512_ternarylogic_epi32((LO), (HI), m4, 0xE4)

/* Q6_K, 8 rows, with 512-bit registers: each load takes two steps (rows
 * 0-7 at step s in the low half, s + 1 in the high), as in the Q4_K kernel. */
T512 static void dot8_q6_K_avx512(int n, const void *wv, const void *av, float *out) {
    const uint8_t *w = wv;
    const block_q8_K *a = av;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m0145 = _mm512_set1_epi8(0x33);
    const __m512i lo_idx[4] = {act_pair_idx(0, 1), act_pair_idx(2, 3), act_pair_idx(4, 5), act_pair_idx(6, 7)};
    const __m512i hi_idx[4] = {act_pair_idx(8, 9), act_pair_idx(10, 11), act_pair_idx(12, 13), act_pair_idx(14, 15)};
    const int pf = plumb_weight_prefetch;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++, w += 8 * sizeof(block_q6_K)) {
        __m256i sc[4];
        for (int k = 0; k < 4; k++) sc[k] = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * k));
        __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* values 128h.. (l, l+32: a0's dwords 0-7, 8-15) and 128h+64.. (l+64, l+96: a1's) */
            const __m512i a0 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h)), a1 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h + 64));
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                q6_K_prefetch_step(w, 2 * h + g, pf);
                __m512i s1 = _mm512_setzero_si512(), s2 = s1, s3 = s1, s4 = s1;
#pragma GCC unroll 2
                for (int p = 2 * g; p < 2 * g + 2; p++) {
                    const __m512i la = _mm512_loadu_si512((const void *)(w + Q6X8_STEP(h, 2 * p, 0))),
                                  lb = _mm512_loadu_si512((const void *)(w + Q6X8_STEP(h, 2 * p, 1))),
                                  hb = _mm512_loadu_si512((const void *)(w + Q6X8_STEP(h, 2 * p, 2)));
                    /* each value: its low nibble from ql, bits 4-5 from qh, bits 6-7 zero. With qh split
                     * into bit pairs 0,1,4,5 (h01) and 2,3,6,7 (h23), a shift puts a value's pair at bits
                     * 4-5 with zeros above, and one vpternlogd takes the low nibble from ql and the rest
                     * from the shifted pairs: 11 operations a step instead of 17 */
                    const __m512i h01 = _mm512_and_si512(hb, m0145), h23 = _mm512_andnot_si512(m0145, hb);
                    const __m512i q1 = Q6_SELECT_LO(la, _mm512_slli_epi16(h01, 4));
                    const __m512i q2 = Q6_SELECT_LO(lb, _mm512_slli_epi16(h23, 2));
                    const __m512i q3 = Q6_SELECT_LO(_mm512_srli_epi16(la, 4), h01);
                    const __m512i q4 = Q6_SELECT_LO(_mm512_srli_epi16(lb, 4), _mm512_srli_epi16(h23, 2));
                    s1 = _mm512_dpbusd_epi32(s1, q1, _mm512_permutexvar_epi32(lo_idx[p], a0));
                    s2 = _mm512_dpbusd_epi32(s2, q2, _mm512_permutexvar_epi32(hi_idx[p], a0));
                    s3 = _mm512_dpbusd_epi32(s3, q3, _mm512_permutexvar_epi32(lo_idx[p], a1));
                    s4 = _mm512_dpbusd_epi32(s4, q4, _mm512_permutexvar_epi32(hi_idx[p], a1));
                }
                const int k = 8 * h + g;
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s1), Q6X8_SCALE(sc, k)));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s2), Q6X8_SCALE(sc, k + 2)));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s3), Q6X8_SCALE(sc, k + 4)));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(sum_halves(s4), Q6X8_SCALE(sc, k + 6)));
            }
        }
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(q6x8_scale_bsums(sc, a[i].bsums), 5));
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(a[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    _mm256_storeu_ps(out, acc);
}

/* Q6_K, two 8-row groups x four tokens (prefill, batched decode): each
 * register a step of group 0 (rows 0-7) in its low half and of group 1 in
 * its high half, so an activation broadcast feeds 16 rows; the 6-bit values
 * are built as dot8_q6_K_avx512 builds them, once for the four tokens; the
 * -32 offset comes off through the bsums, per group (q6x8_scale_bsums). */
T512 static void gemm16_q6_K_avx512(int n, const void *w0v, const void *w1v, const void *const *av, float *const *out) {
    const uint8_t *w0 = w0v, *w1 = w1v;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m0145 = _mm512_set1_epi8(0x33);
    const block_q8_K *a[4] = {av[0], av[1], av[2], av[3]};
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < n / QK_K; i++, w0 += 8 * sizeof(block_q6_K), w1 += 8 * sizeof(block_q6_K)) {
        __m512i sc[4];
        for (int k = 0; k < 4; k++) sc[k] = pair512(w0 + 16 + 32 * k, w1 + 16 + 32 * k);
        __m512i isum[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 2; g++) {
                __m512i s1[4], s2[4], s3[4], s4[4];
                for (int t = 0; t < 4; t++) s1[t] = s2[t] = s3[t] = s4[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int st = 4 * g; st < 4 * g + 4; st++) {
                    const __m512i la = pair512(w0 + Q6X8_STEP(h, st, 0), w1 + Q6X8_STEP(h, st, 0));
                    const __m512i lb = pair512(w0 + Q6X8_STEP(h, st, 1), w1 + Q6X8_STEP(h, st, 1));
                    const __m512i hb = pair512(w0 + Q6X8_STEP(h, st, 2), w1 + Q6X8_STEP(h, st, 2));
                    const __m512i h01 = _mm512_and_si512(hb, m0145), h23 = _mm512_andnot_si512(m0145, hb);
                    const __m512i q1 = Q6_SELECT_LO(la, _mm512_slli_epi16(h01, 4));
                    const __m512i q2 = Q6_SELECT_LO(lb, _mm512_slli_epi16(h23, 2));
                    const __m512i q3 = Q6_SELECT_LO(_mm512_srli_epi16(la, 4), h01);
                    const __m512i q4 = Q6_SELECT_LO(_mm512_srli_epi16(lb, 4), _mm512_srli_epi16(h23, 2));
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++) {
                        const int8_t *aq = a[t][i].qs + 128 * h + 4 * st;
                        s1[t] = _mm512_dpbusd_epi32(s1[t], q1, _mm512_set1_epi32(load_i32_512(aq)));
                        s2[t] = _mm512_dpbusd_epi32(s2[t], q2, _mm512_set1_epi32(load_i32_512(aq + 32)));
                        s3[t] = _mm512_dpbusd_epi32(s3[t], q3, _mm512_set1_epi32(load_i32_512(aq + 64)));
                        s4[t] = _mm512_dpbusd_epi32(s4[t], q4, _mm512_set1_epi32(load_i32_512(aq + 96)));
                    }
                }
                const int k = 8 * h + g; /* the sub-blocks of s1..s4: k, k+2, k+4, k+6 (Q6X8_SCALE's byte picks, 16 lanes) */
#define Q6X16_SCALE(k) \
    (((k) & 3) == 3 ? _mm512_srai_epi32(sc[(k) >> 2], 24) : _mm512_srai_epi32(_mm512_slli_epi32(sc[(k) >> 2], 24 - 8 * ((k) & 3)), 24))
                const __m512i c1 = Q6X16_SCALE(k), c2 = Q6X16_SCALE(k + 2), c3 = Q6X16_SCALE(k + 4), c4 = Q6X16_SCALE(k + 6);
#undef Q6X16_SCALE
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const __m512i p12 = _mm512_add_epi32(_mm512_mullo_epi32(s1[t], c1), _mm512_mullo_epi32(s2[t], c2));
                    const __m512i p34 = _mm512_add_epi32(_mm512_mullo_epi32(s3[t], c3), _mm512_mullo_epi32(s4[t], c4));
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(p12, p34));
                }
            }
        __m256i sc0[4], sc1[4];
        for (int k = 0; k < 4; k++) sc0[k] = _mm512_castsi512_si256(sc[k]), sc1[k] = _mm512_extracti64x4_epi64(sc[k], 1);
        const __m512 d = half16_512(w0, w1, 0);
        for (int t = 0; t < 4; t++) {
            const __m512i off = _mm512_inserti64x4(_mm512_castsi256_si512(q6x8_scale_bsums(sc0, a[t][i].bsums)), q6x8_scale_bsums(sc1, a[t][i].bsums), 1);
            isum[t] = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 5));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(a[t][i].d)), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    for (int t = 0; t < 4; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* Q4_K / Q5_K with 512-bit registers: two 64-value slices per step (their
 * quants are adjacent), so each instruction does twice the AVX2 kernel's
 * work; the scale of each 256-bit half comes from one vpermw. Same sums as
 * dot_q4_K_avx2 (tested against the scalar reference). */
T512 static inline __m512i k4_scale_pair(__m512i sm, int a, int b) { /* int16 a in the low half, b in the high half */
    return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)a)), _mm256_set1_epi16((short)b), 1), sm);
}

T512 static inline __m512i load2x256(const int8_t *lo, const int8_t *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)), _mm256_loadu_si256((const __m256i *)hi), 1);
}

#define K4_512_BODY(QS, LO_HI)                                                                                                  \
    for (int i = 0; i < n / QK_K; i++) {                                                                                        \
        const __m256i sm = k4_scales_mins(w[i].scales);                                                                         \
        acc_m = _mm_fmadd_ps(_mm_set1_ps(-a[i].d * F16(w[i].dmin)), _mm_cvtepi32_ps(k4_min_products(sm, a[i].bsums)), acc_m);  \
        const __m512i sm512 = _mm512_castsi256_si512(sm);                                                                        \
        const int8_t *q8 = a[i].qs;                                                                                              \
        __m512i sumi = _mm512_setzero_si512();                                                                                   \
        for (int j = 0; j < QK_K / 64; j += 2, q8 += 128) {                                                                      \
            const __m512i qb = _mm512_loadu_si512((const void *)(QS + 32 * j));                                                  \
            __m512i lo, hi;                                                                                                      \
            LO_HI                                                                                                                \
            const __m512i p0 = _mm512_maddubs_epi16(lo, load2x256(q8, q8 + 64));                                                 \
            const __m512i p1 = _mm512_maddubs_epi16(hi, load2x256(q8 + 32, q8 + 96));                                            \
            /* vpdpwssd: the sub-block scale times each pair sum, added in one instruction */                                   \
            sumi = _mm512_dpwssd_epi32(sumi, k4_scale_pair(sm512, 2 * j, 2 * j + 2), p0);                                         \
            sumi = _mm512_dpwssd_epi32(sumi, k4_scale_pair(sm512, 2 * j + 1, 2 * j + 3), p1);                                     \
        }                                                                                                                        \
        acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i].d * F16(w[i].d)), _mm512_cvtepi32_ps(sumi), acc);                              \
    }

T512 static float dot_q4_K_avx512(int n, const void *wv, const void *av) {
    const block_q4_K *w = wv;
    const block_q8_K *a = av;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    K4_512_BODY(w[i].qs, lo = _mm512_and_si512(qb, m4); hi = _mm512_and_si512(_mm512_srli_epi16(qb, 4), m4);)
    return _mm512_reduce_add_ps(acc) + hsum_ps_m128(acc_m);
}

T512 static float dot_q5_K_avx512(int n, const void *wv, const void *av) {
    const block_q5_K *w = wv;
    const block_q8_K *a = av;
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    /* fifth bits: bit 2j of qh for slice j's low sub-block, 2j+1 for its high one;
     * the two 256-bit halves are slices j and j+1. A byte mask of each bit
     * (vptestmb) adds 16 to the nibbles it marks (one masked add). */
#define Q5_LO_HI                                                                                                                 \
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w[i].qh));                                    \
    const __m512i bit0 = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(1 << (2 * j + 2))), 1); \
    const __m512i bit1 = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j + 2))), 1); \
    lo = _mm512_and_si512(qb, m4);                                                                                               \
    hi = _mm512_and_si512(_mm512_srli_epi16(qb, 4), m4);                                                                         \
    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, bit0), lo, b4);                                                     \
    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, bit1), hi, b4);
    K4_512_BODY(w[i].qs, Q5_LO_HI)
#undef Q5_LO_HI
    return _mm512_reduce_add_ps(acc) + hsum_ps_m128(acc_m);
}
#undef K4_512_BODY

/* Q6_K with 512-bit registers: the 64 low-bit bytes of a 128-value half are
 * one register holding two 32-value slices, paired with 64 contiguous
 * activation bytes; each 16-value group's scale comes from one vpermw. */
T512 static inline __m512i q6_scale_idx(int first) { /* int16 lane j -> scale first + j / 8 */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_setr_epi16(first, first, first, first, first, first, first, first, first + 1, first + 1,
                                                                       first + 1, first + 1, first + 1, first + 1, first + 1, first + 1)),
                              _mm256_setr_epi16(first + 2, first + 2, first + 2, first + 2, first + 2, first + 2, first + 2, first + 2, first + 3,
                                                first + 3, first + 3, first + 3, first + 3, first + 3, first + 3, first + 3),
                              1);
}

T512 static float dot_q6_K_avx512(int n, const void *wv, const void *av) {
    const block_q6_K *w = wv;
    const block_q8_K *a = av;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi64(0), _mm256_set1_epi64x(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_set1_epi64(4), _mm256_set1_epi64x(6), 1);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512((const void *)(w[i].ql + 64 * h));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h)));
            /* slices 0,1: low nibbles with qh bits 0-1 / 2-3; slices 2,3: high nibbles with bits 4-5 / 6-7 */
            const __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_lo), m2), 4));
            const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_hi), m2), 4));
            const int8_t *q8 = a[i].qs + 128 * h;
            const __m512i p01 = _mm512_maddubs_epi16(q01, _mm512_loadu_si512((const void *)q8));
            const __m512i p23 = _mm512_maddubs_epi16(q23, _mm512_loadu_si512((const void *)(q8 + 64)));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p01, _mm512_permutexvar_epi16(q6_scale_idx(8 * h), sc512)));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p23, _mm512_permutexvar_epi16(q6_scale_idx(8 * h + 4), sc512)));
        }
        const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a[i].bsums));
        const __m256i isum = _mm256_sub_epi32(_mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1)), _mm256_slli_epi32(corr, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * F16(w[i].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum_ps(acc);
}

#define I32X16(i) _mm512_set1_epi32(i)
#define F32X16(i) _mm512_set1_ps((float)(i))
#define LANE0_I512(t) _mm_cvtsi128_si32(_mm512_castsi512_si128(t)) /* (a lane, not reduce_add: its C additions would overflow) */
#define LANE0_F512(t) _mm_cvtss_f32(_mm512_castps512_ps128(t))
#define DPB512_STEP(acc) _mm512_dpbusd_epi32(acc, u, v)
#define FMA512_STEP(acc) _mm512_fmadd_ps(u, v, acc)
PEAK_FN(T512, int8_peak_avx512, __m512i, EACH16, 16, 64, _mm512_set1_epi8(1), I32X16, DPB512_STEP, _mm512_add_epi32, LANE0_I512)
PEAK_FN(T512, f32_peak_avx512, __m512, EACH16, 16, 16, _mm512_set1_ps(1.0f), F32X16, FMA512_STEP, _mm512_add_ps, LANE0_F512)

/* The AVX2-VNNI table's kernels (built for AVX-512 VNNI's vpdpbusd) plus the
 * 512-bit and 16-row kernels. */
static const plumb_kernels avx512_vnni = {
    .name = "avx512-vnni",
    .dot_f32 = dot_f32,
    .attend = attend,
    .attend_group = attend_group_512,
    .dot = {
        [PLUMB_TYPE_F32] = dot_f32_w,
        [PLUMB_TYPE_F16] = dot_f16_w,
        [PLUMB_TYPE_BF16] = dot_bf16_w,
        [PLUMB_TYPE_Q8_0] = VNNI512_DOT_Q8_0,
        [PLUMB_TYPE_Q4_0] = VNNI512_DOT_Q4_0,
        [PLUMB_TYPE_Q4_1] = VNNI512_DOT_Q4_1,
        [PLUMB_TYPE_Q4_K] = dot_q4_K_avx512,
        [PLUMB_TYPE_Q5_K] = dot_q5_K_avx512,
        [PLUMB_TYPE_Q6_K] = dot_q6_K_avx512,
    },
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_avx512, [PLUMB_TYPE_Q4_0] = dot8_q4_0_avx512, [PLUMB_TYPE_Q4_1] = dot8_q4_1_avx512, [PLUMB_TYPE_Q4_K] = dot8_q4_K_avx512, [PLUMB_TYPE_Q5_K] = dot8_q5_K_avx512, [PLUMB_TYPE_Q6_K] = dot8_q6_K_avx512},
    .dot8_runs = {[PLUMB_TYPE_Q8_0] = 2, [PLUMB_TYPE_Q4_0] = 2, [PLUMB_TYPE_Q4_1] = 2}, /* (measured: matmul.c) */
    .dot8_256 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_vnni512, [PLUMB_TYPE_Q4_0] = dot8_q4_0_vnni512, [PLUMB_TYPE_Q4_1] = dot8_q4_1_vnni512,
                 [PLUMB_TYPE_Q4_K] = dot8_q4_K_vnni512, [PLUMB_TYPE_Q5_K] = dot8_q5_K_vnni512, [PLUMB_TYPE_Q6_K] = dot8_q6_K_vnni512},
    .gemm8 = {[PLUMB_TYPE_Q8_0] = gemm8_q8_0_vnni512, [PLUMB_TYPE_Q4_0] = gemm8_q4_0_vnni512, [PLUMB_TYPE_Q4_1] = gemm8_q4_1_vnni512},
    .dot4t = AVX2_DOT4T_K,
    .gemm16 = {[PLUMB_TYPE_Q8_0] = gemm16_q8_0_avx512, [PLUMB_TYPE_Q4_0] = gemm16_q4_0_avx512, [PLUMB_TYPE_Q4_1] = gemm16_q4_1_avx512,
               [PLUMB_TYPE_Q4_K] = gemm16_q4_K_avx512, [PLUMB_TYPE_Q5_K] = gemm16_q5_K_avx512, [PLUMB_TYPE_Q6_K] = gemm16_q6_K_avx512},
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = AVX2_QUANTIZE_Q8A,
    .quantize_q8K = AVX2_QUANTIZE_Q8K,
    .silu_mul = silu_mul,
    .int8_peak = int8_peak_avx512,
    .f32_peak = f32_peak_avx512,
};

const plumb_kernels *plumb_kernels_avx512_vnni(void) { return &avx512_vnni; }
#else
const plumb_kernels *plumb_kernels_avx512_vnni(void) { return NULL; }
#endif
