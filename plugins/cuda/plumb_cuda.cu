// plumb_cuda.cu — the CUDA plugin: a range of transformer layers on the GPU.
//
// Weights stay in their GGUF types on the device (Q8_0, Q4_0, F16, F32; other
// types are converted to F16 on the host at load). Decode-sized batches run
// dequantize-in-kernel matrix-vector products (one warp per output row,
// up to 8 tokens per pass over the weights); larger batches dequantize each
// matrix to F16 once per call and multiply with cuBLAS on tensor cores. The
// KV cache is paged exactly like the host's: each sequence's block table
// comes with the batch. Every CUDA call is checked; errors travel back as
// text, never as exit().
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../../core/backend.h"
}

#define TYPE_F32 0
#define TYPE_F16 1
#define TYPE_Q4_0 2
#define TYPE_Q8_0 8

#define CHECK(call, what)                                                                                           \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                    \
            snprintf(err, err_len, "%s: %s", what, cudaGetErrorString(e_));                                         \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)

struct dtensor {
    uint32_t type;
    int64_t rows, cols;
    size_t row_bytes;
    void *d;
    __half *f16; /* dequantized copy for tensor-core batches, when memory allows */
};

// Activations for the integer path: per 32 values, a float scale and 32
// int8, so a Q4_0/Q8_0 row is multiplied with __dp4a (4 products per
// instruction) and x costs ~1 byte per element to read, not 4.
struct q8blk { float d; float s; int32_t q[8]; };

struct dlayer {
    dtensor attn_norm, ffn_norm, wq, wk, wv, wo, bq, bk, bv, w_gate, w_up, w_down;
};

struct handle {
    plumb_backend_model_desc desc;
    dlayer *layers;
    dtensor output_norm, output;
    float *k_pool, *v_pool;          // [block][layer][kv_block][kv_dim]
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits; // device scratch
    __half *wscratch, *ascratch;     // dequantized weights / activations for cuBLAS
    q8blk *xq;                       // int8 activations for the dp4a path
    size_t wscratch_elems;
    int *pos, *seq, *table, *rows_out;
    int max_blocks;
    cublasHandle_t blas;
    size_t bytes, peak;
};

// ---------------------------------------------------------------- kernels

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void k_rmsnorm(const float *x, const float *w, float *out, int d, float eps) {
    const float *xr = x + (size_t)blockIdx.x * d;
    float *o = out + (size_t)blockIdx.x * d;
    __shared__ float part[32];
    float ss = 0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x + 31) / 32 ? part[threadIdx.x] : 0;
        v = warp_sum(v);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float scale = rsqrtf(part[0] / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

// y[t][r] = W[r] . x[t], NT tokens per pass; one warp per row.
template <int NT>
__global__ void k_matvec(uint32_t type, const uint8_t *W, size_t row_bytes, int rows, int cols, const float *x, float *y, int n_tok_total) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const uint8_t *wr = W + (size_t)warp * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0;
    if (type == TYPE_Q4_0) {
        const int nb = cols / 32;
        for (int b = lane; b < nb; b += 32) {
            const uint8_t *blk = wr + (size_t)b * 18;
            const float d = __half2float(*(const __half *)blk);
            const uint16_t *qs = (const uint16_t *)(blk + 2);
            float w[32];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint16_t v = qs[j];
                w[2 * j] = (float)((v & 0xF) - 8) * d;
                w[2 * j + 16] = (float)(((v >> 4) & 0xF) - 8) * d;
                w[2 * j + 1] = (float)(((v >> 8) & 0xF) - 8) * d;
                w[2 * j + 17] = (float)((v >> 12) - 8) * d;
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float4 *xv = (const float4 *)(x + (size_t)t * cols + b * 32);
                float s = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float4 xx = xv[j];
                    s += w[4 * j] * xx.x + w[4 * j + 1] * xx.y + w[4 * j + 2] * xx.z + w[4 * j + 3] * xx.w;
                }
                acc[t] += s;
            }
        }
    } else if (type == TYPE_Q8_0) {
        const int nb = cols / 32;
        for (int b = lane; b < nb; b += 32) {
            const uint8_t *blk = wr + (size_t)b * 34;
            const float d = __half2float(*(const __half *)blk);
            const int8_t *qs = (const int8_t *)(blk + 2);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float *xv = x + (size_t)t * cols + b * 32;
                float s = 0;
#pragma unroll
                for (int j = 0; j < 32; j++) s += (float)qs[j] * xv[j];
                acc[t] += s * d;
            }
        }
    } else if (type == TYPE_F16) {
        const __half2 *w2 = (const __half2 *)wr;
        for (int i = lane; i < cols / 2; i += 32) {
            const float2 wf = __half22float2(w2[i]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float2 xv = ((const float2 *)(x + (size_t)t * cols))[i];
                acc[t] += wf.x * xv.x + wf.y * xv.y;
            }
        }
    } else { // F32
        const float *wf = (const float *)wr;
        for (int i = lane; i < cols; i += 32)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[t] += wf[i] * x[(size_t)t * cols + i];
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + warp] = s;
    }
}


__global__ void k_quantize_q8(const float *x, q8blk *out, int n_blocks) {
    const int b = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (b >= n_blocks) return;
    const float v = x[(size_t)b * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    const int q = __float2int_rn(v * id);
    int sum = q;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    ((int8_t *)out[b].q)[lane] = (int8_t)q;
    if (lane == 0) { out[b].d = d; out[b].s = d * (float)sum; }
}

// y[t][r] = W[r] . x[t] for Q4_0 / Q8_0 rows against q8 activations; one
// warp per row, each lane one 32-element block at a time.
template <int NT>
__global__ void k_matvec_q(uint32_t type, const uint8_t *W, size_t row_bytes, int rows, int cols, const q8blk *xq, float *y) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const uint8_t *wr = W + (size_t)warp * row_bytes;
    const int nb = cols / 32;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0;
    for (int b = lane; b < nb; b += 32) {
        if (type == TYPE_Q4_0) {
            const uint8_t *blk = wr + (size_t)b * 18;
            const float d = __half2float(*(const __half *)blk);
            const uint16_t *qs = (const uint16_t *)(blk + 2);
            int lo[4], hi[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t v = (uint32_t)qs[2 * j] | ((uint32_t)qs[2 * j + 1] << 16);
                lo[j] = (int)(v & 0x0F0F0F0Fu);
                hi[j] = (int)((v >> 4) & 0x0F0F0F0Fu);
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const q8blk *a = xq + (size_t)t * nb + b;
                int s = 0;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s = __dp4a(lo[j], a->q[j], s);
                    s = __dp4a(hi[j], a->q[j + 4], s);
                }
                acc[t] += d * (a->d * (float)s - 8.0f * a->s);
            }
        } else { /* Q8_0 */
            const uint8_t *blk = wr + (size_t)b * 34;
            const float d = __half2float(*(const __half *)blk);
            const uint16_t *qs = (const uint16_t *)(blk + 2);
            int w[8];
#pragma unroll
            for (int j = 0; j < 8; j++) w[j] = (int)((uint32_t)qs[2 * j] | ((uint32_t)qs[2 * j + 1] << 16));
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const q8blk *a = xq + (size_t)t * nb + b;
                int s = 0;
#pragma unroll
                for (int j = 0; j < 8; j++) s = __dp4a(w[j], a->q[j], s);
                acc[t] += d * a->d * (float)s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + warp] = s;
    }
}

// W (any supported type) -> F16 [rows][cols]
__global__ void k_dequant_f16(uint32_t type, const uint8_t *W, size_t row_bytes, int rows, int cols, __half *out) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    const int r = (int)(i / cols), c = (int)(i % cols);
    const uint8_t *wr = W + (size_t)r * row_bytes;
    float v;
    if (type == TYPE_Q4_0) {
        const uint8_t *blk = wr + (size_t)(c / 32) * 18;
        const int j = c % 32;
        const uint8_t q = blk[2 + (j & 15)];
        v = (float)((j < 16 ? (q & 0xF) : (q >> 4)) - 8) * __half2float(*(const __half *)blk);
    } else if (type == TYPE_Q8_0) {
        const uint8_t *blk = wr + (size_t)(c / 32) * 34;
        v = (float)((const int8_t *)(blk + 2))[c % 32] * __half2float(*(const __half *)blk);
    } else if (type == TYPE_F16) {
        v = __half2float(((const __half *)wr)[c]);
    } else {
        v = ((const float *)wr)[c];
    }
    out[i] = __float2half(v);
}

__global__ void k_to_half(const float *x, __half *y, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(x[i]);
}

__global__ void k_add_bias(float *x, const float *b, int n, int d) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * d) x[i] += b[i % d];
}

__global__ void k_add(float *x, const float *y, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void k_silu_mul(float *a, const float *b, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = a[i];
        a[i] = g / (1.0f + __expf(-g)) * b[i];
    }
}

// RoPE on q and k of each token, then k and v into the token's KV slot.
__global__ void k_rope_store(float *q, float *k, const float *v, const int *pos, const int *seq, const int *table, int max_blocks, int n_head,
                             int n_head_kv, int hd, int n_rot, int neox, float base, float *kp, float *vp, int layer, int n_layers, int kv_block) {
    const int t = blockIdx.x, kv_dim = n_head_kv * hd;
    const int p = pos[t];
    for (int i = threadIdx.x; i < (n_head + n_head_kv) * (n_rot / 2); i += blockDim.x) {
        const int h = i / (n_rot / 2), j = i % (n_rot / 2);
        float *vec = h < n_head ? q + (size_t)t * n_head * hd + h * hd : k + (size_t)t * kv_dim + (h - n_head) * hd;
        const double theta = (double)p * pow((double)base, -2.0 * j / n_rot);
        const float c = (float)cos(theta), s = (float)sin(theta);
        const int a = neox ? j : 2 * j, b = neox ? j + n_rot / 2 : 2 * j + 1;
        const float x0 = vec[a], x1 = vec[b];
        vec[a] = x0 * c - x1 * s;
        vec[b] = x0 * s + x1 * c;
    }
    __syncthreads();
    const int block = table[seq[t] * max_blocks + p / kv_block];
    const size_t off = (((size_t)block * n_layers + layer) * kv_block + p % kv_block) * kv_dim;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        kp[off + i] = k[(size_t)t * kv_dim + i];
        vp[off + i] = v[(size_t)t * kv_dim + i];
    }
}

// One block per (token, head): scores over the sequence, softmax, values.
__global__ void k_attention(const float *q, float *out, const int *pos, const int *seq, const int *table, int max_blocks, int n_head,
                            int n_head_kv, int hd, const float *kp, const float *vp, int layer, int n_layers, int kv_block) {
    extern __shared__ float sc[];
    const int t = blockIdx.x / n_head, h = blockIdx.x % n_head, kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * hd;
    const int len = pos[t] + 1;
    const float *qv = q + (size_t)t * n_head * hd + h * hd;
    const int *tab = table + seq[t] * max_blocks;
    const float scale = rsqrtf((float)hd);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int p = warp; p < len; p += nw) {
        const float *kv = kp + (((size_t)tab[p / kv_block] * n_layers + layer) * kv_block + p % kv_block) * kv_dim + kvh * hd;
        float s = 0;
        for (int i = lane; i < hd; i += 32) s += qv[i] * kv[i];
        s = warp_sum(s);
        if (lane == 0) sc[p] = s * scale;
    }
    __syncthreads();
    __shared__ float red[2];
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int p = 0; p < len; p++) m = fmaxf(m, sc[p]);
        red[0] = m;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < len; p += blockDim.x) sc[p] = __expf(sc[p] - red[0]);
    __syncthreads();
    if (threadIdx.x == 0) {
        float z = 0;
        for (int p = 0; p < len; p++) z += sc[p];
        red[1] = z;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0;
        for (int p = 0; p < len; p++)
            acc += sc[p] * vp[(((size_t)tab[p / kv_block] * n_layers + layer) * kv_block + p % kv_block) * kv_dim + kvh * hd + i];
        out[(size_t)t * n_head * hd + h * hd + i] = acc / red[1];
    }
}

__global__ void k_gather_rows(const float *x, const int *rows, float *out, int n_rows, int d) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n_rows * d) out[i] = x[(size_t)rows[i / d] * d + i % d];
}

// ---------------------------------------------------------------- host side

static size_t grid(size_t n, int threads) { return (n + threads - 1) / threads; }

static int upload(handle *h, const plumb_backend_tensor *src, dtensor *dst, char *err, size_t err_len) {
    memset(dst, 0, sizeof *dst);
    if (!src->data) return 0;
    dst->rows = src->rows;
    dst->cols = src->cols;
    const int native = src->type == TYPE_F32 || src->type == TYPE_F16 || src->type == TYPE_Q4_0 || src->type == TYPE_Q8_0;
    if (!native) {
        snprintf(err, err_len, "weight type %u is not supported by the CUDA plugin (F32, F16, Q8_0, Q4_0 are)", src->type);
        return -1;
    }
    dst->type = src->type;
    dst->row_bytes = src->row_bytes;
    const size_t bytes = src->row_bytes * (size_t)src->rows;
    cudaError_t e = cudaMalloc(&dst->d, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        snprintf(err, err_len, "out of GPU memory: %zu bytes for weights (%zu free of %zu)", bytes, fr, tot);
        return -1;
    }
    e = cudaMemcpy(dst->d, src->data, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "copying weights: %s", cudaGetErrorString(e));
        return -1;
    }
    h->bytes += bytes;
    /* Batched products multiply F16 weights on tensor cores: dequantize once
     * here rather than every step, if the card has room (keeping 4 GiB). */
    size_t fr = 0, tot = 0;
    const size_t f16_bytes = (size_t)src->rows * (size_t)src->cols * 2;
    if (src->rows > 1 && cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr > f16_bytes + ((size_t)4 << 30) &&
        cudaMalloc(&dst->f16, f16_bytes) == cudaSuccess) {
        k_dequant_f16<<<grid((size_t)src->rows * src->cols, 256), 256>>>(dst->type, (const uint8_t *)dst->d, dst->row_bytes, (int)dst->rows,
                                                                        (int)dst->cols, dst->f16);
        h->bytes += f16_bytes;
    }
    return 0;
}

static void *dev_alloc(handle *h, size_t bytes, char *err, size_t err_len, const char *what) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        snprintf(err, err_len, "out of GPU memory: %zu bytes for %s (%zu free of %zu)", bytes, what, fr, tot);
        return NULL;
    }
    h->bytes += bytes;
    return p;
}

static int dev_info(char *name, size_t name_len, size_t *fr, size_t *tot, char *err, size_t err_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, err_len, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return -1;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) { snprintf(err, err_len, "cannot query the GPU"); return -1; }
    snprintf(name, name_len, "%s", p.name);
    if (cudaMemGetInfo(fr, tot) != cudaSuccess) { snprintf(err, err_len, "cannot query GPU memory"); return -1; }
    return 0;
}

static void unload(void *hv);

static void *load(const plumb_backend_model_desc *d, char *err, size_t err_len) {
    handle *h = (handle *)calloc(1, sizeof(handle));
    if (!h) { snprintf(err, err_len, "out of host memory"); return NULL; }
    h->desc = *d;
    h->layers = (dlayer *)calloc((size_t)d->n_layers, sizeof(dlayer));
    const int kv_dim = d->n_head_kv * d->head_dim, nb = d->max_batch;
    size_t kv, wmax = 0;
    if (cublasCreate(&h->blas) != CUBLAS_STATUS_SUCCESS) { snprintf(err, err_len, "cuBLAS did not initialise"); goto fail; }
    for (int l = 0; l < d->n_layers; l++) {
        const plumb_backend_layer *s = &d->layers[l];
        dlayer *t = &h->layers[l];
        const plumb_backend_tensor *src[] = {&s->attn_norm, &s->ffn_norm, &s->wq, &s->wk, &s->wv, &s->wo, &s->bq, &s->bk, &s->bv, &s->w_gate, &s->w_up, &s->w_down};
        dtensor *dst[] = {&t->attn_norm, &t->ffn_norm, &t->wq, &t->wk, &t->wv, &t->wo, &t->bq, &t->bk, &t->bv, &t->w_gate, &t->w_up, &t->w_down};
        for (int i = 0; i < 12; i++) {
            if (upload(h, src[i], dst[i], err, err_len)) goto fail;
            if (src[i]->rows * src[i]->cols > (int64_t)wmax && src[i]->rows > 1) wmax = (size_t)(src[i]->rows * src[i]->cols);
        }
    }
    if (d->has_head) {
        if (upload(h, &d->output_norm, &h->output_norm, err, err_len) || upload(h, &d->output, &h->output, err, err_len)) goto fail;
        if ((size_t)(d->output.rows * d->output.cols) > wmax) wmax = (size_t)(d->output.rows * d->output.cols);
    }
    kv = (size_t)d->n_kv_blocks * d->n_layers * d->kv_block * kv_dim;
    h->max_blocks = d->n_kv_blocks;
    if (!(h->k_pool = (float *)dev_alloc(h, kv * 4, err, err_len, "the KV cache (keys)")) ||
        !(h->v_pool = (float *)dev_alloc(h, kv * 4, err, err_len, "the KV cache (values)")) ||
        !(h->x = (float *)dev_alloc(h, (size_t)nb * d->n_embd * 4, err, err_len, "activations")) ||
        !(h->xb = (float *)dev_alloc(h, (size_t)nb * d->n_embd * 4, err, err_len, "activations")) ||
        !(h->q = (float *)dev_alloc(h, (size_t)nb * d->n_embd * 4, err, err_len, "queries")) ||
        !(h->k = (float *)dev_alloc(h, (size_t)nb * kv_dim * 4, err, err_len, "keys")) ||
        !(h->v = (float *)dev_alloc(h, (size_t)nb * kv_dim * 4, err, err_len, "values")) ||
        !(h->att = (float *)dev_alloc(h, (size_t)nb * d->n_embd * 4, err, err_len, "attention")) ||
        !(h->hb = (float *)dev_alloc(h, (size_t)nb * d->n_ff * 4, err, err_len, "ffn")) ||
        !(h->hb2 = (float *)dev_alloc(h, (size_t)nb * d->n_ff * 4, err, err_len, "ffn")) ||
        !(h->logits = (float *)dev_alloc(h, (size_t)nb * (d->has_head ? d->n_vocab : 1) * 4, err, err_len, "logits")) ||
        !(h->wscratch = (__half *)dev_alloc(h, wmax * 2, err, err_len, "dequantized weights")) ||
        !(h->xq = (q8blk *)dev_alloc(h, (size_t)8 * ((d->n_ff > d->n_embd ? d->n_ff : d->n_embd) / 32 + 1) * sizeof(q8blk), err, err_len, "int8 activations")) ||
        !(h->ascratch = (__half *)dev_alloc(h, (size_t)nb * (d->n_ff > d->n_embd ? d->n_ff : d->n_embd) * 2, err, err_len, "activations")) ||
        !(h->pos = (int *)dev_alloc(h, (size_t)nb * 4, err, err_len, "positions")) ||
        !(h->seq = (int *)dev_alloc(h, (size_t)nb * 4, err, err_len, "sequences")) ||
        !(h->rows_out = (int *)dev_alloc(h, (size_t)nb * 4, err, err_len, "rows")) ||
        !(h->table = (int *)dev_alloc(h, (size_t)d->n_seq_max * d->n_kv_blocks * 4, err, err_len, "block tables")))
        goto fail;
    h->wscratch_elems = wmax;
    h->peak = h->bytes;
    return h;
fail:
    unload(h);
    return NULL;
}

static void free_t(dtensor *t) {
    if (t->d) cudaFree(t->d);
    if (t->f16) cudaFree(t->f16);
}

static void unload(void *hv) {
    handle *h = (handle *)hv;
    if (!h) return;
    for (int l = 0; h->layers && l < h->desc.n_layers; l++) {
        dlayer *t = &h->layers[l];
        dtensor *all[] = {&t->attn_norm, &t->ffn_norm, &t->wq, &t->wk, &t->wv, &t->wo, &t->bq, &t->bk, &t->bv, &t->w_gate, &t->w_up, &t->w_down};
        for (int i = 0; i < 12; i++) free_t(all[i]);
    }
    free_t(&h->output_norm);
    free_t(&h->output);
    void *bufs[] = {h->k_pool, h->v_pool, h->x, h->xb, h->q, h->k, h->v, h->att, h->hb, h->hb2, h->logits, h->wscratch, h->ascratch, h->pos, h->seq, h->rows_out, h->table, h->xq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) if (bufs[i]) cudaFree(bufs[i]);
    if (h->blas) cublasDestroy(h->blas);
    free(h->layers);
    free(h);
}

// y[n][rows] = x[n][cols] W^T
static int matmul(handle *h, const dtensor *W, const float *x, int n, float *y, char *err, size_t err_len) {
    const int rows = (int)W->rows, cols = (int)W->cols;
    if (n <= 8 && (W->type == TYPE_Q4_0 || W->type == TYPE_Q8_0) && getenv("PLUMB_CUDA_FLOAT_MATVEC") == NULL) {
        const int threads = 256, blocks = (int)grid((size_t)rows * 32, threads), nb = cols / 32;
        k_quantize_q8<<<grid((size_t)n * nb * 32, 256), 256>>>(x, h->xq, n * nb);
        for (int t0 = 0; t0 < n; t0 += 4) {
            const int nt = n - t0 < 4 ? n - t0 : 4;
            const q8blk *xt = h->xq + (size_t)t0 * nb;
            float *yt = y + (size_t)t0 * rows;
            switch (nt) {
            case 1: k_matvec_q<1><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt); break;
            case 2: k_matvec_q<2><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt); break;
            case 3: k_matvec_q<3><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt); break;
            default: k_matvec_q<4><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt); break;
            }
        }
    } else if (n <= 8) {
        const int threads = 256, blocks = (int)grid((size_t)rows * 32, threads);
        for (int t0 = 0; t0 < n; t0 += 4) {
            const int nt = n - t0 < 4 ? n - t0 : 4;
            const float *xt = x + (size_t)t0 * cols;
            float *yt = y + (size_t)t0 * rows;
            switch (nt) {
            case 1: k_matvec<1><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt, n); break;
            case 2: k_matvec<2><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt, n); break;
            case 3: k_matvec<3><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt, n); break;
            default: k_matvec<4><<<blocks, threads>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, xt, yt, n); break;
            }
        }
    } else {
        /* tensor cores: F16 weights (kept, or dequantized now), x to F16, F32 accumulation */
        const __half *wf = W->f16;
        if (!wf) {
            k_dequant_f16<<<grid((size_t)rows * cols, 256), 256>>>(W->type, (const uint8_t *)W->d, W->row_bytes, rows, cols, h->wscratch);
            wf = h->wscratch;
        }
        k_to_half<<<grid((size_t)n * cols, 256), 256>>>(x, h->ascratch, (size_t)n * cols);
        const float one = 1, zero = 0;
        cublasStatus_t st = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, wf, CUDA_R_16F, cols, h->ascratch, CUDA_R_16F,
                                         cols, &zero, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            snprintf(err, err_len, "cublasGemmEx failed (status %d) for a %dx%d by %d product", (int)st, rows, cols, n);
            return -1;
        }
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(err, err_len, "matrix kernel: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static int forward(void *hv, const plumb_backend_batch *b, float *x_host, float *logits_host, char *err, size_t err_len) {
    handle *h = (handle *)hv;
    const plumb_backend_model_desc *d = &h->desc;
    const int n = b->n, D = d->n_embd, kv_dim = d->n_head_kv * d->head_dim, ff = d->n_ff;
    int n_out = 0;
    int rows_host[4096];
    if (n > d->max_batch) { snprintf(err, err_len, "batch of %d exceeds the plugin's %d", n, d->max_batch); return -1; }
    CHECK(cudaMemcpy(h->x, x_host, (size_t)n * D * 4, cudaMemcpyHostToDevice), "copying hidden states");
    CHECK(cudaMemcpy(h->pos, b->pos, (size_t)n * 4, cudaMemcpyHostToDevice), "copying positions");
    CHECK(cudaMemcpy(h->seq, b->seq, (size_t)n * 4, cudaMemcpyHostToDevice), "copying sequences");
    CHECK(cudaMemcpy(h->table, b->block_table, (size_t)d->n_seq_max * b->max_blocks_per_seq * 4, cudaMemcpyHostToDevice), "copying block tables");
    for (int l = 0; l < d->n_layers; l++) {
        const dlayer *L = &h->layers[l];
        k_rmsnorm<<<n, 256>>>(h->x, (const float *)L->attn_norm.d, h->xb, D, d->rms_eps);
        if (matmul(h, &L->wq, h->xb, n, h->q, err, err_len) || matmul(h, &L->wk, h->xb, n, h->k, err, err_len) ||
            matmul(h, &L->wv, h->xb, n, h->v, err, err_len))
            return -1;
        if (L->bq.d) k_add_bias<<<grid((size_t)n * D, 256), 256>>>(h->q, (const float *)L->bq.d, n, D);
        if (L->bk.d) k_add_bias<<<grid((size_t)n * kv_dim, 256), 256>>>(h->k, (const float *)L->bk.d, n, kv_dim);
        if (L->bv.d) k_add_bias<<<grid((size_t)n * kv_dim, 256), 256>>>(h->v, (const float *)L->bv.d, n, kv_dim);
        k_rope_store<<<n, 128>>>(h->q, h->k, h->v, h->pos, h->seq, h->table, b->max_blocks_per_seq, d->n_head, d->n_head_kv, d->head_dim, d->n_rot,
                                 d->rope_neox, d->rope_freq_base, h->k_pool, h->v_pool, l, d->n_layers, d->kv_block);
        int max_len = 0;
        for (int t = 0; t < n; t++) if (b->pos[t] + 1 > max_len) max_len = b->pos[t] + 1;
        if ((size_t)max_len * 4 > 160 * 1024) { snprintf(err, err_len, "context %d too long for the attention kernel", max_len); return -1; }
        if (max_len * 4 > 48 * 1024) cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, max_len * 4);
        k_attention<<<n * d->n_head, 128, (size_t)max_len * 4>>>(h->q, h->att, h->pos, h->seq, h->table, b->max_blocks_per_seq, d->n_head, d->n_head_kv,
                                                                 d->head_dim, h->k_pool, h->v_pool, l, d->n_layers, d->kv_block);
        if (matmul(h, &L->wo, h->att, n, h->xb, err, err_len)) return -1;
        k_add<<<grid((size_t)n * D, 256), 256>>>(h->x, h->xb, (size_t)n * D);
        k_rmsnorm<<<n, 256>>>(h->x, (const float *)L->ffn_norm.d, h->xb, D, d->rms_eps);
        if (matmul(h, &L->w_gate, h->xb, n, h->hb, err, err_len) || matmul(h, &L->w_up, h->xb, n, h->hb2, err, err_len)) return -1;
        k_silu_mul<<<grid((size_t)n * ff, 256), 256>>>(h->hb, h->hb2, (size_t)n * ff);
        if (matmul(h, &L->w_down, h->hb, n, h->xb, err, err_len)) return -1;
        k_add<<<grid((size_t)n * D, 256), 256>>>(h->x, h->xb, (size_t)n * D);
    }
    if (d->has_head) {
        for (int t = 0; t < n; t++) if (b->want[t]) rows_host[n_out++] = t;
        if (n_out) {
            CHECK(cudaMemcpy(h->rows_out, rows_host, (size_t)n_out * 4, cudaMemcpyHostToDevice), "copying output rows");
            k_gather_rows<<<grid((size_t)n_out * D, 256), 256>>>(h->x, h->rows_out, h->att, n_out, D);
            k_rmsnorm<<<n_out, 256>>>(h->att, (const float *)h->output_norm.d, h->xb, D, d->rms_eps);
            if (matmul(h, &h->output, h->xb, n_out, h->logits, err, err_len)) return -1;
            CHECK(cudaMemcpy(logits_host, h->logits, (size_t)n_out * d->n_vocab * 4, cudaMemcpyDeviceToHost), "copying logits");
        }
    } else {
        CHECK(cudaMemcpy(x_host, h->x, (size_t)n * D * 4, cudaMemcpyDeviceToHost), "copying hidden states back");
    }
    CHECK(cudaDeviceSynchronize(), "running the layers");
    return 0;
fail:
    return -1;
}

static size_t peak_bytes(void *hv) { return hv ? ((handle *)hv)->peak : 0; }

static double copy_bandwidth(void) {
    const size_t n = (size_t)2 << 30; /* 2 GiB each way */
    void *a = NULL, *b = NULL;
    double best = 0;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) goto done;
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(e0);
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms > 0 && 2.0 * n / (ms * 1e-3) > best) best = 2.0 * n / (ms * 1e-3);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
done:
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    return best;
}

static const plumb_backend_iface iface = {PLUMB_BACKEND_ABI, "cuda", dev_info, load, unload, forward, peak_bytes, copy_bandwidth};

extern "C" const plumb_backend_iface *plumb_cuda_backend_entry(void) { return &iface; }
