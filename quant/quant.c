/* quant.c — the type trait table, reference quantizers and dequantizers
 * (ggml-compatible), and the scalar reference dot products. */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "../core/util.h"

#define FP16(x) plumb_fp32_to_fp16(x)
#define F32(h) plumb_fp16_to_fp32(h)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, via the 1.5*2^23 trick (as ggml does;
 * valid for |fval| < 2^22, which quantized magnitudes always are). */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- plain float types ---------------------------------------------------- */

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = plumb_fp16_to_fp32(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = plumb_fp32_to_fp16(src[i]);
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = plumb_bf16_to_fp32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = plumb_fp32_to_bf16(src[i]);
}

/* ---- Q8_0 ----------------------------------------------------------------- */

static void q8_0_from_float(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = MAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = FP16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void q8_0_to_float(const void *src, float *y, int64_t n) {
    const block_q8_0 *x = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = F32(x[i].d);
        for (int j = 0; j < QK8_0; j++) *y++ = x[i].qs[j] * d;
    }
}

/* ---- Q4_0: value = (q - 8) * d, low nibbles hold elements 0..15 ------------ */

static void q4_0_from_float(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = FP16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const uint8_t xi0 = MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t xi1 = MIN(15, (int8_t)(x[QK4_0 / 2 + j] * id + 8.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

static void q4_0_to_float(const void *src, float *y, int64_t n) {
    const block_q4_0 *x = src;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = F32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- Q4_1: value = q * d + m ----------------------------------------------- */

static void q4_1_from_float(const float *x, void *dst, int64_t n) {
    block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = FP16(d);
        y[i].m = FP16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const uint8_t xi0 = MIN(15, (int8_t)((x[j] - min) * id + 0.5f));
            const uint8_t xi1 = MIN(15, (int8_t)((x[QK4_1 / 2 + j] - min) * id + 0.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

static void q4_1_to_float(const void *src, float *y, int64_t n) {
    const block_q4_1 *x = src;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = F32(x[i].d), m = F32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- K-quant helpers (ggml's weighted least-squares scale search) ---------- */

static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_mad += weights[i] * diff * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                mad += weights[i] * diff * diff;
            }
            if (mad < best_mad) {
                memcpy(L, Laux, (size_t)n);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-32 scales and mins,
 * themselves quantized to 6 bits against the block's d and dmin. */
static void quantize_k_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                              plumb_half *d_out, plumb_half *dmin_out, uint8_t *packed) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                     0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(packed, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)MIN(63, nearest_int(inv_scale * scales[j]));
        uint8_t lm = (uint8_t)MIN(63, nearest_int(inv_min * mins[j]));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= ((ls >> 4) << 6);
            packed[j - 0] |= ((lm >> 4) << 6);
        }
    }
    *d_out = FP16(max_scale / 63.f);
    *dmin_out = FP16(max_min / 63.f);
    /* re-derive the levels against the scales as stored */
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        plumb_get_scale_min_k4(j, packed, &sc, &m);
        const float d = F32(*d_out) * sc;
        if (!d) continue;
        const float dm = F32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
        }
    }
}

/* ---- Q4_K ------------------------------------------------------------------ */

static void q4_K_from_float(const float *x, void *dst, int64_t n) {
    block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k_scales(x, 15, -1.f, 20, L, &y[i].d, &y[i].dmin, y[i].scales);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (uint8_t)(L[j + l + 32] << 4);
    }
}

static void q4_K_to_float(const void *src, float *y, int64_t n) {
    const block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = F32(x[i].d), min = F32(x[i].dmin);
        uint8_t sc, m;
        for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
            plumb_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            plumb_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* ---- Q5_K ------------------------------------------------------------------ */

static void q5_K_from_float(const float *x, void *dst, int64_t n) {
    block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k_scales(x, 31, -0.5f, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int nn = 0; nn < QK_K; nn += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[nn + j], l2 = L[nn + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static void q5_K_to_float(const void *src, float *y, int64_t n) {
    const block_q5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = F32(x[i].d), min = F32(x[i].dmin);
        uint8_t sc, m, u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < QK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
            plumb_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            plumb_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* ---- Q6_K: value = d * scale[16-group] * (q - 32), q six bits --------------- */

static void q6_K_from_float(const float *x, void *dst, int64_t n) {
    block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) { max_abs_scale = fabsf(scale); max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(block_q6_K));
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = FP16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            float d = F32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = q1 | (uint8_t)(q3 << 4);
                ql[l + 32] = q2 | (uint8_t)(q4 << 4);
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

static void q6_K_to_float(const void *src, float *y, int64_t n) {
    const block_q6_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = F32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int nn = 0; nn < QK_K; nn += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int q1 = (int)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ---- activation quantizers -------------------------------------------------- */

void plumb_quantize_q8a(const float *x, block_q8a *y, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = MAX(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = d;
        y[i].s = d * (float)sum;
    }
}

static void q8a_to_float(const void *src, float *y, int64_t n) {
    const block_q8a *x = src;
    for (int64_t i = 0; i < n / 32; i++)
        for (int j = 0; j < 32; j++) *y++ = x[i].d * x[i].qs[j];
}

void plumb_quantize_q8_K(const float *x, block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void q8_K_to_float(const void *src, float *y, int64_t n) {
    const block_q8_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) *y++ = x[i].d * x[i].qs[j];
}
static void q8_K_from_float(const float *x, void *y, int64_t n) { plumb_quantize_q8_K(x, y, n); }

/* ---- scalar reference dot products ------------------------------------------ */

float plumb_dot_q8_0_q8a_ref(int n, const void *wv, const void *av) {
    const block_q8_0 *w = wv;
    const block_q8a *a = av;
    float sum = 0;
    for (int i = 0; i < n / 32; i++) {
        int s = 0;
        for (int j = 0; j < 32; j++) s += w[i].qs[j] * a[i].qs[j];
        sum += F32(w[i].d) * a[i].d * (float)s;
    }
    return sum;
}

float plumb_dot_q4_0_q8a_ref(int n, const void *wv, const void *av) {
    const block_q4_0 *w = wv;
    const block_q8a *a = av;
    float sum = 0;
    for (int i = 0; i < n / 32; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            s += ((w[i].qs[j] & 0xF) - 8) * a[i].qs[j];
            s += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        }
        sum += F32(w[i].d) * a[i].d * (float)s;
    }
    return sum;
}

float plumb_dot_q4_1_q8a_ref(int n, const void *wv, const void *av) {
    const block_q4_1 *w = wv;
    const block_q8a *a = av;
    float sum = 0;
    for (int i = 0; i < n / 32; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            s += (w[i].qs[j] & 0xF) * a[i].qs[j];
            s += (w[i].qs[j] >> 4) * a[i].qs[j + 16];
        }
        sum += F32(w[i].d) * a[i].d * (float)s + F32(w[i].m) * a[i].s;
    }
    return sum;
}

float plumb_dot_q4_K_q8K_ref(int n, const void *wv, const void *av) {
    const block_q4_K *w = wv;
    const block_q8_K *a = av;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *q = w[i].qs;
        const int8_t *q8 = a[i].qs;
        int sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 64; j++, q += 32, q8 += 64) {
            uint8_t sc0, m0, sc1, m1;
            plumb_get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            plumb_get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xF) * q8[l];
                s1 += (q[l] >> 4) * q8[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) +
                    m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        sum += a[i].d * (F32(w[i].d) * (float)sumi - F32(w[i].dmin) * (float)summ);
    }
    return sum;
}

float plumb_dot_q5_K_q8K_ref(int n, const void *wv, const void *av) {
    const block_q5_K *w = wv;
    const block_q8_K *a = av;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *q = w[i].qs, *qh = w[i].qh;
        const int8_t *q8 = a[i].qs;
        int sumi = 0, summ = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K / 64; j++, q += 32, q8 += 64, u1 <<= 2, u2 <<= 2) {
            uint8_t sc0, m0, sc1, m1;
            plumb_get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            plumb_get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) * q8[l];
                s1 += ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) * q8[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) +
                    m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        sum += a[i].d * (F32(w[i].d) * (float)sumi - F32(w[i].dmin) * (float)summ);
    }
    return sum;
}

float plumb_dot_q6_K_q8K_ref(int n, const void *wv, const void *av) {
    const block_q6_K *w = wv;
    const block_q8_K *a = av;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = w[i].ql, *qh = w[i].qh;
        const int8_t *sc = w[i].scales, *q8 = a[i].qs;
        int sumi = 0;
        for (int nn = 0; nn < QK_K; nn += 128, ql += 64, qh += 32, sc += 8, q8 += 128) {
            int s[8] = {0};
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int q1 = (int)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                s[is + 0] += q1 * q8[l + 0];
                s[is + 2] += q2 * q8[l + 32];
                s[is + 4] += q3 * q8[l + 64];
                s[is + 6] += q4 * q8[l + 96];
            }
            for (int g = 0; g < 8; g++) sumi += sc[g] * s[g];
        }
        sum += a[i].d * F32(w[i].d) * (float)sumi;
    }
    return sum;
}

/* ---- the table ------------------------------------------------------------------ */

static const plumb_type_traits traits[PLUMB_TYPE_COUNT] = {
    [PLUMB_TYPE_F32] = {"F32", 1, 4, 1, PLUMB_ACT_F32, f32_to_float, f32_from_float},
    [PLUMB_TYPE_F16] = {"F16", 1, 2, 1, PLUMB_ACT_F32, f16_to_float, f16_from_float},
    [PLUMB_TYPE_BF16] = {"BF16", 1, 2, 1, PLUMB_ACT_F32, bf16_to_float, bf16_from_float},
    [PLUMB_TYPE_Q4_0] = {"Q4_0", QK4_0, sizeof(block_q4_0), 1, PLUMB_ACT_Q8, q4_0_to_float, q4_0_from_float},
    [PLUMB_TYPE_Q4_1] = {"Q4_1", QK4_1, sizeof(block_q4_1), 1, PLUMB_ACT_Q8, q4_1_to_float, q4_1_from_float},
    [PLUMB_TYPE_Q5_0] = {"Q5_0", 32, 22, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_Q5_1] = {"Q5_1", 32, 24, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), 1, PLUMB_ACT_Q8, q8_0_to_float, q8_0_from_float},
    [PLUMB_TYPE_Q8_1] = {"Q8_1", 32, 36, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_Q2_K] = {"Q2_K", QK_K, 84, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_Q3_K] = {"Q3_K", QK_K, 110, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_K), 1, PLUMB_ACT_Q8K, q4_K_to_float, q4_K_from_float},
    [PLUMB_TYPE_Q5_K] = {"Q5_K", QK_K, sizeof(block_q5_K), 1, PLUMB_ACT_Q8K, q5_K_to_float, q5_K_from_float},
    [PLUMB_TYPE_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_K), 1, PLUMB_ACT_Q8K, q6_K_to_float, q6_K_from_float},
    [PLUMB_TYPE_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_K), 0, PLUMB_ACT_F32, q8_K_to_float, q8_K_from_float},
    [PLUMB_TYPE_I8] = {"I8", 1, 1, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_I16] = {"I16", 1, 2, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_I32] = {"I32", 1, 4, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_I64] = {"I64", 1, 8, 0, PLUMB_ACT_F32, NULL, NULL},
    [PLUMB_TYPE_F64] = {"F64", 1, 8, 0, PLUMB_ACT_F32, NULL, NULL},
};

/* keep q8a's converter reachable for tests of the activation path */
void plumb_q8a_to_float(const void *src, float *y, int64_t n);
void plumb_q8a_to_float(const void *src, float *y, int64_t n) { q8a_to_float(src, y, n); }

const plumb_type_traits *plumb_type_get(uint32_t type) {
    if (type >= PLUMB_TYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *plumb_type_name(uint32_t type) {
    const plumb_type_traits *t = plumb_type_get(type);
    return t ? t->name : "unknown";
}

int plumb_type_from_name(const char *name) {
    for (int i = 0; i < PLUMB_TYPE_COUNT; i++)
        if (traits[i].name && strcasecmp(traits[i].name, name) == 0) return i;
    return -1;
}

uint64_t plumb_type_row_bytes(uint32_t type, uint64_t n) {
    const plumb_type_traits *t = plumb_type_get(type);
    uint64_t out;
    if (!t || n % (uint64_t)t->block_size) return 0;
    if (!plumb_mul_ok(n / (uint64_t)t->block_size, t->type_size, &out)) return 0;
    return out;
}
