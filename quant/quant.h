/* quant.h — tensor element types and their trait table.
 *
 * Type ids are ggml's (GGUF stores them), so the enum is append-only and has
 * holes where ggml has types plumb does not run. Block layouts are
 * bit-compatible with ggml's, so files from llama.cpp's llama-quantize load
 * and dequantize to the same values. */
#ifndef PLUMB_QUANT_H
#define PLUMB_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PLUMB_TYPE_F32 = 0,
    PLUMB_TYPE_F16 = 1,
    PLUMB_TYPE_Q4_0 = 2,
    PLUMB_TYPE_Q4_1 = 3,
    PLUMB_TYPE_Q5_0 = 6, /* recognised, not run */
    PLUMB_TYPE_Q5_1 = 7, /* recognised, not run */
    PLUMB_TYPE_Q8_0 = 8,
    PLUMB_TYPE_Q8_1 = 9, /* recognised, not run */
    PLUMB_TYPE_Q2_K = 10, /* recognised, not run */
    PLUMB_TYPE_Q3_K = 11, /* recognised, not run */
    PLUMB_TYPE_Q4_K = 12,
    PLUMB_TYPE_Q5_K = 13,
    PLUMB_TYPE_Q6_K = 14,
    PLUMB_TYPE_Q8_K = 15, /* activation type for K-quant dot products */
    PLUMB_TYPE_I8 = 24,
    PLUMB_TYPE_I16 = 25,
    PLUMB_TYPE_I32 = 26,
    PLUMB_TYPE_I64 = 27,
    PLUMB_TYPE_F64 = 28,
    PLUMB_TYPE_BF16 = 30,
    PLUMB_TYPE_COUNT = 31,
} plumb_type;

#define QK4_0 32
#define QK4_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t plumb_half;

typedef struct { plumb_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;          /* 18 B */
typedef struct { plumb_half d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;       /* 20 B */
typedef struct { plumb_half d; int8_t qs[QK8_0]; } block_q8_0;               /* 34 B */
typedef struct {
    plumb_half d, dmin;
    uint8_t scales[K_SCALE_SIZE]; /* 8 six-bit scales and 8 six-bit mins */
    uint8_t qs[QK_K / 2];
} block_q4_K;                                                                 /* 144 B */
typedef struct {
    plumb_half d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;                                                                 /* 176 B */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    plumb_half d;
} block_q6_K;                                                                 /* 210 B */
/* Q6_K's 8-row repacked layout (quant/repack.c): where the 32-byte step of
 * kind KIND (0: ql step 16h+st, 1: ql step 16h+8+st, 2: qh step 8h+st) lies in
 * a group's super-block, st 0..7 of half h 0..1. The kernels read a group's
 * quants front to back in this order, one stream for the hardware prefetcher. */
#define Q6X8_STEP(h, st, kind) (144 + 768 * (h) + 192 * ((st) >> 1) + 64 * (kind) + 32 * ((st) & 1))
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K; /* 292 B */

/* What the activation vector is turned into before a dot product with a row
 * of this weight type. */
typedef enum {
    PLUMB_ACT_F32 = 0, /* plain floats */
    PLUMB_ACT_Q8 = 1,  /* block_q8a: 32 int8 + float scale + float scaled sum */
    PLUMB_ACT_Q8K = 2, /* block_q8_K */
} plumb_act_kind;

/* Internal activation block for the 32-wide types (not a GGUF type): float
 * scale for accuracy, and d*sum(qs) so Q4_1's offset folds in cheaply. */
typedef struct { float d, s; int8_t qs[32]; } block_q8a; /* 40 B */

typedef struct {
    const char *name;
    int block_size;   /* elements per block */
    size_t type_size; /* bytes per block */
    int runnable;     /* plumb can run matrices of this type */
    plumb_act_kind act;
    /* dst[0..n) = values of src; n is a multiple of block_size */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* reference quantizer (deterministic, ggml-compatible where ggml's is) */
    void (*from_float)(const float *src, void *dst, int64_t n);
} plumb_type_traits;

/* NULL for ids plumb does not know. */
const plumb_type_traits *plumb_type_get(uint32_t type);
const char *plumb_type_name(uint32_t type);
/* Parses "q4_0", "F16", ... ; -1 if unknown. */
int plumb_type_from_name(const char *name);
/* Bytes for n elements (n a multiple of the block size); 0 on overflow. */
uint64_t plumb_type_row_bytes(uint32_t type, uint64_t n);

/* Activation quantizers (reference). n a multiple of 32 / 256. */
void plumb_quantize_q8a(const float *x, block_q8a *y, int64_t n);
void plumb_quantize_q8_K(const float *x, block_q8_K *y, int64_t n);

/* Reference (scalar) dot products of one weight row with quantized activations.
 * n is the row length in elements. These define the answer SIMD kernels must give. */
float plumb_dot_q8_0_q8a_ref(int n, const void *w, const void *a);
float plumb_dot_q4_0_q8a_ref(int n, const void *w, const void *a);
float plumb_dot_q4_1_q8a_ref(int n, const void *w, const void *a);
float plumb_dot_q4_K_q8K_ref(int n, const void *w, const void *a);
float plumb_dot_q5_K_q8K_ref(int n, const void *w, const void *a);
float plumb_dot_q6_K_q8K_ref(int n, const void *w, const void *a);

/* 8-row interleaved layouts for the fast matrix-vector kernels (repack.c).
 * src holds 8 consecutive rows; dst receives 8 * row_bytes bytes. */
int plumb_repack8_supported(uint32_t type);
void plumb_repack8(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t cols, uint8_t *dst);
/* out[0..8) = dot of each of the group's rows with the activations (reference). */
void plumb_dot8_ref(uint32_t type, int n, const void *w8, const void *act, float *out);

/* 6-bit scale/min unpacking shared by Q4_K and Q5_K. */
static inline void plumb_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

#endif
