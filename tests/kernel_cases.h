/* kernel_cases.h — every kernel of a table against the scalar reference on
 * random data of awkward sizes. Shared by the Criterion suite (x86-64) and
 * tests/kernel_check.c (the NEON build, run under qemu-aarch64). */
#ifndef PLUMB_KERNEL_CASES_H
#define PLUMB_KERNEL_CASES_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/util.h"
#include "../quant/quant.h"
#include "../simd/kernels.h"

typedef struct { int passed, failed; } kc_result;

static void kc_fail(kc_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kc_fail(kc_result *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FAIL ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    r->failed++;
}

static void kc_random(float *x, int n, plumb_rng *rng, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * (2.0f * plumb_rng_f32(rng) - 1.0f);
    if (n > 5) x[n / 3] = 4 * scale; /* an outlier, as real activations have */
}

/* |a - b| within float accumulation error of the sum of |terms|. */
static int kc_close(double a, double b, double abs_sum) { return fabs(a - b) <= 3e-5 * abs_sum + 1e-6; }

static void kc_check_f32(const plumb_kernels *k, kc_result *r) {
    const int sizes[] = {1, 7, 8, 15, 33, 100, 257, 1000, 4096};
    plumb_rng rng;
    plumb_rng_seed(&rng, 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        kc_random(a, n, &rng, 1);
        kc_random(b, n, &rng, 1);
        double ref = 0, abs_sum = 0;
        for (int i = 0; i < n; i++) { ref += (double)a[i] * b[i]; abs_sum += fabs((double)a[i] * b[i]); }
        float got = k->dot_f32(n, a, b);
        if (kc_close(got, ref, abs_sum)) r->passed++;
        else kc_fail(r, "%s dot_f32 n=%d: %g vs %g", k->name, n, got, ref);
        free(a);
        free(b);
    }
}

static void kc_check_type(const plumb_kernels *k, uint32_t type, kc_result *r) {
    const plumb_type_traits *t = plumb_type_get(type);
    const int big = t->block_size == 1 ? 1 : t->block_size;
    const int mult[] = {1, 2, 3, 11, 17};
    const int odd[] = {1, 5, 9, 31, 100}; /* for the float types: sizes not a multiple of the SIMD width */
    plumb_rng rng;
    plumb_rng_seed(&rng, 1000 + type);
    for (int s = 0; s < 5; s++) {
        int n = t->block_size == 1 ? odd[s] * 33 + s : mult[s] * big * (t->block_size == QK_K ? 1 : 8);
        float *w = malloc(sizeof(float) * (size_t)n), *x = malloc(sizeof(float) * (size_t)n), *wd = malloc(sizeof(float) * (size_t)n);
        uint8_t *wq = malloc(plumb_type_row_bytes(type, (uint64_t)n));
        kc_random(w, n, &rng, 0.1f);
        kc_random(x, n, &rng, 2.0f);
        t->from_float(w, wq, n);
        t->to_float(wq, wd, n);
        double abs_sum = 0;
        for (int i = 0; i < n; i++) abs_sum += fabs((double)wd[i] * x[i]);
        const plumb_kernels *ref = plumb_kernels_scalar();
        float got, want;
        if (t->act == PLUMB_ACT_F32) {
            got = k->dot[type](n, wq, x);
            want = ref->dot[type](n, wq, x);
        } else {
            /* the table's activation quantizer must produce the reference bytes */
            size_t ab = plumb_matmul_act_bytes(type, n, 1);
            uint8_t *a_ref = malloc(ab), *a_k = malloc(ab);
            if (t->act == PLUMB_ACT_Q8) { ref->quantize_q8a(x, (block_q8a *)a_ref, n); k->quantize_q8a(x, (block_q8a *)a_k, n); }
            else { ref->quantize_q8K(x, (block_q8_K *)a_ref, n); k->quantize_q8K(x, (block_q8_K *)a_k, n); }
            if (memcmp(a_ref, a_k, ab) != 0) kc_fail(r, "%s quantize for %s n=%d differs from the reference", k->name, t->name, n);
            else r->passed++;
            got = k->dot[type](n, wq, a_ref);
            want = ref->dot[type](n, wq, a_ref);
            free(a_ref);
            free(a_k);
        }
        if (kc_close(got, want, abs_sum)) r->passed++;
        else kc_fail(r, "%s dot %s n=%d: %.7g vs reference %.7g", k->name, t->name, n, got, want);
        free(w); free(x); free(wd); free(wq);
    }
}

/* The 8-row kernels over repacked weights against the row-at-a-time reference. */
static void kc_check_dot8(const plumb_kernels *k, uint32_t type, kc_result *r) {
    const plumb_type_traits *t = plumb_type_get(type);
    plumb_rng rng;
    plumb_rng_seed(&rng, 77 + type);
    const int q8k = t->act == PLUMB_ACT_Q8K;
    const int sizes[] = {32, 64, 96, 2048, 2080}, sizes_k[] = {256, 512, 768, 2048, 2816};
    for (int si = 0; si < 5; si++) {
        const int n = q8k ? sizes_k[si] : sizes[si];
        const size_t rb = plumb_type_row_bytes(type, (uint64_t)n);
        uint8_t *w = malloc(8 * rb), *p = malloc(8 * rb);
        float *x = malloc(sizeof(float) * (size_t)n), *row = malloc(sizeof(float) * (size_t)n);
        void *a = malloc(plumb_matmul_act_bytes(type, n, 1));
        for (int rr = 0; rr < 8; rr++) {
            kc_random(row, n, &rng, 0.1f);
            t->from_float(row, w + (size_t)rr * rb, n);
        }
        kc_random(x, n, &rng, 2.0f);
        if (q8k) plumb_quantize_q8_K(x, a, n);
        else plumb_quantize_q8a(x, a, n);
        plumb_repack8(type, w, rb, n, p);
        {   /* the layout holds the rows: unpacked back, the reference gives the same sums */
            float ref8[8];
            plumb_dot8_ref(type, n, p, a, ref8);
            for (int rr = 0; rr < 8; rr++) {
                const float want = plumb_kernels_scalar()->dot[type](n, w + (size_t)rr * rb, a);
                if (ref8[rr] == want) r->passed++;
                else kc_fail(r, "repack8 %s n=%d row %d: reference over the repacked rows %.7g vs %.7g", t->name, n, rr, ref8[rr], want);
            }
        }
        float got[8];
        k->dot8[type](n, p, a, got);
        if (k->gemm16[type]) { /* two groups (this one and one of other rows) x 4 tokens against dot8 */
            uint8_t *w2 = malloc(8 * rb), *p2 = malloc(8 * rb);
            for (int rr = 0; rr < 8; rr++) {
                kc_random(row, n, &rng, 0.1f);
                t->from_float(row, w2 + (size_t)rr * rb, n);
            }
            plumb_repack8(type, w2, rb, n, p2);
            void *acts[4];
            float outs[4][16], *op[4] = {outs[0], outs[1], outs[2], outs[3]};
            for (int tk = 0; tk < 4; tk++) { /* token tk: the activations scaled by tk + 1 */
                acts[tk] = malloc(plumb_matmul_act_bytes(type, n, 1));
                for (int i = 0; i < n; i++) row[i] = x[i] * (float)(tk + 1);
                if (q8k) plumb_quantize_q8_K(row, acts[tk], n);
                else plumb_quantize_q8a(row, acts[tk], n);
            }
            k->gemm16[type](n, p, p2, (const void *const *)acts, op);
            for (int tk = 0; tk < 4; tk++) {
                float single[16];
                k->dot8[type](n, p, acts[tk], single);
                k->dot8[type](n, p2, acts[tk], single + 8);
                for (int rr = 0; rr < 16; rr++) {
                    if (fabsf(outs[tk][rr] - single[rr]) <= 1e-4f * (fabsf(single[rr]) + 1)) r->passed++;
                    else kc_fail(r, "%s gemm16 %s n=%d token %d row %d: %.7g vs dot8 %.7g", k->name, t->name, n, tk, rr, outs[tk][rr], single[rr]);
                }
                free(acts[tk]);
            }
            free(w2);
            free(p2);
        }
        if (k->gemm8[type]) { /* the multi-token kernel: token tk gets the activations scaled by t+1 */
            for (int nt = 4; nt <= 4; nt++) {
                block_q8a *acts[4];
                float outs[4][8], *op[4] = {outs[0], outs[1], outs[2], outs[3]};
                for (int tk = 0; tk < nt; tk++) {
                    acts[tk] = malloc(sizeof(block_q8a) * (size_t)(n / 32));
                    for (int i = 0; i < n; i++) row[i] = x[i] * (float)(tk + 1);
                    plumb_quantize_q8a(row, acts[tk], n);
                }
                k->gemm8[type](n, p, (const void *const *)acts, op);
                for (int tk = 0; tk < nt; tk++) {
                    float single[8];
                    k->dot8[type](n, p, acts[tk], single);
                    for (int rr = 0; rr < 8; rr++) {
                        if (fabsf(outs[tk][rr] - single[rr]) <= 1e-4f * (fabsf(single[rr]) + 1)) r->passed++;
                        else kc_fail(r, "%s gemm8 %s n=%d nt=%d token %d row %d: %.7g vs dot8 %.7g", k->name, t->name, n, nt, tk, rr, outs[tk][rr], single[rr]);
                    }
                    free(acts[tk]);
                }
            }
        }
        float got256[8];
        if (k->dot8_256[type]) k->dot8_256[type](n, p, a, got256); /* the 256-bit twin */
        for (int rr = 0; rr < 8; rr++) {
            const float want = plumb_kernels_scalar()->dot[type](n, w + (size_t)rr * rb, a);
            t->to_float(w + (size_t)rr * rb, row, n);
            double abs_sum = 0;
            for (int i = 0; i < n; i++) abs_sum += fabs((double)row[i] * x[i]);
            if (kc_close(got[rr], want, abs_sum)) r->passed++;
            else kc_fail(r, "%s dot8 %s n=%d row %d: %.7g vs reference %.7g", k->name, t->name, n, rr, got[rr], want);
            if (!k->dot8_256[type]) continue;
            if (kc_close(got256[rr], want, abs_sum)) r->passed++;
            else kc_fail(r, "%s dot8_256 %s n=%d row %d: %.7g vs reference %.7g", k->name, t->name, n, rr, got256[rr], want);
        }
        free(w); free(p); free(x); free(row); free(a);
    }
}

/* four-token kernels against four single-token reference products */
static void kc_check_dot4t(const plumb_kernels *k, uint32_t type, kc_result *r) {
    const plumb_type_traits *t = plumb_type_get(type);
    const int sizes[] = {t->block_size, 3 * t->block_size, 11 * t->block_size};
    plumb_rng rng;
    plumb_rng_seed(&rng, 7 + type);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int n = sizes[s];
        const size_t rb = plumb_type_row_bytes(type, (uint64_t)n), ab = plumb_matmul_act_bytes(type, n, 1);
        float *x = malloc(sizeof(float) * (size_t)n * 4), *row = malloc(sizeof(float) * (size_t)n);
        uint8_t *w = malloc(rb), *a = malloc(ab * 4);
        kc_random(row, n, &rng, 1);
        t->from_float(row, w, n);
        t->to_float(w, row, n);
        const void *acts[4];
        for (int tk = 0; tk < 4; tk++) {
            kc_random(x + (size_t)tk * n, n, &rng, 1);
            if (t->act == PLUMB_ACT_Q8) plumb_kernels_scalar()->quantize_q8a(x + (size_t)tk * n, (void *)(a + ab * tk), n);
            else plumb_kernels_scalar()->quantize_q8K(x + (size_t)tk * n, (void *)(a + ab * tk), n);
            acts[tk] = a + ab * tk;
        }
        float got[4];
        k->dot4t[type](n, w, acts, got);
        for (int tk = 0; tk < 4; tk++) {
            const float want = plumb_kernels_scalar()->dot[type](n, w, acts[tk]);
            double abs_sum = 0;
            for (int i = 0; i < n; i++) abs_sum += fabs((double)row[i] * x[(size_t)tk * n + i]);
            if (kc_close(got[tk], want, abs_sum)) r->passed++;
            else kc_fail(r, "%s dot4t %s n=%d token %d: %.7g vs reference %.7g", k->name, t->name, n, tk, got[tk], want);
        }
        free(x); free(row); free(w); free(a);
    }
}

/* attention for one head against the scalar table's, on awkward head sizes
 * and lengths (rows scattered in memory, as a paged KV cache has them) */
static void kc_check_attend(const plumb_kernels *k, kc_result *r) {
    const plumb_kernels *ref = plumb_kernels_scalar();
    if (!k->attend) { kc_fail(r, "%s has no attention kernel", k->name); return; }
    const int hds[] = {8, 12, 64, 80, 128}, lens[] = {1, 5, 8, 17, 64, 130};
    plumb_rng rng;
    plumb_rng_seed(&rng, 3);
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
        for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++) {
            const int hd = hds[a], len = lens[b];
            float *q = malloc(sizeof(float) * (size_t)hd), *kv = malloc(sizeof(float) * (size_t)hd * (size_t)len * 4);
            const float **kr = malloc(sizeof(float *) * (size_t)len), **vr = malloc(sizeof(float *) * (size_t)len);
            float *att = malloc(sizeof(float) * (size_t)len), *want = malloc(sizeof(float) * (size_t)hd), *got = malloc(sizeof(float) * (size_t)hd);
            kc_random(q, hd, &rng, 2);
            kc_random(kv, hd * len * 4, &rng, 2);
            for (int p = 0; p < len; p++) { /* every other slot, keys and values interleaved */
                kr[p] = kv + (size_t)(4 * p) * hd;
                vr[p] = kv + (size_t)(4 * p + 2) * hd;
            }
            const float scale = 1.0f / sqrtf((float)hd);
            ref->attend(hd, len, q, kr, vr, scale, att, want);
            k->attend(hd, len, q, kr, vr, scale, att, got);
            int ok = 1;
            for (int i = 0; i < hd; i++) ok &= fabsf(got[i] - want[i]) <= 1e-5f * 2 + 1e-5f * fabsf(want[i]);
            if (ok) r->passed++;
            else kc_fail(r, "%s attend hd=%d len=%d: out[0] %.7g vs reference %.7g", k->name, hd, len, got[0], want[0]);
            free(q); free(kv); free(kr); free(vr); free(att); free(want); free(got);
        }
}

/* attend_group (where a table has it) against the same table's attend, one
 * head at a time: the same floats, bit for bit (the forward pass groups
 * heads differently for different thread counts), over group sizes odd
 * and even up to twelve, head sizes it groups and ones it hands back to
 * attend (80, 96 on AVX2), one with a tail of columns past 16 (72), and
 * lengths with and without a tail of eight */
static void kc_check_attend_group(const plumb_kernels *k, kc_result *r) {
    if (!k->attend_group) return;
    const int hds[] = {64, 72, 80, 96, 128}, lens[] = {1, 7, 8, 45, 130}, gs[] = {2, 3, 4, 8, 12};
    plumb_rng rng;
    plumb_rng_seed(&rng, 4);
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < 5; c++) {
                const int hd = hds[a], len = lens[b], g = gs[c];
                float *q = malloc(sizeof(float) * (size_t)(hd * g)), *kv = malloc(sizeof(float) * (size_t)hd * (size_t)len * 4);
                const float **kr = malloc(sizeof(float *) * (size_t)len), **vr = malloc(sizeof(float *) * (size_t)len);
                float *att = malloc(sizeof(float) * (size_t)(len * g)), *want = malloc(sizeof(float) * (size_t)(hd * g)),
                      *got = malloc(sizeof(float) * (size_t)(hd * g));
                kc_random(q, hd * g, &rng, 2);
                kc_random(kv, hd * len * 4, &rng, 2);
                for (int p = 0; p < len; p++) { /* rows apart in memory, as in the paged cache */
                    kr[p] = kv + (size_t)(4 * p + 1) * hd;
                    vr[p] = kv + (size_t)(4 * p + 3) * hd;
                }
                const float scale = 1.0f / sqrtf((float)hd);
                for (int h = 0; h < g; h++) k->attend(hd, len, q + h * hd, kr, vr, scale, att, want + h * hd);
                k->attend_group(hd, len, g, q, kr, vr, scale, att, got);
                if (!memcmp(got, want, sizeof(float) * (size_t)(hd * g))) r->passed++;
                else kc_fail(r, "%s attend_group hd=%d len=%d g=%d differs from attend", k->name, hd, len, g);
                free(q); free(kv); free(kr); free(vr); free(att); free(want); free(got);
            }
}

/* The table's activation quantizers give the reference's bytes on the
 * cases rounding and search order decide: values landing on .5 after
 * scaling (ties go to even), the greatest magnitude held by both signs (the
 * reference takes the first), an all-zero block, negative zeros, tiny
 * values, a block whose greatest value is its last. */
static void kc_check_quantize(const plumb_kernels *k, kc_result *r) {
    enum { N = 4 * QK_K };
    float x[N];
    plumb_rng rng;
    plumb_rng_seed(&rng, 77);
    for (int c = 0; c < 8; c++) {
        for (int i = 0; i < N; i++) x[i] = (float)((int)(plumb_rng_f32(&rng) * 255) - 127) + (c % 2 ? 0.5f : 0.0f); /* whole and half steps */
        switch (c) {
        case 0: case 1: x[40] = 127; x[300] = -127; x[600] = 127; break; /* scale 1: the .5s are ties */
        case 2: for (int i = 0; i < N; i++) x[i] = (i % 7 == 0) ? -0.0f : x[i] * 1e-30f; break;
        case 3: memset(x + QK_K, 0, sizeof(float) * QK_K); memset(x, 0, sizeof(float) * 32); break;
        case 4: x[10] = -200; x[20] = 200; x[QK_K + 255] = 300; x[2 * QK_K] = 250; x[2 * QK_K + 1] = -250; break;
        case 5: for (int i = 0; i < N; i++) x[i] = 2.0f * plumb_rng_f32(&rng) - 1.0f; break;
        default: kc_random(x, N, &rng, 3.0f); x[N - 1] = -50; break;
        }
        block_q8a a_ref[N / 32], a_k[N / 32];
        block_q8_K k_ref[N / QK_K], k_k[N / QK_K];
        memset(a_ref, 0, sizeof a_ref), memset(a_k, 0, sizeof a_k), memset(k_ref, 0, sizeof k_ref), memset(k_k, 0, sizeof k_k);
        plumb_kernels_scalar()->quantize_q8a(x, a_ref, N);
        k->quantize_q8a(x, a_k, N);
        plumb_kernels_scalar()->quantize_q8K(x, k_ref, N);
        k->quantize_q8K(x, k_k, N);
        if (memcmp(a_ref, a_k, sizeof a_ref)) kc_fail(r, "%s quantize_q8a case %d differs from the reference", k->name, c);
        else r->passed++;
        if (memcmp(k_ref, k_k, sizeof k_ref)) kc_fail(r, "%s quantize_q8K case %d differs from the reference", k->name, c);
        else r->passed++;
    }
}

/* silu_mul against the reference: within a few float ulps (the SIMD tables
 * compute e^x by a polynomial), over gates from -100 (e^100 overflows) to
 * 100 and odd lengths (the tail past the vector width) */
static void kc_check_silu_mul(const plumb_kernels *k, kc_result *r) {
    enum { N = 1003 };
    float g[N], u[N], want[N], got[N];
    plumb_rng rng;
    plumb_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) {
        g[i] = i < 400 ? -100.0f + 200.0f * (float)i / 399 : 20.0f * (2.0f * plumb_rng_f32(&rng) - 1.0f);
        u[i] = 2.0f * plumb_rng_f32(&rng) - 1.0f;
    }
    g[500] = 0, g[501] = -0.0f, g[502] = 88.5f, g[503] = -88.5f, g[504] = 1e-20f;
    for (int n = N; n >= N - 9; n -= 3) {
        plumb_silu_mul_ref(n, g, u, want);
        k->silu_mul(n, g, u, got);
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (!(fabsf(got[i] - want[i]) <= 4e-7f * fabsf(want[i]) + 1e-30f)) bad = i;
        if (bad < 0) r->passed++;
        else kc_fail(r, "%s silu_mul n=%d: out[%d] (gate %g) %.9g vs reference %.9g", k->name, n, bad, g[bad], got[bad], want[bad]);
    }
}

static kc_result kernel_check_table(const plumb_kernels *k) {
    kc_result r = {0, 0};
    kc_check_f32(k, &r);
    kc_check_quantize(k, &r);
    kc_check_silu_mul(k, &r);
    kc_check_attend(k, &r);
    kc_check_attend_group(k, &r);
    const uint32_t types[] = {PLUMB_TYPE_F32, PLUMB_TYPE_F16, PLUMB_TYPE_BF16, PLUMB_TYPE_Q8_0, PLUMB_TYPE_Q4_0,
                              PLUMB_TYPE_Q4_1, PLUMB_TYPE_Q4_K, PLUMB_TYPE_Q5_K, PLUMB_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (!k->dot[types[i]]) { kc_fail(&r, "%s has no kernel for %s", k->name, plumb_type_name(types[i])); continue; }
        kc_check_type(k, types[i], &r);
        if (k->dot8[types[i]]) kc_check_dot8(k, types[i], &r);
        if (k->dot4t[types[i]]) kc_check_dot4t(k, types[i], &r);
    }
    return r;
}

#endif
