/* avx2.c — AVX2/FMA/F16C kernels. Compiled for generic x86-64 with these
 * functions alone targeting AVX2, and chosen at run time (matmul.c), so one
 * binary runs on any x86-64. Scalar twins: scalar.c and quant.c. */
#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
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

#include "avx2_quant.inc"

static const plumb_kernels avx2 = {
    .name = "avx2",
    .dot_f32 = dot_f32,
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
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_avx2, [PLUMB_TYPE_Q4_0] = dot8_q4_0_avx2},
    .gemm8 = {[PLUMB_TYPE_Q8_0] = gemm8_q8_0_avx2, [PLUMB_TYPE_Q4_0] = gemm8_q4_0_avx2},
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = AVX2_QUANTIZE_Q8A,
    .quantize_q8K = AVX2_QUANTIZE_Q8K,
};

/* The same table with AVX-VNNI multiply-adds for the 32-wide block types. */
static const plumb_kernels avx2_vnni = {
    .name = "avx2-vnni",
    .dot_f32 = dot_f32,
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
    .dot8 = {[PLUMB_TYPE_Q8_0] = dot8_q8_0_vnni, [PLUMB_TYPE_Q4_0] = dot8_q4_0_vnni},
    .gemm8 = {[PLUMB_TYPE_Q8_0] = gemm8_q8_0_vnni, [PLUMB_TYPE_Q4_0] = gemm8_q4_0_vnni},
    .f16_to_f32 = f16_to_f32,
    .quantize_q8a = AVX2_QUANTIZE_Q8A,
    .quantize_q8K = AVX2_QUANTIZE_Q8K,
};

const plumb_kernels *plumb_kernels_avx2(void) { return &avx2; }
const plumb_kernels *plumb_kernels_avx2_vnni(void) { return &avx2_vnni; }
#else
const plumb_kernels *plumb_kernels_avx2(void) { return NULL; }
const plumb_kernels *plumb_kernels_avx2_vnni(void) { return NULL; }
#endif
