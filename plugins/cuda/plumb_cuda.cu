// plumb_cuda.cu — the CUDA plugin: a range of transformer layers on the GPU.
//
// Layout of the work (one decode step of n tokens, per layer):
//   rmsnorm -> activations        int8 blocks (F16 for F16 weights or the F16 GEMM)
//   [q;k;v] = Wqkv . act          one product over the three matrices, stacked
//   rope + bias, k/v -> cache     the cache is paged like the host's, in F16
//   attention                     one block per (token, kv head), online softmax
//   x += Wo . act
//   rmsnorm -> activations
//   [gate;up] = Wgu . act         stacked like q/k/v
//   act = silu(gate) * up
//   x += Wdown . act
//
// Weights: Q4_0 and Q8_0 stay quantized on the device, split into a quant
// array (16 or 32 bytes a block, so a warp reads them as 16-byte vectors)
// and an array of F16 block scales; Q4_K into quants and 16-byte super-block
// headers. F16 stays F16; F32 matrices become F16.
// Products:
//   n <= 8 tokens, Q4_0/Q8_0/Q4_K: a warp per row, int8 activations, __dp4a;
//     the weights are read once for all n tokens (decode is bandwidth bound).
//   n > 8, Q4_0/Q8_0: an F16 tensor-core GEMM (mma.m16n8k16) on weights
//     turned into F16 fragments in registers (PLUMB_CUDA_GEMM=reg, default;
//     i8: an int8 GEMM on the quants as stored; f16: an earlier WMMA GEMM
//     dequantizing 64-wide slices in shared memory), with split-K (partials
//     summed in a fixed order, so results are deterministic).
//   F16 weights: cuBLAS on tensor cores; Q4_K at n > 8: dequantized to F16
//     in a scratch buffer, then cuBLAS.
// The whole step is captured once per (tokens, wanted logits) into a CUDA
// graph and replayed: a 7B model issues ~330 kernels a token, and launching
// them one by one costs more than the weights take to stream.
//
// Every CUDA call is checked; errors travel back as text, never as exit().
#include <cublas_v2.h>
#include <climits>
#include <cxxabi.h>
#include <cuda.h> // CUtensorMap (types only: the driver's encoder comes through the runtime's entry-point query)
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <cuda_profiler_api.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
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
#define TYPE_Q4_K 12

#define QK 32          // values per quant block
#define MATVEC_MAX_N 8 // tokens the matrix-vector kernels take in one pass
#define PDL_OFF 0      // programmatic dependent launch (PLUMB_CUDA_PDL): never
#define PDL_DECODE 1   // in steps of up to MATVEC_MAX_N tokens
#define PDL_ALL 2      // in every step
#define PDL_PRODUCTS 3 // in decode steps, and for the products of batch steps (their weights load while the kernel before them ends)
#define ACT_Q8 1       // activation formats a product can ask for
#define ACT_F16 2
#define GRAPH_SLOTS 32
#define SEEN_SHAPES 64
#define TILE_COUNTERS 65536 // output tiles a split-K product may have and still reduce in-kernel
#define KPROF_MAX 4096  // kernels timed in one step
#define CHAIN_SLOTS 4   // greedy chain steps whose picks can be in flight to the host
// what a step's kernels are besides its layers (run_layers, graph_for)
#define STEP_FUSED 1 // the layers as one persistent kernel (k_decode_fused)
#define STEP_CHAIN 2 // a greedy chain's step: ends in k_pick_next
#define STEP_MMA_ROPE 4 // a step of a token a sequence whose tensor-core attention does RoPE and the KV writes (PLUMB_CUDA_ROPE=...+mma)
#define KPROF_STATS 512 // (kernel, step size) pairs

#define CHECK(call, what)                                                                                           \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                    \
            snprintf(err, err_len, "%s: %s", what, cudaGetErrorString(e_));                                         \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)

#define AMAPS 16 // activation tensor maps a handle keeps
#define WG_ROWS_256 0
#define WG_ROWS_AUTO 1
#define WG_ROWS_TUNE 2
#define WG_ROWS_128X2 3 // 33-64 tokens: 128-row tiles, two blocks a multiprocessor (the default)

// A weight matrix on the device: quantized (qs + scales) or F16.
struct dmat {
    uint32_t type; // TYPE_Q4_0, TYPE_Q8_0, TYPE_Q4_K or TYPE_F16 (F32 sources are stored as F16)
    int rows, cols;
    uint8_t *qs;  // Q4_0, Q4_K: [rows][cols/2]; Q8_0: [rows][cols]
    uint4 *kh;    // Q4_K: [rows][cols/256] super-block headers (d, dmin, 12 packed scale bytes), as the file has them
    __half *d;    // [rows][dstride] block scales (cols/32 of them, rows padded to a multiple of 8)
    int dstride;
    __half *f16;  // F16: [rows][cols]
    CUtensorMap *wmap; // Q4_0 / Q8_0 with TMA: the quants as a 2D tensor (see make_wmap); NULL: none (64-byte aligned, from aligned_alloc)
};

struct dlayer {
    float *attn_norm, *ffn_norm;
    float *bqkv;          // [d + 2 kv] (zeros where a bias is absent), or NULL
    dmat qkv[3];          // stacked into qkv[0] when the types agree (n_qkv = 1)
    int n_qkv;
    dmat wo, gu[2], down; // gate/up stacked into gu[0] when the types agree
    int n_gu;
};

struct graph_slot {
    int n, n_out, max_blocks, mode, used; // the step's shape and kind: what its kernels and their arguments depend on
    unsigned long stamp;
    cudaGraphExec_t exec;
};

// The paged KV cache's geometry: a cache block holds kv_block positions of
// every layer, [block][layer][kv_block x kv_dim values]; inside a layer's
// part, position p's head h starts at (p % kv_block) ps + h hs. By position
// (the default, PLUMB_CUDA_KV=positions): ps = kv_dim, hs = hd. By head
// (PLUMB_CUDA_KV=heads): ps = hd, hs = kv_block hd, so the positions one
// attention warp reads for one head lie together (16 positions: 4 KiB)
// instead of 256 bytes every kv_dim values. Measured no faster (7B Q4_0
// batch 1 and 64 on an H100, bench/results/gpu/v20): opt-in.
struct kv_geo {
    int n_layers, kv_block, kv_dim, ps, hs;
};
// A batch product's split-K partial sums not yet added to its output (see psum4)
struct psum {
    const float *p;
    int splits, n, rows, accumulate;
};

struct handle {
    plumb_backend_model_desc desc;
    dlayer *layers;
    dmat output;
    float *output_norm;
    int num_sms;
    __half *k_pool, *v_pool; // [block][layer][kv_block x kv_dim values] (kvg: by position or by head)
    kv_geo kvg;
    // device scratch
    float *x, *qkv, *att, *gu, *logits, *cs, *sn, *partial;
    size_t partial_elems;
    int att_early;         // PLUMB_CUDA_ATT_EARLY=none|few|all: which attention launches load their first pass of earlier steps' keys/values
                           // before waiting for the kernel before it (few, the default: the 16-warp launches of steps with few tokens)
    int att_np;            // PLUMB_CUDA_ATT_NP=4|8: positions a warp loads per pass in the 16-warp (few blocks) attention; default 8
    unsigned *tile_count;  // per output tile of a split-K product: splits finished (the int8 GEMM's in-kernel reduction)
    int staged_logits;     // PLUMB_CUDA_LOGITS=staged: logits through the plugin's pinned buffer and a host copy even into page-locked memory
    int split_reader;      // PLUMB_CUDA_SPLIT_SUM=reader (default): the output's next reader adds the partials (finish_splits)
    int split_inline;      // PLUMB_CUDA_SPLIT_SUM=inline: partials added by each tile's last split (measured slower
                           // on the H200: 73 us vs 53 + 6.7 us per 7B GEMM at batch 64), default k_splitk_sum
    int8_t *aq;   // int8 activations [max_batch][max_k]
    float2 *ad;   // their block scales (d, d * sum of quants) [max_batch][max_k/32]
    __half *ah;   // F16 activations [max_batch][max_k]: the one products read (ah_main, or ah_ff for a down product after a SwiGLU GEMM)
    __half *ah_main, *ah_ff; // the F16 activations, and [max_batch][n_ff] that a gate/up GEMM's SwiGLU epilogue writes
    __half *swiglu_out;      // set around a gate/up product that may write its SwiGLU there (k_gemm_wt's SWIGLU) ...
    int swiglu_done;         // ... and whether it did (then no k_make_act)
    int swiglu_epi;          // PLUMB_CUDA_SWIGLU=epilogue (default) or kernel (k_make_act after every gate/up product)
    int *meta;    // pos[max_batch], seq[max_batch], rows_out[max_batch], table[n_seq_max * n_kv_blocks]
    void *blas_ws;
    __half *deq;       // Q4_K matrices dequantized to F16 for a batch product (the largest one's size), or NULL
    size_t deq_elems;
    // pinned host staging
    float *hx, *hlogits;
    int *hmeta;
    psum pend;     // a batch product's split-K partials left for the next kernel to add (defer_sum), or p = NULL
    int defer_sum; // set around a product whose reader adds its partials itself
    int *ids, *hids; // greedy picks of the step's logit rows: device [max_batch], pinned host [max_batch]
    size_t meta_ints, hlogits_rows;
    cudaStream_t stream;
    cublasHandle_t blas;
    graph_slot graphs[GRAPH_SLOTS];
    unsigned seen[SEEN_SHAPES]; // recent step shapes (hashed) that ran without a graph: the second sighting captures one
    int seen_next, graph_first_sighting;
    unsigned long clock;
    int use_graphs, pdl, step_n; // step_n: tokens of the step being launched; pdl: PDL_* (dependent launch where)
    int in_product;              // the launches under way are a product's (PDL_PRODUCTS)
    cudaError_t launch_err;      // first failed launch of the step
    int split_min_slices, split_blocks_per_sm; // split-K policy (PLUMB_CUDA_SPLITK=MIN_SLICES,BLOCKS_PER_SM)
    int skip;                                  // PLUMB_CUDA_SKIP=products|others: a timing experiment that leaves those kernels out (results are garbage)
    int mv_rows;                               // rows per warp of the decode matrix-vector kernel (PLUMB_CUDA_MV_ROWS=1|2|auto): 1, 2 or MV_AUTO
    int gemm_wide;                             // 32-row warps in the GEMM from 32 tokens on (PLUMB_CUDA_GEMM_ROWS=32; default 16)
    int gemm_kind;                             // the batch GEMM (PLUMB_CUDA_GEMM): GEMM_WG (wg), GEMM_REG (reg), GEMM_I8 (i8) or GEMM_F16 (f16)
    int wgmma;                                 // the device runs the sm_90a image (k_wgmma_probe): the wgmma GEMM can run
    PFN_cuTensorMapEncodeTiled_v12000 encode_tiled; // the driver's tensor-map encoder (NULL: no TMA)
    int wg_tma;                                // the wgmma GEMM loads its slices by TMA (PLUMB_CUDA_WG_LOAD=tma|copies)
    int att_mma;                               // attention of many sequences on tensor cores (PLUMB_CUDA_ATT=mma|simt)
    int att_minb;                              // ... its blocks a multiprocessor by registers (PLUMB_CUDA_ATT_MINB=3|4, default 4)
    int att_prefetch;                          // the tensor-core attention prefetches its next 16 positions into L2 (PLUMB_CUDA_ATT_PREFETCH=1; default 0)
    int rope_pairs;                            // RoPE + KV writes a thread per rotation pair (PLUMB_CUDA_ROPE=pairs) or per value (values, default)
    int rope_att;                              // one-token steps: RoPE + KV writes inside the attention (PLUMB_CUDA_ROPE=attention)
    int rope_quads;                            // a thread 4 values (k_rope_kv_quads; PLUMB_CUDA_ROPE=quads), where the heads suit it (load)
    int rope_mma;                              // steps of a token a sequence: inside the tensor-core attention (PLUMB_CUDA_ROPE=mma), where the heads suit it
    int norm_cluster;                          // RMS norms by clusters of NORM_CLUSTER blocks a row: 1 in batch steps (PLUMB_CUDA_NORM=cluster), 2 in all
                                               // (cluster-all), 0 a block a row (row, the default)
    CUtensorMap *amaps;                        // tensor maps of the F16 activations (AMAPS, aligned_alloc), by buffer, row length and token tile:
    int amap_k[AMAPS], amap_bn[AMAPS], n_amaps;
    const __half *amap_buf[AMAPS];
    int wg_small;                              // steps of wg_small to MATVEC_MAX_N tokens take the wgmma GEMM (0: never) ...
    long wg_small_elems;                       // ... for matrices of at least this many weights (PLUMB_CUDA_WG_SMALL=N sets N and 0)
    int wg_tile;                               // the wgmma GEMM's block shape WGxBNxNB as a code (PLUMB_CUDA_WG_TILE); 0: by batch size
    int wg_rows;                               // above 32 tokens, a tile's rows per matrix (PLUMB_CUDA_WG_ROWS): WG_ROWS_128X2 (the default: 33-64
                                               // tokens 128 rows, two blocks a multiprocessor; 256 above), WG_ROWS_256 (256 rows), WG_ROWS_AUTO
                                               // (wg_rows_64's estimate) or WG_ROWS_TUNE (33-64 tokens: timed at load, tune_wg_tiles)
    struct wg_tuned_shape { uint32_t type; int rows, cols, tile; } wg_tuned[8]; // WG_ROWS_TUNE's picks by matrix shape
    int n_wg_tuned;
    int gemm_r_tile;                           // the reg GEMM's block shape WMxMTxNTxNBxKS as digits (PLUMB_CUDA_GEMM_RTILE); 0: by batch size
    int gemm_splits;                           // PLUMB_CUDA_GEMM_SPLITS: k splits of every reg GEMM (0: chosen per product)
    int gemm_tile;                             // its block shape WMxWNxMTxNBxKS as digits (PLUMB_CUDA_GEMM_TILE); 0: by batch size
    size_t bytes, peak;
    // PLUMB_CUDA_TIMING=1: where a step's time goes, per batch size (printed at unload)
    int timing;
    cudaEvent_t ev0, ev1;
    // host: time from the previous decode step of the same size returning to this one starting, spent outside the plugin (sampling, bookkeeping)
    struct step_time { long steps, follow; double stage, gpu, wait, copy, host; } *times; // [2][max_batch + 1]: prompt chunks, decode steps
    double last_end;
    int last_n;
    // PLUMB_CUDA_KPROF=1: each kernel of a step between two events (CUDA graphs
    // off); per step size, time per kernel printed at unload
    int kprof, kp_n;                // kernels recorded in the running step
    int prof_step, decode_steps;    // PLUMB_CUDA_PROFILE_STEP: the decode step inside the profiler's range; decode steps so far
    cudaEvent_t *kp_ev;             // [2 * KPROF_MAX]
    const void **kp_fn;             // [KPROF_MAX]
    struct kp_stat { const void *fn; int key; long calls; double ms; } *kp_st; // fn NULL: the step count of key
    int kp_nst;
    // the fused decode kernel (k_decode_fused): PLUMB_CUDA_FUSED=0 turns it off
    int fused_ok;          // the model's layers suit it
    int fused_grid[4];     // blocks for 1, 2, 4, 8 tokens (0: that size does not fit)
    struct flayer *fused_layers; // device copy of the layer descriptors
    unsigned *fused_bar;   // grid barrier counter, give-up flag
    unsigned *hflag;       // pinned copy of the give-up flag
    // PLUMB_CUDA_FUSED_CHECK=1: each fused or mma-RoPE step (forward's mode) also run the plain way, logits compared
    int fused_check;
    float *check_logits;
    long chk_steps, chk_rows, chk_agree;
    const char *chk_what; // the kind of step checked: "fused" or "mma RoPE"
    double chk_maxdiff, chk_maxabs;
    // greedy chains (decode_chain): the token embeddings as the file has them, or NULL with the reason in chain_why
    uint8_t *embd;
    uint32_t embd_type;
    size_t embd_row_bytes;
    char chain_why[160];
    int *hchain, *dchain;           // mapped pinned picks, [CHAIN_SLOTS][max_batch]: host and device addresses
    int *chain_in, *hchain_in;      // a chain's first tokens and positions [2][max_batch]: device, pinned staging
    cudaEvent_t chain_ev[CHAIN_SLOTS]; // each slot's step done
    long chain_steps;               // PLUMB_CUDA_TIMING=1: chained steps and their wall time (printed at unload)
    double chain_s;
};

#include <time.h>
#include <type_traits>
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---------------------------------------------------------------- kernels

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int warp_isum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Programmatic dependent launch (Hopper): a kernel lets the next one start
// as soon as all of its own blocks are running (pdl_trigger), and waits for
// the previous one to finish (pdl_wait) only before it touches what that one
// wrote, so a product's weight loads overlap the previous kernel's tail.
// Before sm_90 (or with PLUMB_CUDA_PDL=0) launches carry no such attribute.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A thread holds 4 consecutive values of a row (at i4 = index of value 0,
// a multiple of 4); 8 neighbouring threads hold one 32-value block. Writes
// the int8 quants with the block's scale and (scale x sum of quants), as the
// Q4_0 product's -8 offset needs, and/or the F16 values.
__device__ __forceinline__ void store_act4(float4 v, int row, int i4, int k, int fmt, int8_t *aq, float2 *ad, __half *ah) {
    if (fmt & ACT_Q8) {
        const unsigned group = 0xFFu << (threadIdx.x & 24); // the 8 lanes of this block
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(group, amax, o));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id), q2 = __float2int_rn(v.z * id), q3 = __float2int_rn(v.w * id);
        int sum = q0 + q1 + q2 + q3;
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(group, sum, o);
        *(char4 *)(aq + (size_t)row * k + i4) = make_char4((signed char)q0, (signed char)q1, (signed char)q2, (signed char)q3);
        if ((i4 & 31) == 0) ad[(size_t)row * (k / QK) + i4 / QK] = make_float2(d, d * (float)sum);
    }
    if (fmt & ACT_F16) {
        __half2 *o = (__half2 *)(ah + (size_t)row * k + i4);
        o[0] = __floats2half2_rn(v.x, v.y);
        o[1] = __floats2half2_rn(v.z, v.w);
    }
}

// The split-K partial sums of the product that wrote a buffer, not yet
// added: the kernel that reads the buffer next adds them itself (and writes
// the totals back where later kernels read them), so a batch product needs
// no k_splitk_sum launch and its extra pass over the partials. p == NULL:
// the buffer is complete. Value (t, r) is (accumulate ? y : 0) + sum over z
// of p[z][t][r], the partials added in k_splitk_sum's order: same bits.
// (struct psum: above the handle, which holds one)
__device__ __forceinline__ float4 psum4(const psum &s, float4 y, int t, int r) {
    float4 a = make_float4(0, 0, 0, 0);
    for (int z = 0; z < s.splits; z++) {
        const float4 v = *(const float4 *)(s.p + ((size_t)z * s.n + t) * s.rows + r);
        a.x += v.x, a.y += v.y, a.z += v.z, a.w += v.w;
    }
    return s.accumulate ? make_float4(y.x + a.x, y.y + a.y, y.z + a.z, y.w + a.w) : a;
}
__device__ __forceinline__ float psum1(const psum &s, float y, int t, int r) {
    float a = 0;
    for (int z = 0; z < s.splits; z++) a += s.p[((size_t)z * s.n + t) * s.rows + r];
    return s.accumulate ? y + a : a;
}

// act[r] = x[src_row] * rsqrt(mean(x^2) + eps) * w; src_row = rows ? rows[r] : r.
// 1024 threads, 4 values each per pass (the 4-wide path needs d % 32 == 0,
// true of every model with quantized matrices; others take the plain loop).
__global__ void __launch_bounds__(1024) k_rmsnorm_act(float *x, const int *rows, const float *w, int d, float eps, int fmt, int8_t *aq, float2 *ad,
                                                      __half *ah, psum ps) {
    constexpr int HELD = 2; // float4s a thread keeps in registers: rows up to 8192 wide (1024 threads; 4 would spill)
    pdl_trigger();
    const int r = blockIdx.x, src = rows ? rows[r] : r; // (rows: uploaded before the step's kernels)
    float *xr = x + (size_t)src * d;
    const int wide = d % QK == 0, held = wide && d <= HELD * 4 * (int)blockDim.x;
    // the norm's weights (no kernel writes them) are loaded before waiting for
    // the kernel that writes x; a held row of x stays in registers, so the
    // chain is one load of x, the sum, and the stores
    float4 g[HELD], v[HELD];
    if (held)
#pragma unroll
        for (int j = 0; j < HELD; j++) {
            const int i = (threadIdx.x + j * blockDim.x) * 4;
            if (i < d) g[j] = *(const float4 *)(w + i);
        }
    pdl_wait();
    __shared__ float part[32];
    float ss = 0;
    if (held)
#pragma unroll
        for (int j = 0; j < HELD; j++) {
            const int i = (threadIdx.x + j * blockDim.x) * 4;
            if (i >= d) continue;
            v[j] = *(const float4 *)(xr + i);
            if (ps.p) *(float4 *)(xr + i) = v[j] = psum4(ps, v[j], src, i); // the residual stream completed
            ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    else if (wide)
        for (int i = threadIdx.x * 4; i < d; i += blockDim.x * 4) {
            float4 u = *(const float4 *)(xr + i);
            if (ps.p) *(float4 *)(xr + i) = u = psum4(ps, u, src, i); // the residual stream completed (this thread reads it again below)
            ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
        }
    else
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            if (ps.p) xr[i] = psum1(ps, xr[i], src, i);
            ss += xr[i] * xr[i];
        }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float u = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0;
        u = warp_sum(u);
        if (threadIdx.x == 0) part[0] = u;
    }
    __syncthreads();
    const float scale = rsqrtf(part[0] / d + eps);
    // (whole 8-thread groups stay together in store_act4: blockDim and d are multiples of 32)
    if (held)
#pragma unroll
        for (int j = 0; j < HELD; j++) {
            const int i = (threadIdx.x + j * blockDim.x) * 4;
            if (i < d)
                store_act4(make_float4(v[j].x * scale * g[j].x, v[j].y * scale * g[j].y, v[j].z * scale * g[j].z, v[j].w * scale * g[j].w), r, i, d,
                           fmt, aq, ad, ah);
        }
    else if (wide)
        for (int i = threadIdx.x * 4; i < d; i += blockDim.x * 4) {
            const float4 u = *(const float4 *)(xr + i), gw = *(const float4 *)(w + i);
            store_act4(make_float4(u.x * scale * gw.x, u.y * scale * gw.y, u.z * scale * gw.z, u.w * scale * gw.w), r, i, d, fmt, aq, ad, ah);
        }
    else
        for (int i = threadIdx.x; i < d; i += blockDim.x) ah[(size_t)r * d + i] = __float2half(xr[i] * scale * w[i]);
}

// k_rmsnorm_act's work for a row by NORM_CLUSTER blocks of one thread-block
// cluster (sm_90; PLUMB_CUDA_NORM=cluster; measured no faster, v20: opt-in). In
// a batch step k_rmsnorm_act is n blocks of 1024 threads, so 64 rows use 64
// of 132 multiprocessors, each pulling the row and all its split-K partials
// through one SM's share of L2 bandwidth (ncu, H200, 7B batch 64: 3.9 and
// 6.3 us a layer). Here block b of a row's cluster takes its b-th span of
// d / NORM_CLUSTER values, a float4 a thread; its sum of squares goes into
// every block's slot b (distributed shared memory) before one cluster
// barrier, and each block adds the slots in rank order, so all of them
// compute the same scale. (The sum's order differs from k_rmsnorm_act's:
// the results may differ in the last bits.) Threads a block: d / (4 CL), a
// multiple of 32 (the host checks d % (128 CL) == 0), so store_act4's
// 8-thread groups are whole 32-value blocks.
#define NORM_CLUSTER 4
__global__ void __launch_bounds__(1024) k_rmsnorm_act_cl(float *x, const int *rows, const float *w, int d, float eps, int fmt, int8_t *aq, float2 *ad,
                                                         __half *ah, psum ps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    __shared__ float part[32], slots[NORM_CLUSTER];
    pdl_trigger();
    const int r = blockIdx.x / NORM_CLUSTER, me = (int)cl.block_rank(), src = rows ? rows[r] : r;
    const int i = me * (d / NORM_CLUSTER) + (int)threadIdx.x * 4;
    float *xr = x + (size_t)src * d;
    const float4 g = *(const float4 *)(w + i); // (no kernel writes the norm's weights: loaded before the wait)
    pdl_wait();
    float4 v = *(const float4 *)(xr + i);
    if (ps.p) *(float4 *)(xr + i) = v = psum4(ps, v, src, i); // the residual stream completed
    float ss = warp_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < NORM_CLUSTER) { // this block's sum into slot `me` of block threadIdx.x of the cluster
        float u = 0;
        for (int j = 0; j < (int)blockDim.x / 32; j++) u += part[j];
        *cl.map_shared_rank(&slots[me], (unsigned)threadIdx.x) = u;
    }
    cl.sync(); // (release / acquire: every block's slots are filled)
    float total = 0;
#pragma unroll
    for (int b = 0; b < NORM_CLUSTER; b++) total += slots[b];
    const float scale = rsqrtf(total / d + eps);
    store_act4(make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w), r, i, d, fmt, aq, ad, ah);
#endif
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// act[t] = x[t] (swiglu = 0) or silu(x[t][i]) * x[t][k + i] (swiglu = 1, x
// holds [gate | up] rows of ldx floats). grid (n, ceil(k / 1024)), 256 threads.
// With ps, x is a product's output (rows = ldx) whose partial sums are added here.
__global__ void k_make_act(const float *x, int ldx, int k, int swiglu, int fmt, int8_t *aq, float2 *ad, __half *ah, psum ps) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x;
    const float *xr = x + (size_t)t * ldx;
    if (k % QK == 0) {
        const int i = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
        if (i >= k) return; // k % 32 == 0: a block of 8 threads leaves together
        float4 v = *(const float4 *)(xr + i);
        if (ps.p) v = psum4(ps, v, t, i);
        if (swiglu) {
            float4 u = *(const float4 *)(xr + k + i);
            if (ps.p) u = psum4(ps, u, t, k + i);
            v = make_float4(silu(v.x) * u.x, silu(v.y) * u.y, silu(v.z) * u.z, silu(v.w) * u.w);
        }
        store_act4(v, t, i, k, fmt, aq, ad, ah);
    } else {
        for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < k; i += gridDim.y * blockDim.x) {
            float v = ps.p ? psum1(ps, xr[i], t, i) : xr[i];
            if (swiglu) v = silu(v) * (ps.p ? psum1(ps, xr[k + i], t, k + i) : xr[k + i]);
            ah[(size_t)t * k + i] = __float2half(v);
        }
    }
}

#define MV_DEPTH 8 // 16-byte loads a lane has in flight, over its rows, in the default shapes
#define MV_AUTO 0  // rows per warp chosen per product (launch_matvec)
#define SKIP_PRODUCTS 1 // PLUMB_CUDA_SKIP: which kernels a timing experiment leaves out
#define SKIP_OTHERS 2
#define ATT_EARLY_NONE 0 // PLUMB_CUDA_ATT_EARLY: which attention launches load earlier steps' keys/values before waiting
#define ATT_EARLY_FEW 1
#define ATT_EARLY_ALL 2
#define GEMM_REG 0 // batch GEMMs (PLUMB_CUDA_GEMM): F16 tensor cores on weights dequantized in registers
#define GEMM_I8 1  // int8 tensor cores on the quants as stored
#define GEMM_F16 2 // F16 tensor cores on weights dequantized in shared memory (WMMA)
#define GEMM_WG 3  // Hopper warpgroup MMAs (wgmma) on weights dequantized in registers

// DEPTH blocks a lane (b0, b0 + 32, ...) of R rows from row0, in registers:
// the unit of loading of the decode products.
template <int TYPE, int R, int DEPTH>
struct mv_chunk {
    uint4 w[DEPTH][R][TYPE == TYPE_Q4_0 ? 1 : 2]; // 16-byte loads of quants
    float dw[DEPTH][R];                           // block scales
};

template <int TYPE, int R, int DEPTH>
__device__ __forceinline__ void mv_load(mv_chunk<TYPE, R, DEPTH> &c, const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride,
                                        int rows, int k, int row0, int b0) {
    constexpr int U = TYPE == TYPE_Q4_0 ? 1 : 2;
    const size_t qrow = TYPE == TYPE_Q4_0 ? k / 2 : k;
    const int nb = k / QK;
#pragma unroll
    for (int i = 0; i < R; i++) { // a row past the end reads the first again; its sum is not stored
        const int r = row0 + i < rows ? row0 + i : row0;
        const uint4 *wr = (const uint4 *)(qs + (size_t)r * qrow);
        const __half *dr = wd + (size_t)r * dstride;
#pragma unroll
        for (int u = 0; u < DEPTH; u++) {
            const int b = b0 + 32 * u;
            if (b < nb) {
#pragma unroll
                for (int v = 0; v < U; v++) c.w[u][i][v] = __ldg(wr + (size_t)b * U + v);
                c.dw[u][i] = __half2float(dr[b]);
            }
        }
    }
}

// acc[i][t] += the chunk's part of W[row0 + i] . act[t]
template <int TYPE, int NT, int R, int DEPTH>
__device__ __forceinline__ void mv_mul(const mv_chunk<TYPE, R, DEPTH> &c, int k, int b0, const int8_t *__restrict__ aq, const float2 *__restrict__ ad,
                                       float (&acc)[R][NT]) {
    constexpr int U = TYPE == TYPE_Q4_0 ? 1 : 2;
    const int nb = k / QK;
#pragma unroll
    for (int u = 0; u < DEPTH; u++) {
        const int b = b0 + 32 * u;
        if (b >= nb) break;
        int lo[R][8];
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (TYPE == TYPE_Q4_0) {
                const uint4 q = c.w[u][i][0];
                lo[i][0] = q.x & 0x0F0F0F0F; lo[i][1] = q.y & 0x0F0F0F0F; lo[i][2] = q.z & 0x0F0F0F0F; lo[i][3] = q.w & 0x0F0F0F0F;
                lo[i][4] = (q.x >> 4) & 0x0F0F0F0F; lo[i][5] = (q.y >> 4) & 0x0F0F0F0F; lo[i][6] = (q.z >> 4) & 0x0F0F0F0F; lo[i][7] = (q.w >> 4) & 0x0F0F0F0F;
            } else {
                const uint4 q0 = c.w[u][i][0], q1 = c.w[u][i][U - 1];
                lo[i][0] = q0.x; lo[i][1] = q0.y; lo[i][2] = q0.z; lo[i][3] = q0.w; lo[i][4] = q1.x; lo[i][5] = q1.y; lo[i][6] = q1.z; lo[i][7] = q1.w;
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int4 *xa = (const int4 *)(aq + (size_t)t * k) + 2 * b;
            const int4 a0 = xa[0], a1 = xa[1];
            const float2 sd = ad[(size_t)t * nb + b];
#pragma unroll
            for (int i = 0; i < R; i++) {
                int sdot = __dp4a(lo[i][0], a0.x, 0);
                sdot = __dp4a(lo[i][1], a0.y, sdot); sdot = __dp4a(lo[i][2], a0.z, sdot); sdot = __dp4a(lo[i][3], a0.w, sdot);
                sdot = __dp4a(lo[i][4], a1.x, sdot); sdot = __dp4a(lo[i][5], a1.y, sdot); sdot = __dp4a(lo[i][6], a1.z, sdot); sdot = __dp4a(lo[i][7], a1.w, sdot);
                acc[i][t] += TYPE == TYPE_Q4_0 ? c.dw[u][i] * (sd.x * (float)sdot - 8.0f * sd.y) : c.dw[u][i] * sd.x * (float)sdot;
            }
        }
    }
}

// y[t][row0 + i] (+)= the warp's sums
template <int NT, int R>
__device__ __forceinline__ void mv_store(const float (&acc)[R][NT], int row0, int rows, int lane, float *y, int ldy, int accumulate) {
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float sum = warp_sum(acc[i][t]);
            if (lane == 0 && row0 + i < rows) {
                float *o = y + (size_t)t * ldy + row0 + i;
                *o = accumulate ? *o + sum : sum;
            }
        }
}

// y[t][r] (+)= W[r] . act[t] for NT tokens; a warp per R rows (R = 1 or 2).
// Each lane takes 32-value blocks lane, lane+32, ...; the quants of DEPTH
// blocks of each row are loaded before any is used, so each warp keeps
// several KiB in flight (decode is bound by how many bytes are on their way
// from memory). With R = 2 each activation block a lane loads serves two rows
// (half the activation traffic through L1 per weight byte). A row longer
// than 32 DEPTH blocks takes several rounds of load-then-multiply.
template <int TYPE, int NT, int R, int DEPTH>
__global__ void __launch_bounds__(128) k_matvec(const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride, int rows, int k,
                                                const int8_t *__restrict__ aq, const float2 *__restrict__ ad, float *y, int ldy, int accumulate) {
    pdl_trigger();
    const int row0 = (blockIdx.x * 4 + (threadIdx.x >> 5)) * R, lane = threadIdx.x & 31;
    if (row0 >= rows) return;
    const int nb = k / QK;
    float acc[R][NT];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0;
    for (int b0 = lane; b0 < nb; b0 += 32 * DEPTH) {
        mv_chunk<TYPE, R, DEPTH> c;
        mv_load(c, qs, wd, dstride, rows, k, row0, b0);
        if (b0 == lane) pdl_wait(); // the first weights are loaded before waiting for the activations
        mv_mul<TYPE, NT, R, DEPTH>(c, k, b0, aq, ad, acc);
    }
    if (nb <= lane) pdl_wait();
    mv_store<NT, R>(acc, row0, rows, lane, y, ldy, accumulate);
}

// Q4_K rows: a lane's unit is a 64-value slice (32 quant bytes: low nibbles
// are sub-block 2j of its super-block, high nibbles sub-block 2j+1), DEPTH
// slices in flight; each sub-block's 6-bit scale and min come from the
// super-block's 16-byte header (the file's d, dmin and packed scales, 144
// bytes per 256 values as stored). Activations: the int8 blocks of the
// other products (a sub-block is one 32-value activation block; the min
// folds in through its d x sum).
__device__ __forceinline__ unsigned q4k_byte(const uint4 &h, int i) { /* scale byte i (0..11) of a header */
    const unsigned w = i < 4 ? h.y : i < 8 ? h.z : h.w;
    return (w >> (8 * (i & 3))) & 0xFF;
}

__device__ __forceinline__ void q4k_scale_min(const uint4 &h, int j, float &sc, float &m) { /* sub-block j (0..7), as ggml's get_scale_min_k4 */
    if (j < 4) {
        sc = (float)(q4k_byte(h, j) & 63);
        m = (float)(q4k_byte(h, j + 4) & 63);
    } else {
        sc = (float)((q4k_byte(h, j + 4) & 0xF) | ((q4k_byte(h, j - 4) >> 6) << 4));
        m = (float)((q4k_byte(h, j + 4) >> 4) | ((q4k_byte(h, j) >> 6) << 4));
    }
}

template <int NT, int DEPTH>
__global__ void __launch_bounds__(128) k_matvec_q4k(const uint8_t *__restrict__ qs, const uint4 *__restrict__ kh, int rows, int k,
                                                    const int8_t *__restrict__ aq, const float2 *__restrict__ ad, float *y, int ldy, int accumulate) {
    pdl_trigger();
    const int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int ns = k / 64, nb = k / QK;
    const uint4 *wr = (const uint4 *)(qs + (size_t)row * (k / 2));
    const uint4 *hr = kh + (size_t)row * (k / 256);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0;
    bool waited = false;
    for (int s0 = lane; s0 < ns; s0 += 32 * DEPTH) {
        uint4 q[DEPTH][2], hh[DEPTH];
#pragma unroll
        for (int u = 0; u < DEPTH; u++) {
            const int s = s0 + 32 * u;
            if (s < ns) {
                q[u][0] = __ldg(wr + 2 * s);
                q[u][1] = __ldg(wr + 2 * s + 1);
                hh[u] = __ldg(hr + s / 4);
            }
        }
        if (!waited) { pdl_wait(); waited = true; } // the first weights are loaded before waiting for the activations
#pragma unroll
        for (int u = 0; u < DEPTH; u++) {
            const int s = s0 + 32 * u;
            if (s >= ns) break;
            const int j = s & 3;
            float sc0, m0, sc1, m1;
            q4k_scale_min(hh[u], 2 * j, sc0, m0);
            q4k_scale_min(hh[u], 2 * j + 1, sc1, m1);
            const float d = __half2float(__ushort_as_half((unsigned short)(hh[u].x & 0xFFFF))), dmin = __half2float(__ushort_as_half((unsigned short)(hh[u].x >> 16)));
            const unsigned w[8] = {q[u][0].x, q[u][0].y, q[u][0].z, q[u][0].w, q[u][1].x, q[u][1].y, q[u][1].z, q[u][1].w};
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 *xa = (const int4 *)(aq + (size_t)t * k) + 4 * s; // blocks 2s (low nibbles) and 2s + 1 (high)
                const int4 a0 = xa[0], a1 = xa[1], a2 = xa[2], a3 = xa[3];
                const int lo[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, hi[8] = {a2.x, a2.y, a2.z, a2.w, a3.x, a3.y, a3.z, a3.w};
                int d0 = 0, d1 = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    d0 = __dp4a((int)(w[i] & 0x0F0F0F0F), lo[i], d0);
                    d1 = __dp4a((int)((w[i] >> 4) & 0x0F0F0F0F), hi[i], d1);
                }
                const float2 s0d = ad[(size_t)t * nb + 2 * s], s1d = ad[(size_t)t * nb + 2 * s + 1];
                acc[t] += d * (sc0 * s0d.x * (float)d0 + sc1 * s1d.x * (float)d1) - dmin * (m0 * s0d.y + m1 * s1d.y);
            }
        }
    }
    if (!waited) pdl_wait();
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0) {
            float *o = y + (size_t)t * ldy + row;
            *o = accumulate ? *o + sum : sum;
        }
    }
}

// Q4_K rows as F16 (for the batch products: cuBLAS on the dequantized
// matrix): a thread per 8 consecutive values (one 16-byte store, so a warp
// writes 512 contiguous bytes), values d*sc*q - dmin*m as
// dequantize_row_q4_K computes them, rounded to F16. Values 64s+o of slice
// s are the low nibbles of its quant bytes o (o < 32), else the high
// nibbles of bytes o - 32.
__global__ void k_dequant_q4k(const uint8_t *__restrict__ qs, const uint4 *__restrict__ kh, int rows, int k, __half *__restrict__ out) {
    pdl_trigger();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = (size_t)k / 8;
    if (i >= (size_t)rows * per_row) return;
    const size_t row = i / per_row, v = (i % per_row) * 8, s = v / 64;
    const int o = (int)(v % 64), high = o >= 32, sub = 2 * (int)(s & 3) + high;
    const uint4 hh = kh[row * (k / 256) + s / 4];
    float sc, m;
    q4k_scale_min(hh, sub, sc, m);
    const float a = __half2float(__ushort_as_half((unsigned short)(hh.x & 0xFFFF))) * sc, b = __half2float(__ushort_as_half((unsigned short)(hh.x >> 16))) * m;
    const uint2 q = *(const uint2 *)(qs + row * (size_t)(k / 2) + 32 * s + (o & 31));
    pdl_wait();
    const unsigned w[2] = {high ? q.x >> 4 : q.x, high ? q.y >> 4 : q.y};
    __half2 h2[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const unsigned x = w[e / 2] >> (16 * (e & 1));
        h2[e] = __floats2half2_rn(a * (float)(x & 0xF) - b, a * (float)((x >> 8) & 0xF) - b);
    }
    *(uint4 *)(out + row * (size_t)k + v) = *(const uint4 *)h2;
}

// Tensor-core product for batches: C[t][r] (+)= sum_k A[t][k] W[r][k].
// A block is 8 warps: 128 rows x (16 NF) tokens; each warp owns 16 rows.
// k goes in 64-wide slices through a GM_STAGES-deep cp.async pipeline
// (raw quants, scales and F16 activations land in shared memory while
// earlier slices are multiplied). Per slice each warp dequantizes its rows
// to F16 (its own tile) and runs 4 x NF 16x16x16 WMMA products. gridDim.z
// splits k; with splits, each split writes its partial sums and
// k_splitk_sum adds them in a fixed order (deterministic results).
#define GM_ROWS 128
#define GM_KC 64
#define GM_LD (GM_KC + 8) // padded row (halves): 144 bytes, keeps WMMA loads off one bank
#define GM_STAGES 4

__device__ __forceinline__ void cp_async16(void *dst, const void *src, int valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int BYTES>
__device__ __forceinline__ void cp_async_n(void *dst, const void *src, int valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(BYTES), "r"(valid ? BYTES : 0));
}

// The batch GEMMs' cp.async pipeline over slices [c_begin, c_end), AHEAD
// slices in flight ahead of the one multiplied: issue_w(c) copies slice c's
// weights, issue_a(c) its activations, each into stage c % (stages).
// gemm_pipe_start issues the first AHEAD slices (the weights before waiting
// on the previous kernel, which they do not depend on; an empty group keeps
// the count uniform); gemm_pipe_next, at the top of the loop over c, waits
// for slice c and starts the copies of slice c + AHEAD into the stage of
// slice c + AHEAD - stages, which everyone has finished with: with AHEAD =
// stages - 1 the slice just multiplied (its readers were this block's own
// loads, done at the barrier); the wgmma GEMM, whose tensor-core reads of a
// slice end only when waited for, keeps one stage more (AHEAD = stages - 2)
// and makes the copies visible to those reads (ASYNC_READS: a proxy fence).
template <int AHEAD, typename IW, typename IA>
__device__ __forceinline__ void gemm_pipe_start(int c_begin, int c_end, IW issue_w, IA issue_a) {
    pdl_trigger();
#pragma unroll
    for (int s = 0; s < AHEAD; s++)
        if (c_begin + s < c_end) issue_w(c_begin + s);
    pdl_wait();
#pragma unroll
    for (int s = 0; s < AHEAD; s++) {
        if (c_begin + s < c_end) issue_a(c_begin + s);
        cp_async_commit();
    }
}
template <int AHEAD, bool ASYNC_READS = false, typename IW, typename IA>
__device__ __forceinline__ void gemm_pipe_next(int c, int c_end, IW issue_w, IA issue_a) {
    cp_async_wait<AHEAD - 1>(); // this thread's copies of slice c have landed
    if (ASYNC_READS) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); // ... and are visible to the tensor cores' reads
    __syncthreads();            // everyone's have; and the stage about to be refilled is free
    if (c + AHEAD < c_end) {
        issue_w(c + AHEAD);
        issue_a(c + AHEAD);
    }
    cp_async_commit();
}

// A thread's share of copying one slice of a block's BM rows of quants (16
// bytes a copy, QB bytes a block, NB blocks a slice, rows WLD bytes apart in
// the stage) and of their scales (a row's NB in one copy, at SCALES_AT in the
// stage): the same pieces of every slice, one slice further along, so their
// sources and destinations are worked out once (only those: the kernel's
// arguments are passed to issue, not held). Copies of rows or blocks past
// the end are zero-filled.
template <int CPW, int NTH, int BM, int QB, int NB, int WLD, int SCALES_AT>
struct quant_copies {
    static constexpr int PER_ROW = QB * NB / 16; // 16-byte copies a row
    const uint8_t *src[CPW];
    int dst[CPW], kb[CPW], srow; // kb: the copy's block within its slice, -1: no such copy; srow: this thread copies a row's scales
    __device__ __forceinline__ quant_copies(const uint8_t *qs, int rows, int k, int r0) {
        const size_t qrow = QB == 16 ? (size_t)k / 2 : (size_t)k; /* Q4_0: two values a byte */
#pragma unroll
        for (int j = 0; j < CPW; j++) {
            const int i = threadIdx.x + j * NTH, row = i / PER_ROW, part = i % PER_ROW;
            const int ok = i < BM * PER_ROW && r0 + row < rows;
            src[j] = ok ? qs + (size_t)(r0 + row) * qrow + part * 16 : qs;
            dst[j] = row * WLD + part * 16;
            kb[j] = ok ? part * 16 / QB : -1;
        }
        srow = threadIdx.x < BM && r0 + (int)threadIdx.x < rows;
    }
    // slice c -> stage st (qs, wd, dstride, r0: the kernel's; nkb: blocks of a row)
    __device__ __forceinline__ void issue(unsigned char *st, int c, const uint8_t *qs, const __half *wd, int dstride, int r0, int nkb) const {
#pragma unroll
        for (int j = 0; j < CPW; j++) {
            if (j * NTH + (int)threadIdx.x >= BM * PER_ROW) break;
            const int ok = kb[j] >= 0 && c * NB + kb[j] < nkb;
            cp_async_n<16>(st + dst[j], ok ? src[j] + (size_t)c * QB * NB : qs, ok);
        }
        // the NB scales of a row in one copy: scale rows are padded (with zeros) to a multiple of 8
        if (threadIdx.x < BM)
            cp_async_n<2 * NB>(st + SCALES_AT + threadIdx.x * 2 * NB, srow ? wd + (size_t)(r0 + threadIdx.x) * dstride + c * NB : wd, srow);
    }
};

// A thread's share of copying one slice of a block's tokens' F16 activations
// (KC values a token a slice, 16 bytes a copy, CPA copies at most): set(j, ..)
// places copy j (the kernel's layout), issue(st, c, ..) copies slice c.
template <int CPA, int NTH, int TOTAL, int KC>
struct act_copies {
    const __half *src[CPA];
    int dst[CPA], col[CPA]; // col: the copy's first value within its slice; -1: no such copy
    __device__ __forceinline__ void set(int j, int ok, const __half *from, int to, int first, const __half *A) {
        src[j] = ok ? from : A;
        dst[j] = to;
        col[j] = ok ? first : -1;
    }
    // slice c -> stage st (A, k: the kernel's activations and their row length)
    __device__ __forceinline__ void issue(unsigned char *st, int c, const __half *A, int k) const {
#pragma unroll
        for (int j = 0; j < CPA; j++) {
            if (j * NTH + (int)threadIdx.x >= TOTAL) break;
            const int ok = col[j] >= 0 && c * KC + col[j] < k;
            cp_async_n<16>(st + dst[j], ok ? src[j] + (size_t)c * KC : A, ok);
        }
    }
};

// One result of a batch GEMM: its split's partial sum, or C (+)= v.
__device__ __forceinline__ void gemm_put(float v, int t, int r, int n, int rows, float *C, int ldc, int accumulate, float *partial) {
    if (partial) partial[((size_t)blockIdx.z * n + t) * rows + r] = v;
    else {
        float *o = C + (size_t)t * ldc + r;
        *o = accumulate ? *o + v : v;
    }
}

// KS groups of warps, each with its own sums acc of the same outputs: the
// other groups' sums join group 0's (kg == 0) through shared memory, red
// (sizeof acc a thread; the pipeline's stages are free by then).
template <int KS, typename T>
__device__ __forceinline__ void gemm_join_groups(T &acc, int kg, float *red) {
    constexpr int N = sizeof(T) / sizeof(float);
    float *a = (float *)&acc;
    __syncthreads();
    for (int q = 1; q < KS; q++) {
        if (kg == q)
#pragma unroll
            for (int i = 0; i < N; i++) red[i] = a[i];
        __syncthreads();
        if (kg == 0)
#pragma unroll
            for (int i = 0; i < N; i++) a[i] += red[i];
        __syncthreads();
    }
}

template <int TYPE, int NF, int MA>
struct gemm_smem {
    static constexpr int ROWS = GM_ROWS * MA;                                  // rows of a block: 8 warps x 16 MA
    static constexpr int BN = 16 * NF;
    static constexpr int QBYTES = TYPE == TYPE_Q4_0 ? 16 : 32;                 // quant bytes per 32-value block
    static constexpr int STAGES = MA > 1 && TYPE == TYPE_Q8_0 ? 3 : GM_STAGES; // (Q8_0's wide tiles: fewer stages fit)
    static constexpr int STAGE_Q = ROWS * 2 * QBYTES;                          // two blocks per row per slice
    static constexpr int STAGE_D = ROWS * 2 * 2;                               // their F16 scales
    static constexpr int STAGE_A = BN * GM_LD * 2;                             // activations, padded rows
    static constexpr int STAGE = STAGE_Q + STAGE_D + STAGE_A;
    static constexpr int TILE_W = ROWS * GM_LD * 2;                            // dequantized weights
    static constexpr int MAIN = STAGES * STAGE + TILE_W;
    static constexpr int EPI = 8 * NF * MA * 1024;                             // results, reusing the same memory
    static constexpr int BYTES = MAIN > EPI ? MAIN : EPI;
};

// MA = 16-row fragments per warp: with MA = 2 every activation fragment a
// warp loads from shared memory feeds two products, not one (a batch's
// GEMM was bound by those loads and by too few products in flight).
template <int TYPE, int NF, int MA>
__global__ void __launch_bounds__(256) k_gemm_q(const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride, int rows, int k,
                                                const __half *__restrict__ A, int n, float *C, int ldc, int accumulate, int chunks_per_split,
                                                float *partial) {
    using namespace nvcuda;
    typedef gemm_smem<TYPE, NF, MA> L;
    constexpr int BN = L::BN, QB = L::QBYTES, ROWS = L::ROWS, ST = L::STAGES, WR = 16 * MA;
    extern __shared__ __align__(128) unsigned char smem[];
    __half *sW = (__half *)(smem + ST * L::STAGE);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = blockIdx.x * ROWS, t0 = blockIdx.y * BN;
    const int nkb = k / QK, chunks = (k + GM_KC - 1) / GM_KC, qrow = TYPE == TYPE_Q4_0 ? k / 2 : k;
    const int c_begin = blockIdx.z * chunks_per_split, c_end = min(chunks, c_begin + chunks_per_split);

    auto issue_w = [&](int c) { // slice c's weights -> stage c % ST
        unsigned char *st = smem + (c % ST) * L::STAGE;
        // quants: ROWS rows x 2 blocks x QB bytes, 16 bytes a copy
        for (int i = threadIdx.x; i < ROWS * 2 * QB / 16; i += 256) {
            const int rb = i / (QB / 16), part = i % (QB / 16), row = rb >> 1, kb = c * 2 + (rb & 1);
            const int ok = r0 + row < rows && kb < nkb;
            cp_async16(st + i * 16, ok ? qs + (size_t)(r0 + row) * qrow + (size_t)kb * QB + part * 16 : qs, ok);
        }
        // scales: two F16 per row (the scale rows are padded to an even count)
        for (int row = threadIdx.x; row < ROWS; row += 256) {
            const int ok = r0 + row < rows && c * 2 < nkb;
            cp_async4(st + L::STAGE_Q + row * 4, ok ? wd + (size_t)(r0 + row) * dstride + c * 2 : wd, ok);
        }
    };
    auto issue_a = [&](int c) { // slice c's activations: BN tokens x 8 pieces of 8 F16
        __half *sa = (__half *)(smem + (c % ST) * L::STAGE + L::STAGE_Q + L::STAGE_D);
        for (int i = threadIdx.x; i < BN * 8; i += 256) {
            const int tok = i >> 3, col = c * GM_KC + (i & 7) * 8, ok = t0 + tok < n && col < k;
            cp_async16(sa + tok * GM_LD + (i & 7) * 8, ok ? A + (size_t)(t0 + tok) * k + col : A, ok);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MA][NF];
#pragma unroll
    for (int m = 0; m < MA; m++)
#pragma unroll
        for (int j = 0; j < NF; j++) wmma::fill_fragment(acc[m][j], 0.0f);
    gemm_pipe_start<ST - 1>(c_begin, c_end, issue_w, issue_a);
    __half *myW = sW + warp * WR * GM_LD;
    for (int c = c_begin; c < c_end; c++) {
        gemm_pipe_next<ST - 1>(c, c_end, issue_w, issue_a);
        const unsigned char *st = smem + (c % ST) * L::STAGE;
#pragma unroll
        for (int m = 0; m < MA; m++) { // dequantize: lane -> (row lane/2, block lane&1) of each 16 rows of this warp
            const int wrow = m * 16 + (lane >> 1), row = warp * WR + wrow, blk = lane & 1;
            const __half2 d2 = __half2half2(((const __half *)(st + L::STAGE_Q))[row * 2 + blk]);
            __half2 *dst = (__half2 *)(myW + wrow * GM_LD + blk * QK);
            // quants to F16 without int-to-float conversions: a byte b placed under
            // the exponent of 1024 (0x64XX) reads as 1024 + b; subtracting the bias
            // leaves the exact small integer, and one multiply applies the scale
            if (TYPE == TYPE_Q4_0) {
                const uint4 q = *(const uint4 *)(st + (row * 2 + blk) * 16);
                const uint32_t wv[4] = {q.x, q.y, q.z, q.w};
                const __half2 bias = __float2half2_rn(1032.0f); // 1024 + the Q4_0 offset 8
#pragma unroll
                for (int i = 0; i < 4; i++) { // bytes 4i..4i+3: low nibbles are values 4i.., high ones 16+4i..
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const uint32_t pair = __byte_perm(wv[i], 0, j ? 0x4342 : 0x4140); // bytes 2j, 2j+1 in the two halves
                        const uint32_t lo = (pair & 0x000F000Fu) | 0x64006400u, hi = ((pair >> 4) & 0x000F000Fu) | 0x64006400u;
                        dst[2 * i + j] = __hmul2(__hsub2(*(const __half2 *)&lo, bias), d2);
                        dst[8 + 2 * i + j] = __hmul2(__hsub2(*(const __half2 *)&hi, bias), d2);
                    }
                }
            } else {
                const uint4 q0 = *(const uint4 *)(st + (row * 2 + blk) * 32), q1 = *(const uint4 *)(st + (row * 2 + blk) * 32 + 16);
                const uint32_t wv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
                const __half2 bias = __float2half2_rn(1152.0f); // 1024 + 128: int8 made unsigned by flipping its sign bit
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint32_t u = wv[i] ^ 0x80808080u;
                    const uint32_t p0 = __byte_perm(u, 0x64646464u, 0x5140), p1 = __byte_perm(u, 0x64646464u, 0x7362);
                    dst[2 * i] = __hmul2(__hsub2(*(const __half2 *)&p0, bias), d2);
                    dst[2 * i + 1] = __hmul2(__hsub2(*(const __half2 *)&p1, bias), d2);
                }
            }
        }
        __syncwarp();
        const __half *sa = (const __half *)(st + L::STAGE_Q + L::STAGE_D);
#pragma unroll
        for (int kk = 0; kk < GM_KC; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[MA];
#pragma unroll
            for (int m = 0; m < MA; m++) wmma::load_matrix_sync(fa[m], myW + m * 16 * GM_LD + kk, GM_LD);
#pragma unroll
            for (int j = 0; j < NF; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fb, sa + j * 16 * GM_LD + kk, GM_LD);
#pragma unroll
                for (int m = 0; m < MA; m++) wmma::mma_sync(acc[m][j], fa[m], fb, acc[m][j]);
            }
        }
        __syncwarp(); // all lanes are done with this warp's tile before the next slice overwrites it
    }
    cp_async_wait<0>();
    __syncthreads(); // shared memory now holds the results: per warp MA x NF tiles of 16 tokens x 16 rows
    float *sC = (float *)smem + warp * MA * NF * 256;
#pragma unroll
    for (int m = 0; m < MA; m++)
#pragma unroll
        for (int j = 0; j < NF; j++) wmma::store_matrix_sync(sC + (m * NF + j) * 256, acc[m][j], 16, wmma::mem_col_major);
    __syncwarp();
    for (int e = lane; e < MA * NF * 256; e += 32) {
        const int mj = e >> 8, m = mj / NF, j = mj % NF, tl = (e >> 4) & 15, rl = e & 15;
        const int r = r0 + warp * WR + m * 16 + rl, t = t0 + j * 16 + tl;
        if (r < rows && t < n) gemm_put(sC[e], t, r, n, rows, C, ldc, accumulate, partial);
    }
}

__global__ void k_splitk_sum(const float *partial, int splits, int n, int rows, float *C, int ldc, int accumulate) {
    pdl_trigger();
    pdl_wait();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * rows) return;
    const int t = (int)(i / rows), r = (int)(i % rows);
    float s = 0;
    for (int z = 0; z < splits; z++) s += partial[(size_t)z * n * rows + i];
    float *o = C + (size_t)t * ldc + r;
    *o = accumulate ? *o + s : s;
}

// Integer tensor-core product for batches: C[t][r] (+)= sum_k W[r][k] a[t][k]
// with the weights as stored (Q4_0 nibbles or Q8_0 bytes) and the int8
// activation blocks the matrix-vector kernels read. mma.m16n8k32 (s8 x s8
// -> s32) multiplies one 32-value block of 16 rows by 8 tokens; each block's
// integer sums are scaled by its two scales into F32 accumulators:
//   Q8_0: dw * da * sum(q a)      Q4_0: dw * (da * sum(q a) - 8 * da * sum(a))
// (Q4_0's nibbles go in raw, 0..15, and the -8 offset is taken off with the
// activation block's sum, so no per-value arithmetic is spent on weights.)
// No dequantized copy exists anywhere. A block is WM x WN warps, each warp
// 16 MT rows x 32 tokens (MT x 4 products per 32-value block, each
// activation fragment feeding MT of them); k goes in slices of NB blocks
// through a cp.async pipeline 2 to 4 slices deep; gridDim.z splits k as in
// k_gemm_q. Rows in shared memory are padded by 16 bytes, which puts the
// 8 rows x 4 words a fragment load touches in 32 different banks.

// a block shape as one number (PLUMB_CUDA_GEMM_TILE)
#define GI_CODE(WM, WN, MT, NB, KS, MB) ((WM) * 100000 + (WN) * 10000 + (MT) * 1000 + (NB) * 100 + (KS) * 10 + (MB))

template <int TYPE, int WM, int WN, int MT, int NB, int KS, int MB>
struct gemm_i8_smem {
    static constexpr int BM = 16 * MT * WM, BN = 32 * WN, THREADS = 32 * WM * WN * KS, KC = NB * QK;
    static constexpr int WROW = (TYPE == TYPE_Q4_0 ? 16 : 32) * NB; // quant bytes of a row in one slice
    static constexpr int WLD = WROW + 16, ALD = KC + 16;             // padded strides
    static constexpr int STAGE_W = BM * WLD;
    static constexpr int STAGE_WD = BM * 2 * NB;                     // NB F16 scales a row
    static constexpr int STAGE_A = BN * ALD;
    static constexpr int STAGE_AD = BN * 8 * NB;                     // NB float2 (d, d * sum) a token
    static constexpr int STAGE = STAGE_W + STAGE_WD + STAGE_A + STAGE_AD;
    static constexpr int FIT = 227 * 1024 / MB - 1024;                 // shared memory a block may take with MB a multiprocessor
    static constexpr int STAGES = 4 * STAGE <= 120 * 1024 && 4 * STAGE <= FIT ? 4 : 3 * STAGE <= 200 * 1024 && 3 * STAGE <= FIT ? 3 : 2; // (wide slices: fewer fit)
    static constexpr int BYTES = STAGES * STAGE;
};

__device__ __forceinline__ void mma_s8(int c[4], const int a[4], int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

template <int TYPE, int WM, int WN, int MT, int NB, int KS, int MB>
__global__ void __launch_bounds__(32 * WM * WN * KS, MB) k_gemm_i8(const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride, int rows, int k,
                                                          const int8_t *__restrict__ aq, const float2 *__restrict__ ad, int n, float *C, int ldc,
                                                          int accumulate, int chunks_per_split, float *partial, unsigned *tile_count) {
    typedef gemm_i8_smem<TYPE, WM, WN, MT, NB, KS, MB> L;
    constexpr int BM = L::BM, BN = L::BN, NTH = L::THREADS, WLD = L::WLD, ALD = L::ALD, ST = L::STAGES, KC = L::KC;
    constexpr int QB = TYPE == TYPE_Q4_0 ? 16 : 32; // quant bytes a block
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int wm = warp % WM, wn = warp / WM % WN, kg = warp / (WM * WN); // kg: which of the KS groups of warps (each takes NB / KS blocks of a slice)
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN;
    const int nkb = k / QK, chunks = (nkb + NB - 1) / NB;
    const size_t qrow = TYPE == TYPE_Q4_0 ? (size_t)k / 2 : (size_t)k;
    const int c_begin = blockIdx.z * chunks_per_split, c_end = min(chunks, c_begin + chunks_per_split);

    auto issue_w = [&](int c) { // slice c's weights and their scales -> stage c % ST
        unsigned char *st = smem + (c % ST) * L::STAGE;
        constexpr int PER_ROW = L::WROW / 16; // 16-byte copies a row
        for (int i = threadIdx.x; i < BM * PER_ROW; i += NTH) {
            const int row = i / PER_ROW, part = i % PER_ROW, kb = c * NB + part * 16 / QB;
            const int ok = r0 + row < rows && kb < nkb;
            cp_async_n<16>(st + row * WLD + part * 16, ok ? qs + (size_t)(r0 + row) * qrow + (size_t)c * L::WROW + part * 16 : qs, ok);
        }
        // the NB scales of a row in one copy: scale rows are padded to a multiple of 8, so it never runs past them
        for (int row = threadIdx.x; row < BM; row += NTH) {
            const int ok = r0 + row < rows;
            cp_async_n<2 * NB>(st + L::STAGE_W + row * 2 * NB, ok ? wd + (size_t)(r0 + row) * dstride + c * NB : wd, ok);
        }
    };
    auto issue_a = [&](int c) { // slice c's activations and their (d, d * sum) pairs
        unsigned char *st = smem + (c % ST) * L::STAGE + L::STAGE_W + L::STAGE_WD;
        constexpr int PER_TOK = KC / 16;
        for (int i = threadIdx.x; i < BN * PER_TOK; i += NTH) {
            const int tok = i / PER_TOK, part = i % PER_TOK, kb = c * NB + part / 2, ok = t0 + tok < n && kb < nkb;
            cp_async_n<16>(st + tok * ALD + part * 16, ok ? aq + (size_t)(t0 + tok) * k + (size_t)c * KC + part * 16 : aq, ok);
        }
        for (int i = threadIdx.x; i < BN * NB; i += NTH) {
            const int tok = i / NB, kb = c * NB + i % NB, ok = t0 + tok < n && kb < nkb;
            cp_async_n<8>(st + L::STAGE_A + i * 8, ok ? ad + (size_t)(t0 + tok) * nkb + kb : ad, ok);
        }
    };

    float acc[MT][4][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = 0;
    gemm_pipe_start<ST - 1>(c_begin, c_end, issue_w, issue_a);
    for (int c = c_begin; c < c_end; c++) {
        gemm_pipe_next<ST - 1>(c, c_end, issue_w, issue_a);
        const unsigned char *st = smem + (c % ST) * L::STAGE;
        const unsigned char *sw = st, *sa = st + L::STAGE_W + L::STAGE_WD;
        const __half *swd = (const __half *)(st + L::STAGE_W);
        const float2 *sad = (const float2 *)(sa + L::STAGE_A);
#pragma unroll
        for (int b = 0; b < NB / KS; b++) {
            const int blk = kg * (NB / KS) + b;
            int a[MT][4];
            float dw[MT][2];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int row = wm * 16 * MT + m * 16 + g; // and row + 8
                if (TYPE == TYPE_Q4_0) { // byte j of a block: value j (low nibble), value j + 16 (high)
                    const uint32_t lo = *(const uint32_t *)(sw + row * WLD + blk * 16 + 4 * tq);
                    const uint32_t hi = *(const uint32_t *)(sw + (row + 8) * WLD + blk * 16 + 4 * tq);
                    a[m][0] = lo & 0x0F0F0F0F;
                    a[m][1] = hi & 0x0F0F0F0F;
                    a[m][2] = (lo >> 4) & 0x0F0F0F0F;
                    a[m][3] = (hi >> 4) & 0x0F0F0F0F;
                } else {
                    const unsigned char *p = sw + row * WLD + blk * 32 + 4 * tq, *p8 = p + 8 * WLD;
                    a[m][0] = *(const int *)p;
                    a[m][1] = *(const int *)p8;
                    a[m][2] = *(const int *)(p + 16);
                    a[m][3] = *(const int *)(p8 + 16);
                }
                dw[m][0] = __half2float(swd[row * NB + blk]);
                dw[m][1] = __half2float(swd[(row + 8) * NB + blk]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int tok = wn * 32 + j * 8;
                const unsigned char *pb = sa + (tok + g) * ALD + blk * 32 + 4 * tq;
                const int b0 = *(const int *)pb, b1 = *(const int *)(pb + 16);
                const float2 s0 = sad[(tok + 2 * tq) * NB + blk], s1 = sad[(tok + 2 * tq + 1) * NB + blk];
                const float o0 = TYPE == TYPE_Q4_0 ? -8.0f * s0.y : 0.0f, o1 = TYPE == TYPE_Q4_0 ? -8.0f * s1.y : 0.0f;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    int cc[4];
                    mma_s8(cc, a[m], b0, b1);
                    acc[m][j][0] += dw[m][0] * fmaf(s0.x, (float)cc[0], o0);
                    acc[m][j][1] += dw[m][0] * fmaf(s1.x, (float)cc[1], o1);
                    acc[m][j][2] += dw[m][1] * fmaf(s0.x, (float)cc[2], o0);
                    acc[m][j][3] += dw[m][1] * fmaf(s1.x, (float)cc[3], o1);
                }
            }
        }
    }
    cp_async_wait<0>();
    if (KS > 1) gemm_join_groups<KS>(acc, kg, (float *)smem + ((warp % (WM * WN)) * 32 + lane) * MT * 16);
    if (kg == 0)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = r0 + wm * 16 * MT + m * 16 + g + (e >> 1) * 8, t = t0 + wn * 32 + j * 8 + 2 * tq + (e & 1);
                    if (r < rows && t < n) gemm_put(acc[m][j][e], t, r, n, rows, C, ldc, accumulate, partial);
                }
    if (!partial || !tile_count) return;
    // split-K without a second kernel: the last split of a tile to finish
    // adds all the tile's partials, in split order (the same sums as
    // k_splitk_sum), and resets the tile's counter for the next product
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = tile_count + blockIdx.y * gridDim.x + blockIdx.x;
        is_last = atomicAdd(cnt, 1u) == gridDim.z - 1;
        if (is_last) *cnt = 0;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int i = threadIdx.x; i < BM * BN; i += NTH) {
        const int r = r0 + i % BM, t = t0 + i / BM;
        if (r >= rows || t >= n) continue;
        float sum = 0;
        for (int z = 0; z < (int)gridDim.z; z++) sum += __ldcg(partial + ((size_t)z * n + t) * rows + r);
        float *o = C + (size_t)t * ldc + r;
        *o = accumulate ? *o + sum : sum;
    }
}

// F16 tensor-core product for batches with the weights dequantized in
// registers: C[t][r] (+)= sum_k W[r][k] A[t][k], A the F16 activations.
// A warp owns 16 MT rows and all 8 NT tokens of its block; per 32-value
// block it turns its rows' quants into F16 fragments once (a byte under the
// exponent of 1024 reads as 1024 + byte: no int-to-float conversions; the
// block scale is applied to the weights, so the sums over k stay in the
// mma's F32 accumulators with no per-block work on the results) and feeds
// each fragment to NT mma.m16n8k16 products. This is what the int8 GEMM
// could not do: its integer sums need two scales per 32-value block, i.e.
// a conversion and a multiply-add per product element per block.
// Within a 32-value block, thread tq's fragment slots hold values
// 4tq..4tq+3 (first k16 step) and 16+4tq..16+4tq+3 (second): a permutation
// of k used alike for weights and activations, chosen so a Q4_0 thread reads
// one 32-bit word of quants per row and a block (Q8_0: two) and each
// activation fragment is one 8-byte load. k goes in slices of NB blocks
// through a cp.async pipeline; KS groups of WM warps split each slice's
// blocks (more warps to hide latency, no work done twice), their sums added
// through shared memory at the end; gridDim.z splits k (partials as in
// k_gemm_q).
template <int TYPE, int WM, int MT, int NT, int NB, int KS>
struct gemm_r_smem {
    static constexpr int BM = 16 * MT * WM, BN = 8 * NT, THREADS = 32 * WM * KS, KC = NB * QK;
    static constexpr int QB = TYPE == TYPE_Q4_0 ? 16 : 32; // quant bytes a block
    static constexpr int WLD = QB * NB + 16;              // padded row of quants: 8 rows x 16 bytes fall in 32 banks
    static constexpr int ALD = 2 * KC + 32;               // padded row of activations: 4 tokens x 32 bytes fall in 32 banks
    static constexpr int STAGE_W = BM * WLD, STAGE_WD = BM * 2 * NB, STAGE_A = BN * ALD;
    static constexpr int STAGE = STAGE_W + STAGE_WD + STAGE_A;
    static constexpr int STAGES = 4 * STAGE <= 100 * 1024 ? 4 : 3 * STAGE <= 150 * 1024 ? 3 : 2;
    static constexpr int RED = KS > 1 ? 32 * WM * MT * NT * 16 : 0; // one group's sums, for the reduction
    static constexpr int BYTES = STAGES * STAGE > RED ? STAGES * STAGE : RED;
    // 16-byte copies a thread issues per slice: quants, activations (rounded up)
    static constexpr int CPW = (BM * QB * NB / 16 + THREADS - 1) / THREADS, CPA = (BN * KC / 8 + THREADS - 1) / THREADS;
};

__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 v) { return *(const uint32_t *)&v; }
__device__ __forceinline__ __half2 bits_h2(uint32_t v) { return *(const __half2 *)&v; }

// A Q4_0 word (bytes 4tq..4tq+3 of a block: low nibbles values 4tq.., high
// ones 16+4tq..) -> the fragment halves of both k16 steps: s[step][pair],
// pair 0 = values +0,+1, pair 1 = values +2,+3. A low nibble under 0x6400
// reads 1024 + q (minus 1032: q - 8, exact); a high nibble left in place
// reads 1024 + 16 q (times 1/16 minus 72: q - 8, exact in one FMA); then
// the block scale.
// (x & m) | c in one LOP3 (written as C, it takes two: a LOP3 has one immediate)
__device__ __forceinline__ uint32_t and_or(uint32_t x, uint32_t m, uint32_t c) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "r"(m), "r"(c));
    return r;
}

__device__ __forceinline__ void dequant_q4_word(uint32_t w, __half2 d, uint32_t s[2][2]) {
    const __half2 lo_bias = __float2half2_rn(-1032.0f), hi_mul = __float2half2_rn(0.0625f), hi_bias = __float2half2_rn(-72.0f);
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const uint32_t pair = __byte_perm(w, 0, p ? 0x4342 : 0x4140); // bytes 2p, 2p+1 in the two halves
        s[0][p] = h2_bits(__hmul2(__hadd2(bits_h2(and_or(pair, 0x000F000Fu, 0x64006400u)), lo_bias), d));
        s[1][p] = h2_bits(__hmul2(__hfma2(bits_h2(and_or(pair, 0x00F000F0u, 0x64006400u)), hi_mul, hi_bias), d));
    }
}

// A Q8_0 word (values 4i..4i+3) -> pair 0 = values +0,+1, pair 1 = +2,+3
__device__ __forceinline__ void dequant_q8_word(uint32_t w, __half2 d, uint32_t s[2]) {
    const __half2 bias = __float2half2_rn(-1152.0f); // 1024 + 128: the int8 made unsigned by flipping its sign bit
    const uint32_t u = w ^ 0x80808080u;
    s[0] = h2_bits(__hmul2(__hadd2(bits_h2(__byte_perm(u, 0x64646464u, 0x5140)), bias), d));
    s[1] = h2_bits(__hmul2(__hadd2(bits_h2(__byte_perm(u, 0x64646464u, 0x7362)), bias), d));
}

// (launch bounds: 16 warps a multiprocessor, so at most 128 registers a thread)
template <int TYPE, int WM, int MT, int NT, int NB, int KS>
__global__ void __launch_bounds__(32 * WM * KS, 16 / (WM * KS) > 0 ? 16 / (WM * KS) : 1) k_gemm_r(const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride, int rows, int k,
                                                        const __half *__restrict__ A, int n, float *C, int ldc, int accumulate, int chunks_per_split,
                                                        float *partial) {
    typedef gemm_r_smem<TYPE, WM, MT, NT, NB, KS> L;
    constexpr int BM = L::BM, BN = L::BN, NTH = L::THREADS, WLD = L::WLD, ALD = L::ALD, ST = L::STAGES, KC = L::KC, QB = L::QB;
    constexpr int PER_TOK = KC / 8; // 16-byte copies of a token's activations
    static_assert(NB % KS == 0, "the warp groups split a slice's blocks evenly");
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int wm = warp % WM, kg = warp / WM; // kg: which group of warps (each takes NB / KS blocks of a slice)
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN;
    const int nkb = k / QK, chunks = (nkb + NB - 1) / NB;
    const int c_begin = blockIdx.z * chunks_per_split, c_end = min(chunks, c_begin + chunks_per_split);

    const quant_copies<L::CPW, NTH, BM, QB, NB, WLD, L::STAGE_W> wq(qs, rows, k, r0);
    act_copies<L::CPA, NTH, BN * PER_TOK, KC> aq;
#pragma unroll
    for (int j = 0; j < L::CPA; j++) { // token-major: a token's KC values, 16 bytes a copy, into its padded row
        const int i = threadIdx.x + j * NTH, tok = i / PER_TOK, part = i % PER_TOK;
        aq.set(j, i < BN * PER_TOK && t0 + tok < n, A + (size_t)(t0 + tok) * k + part * 8, tok * ALD + part * 16, part * 8, A);
    }
    auto issue_w = [&](int c) { wq.issue(smem + (c % ST) * L::STAGE, c, qs, wd, dstride, r0, nkb); }; // slice c's quants and scales -> stage c % ST
    auto issue_a = [&](int c) { aq.issue(smem + (c % ST) * L::STAGE + L::STAGE_W + L::STAGE_WD, c, A, k); }; // its activations

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = 0;
    gemm_pipe_start<ST - 1>(c_begin, c_end, issue_w, issue_a);
    for (int c = c_begin; c < c_end; c++) {
        gemm_pipe_next<ST - 1>(c, c_end, issue_w, issue_a);
        const unsigned char *st = smem + (c % ST) * L::STAGE;
        const unsigned char *sw = st, *sa = st + L::STAGE_W + L::STAGE_WD;
        const __half *swd = (const __half *)(st + L::STAGE_W);
#pragma unroll
        for (int bb = 0; bb < NB / KS; bb++) {
            const int b = kg * (NB / KS) + bb;
            uint32_t af[MT][2][4]; // [16 rows][k16 step][a0..a3]: rows g and g + 8, value pairs 0 and 1
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int row = wm * 16 * MT + m * 16 + g;
#pragma unroll
                for (int h = 0; h < 2; h++) { // h: row g, then row g + 8
                    const __half2 d = __half2half2(swd[(row + 8 * h) * NB + b]);
                    const unsigned char *q = sw + (row + 8 * h) * WLD + b * QB + 4 * tq;
                    uint32_t s[2][2];
                    if (TYPE == TYPE_Q4_0) dequant_q4_word(*(const uint32_t *)q, d, s);
                    else {
                        dequant_q8_word(*(const uint32_t *)q, d, s[0]);
                        dequant_q8_word(*(const uint32_t *)(q + 16), d, s[1]);
                    }
#pragma unroll
                    for (int step = 0; step < 2; step++) {
                        af[m][step][h] = s[step][0];
                        af[m][step][2 + h] = s[step][1];
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const unsigned char *pa = sa + (j * 8 + g) * ALD + b * 64 + 8 * tq;
                const uint2 b0 = *(const uint2 *)pa, b1 = *(const uint2 *)(pa + 32);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_f16(acc[m][j], af[m][0], b0.x, b0.y);
                    mma_f16(acc[m][j], af[m][1], b1.x, b1.y);
                }
            }
        }
    }
    cp_async_wait<0>();
    if (KS > 1) {
        gemm_join_groups<KS>(acc, kg, (float *)smem + (wm * 32 + lane) * MT * NT * 4);
        if (kg != 0) return;
    }
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + wm * 16 * MT + m * 16 + g + (e >> 1) * 8, t = t0 + j * 8 + 2 * tq + (e & 1);
                if (r < rows && t < n) gemm_put(acc[m][j][e], t, r, n, rows, C, ldc, accumulate, partial);
            }
}

// ---- Hopper: the batch GEMM on warpgroup MMAs (wgmma, sm_90a) ----------
// k_gemm_r is bound by instruction issue: per 16x8x16 mma.sync a warp also
// loads an activation fragment and shares the dequantization. A wgmma
// m64nBNk16 does the work of BN / 8 of them for each of a warpgroup's four
// warps in one instruction, reading the activations itself from shared
// memory, so a warp issues little more than the dequantization.
//
// A block is WG warpgroups; warpgroup w owns 64 weight rows and the block's
// BN tokens. Weights (raw quants and scales) and activations come through a
// cp.async pipeline in slices of NB blocks of k. Each warp turns its 16
// rows' quants into F16 A fragments in registers (mma.m16n8k16's layout,
// which is wgmma's for A in registers), and per 16 values of k one wgmma
// multiplies them by the activations in shared memory, in wgmma's K-major
// layout with the 128-byte swizzle: 64 values of a token in one 128-byte
// row, its 16-byte pieces permuted by (token mod 8) so the tensor cores read
// 8 tokens' pieces from distinct banks; 1024-byte atoms of 8 tokens, one
// block of BN rows per 64 values of k (measured against the unswizzled
// layout on the H200: 38.9 vs 49.9 us for the 7B q/k/v product at 64 tokens).
// FR blocks' fragments are in flight: a block's wgmmas are one commit group
// and a warp waits only for the group FR - 1 before the one it just issued
// before overwriting that group's registers, so the tensor cores always
// have queued work. The copies of a slice go into the stage of the slice
// two before it, whose wgmmas are done by then (FR <= NB), so the pipe
// never drains at a slice's end.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAVE_WGMMA 1
#endif

template <int TYPE, int WG, int BN, int NB>
struct gemm_wg_smem {
    static constexpr int BM = 64 * WG, THREADS = 128 * WG, KC = NB * QK;
    static constexpr int QB = TYPE == TYPE_Q4_0 ? 16 : 32; // quant bytes a block
    static constexpr int WLD = QB * NB + 16;              // padded row of quants: the 8 rows a load touches fall in distinct banks
    static constexpr int STAGE_W = BM * WLD, STAGE_WD = BM * 2 * NB;
    static constexpr int A_AT = (STAGE_W + STAGE_WD + 1023) / 1024 * 1024, STAGE_A = BN * KC * 2; // (swizzle atoms: 1024-byte aligned)
    static constexpr int STAGE = A_AT + STAGE_A;
    static constexpr int STAGES = 4 * STAGE <= 112 * 1024 ? 4 : 3 * STAGE <= 112 * 1024 ? 3 : 4 * STAGE <= 200 * 1024 ? 4 : 3;
    static constexpr int BYTES = STAGES * STAGE + 1024; // + room to align the base to 1024
    // 16-byte copies a thread issues per slice: quants, activations (rounded up)
    static constexpr int CPW = (BM * QB * NB / 16 + THREADS - 1) / THREADS, CPA = (BN * KC / 8 + THREADS - 1) / THREADS;
};

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs
template <int R> __device__ __forceinline__ void wg_hold(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// A shared-memory matrix descriptor for wgmma of the activation tile at p
// (address / 16 in bits 0-13): K-major with the 128-byte swizzle (mode 1 in
// bits 62-63); the next 8 tokens are an atom (1024 bytes) on (stride / 16 in
// bits 32-45); the leading stride (bits 16-29) is unused, a k16 step staying
// inside a 128-byte row.
__device__ __forceinline__ uint64_t wg_desc(const void *p) {
    constexpr uint64_t layout = (1ull << 16) | ((1024ull / 16) << 32) | (1ull << 62);
    return (uint64_t)(((unsigned)__cvta_generic_to_shared(p) & 0x3FFFF) >> 4) | layout;
}
template <int BN> __device__ __forceinline__ void wg_mma(float (&d)[BN / 2], const uint32_t a[4], uint64_t desc);
template <> __device__ __forceinline__ void wg_mma<8>(float (&d)[4], const uint32_t a[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
template <> __device__ __forceinline__ void wg_mma<32>(float (&d)[16], const uint32_t a[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
template <> __device__ __forceinline__ void wg_mma<64>(float (&d)[32], const uint32_t a[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
template <> __device__ __forceinline__ void wg_mma<128>(float (&d)[64], const uint32_t a[4], uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// Lane (g, tq)'s word of a block's 16 quant bytes q for one k16 step of
// mma's A layout: bytes 2tq, 2tq+1, 2tq+8, 2tq+9 (two aligned loads, one
// byte permute). For Q4_0 the low nibbles are step 0's values, the high
// ones step 1's; for Q8_0 the word is one step's.
__device__ __forceinline__ uint32_t frag_word(const unsigned char *q, int tq) {
    const uint32_t w0 = *(const uint32_t *)(q + 4 * (tq >> 1)), w1 = *(const uint32_t *)(q + 8 + 4 * (tq >> 1));
    return __byte_perm(w0, w1, tq & 1 ? 0x7632 : 0x5410);
}

// One slice of the wgmma GEMMs for a warp: per block of k, its two rows'
// quants into F16 A fragments (chunk(h, b, j): row g + 8h's 16-byte piece j of
// block b in the stage; scale(h, b): that row's scale of block b, twice), then
// one wgmma per 16 values of k on the activations at sa. FR blocks' fragments
// are in flight: a block's wgmmas are one commit group, and a warp waits only
// for the group FR - 1 before the one it just issued before overwriting that
// group's registers.
template <int TYPE, int BN, int NB, int FR, typename CH, typename SC>
__device__ __forceinline__ void wg_slice(float (&acc)[BN / 2], int tq, CH chunk, SC scale, const unsigned char *sa) {
    uint32_t af[FR][2][4]; // [block mod FR][k16 step][a0..a3]
#pragma unroll
    for (int b = 0; b < NB; b++) {
        uint32_t(&f)[2][4] = af[b % FR];
#pragma unroll
        for (int h = 0; h < 2; h++) { // h: row g, then row g + 8
            const __half2 d = scale(h, b);
            uint32_t s[2][2];
            if (TYPE == TYPE_Q4_0) dequant_q4_word(frag_word(chunk(h, b, 0), tq), d, s);
            else {
                dequant_q8_word(frag_word(chunk(h, b, 0), tq), d, s[0]);
                dequant_q8_word(frag_word(chunk(h, b, 1), tq), d, s[1]);
            }
#pragma unroll
            for (int step = 0; step < 2; step++) {
                f[step][h] = s[step][0];
                f[step][2 + h] = s[step][1];
            }
        }
        wg_fence();
#pragma unroll
        for (int step = 0; step < 2; step++) { // k16 step 2b + step of the slice
            const int ks = 2 * b + step;
            wg_mma<BN>(acc, f[step], wg_desc(sa + (ks >> 2) * BN * 128 + (ks & 3) * 32));
        }
        wg_commit();
        wg_wait<FR - 1>(); // block b + 1 - FR's MMAs are done: its fragments may be overwritten
    }
}

// A warp's sums out, MMAs done with them: its rows (wrow, wrow + 8) of the
// block's BN tokens
template <int BN>
__device__ __forceinline__ void wg_put(const float (&acc)[BN / 2], int r0, int wrow, int t0, int tq, int rows, int n, float *C, int ldc, int accumulate,
                                       float *partial) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = r0 + wrow + (e >> 1) * 8, t = t0 + j * 8 + 2 * tq + (e & 1);
            if (r < rows && t < n) gemm_put(acc[j * 4 + e], t, r, n, rows, C, ldc, accumulate, partial);
        }
}
// The wgmma GEMMs' results: every MMA waited for, then the warp's sums out
template <int BN>
__device__ __forceinline__ void wg_store(float (&acc)[BN / 2], int r0, int wrow, int t0, int tq, int rows, int n, float *C, int ldc, int accumulate,
                                         float *partial) {
    wg_wait<0>();
    wg_hold(acc);
    wg_put<BN>(acc, r0, wrow, t0, tq, rows, n, C, ldc, accumulate, partial);
}

template <int TYPE, int WG, int BN, int NB, int FR>
__global__ void __launch_bounds__(128 * WG, 1) k_gemm_wg(const uint8_t *__restrict__ qs, const __half *__restrict__ wd, int dstride, int rows, int k,
                                                        const __half *__restrict__ A, int n, float *C, int ldc, int accumulate, int chunks_per_split,
                                                        float *partial) {
#ifdef HAVE_WGMMA
    typedef gemm_wg_smem<TYPE, WG, BN, NB> L;
    constexpr int BM = L::BM, NTH = L::THREADS, WLD = L::WLD, ST = L::STAGES, KC = L::KC, QB = L::QB;
    constexpr int PLANES = KC / 8; // 8-value pieces of a token's slice
    static_assert(ST >= 3, "a slice's copies go two stages back");
    static_assert(KC % 64 == 0, "slices are whole 64-value swizzle atoms");
    static_assert(FR >= 2 && FR <= NB && NB % FR == 0, "fragment buffers: a slice's blocks cycle through them; slice c - 2's groups done by slice c");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN;
    const int nkb = k / QK, chunks = (nkb + NB - 1) / NB;
    const int c_begin = blockIdx.z * chunks_per_split, c_end = min(chunks, c_begin + chunks_per_split);

    const quant_copies<L::CPW, NTH, BM, QB, NB, WLD, L::STAGE_W> wq(qs, rows, k, r0);
    act_copies<L::CPA, NTH, BN * PLANES, KC> aq;
#pragma unroll
    for (int j = 0; j < L::CPA; j++) { // thread pairs copy 32 contiguous bytes of a token (pieces 2p, 2p + 1), each to its swizzled place
        const int i = threadIdx.x + j * NTH, tok = (i >> 1) % BN, plane = (i >> 1) / BN * 2 + (i & 1);
        aq.set(j, i < BN * PLANES && t0 + tok < n, A + (size_t)(t0 + tok) * k + plane * 8,
               (plane >> 3) * BN * 128 + tok * 128 + (((plane & 7) ^ (tok & 7)) << 4), plane * 8, A);
    }
    auto issue_w = [&](int c) { wq.issue(smem + (c % ST) * L::STAGE, c, qs, wd, dstride, r0, nkb); };
    auto issue_a = [&](int c) { aq.issue(smem + (c % ST) * L::STAGE + L::A_AT, c, A, k); };

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0;
    wg_hold(acc);
    // ST - 2 slices in flight ahead of the one multiplied: slice c - 2's MMAs are waited for (below) before its stage is refilled
    gemm_pipe_start<ST - 2>(c_begin, c_end, issue_w, issue_a);
    const int wrow = warp * 16 + g; // this lane's first row in the block (warps of a warpgroup: 16 rows each, in order)
    for (int c = c_begin; c < c_end; c++) {
        gemm_pipe_next<ST - 2, true>(c, c_end, issue_w, issue_a);
        const unsigned char *st = smem + (c % ST) * L::STAGE;
        const __half *swd = (const __half *)(st + L::STAGE_W);
        wg_slice<TYPE, BN, NB, FR>(
            acc, tq, [&](int h, int b, int j) { return st + (wrow + 8 * h) * WLD + b * QB + 16 * j; },
            [&](int h, int b) { return __half2half2(swd[(wrow + 8 * h) * NB + b]); }, st + L::A_AT);
    }
    cp_async_wait<0>();
    wg_store<BN>(acc, r0, wrow, t0, tq, rows, n, C, ldc, accumulate, partial);
#endif
}

// ---- the wgmma GEMM fed by the tensor memory accelerator (TMA) ----------
// k_gemm_wg spends a third of its time issuing its cp.async copies (every
// thread, every slice: addresses, bounds, ~120 instructions a slice) and
// stalled on their queues (ncu on the H200, 7B batch 64, bench/results/gpu/
// v15-*). Here one thread asks the TMA for a slice in a few instructions:
// the quants as boxes of 64 rows x one slice's bytes, 64- (Q4_0) or 128-byte
// (Q8_0) swizzled so a warp's fragment loads of 8 rows hit distinct banks,
// and the activations as boxes of BN tokens x 64 values in the 128-byte
// swizzle that the wgmma descriptors read (the same layout k_gemm_wg builds
// by hand). Each stage has an mbarrier that the copies complete; the rows'
// scales (8 bytes a row a slice, under the TMA's 16-byte minimum) come into
// the stage by one cp.async a row whose completion arrives on the same
// barrier. Stage reuse is as in k_gemm_wg: slice c's
// copies go into the stage of slice c - 2, whose MMAs every warp has waited
// for before the barrier at the top of slice c - 1... c.
template <int TYPE, int WG, int BN, int NB, int MB>
struct gemm_wt_smem {
    static constexpr int BM = 64 * WG, THREADS = 128 * WG, KC = NB * QK;
    static constexpr int QB = TYPE == TYPE_Q4_0 ? 16 : 32;
    static constexpr int WROW = QB * NB; // a row's quant bytes a slice: the swizzle span (64 or 128)
    static constexpr int STAGE_W = BM * WROW, A_AT = (STAGE_W + 1023) / 1024 * 1024, STAGE_A = BN * KC * 2;
    static constexpr int SC_AT = A_AT + STAGE_A;                              // the rows' NB scales (8 bytes a row)
    static constexpr int STAGE = (SC_AT + BM * 2 * NB + 1023) / 1024 * 1024; // (stages 1024-aligned: the activations' swizzle)
    // up to 6 stages in 200 KiB, or for MB blocks a multiprocessor in their share of its 227 KiB (less each block's
    // 1 KiB reserve, the barriers and the alignment room); at least 3 (a shape whose 3 stages overflow the share
    // gets fewer blocks than MB)
    static constexpr int BUDGET = MB == 1 ? 200 * 1024 : 227 * 1024 / MB - 2112, FIT = BUDGET / STAGE;
    static constexpr int STAGES = FIT < 3 ? 3 : FIT < 6 ? FIT : 6;
    static constexpr int BARS = STAGES * STAGE;            // the stages' mbarriers, after the stages
    static constexpr int BYTES = BARS + 8 * STAGES + 1024; // + room to align the base to 1024
    static constexpr unsigned TX = STAGE_W + STAGE_A;      // bytes a slice's TMA copies deliver (the scales' cp.async arrive apart)
    static_assert(WROW == 64 || WROW == 128, "a row's slice is one swizzle span");
    static_assert(STAGES >= 3, "a slice's copies go two stages back");
    static_assert(NB == 4, "a row's scales of a slice: one 8-byte copy");
};

__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// one arrival that also says how many bytes the phase's copies will deliver
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}
// bar's phase also waits for this thread's cp.async copies so far (one of its expected arrivals)
__device__ __forceinline__ void mbar_arrive_copies(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// box (x, y) of the tensor map into dst; its bytes complete bar's phase
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int x, int y, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
                 "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_addr(bar))
                 : "memory");
}

// The TMA pipeline of the wgmma GEMMs: a block's stages, their barriers and
// what fills and drains one stage. Slice c of row tile r0: the leader's TMA
// boxes of quants (arming the stage's barrier for them and the activations)
// and thread r < BM's copy of row r's scales; of token tile t0: the leader's
// boxes of activations. multiply() waits for the stage and adds its slice
// into a warp's sums.
template <int TYPE, int WG, int BN, int NB, int MB>
struct wt_pipe {
    typedef gemm_wt_smem<TYPE, WG, BN, NB, MB> L;
    unsigned char *smem;
    uint64_t *bars;
    const CUtensorMap *wmap, *amap;
    const __half *wd;
    int dstride, rows;
    int up_at; // 0, or a SwiGLU block's up rows' offset (row_of)
    // the matrix row of the block's row i: r0 + i, or for a SwiGLU block (k_gemm_wt's SWIGLU) gate rows r0 + i in
    // its first half and up rows up_at + r0 + i - BM / 2 in its second
    __device__ __forceinline__ int row_of(int r0, int i) const { return up_at && i >= L::BM / 2 ? up_at + r0 + i - L::BM / 2 : r0 + i; }
    __device__ void init() const { // a stage's phase: the leader's arrival (with the TMA bytes) and each scale-copying thread's
        if (threadIdx.x == 0) {
            for (int s = 0; s < L::STAGES; s++) mbar_init(&bars[s], 1 + L::BM);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncthreads();
    }
    __device__ __forceinline__ void issue_w(int s, int c, int r0) const {
        if (threadIdx.x == 0) {
            mbar_expect_tx(&bars[s], L::TX);
#pragma unroll
            for (int w = 0; w < WG; w++) tma_load_2d(smem + s * L::STAGE + w * 64 * L::WROW, wmap, c * L::WROW, row_of(r0, 64 * w), &bars[s]);
        }
        if (threadIdx.x < L::BM) {
            const int srow = row_of(r0, (int)threadIdx.x);
            const bool in = srow < rows;
            cp_async_n<8>(smem + s * L::STAGE + L::SC_AT + threadIdx.x * 8, in ? wd + (size_t)srow * dstride + (size_t)c * NB : wd, in);
            mbar_arrive_copies(&bars[s]);
        }
    }
    __device__ __forceinline__ void issue_a(int s, int c, int t0) const { // (the leader only)
#pragma unroll
        for (int h = 0; h < L::KC / 64; h++) tma_load_2d(smem + s * L::STAGE + L::A_AT + h * BN * 128, amap, c * L::KC + 64 * h, t0, &bars[s]);
    }
    // before refilling stages: every warp's reads of them before the TMA's writes (the leader, after a barrier)
    __device__ __forceinline__ void release() const { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
    // A block's slices i = 0 .. count - 1, slice i at (c, r0, t0) = at(i), go through the stages in turn (slice i: stage
    // i % ST). start() issues the first AHEAD = ST - 2 (the activations once the previous kernel is done); step(i)
    // issues slice i + AHEAD into the stage of slice i - 2, whose MMAs every warp has waited for by the barrier, then
    // multiplies slice i into a warp's sums.
    static constexpr int ST = L::STAGES, AHEAD = ST - 2;
    template <typename AT> __device__ __forceinline__ void start(int count, AT at) const {
        pdl_trigger();
        for (int s = 0; s < AHEAD && s < count; s++) {
            const int3 p = at(s);
            issue_w(s, p.x, p.y);
        }
        pdl_wait(); // the activations are the previous kernel's
        if (threadIdx.x == 0)
            for (int s = 0; s < AHEAD && s < count; s++) {
                const int3 p = at(s);
                issue_a(s, p.x, p.z);
            }
    }
    template <int FR, typename AT>
    __device__ __forceinline__ void step(float (&acc)[BN / 2], int i, int count, AT at, int wrow, int tq) const {
        __syncthreads(); // every warp is past slice i - 1's fragment loads and has waited for slice i - 2's MMAs
        if (i + AHEAD < count) {
            const int3 p = at(i + AHEAD);
            const int sn = (i + AHEAD) % ST;
            if (threadIdx.x == 0) release();
            issue_w(sn, p.x, p.y);
            if (threadIdx.x == 0) issue_a(sn, p.x, p.z);
        }
        multiply<FR>(acc, i % ST, (i / ST) & 1, wrow, tq);
    }
    template <int FR> __device__ __forceinline__ void multiply(float (&acc)[BN / 2], int s, unsigned parity, int wrow, int tq) const {
        constexpr int QB = L::QB, WROW = L::WROW;
        const int swz = WROW == 64 ? (wrow >> 1) & 3 : wrow & 7; // (this lane's second row, wrow + 8, has the same swizzle)
        mbar_wait(&bars[s], parity);
        const unsigned char *st = smem + s * L::STAGE, *sa = st + L::A_AT;
        const uint2 sc[2] = {*(const uint2 *)(st + L::SC_AT + wrow * 8), *(const uint2 *)(st + L::SC_AT + (wrow + 8) * 8)};
        wg_slice<TYPE, BN, NB, FR>( // pieces of a row in swizzled order; a row's 4 scales in one 8-byte word pair
            acc, tq, [&](int h, int b, int j) { return st + (wrow + 8 * h) * WROW + ((((QB / 16) * b + j) ^ swz) << 4); },
            [&](int h, int b) { return bits_h2(__byte_perm(b < 2 ? sc[h].x : sc[h].y, 0, b & 1 ? 0x3232 : 0x1010)); }, sa);
    }
};

template <int TYPE, int WG, int BN, int NB, int MB>
__device__ __forceinline__ wt_pipe<TYPE, WG, BN, NB, MB> wt_pipe_at(unsigned char *smem_raw, const CUtensorMap *wmap, const CUtensorMap *amap,
                                                                const __half *wd, int dstride, int rows, int up_at) {
    typedef gemm_wt_smem<TYPE, WG, BN, NB, MB> L;
    unsigned char *smem = smem_raw + ((1024 - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    return wt_pipe<TYPE, WG, BN, NB, MB>{smem, (uint64_t *)(smem + L::BARS), wmap, amap, wd, dstride, rows, up_at};
}

// SwiGLU of a gate/up block's sums (k_gemm_wt's SWIGLU): every warp's sums
// into the stages as a [BM][BN + 1] float tile (rows: the block's gate rows,
// then the same rows of up), then act[t][r0 + j] = silu(gate_j) x up_j as
// F16, a thread a value with consecutive threads on consecutive j (the
// stores coalesce; the tile's odd row length keeps the column reads off
// each other's banks). Same arithmetic as k_make_act on the F32 products.
template <int BM, int BN, int THREADS>
__device__ __forceinline__ void wg_swiglu_out(float (&acc)[BN / 2], float *tile, int r0, int wrow, int t0, int tq, int n, int ff, __half *act) {
    wg_wait<0>();
    wg_hold(acc);
    __syncthreads(); // every warp is past its last reads of the stages
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) tile[(wrow + (e >> 1) * 8) * (BN + 1) + j * 8 + 2 * tq + (e & 1)] = acc[j * 4 + e];
    __syncthreads();
    constexpr int HALF = BM / 2;
    for (int i = threadIdx.x; i < HALF * BN; i += THREADS) {
        const int t = i / HALF, j = i % HALF;
        if (t0 + t < n && r0 + j < ff)
            act[(size_t)(t0 + t) * ff + r0 + j] = __float2half(silu(tile[j * (BN + 1) + t]) * tile[(j + HALF) * (BN + 1) + t]);
    }
}

// SWIGLU: W stacks [gate; up] (rows = 2 ff, ff = up_at) and the block takes
// gate rows r0 .. r0 + BM / 2 in its first warpgroups and the same rows of up
// in the others; instead of the sums it writes silu(gate) x up as the next
// product's F16 activations, act [n][ff] (one k split: the sums are whole).
// It takes the place of k_make_act and the F32 [gate | up] round trip
// (PLUMB_CUDA_SWIGLU=epilogue, the default: 7B Q4_0 batch 64 on an H100
// 11681 / 11707 -> 11873 / 11869 tok/s, bench/results/gpu/v22; the logits
// agree with k_make_act's to every printed digit of perplexity --kl).
template <int TYPE, int WG, int BN, int NB, int FR, int MB, bool SWIGLU>
__global__ void __launch_bounds__(128 * WG, MB) k_gemm_wt(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap,
                                                        const __half *__restrict__ wd, int dstride, int rows, int k, int n, float *C, int ldc,
                                                        int accumulate, int chunks_per_split, float *partial, __half *act, int up_at) {
#ifdef HAVE_WGMMA
    typedef gemm_wt_smem<TYPE, WG, BN, NB, MB> L;
    static_assert(FR >= 2 && FR <= NB && NB % FR == 0, "fragment buffers: a slice's blocks cycle through them; slice c - 2's groups done by slice c");
    static_assert(!SWIGLU || (WG % 2 == 0 && L::BM * (BN + 1) * 4 <= L::STAGES * L::STAGE), "SwiGLU: gate and up warpgroups, the tile in the stages");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const wt_pipe<TYPE, WG, BN, NB, MB> pipe = wt_pipe_at<TYPE, WG, BN, NB, MB>(smem_raw, &wmap, &amap, wd, dstride, rows, SWIGLU ? up_at : 0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int r0 = blockIdx.x * (SWIGLU ? L::BM / 2 : L::BM), t0 = blockIdx.y * BN;
    const int nkb = k / QK, chunks = (nkb + NB - 1) / NB;
    const int c_begin = blockIdx.z * chunks_per_split, count = min(chunks, c_begin + chunks_per_split) - c_begin;
    auto at = [&](int i) { return make_int3(c_begin + i, r0, t0); }; // slice i: chunk c_begin + i of this block's tile
    pipe.init();
    pipe.start(count, at);

    const int wrow = warp * 16 + g; // this lane's first row in the block
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0;
    wg_hold(acc);
    for (int i = 0; i < count; i++) pipe.template step<FR>(acc, i, count, at, wrow, tq);
    if constexpr (SWIGLU) wg_swiglu_out<L::BM, BN, L::THREADS>(acc, (float *)pipe.smem, r0, wrow, t0, tq, n, up_at, act);
    else wg_store<BN>(acc, r0, wrow, t0, tq, rows, n, C, ldc, accumulate, partial);
#endif
}

// 1 where this device runs the sm_90a code (wgmma), 0 where it runs another image
__global__ void k_wgmma_probe(int *out) {
#ifdef HAVE_WGMMA
    *out = 1;
#else
    *out = 0;
#endif
}

// the register-dequantizing GEMM's block shapes: warps over rows (each 16 MT rows x 8 NT tokens), blocks per
// slice, groups of warps splitting each slice
#define GR_CONFIGS(X)                                                                                                                      \
    X(4, 2, 2, 4, 1) X(4, 2, 2, 4, 2) X(4, 2, 2, 4, 4) X(4, 2, 4, 4, 2) X(4, 2, 4, 4, 4) X(4, 2, 8, 4, 1) X(4, 2, 8, 4, 2) X(4, 2, 8, 4, 4) \
        X(4, 2, 8, 8, 2) X(4, 2, 8, 8, 4) X(2, 2, 8, 4, 4)
#define GR_NAMES "4x2x2x4x1, 4x2x2x4x2, 4x2x2x4x4, 4x2x4x4x2, 4x2x4x4x4, 4x2x8x4x1, 4x2x8x4x2, 4x2x8x4x4, 4x2x8x8x2, 4x2x8x8x4, 2x2x8x4x4"
#define GR_CODE(WM, MT, NT, NB, KS) ((WM) * 10000 + (MT) * 1000 + (NT) * 100 + (NB) * 10 + (KS))

// the wgmma GEMM's block shapes: warpgroups (64 rows each), tokens, blocks of k per slice,
// blocks' fragments in flight and blocks a multiprocessor (the TMA kernel: its stages sized to fit them; three
// warpgroups twice would have 80 registers a thread, and ptxas then serializes the wgmmas)
#define WGM_CONFIGS(X)                                                                                                                       \
    X(2, 8, 4, 4, 1) X(4, 8, 4, 4, 1) X(2, 32, 4, 4, 1) X(2, 64, 4, 2, 1) X(2, 64, 4, 4, 1) X(2, 64, 8, 4, 1) X(3, 64, 4, 4, 1) X(4, 64, 4, 2, 1) \
        X(4, 64, 4, 4, 1) X(2, 128, 4, 4, 1) X(4, 128, 4, 2, 1) X(2, 64, 4, 4, 2)
#define WGM_NAMES "2x8x4x4, 4x8x4x4, 2x32x4x4, 2x64x4x2, 2x64x4x4, 2x64x8x4, 3x64x4x4, 4x64x4x2, 4x64x4x4, 2x128x4x4, 4x128x4x2, 2x64x4x4x2"
// (arguments in parentheses: wg_tile_for passes a conditional expression, which unparenthesized took the
// whole sum as its condition and gave 2, 3 or 4 as the code, a shape nothing launched)
#define WGM_CODE(WG, BN, NB, FR, MB) ((MB) * 1000000 + (WG) * 100000 + (BN) * 100 + (NB) * 10 + (FR))
static_assert(WGM_CODE(1 ? 4 : 2, 64, 4, 4, 1) == 1406444, "WGM_CODE takes expressions as arguments");

// cos/sin of rotary angle j at position p, in double like the host
__device__ __forceinline__ void rope_angle(int p, int j, int half_rot, float base, float *cs, float *sn) {
    const double theta = (double)p * pow((double)base, -2.0 * j / (2 * half_rot));
    *cs = (float)cos(theta);
    *sn = (float)sin(theta);
}

// cos/sin of each token's rotary angles
__global__ void k_rope_table(const int *pos, int n, int half_rot, float base, float *cs, float *sn) {
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * half_rot) return;
    rope_angle(pos[i / half_rot], i % half_rot, half_rot, base, cs + i, sn + i);
}

// What an attention kernel needs to do k_rope_kv's work itself (ROPE): the
// layer's q/k/v biases (or NULL), the step's rotary table, n_rot, NeoX pairs.
struct rope_in {
    const float *bias, *cs, *sn;
    int n_rot, neox;
};

// Where head h of position p of a sequence (its block table tab) starts in a layer's keys or values
__device__ __forceinline__ size_t kv_at(const int *tab, int p, int h, int layer, kv_geo g) {
    return ((size_t)tab[p / g.kv_block] * g.n_layers + layer) * g.kv_block * (size_t)g.kv_dim + (size_t)(p % g.kv_block) * g.ps + (size_t)h * g.hs;
}

// Biases into q/k/v, RoPE on q (in place) and k, k and v (F16) into the
// token's cache slot. qkv rows: [q (n_head*hd) | k (kv_dim) | v (kv_dim)].
// grid (n, n_head + 2 n_head_kv): a block per (token, head), a thread per value.
__global__ void k_rope_kv(float *__restrict__ qkv, int ldq, const float *__restrict__ bias, const float *__restrict__ cs, const float *__restrict__ sn,
                          const int *__restrict__ pos, const int *__restrict__ seq, const int *__restrict__ table, int max_blocks, int n_head,
                          int n_head_kv, int hd, int n_rot, int neox, __half *__restrict__ kp, __half *__restrict__ vp, int layer, kv_geo g,
                          psum ps) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, kv_dim = n_head_kv * hd, qd = n_head * hd;
    const int idx = h * hd + i; // this value's column in the qkv row
    float *row = qkv + (size_t)t * ldq;
    float v = 0, out = 0;
    auto at = [&](int c) { return ps.p ? psum1(ps, row[c], t, c) : row[c]; }; // with ps, row holds only partial sums (rows = ldq)
    if (i < hd) {
        v = at(idx) + (bias ? bias[idx] : 0.0f);
        out = v;
        if (h < n_head + n_head_kv && i < n_rot) { // q or k, rotary part: pair (a, b) turns by the angle of pair j
            const int half = n_rot / 2;
            const int j = neox ? (i < half ? i : i - half) : i / 2;
            const int first = neox ? i < half : (i & 1) == 0;
            const int partner = h * hd + (neox ? (first ? i + half : i - half) : (first ? i + 1 : i - 1));
            const float pv = at(partner) + (bias ? bias[partner] : 0.0f);
            const float c = cs[(size_t)t * half + j], s = sn[(size_t)t * half + j];
            out = first ? v * c - pv * s : pv * s + v * c;
        }
    }
    __syncthreads(); // every partner is read before q is rotated in place
    if (i >= hd) return;
    if (h < n_head) { row[idx] = out; return; }
    const int is_k = idx < qd + kv_dim, kvh = is_k ? h - n_head : h - n_head - n_head_kv;
    (is_k ? kp : vp)[kv_at(table + seq[t] * max_blocks, pos[t], kvh, layer, g) + i] = __float2half(out);
}

// k_rope_kv's work with a thread per rotation pair (PLUMB_CUDA_ROPE=pairs;
// the default of wide models, see wide_model): k_rope_kv gives each value a thread that also reads its
// partner, so every value (and, after a split-K product, each of its partial
// sums) is read twice, and a block waits at a barrier before q is rotated in
// place. Here thread p of a head reads pair p's two values once, turns them
// by the same expressions (the same bits) and writes both; the values RoPE
// leaves alone (v heads, q/k past n_rot) go in a loop over the head's
// threads. tph threads a head (n_rot / 2 rounded up to a warp), the block's
// heads side by side. grid (n, ceil((n_head + 2 n_head_kv) / heads a block)).
__global__ void k_rope_kv_pairs(float *__restrict__ qkv, int ldq, const float *__restrict__ bias, const float *__restrict__ cs,
                                const float *__restrict__ sn, const int *__restrict__ pos, const int *__restrict__ seq, const int *__restrict__ table,
                                int max_blocks, int n_head, int n_head_kv, int hd, int n_rot, int neox, __half *__restrict__ kp, __half *__restrict__ vp,
                                int layer, kv_geo g, int tph, psum ps) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x, h = blockIdx.y * (blockDim.x / tph) + threadIdx.x / tph, p = threadIdx.x % tph, half = n_rot / 2;
    if (h >= n_head + 2 * n_head_kv) return;
    float *row = qkv + (size_t)t * ldq;
    auto at = [&](int c) { return (ps.p ? psum1(ps, row[c], t, c) : row[c]) + (bias ? bias[c] : 0.0f); };
    const int is_k = h < n_head + n_head_kv, kvh = is_k ? h - n_head : h - n_head - n_head_kv;
    const size_t slot = h < n_head ? 0 : kv_at(table + seq[t] * max_blocks, pos[t], kvh, layer, g);
    auto put = [&](int i, float out) { // value i of head h: q in place, k and v (F16) into the token's cache slot
        if (h < n_head) row[h * hd + i] = out;
        else (is_k ? kp : vp)[slot + i] = __float2half(out);
    };
    const int turned = h < n_head + n_head_kv; // q or k
    if (turned && p < half) { // pair p: (a, b) turns by the angle of pair p
        const int ia = neox ? p : 2 * p, ib = neox ? p + half : 2 * p + 1;
        const float a = at(h * hd + ia), b = at(h * hd + ib);
        const float c = cs[(size_t)t * half + p], s = sn[(size_t)t * half + p];
        put(ia, a * c - b * s);
        put(ib, a * s + b * c); // (k_rope_kv's pv * s + v * c with v = b, pv = a)
    }
    for (int i = (turned ? n_rot : 0) + p; i < hd; i += tph) put(i, at(h * hd + i));
}

// k_rope_kv_pairs for heads of 128 values all turned, Llama's interleaved
// pairs (not NeoX): a warp a head, a thread 4 consecutive values (pairs 2p,
// 2p + 1) by float4 loads of the row and of each split-K partial, and 8-byte
// F16 stores into the cache. 128 threads: 4 heads a block, a quarter of the
// value-per-thread kernel's threads (the 7B batch-64 step's k_rope_kv_pairs
// was 10 us on the H100, 1.45 waves of 64 x 48 blocks; bench/results/gpu/v22).
// Same arithmetic: the partials added in psum1's order, (a, b) turned as there.
// Values c .. c + 3 of token t's q/k/v row: the row (or the sum of its split-K
// partials, which replaces it unless the product accumulates) plus the bias
__device__ __forceinline__ float4 qkv_value4(const float *row, const float *bias, const psum &ps, int t, int c) {
    float4 v = ps.p && !ps.accumulate ? make_float4(0, 0, 0, 0) : *(const float4 *)(row + c); // (a sum that replaces the row never reads it)
    if (ps.p) v = psum4(ps, v, t, c);
    if (bias) {
        const float4 b = *(const float4 *)(bias + c);
        v = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
    }
    return v;
}
// Values i .. i + 3 of a head of 128 turned by token t's angles: Llama's pairs (i, i + 1), (i + 2, i + 3)
__device__ __forceinline__ float4 rope_turn4(float4 v, const float *cs, const float *sn, int t, int i) {
    constexpr int HALF = 64;
    const float c0 = cs[(size_t)t * HALF + i / 2], s0 = sn[(size_t)t * HALF + i / 2];
    const float c1 = cs[(size_t)t * HALF + i / 2 + 1], s1 = sn[(size_t)t * HALF + i / 2 + 1];
    return make_float4(v.x * c0 - v.y * s0, v.x * s0 + v.y * c0, v.z * c1 - v.w * s1, v.z * s1 + v.w * c1);
}

__global__ void k_rope_kv_quads(float *__restrict__ qkv, int ldq, const float *__restrict__ bias, const float *__restrict__ cs,
                                const float *__restrict__ sn, const int *__restrict__ pos, const int *__restrict__ seq, const int *__restrict__ table,
                                int max_blocks, int n_head, int n_head_kv, __half *__restrict__ kp, __half *__restrict__ vp, int layer, kv_geo g,
                                psum ps) {
    constexpr int HD = 128;
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x, h = blockIdx.y * 4 + (threadIdx.x >> 5), i = (threadIdx.x & 31) * 4;
    if (h >= n_head + 2 * n_head_kv) return;
    float *row = qkv + (size_t)t * ldq;
    const int c = h * HD + i;
    float4 v = qkv_value4(row, bias, ps, t, c);
    if (h < n_head + n_head_kv) v = rope_turn4(v, cs, sn, t, i); // q or k: pairs i / 2 and i / 2 + 1 turn
    if (h < n_head) {
        *(float4 *)(row + c) = v;
        return;
    }
    const int is_k = h < n_head + n_head_kv, kvh = is_k ? h - n_head : h - n_head - n_head_kv;
    __half2 *dst = (__half2 *)((is_k ? kp : vp) + kv_at(table + seq[t] * max_blocks, pos[t], kvh, layer, g) + i);
    dst[0] = __floats2half2_rn(v.x, v.y);
    dst[1] = __floats2half2_rn(v.z, v.w);
}

// One warp writes one 32-value block of activations (lane = value): int8
// quants with scale and scale x sum, and/or F16.
__device__ __forceinline__ void store_act_warp(float v, int row, int blk, int k, int fmt, int8_t *aq, float2 *ad, __half *ah) {
    const int lane = threadIdx.x & 31;
    if (fmt & ACT_Q8) {
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        const int q = __float2int_rn(v * id);
        const int sum = warp_isum(q);
        aq[(size_t)row * k + blk * QK + lane] = (int8_t)q;
        if (lane == 0) ad[(size_t)row * (k / QK) + blk] = make_float2(d, d * (float)sum);
    }
    if (fmt & ACT_F16) ah[(size_t)row * k + blk * QK + lane] = __float2half(v);
}

// Attention for one (token, kv head, HG query heads of its group): W warps
// split the positions, NP positions per pass loaded (as F16, converted when
// used) before any is used; each warp keeps an online softmax per head (a
// lane holds E of the head's hd dims) and takes a pass's NP scores together:
// their warp sums interleave, and the running maximum, the rescale of the
// sums and its exponential happen once a pass instead of once a position.
// Then the warps' partial results are merged. With fmt, the output goes
// straight to the next product's activations (hd % 32 == 0), else to out as
// floats. W = 4, or 16 when the step has too few (token, head) blocks to
// cover the GPU (decode of one or a few sequences: each warp's chain of
// dependent loads is then 4 times shorter). NP = 8 (16-warp blocks:
// PLUMB_CUDA_ATT_NP=4 was the earlier choice, kept for A/B runs).
//
// With ROPE (a decode step of one token: PLUMB_CUDA_ROPE=attention), the
// block also does k_rope_kv's work for its heads once the product before it
// is done: bias and RoPE on this token's q (into shared memory) and on its k
// of head kvh, k and v into the cache slot, and the newest position's key and
// value read back from shared memory (the cache may be read through the
// non-coherent path), so no kernel runs between the q/k/v product and this.
template <int E, int HG, int W, int NP, bool EARLY, bool ROPE>
__global__ void __launch_bounds__(32 * W) k_attention(const float *__restrict__ qkv, int ldq, const int *__restrict__ pos, const int *__restrict__ seq,
                                                   const int *__restrict__ table, int max_blocks, int n_head, int n_head_kv, int hd,
                                                   const __half *__restrict__ kp, const __half *__restrict__ vp, int layer, kv_geo kg, float *out,
                                                   int fmt, int8_t *aq, float2 *ad, __half *ah, rope_in ri) {
    constexpr int E2 = (E + 1) / 2;
    pdl_trigger();
    extern __shared__ float sh[]; // [W][HG] m, l, then [W][HG][hd] acc; with ROPE then [HG][hd] q (floats), [2][hd] k, v (F16)
    const int t = blockIdx.x / n_head_kv, kvh = blockIdx.x % n_head_kv, group = n_head / n_head_kv, qd = n_head * hd;
    const int h0 = kvh * group + blockIdx.y * HG, nh = min(HG, kvh * group + group - h0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, kv_dim = n_head_kv * hd, len = pos[t] + 1;
    const int *tab = table + seq[t] * max_blocks;
    const float scale = rsqrtf((float)hd);
    const int vec = hd == 32 * E; // each lane's E values are contiguous and whole: one vector load
    // Positions, block tables and the keys/values of earlier steps are
    // complete before this step's kernels start; the positions this step
    // writes (its tokens of this sequence: none below the least of their
    // positions) come from the kernel before this one. With EARLY, the
    // first pass's older positions are loaded before waiting for that
    // kernel, so their latency hides behind its tail (it costs registers:
    // 80 instead of 72 in the 4-warp kernel).
    int old = 0;
    if constexpr (EARLY) {
        const int n = (int)gridDim.x / n_head_kv, sq = seq[t];
        old = INT_MAX;
        for (int i = lane; i < n; i += 32)
            if (seq[i] == sq) old = min(old, pos[i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) old = min(old, __shfl_xor_sync(0xffffffffu, old, o));
    }
    float *rq = sh + W * HG * (2 + hd);      // (ROPE) q of the block's heads, turned
    __half *rkv = (__half *)(rq + HG * hd); // (ROPE) the token's k and v of head kvh
    auto load = [&](int p, __half2 *kb, __half2 *vb) { // this lane's E values of position p's key and value
        const size_t off = kv_at(tab, p, kvh, layer, kg) + lane * E;
        if (ROPE && p == len - 1) { // the newest position: this block's own k and v
            const __half zero = __float2half(0.0f);
#pragma unroll
            for (int e = 0; e < E2; e++) {
                const int i0 = lane * E + 2 * e, ok0 = 2 * e < E && i0 < hd, ok1 = 2 * e + 1 < E && i0 + 1 < hd;
                kb[e] = __halves2half2(ok0 ? rkv[i0] : zero, ok1 ? rkv[i0 + 1] : zero);
                vb[e] = __halves2half2(ok0 ? rkv[hd + i0] : zero, ok1 ? rkv[hd + i0 + 1] : zero);
            }
        } else if (vec && E % 2 == 0) {
            const __half2 *k2 = (const __half2 *)(kp + off), *v2 = (const __half2 *)(vp + off);
            if (E == 8) { *(uint4 *)kb = *(const uint4 *)k2; *(uint4 *)vb = *(const uint4 *)v2; }
            else if (E == 4) { *(uint2 *)kb = *(const uint2 *)k2; *(uint2 *)vb = *(const uint2 *)v2; }
            else { kb[0] = k2[0]; vb[0] = v2[0]; }
        } else {
            const __half zero = __float2half(0.0f);
#pragma unroll
            for (int e = 0; e < E2; e++) {
                const int i0 = lane * E + 2 * e, ok0 = 2 * e < E && i0 < hd, ok1 = 2 * e + 1 < E && i0 + 1 < hd;
                kb[e] = __halves2half2(ok0 ? kp[off + 2 * e] : zero, ok1 ? kp[off + 2 * e + 1] : zero);
                vb[e] = __halves2half2(ok0 ? vp[off + 2 * e] : zero, ok1 ? vp[off + 2 * e + 1] : zero);
            }
        }
    };
    __half2 kb[NP][E2], vb[NP][E2];
#pragma unroll
    for (int u = 0; u < NP; u++)
        if (warp + u * W < old) load(warp + u * W, kb[u], vb[u]);
    pdl_wait();
    if constexpr (ROPE) { // k_rope_kv's formula, value by value: nh q heads, then k and v of head kvh
        const float *row = qkv + (size_t)t * ldq;
        const size_t slot = kv_at(tab, len - 1, kvh, layer, kg);
        const int half = ri.n_rot / 2;
        for (int i = threadIdx.x; i < (nh + 2) * hd; i += blockDim.x) {
            const int hh = i / hd, dim = i % hd;
            const int base = hh < nh ? (h0 + hh) * hd : hh == nh ? qd + kvh * hd : qd + kv_dim + kvh * hd;
            const float v = row[base + dim] + (ri.bias ? ri.bias[base + dim] : 0.0f);
            float o = v;
            if (hh <= nh && dim < ri.n_rot) {
                const int j = ri.neox ? (dim < half ? dim : dim - half) : dim / 2;
                const int first = ri.neox ? dim < half : (dim & 1) == 0;
                const int partner = base + (ri.neox ? (first ? dim + half : dim - half) : (first ? dim + 1 : dim - 1));
                const float pv = row[partner] + (ri.bias ? ri.bias[partner] : 0.0f);
                const float c = ri.cs[(size_t)t * half + j], sn = ri.sn[(size_t)t * half + j];
                o = first ? v * c - pv * sn : pv * sn + v * c;
            }
            if (hh < nh) rq[hh * hd + dim] = o;
            else {
                const __half o16 = __float2half(o);
                rkv[(hh - nh) * hd + dim] = o16;
                ((__half *)(hh == nh ? kp : vp))[slot + dim] = o16;
            }
        }
        __syncthreads();
    }
    float q[HG][E], acc[HG][E], m[HG], l[HG];
#pragma unroll
    for (int g = 0; g < HG; g++) {
        m[g] = -INFINITY;
        l[g] = 0;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int i = lane * E + e;
            q[g][e] = g < nh && i < hd ? (ROPE ? rq[g * hd + i] : qkv[(size_t)t * ldq + (h0 + g) * hd + i]) * scale : 0.0f;
            acc[g][e] = 0;
        }
    }
    for (int p = warp; p < len; p += NP * W) {
#pragma unroll
        for (int u = 0; u < NP; u++)
            if (p + u * W < len && (p != warp || p + u * W >= old)) load(p + u * W, kb[u], vb[u]);
#pragma unroll
        for (int g = 0; g < HG; g++) {
            if (g >= nh) break;
            float s[NP];
#pragma unroll
            for (int u = 0; u < NP; u++) {
                s[u] = 0;
                if (p + u * W < len)
#pragma unroll
                    for (int e = 0; e < E2; e++) {
                        const float2 kf = __half22float2(kb[u][e]);
                        s[u] += q[g][2 * e] * kf.x + (2 * e + 1 < E ? q[g][2 * e + 1] * kf.y : 0.0f);
                    }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int u = 0; u < NP; u++) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
            float mn = m[g];
#pragma unroll
            for (int u = 0; u < NP; u++)
                if (p + u * W < len) mn = fmaxf(mn, s[u]);
            const float corr = __expf(m[g] - mn);
            l[g] *= corr;
#pragma unroll
            for (int e = 0; e < E; e++) acc[g][e] *= corr;
#pragma unroll
            for (int u = 0; u < NP; u++)
                if (p + u * W < len) {
                    const float w = __expf(s[u] - mn);
                    l[g] += w;
#pragma unroll
                    for (int e = 0; e < E2; e++) {
                        const float2 vf = __half22float2(vb[u][e]);
                        acc[g][2 * e] += w * vf.x;
                        if (2 * e + 1 < E) acc[g][2 * e + 1] += w * vf.y;
                    }
                }
            m[g] = mn;
        }
    }
    float *sm_m = sh, *sm_l = sh + W * HG, *sm_acc = sh + 2 * W * HG;
#pragma unroll
    for (int g = 0; g < HG; g++) {
        if (g >= nh) break;
        if (lane == 0) { sm_m[warp * HG + g] = m[g]; sm_l[warp * HG + g] = l[g]; }
#pragma unroll
        for (int e = 0; e < E; e++)
            if (lane * E + e < hd) sm_acc[(warp * HG + g) * hd + lane * E + e] = acc[g][e];
    }
    __syncthreads();
    // merge: value i of this block's nh heads; with fmt, whole warps of 32 consecutive values
    const int total = nh * hd, rounds = (total + blockDim.x - 1) / blockDim.x;
    for (int r = 0; r < rounds; r++) {
        const int i = r * blockDim.x + threadIdx.x;
        float o = 0;
        if (i < total) {
            const int g = i / hd, dim = i % hd;
            float mx = -INFINITY;
            for (int w = 0; w < W; w++) mx = fmaxf(mx, sm_m[w * HG + g]);
            float z = 0;
            for (int w = 0; w < W; w++) {
                const float mw = sm_m[w * HG + g];
                if (mw == -INFINITY) continue; // a warp that saw no positions
                const float f = __expf(mw - mx);
                z += sm_l[w * HG + g] * f;
                o += sm_acc[(w * HG + g) * hd + dim] * f;
            }
            o /= z;
        }
        if (fmt) {
            if (r * blockDim.x + (threadIdx.x & ~31) < total) store_act_warp(o, t, (h0 * hd + i) / QK, qd, fmt, aq, ad, ah);
        } else if (i < total) {
            out[(size_t)t * qd + h0 * hd + i] = o;
        }
    }
}

// Attention for steps of many sequences on tensor cores: a warp per (token,
// head) of a model whose heads each have their own keys and values, head_dim
// 128 (the scalar kernel above spends most of its issue slots on per-position
// dot products and their warp sums: ncu, 7B batch 64, bench/results/gpu/v15).
// Per 16 positions, the 16 scores are 8 mma.m16n8k16 of the keys (A: lane
// (g, tq) holds positions g and g + 8, dims 32tq..32tq+31, as loaded: step s
// takes its words 2s and 2s+1, i.e. k index 2tq + {0,1} is dim 32tq + 4s +
// {0,1} and 2tq + 8 + {0,1} is 32tq + 4s + {2,3}) by the query (B, the same
// mapping, in every column). The output is 8 more of the values transposed
// (A: rows dims, k positions: lane (g, tq) loads positions 2tq, 2tq + 1, 2tq
// + 8, 2tq + 9 at dims 16g..16g+15, and tile m's rows g, g + 8 are dims 16g +
// 2m, 16g + 2m + 1: byte permutes pair two positions' values of a dim) by the
// probabilities (B, every column). Query and probabilities in F16 (the query
// scaled by 1/sqrt(hd) first), sums and the online softmax in F32.
// MINB: blocks a multiprocessor the registers must allow. Left to itself
// the compiler takes 137 registers a thread: 3 blocks, 396 of a 7B batch-64
// step's 512 blocks in the first wave on the H200's 132 multiprocessors;
// 4 blocks (128 registers, 4 bytes spilled) take all 512 at once: the
// default, 7B Q4_0 batch 64 10385-10402 -> 10673 tok/s on an H100, and with
// PLUMB_CUDA_WG_ROWS=tune 10639 -> 10841-10854 (bench/results/gpu/v18; same
// KL against the CPU). PLUMB_CUDA_ATT_MINB=3 gives the compiler's choice.
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

//
// ROPE (PLUMB_CUDA_ROPE=...+mma, the default of wide models; a step whose tokens are each of another
// sequence, so its own position is the only one this step adds): the warp
// does k_rope_kv_quads's work for its (token, head) first, the same
// arithmetic (qkv_value4, rope_turn4: the same bits): lane l turns values
// 4l .. 4l + 3 of q and k, writes k and v as F16 into the token's cache slot
// and keeps them in shared memory, where the loop takes the newest
// position's keys and values from (it never reads back a slot this kernel
// writes); q goes through `staged`. Then no k_rope_kv_quads launch: one
// kernel and a pass over q/k/v less a layer.
template <int MINB, bool PF, bool ROPE>
__global__ void __launch_bounds__(128, MINB) k_attention_mma(const float *__restrict__ qkv, int ldq, const int *__restrict__ pos, const int *__restrict__ seq,
                                                       const int *__restrict__ table, int max_blocks, int n_head, int pairs,
                                                       const __half *__restrict__ kp, const __half *__restrict__ vp, int layer, kv_geo kg,
                                                       float *out, int fmt, int8_t *aq, float2 *ad, __half *ah, __half *kw, __half *vw,
                                                       rope_in ri, psum ps) { // (kw, vw: kp, vp to write through, ROPE only)
    constexpr int HD = 128;
    __shared__ __align__(16) float staged[4][HD]; // (ROPE: float4 stores)
    __shared__ __align__(16) __half newest[4][2][HD]; // ROPE: a warp's token's key and value as the cache holds them
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int pair = blockIdx.x * 4 + warp;
    if (pair >= pairs) return; // (no block-wide barrier below)
    const int t = pair / n_head, h = pair % n_head, len = pos[t] + 1;
    const int *tab = table + seq[t] * max_blocks;
    auto at = [&](int p) { return kv_at(tab, p, h, layer, kg); };
    const int cached = ROPE ? len - 1 : len; // positions read from the cache
    if constexpr (ROPE) {
        const int i = 4 * lane;
        const float *row = qkv + (size_t)t * ldq;
        const float4 q = rope_turn4(qkv_value4(row, ri.bias, ps, t, h * HD + i), ri.cs, ri.sn, t, i);
        const float4 k = rope_turn4(qkv_value4(row, ri.bias, ps, t, (n_head + h) * HD + i), ri.cs, ri.sn, t, i);
        const float4 v = qkv_value4(row, ri.bias, ps, t, (2 * n_head + h) * HD + i);
        *(float4 *)&staged[warp][i] = q;
        const __half2 kh[2] = {__floats2half2_rn(k.x, k.y), __floats2half2_rn(k.z, k.w)}, vh[2] = {__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)};
        const size_t slot = at(len - 1) + i;
        *(uint2 *)(kw + slot) = *(const uint2 *)kh;
        *(uint2 *)(vw + slot) = *(const uint2 *)vh;
        *(uint2 *)&newest[warp][0][i] = *(const uint2 *)kh;
        *(uint2 *)&newest[warp][1][i] = *(const uint2 *)vh;
        __syncwarp();
    }
    uint32_t qf[16]; // dims 32tq + 2w, +1
    {
        const float scale = rsqrtf((float)HD);
        const float2 *q2 = ROPE ? (const float2 *)&staged[warp][32 * tq] : (const float2 *)(qkv + (size_t)t * ldq + h * HD + 32 * tq);
#pragma unroll
        for (int w = 0; w < 16; w++) {
            const float2 v = q2[w];
            qf[w] = h2_bits(__floats2half2_rn(v.x * scale, v.y * scale));
        }
    }
    float o[8][4] = {}, m = -INFINITY, l = 0;
    const bool whole = kg.kv_block % 16 == 0; // a chunk of 16 positions lies in one block of the cache: one table lookup
    for (int p0 = 0; p0 < len; p0 += 16) {
        if (PF) { // the next 16 positions into L2 before loading these (PLUMB_CUDA_ATT_PREFETCH=1; 4% slower, v20): lane = position (keys: lanes
                  // 0-15, values: 16-31), its row's two 128-byte lines
            const int pn = p0 + 16 + (lane & 15);
            if (pn < len) {
                const __half *r = (lane < 16 ? kp : vp) + at(pn);
                prefetch_l2(r);
                prefetch_l2(r + 64);
            }
        }
        uint4 ka[4], kb[4], va[4][2];
        const int pa = p0 + g, pb = p0 + g + 8;
        const size_t base = whole ? at(p0) : 0;
        auto slot = [&](int p) { return whole ? base + (size_t)(p - p0) * kg.ps : at(p); };
#pragma unroll
        for (int i = 0; i < 4; i++) ka[i] = kb[i] = make_uint4(0, 0, 0, 0);
        if (pa < cached) {
            const uint4 *src = (const uint4 *)(kp + slot(pa) + 32 * tq);
#pragma unroll
            for (int i = 0; i < 4; i++) ka[i] = src[i];
        } else if (ROPE && pa < len) {
#pragma unroll
            for (int i = 0; i < 4; i++) ka[i] = ((const uint4 *)&newest[warp][0][32 * tq])[i];
        }
        if (pb < cached) {
            const uint4 *src = (const uint4 *)(kp + slot(pb) + 32 * tq);
#pragma unroll
            for (int i = 0; i < 4; i++) kb[i] = src[i];
        } else if (ROPE && pb < len) {
#pragma unroll
            for (int i = 0; i < 4; i++) kb[i] = ((const uint4 *)&newest[warp][0][32 * tq])[i];
        }
#pragma unroll
        for (int j = 0; j < 4; j++) { // positions 2tq, 2tq + 1, 2tq + 8, 2tq + 9 (zeros past the end: 0 x garbage could be NaN)
            const int pv = p0 + 2 * tq + (j & 1) + 8 * (j >> 1);
            va[j][0] = va[j][1] = make_uint4(0, 0, 0, 0);
            if (pv < cached) {
                const uint4 *src = (const uint4 *)(vp + slot(pv) + 16 * g);
                va[j][0] = src[0];
                va[j][1] = src[1];
            } else if (ROPE && pv < len) {
                va[j][0] = ((const uint4 *)&newest[warp][1][16 * g])[0];
                va[j][1] = ((const uint4 *)&newest[warp][1][16 * g])[1];
            }
        }
        const uint32_t *kaw = (const uint32_t *)ka, *kbw = (const uint32_t *)kb;
        float c[4] = {0, 0, 0, 0};
#pragma unroll
        for (int st = 0; st < 8; st++) {
            const uint32_t a[4] = {kaw[2 * st], kbw[2 * st], kaw[2 * st + 1], kbw[2 * st + 1]};
            mma_f16(c, a, qf[2 * st], qf[2 * st + 1]);
        }
        const float s_lo = pa < len ? c[0] : -INFINITY, s_hi = pb < len ? c[2] : -INFINITY;
        float mx = fmaxf(s_lo, s_hi);
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
        const float mn = fmaxf(m, mx), corr = __expf(m - mn);
        const float p_lo = __expf(s_lo - mn), p_hi = __expf(s_hi - mn);
        l = l * corr + p_lo + p_hi;
        if (corr != 1.0f) // (the running maximum is the same in every lane)
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][e] *= corr;
        m = mn;
        const float p0v = __shfl_sync(0xffffffffu, p_lo, 8 * tq), p1v = __shfl_sync(0xffffffffu, p_lo, 8 * tq + 4);
        const float p8v = __shfl_sync(0xffffffffu, p_hi, 8 * tq), p9v = __shfl_sync(0xffffffffu, p_hi, 8 * tq + 4);
        const uint32_t b0 = h2_bits(__floats2half2_rn(p0v, p1v)), b1 = h2_bits(__floats2half2_rn(p8v, p9v));
        const uint32_t *v0 = (const uint32_t *)va[0], *v1 = (const uint32_t *)va[1], *v2 = (const uint32_t *)va[2], *v3 = (const uint32_t *)va[3];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t a[4] = {__byte_perm(v0[i], v1[i], 0x5410), __byte_perm(v0[i], v1[i], 0x7632), __byte_perm(v2[i], v3[i], 0x5410),
                                   __byte_perm(v2[i], v3[i], 0x7632)};
            mma_f16(o[i], a, b0, b1);
        }
    }
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) l += __shfl_xor_sync(0xffffffffu, l, x);
    const float inv = 1.0f / l;
    if constexpr (ROPE) __syncwarp(); // every lane's reads of q in staged are done
    if (tq == 0)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            staged[warp][16 * g + 2 * i] = o[i][0] * inv;
            staged[warp][16 * g + 2 * i + 1] = o[i][2] * inv;
        }
    __syncwarp();
    const int qd = n_head * HD;
#pragma unroll
    for (int b = 0; b < HD / 32; b++) {
        const float v = staged[warp][32 * b + lane];
        if (fmt) store_act_warp(v, t, (h * HD) / QK + b, qd, fmt, aq, ad, ah);
        else out[(size_t)t * qd + h * HD + 32 * b + lane] = v;
    }
}

// The greedy pick of a logit row by the whole block: the index of the
// largest value, the first one on ties, NaN never picked (0 when every value
// is NaN): plumb_argmax's answer. Every thread gets it.
__device__ int block_argmax(const float *__restrict__ x, int n_vocab) {
    float best = -INFINITY;
    int at = INT_MAX;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) { // a thread's indices rise: the first of its ties stays
        const float v = x[i];
        if (v > best || (at == INT_MAX && v == best)) best = v, at = i;
    }
    __shared__ float sv[32];
    __shared__ int si[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, at, o);
        if (ov > best || (ov == best && oi < at)) best = ov, at = oi;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    if (lane == 0) sv[warp] = best, si[warp] = at;
    __syncthreads();
    best = lane < warps ? sv[lane] : -INFINITY;
    at = lane < warps ? si[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, at, o);
        if (ov > best || (ov == best && oi < at)) best = ov, at = oi;
    }
    return at == INT_MAX ? 0 : at;
}

// Greedy pick of each logit row (a block per row), so the host need not read
// n_out x n_vocab floats to choose the next tokens.
__global__ void __launch_bounds__(1024) k_argmax(const float *__restrict__ logits, int n_vocab, int *ids) {
    const int at = block_argmax(logits + (size_t)blockIdx.x * n_vocab, n_vocab);
    if (threadIdx.x == 0) ids[blockIdx.x] = at;
}

// ---- greedy chains: the token embeddings on the device, in the file's layout
// (the types the plugin runs weights of)
static int embd_type_ok(uint32_t t) { return t == TYPE_F32 || t == TYPE_F16 || t == TYPE_Q4_0 || t == TYPE_Q8_0 || t == TYPE_Q4_K; }

__device__ __forceinline__ float half_at(const uint8_t *p) { return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8))); }

// Element i of a row, computed as the host's to_float computes it (the same
// roundings: no fused multiply-adds), so a chained step's input is the same
// bits as a step the host staged.
__device__ float embd_value(const uint8_t *row, uint32_t type, int i) {
    const int j = i & 31;
    switch (type) {
    case TYPE_F32: return ((const float *)row)[i];
    case TYPE_F16: return half_at(row + 2 * i);
    case TYPE_Q4_0: {
        const uint8_t *b = row + (size_t)(i >> 5) * 18;
        const int q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
        return __fmul_rn((float)(q - 8), half_at(b));
    }
    case TYPE_Q8_0: {
        const uint8_t *b = row + (size_t)(i >> 5) * 34;
        return __fmul_rn((float)(int8_t)b[2 + j], half_at(b));
    }
    case TYPE_Q4_K: { // 64 elements a chunk: the low nibbles of 32 bytes, then their high nibbles
        const int w = i & 255, chunk = w >> 6, hi = (w >> 5) & 1, l = w & 31, is = 2 * chunk + hi;
        const uint8_t *b = row + (size_t)(i >> 8) * 144, *sm = b + 4, q8 = b[16 + chunk * 32 + l];
        const int sc = is < 4 ? sm[is] & 63 : (sm[is + 4] & 0xF) | ((sm[is - 4] >> 6) << 4); // plumb_get_scale_min_k4
        const int m = is < 4 ? sm[is + 4] & 63 : (sm[is + 4] >> 4) | ((sm[is] >> 6) << 4);
        const float d1 = __fmul_rn(half_at(b), (float)sc), m1 = __fmul_rn(half_at(b + 2), (float)m);
        return __fsub_rn(__fmul_rn(d1, (float)(hi ? q8 >> 4 : q8 & 15)), m1);
    }
    }
    return 0.0f;
}

__device__ __forceinline__ void embed_row(const uint8_t *embd, uint32_t type, size_t row_bytes, int D, int id, float *x) {
    const uint8_t *row = embd + (size_t)id * row_bytes;
    for (int i = threadIdx.x; i < D; i += blockDim.x) x[i] = embd_value(row, type, i);
}

// rotary angle tables of a chained step's positions (its steps leave out k_rope_table)
struct rope_args {
    int half_rot;
    float base;
    float *cs, *sn;
};

// A chain's first step (a block per token): x[t] = the embedding of ids[t],
// and the rotary angles of position pos[t]
__global__ void __launch_bounds__(1024) k_embed_tokens(const uint8_t *__restrict__ embd, uint32_t type, size_t row_bytes, int D, const int *ids, float *x,
                                                       const int *pos, rope_args r) {
    const int t = blockIdx.x;
    for (int j = threadIdx.x; j < r.half_rot; j += blockDim.x) rope_angle(pos[t], j, r.half_rot, r.base, r.cs + t * r.half_rot + j, r.sn + t * r.half_rot + j);
    embed_row(embd, type, row_bytes, D, ids[t], x + (size_t)t * D);
}

// The end of a chained step (a block per token): the greedy pick of its
// logits into ids (the next step's input) and into the host's mapped slot of
// this step (step = position - the chain's first position), the position
// advanced, and the pick's embedding into x.
__global__ void __launch_bounds__(1024) k_pick_next(const float *__restrict__ logits, int n_vocab, int *ids, int *host_picks, const int *base, int *pos,
                                                    int max_batch, const uint8_t *__restrict__ embd, uint32_t type, size_t row_bytes, int D, float *x,
                                                    rope_args r) {
    pdl_wait();
    const int t = blockIdx.x, at = block_argmax(logits + (size_t)t * n_vocab, n_vocab), p = pos[t];
    __syncthreads(); // every thread has read pos[t] before it advances
    if (threadIdx.x == 0) {
        ids[t] = at;
        host_picks[(size_t)((p - base[t]) % CHAIN_SLOTS) * max_batch + t] = at;
        pos[t] = p + 1;
        __threadfence_system();
    }
    for (int j = threadIdx.x; j < r.half_rot; j += blockDim.x) rope_angle(p + 1, j, r.half_rot, r.base, r.cs + t * r.half_rot + j, r.sn + t * r.half_rot + j);
    embed_row(embd, type, row_bytes, D, at, x + (size_t)t * D);
}

// ---------------------------------------------------------------- fused decode
//
// A decode step of a few tokens (each of its own sequence) as ONE persistent
// kernel over all the layers: a block per multiprocessor, the phases of a
// layer separated by grid-wide barriers instead of kernel boundaries.
// Separate kernels leave the GPU draining and refilling ~10 times a layer
// (each product of a 7B layer streams only 2-13 us of weights, so the ramp
// at either end of a kernel costs as much as the product); here the rows of
// the next product are prefetched into L2 while the barrier is pending.
// Per layer:
//   P1  every block: rmsnorm(x) -> int8 activations in shared memory;
//       warps: their share of the rows of [q;k;v]
//   P2  a block per (token, query head): bias + rope of q, k, v; k/v (F16)
//       into the cache (one block per kv head); attention over the cache
//   P3  every block: attention output -> int8; warps: rows of Wo, x +=
//   P4  every block: rmsnorm(x) -> int8; warps: gate row j and up row j,
//       h[j] = silu(gate) * up
//   P5  every block: h -> int8; warps: rows of Wdown, x +=
// Data made inside the kernel is read with ld.global.cg (L2, never a stale
// L1 line); weights, norms and the cache of earlier steps with plain loads.
// Numbers agree with the separate kernels up to the order of float sums
// (PLUMB_CUDA_FUSED_CHECK=1 compares the two on every step).
#define FUSED_THREADS 512
#define FUSED_WARPS (FUSED_THREADS / 32)

struct fmat {
    const uint8_t *qs;
    const __half *d;
    int dstride, rows, cols, type;
};
struct flayer {
    const float *attn_norm, *ffn_norm, *bqkv;
    fmat qkv, wo, gu, down;
};
struct fused_args {
    const flayer *layers;
    int n_layers, n, D, qd, kv_dim, ff, n_head, n_head_kv, hd, n_rot, neox, max_k, max_blocks;
    kv_geo kg; // the cache's layout (its block size too)
    float eps;
    float *x, *qkv, *att, *hbuf; // hidden [n][D], q/k/v [n][qd + 2 kv_dim], attention out [n][qd], silu(gate) * up [n][ff]
    const float *cs, *sn;
    const int *pos, *seq, *table;
    __half *kp, *vp;
    unsigned *bar; // [0]: arrivals this step (zeroed before the kernel), [1]: set when a barrier gave up
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The grid barrier in two halves: arrive when the block's work of a phase is
// written, wait before the next phase reads it (between them the warps
// prefetch). The blocks are one per multiprocessor and all resident (checked
// at load from the occupancy), so the wait ends; should it not within ~1 s,
// it gives up and flags the step as failed rather than hang the GPU.
__device__ __forceinline__ void grid_arrive(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
    }
}
__device__ __forceinline__ void grid_wait(unsigned *bar, unsigned target) {
    if (threadIdx.x == 0) {
        unsigned spins = 0;
        while (ld_acquire(bar) < target) {
            if (++spins > (1u << 24)) { atomicExch(bar + 1, 1u); break; }
            __nanosleep(40);
        }
        __threadfence();
    }
    __syncthreads();
}

// The warp's share of a phase's rows: contiguous, counts differing by one.
__device__ __forceinline__ void warp_share(int rows, int *r0, int *r1) {
    const long nw = (long)gridDim.x * FUSED_WARPS, gw = (long)blockIdx.x * FUSED_WARPS + (threadIdx.x >> 5);
    *r0 = (int)(gw * rows / nw);
    *r1 = (int)((gw + 1) * rows / nw);
}

// Rows [r, r + count) of W into L2 (quants and scales), a warp's lanes a 128-byte line each.
__device__ __forceinline__ void prefetch_rows(const fmat &W, int r, int count) {
    if (count <= 0) return;
    const int lane = threadIdx.x & 31;
    const size_t qrow = W.type == TYPE_Q4_0 ? W.cols / 2 : W.cols;
    const char *q = (const char *)W.qs + (size_t)r * qrow, *d = (const char *)(W.d + (size_t)r * W.dstride);
    for (size_t o = (size_t)lane * 128; o < qrow * count; o += 32 * 128) prefetch_l2(q + o);
    for (size_t o = (size_t)lane * 128; o < (size_t)W.dstride * 2 * count; o += 32 * 128) prefetch_l2(d + o);
}
__device__ __forceinline__ void prefetch_share(const fmat &W, int rows_of_share, int stacked_offset) {
    int r0, r1;
    warp_share(rows_of_share, &r0, &r1);
    const int c = r1 - r0 < 2 ? r1 - r0 : 2;
    prefetch_rows(W, r0, c);
    if (stacked_offset) prefetch_rows(W, stacked_offset + r0, c);
}

// sum over the block of every thread's v (red: 32 floats of shared memory)
__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    __syncthreads(); // red is free (an earlier call's readers are done)
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0;
    for (int w = 0; w < FUSED_WARPS; w++) s += red[w];
    return s;
}

// act[t] = rmsnorm(src[t]) * w (w != NULL) or src[t], as int8 blocks into
// shared memory: aq [n][k], ad [n][k / 32]. k % 32 == 0.
__device__ __forceinline__ void stage_act(const float *src, int n, int k, const float *w, float eps, int8_t *aq, float2 *ad, float *red) {
    for (int t = 0; t < n; t++) {
        const float *xr = src + (size_t)t * k;
        float scale = 1.0f;
        if (w) {
            float ss = 0;
            for (int i = threadIdx.x * 4; i < k; i += FUSED_THREADS * 4) {
                const float4 v = __ldcg((const float4 *)(xr + i));
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
            scale = rsqrtf(block_sum(ss, red) / k + eps);
        }
        for (int i = threadIdx.x * 4; i < k; i += FUSED_THREADS * 4) { // whole 8-thread groups: k % 32 == 0
            float4 v = __ldcg((const float4 *)(xr + i));
            if (w) {
                const float4 g = *(const float4 *)(w + i);
                v = make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
            }
            store_act4(v, t, i, k, ACT_Q8, aq, ad, NULL);
        }
    }
    __syncthreads();
}

// The R rows rr[] of W (Q4_0 or Q8_0) dotted with the NT staged activation
// rows (the first n of them real); every lane ends with the sums. The same
// loads and arithmetic as k_matvec, with activations from shared memory.
template <int TYPE, int NT, int R>
__device__ __noinline__ void rows_dot(const fmat &W, const int *rr, int n, const int8_t *aq, const float2 *ad, float out[R][NT]) {
    const int lane = threadIdx.x & 31, k = W.cols, nb = k / QK;
    constexpr int U = TYPE == TYPE_Q4_0 ? 1 : 2;
    constexpr int DEPTH = (TYPE == TYPE_Q4_0 ? MV_DEPTH : MV_DEPTH / 2) / R;
    const size_t qrow = TYPE == TYPE_Q4_0 ? k / 2 : k;
    const uint4 *wr[R];
    const __half *dr[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        wr[i] = (const uint4 *)(W.qs + (size_t)rr[i] * qrow);
        dr[i] = W.d + (size_t)rr[i] * W.dstride;
    }
    float acc[R][NT];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0;
    for (int b0 = lane; b0 < nb; b0 += 32 * DEPTH) {
        uint4 w[DEPTH][R][U];
        float dw[DEPTH][R];
#pragma unroll
        for (int u = 0; u < DEPTH; u++) {
            const int b = b0 + 32 * u;
            if (b < nb) {
#pragma unroll
                for (int i = 0; i < R; i++) {
#pragma unroll
                    for (int v = 0; v < U; v++) w[u][i][v] = __ldg(wr[i] + (size_t)b * U + v);
                    dw[u][i] = __half2float(dr[i][b]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < DEPTH; u++) {
            const int b = b0 + 32 * u;
            if (b >= nb) break;
            int lo[R][8];
#pragma unroll
            for (int i = 0; i < R; i++) {
                if (TYPE == TYPE_Q4_0) {
                    const uint4 q = w[u][i][0];
                    lo[i][0] = q.x & 0x0F0F0F0F; lo[i][1] = q.y & 0x0F0F0F0F; lo[i][2] = q.z & 0x0F0F0F0F; lo[i][3] = q.w & 0x0F0F0F0F;
                    lo[i][4] = (q.x >> 4) & 0x0F0F0F0F; lo[i][5] = (q.y >> 4) & 0x0F0F0F0F; lo[i][6] = (q.z >> 4) & 0x0F0F0F0F; lo[i][7] = (q.w >> 4) & 0x0F0F0F0F;
                } else {
                    const uint4 q0 = w[u][i][0], q1 = w[u][i][U - 1];
                    lo[i][0] = q0.x; lo[i][1] = q0.y; lo[i][2] = q0.z; lo[i][3] = q0.w; lo[i][4] = q1.x; lo[i][5] = q1.y; lo[i][6] = q1.z; lo[i][7] = q1.w;
                }
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= n) break;
                const int4 *xa = (const int4 *)(aq + (size_t)t * k) + 2 * b;
                const int4 a0 = xa[0], a1 = xa[1];
                const float2 sd = ad[(size_t)t * nb + b];
#pragma unroll
                for (int i = 0; i < R; i++) {
                    int sdot = __dp4a(lo[i][0], a0.x, 0);
                    sdot = __dp4a(lo[i][1], a0.y, sdot); sdot = __dp4a(lo[i][2], a0.z, sdot); sdot = __dp4a(lo[i][3], a0.w, sdot);
                    sdot = __dp4a(lo[i][4], a1.x, sdot); sdot = __dp4a(lo[i][5], a1.y, sdot); sdot = __dp4a(lo[i][6], a1.z, sdot); sdot = __dp4a(lo[i][7], a1.w, sdot);
                    acc[i][t] += TYPE == TYPE_Q4_0 ? dw[u][i] * (sd.x * (float)sdot - 8.0f * sd.y) : dw[u][i] * sd.x * (float)sdot;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) out[i][t] = warp_sum(acc[i][t]);
}

template <int NT, int R>
__device__ __forceinline__ void rows_dot_any(const fmat &W, const int *rr, int n, const int8_t *aq, const float2 *ad, float out[R][NT]) {
    if (W.type == TYPE_Q4_0) rows_dot<TYPE_Q4_0, NT, R>(W, rr, n, aq, ad, out);
    else rows_dot<TYPE_Q8_0, NT, R>(W, rr, n, aq, ad, out);
}

// y[t][r] (+)= W[r] . act[t] over the warp's share of W's rows, two at a time.
template <int NT>
__device__ __forceinline__ void fused_product(const fmat &W, int n, const int8_t *aq, const float2 *ad, float *y, int ldy, int accumulate) {
    const int lane = threadIdx.x & 31;
    int r0, r1;
    warp_share(W.rows, &r0, &r1);
    int r = r0;
    for (; r + 1 < r1; r += 2) {
        const int rr[2] = {r, r + 1};
        float s[2][NT];
        rows_dot_any<NT, 2>(W, rr, n, aq, ad, s);
        if (lane == 0)
            for (int t = 0; t < n; t++)
                for (int i = 0; i < 2; i++) {
                    float *o = y + (size_t)t * ldy + r + i;
                    *o = accumulate ? __ldcg(o) + s[i][t] : s[i][t];
                }
    }
    if (r < r1) {
        float s[1][NT];
        rows_dot_any<NT, 1>(W, &r, n, aq, ad, s);
        if (lane == 0)
            for (int t = 0; t < n; t++) {
                float *o = y + (size_t)t * ldy + r;
                *o = accumulate ? __ldcg(o) + s[0][t] : s[0][t];
            }
    }
}

// h[t][j] = silu(gate_j . act[t]) * (up_j . act[t]); W stacks [gate; up].
template <int NT>
__device__ __forceinline__ void fused_gate_up(const fmat &W, int ff, int n, const int8_t *aq, const float2 *ad, float *hbuf) {
    int j0, j1;
    warp_share(ff, &j0, &j1);
    for (int j = j0; j < j1; j++) {
        const int rr[2] = {j, ff + j};
        float s[2][NT];
        rows_dot_any<NT, 2>(W, rr, n, aq, ad, s);
        if ((threadIdx.x & 31) == 0)
            for (int t = 0; t < n; t++) hbuf[(size_t)t * ff + j] = silu(s[0][t]) * s[1][t];
    }
}

// value i of head-row `base` after bias and rope (the formula of k_rope_kv)
__device__ __forceinline__ float roped(const float *row, const float *bias, int base, int i, int rope, int n_rot, int neox, const float *cs, const float *sn,
                                       int t) {
    const float v = __ldcg(row + base + i) + (bias ? bias[base + i] : 0.0f);
    if (!rope || i >= n_rot) return v;
    const int half = n_rot / 2;
    const int j = neox ? (i < half ? i : i - half) : i / 2;
    const int first = neox ? i < half : (i & 1) == 0;
    const int partner = base + (neox ? (first ? i + half : i - half) : (first ? i + 1 : i - 1));
    const float pv = __ldcg(row + partner) + (bias ? bias[partner] : 0.0f);
    const float c = cs[(size_t)t * half + j], s = sn[(size_t)t * half + j];
    return first ? v * c - pv * s : pv * s + v * c;
}

// P2 for one (token, query head) per block: E = hd / 32 values a lane.
template <int E>
__device__ __forceinline__ void fused_attention(const fused_args &a, int layer, const float *bias, float *sm) {
    const int hd = a.hd, group = a.n_head / a.n_head_kv, ldq = a.qd + 2 * a.kv_dim;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *q_s = sm, *k_s = sm + hd, *v_s = sm + 2 * hd, *m_s = sm + 3 * hd, *l_s = m_s + FUSED_WARPS, *acc_s = l_s + FUSED_WARPS; // acc [warps][hd]
    const float scale = rsqrtf((float)hd);
    for (int item = blockIdx.x; item < a.n * a.n_head; item += gridDim.x) {
        const int t = item / a.n_head, h = item % a.n_head, kvh = h / group, p = a.pos[t], len = p + 1;
        const int *tab = a.table + a.seq[t] * a.max_blocks;
        const float *row = a.qkv + (size_t)t * ldq;
        if (threadIdx.x < hd) {
            const int i = threadIdx.x;
            const float q = roped(row, bias, h * hd, i, 1, a.n_rot, a.neox, a.cs, a.sn, t);
            const float k = roped(row, bias, a.qd + kvh * hd, i, 1, a.n_rot, a.neox, a.cs, a.sn, t);
            const float v = roped(row, bias, a.qd + a.kv_dim + kvh * hd, i, 0, a.n_rot, a.neox, a.cs, a.sn, t);
            const __half kh = __float2half(k), vh = __float2half(v);
            q_s[i] = q * scale;
            k_s[i] = __half2float(kh);
            v_s[i] = __half2float(vh);
            if (h % group == 0) {
                const size_t slot = kv_at(tab, p, kvh, layer, a.kg) + i;
                a.kp[slot] = kh;
                a.vp[slot] = vh;
            }
        }
        __syncthreads();
        float q[E], acc[E], m = -INFINITY, l = 0;
#pragma unroll
        for (int e = 0; e < E; e++) { q[e] = q_s[lane * E + e]; acc[e] = 0; }
        for (int p0 = warp; p0 < len; p0 += 4 * FUSED_WARPS) {
            float kv[4][E], vv[4][E];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int pp = p0 + u * FUSED_WARPS;
                if (pp >= len) break;
                if (pp == p) { // this step's own key and value: from shared memory (the cache write may not be visible yet)
#pragma unroll
                    for (int e = 0; e < E; e++) { kv[u][e] = k_s[lane * E + e]; vv[u][e] = v_s[lane * E + e]; }
                    continue;
                }
                const size_t off = kv_at(tab, pp, kvh, layer, a.kg) + lane * E;
                __half kb[E], vb[E];
                if (E == 8) { *(uint4 *)kb = *(const uint4 *)(a.kp + off); *(uint4 *)vb = *(const uint4 *)(a.vp + off); }
                else if (E == 4) { *(uint2 *)kb = *(const uint2 *)(a.kp + off); *(uint2 *)vb = *(const uint2 *)(a.vp + off); }
                else if (E == 2) { *(unsigned *)kb = *(const unsigned *)(a.kp + off); *(unsigned *)vb = *(const unsigned *)(a.vp + off); }
                else { kb[0] = a.kp[off]; vb[0] = a.vp[off]; }
#pragma unroll
                for (int e = 0; e < E; e++) { kv[u][e] = __half2float(kb[e]); vv[u][e] = __half2float(vb[e]); }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (p0 + u * FUSED_WARPS >= len) break;
                float s = 0;
#pragma unroll
                for (int e = 0; e < E; e++) s += q[e] * kv[u][e];
                s = warp_sum(s);
                const float mn = fmaxf(m, s), corr = __expf(m - mn), w = __expf(s - mn);
                l = l * corr + w;
#pragma unroll
                for (int e = 0; e < E; e++) acc[e] = acc[e] * corr + w * vv[u][e];
                m = mn;
            }
        }
        if (lane == 0) { m_s[warp] = m; l_s[warp] = l; }
#pragma unroll
        for (int e = 0; e < E; e++) acc_s[warp * hd + lane * E + e] = acc[e];
        __syncthreads();
        if (threadIdx.x < hd) {
            float mx = -INFINITY, z = 0, o = 0;
            for (int w = 0; w < FUSED_WARPS; w++) mx = fmaxf(mx, m_s[w]);
            for (int w = 0; w < FUSED_WARPS; w++) {
                if (m_s[w] == -INFINITY) continue; // a warp that saw no positions
                const float f = __expf(m_s[w] - mx);
                z += l_s[w] * f;
                o += acc_s[w * hd + threadIdx.x] * f;
            }
            a.att[(size_t)t * a.qd + h * hd + threadIdx.x] = o / z;
        }
        __syncthreads(); // shared memory is reused by the next item
    }
}

template <int NT>
__global__ void __launch_bounds__(FUSED_THREADS, 1) k_decode_fused(const fused_args a) {
    extern __shared__ __align__(16) unsigned char fsm[];
    int8_t *aq = (int8_t *)fsm;                          // [NT][max_k]
    float2 *ad = (float2 *)(fsm + (size_t)NT * a.max_k); // [NT][max_k / 32]
    float *red = (float *)(ad + (size_t)NT * (a.max_k / QK));
    float *att_sm = (float *)fsm; // P2 reuses the activation space
    const unsigned G = gridDim.x;
    unsigned target = 0;
    const int n = a.n, ldq = a.qd + 2 * a.kv_dim;
    for (int l = 0; l < a.n_layers; l++) {
        const flayer &L = a.layers[l];
        // P1: q, k, v
        stage_act(a.x, n, a.D, L.attn_norm, a.eps, aq, ad, red);
        fused_product<NT>(L.qkv, n, aq, ad, a.qkv, ldq, 0);
        grid_arrive(a.bar);
        prefetch_share(L.wo, L.wo.rows, 0);
        grid_wait(a.bar, target += G);
        // P2: attention
        if (a.hd == 32) fused_attention<1>(a, l, L.bqkv, att_sm);
        else if (a.hd == 64) fused_attention<2>(a, l, L.bqkv, att_sm);
        else if (a.hd == 128) fused_attention<4>(a, l, L.bqkv, att_sm);
        else fused_attention<8>(a, l, L.bqkv, att_sm);
        grid_arrive(a.bar);
        grid_wait(a.bar, target += G);
        // P3: x += Wo . att
        stage_act(a.att, n, a.qd, NULL, 0, aq, ad, red);
        fused_product<NT>(L.wo, n, aq, ad, a.x, a.D, 1);
        grid_arrive(a.bar);
        prefetch_share(L.gu, a.ff, a.ff);
        grid_wait(a.bar, target += G);
        // P4: h = silu(gate) * up
        stage_act(a.x, n, a.D, L.ffn_norm, a.eps, aq, ad, red);
        fused_gate_up<NT>(L.gu, a.ff, n, aq, ad, a.hbuf);
        grid_arrive(a.bar);
        prefetch_share(L.down, L.down.rows, 0);
        grid_wait(a.bar, target += G);
        // P5: x += Wdown . h
        stage_act(a.hbuf, n, a.ff, NULL, 0, aq, ad, red);
        fused_product<NT>(L.down, n, aq, ad, a.x, a.D, 1);
        if (l + 1 < a.n_layers) {
            grid_arrive(a.bar);
            prefetch_share(a.layers[l + 1].qkv, a.layers[l + 1].qkv.rows, 0);
            grid_wait(a.bar, target += G);
        }
    }
}

// shared memory of k_decode_fused<NT>: activations, or P2's attention scratch
static size_t fused_smem(int nt, int max_k, int hd) {
    const size_t act = (size_t)nt * max_k + (size_t)nt * (max_k / QK) * sizeof(float2) + 32 * sizeof(float);
    const size_t att = (size_t)(3 * hd + 2 * FUSED_WARPS + FUSED_WARPS * hd) * sizeof(float);
    return act > att ? act : att;
}

// ---------------------------------------------------------------- host side

static size_t grid(size_t n, int threads) { return (n + threads - 1) / threads; }
static cudaError_t gemm_allow_smem();

// Every kernel of a step goes through here: on h->stream, with programmatic
// dependent launch where the GPU has it (errors surface at cudaGetLastError).
// A cluster > 1 launches g.x / cluster clusters of that many blocks (sm_90).
template <typename... Params, typename... Args>
static void launch_in(handle *h, int cluster, void (*kernel)(Params...), dim3 g, dim3 b, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (h->pdl && (h->step_n <= MATVEC_MAX_N || h->pdl == PDL_ALL || (h->pdl == PDL_PRODUCTS && h->in_product))) { /* (see h->pdl's setting at load) */
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = (unsigned)cluster;
        attr[na].val.clusterDim.y = 1;
        attr[na++].val.clusterDim.z = 1;
    }
    cfg.gridDim = g;
    cfg.blockDim = b;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = h->stream;
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    const int prof = h->kprof && h->kp_n < KPROF_MAX;
    if (prof) cudaEventRecord(h->kp_ev[2 * h->kp_n], h->stream);
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, (Params)args...);
    if (prof) {
        cudaEventRecord(h->kp_ev[2 * h->kp_n + 1], h->stream);
        h->kp_fn[h->kp_n++] = (const void *)kernel;
    }
    if (e != cudaSuccess && h->launch_err == cudaSuccess) h->launch_err = e; /* reported by run_layers */
}
template <typename... Params, typename... Args>
static void launch(handle *h, void (*kernel)(Params...), dim3 g, dim3 b, size_t smem, Args... args) {
    launch_in(h, 1, kernel, g, b, smem, args...);
}

static void *dev_alloc(handle *h, size_t bytes, char *err, size_t err_len, const char *what) {
    void *p = NULL;
    if (bytes == 0) bytes = 16;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        snprintf(err, err_len, "out of GPU memory: %zu bytes for %s (%zu free of %zu)", bytes, what, fr, tot);
        return NULL;
    }
    h->bytes += bytes;
    return p;
}

static int to_device(handle *h, void **dst, const void *src, size_t bytes, char *err, size_t err_len, const char *what) {
    if (!(*dst = dev_alloc(h, bytes, err, err_len, what))) return -1;
    cudaError_t e = cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "copying %s: %s", what, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

// The defaults that differ by the model's shape. Measured side by side on an
// H100 (bench/results/gpu/v20), the Llama-2-7B shape (n_embd 4096) gained
// from three launch choices: programmatic dependent launch in batch steps
// too (PLUMB_CUDA_PDL=all; 7B Q4_0 batch 64 10719 -> 11321-11325 tok/s,
// prefill +10-13%), RoPE and the KV writes a thread per rotation pair
// (PLUMB_CUDA_ROPE=pairs; +0.9%; the two together 10674-10685 ->
// 11512-11517, +7.8%), and one-token steps doing them inside the attention
// (attention+pairs; batch 1 492-493 -> 498-500, +1.2%, the same greedy ids).
// The TinyLlama shape (2048) lost with the first two: batch 64 32945-33007 ->
// 30211-30236 (-8.4%; the third was not run on it). So narrower models keep
// dependent launch for decode steps only and RoPE a thread per value. Why
// the narrow shape loses, and where between the two the line lies, is not
// known. Since v22 wide models with heads of 128 take RoPE a thread per 4
// values (k_rope_kv_quads; PLUMB_CUDA_ROPE=...+quads): 7B batch 64 on an
// H100 11796 / 11866 -> 12058 / 12032 tok/s with the SwiGLU epilogue on both
// sides. Not run on TinyLlama (heads of 64: the kernel does not apply).
static int wide_model(const plumb_backend_model_desc *d) { return d->n_embd >= 4096; }

// PLUMB_CUDA_ROPE's value: words of values, pairs, quads, attention, mma joined by '+'
static int rope_words_known(const char *v) {
    static const char *const words[] = {"values", "pairs", "quads", "attention", "mma"};
    while (*v) {
        const size_t len = strcspn(v, "+");
        int known = 0;
        for (size_t i = 0; i < sizeof words / sizeof *words; i++) known |= len == strlen(words[i]) && !strncmp(v, words[i], len);
        if (!known) return 0;
        v += len;
        if (*v == '+' && *++v == 0) return 0;
    }
    return 1;
}

static int supported(uint32_t t) { return t == TYPE_F32 || t == TYPE_F16 || t == TYPE_Q4_0 || t == TYPE_Q8_0 || t == TYPE_Q4_K; }

// The rows of srcs[0..n), stacked, split block by block: each block of
// block_bytes gives its first head_bytes to heads (head_row bytes a row) and
// the rest to quants (packed, nb blocks a row).
static void split_blocks(const plumb_backend_tensor *const *srcs, int n, size_t nb, size_t block_bytes, size_t head_bytes, uint8_t *heads,
                         size_t head_row, uint8_t *quants) {
    const size_t qb = block_bytes - head_bytes, qrow = nb * qb;
    size_t r = 0;
    for (int i = 0; i < n; i++)
        for (int64_t rr = 0; rr < srcs[i]->rows; rr++, r++) {
            const uint8_t *src = (const uint8_t *)srcs[i]->data + (size_t)rr * srcs[i]->row_bytes;
            for (size_t b = 0; b < nb; b++) {
                memcpy(heads + r * head_row + b * head_bytes, src + b * block_bytes, head_bytes);
                memcpy(quants + r * qrow + b * qb, src + b * block_bytes + head_bytes, qb);
            }
        }
}

/* TMA's view of a Q4_0 / Q8_0 matrix's quants: row bytes x rows, boxes of one
 * slice of 4 blocks (64 / 128 bytes, that many bytes' swizzle) x 64 rows */
static void make_wmap(handle *h, dmat *W) {
    const cuuint64_t row_bytes = W->type == TYPE_Q4_0 ? (cuuint64_t)W->cols / 2 : (cuuint64_t)W->cols;
    const cuuint64_t dims[2] = {row_bytes, (cuuint64_t)W->rows}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {W->type == TYPE_Q4_0 ? 64u : 128u, 64u}, unit[2] = {1, 1};
    CUtensorMap *m = (CUtensorMap *)aligned_alloc(64, sizeof(CUtensorMap));
    if (m && h->encode_tiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, W->qs, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                             W->type == TYPE_Q4_0 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS)
        W->wmap = m;
    else free(m);
}

/* TMA's view of the F16 activations (h->ah) for products over k values: k x max_batch
 * tokens (a launch's tokens past n read stale rows, which only its unwritten
 * outputs see), boxes of 64 values (128 bytes, 128-byte swizzle: the wgmma
 * descriptors' layout) x bn tokens; NULL if the encoder refuses */
static const CUtensorMap *act_map(handle *h, int k, int bn) {
    for (int i = 0; i < h->n_amaps; i++)
        if (h->amap_k[i] == k && h->amap_bn[i] == bn && h->amap_buf[i] == h->ah) return &h->amaps[i];
    if (h->n_amaps == AMAPS || (!h->amaps && !(h->amaps = (CUtensorMap *)aligned_alloc(64, AMAPS * sizeof(CUtensorMap))))) return NULL;
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)h->desc.max_batch}, strides[1] = {(cuuint64_t)k * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)bn}, unit[2] = {1, 1};
    if (h->encode_tiled(&h->amaps[h->n_amaps], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, h->ah, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return NULL;
    h->amap_k[h->n_amaps] = k;
    h->amap_bn[h->n_amaps] = bn;
    h->amap_buf[h->n_amaps] = h->ah;
    return &h->amaps[h->n_amaps++];
}

// Uploads the matrices srcs[0..n) stacked by rows into one device matrix
// (same type and width), splitting quant blocks into quants and scales.
static int upload_mat(handle *h, const plumb_backend_tensor *const *srcs, int n, dmat *dst, char *err, size_t err_len) {
    memset(dst, 0, sizeof *dst);
    const uint32_t type = srcs[0]->type;
    const int cols = (int)srcs[0]->cols;
    int rows = 0;
    for (int i = 0; i < n; i++) rows += (int)srcs[i]->rows;
    if (!supported(type)) {
        snprintf(err, err_len, "weight type %u is not supported by the CUDA plugin (F32, F16, Q8_0, Q4_0, Q4_K are)", type);
        return -1;
    }
    dst->rows = rows;
    dst->cols = cols;
    dst->type = type == TYPE_F32 ? TYPE_F16 : type;
    const size_t nb = cols / QK;
    if (type == TYPE_Q4_K) { /* a 144-byte super-block: its 16-byte header, then 128 quant bytes */
        const size_t nsb = cols / 256, qrow = cols / 2;
        uint8_t *hq = (uint8_t *)malloc(qrow * rows), *hh = (uint8_t *)malloc(nsb * 16 * rows);
        int rc = -1;
        if (!hq || !hh) snprintf(err, err_len, "out of host memory repacking weights");
        else {
            split_blocks(srcs, n, nsb, 144, 16, hh, nsb * 16, hq);
            rc = to_device(h, (void **)&dst->qs, hq, qrow * rows, err, err_len, "weights") ||
                 to_device(h, (void **)&dst->kh, hh, nsb * 16 * rows, err, err_len, "weight scales") ? -1 : 0;
        }
        free(hq);
        free(hh);
        return rc;
    }
    if (type == TYPE_Q4_0 || type == TYPE_Q8_0) {
        const size_t qrow = type == TYPE_Q4_0 ? cols / 2 : cols, brow = type == TYPE_Q4_0 ? 18 : 34, ds = (nb + 7) / 8 * 8;
        uint8_t *hq = (uint8_t *)malloc(qrow * rows);
        uint16_t *hd = (uint16_t *)calloc(ds * rows, 2);
        dst->dstride = (int)ds;
        int rc = -1;
        if (!hq || !hd) snprintf(err, err_len, "out of host memory repacking weights");
        else {
            split_blocks(srcs, n, nb, brow, 2, (uint8_t *)hd, ds * 2, hq);
            rc = to_device(h, (void **)&dst->qs, hq, qrow * rows, err, err_len, "weights") ||
                 to_device(h, (void **)&dst->d, hd, ds * rows * 2, err, err_len, "weight scales") ? -1 : 0;
        }
        if (rc == 0 && h->wg_tma) make_wmap(h, dst); /* without it, the copies kernel */
        free(hq);
        free(hd);
        return rc;
    }
    uint16_t *hf = (uint16_t *)malloc((size_t)rows * cols * 2);
    if (!hf) { snprintf(err, err_len, "out of host memory converting weights"); return -1; }
    int r = 0;
    for (int i = 0; i < n; i++)
        for (int64_t rr = 0; rr < srcs[i]->rows; rr++, r++) {
            const uint8_t *src = (const uint8_t *)srcs[i]->data + (size_t)rr * srcs[i]->row_bytes;
            if (type == TYPE_F16) memcpy(hf + (size_t)r * cols, src, (size_t)cols * 2);
            else
                for (int c = 0; c < cols; c++) {
                    __half v = __float2half(((const float *)src)[c]);
                    hf[(size_t)r * cols + c] = __half_raw(v).x;
                }
        }
    const int rc = to_device(h, (void **)&dst->f16, hf, (size_t)rows * cols * 2, err, err_len, "weights");
    free(hf);
    return rc;
}

// Stacks when every matrix has the same type (one product), else uploads each.
static int upload_group(handle *h, const plumb_backend_tensor *const *srcs, int n, dmat *dst, int *n_dst, char *err, size_t err_len) {
    int same = 1;
    for (int i = 1; i < n; i++) same &= srcs[i]->type == srcs[0]->type && srcs[i]->cols == srcs[0]->cols;
    if (same) { *n_dst = 1; return upload_mat(h, srcs, n, dst, err, err_len); }
    *n_dst = n;
    for (int i = 0; i < n; i++)
        if (upload_mat(h, &srcs[i], 1, &dst[i], err, err_len)) return -1;
    return 0;
}

static int upload_vec(handle *h, const plumb_backend_tensor *t, float **dst, char *err, size_t err_len) {
    *dst = NULL;
    if (!t->data) return 0;
    if (t->type != TYPE_F32) { snprintf(err, err_len, "norm/bias vectors must be F32"); return -1; }
    return to_device(h, (void **)dst, t->data, (size_t)t->cols * 4, err, err_len, "norm weights");
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

static void free_mat(dmat *m) {
    if (m->qs) cudaFree(m->qs);
    if (m->d) cudaFree(m->d);
    if (m->f16) cudaFree(m->f16);
    if (m->kh) cudaFree(m->kh);
    free(m->wmap);
}

static void kprof_print(handle *h);

static void unload(void *hv) {
    handle *h = (handle *)hv;
    if (!h) return;
    for (int l = 0; h->layers && l < h->desc.n_layers; l++) {
        dlayer *t = &h->layers[l];
        float *vecs[] = {t->attn_norm, t->ffn_norm, t->bqkv};
        for (int i = 0; i < 3; i++) if (vecs[i]) cudaFree(vecs[i]);
        for (int i = 0; i < 3; i++) free_mat(&t->qkv[i]);
        free_mat(&t->wo);
        for (int i = 0; i < 2; i++) free_mat(&t->gu[i]);
        free_mat(&t->down);
    }
    free_mat(&h->output);
    if (h->chk_steps)
        fprintf(stderr, "plumb-cuda: %s check: %ld steps, %ld logit rows, top-1 agrees on %ld, max |logit difference| %.3g (largest |logit| %.3g)\n",
                h->chk_what, h->chk_steps, h->chk_rows, h->chk_agree, h->chk_maxdiff, h->chk_maxabs);
    free(h->check_logits);
    free(h->amaps);
    if (h->kprof) kprof_print(h);
    if (h->kp_ev) {
        for (int i = 0; i < 2 * KPROF_MAX; i++) if (h->kp_ev[i]) cudaEventDestroy(h->kp_ev[i]);
        free(h->kp_ev);
    }
    free(h->kp_fn);
    free(h->kp_st);
    if (h->chain_steps)
        fprintf(stderr, "plumb-cuda: greedy chains: %ld steps, %.3f ms a step (wall, host included)\n", h->chain_steps, 1e3 * h->chain_s / h->chain_steps);
    if (h->embd) cudaFree(h->embd);
    if (h->hchain) cudaFreeHost(h->hchain);
    if (h->hchain_in) cudaFreeHost(h->hchain_in);
    if (h->chain_in) cudaFree(h->chain_in);
    for (int i = 0; i < CHAIN_SLOTS; i++) if (h->chain_ev[i]) cudaEventDestroy(h->chain_ev[i]);
    if (h->fused_layers) cudaFree(h->fused_layers);
    if (h->fused_bar) cudaFree(h->fused_bar);
    if (h->hflag) cudaFreeHost(h->hflag);
    if (h->times) {
        for (int j = 0; j < 2 * (h->desc.max_batch + 1); j++) {
            const handle::step_time *t = &h->times[j];
            const int i = j % (h->desc.max_batch + 1), decode = j > h->desc.max_batch;
            if (!t->steps) continue;
            fprintf(stderr, "plumb-cuda: %s of %3d tokens: %6ld steps, per step ms: stage %.3f, GPU %.3f, wait %.3f, copy out %.3f, host between steps %.3f\n",
                    decode ? "decode steps" : "prompt chunks", i, t->steps, 1e3 * t->stage / t->steps, 1e3 * t->gpu / t->steps, 1e3 * t->wait / t->steps, 1e3 * t->copy / t->steps,
                    t->follow ? 1e3 * t->host / t->follow : 0.0);
        }
        free(h->times);
        cudaEventDestroy(h->ev0);
        cudaEventDestroy(h->ev1);
    }
    void *bufs[] = {h->output_norm, h->k_pool, h->v_pool, h->x, h->qkv, h->att, h->gu, h->logits, h->cs, h->sn, h->partial, h->aq, h->ad, h->ah_main, h->ah_ff, h->meta, h->blas_ws, h->tile_count, h->deq, h->ids};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) if (bufs[i]) cudaFree(bufs[i]);
    if (h->hx) cudaFreeHost(h->hx);
    if (h->hlogits) cudaFreeHost(h->hlogits);
    if (h->hids) cudaFreeHost(h->hids);
    if (h->hmeta) cudaFreeHost(h->hmeta);
    for (int i = 0; i < GRAPH_SLOTS; i++) if (h->graphs[i].used) cudaGraphExecDestroy(h->graphs[i].exec);
    if (h->blas) cublasDestroy(h->blas);
    if (h->stream) cudaStreamDestroy(h->stream);
    free(h->layers);
    free(h);
}

static int quant_mat(const dmat *m) { return m->type == TYPE_Q4_0 || m->type == TYPE_Q8_0; }

template <int NT>
static int fused_fits(handle *h, size_t smem, int optin) {
    int blocks = 0;
    if (smem > (size_t)optin) return 0;
    if (cudaFuncSetAttribute(k_decode_fused<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_decode_fused<NT>, FUSED_THREADS, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return blocks >= 1 ? h->num_sms : 0; /* one block per multiprocessor: all resident, so the grid barrier can be passed */
}

// Whether the layers suit k_decode_fused (quantized products, stacked q/k/v
// and gate/up, head size a multiple of 32 up to 256) and for which token
// counts its blocks fit; uploads the layer descriptors. -1 only on errors.
static int fused_setup(handle *h, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const char *env = getenv("PLUMB_CUDA_FUSED"), *chk = getenv("PLUMB_CUDA_FUSED_CHECK");
    const int hd = d->head_dim, qd = d->n_head * hd, D = d->n_embd, ff = d->n_ff;
    int major = 0, optin = 0, dev = 0;
    h->fused_check = chk && !strcmp(chk, "1");
    if (!(env && !strcmp(env, "1"))) return 0; /* opt-in until measured on the device */
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (major < 7 || !(hd == 32 || hd == 64 || hd == 128 || hd == 256) || D % QK || ff % QK || d->n_head % d->n_head_kv) return 0;
    for (int l = 0; l < d->n_layers; l++) {
        const dlayer *L = &h->layers[l];
        if (L->n_qkv != 1 || L->n_gu != 1 || !quant_mat(&L->qkv[0]) || !quant_mat(&L->wo) || !quant_mat(&L->gu[0]) || !quant_mat(&L->down)) return 0;
    }
    const int max_k = ff > D ? (ff > qd ? ff : qd) : (D > qd ? D : qd);
    h->fused_grid[0] = fused_fits<1>(h, fused_smem(1, max_k, hd), optin);
    h->fused_grid[1] = fused_fits<2>(h, fused_smem(2, max_k, hd), optin);
    h->fused_grid[2] = fused_fits<4>(h, fused_smem(4, max_k, hd), optin);
    h->fused_grid[3] = fused_fits<8>(h, fused_smem(8, max_k, hd), optin);
    if (!h->fused_grid[0]) return 0;
    flayer *fl = (flayer *)calloc((size_t)d->n_layers, sizeof(flayer));
    if (!fl) { snprintf(err, err_len, "out of host memory"); return -1; }
    for (int l = 0; l < d->n_layers; l++) {
        const dlayer *L = &h->layers[l];
        const dmat *src[4] = {&L->qkv[0], &L->wo, &L->gu[0], &L->down};
        fmat *dst[4] = {&fl[l].qkv, &fl[l].wo, &fl[l].gu, &fl[l].down};
        for (int i = 0; i < 4; i++) *dst[i] = fmat{src[i]->qs, src[i]->d, src[i]->dstride, src[i]->rows, src[i]->cols, (int)src[i]->type};
        fl[l].attn_norm = L->attn_norm;
        fl[l].ffn_norm = L->ffn_norm;
        fl[l].bqkv = L->bqkv;
    }
    const int rc = to_device(h, (void **)&h->fused_layers, fl, (size_t)d->n_layers * sizeof(flayer), err, err_len, "layer descriptors");
    free(fl);
    if (rc || !(h->fused_bar = (unsigned *)dev_alloc(h, 2 * sizeof(unsigned), err, err_len, "grid barrier"))) return -1;
    if (cudaMemset(h->fused_bar, 0, 2 * sizeof(unsigned)) != cudaSuccess || cudaMallocHost(&h->hflag, sizeof(unsigned)) != cudaSuccess) {
        snprintf(err, err_len, "setting up the fused decode kernel: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    *h->hflag = 0;
    h->fused_ok = 1;
    return 0;
}

// blocks for a fused step of n tokens (0: not this size)
static int fused_blocks(const handle *h, int n) {
    const int idx = n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : -1;
    return idx < 0 ? 0 : h->fused_grid[idx];
}

static int gemm_tile_known(int tile);
static int gemm_r_tile_known(int tile);
static int gemm_wg_tile_known(int tile);

// PLUMB_CUDA_MVBENCH=1: times the decode matrix-vector kernels on this
// model's matrices before the first step: for each kind of matrix, one
// product per layer (so no pass finds its weights in L2), captured into a
// graph as the steps are, replayed 5 times; per kernel variant and token
// count, the time a call and the weight bytes streamed a second.
template <int TYPE>
static void launch_matvec(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate);

static int matmul(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate, char *err, size_t err_len);
static void finish_splits(handle *h, int splits, int n, int rows, float *y, int ldy, int accumulate);

// the matrix of one kind (qkv, wo, gate/up, down, output) in layer l, and a
// buffer its product over the step's tokens may write
static const dmat *bench_mat(handle *h, int kind, int l, float **y) {
    const dlayer *L = &h->layers[l];
    *y = kind == 0 ? h->qkv : kind == 2 ? h->gu : kind == 4 ? h->logits : h->x;
    return kind == 0 ? &L->qkv[0] : kind == 1 ? &L->wo : kind == 2 ? &L->gu[0] : kind == 3 ? &L->down : &h->output;
}

// Times the products of one kind of matrix over n tokens with the handle's
// current kernel choices: one product per layer (so no pass finds its
// weights in L2), captured into a graph as the steps are, replayed; *us is
// the time a call.
static int time_products(handle *h, int kind, int n, double *us, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const int calls = kind == 4 ? 1 : d->n_layers, reps = kind == 4 ? 40 : 5;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    float ms = 0;
    h->step_n = n;
    h->launch_err = cudaSuccess;
    CHECK(cudaEventCreate(&e0), "bench events");
    CHECK(cudaEventCreate(&e1), "bench events");
    CHECK(cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeThreadLocal), "bench capture");
    for (int l = 0; l < calls; l++) {
        float *y;
        const dmat *W = bench_mat(h, kind, l, &y);
        if (matmul(h, W, n, y, W->rows, 0, err, err_len)) {
            cudaStreamEndCapture(h->stream, &graph);
            goto fail;
        }
    }
    CHECK(cudaStreamEndCapture(h->stream, &graph), "bench capture");
    CHECK(h->launch_err, "bench launch");
    CHECK(cudaGraphInstantiate(&exec, graph, 0), "bench graph");
    CHECK(cudaGraphLaunch(exec, h->stream), "bench warm-up");
    CHECK(cudaEventRecord(e0, h->stream), "bench events");
    for (int r = 0; r < reps; r++) CHECK(cudaGraphLaunch(exec, h->stream), "bench run");
    CHECK(cudaEventRecord(e1, h->stream), "bench events");
    CHECK(cudaEventSynchronize(e1), "bench run");
    cudaEventElapsedTime(&ms, e0, e1);
    *us = ms * 1e3 / ((double)reps * calls);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    h->step_n = 0;
    return 0;
fail:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    h->step_n = 0;
    return -1;
}

static double quant_bytes(const dmat *W) { return (double)W->rows * (W->cols / QK) * ((W->type == TYPE_Q4_0 ? 16 : 32) + 2); }
static const char *const bench_kinds[] = {"qkv", "wo", "gate/up", "down", "output"};

// activations for bench passes: any finite values (no step has written them)
static int bench_acts(handle *h, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const int max_k = d->n_ff > d->n_embd ? d->n_ff : d->n_embd;
    CHECK(cudaMemset(h->aq, 1, (size_t)d->max_batch * max_k), "bench activations");
    CHECK(cudaMemset(h->ad, 0, (size_t)d->max_batch * (max_k / QK + 1) * sizeof(float2)), "bench activations");
    CHECK(cudaMemset(h->ah, 0x2c, (size_t)d->max_batch * max_k * 2), "bench activations"); /* 0x2c2c: about 0.07 */
    return 0;
fail:
    return -1;
}

// PLUMB_CUDA_MVBENCH=1: the decode matrix-vector kernels on this model's
// matrices before the first step (1 and 8 tokens, each rows-per-warp
// choice): the time a call and the weight bytes streamed a second.
static int mv_bench(handle *h, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const int saved_kprof = h->kprof, saved_rows = h->mv_rows;
    struct variant { int rows; const char *name; } vs[] = {{1, "1 row a warp"}, {2, "2 rows a warp"}, {MV_AUTO, "auto"}};
    int rc = bench_acts(h, err, err_len);
    h->kprof = 0; /* no per-kernel events inside the captured passes */
    for (int kind = 0; kind < 5 && !rc; kind++) {
        float *y;
        if (kind == 4 && !d->has_head) continue;
        const dmat *W0 = bench_mat(h, kind, 0, &y);
        if (!quant_mat(W0)) continue;
        for (int n = 1; n <= 8 && n <= d->max_batch && !rc; n += 7)
            for (size_t v = 0; v < sizeof vs / sizeof vs[0] && !rc; v++) {
                double us = 0;
                h->mv_rows = vs[v].rows;
                if (!(rc = time_products(h, kind, n, &us, err, err_len)))
                    fprintf(stderr, "plumb-cuda: mvbench %-7s %6dx%-6d %s n=%d  %-15s %8.2f us a call %7.0f GB/s\n", bench_kinds[kind], W0->rows, W0->cols,
                            W0->type == TYPE_Q4_0 ? "Q4_0" : "Q8_0", n, vs[v].name, us, quant_bytes(W0) / (us * 1e3));
            }
    }
    h->mv_rows = saved_rows;
    h->kprof = saved_kprof;
    return rc;
}

// PLUMB_CUDA_GEMMBENCH=N[,N..]: the batch GEMMs on this model's matrices
// for N tokens: the int8 one, and the register-dequantizing one in each
// built block shape (split-K sums included).
// The wgmma GEMM against the reg GEMM on the model's matrix W over n tokens
// of pseudo-random activations (the bench's constant ones would hide a
// misplaced value of k): *rel = max |wg - reg| / max |reg|.
static int gemm_compare(handle *h, const dmat *W, float *y, int n, double *rel, char *err, size_t err_len) {
    const size_t cnt = (size_t)n * W->rows, acnt = (size_t)n * W->cols;
    float *ref = (float *)malloc(cnt * sizeof(float)), *got = (float *)malloc(cnt * sizeof(float));
    __half *act = (__half *)malloc(acnt * sizeof(__half));
    const int saved_kind = h->gemm_kind, saved_defer = h->defer_sum;
    int rc = -1;
    uint32_t x = 12345;
    double top = 0, diff = 0;
    size_t worst = 0;
    if (!ref || !got || !act) { snprintf(err, err_len, "out of host memory"); goto done; }
    for (size_t i = 0; i < acnt; i++) {
        x = x * 1664525u + 1013904223u;
        act[i] = __float2half((float)((x >> 8) & 0xFFFF) / 65536.0f - 0.5f);
    }
    /* on the GEMMs' stream: a plain cudaMemcpy from pageable memory may return before its DMA lands, and
     * h->stream does not wait for the legacy stream (the first comparison read half-copied activations) */
    CHECK(cudaMemcpyAsync(h->ah, act, acnt * sizeof(__half), cudaMemcpyHostToDevice, h->stream), "gemm compare");
    CHECK(cudaStreamSynchronize(h->stream), "gemm compare");
    h->defer_sum = 0;
    for (int pass = 0; pass < 2; pass++) {
        h->gemm_kind = pass ? GEMM_WG : GEMM_REG;
        if (matmul(h, W, n, y, W->rows, 0, err, err_len)) goto done;
        CHECK(cudaStreamSynchronize(h->stream), "gemm compare");
        CHECK(cudaMemcpy(pass ? got : ref, y, cnt * sizeof(float), cudaMemcpyDeviceToHost), "gemm compare");
    }
    for (size_t i = 0; i < cnt; i++) {
        const double r = fabs(ref[i]), dd = fabs((double)got[i] - ref[i]);
        if (r > top) top = r;
        if (!(dd <= diff)) diff = dd, worst = i; /* NaN counts as the largest */
    }
    *rel = top > 0 ? diff / top : diff;
    if (*rel > 1e-3) {
        size_t bad = 0;
        for (size_t i = 0; i < cnt; i++) bad += !(fabs((double)got[i] - ref[i]) <= 1e-3 * top);
        fprintf(stderr, "plumb-cuda: gemm compare %dx%d n=%d: %zu of %zu differ; worst token %zu row %zu: reg %g wg %g (largest |reg| %g)\n", W->rows,
                W->cols, n, bad, cnt, worst / W->rows, worst % W->rows, ref[worst], got[worst], top);
    }
    rc = 0;
done:
fail:
    h->gemm_kind = saved_kind;
    h->defer_sum = saved_defer;
    free(ref);
    free(got);
    free(act);
    return rc;
}

// PLUMB_CUDA_WG_ROWS=tune: for steps of 33 to 64 tokens (one token tile of
// the wgmma GEMM), each matrix shape's block shape is the fastest of
// tune_tiles, timed at load on this device (time_products over the model's
// layers, 64 tokens). The rows a tile decide how the tiles fill the
// multiprocessors' waves (wg_rows_64 estimates that); two blocks a
// multiprocessor, on fewer stages each, can hide each other's waits.
static int tune_wg_tiles(handle *h, char *err, size_t err_len) {
    static const int tune_tiles[] = {WGM_CODE(4, 64, 4, 4, 1), WGM_CODE(3, 64, 4, 4, 1), WGM_CODE(2, 64, 4, 4, 1), WGM_CODE(2, 64, 4, 4, 2)};
    const plumb_backend_model_desc *d = &h->desc;
    const int n = d->max_batch < 64 ? d->max_batch : 64, saved_kprof = h->kprof;
    int rc = bench_acts(h, err, err_len);
    h->kprof = 0;
    h->n_wg_tuned = 0;
    for (int kind = 0; kind < 5 && !rc; kind++) {
        float *y;
        if (kind == 4 && !d->has_head) continue;
        const dmat *W0 = bench_mat(h, kind, 0, &y);
        if (!quant_mat(W0) || !W0->wmap || h->n_wg_tuned == (int)(sizeof h->wg_tuned / sizeof h->wg_tuned[0])) continue;
        int best = 0;
        double best_us = -1, us[sizeof tune_tiles / sizeof tune_tiles[0]];
        for (size_t v = 0; v < sizeof tune_tiles / sizeof tune_tiles[0] && !rc; v++) {
            h->wg_tile = tune_tiles[v];
            if (!(rc = time_products(h, kind, n, &us[v], err, err_len)) && (best_us < 0 || us[v] < best_us)) best_us = us[v], best = tune_tiles[v];
        }
        h->wg_tile = 0;
        if (rc) break;
        h->wg_tuned[h->n_wg_tuned++] = {W0->type, W0->rows, W0->cols, best};
        if (getenv("PLUMB_CUDA_WG_ROWS")) { /* the experiment's record */
            fprintf(stderr, "plumb-cuda: tuned %-7s %6dx%-6d %d tokens:", bench_kinds[kind], W0->rows, W0->cols, n);
            for (size_t v = 0; v < sizeof tune_tiles / sizeof tune_tiles[0]; v++)
                fprintf(stderr, " %dx64%s %.2f%s", tune_tiles[v] / 100000 % 10, tune_tiles[v] / 1000000 > 1 ? "x2" : "", us[v],
                        tune_tiles[v] == best ? "*" : "");
            fprintf(stderr, " us\n");
        }
    }
    h->wg_tile = 0;
    h->kprof = saved_kprof;
    if (!rc) CHECK(cudaMemset(h->ah, 0, (size_t)d->max_batch * (d->n_ff > d->n_embd ? d->n_ff : d->n_embd) * 2), "clearing activations");
    return rc;
fail:
    return -1;
}

static int gemm_bench(handle *h, const char *list, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const int saved_kprof = h->kprof, saved_kind = h->gemm_kind, saved_tile = h->gemm_r_tile, saved_wg = h->wg_tile;
    static const int tiles[] = {
#define GR_LIST(WM, MT, NT, NB, KS) GR_CODE(WM, MT, NT, NB, KS),
        GR_CONFIGS(GR_LIST)
#undef GR_LIST
    };
    static const int wg_tiles[] = {
#define WGM_LIST(WG, BN, NB, FR, MB) WGM_CODE(WG, BN, NB, FR, MB),
        WGM_CONFIGS(WGM_LIST)
#undef WGM_LIST
    };
    const int nr = (int)(sizeof tiles / sizeof tiles[0]), nw = h->wgmma ? (int)(sizeof wg_tiles / sizeof wg_tiles[0]) : 0;
    int rc = 0;
    h->kprof = 0;
    for (const char *p = list; *p && !rc;) {
        const int n = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
        if (n <= MATVEC_MAX_N || n > d->max_batch) {
            fprintf(stderr, "plumb-cuda: gemmbench: %d tokens is not a batch GEMM size (%d to %d)\n", n, MATVEC_MAX_N + 1, d->max_batch);
            continue;
        }
        for (int kind = 0; kind < 5 && !rc; kind++) {
            float *y;
            if (kind == 4 && !d->has_head) continue;
            const dmat *W0 = bench_mat(h, kind, 0, &y);
            if (!quant_mat(W0)) continue;
            for (int v = -1; v < nr + nw && !rc; v++) {
                double us = 0, rel = -1;
                char name[48];
                h->gemm_kind = v < 0 ? GEMM_I8 : v < nr ? GEMM_REG : GEMM_WG;
                if (v >= nr) {
                    const int t = h->wg_tile = wg_tiles[v - nr];
                    snprintf(name, sizeof name, "wg %dx%dx%dx%d%s", t / 100000 % 10, t / 100 % 1000, t / 10 % 10, t % 10, t / 1000000 > 1 ? "x2" : "");
                    h->gemm_r_tile = saved_tile;
                    if ((rc = gemm_compare(h, W0, y, n, &rel, err, err_len))) break;
                    h->gemm_kind = GEMM_WG;
                } else if (v >= 0) {
                    const int t = h->gemm_r_tile = tiles[v];
                    snprintf(name, sizeof name, "reg %dx%dx%dx%dx%d", t / 10000, t / 1000 % 10, t / 100 % 10, t / 10 % 10, t % 10);
                } else snprintf(name, sizeof name, "i8");
                if (!(rc = bench_acts(h, err, err_len)) && !(rc = time_products(h, kind, n, &us, err, err_len))) {
                    char diff[40] = "";
                    if (rel >= 0) snprintf(diff, sizeof diff, "  vs reg %.2e", rel);
                    fprintf(stderr, "plumb-cuda: gemmbench %-7s %6dx%-6d %s n=%d  %-22s %8.2f us a call %7.0f GB/s %6.1f TFLOP/s%s\n", bench_kinds[kind],
                            W0->rows, W0->cols, W0->type == TYPE_Q4_0 ? "Q4_0" : "Q8_0", n, name, us, quant_bytes(W0) / (us * 1e3),
                            2.0 * W0->rows * W0->cols * n / (us * 1e6), diff);
                }
            }
        }
    }
    h->gemm_kind = saved_kind;
    h->gemm_r_tile = saved_tile;
    h->wg_tile = saved_wg;
    h->kprof = saved_kprof;
    return rc;
}

// Greedy chains need the token embeddings on the device: uploaded as the
// file has them (72 MiB for a 7B Q4_0) when the plugin runs the whole model
// and knows their type; otherwise chain_why says why not. -1 only on errors.
static int chain_setup(handle *h, char *err, size_t err_len) {
    const plumb_backend_model_desc *d = &h->desc;
    const plumb_backend_tensor *e = &d->tok_embd;
    const char *env = getenv("PLUMB_CUDA_CHAIN");
    if (env && !strcmp(env, "0")) snprintf(h->chain_why, sizeof h->chain_why, "PLUMB_CUDA_CHAIN=0");
    else if (!d->has_head || !e->data) snprintf(h->chain_why, sizeof h->chain_why, "the GPU runs only some of the layers");
    else if (!embd_type_ok(e->type)) snprintf(h->chain_why, sizeof h->chain_why, "token embeddings of type %u have no device kernel", e->type);
    else if (e->rows < d->n_vocab || e->cols != d->n_embd) snprintf(h->chain_why, sizeof h->chain_why, "token embeddings of an unexpected shape");
    else if (h->kprof) snprintf(h->chain_why, sizeof h->chain_why, "PLUMB_CUDA_KPROF times steps one at a time");
    else if (h->fused_ok) snprintf(h->chain_why, sizeof h->chain_why, "the fused decode kernel (PLUMB_CUDA_FUSED=1) checks each step on the host");
    else if (h->skip) snprintf(h->chain_why, sizeof h->chain_why, "PLUMB_CUDA_SKIP is a timing experiment");
    if (h->chain_why[0]) return 0;
    const size_t bytes = (size_t)e->rows * e->row_bytes;
    if (to_device(h, (void **)&h->embd, e->data, bytes, err, err_len, "token embeddings")) return -1;
    h->embd_type = e->type;
    h->embd_row_bytes = e->row_bytes;
    if (!(h->chain_in = (int *)dev_alloc(h, (size_t)2 * d->max_batch * 4, err, err_len, "chain tokens"))) return -1;
    CHECK(cudaMallocHost(&h->hchain_in, (size_t)2 * d->max_batch * 4), "pinned host memory");
    CHECK(cudaHostAlloc(&h->hchain, (size_t)CHAIN_SLOTS * d->max_batch * 4, cudaHostAllocMapped), "mapped host memory for greedy picks");
    CHECK(cudaHostGetDevicePointer((void **)&h->dchain, h->hchain, 0), "mapped host memory for greedy picks");
    for (int i = 0; i < CHAIN_SLOTS; i++) CHECK(cudaEventCreateWithFlags(&h->chain_ev[i], cudaEventDisableTiming), "creating events");
    return 0;
fail:
    return -1;
}

static void *load(const plumb_backend_model_desc *d, char *err, size_t err_len) {
    handle *h = (handle *)calloc(1, sizeof(handle));
    if (!h) { snprintf(err, err_len, "out of host memory"); return NULL; }
    h->desc = *d;
    const int kv_dim = d->n_head_kv * d->head_dim, qd = d->n_head * d->head_dim, nb = d->max_batch;
    const int qkv_rows = qd + 2 * kv_dim, max_k = d->n_ff > d->n_embd ? d->n_ff : d->n_embd;
    const char *g = getenv("PLUMB_CUDA_GRAPHS"), *pdl_env = getenv("PLUMB_CUDA_PDL");
    int major = 0;
    size_t kv, max_rows = (size_t)(2 * d->n_ff > qkv_rows ? 2 * d->n_ff : qkv_rows);
    int dev = 0;
    h->use_graphs = !(g && !strcmp(g, "0"));
    h->graph_first_sighting = g && !strcmp(g, "every"); /* PLUMB_CUDA_GRAPHS=every: capture a shape's graph the first time it runs */
    h->split_min_slices = 2; /* measured on the H200 against 16,1: 4609 vs 4157 tok/s at 7B batch 64 */
    h->split_blocks_per_sm = 2;
    /* the PDL_* asked for, -1 for the shape's default (wide_model), -2 for a value not understood */
    const int pdl_asked = !pdl_env                        ? -1
                        : !strcmp(pdl_env, "0")           ? PDL_OFF
                        : !strcmp(pdl_env, "decode")      ? PDL_DECODE
                        : !strcmp(pdl_env, "all")         ? PDL_ALL
                        : !strcmp(pdl_env, "products")    ? PDL_PRODUCTS
                                                          : -2;
    if (pdl_asked == -2) {
        snprintf(err, err_len, "PLUMB_CUDA_PDL wants 0, decode, all or products (programmatic dependent launch never, in steps of up to %d "
                               "tokens, in every step, or in those and for batch steps' products)", MATVEC_MAX_N);
        goto fail;
    }
    if (getenv("PLUMB_CUDA_SPLITK") && sscanf(getenv("PLUMB_CUDA_SPLITK"), "%d,%d", &h->split_min_slices, &h->split_blocks_per_sm) != 2) {
        snprintf(err, err_len, "PLUMB_CUDA_SPLITK wants MIN_SLICES,BLOCKS_PER_SM (e.g. 16,1)");
        goto fail;
    }
    if (h->split_min_slices < 1) h->split_min_slices = 1;
    {
        const char *wr = getenv("PLUMB_CUDA_GEMM_ROWS");
        if (wr && strcmp(wr, "16") && strcmp(wr, "32")) {
            snprintf(err, err_len, "PLUMB_CUDA_GEMM_ROWS wants 16 or 32 (rows per warp in the batch GEMM)");
            goto fail;
        }
        h->gemm_wide = wr && !strcmp(wr, "32"); /* 16: 4772 vs 4626 tok/s at 7B batch 64 on the H200 */
        const char *mr = getenv("PLUMB_CUDA_MV_ROWS");
        if (mr && strcmp(mr, "1") && strcmp(mr, "2") && strcmp(mr, "auto")) {
            snprintf(err, err_len, "PLUMB_CUDA_MV_ROWS wants 1, 2 or auto (the decode matrix-vector kernel's rows per warp)");
            goto fail;
        }
        const char *gk = getenv("PLUMB_CUDA_GEMM"), *gt = getenv("PLUMB_CUDA_GEMM_TILE"), *ss = getenv("PLUMB_CUDA_SPLIT_SUM");
        if (ss && strcmp(ss, "reader") && strcmp(ss, "kernel") && strcmp(ss, "inline")) {
            snprintf(err, err_len, "PLUMB_CUDA_SPLIT_SUM wants reader, kernel or inline (where a batch product's split-K partials are added: by the "
                                   "kernel that reads the output next, by k_splitk_sum, or by each tile's last split in the int8 GEMM)");
            goto fail;
        }
        h->split_inline = ss && !strcmp(ss, "inline");
        h->split_reader = !ss || !strcmp(ss, "reader");
        const char *lg = getenv("PLUMB_CUDA_LOGITS");
        if (lg && strcmp(lg, "direct") && strcmp(lg, "staged")) {
            snprintf(err, err_len, "PLUMB_CUDA_LOGITS wants direct or staged (logits copied by DMA into the core's page-locked buffer, or through the plugin's and a host copy)");
            goto fail;
        }
        h->staged_logits = lg && !strcmp(lg, "staged");
        const char *am = getenv("PLUMB_CUDA_ATT");
        if (am && strcmp(am, "mma") && strcmp(am, "simt")) {
            snprintf(err, err_len, "PLUMB_CUDA_ATT wants mma or simt (attention of many sequences on tensor cores or not)");
            goto fail;
        }
        h->att_mma = !(am && !strcmp(am, "simt")); /* (and compute capability 8 or more: below) */
        const char *amb = getenv("PLUMB_CUDA_ATT_MINB");
        if (amb && strcmp(amb, "3") && strcmp(amb, "4")) {
            snprintf(err, err_len, "PLUMB_CUDA_ATT_MINB wants 3 or 4 (blocks a multiprocessor the tensor-core attention's registers allow)");
            goto fail;
        }
        h->att_minb = amb && !strcmp(amb, "3") ? 3 : 4;
        const char *rp = getenv("PLUMB_CUDA_ROPE");
        if (rp && !rope_words_known(rp)) {
            snprintf(err, err_len, "PLUMB_CUDA_ROPE wants values, pairs, quads, attention or mma, or several joined by '+' (RoPE and the KV writes a "
                                   "thread per value, per rotation pair, or per 4 values for heads of 128; with attention, one-token steps do "
                                   "them inside the attention; with mma, steps of a token a sequence inside the tensor-core attention), "
                                   "e.g. attention+pairs+quads+mma");
            goto fail;
        }
        /* Unset: the shape's profile (wide_model) */
        h->rope_pairs = rp ? strstr(rp, "pairs") != NULL : wide_model(d);
        h->rope_att = rp ? strstr(rp, "attention") != NULL : wide_model(d);
        /* (quads: heads of 128 all turned, Llama's pairs; then q/k/v rows are whole float4s) */
        h->rope_quads = (rp ? strstr(rp, "quads") != NULL : wide_model(d)) && !d->rope_neox && d->n_rot == 128 && d->head_dim == 128;
        /* (mma: k_rope_kv_quads's arithmetic, so the same heads and the same bits; on by default where quads is: 7B Q4_0
         * batch 64 on the H200 13462 / 13467 -> 13736 / 13741 tok/s, logits equal to the last bit, bench/results/gpu/v25) */
        h->rope_mma = (rp ? strstr(rp, "mma") != NULL : wide_model(d)) && !d->rope_neox && d->n_rot == 128 && d->head_dim == 128;
        const char *sw = getenv("PLUMB_CUDA_SWIGLU");
        if (sw && strcmp(sw, "epilogue") && strcmp(sw, "kernel")) {
            snprintf(err, err_len, "PLUMB_CUDA_SWIGLU wants epilogue or kernel (a batch step's SwiGLU written by the gate/up GEMM where its "
                                   "sums are whole, or always by a kernel of its own after it)");
            goto fail;
        }
        h->swiglu_epi = !(sw && !strcmp(sw, "kernel"));
        const char *nm = getenv("PLUMB_CUDA_NORM");
        if (nm && strcmp(nm, "cluster") && strcmp(nm, "cluster-all") && strcmp(nm, "row")) {
            snprintf(err, err_len, "PLUMB_CUDA_NORM wants cluster, cluster-all or row (RMS norms by %d-block clusters a row in batch steps, in "
                                   "every step, or a block a row)", NORM_CLUSTER);
            goto fail;
        }
        h->norm_cluster = !nm || !strcmp(nm, "row") ? 0 : !strcmp(nm, "cluster") ? 1 : 2;
        const char *kl = getenv("PLUMB_CUDA_KV");
        if (kl && strcmp(kl, "positions") && strcmp(kl, "heads")) {
            snprintf(err, err_len, "PLUMB_CUDA_KV wants positions or heads (the KV cache's values of a block by position, or by head)");
            goto fail;
        }
        {
            const int kv_dim = d->n_head_kv * d->head_dim, heads = kl && !strcmp(kl, "heads");
            h->kvg = kv_geo{d->n_layers, d->kv_block, kv_dim, heads ? d->head_dim : kv_dim, heads ? d->kv_block * d->head_dim : d->head_dim};
        }
        const char *ap = getenv("PLUMB_CUDA_ATT_PREFETCH");
        if (ap && strcmp(ap, "0") && strcmp(ap, "1")) {
            snprintf(err, err_len, "PLUMB_CUDA_ATT_PREFETCH wants 0 or 1 (the tensor-core attention prefetches its next 16 positions into L2)");
            goto fail;
        }
        h->att_prefetch = ap && ap[0] == '1';
        const char *ae = getenv("PLUMB_CUDA_ATT_EARLY"), *an = getenv("PLUMB_CUDA_ATT_NP");
        if ((ae && strcmp(ae, "none") && strcmp(ae, "few") && strcmp(ae, "all")) || (an && strcmp(an, "4") && strcmp(an, "8"))) {
            snprintf(err, err_len, "PLUMB_CUDA_ATT_EARLY wants none, few or all (which attention launches load earlier steps' keys/values before "
                                   "waiting for the previous kernel) and PLUMB_CUDA_ATT_NP 4 or 8 (positions a warp loads per pass when a block has 16 warps)");
            goto fail;
        }
        h->att_early = !ae || !strcmp(ae, "few") ? ATT_EARLY_FEW : !strcmp(ae, "all") ? ATT_EARLY_ALL : ATT_EARLY_NONE;
        h->att_np = an && an[0] == '4' ? 4 : 8;
        if (gk && strcmp(gk, "wg") && strcmp(gk, "reg") && strcmp(gk, "i8") && strcmp(gk, "f16")) {
            snprintf(err, err_len, "PLUMB_CUDA_GEMM wants wg, reg, i8 or f16 (the batch GEMM: Hopper warpgroup MMAs or F16 tensor cores on weights "
                                   "dequantized in registers, int8 tensor cores on the quants, or F16 on tiles dequantized in shared memory)");
            goto fail;
        }
        /* wg: the default where the device runs it (decided below, after the probe) */
        h->gemm_kind = !gk || !strcmp(gk, "wg") ? GEMM_WG : !strcmp(gk, "reg") ? GEMM_REG : !strcmp(gk, "i8") ? GEMM_I8 : GEMM_F16;
        const char *wt = getenv("PLUMB_CUDA_WG_TILE"), *wsm = getenv("PLUMB_CUDA_WG_SMALL");
        /* default: 8-token steps, matrices of 4096 x 4096 weights or more (measured on the H200: 7B batch 8 +35%,
         * TinyLlama batch 8 -2% with every matrix on it, and fewer than 8 tokens slower on both) */
        h->wg_small = MATVEC_MAX_N;
        h->wg_small_elems = 4096L * 4096;
        if (wsm) h->wg_small_elems = 0;
        if (wsm && (sscanf(wsm, "%d", &h->wg_small) != 1 || h->wg_small < 0 || h->wg_small > MATVEC_MAX_N)) {
            snprintf(err, err_len, "PLUMB_CUDA_WG_SMALL wants 0 to %d (steps of that many tokens or more, up to %d, take the wgmma GEMM; 0: never)",
                     MATVEC_MAX_N, MATVEC_MAX_N);
            goto fail;
        }
        const char *wrows = getenv("PLUMB_CUDA_WG_ROWS");
        if (wrows && strcmp(wrows, "auto") && strcmp(wrows, "256") && strcmp(wrows, "tune") && strcmp(wrows, "128x2")) {
            snprintf(err, err_len, "PLUMB_CUDA_WG_ROWS wants 128x2 (the default: 33-64-token steps in 128-row tiles, two blocks a multiprocessor), "
                                   "256 (256-row tiles), auto (a tile's rows per matrix above 32 tokens, estimated) or tune (timed at load for 33-64 tokens)");
            goto fail;
        }
        h->wg_rows = !wrows || !strcmp(wrows, "128x2") ? WG_ROWS_128X2
                     : !strcmp(wrows, "256")            ? WG_ROWS_256
                     : !strcmp(wrows, "auto")           ? WG_ROWS_AUTO
                                                        : WG_ROWS_TUNE;
        if (wt) {
            int wg, bn, nbk, fr, mb = 1;
            const int got = sscanf(wt, "%dx%dx%dx%dx%d", &wg, &bn, &nbk, &fr, &mb);
            if ((got != 4 && got != 5) || wg < 1 || wg > 9 || bn < 8 || bn > 256 || nbk < 1 || nbk > 9 || fr < 1 || fr > 9 || mb < 1 || mb > 9 ||
                !gemm_wg_tile_known(h->wg_tile = WGM_CODE(wg, bn, nbk, fr, mb))) {
                snprintf(err, err_len, "PLUMB_CUDA_WG_TILE wants WGxBNxNBxFR[xMB], one of the built shapes (%s)", WGM_NAMES);
                goto fail;
            }
        }
        const char *rt = getenv("PLUMB_CUDA_GEMM_RTILE"), *gs = getenv("PLUMB_CUDA_GEMM_SPLITS");
        if (rt) {
            int wm, mt, nt, nbk, ks;
            if (sscanf(rt, "%dx%dx%dx%dx%d", &wm, &mt, &nt, &nbk, &ks) != 5 || wm < 1 || wm > 9 || mt < 1 || mt > 9 || nt < 1 || nt > 9 || nbk < 1 ||
                nbk > 9 || ks < 1 || ks > 9 || !gemm_r_tile_known(h->gemm_r_tile = GR_CODE(wm, mt, nt, nbk, ks))) {
                snprintf(err, err_len, "PLUMB_CUDA_GEMM_RTILE wants WMxMTxNTxNBxKS, one of the built shapes (%s)", GR_NAMES);
                goto fail;
            }
        }
        if (gs && (sscanf(gs, "%d", &h->gemm_splits) != 1 || h->gemm_splits < 1 || h->gemm_splits > 8)) {
            snprintf(err, err_len, "PLUMB_CUDA_GEMM_SPLITS wants 1 to 8 (k splits of every batch product)");
            goto fail;
        }
        if (gt) {
            int wm, wn, mt, nbk, ks, mb = 1;
            const int got = sscanf(gt, "%dx%dx%dx%dx%dx%d", &wm, &wn, &mt, &nbk, &ks, &mb);
            if ((got != 5 && got != 6) || wm < 1 || wm > 9 || wn < 1 || wn > 9 || mt < 1 || mt > 9 || nbk < 1 || nbk > 9 || ks < 1 || ks > 9 ||
                mb < 1 || mb > 9 || !gemm_tile_known(h->gemm_tile = GI_CODE(wm, wn, mt, nbk, ks, mb))) {
                snprintf(err, err_len, "PLUMB_CUDA_GEMM_TILE wants WMxWNxMTxNBxKS[xMB], one of the built shapes (2x2x2x2x1, 4x1x2x2x1, 2x2x2x4x1, 2x2x2x4x2, "
                                       "4x1x2x4x2, 2x2x2x8x2, 2x2x2x8x4, 2x2x4x4x2, 2x2x2x4x1x4, 4x1x2x2x1x4)");
                goto fail;
            }
        }
        const char *sk = getenv("PLUMB_CUDA_SKIP");
        if (sk && strcmp(sk, "products") && strcmp(sk, "others")) {
            snprintf(err, err_len, "PLUMB_CUDA_SKIP wants products or others (a timing experiment: those kernels are left out)");
            goto fail;
        }
        h->skip = !sk ? 0 : !strcmp(sk, "products") ? SKIP_PRODUCTS : SKIP_OTHERS;
        if (h->skip) fprintf(stderr, "plumb-cuda: PLUMB_CUDA_SKIP=%s: timing experiment, the model's output is meaningless\n", sk);
        h->mv_rows = !mr || !strcmp(mr, "auto") ? MV_AUTO : !strcmp(mr, "1") ? 1 : 2;
    }
    if (h->split_blocks_per_sm < 1) h->split_blocks_per_sm = 1;
    if (getenv("PLUMB_CUDA_TIMING") && (h->times = (handle::step_time *)calloc(2 * ((size_t)nb + 1), sizeof *h->times))) {
        cudaEventCreate(&h->ev0);
        cudaEventCreate(&h->ev1);
    }
    h->layers = (dlayer *)calloc((size_t)d->n_layers, sizeof(dlayer));
    if (!h->layers) { snprintf(err, err_len, "out of host memory"); goto fail; }
    CHECK(cudaGetDevice(&dev), "selecting the GPU");
    CHECK(cudaDeviceGetAttribute(&h->num_sms, cudaDevAttrMultiProcessorCount, dev), "querying the GPU");
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "querying the GPU");
    /* By default every step for wide models, decode steps only for the others (wide_model); products: opt-in (7B Q4_0 batch 64
     * on the H200 +0.3% against all, 13004-13008 -> 13044-13045 tok/s, bench/results/gpu/v21; not run on the narrow shape) */
    h->pdl = major < 9 ? PDL_OFF : pdl_asked >= 0 ? pdl_asked : wide_model(d) ? PDL_ALL : PDL_DECODE;
    if (major < 8) h->att_mma = 0; /* mma.m16n8k16 */
    if (major < 9 || d->n_embd % (128 * NORM_CLUSTER)) h->norm_cluster = 0; /* clusters; whole warps of float4s a block */
    if (major == 9) { /* which image of the plugin this device runs: wgmma needs sm_90a's */
        int *dflag = NULL;
        CHECK(cudaMalloc(&dflag, sizeof(int)), "probing the GPU");
        k_wgmma_probe<<<1, 1>>>(dflag);
        cudaError_t pe = cudaMemcpy(&h->wgmma, dflag, sizeof(int), cudaMemcpyDeviceToHost);
        cudaFree(dflag);
        CHECK(pe, "probing the GPU");
    }
    if (h->wgmma) { /* TMA: the driver's encoder through the runtime (no link-time libcuda) */
        const char *wl = getenv("PLUMB_CUDA_WG_LOAD");
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (wl && strcmp(wl, "tma") && strcmp(wl, "copies")) {
            snprintf(err, err_len, "PLUMB_CUDA_WG_LOAD wants tma or copies (how the wgmma GEMM loads its slices)");
            goto fail;
        }
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess && q == cudaDriverEntryPointSuccess)
            h->encode_tiled = (PFN_cuTensorMapEncodeTiled_v12000)fn;
        cudaGetLastError();
        h->wg_tma = h->encode_tiled && !(wl && !strcmp(wl, "copies"));
    }
    if (h->gemm_kind == GEMM_WG && !h->wgmma) {
        if (getenv("PLUMB_CUDA_GEMM")) {
            snprintf(err, err_len, "PLUMB_CUDA_GEMM=wg needs a Hopper GPU (compute capability 9.0) and the plugin's sm_90a code; this device has %d.x", major);
            goto fail;
        }
        h->gemm_kind = GEMM_REG;
    }
    /* PLUMB_CUDA_PROFILE_STEP=N: only the Nth decode step runs inside the profiler's range
     * (cudaProfilerStart/Stop), so `ncu --profile-from-start off` sees one step's kernels */
    if (getenv("PLUMB_CUDA_PROFILE_STEP")) h->prof_step = atoi(getenv("PLUMB_CUDA_PROFILE_STEP"));
    if (getenv("PLUMB_CUDA_KPROF") && strcmp(getenv("PLUMB_CUDA_KPROF"), "0")) {
        h->kp_ev = (cudaEvent_t *)calloc(2 * KPROF_MAX, sizeof(cudaEvent_t));
        h->kp_fn = (const void **)calloc(KPROF_MAX, sizeof(void *));
        h->kp_st = (handle::kp_stat *)calloc(KPROF_STATS, sizeof(handle::kp_stat));
        if (!h->kp_ev || !h->kp_fn || !h->kp_st) { snprintf(err, err_len, "out of host memory"); goto fail; }
        for (int i = 0; i < 2 * KPROF_MAX; i++) CHECK(cudaEventCreate(&h->kp_ev[i]), "creating profiling events");
        h->kprof = 1;
        h->use_graphs = 0; /* events between the kernels of a graph cannot be read per kernel */
    }
    CHECK(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking), "creating a stream");
    CHECK(gemm_allow_smem(), "configuring the GEMM kernels");
    if (cublasCreate(&h->blas) != CUBLAS_STATUS_SUCCESS) { snprintf(err, err_len, "cuBLAS did not initialise"); goto fail; }
    cublasSetStream(h->blas, h->stream);
    if (!(h->blas_ws = dev_alloc(h, (size_t)32 << 20, err, err_len, "cuBLAS workspace"))) goto fail;
    cublasSetWorkspace(h->blas, h->blas_ws, (size_t)32 << 20);
    for (int l = 0; l < d->n_layers; l++) {
        const plumb_backend_layer *s = &d->layers[l];
        dlayer *t = &h->layers[l];
        const plumb_backend_tensor *qkv[3] = {&s->wq, &s->wk, &s->wv}, *gu[2] = {&s->w_gate, &s->w_up}, *wo = &s->wo, *down = &s->w_down;
        if (upload_vec(h, &s->attn_norm, &t->attn_norm, err, err_len) || upload_vec(h, &s->ffn_norm, &t->ffn_norm, err, err_len) ||
            upload_group(h, qkv, 3, t->qkv, &t->n_qkv, err, err_len) || upload_mat(h, &wo, 1, &t->wo, err, err_len) ||
            upload_group(h, gu, 2, t->gu, &t->n_gu, err, err_len) || upload_mat(h, &down, 1, &t->down, err, err_len))
            goto fail;
        if (s->bq.data || s->bk.data || s->bv.data) {
            float *b = (float *)calloc((size_t)qkv_rows, sizeof(float));
            if (!b) { snprintf(err, err_len, "out of host memory"); goto fail; }
            if (s->bq.data) memcpy(b, s->bq.data, (size_t)qd * 4);
            if (s->bk.data) memcpy(b + qd, s->bk.data, (size_t)kv_dim * 4);
            if (s->bv.data) memcpy(b + qd + kv_dim, s->bv.data, (size_t)kv_dim * 4);
            const int rc = to_device(h, (void **)&t->bqkv, b, (size_t)qkv_rows * 4, err, err_len, "biases");
            free(b);
            if (rc) goto fail;
        }
    }
    if (d->has_head) {
        const plumb_backend_tensor *o = &d->output;
        if (upload_vec(h, &d->output_norm, &h->output_norm, err, err_len) || upload_mat(h, &o, 1, &h->output, err, err_len)) goto fail;
        if ((size_t)d->n_vocab > max_rows) max_rows = (size_t)d->n_vocab;
    }
    for (int l = 0; l < d->n_layers; l++) { /* the largest Q4_K matrix: the dequantizing batch products' scratch */
        const dlayer *t = &h->layers[l];
        const dmat *ms[] = {&t->qkv[0], &t->qkv[1], &t->qkv[2], &t->wo, &t->gu[0], &t->gu[1], &t->down};
        for (int i = 0; i < 7; i++)
            if (ms[i]->type == TYPE_Q4_K && (size_t)ms[i]->rows * ms[i]->cols > h->deq_elems) h->deq_elems = (size_t)ms[i]->rows * ms[i]->cols;
    }
    if (d->has_head && h->output.type == TYPE_Q4_K && (size_t)h->output.rows * h->output.cols > h->deq_elems)
        h->deq_elems = (size_t)h->output.rows * h->output.cols;
    if (h->deq_elems && !(h->deq = (__half *)dev_alloc(h, h->deq_elems * 2, err, err_len, "Q4_K matrices dequantized for batch products"))) goto fail;
    kv = (size_t)d->n_kv_blocks * d->n_layers * d->kv_block * kv_dim;
    h->partial_elems = (size_t)8 * nb * max_rows;
    h->meta_ints = (size_t)3 * nb + (size_t)d->n_seq_max * d->n_kv_blocks;
    h->hlogits_rows = nb < 64 ? nb : 64;
    if (!(h->k_pool = (__half *)dev_alloc(h, kv * 2, err, err_len, "the KV cache (keys)")) ||
        !(h->v_pool = (__half *)dev_alloc(h, kv * 2, err, err_len, "the KV cache (values)")) ||
        !(h->x = (float *)dev_alloc(h, (size_t)nb * d->n_embd * 4, err, err_len, "hidden states")) ||
        !(h->qkv = (float *)dev_alloc(h, (size_t)nb * qkv_rows * 4, err, err_len, "q/k/v")) ||
        !(h->att = (float *)dev_alloc(h, (size_t)nb * qd * 4, err, err_len, "attention output")) ||
        !(h->gu = (float *)dev_alloc(h, (size_t)nb * 2 * d->n_ff * 4, err, err_len, "feed-forward")) ||
        !(h->logits = (float *)dev_alloc(h, (size_t)nb * (d->has_head ? d->n_vocab : 1) * 4, err, err_len, "logits")) ||
        !(h->cs = (float *)dev_alloc(h, (size_t)nb * d->n_rot / 2 * 4 + 4, err, err_len, "rope table")) ||
        !(h->sn = (float *)dev_alloc(h, (size_t)nb * d->n_rot / 2 * 4 + 4, err, err_len, "rope table")) ||
        !(h->partial = (float *)dev_alloc(h, h->partial_elems * 4, err, err_len, "split-k partial sums")) ||
        !(h->aq = (int8_t *)dev_alloc(h, (size_t)nb * max_k, err, err_len, "int8 activations")) ||
        !(h->ad = (float2 *)dev_alloc(h, (size_t)nb * (max_k / QK + 1) * sizeof(float2), err, err_len, "activation scales")) ||
        !(h->ah = h->ah_main = (__half *)dev_alloc(h, (size_t)nb * max_k * 2, err, err_len, "F16 activations")) ||
        !(h->ah_ff = (__half *)dev_alloc(h, (size_t)nb * d->n_ff * 2, err, err_len, "F16 feed-forward activations")) ||
        !(h->meta = (int *)dev_alloc(h, h->meta_ints * 4, err, err_len, "positions and block tables")) ||
        !(h->ids = (int *)dev_alloc(h, (size_t)nb * 4, err, err_len, "greedy picks")) ||
        !(h->tile_count = (unsigned *)dev_alloc(h, TILE_COUNTERS * sizeof(unsigned), err, err_len, "split-K tile counters")))
        goto fail;
    CHECK(cudaMemset(h->tile_count, 0, TILE_COUNTERS * sizeof(unsigned)), "clearing the tile counters");
    CHECK(cudaMemset(h->ah, 0, (size_t)nb * max_k * 2), "clearing activations");
    if (h->skip) { /* the products of a skip experiment read activations nothing writes: zeros keep every sum finite */
        CHECK(cudaMemset(h->aq, 0, (size_t)nb * max_k), "clearing activations");
        CHECK(cudaMemset(h->ad, 0, (size_t)nb * (max_k / QK + 1) * sizeof(float2)), "clearing activations");
        CHECK(cudaMemset(h->logits, 0, (size_t)nb * (d->has_head ? d->n_vocab : 1) * 4), "clearing logits");
    }
    CHECK(cudaMallocHost(&h->hx, (size_t)nb * d->n_embd * 4), "pinned host memory");
    CHECK(cudaMallocHost(&h->hmeta, h->meta_ints * 4), "pinned host memory");
    if (d->has_head) CHECK(cudaMallocHost(&h->hlogits, h->hlogits_rows * d->n_vocab * 4), "pinned host memory");
    CHECK(cudaMallocHost(&h->hids, (size_t)nb * 4), "pinned host memory");
    if (fused_setup(h, err, err_len)) goto fail;
    if (chain_setup(h, err, err_len)) goto fail;
    CHECK(cudaDeviceSynchronize(), "uploading the weights");
    if (h->wg_rows == WG_ROWS_TUNE && !h->wg_tile && !h->skip && h->gemm_kind == GEMM_WG && h->wgmma && h->wg_tma && d->max_batch > MATVEC_MAX_N &&
        tune_wg_tiles(h, err, err_len))
        goto fail;
    if (getenv("PLUMB_CUDA_MVBENCH") && strcmp(getenv("PLUMB_CUDA_MVBENCH"), "0") && mv_bench(h, err, err_len)) goto fail;
    if (getenv("PLUMB_CUDA_GEMMBENCH") && gemm_bench(h, getenv("PLUMB_CUDA_GEMMBENCH"), err, err_len)) goto fail;
    h->peak = h->bytes;
    return h;
fail:
    unload(h);
    return NULL;
}

// a decode-sized step (n <= MATVEC_MAX_N) that takes the wgmma GEMM instead
// of the matrix-vector kernels: from wg_small tokens, on matrices of at
// least wg_small_elems weights (PLUMB_CUDA_WG_SMALL=N: from N tokens, all)
static int small_wg(const handle *h, const dmat *W, int n) {
    return h->gemm_kind == GEMM_WG && h->wg_small && n >= h->wg_small && n <= MATVEC_MAX_N && (W->type == TYPE_Q4_0 || W->type == TYPE_Q8_0) &&
           (long)W->rows * W->cols >= h->wg_small_elems;
}

// activation format a product of W over n tokens reads
static int act_fmt(const handle *h, const dmat *W, int n) {
    if (W->type == TYPE_Q4_K) return n <= MATVEC_MAX_N ? ACT_Q8 : ACT_F16; /* matrix-vector kernel, or cuBLAS on the dequantized matrix */
    if (small_wg(h, W, n)) return ACT_F16;
    return (W->type == TYPE_Q4_0 || W->type == TYPE_Q8_0) && (n <= MATVEC_MAX_N || h->gemm_kind == GEMM_I8) ? ACT_Q8 : ACT_F16;
}
static int group_fmt(const handle *h, const dmat *W, int count, int n) {
    int f = 0;
    for (int i = 0; i < count; i++) f |= act_fmt(h, &W[i], n);
    return f;
}

// The decode products' token loop: mv(NT, aq, ad, y) for each chunk of up
// to MATVEC_MAX_N tokens, NT a std::integral_constant (the matrix-vector
// kernels are templated on their token count).
template <typename MV>
static void per_token_chunk(handle *h, const dmat *W, int n, float *y, int ldy, MV mv) {
    const int nb = W->cols / QK;
    for (int t0 = 0; t0 < n; t0 += MATVEC_MAX_N) {
        const int nt = n - t0 < MATVEC_MAX_N ? n - t0 : MATVEC_MAX_N;
        const int8_t *aq = h->aq + (size_t)t0 * W->cols;
        const float2 *ad = h->ad + (size_t)t0 * nb;
        float *yt = y + (size_t)t0 * ldy;
        switch (nt) {
        case 1: mv(std::integral_constant<int, 1>(), aq, ad, yt); break;
        case 2: mv(std::integral_constant<int, 2>(), aq, ad, yt); break;
        case 3: mv(std::integral_constant<int, 3>(), aq, ad, yt); break;
        case 4: mv(std::integral_constant<int, 4>(), aq, ad, yt); break;
        case 5: mv(std::integral_constant<int, 5>(), aq, ad, yt); break;
        case 6: mv(std::integral_constant<int, 6>(), aq, ad, yt); break;
        case 7: mv(std::integral_constant<int, 7>(), aq, ad, yt); break;
        default: mv(std::integral_constant<int, 8>(), aq, ad, yt); break;
        }
    }
}

// Q4_K decode products (n <= MATVEC_MAX_N; matmul() sends larger steps to
// the dequantize + cuBLAS path).
static void launch_matvec_q4k(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    const dim3 g((unsigned)grid((size_t)W->rows, 4));
    per_token_chunk(h, W, n, y, ldy, [&](auto nt, const int8_t *aq, const float2 *ad, float *yt) {
        launch(h, k_matvec_q4k<decltype(nt)::value, 4>, g, 128, 0, W->qs, W->kh, W->rows, W->cols, aq, ad, yt, ldy, accumulate);
    });
}

template <int TYPE, int R, int DEPTH>
static void launch_matvec_r(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    const dim3 g((unsigned)grid((size_t)W->rows, 4 * R));
    per_token_chunk(h, W, n, y, ldy, [&](auto nt, const int8_t *aq, const float2 *ad, float *yt) {
        launch(h, k_matvec<TYPE, decltype(nt)::value, R, DEPTH>, g, 128, 0, W->qs, W->d, W->dstride, W->rows, W->cols, aq, ad, yt, ldy, accumulate);
    });
}

// Rows per warp, per product (PLUMB_CUDA_MV_ROWS=auto, the default).
// Measured on the H200 (PLUMB_CUDA_MVBENCH, one token, bench/results/gpu/
// v8-decode-products.md): Q4_0 at 2 rows a warp streams q/k/v at 3.02 vs
// 2.87 TB/s (one row), but the 11008-wide down projection takes it three
// rounds of loads: 10.9 vs 9.2 us with one row a warp (two rounds). Q8_0
// (TinyLlama) is faster at one row a warp on every matrix (e.g. down 4.7
// vs 5.7 us). From two tokens on, 2 rows a warp wins everywhere (each
// activation load serves both rows): q/k/v at 8 tokens 23.9 vs 40.6 us.
template <int TYPE>
static void launch_matvec(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    constexpr int D2 = (TYPE == TYPE_Q4_0 ? MV_DEPTH : MV_DEPTH / 2) / 2; // 2-row depth; 1 row goes twice as deep
    int rows = h->mv_rows;
    if (rows == MV_AUTO) rows = n == 1 && (TYPE == TYPE_Q8_0 || W->cols / QK > 32 * D2) ? 1 : 2;
    if (rows == 1) launch_matvec_r<TYPE, 1, 2 * D2>(h, W, n, y, ldy, accumulate);
    else launch_matvec_r<TYPE, 2, D2>(h, W, n, y, ldy, accumulate);
}

template <int TYPE, int NF, int MA>
static cudaError_t gemm_allow_smem_one() {
    cudaError_t e = cudaFuncSetAttribute(k_gemm_q<TYPE, NF, MA>, cudaFuncAttributeMaxDynamicSharedMemorySize, gemm_smem<TYPE, NF, MA>::BYTES);
    /* ask for the largest shared-memory carveout, so several blocks fit on a multiprocessor */
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_gemm_q<TYPE, NF, MA>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    return e;
}

// the int8 GEMM's block shapes: warps (rows x tokens), 16-row products per warp, blocks per slice
// (and KS, groups of warps that split each slice's blocks)
// (and KS, groups of warps that split each slice's blocks; MB > 1: registers and stages capped so
// MB blocks fit a multiprocessor)
#define GI_CONFIGS(X)                                                                                                                      \
    X(2, 2, 2, 2, 1, 1) X(4, 1, 2, 2, 1, 1) X(2, 2, 2, 4, 1, 1) X(2, 2, 2, 4, 2, 1) X(4, 1, 2, 4, 2, 1) X(2, 2, 2, 8, 2, 1) X(2, 2, 2, 8, 4, 1)        \
        X(2, 2, 4, 4, 2, 1) X(2, 2, 2, 4, 1, 4) X(4, 1, 2, 2, 1, 4)

template <int TYPE, int WM, int WN, int MT, int NB, int KS, int MB>
static cudaError_t gemm_i8_allow_smem_one() {
    cudaError_t e = cudaFuncSetAttribute(k_gemm_i8<TYPE, WM, WN, MT, NB, KS, MB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         gemm_i8_smem<TYPE, WM, WN, MT, NB, KS, MB>::BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_gemm_i8<TYPE, WM, WN, MT, NB, KS, MB>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    return e;
}

static int gr_index(int code) {
    int i = 0;
#define GR_INDEX(WM, MT, NT, NB, KS) if (code == GR_CODE(WM, MT, NT, NB, KS)) return i; i++;
    GR_CONFIGS(GR_INDEX)
#undef GR_INDEX
    return -1;
}
static int gemm_r_tile_known(int tile) { return gr_index(tile) >= 0; }

template <int TYPE, int WM, int MT, int NT, int NB, int KS>
static cudaError_t gemm_r_allow_smem_one() {
    typedef gemm_r_smem<TYPE, WM, MT, NT, NB, KS> L;
    cudaError_t e = cudaFuncSetAttribute(k_gemm_r<TYPE, WM, MT, NT, NB, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_gemm_r<TYPE, WM, MT, NT, NB, KS>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    return e;
}

template <int TYPE, int WG, int BN, int NB, int FR>
static cudaError_t gemm_wg_allow_smem_one() {
    typedef gemm_wg_smem<TYPE, WG, BN, NB> L;
    cudaError_t e = cudaFuncSetAttribute(k_gemm_wg<TYPE, WG, BN, NB, FR>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_gemm_wg<TYPE, WG, BN, NB, FR>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    return e;
}

template <int TYPE, int WG, int BN, int NB, int FR, int MB>
static cudaError_t gemm_wt_allow_smem_one() {
    if constexpr (NB != 4) return cudaSuccess; /* TMA boxes: one map per matrix, slices of 4 blocks */
    else {
        typedef gemm_wt_smem<TYPE, WG, BN, NB, MB> L;
        cudaError_t e = cudaFuncSetAttribute(k_gemm_wt<TYPE, WG, BN, NB, FR, MB, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_gemm_wt<TYPE, WG, BN, NB, FR, MB, false>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
        if constexpr (WG % 2 == 0) {
            if (e == cudaSuccess) e = cudaFuncSetAttribute(k_gemm_wt<TYPE, WG, BN, NB, FR, MB, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k_gemm_wt<TYPE, WG, BN, NB, FR, MB, true>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         (int)cudaSharedmemCarveoutMaxShared);
        }
        return e;
    }
}

static int gemm_wg_tile_known(int tile) {
#define WGM_KNOWN(WG, BN, NB, FR, MB) if (tile == WGM_CODE(WG, BN, NB, FR, MB)) return 1;
    WGM_CONFIGS(WGM_KNOWN)
#undef WGM_KNOWN
    return 0;
}

// the GEMMs' pipelines need more than the default 48 KiB of shared memory
static cudaError_t gemm_allow_smem() {
#define GI_ALLOW(WM, WN, MT, NB, KS, MB) gemm_i8_allow_smem_one<TYPE_Q4_0, WM, WN, MT, NB, KS, MB>(), gemm_i8_allow_smem_one<TYPE_Q8_0, WM, WN, MT, NB, KS, MB>(),
#define GR_ALLOW(WM, MT, NT, NB, KS) gemm_r_allow_smem_one<TYPE_Q4_0, WM, MT, NT, NB, KS>(), gemm_r_allow_smem_one<TYPE_Q8_0, WM, MT, NT, NB, KS>(),
#define WGM_ALLOW(WG, BN, NB, FR, MB)                                                                                      \
    gemm_wg_allow_smem_one<TYPE_Q4_0, WG, BN, NB, FR>(), gemm_wg_allow_smem_one<TYPE_Q8_0, WG, BN, NB, FR>(),                  \
        gemm_wt_allow_smem_one<TYPE_Q4_0, WG, BN, NB, FR, MB>(), gemm_wt_allow_smem_one<TYPE_Q8_0, WG, BN, NB, FR, MB>(),
    const cudaError_t e[] = {GI_CONFIGS(GI_ALLOW) GR_CONFIGS(GR_ALLOW) WGM_CONFIGS(WGM_ALLOW)
#undef GI_ALLOW
#undef GR_ALLOW
#undef WGM_ALLOW
                             gemm_allow_smem_one<TYPE_Q4_0, 1, 1>(), gemm_allow_smem_one<TYPE_Q4_0, 2, 1>(), gemm_allow_smem_one<TYPE_Q4_0, 4, 1>(),
                             gemm_allow_smem_one<TYPE_Q8_0, 1, 1>(), gemm_allow_smem_one<TYPE_Q8_0, 2, 1>(), gemm_allow_smem_one<TYPE_Q8_0, 4, 1>(),
                             gemm_allow_smem_one<TYPE_Q4_0, 2, 2>(), gemm_allow_smem_one<TYPE_Q4_0, 4, 2>(),
                             gemm_allow_smem_one<TYPE_Q8_0, 2, 2>(), gemm_allow_smem_one<TYPE_Q8_0, 4, 2>()};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        if (e[i] != cudaSuccess) return e[i];
    return cudaSuccess;
}

/* k splits of a GEMM grid: enough blocks to cover the multiprocessors, each
 * split at least split_min_slices slices long; *cps = slices per split */
static int split_k(const handle *h, int blocks, int chunks, int n, int rows, int *cps) {
    int splits = (h->split_blocks_per_sm * h->num_sms + blocks - 1) / blocks;
    if (splits > 8) splits = 8;
    if (splits > chunks / h->split_min_slices) splits = chunks / h->split_min_slices;
    if (splits < 1) splits = 1;
    while (splits > 1 && (size_t)splits * n * rows > h->partial_elems) splits--;
    *cps = (chunks + splits - 1) / splits;
    return (chunks + *cps - 1) / *cps;
}

template <int TYPE, int WM, int WN, int MT, int NB, int KS, int MB>
static void launch_gemm_i8_t(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    typedef gemm_i8_smem<TYPE, WM, WN, MT, NB, KS, MB> L;
    const int row_blocks = (int)grid((size_t)W->rows, L::BM), tok_blocks = (int)grid((size_t)n, L::BN);
    int cps;
    const int splits = split_k(h, row_blocks * tok_blocks, (W->cols / QK + NB - 1) / NB, n, W->rows, &cps);
    const int inl = h->split_inline && row_blocks * tok_blocks <= TILE_COUNTERS;
    launch(h, k_gemm_i8<TYPE, WM, WN, MT, NB, KS, MB>, dim3(row_blocks, tok_blocks, splits), L::THREADS, L::BYTES, W->qs, W->d, W->dstride, W->rows,
           W->cols, h->aq, h->ad, n, y, ldy, accumulate, cps, splits > 1 ? h->partial : NULL, inl ? h->tile_count : NULL);
    if (splits > 1 && !inl)
        finish_splits(h, splits, n, W->rows, y, ldy, accumulate);
}

/* A split product's partials: added by k_splitk_sum, or (h->defer_sum, the
 * output's reader adds them itself; run_layers passes h->pend to it) left
 * in h->partial for that reader. */
static void finish_splits(handle *h, int splits, int n, int rows, float *y, int ldy, int accumulate) {
    if (h->defer_sum && ldy == rows) h->pend = psum{h->partial, splits, n, rows, accumulate};
    else launch(h, k_splitk_sum, grid((size_t)n * rows, 256), 256, 0, h->partial, splits, n, rows, y, ldy, accumulate);
}

/* k splits of a reg GEMM of `blocks` output tiles over `chunks` slices.
 * Measured on the H200 (PLUMB_CUDA_GEMMBENCH, bench/results/gpu/v9-*): the
 * kernel is bound by instruction issue, so a multiprocessor gets through
 * the same number of block-slices a microsecond whether it holds one block
 * or two (about 1.45 us of SM time for a 128-row x 64-token x 128-value
 * slice). The time is then that of the busiest SM, ceil(blocks x s / SMs)
 * x slices per split, plus for s > 1 the partial sums: a kernel (~1.5
 * slice-times) that reads s x n x rows floats (~3.6 MB a slice-time from
 * L2). The s with the least such time wins. */
static int split_k_r(const handle *h, int blocks, int chunks, int n, int rows, int *cps) {
    int best = 1;
    double best_cost = -1;
    for (int s = 1; s <= 8; s++) {
        const int per = (chunks + s - 1) / s;
        if (s > 1 && (per < 2 || (size_t)s * n * rows > h->partial_elems)) break;
        double cost = (double)((blocks * (long)s + h->num_sms - 1) / h->num_sms) * per;
        if (s > 1) cost += 1.5 + (double)s * n * rows * 4 / 3.6e6;
        if (best_cost < 0 || cost < best_cost - 1e-9) best = s, best_cost = cost;
    }
    if (h->gemm_splits) best = h->gemm_splits;
    while (best > 1 && (size_t)best * n * rows > h->partial_elems) best--;
    *cps = (chunks + best - 1) / best;
    return (chunks + *cps - 1) / *cps;
}

template <int TYPE, int WM, int MT, int NT, int NB, int KS>
static void launch_gemm_r_t(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    typedef gemm_r_smem<TYPE, WM, MT, NT, NB, KS> L;
    const int row_blocks = (int)grid((size_t)W->rows, L::BM), tok_blocks = (int)grid((size_t)n, L::BN);
    int cps;
    const int splits = split_k_r(h, row_blocks * tok_blocks, (W->cols / QK + NB - 1) / NB, n, W->rows, &cps);
    launch(h, k_gemm_r<TYPE, WM, MT, NT, NB, KS>, dim3(row_blocks, tok_blocks, splits), L::THREADS, L::BYTES, W->qs, W->d, W->dstride, W->rows, W->cols,
           (const __half *)h->ah, n, y, ldy, accumulate, cps, splits > 1 ? h->partial : NULL);
    if (splits > 1)
        finish_splits(h, splits, n, W->rows, y, ldy, accumulate);
}

/* k splits of a wgmma GEMM of `blocks` output tiles over `chunks` slices,
 * `occ` blocks resident a multiprocessor: the busiest multiprocessor's
 * slices (waves of num_sms x occ blocks, each taking occ slice-times) x
 * slice_us, plus for s > 1 the partial sums (~2 us and s x n x rows floats
 * read at ~2.5 MB a microsecond, as measured for k_gemm_r). The s whose
 * estimate (us, in *best_cost) is least. */
static int best_split_wg(const handle *h, int blocks, int occ, int chunks, int n, int rows, double slice_us, double *best_cost) {
    int best = 1;
    *best_cost = -1;
    const long slots = (long)h->num_sms * occ;
    for (int s = 1; s <= 8; s++) {
        const int per = (chunks + s - 1) / s;
        if (s > 1 && (per < 2 || (size_t)s * n * rows > h->partial_elems)) break;
        double cost = (double)((blocks * (long)s + slots - 1) / slots) * occ * per * slice_us;
        if (s > 1) cost += 2.0 + (double)s * n * rows * 4 / 2.5e6;
        if (*best_cost < 0 || cost < *best_cost - 1e-9) best = s, *best_cost = cost;
    }
    return best;
}

// the splits best_split_wg picks (or PLUMB_CUDA_GEMM_SPLITS), as many as the partial-sum buffer holds; *cps: slices a split
static int split_k_wg(const handle *h, int blocks, int occ, int chunks, int n, int rows, double slice_us, int *cps) {
    double cost;
    int best = best_split_wg(h, blocks, occ, chunks, n, rows, slice_us, &cost);
    if (h->gemm_splits) best = h->gemm_splits;
    while (best > 1 && (size_t)best * n * rows > h->partial_elems) best--;
    *cps = (chunks + best - 1) / best;
    return (chunks + *cps - 1) / *cps;
}

template <int TYPE, int WG, int BN, int NB, int FR, int MB>
static void launch_gemm_wg_t(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    typedef gemm_wg_smem<TYPE, WG, BN, NB> L;
    const int row_blocks = (int)grid((size_t)W->rows, L::BM), tok_blocks = (int)grid((size_t)n, BN);
    /* occupancy as the cp.async kernel's, also for the TMA kernel's launches (whose bigger stages hold fewer blocks):
     * the TMA kernel's own occupancy gave the 2x8 tiles fewer splits, and 7B batch 8 measured 2253 instead of 2769
     * tok/s (H200, bench/results/gpu/v16-streamk-rejected.md); the TMA shapes built for MB blocks a multiprocessor
     * count MB */
    const CUtensorMap *am = NB == 4 && h->wg_tma && W->wmap ? act_map(h, W->cols, BN) : NULL;
    const int occ_smem = 227 * 1024 / (L::BYTES + 1024), occ_threads = 2048 / L::THREADS;
    const int occ = am && MB > 1 ? MB : occ_smem < occ_threads ? (occ_smem > 0 ? occ_smem : 1) : occ_threads;
    /* a slice-time: its MMAs at ~5 TFLOP/s a multiprocessor (about 2/3 of the tensor cores' peak) */
    const double slice_us = 2.0 * L::BM * BN * L::KC / 5e6;
    int cps;
    const int splits = split_k_wg(h, row_blocks * tok_blocks, occ, (W->cols / QK + NB - 1) / NB, n, W->rows, slice_us, &cps);
    if constexpr (NB == 4) {
        if (am) {
            typedef gemm_wt_smem<TYPE, WG, BN, NB, MB> T;
            if constexpr (WG % 2 == 0) /* a stacked gate/up product whose sums are whole: its SwiGLU in the epilogue */
                if (h->swiglu_out && splits == 1 && W->rows % 2 == 0) {
                    launch(h, k_gemm_wt<TYPE, WG, BN, NB, FR, MB, true>, dim3((unsigned)grid((size_t)W->rows / 2, T::BM / 2), tok_blocks, 1), T::THREADS,
                           T::BYTES, *W->wmap, *am, W->d, W->dstride, W->rows, W->cols, n, y, ldy, accumulate, cps, (float *)NULL, h->swiglu_out,
                           W->rows / 2);
                    h->swiglu_done = 1;
                    return;
                }
            launch(h, k_gemm_wt<TYPE, WG, BN, NB, FR, MB, false>, dim3(row_blocks, tok_blocks, splits), T::THREADS, T::BYTES, *W->wmap, *am, W->d,
                   W->dstride, W->rows, W->cols, n, y, ldy, accumulate, cps, splits > 1 ? h->partial : NULL, (__half *)NULL, 0);
            if (splits > 1) finish_splits(h, splits, n, W->rows, y, ldy, accumulate);
            return;
        }
    }
    launch(h, k_gemm_wg<TYPE, WG, BN, NB, FR>, dim3(row_blocks, tok_blocks, splits), L::THREADS, L::BYTES, W->qs, W->d, W->dstride, W->rows, W->cols,
           (const __half *)h->ah, n, y, ldy, accumulate, cps, splits > 1 ? h->partial : NULL);
    if (splits > 1)
        finish_splits(h, splits, n, W->rows, y, ldy, accumulate);
}

/* Warpgroups (64 rows each) of a 64-token tile for W: 2, 3 or 4, the one
 * whose whole-wave estimate is least. A block takes ~1.36 us a slice at 256
 * rows (7B gate/up alone on the H200), in proportion to its rows, 3% more a
 * row at 192 and 17% at 128 (the activations read from L2 more often); one
 * block a multiprocessor (the TMA kernel's stages); each tile count's best
 * split in k with its partial sums, as best_split_wg counts them. Against the
 * per-matrix times of every tile (7B Q4_0, 64 tokens, PLUMB_CUDA_GEMMBENCH,
 * bench/results/gpu/v16-row-tiles.md) it picks the fastest for all five
 * products: gate/up and q/k/v 192 rows (86 -> 115 tiles of 132
 * multiprocessors: 43.6 -> 33.9 us; 29.0 -> 24.2), wo 128, output 256;
 * TinyLlama Q8_0's GEMMs 50.9 -> 44.6 us a layer. (Ties go to the larger
 * tile.) */
static int wg_rows_64(const handle *h, const dmat *W, int n) {
    static const double row_cost[5] = {0, 0, 1.17, 1.03, 1.0};
    const int chunks = (W->cols / QK + 3) / 4, tok_blocks = (n + 63) / 64;
    int best_wg = 4;
    double best = -1;
    for (int wg = 4; wg >= 2; wg--) {
        const int tiles = (W->rows + 64 * wg - 1) / (64 * wg) * tok_blocks;
        double cost;
        best_split_wg(h, tiles, 1, chunks, n, W->rows, 1.36 * wg / 4 * row_cost[wg], &cost);
        if (best < 0 || cost < best - 1e-9) best = cost, best_wg = wg;
    }
    return best_wg;
}

/* block shape: wg_tile (PLUMB_CUDA_WG_TILE) or by batch size: up to 32
 * tokens two warpgroups (128 rows) by 32 tokens, above that four (256 rows)
 * by 64 tokens (33-64 tokens: two, two blocks a multiprocessor, since v19:
 * below), slices of 4 blocks, all 4 blocks' fragments in flight.
 * Measured on the H200 side by side (bench/results/gpu/v13-wgmma.md): 256
 * rows read each activation slice from L2 half as often as 128, which is
 * what bound the 128-row shapes (7B batch 64: 8662 vs 8460 tok/s; prefill in
 * 64-token tiles 10229 vs 9912 tok/s with 128-token tiles). With TMA loads
 * (bench/results/gpu/v15-tma-attention.md) 2 blocks' fragments in flight
 * measured faster while the scales came by plain loads, slower once they came
 * in the stage: 7B batch 64 11157 vs 11308 tok/s, so still 4. Above 32
 * tokens, PLUMB_CUDA_WG_ROWS=auto chooses the rows per matrix (wg_rows_64;
 * faster per matrix, not yet timed end to end, so not the default), and
 * PLUMB_CUDA_WG_ROWS=tune times the candidates at load (tune_wg_tiles) for
 * 33-64 tokens. tune picked 128 rows, two blocks a multiprocessor, for all
 * five 7B products on the H100 and the H200 (bench/results/gpu/v18, v19), so
 * 33-64 tokens take that shape by default (PLUMB_CUDA_WG_ROWS=128x2), with no
 * timing at load. Side by side, 7B Q4_0 batch 64: H200 12029/11987 ->
 * 12417/12414 tok/s (through tune), H100 10724 -> 10908/10889; TinyLlama
 * batch 64 on the H100 30396 -> 32364. PLUMB_CUDA_WG_ROWS=256 is the
 * earlier choice. */
static int wg_tile_for(const handle *h, const dmat *W, int n) {
    if (h->wg_tile) return h->wg_tile;
    if (n <= 8) return WGM_CODE(2, 8, 4, 4, 1);
    if (n <= 32) return WGM_CODE(2, 32, 4, 4, 1);
    if (h->wg_rows == WG_ROWS_128X2 && n <= 64) return WGM_CODE(2, 64, 4, 4, 2);
    if (h->wg_rows == WG_ROWS_TUNE && n <= 64)
        for (int i = 0; i < h->n_wg_tuned; i++)
            if (h->wg_tuned[i].type == W->type && h->wg_tuned[i].rows == W->rows && h->wg_tuned[i].cols == W->cols) return h->wg_tuned[i].tile;
    return WGM_CODE(h->wg_rows == WG_ROWS_AUTO || h->wg_rows == WG_ROWS_TUNE ? wg_rows_64(h, W, n) : 4, 64, 4, 4, 1);
}

// a block-shape code that no built kernel has: the product would be skipped
// and its output left as it was, so the step fails instead (run_layers
// reports launch_err)
static void no_shape(handle *h, int tile) {
    fprintf(stderr, "plumb-cuda: no GEMM kernel of block shape code %d\n", tile);
    if (h->launch_err == cudaSuccess) h->launch_err = cudaErrorInvalidConfiguration;
}

template <int TYPE>
static void launch_gemm_wg(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    const int tile = wg_tile_for(h, W, n);
#define WGM_LAUNCH(WG, BN, NB, FR, MB) \
    if (tile == WGM_CODE(WG, BN, NB, FR, MB)) return launch_gemm_wg_t<TYPE, WG, BN, NB, FR, MB>(h, W, n, y, ldy, accumulate);
    WGM_CONFIGS(WGM_LAUNCH)
#undef WGM_LAUNCH
    no_shape(h, tile);
}

/* block shape: gemm_r_tile (PLUMB_CUDA_GEMM_RTILE) or by batch size: token
 * tiles of 16, 32 or 64, four warps of 32 rows */
template <int TYPE>
static void launch_gemm_r(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    const int tile = h->gemm_r_tile ? h->gemm_r_tile : n <= 16 ? GR_CODE(4, 2, 2, 4, 2) : n <= 32 ? GR_CODE(4, 2, 4, 4, 2) : GR_CODE(4, 2, 8, 4, 2);
#define GR_LAUNCH(WM, MT, NT, NB, KS) \
    if (tile == GR_CODE(WM, MT, NT, NB, KS)) return launch_gemm_r_t<TYPE, WM, MT, NT, NB, KS>(h, W, n, y, ldy, accumulate);
    GR_CONFIGS(GR_LAUNCH)
#undef GR_LAUNCH
    no_shape(h, tile);
}

/* block shape: gemm_tile (PLUMB_CUDA_GEMM_TILE=WMxWNxMTxNBxKS, one of
 * GI_CONFIGS) or by batch size: 4x1x2x2x1 up to 32 tokens, 2x2x2x4x1x4 above
 * (53.0 vs 61.7 us a call for 2x2x2x2x1 at 7B batch 64 on the H200; capping
 * it at 128 registers and 3 stages so 4 blocks fit an SM: 65.3 vs 76.2 us on
 * another H200 machine, side by side) */
template <int TYPE>
static void launch_gemm_i8(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    const int tile = h->gemm_tile ? h->gemm_tile : n <= 32 ? GI_CODE(4, 1, 2, 2, 1, 1) : GI_CODE(2, 2, 2, 4, 1, 4);
#define GI_LAUNCH(WM, WN, MT, NB, KS, MB) \
    if (tile == GI_CODE(WM, WN, MT, NB, KS, MB)) return launch_gemm_i8_t<TYPE, WM, WN, MT, NB, KS, MB>(h, W, n, y, ldy, accumulate);
    GI_CONFIGS(GI_LAUNCH)
#undef GI_LAUNCH
    no_shape(h, tile);
}

static int gemm_tile_known(int tile) {
#define GI_KNOWN(WM, WN, MT, NB, KS, MB) if (tile == GI_CODE(WM, WN, MT, NB, KS, MB)) return 1;
    GI_CONFIGS(GI_KNOWN)
#undef GI_KNOWN
    return 0;
}

template <int TYPE, int NF, int MA>
static void launch_gemm_nf(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    typedef gemm_smem<TYPE, NF, MA> L;
    const int row_blocks = (int)grid((size_t)W->rows, L::ROWS), tok_blocks = (int)grid((size_t)n, 16 * NF);
    int cps;
    const int splits = split_k(h, row_blocks * tok_blocks, (W->cols + GM_KC - 1) / GM_KC, n, W->rows, &cps);
    const dim3 g(row_blocks, tok_blocks, splits);
    launch(h, k_gemm_q<TYPE, NF, MA>, g, 256, L::BYTES, W->qs, W->d, W->dstride, W->rows, W->cols, h->ah, n, y, ldy, accumulate, cps,
           splits > 1 ? h->partial : NULL);
    if (splits > 1)
        finish_splits(h, splits, n, W->rows, y, ldy, accumulate);
}

/* Token tiles of 16, 32 or 64; PLUMB_CUDA_GEMM_ROWS=32 gives warps of 32
 * rows from 32 tokens on (measured 3% slower at 7B batch 64: off by default) */
template <int TYPE>
static void launch_gemm(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate) {
    if (n <= 16) launch_gemm_nf<TYPE, 1, 1>(h, W, n, y, ldy, accumulate);
    else if (n <= 32) {
        if (h->gemm_wide) launch_gemm_nf<TYPE, 2, 2>(h, W, n, y, ldy, accumulate);
        else launch_gemm_nf<TYPE, 2, 1>(h, W, n, y, ldy, accumulate);
    } else if (h->gemm_wide) launch_gemm_nf<TYPE, 4, 2>(h, W, n, y, ldy, accumulate);
    else launch_gemm_nf<TYPE, 4, 1>(h, W, n, y, ldy, accumulate);
}

// matmul's launches (with h->in_product set around them)
static int matmul_launches(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate, char *err, size_t err_len) {
    if (W->type == TYPE_Q4_K && n <= MATVEC_MAX_N) launch_matvec_q4k(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_K) { /* dequantized to F16, then cuBLAS on tensor cores */
        const size_t chunks = (size_t)W->rows * (W->cols / 8);
        launch(h, k_dequant_q4k, dim3((unsigned)grid(chunks, 256)), 256, 0, (const uint8_t *)W->qs, (const uint4 *)W->kh, W->rows, W->cols, h->deq);
        const float one = 1, beta = accumulate ? 1.0f : 0.0f;
        cublasStatus_t st = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, n, W->cols, &one, h->deq, CUDA_R_16F, W->cols, h->ah, CUDA_R_16F,
                                         W->cols, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            snprintf(err, err_len, "cublasGemmEx failed (status %d) for a %dx%d Q4_K by %d product", (int)st, W->rows, W->cols, n);
            return -1;
        }
    }
    else if (W->type == TYPE_Q4_0 && small_wg(h, W, n)) launch_gemm_wg<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0 && small_wg(h, W, n)) launch_gemm_wg<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_0 && n <= MATVEC_MAX_N) launch_matvec<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0 && n <= MATVEC_MAX_N) launch_matvec<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_0 && h->gemm_kind == GEMM_WG) launch_gemm_wg<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0 && h->gemm_kind == GEMM_WG) launch_gemm_wg<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_0 && h->gemm_kind == GEMM_REG) launch_gemm_r<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0 && h->gemm_kind == GEMM_REG) launch_gemm_r<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_0 && h->gemm_kind == GEMM_I8) launch_gemm_i8<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0 && h->gemm_kind == GEMM_I8) launch_gemm_i8<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q4_0) launch_gemm<TYPE_Q4_0>(h, W, n, y, ldy, accumulate);
    else if (W->type == TYPE_Q8_0) launch_gemm<TYPE_Q8_0>(h, W, n, y, ldy, accumulate);
    else {
        const float one = 1, beta = accumulate ? 1.0f : 0.0f;
        cublasStatus_t st = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, n, W->cols, &one, W->f16, CUDA_R_16F, W->cols, h->ah, CUDA_R_16F,
                                         W->cols, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            snprintf(err, err_len, "cublasGemmEx failed (status %d) for a %dx%d by %d product", (int)st, W->rows, W->cols, n);
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

// y[t][0..rows) (+)= W . act[t] for n tokens; y rows are ldy floats apart.
static int matmul(handle *h, const dmat *W, int n, float *y, int ldy, int accumulate, char *err, size_t err_len) {
    h->in_product = 1; /* (PDL_PRODUCTS: these launches are a product's) */
    const int rc = matmul_launches(h, W, n, y, ldy, accumulate, err, err_len);
    h->in_product = 0;
    return rc;
}

static int matmul_group(handle *h, const dmat *W, int count, int n, float *y, int ldy, char *err, size_t err_len) {
    for (int i = 0, off = 0; i < count; off += W[i].rows, i++)
        if (matmul(h, &W[i], n, y + off, ldy, 0, err, err_len)) return -1;
    return 0;
}

// With fmt, attention writes the output projection's activations itself.
// k_attention's launch: EARLY (earlier steps' keys/values loaded before the wait), ROPE (16-warp blocks only)
template <int E, int HG, int W, int NP, typename... A> static void launch_att(handle *h, int early, int rope, dim3 g, size_t sm, A... a) {
    if constexpr (W == 16)
        if (rope) {
            launch(h, k_attention<E, HG, W, NP, true, true>, g, 32 * W, sm, a...);
            return;
        }
    if (early) launch(h, k_attention<E, HG, W, NP, true, false>, g, 32 * W, sm, a...);
    else launch(h, k_attention<E, HG, W, NP, false, false>, g, 32 * W, sm, a...);
}

// The attention's launch shape for a step of n tokens: the tensor-core kernel
// (returns 1), or k_attention with hg query heads a block and w warps (0).
static int attention_shape(const handle *h, int n, int *hg_out, int *w_out) {
    const plumb_backend_model_desc *d = &h->desc;
    const int group = d->n_head / d->n_head_kv;
    /* tensor cores: heads with their own keys/values, head_dim 128, warps enough to cover the GPU 8 times over */
    if (h->att_mma && group == 1 && d->head_dim == 128 && (long)n * d->n_head >= 8L * h->num_sms) return 1;
    /* query heads per block: up to 8 share each K/V load, but a decode step of a
     * grouped-query model then has only n x n_head_kv blocks: split the group
     * until the blocks cover the multiprocessors (K/V rereads hit L2) */
    int hg = group >= 8 ? 8 : group >= 4 ? 4 : group >= 2 ? 2 : 1;
    while (hg > 1 && (long)n * d->n_head_kv * ((group + hg - 1) / hg) < h->num_sms) hg /= 2;
    /* 16 warps a block while the blocks are fewer than twice the multiprocessors
     * (then hg is 1 or 2: 16 warps of wider head groups would spill) */
    *hg_out = hg;
    *w_out = (long)n * d->n_head_kv * ((group + hg - 1) / hg) < 2L * h->num_sms && hg <= 2 ? 16 : 4;
    return 0;
}

// Whether this step's attention does RoPE and the KV writes itself
// (PLUMB_CUDA_ROPE=attention): a one-token step whose q/k/v are complete
// (no split-K partials pending) and whose attention runs 16-warp blocks.
static int attention_ropes(const handle *h, int n) {
    int hg, w;
    return h->rope_att && n == 1 && !h->pend.p && h->desc.n_rot > 0 && !attention_shape(h, n, &hg, &w) && w == 16;
}

// Whether this step's tensor-core attention does RoPE and the KV writes
// itself (k_attention_mma's ROPE): a step of a token a sequence (mode's
// STEP_MMA_ROPE) that takes that kernel, without its L2 prefetch.
static int attention_ropes_mma(const handle *h, int n, int mode) {
    int hg, w;
    return (mode & STEP_MMA_ROPE) && !h->att_prefetch && attention_shape(h, n, &hg, &w); // (mma_rope_mode sets it only with rope_mma)
}

// The step's attention for a layer; with ri (attention_ropes, or
// attention_ropes_mma: the product's pending partials go to the kernel too),
// RoPE and the KV writes too.
static void launch_attention(handle *h, int n, int layer, const int *pos, const int *seq, const int *table, int max_blocks, int fmt,
                             const rope_in *ri) {
    const plumb_backend_model_desc *d = &h->desc;
    const int group = d->n_head / d->n_head_kv, hd = d->head_dim, ldq = (d->n_head + 2 * d->n_head_kv) * hd;
    int hg = 1, w = 4;
    if (attention_shape(h, n, &hg, &w)) {
        const int pairs = n * d->n_head;
        const psum none = {NULL, 0, 0, 0, 0}, ps = ri ? h->pend : none;
        if (ri) h->pend = none;
        auto kernel = ri ? (h->att_minb == 3 ? k_attention_mma<3, false, true> : k_attention_mma<4, false, true>)
                    : h->att_minb == 3 ? (h->att_prefetch ? k_attention_mma<3, true, false> : k_attention_mma<3, false, false>)
                                       : (h->att_prefetch ? k_attention_mma<4, true, false> : k_attention_mma<4, false, false>);
        launch(h, kernel, dim3((unsigned)grid((size_t)pairs, 4)), 128, 0, h->qkv, ldq, pos, seq, table, max_blocks, d->n_head, pairs, h->k_pool, h->v_pool,
               layer, h->kvg, h->att, fmt, h->aq, h->ad, h->ah, h->k_pool, h->v_pool, ri ? *ri : rope_in{NULL, NULL, NULL, 0, 0}, ps);
        return;
    }
    const dim3 g(n * d->n_head_kv, (group + hg - 1) / hg);
    const size_t sm = (size_t)w * hg * (2 + hd) * 4;
    const int rope = ri && w == 16;
    const rope_in rargs = ri ? *ri : rope_in{NULL, NULL, NULL, 0, 0};
    const size_t rsm = rope ? (size_t)hg * hd * 4 + (size_t)2 * hd * 2 : 0;
#define ATT_NP(E, HG, W, NP)                                                                                                                       \
    launch_att<E, HG, W, NP>(h, h->att_early == ATT_EARLY_ALL || (W == 16 && h->att_early == ATT_EARLY_FEW), rope, g, sm + rsm, h->qkv, ldq, pos, \
                             seq, table, max_blocks, d->n_head, d->n_head_kv, hd, h->k_pool, h->v_pool, layer, h->kvg, h->att,                    \
                             fmt, h->aq, h->ad, h->ah, rargs)
    /* 8 positions a pass; 16-warp blocks of 8-value lanes keep 4 (8 would spill). (16 in 16-warp blocks, a decode
     * step's whole context loaded before waiting, was measured slower: 7B batch 1 470 vs 549 tok/s) */
#define ATT(E, HG, W)                                                                                                                              \
    do {                                                                                                                                           \
        if (W == 16 && (E >= 8 || h->att_np == 4)) ATT_NP(E, HG, 16, 4);                                                                          \
        else ATT_NP(E, HG, W, 8);                                                                                                                  \
    } while (0)
#define ATT_E(HG, W)                                                                                                                               \
    do {                                                                                                                                           \
        if (hd <= 32) ATT(1, HG, W);                                                                                                               \
        else if (hd <= 64) ATT(2, HG, W);                                                                                                          \
        else if (hd <= 128) ATT(4, HG, W);                                                                                                         \
        else ATT(8, HG, W);                                                                                                                        \
    } while (0)
    if (hg == 1 && w == 16) ATT_E(1, 16);
    else if (hg == 2 && w == 16) ATT_E(2, 16);
    else if (hg == 1) ATT_E(1, 4);
    else if (hg == 2) ATT_E(2, 4);
    else if (hg == 4) ATT_E(4, 4);
    else ATT_E(8, 4);
#undef ATT_E
#undef ATT
#undef ATT_NP
}

// The step's kernels, all on h->stream, reading inputs already on the device.
static void launch_fused(handle *h, int n, int max_blocks) {
    const plumb_backend_model_desc *d = &h->desc;
    fused_args a;
    a.layers = h->fused_layers;
    a.n_layers = d->n_layers;
    a.n = n;
    a.D = d->n_embd;
    a.hd = d->head_dim;
    a.qd = d->n_head * a.hd;
    a.kv_dim = d->n_head_kv * a.hd;
    a.ff = d->n_ff;
    a.n_head = d->n_head;
    a.n_head_kv = d->n_head_kv;
    a.n_rot = d->n_rot;
    a.neox = d->rope_neox;
    a.max_k = a.ff > a.D ? (a.ff > a.qd ? a.ff : a.qd) : (a.D > a.qd ? a.D : a.qd);
    a.max_blocks = max_blocks;
    a.kg = h->kvg;
    a.eps = d->rms_eps;
    a.x = h->x;
    a.qkv = h->qkv;
    a.att = h->att;
    a.hbuf = h->gu; /* [nb][2 ff] floats: room for n <= nb rows of ff */
    a.cs = h->cs;
    a.sn = h->sn;
    a.pos = h->meta;
    a.seq = h->meta + d->max_batch;
    a.table = h->meta + 3 * d->max_batch;
    a.kp = h->k_pool;
    a.vp = h->v_pool;
    a.bar = h->fused_bar;
    const int nt = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8;
    const size_t smem = fused_smem(nt, a.max_k, a.hd);
    const unsigned g = (unsigned)fused_blocks(h, n);
    cudaError_t e = cudaMemsetAsync(h->fused_bar, 0, sizeof(unsigned), h->stream);
    if (e == cudaSuccess) {
        /* a plain launch (no programmatic serialization): every block must find the previous kernel done */
        if (nt == 1) k_decode_fused<1><<<g, FUSED_THREADS, smem, h->stream>>>(a);
        else if (nt == 2) k_decode_fused<2><<<g, FUSED_THREADS, smem, h->stream>>>(a);
        else if (nt == 4) k_decode_fused<4><<<g, FUSED_THREADS, smem, h->stream>>>(a);
        else k_decode_fused<8><<<g, FUSED_THREADS, smem, h->stream>>>(a);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess && h->launch_err == cudaSuccess) h->launch_err = e;
}

static int run_layers(handle *h, int n, int n_out, int max_blocks, int mode, char *err, size_t err_len) {
    const int fused = mode & STEP_FUSED;
    h->step_n = n;
    h->launch_err = cudaSuccess;
    const plumb_backend_model_desc *d = &h->desc;
    const int D = d->n_embd, kv_dim = d->n_head_kv * d->head_dim, qd = d->n_head * d->head_dim, ff = d->n_ff, ldq = qd + 2 * kv_dim;
    const int *pos = h->meta, *seq = h->meta + d->max_batch, *rows = h->meta + 2 * d->max_batch, *table = h->meta + 3 * d->max_batch;
    const int mm = h->skip != SKIP_PRODUCTS, other = h->skip != SKIP_OTHERS;
    const rope_args ra = {d->n_rot / 2, d->rope_freq_base, h->cs, h->sn};
    if (d->n_rot > 0 && other && !(mode & STEP_CHAIN)) launch(h, k_rope_table, grid((size_t)n * (d->n_rot / 2), 128), 128, 0, pos, n, d->n_rot / 2, d->rope_freq_base, h->cs, h->sn);
    if (fused) launch_fused(h, n, max_blocks);
    /* A product whose output the next kernel reads (norm, RoPE, SwiGLU) leaves
     * its split-K partials to that kernel (finish_splits); take() hands them over. */
    const psum none = {NULL, 0, 0, 0, 0};
    h->pend = none;
    auto product = [&](const dmat *W, int count, float *y, int ldy, int accumulate, int reader_follows) {
        h->defer_sum = reader_follows && other && count == 1 && h->split_reader;
        const int rc = count == 1 ? matmul(h, W, n, y, ldy, accumulate, err, err_len) : matmul_group(h, W, count, n, y, ldy, err, err_len);
        h->defer_sum = 0;
        return rc;
    };
    auto take = [&]() {
        const psum p = h->pend;
        h->pend = none;
        return p;
    };
    auto norm = [&](int rows_n, const int *rws, const float *w, int fmt) { /* RMS norm into the next product's activations */
        if (h->norm_cluster == 2 || (h->norm_cluster && n > MATVEC_MAX_N))
            launch_in(h, NORM_CLUSTER, k_rmsnorm_act_cl, rows_n * NORM_CLUSTER, D / (4 * NORM_CLUSTER), 0, h->x, rws, w, D, d->rms_eps, fmt, h->aq, h->ad,
                      h->ah, take());
        else launch(h, k_rmsnorm_act, rows_n, 1024, 0, h->x, rws, w, D, d->rms_eps, fmt, h->aq, h->ad, h->ah, take());
    };
    for (int l = 0; !fused && l < d->n_layers; l++) {
        const dlayer *L = &h->layers[l];
        const int fq = group_fmt(h, L->qkv, L->n_qkv, n), fo = act_fmt(h, &L->wo, n), fg = group_fmt(h, L->gu, L->n_gu, n), fd = act_fmt(h, &L->down, n);
        if (other) norm(n, NULL, L->attn_norm, fq);
        if (mm && product(L->qkv, L->n_qkv, h->qkv, ldq, 0, 1)) return -1;
        const int ropes = other && (attention_ropes(h, n) || attention_ropes_mma(h, n, mode));
        const rope_in ri = {L->bqkv, h->cs, h->sn, d->n_rot, d->rope_neox};
        if (other && !ropes && h->rope_quads)
            launch(h, k_rope_kv_quads, dim3(n, (d->n_head + 2 * d->n_head_kv + 3) / 4), 128, 0, h->qkv, ldq, L->bqkv, h->cs, h->sn, pos, seq, table,
                   max_blocks, d->n_head, d->n_head_kv, h->k_pool, h->v_pool, l, h->kvg, take());
        else if (other && !ropes && h->rope_pairs) {
            const int heads = d->n_head + 2 * d->n_head_kv, tph = d->n_rot >= 2 ? (d->n_rot / 2 + 31) / 32 * 32 : 32;
            const int hpb = tph >= 128 ? 1 : 128 / tph; /* heads a block: 128 threads, or one head of more */
            launch(h, k_rope_kv_pairs, dim3(n, (heads + hpb - 1) / hpb), (unsigned)(hpb * tph), 0, h->qkv, ldq, L->bqkv, h->cs, h->sn, pos, seq, table,
                   max_blocks, d->n_head, d->n_head_kv, d->head_dim, d->n_rot, d->rope_neox, h->k_pool, h->v_pool, l, h->kvg, tph, take());
        } else if (other && !ropes)
            launch(h, k_rope_kv, dim3(n, d->n_head + 2 * d->n_head_kv), (unsigned)((d->head_dim + 31) / 32 * 32), 0, h->qkv, ldq, L->bqkv, h->cs, h->sn, pos, seq,
                   table, max_blocks, d->n_head, d->n_head_kv, d->head_dim, d->n_rot, d->rope_neox, h->k_pool, h->v_pool, l, h->kvg, take());
        if (other && d->head_dim % QK == 0) launch_attention(h, n, l, pos, seq, table, max_blocks, fo, ropes ? &ri : NULL); /* writes wo's activations */
        else if (other) {
            launch_attention(h, n, l, pos, seq, table, max_blocks, 0, ropes ? &ri : NULL);
            launch(h, k_make_act, dim3(n, (unsigned)grid((size_t)qd, 1024)), 256, 0, h->att, qd, qd, 0, fo, h->aq, h->ad, h->ah, none);
        }
        if (mm && product(&L->wo, 1, h->x, D, 1, 1)) return -1;
        if (other) norm(n, NULL, L->ffn_norm, fg);
        /* the gate/up GEMM may do the SwiGLU itself (F16 activations for down, in ah_ff), else k_make_act does */
        h->swiglu_out = mm && other && h->swiglu_epi && L->n_gu == 1 && fd == ACT_F16 ? h->ah_ff : NULL;
        h->swiglu_done = 0;
        const int gu_rc = mm ? product(L->gu, L->n_gu, h->gu, 2 * ff, 0, 1) : 0;
        h->swiglu_out = NULL;
        if (gu_rc) return -1;
        if (h->swiglu_done) h->ah = h->ah_ff;
        else if (other) launch(h, k_make_act, dim3(n, (unsigned)grid((size_t)ff, 1024)), 256, 0, h->gu, 2 * ff, ff, 1, fd, h->aq, h->ad, h->ah, take());
        const int down_rc = mm ? product(&L->down, 1, h->x, D, 1, l + 1 < d->n_layers || (d->has_head && n_out)) : 0;
        h->ah = h->ah_main;
        if (down_rc) return -1;
    }
    if (d->has_head && n_out) {
        if (other) norm(n_out, rows, h->output_norm, act_fmt(h, &h->output, n_out));
        if (mm && matmul(h, &h->output, n_out, h->logits, d->n_vocab, 0, err, err_len)) return -1;
    }
    if (mode & STEP_CHAIN) /* the picks: the next step's tokens, embedded at the next positions */
        launch(h, k_pick_next, n_out, 1024, 0, (const float *)h->logits, d->n_vocab, h->ids, h->dchain, (const int *)h->chain_in + d->max_batch, h->meta,
               d->max_batch, (const uint8_t *)h->embd, h->embd_type, h->embd_row_bytes, D, h->x, ra);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = h->launch_err;
    if (e != cudaSuccess) {
        snprintf(err, err_len, "layer kernels: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

// The captured graph for this step's shape, capturing it on first use
// (least recently used slot replaced); NULL to run the kernels directly.
static cudaGraphExec_t graph_for(handle *h, int n, int n_out, int max_blocks, int mode, char *err, size_t err_len, int *failed) {
    *failed = 0;
    if (!h->use_graphs) return NULL;
    graph_slot *victim = &h->graphs[0];
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        graph_slot *s = &h->graphs[i];
        if (s->used && s->n == n && s->n_out == n_out && s->max_blocks == max_blocks && s->mode == mode) { s->stamp = ++h->clock; return s->exec; }
        if (!s->used || (victim->used && s->stamp < victim->stamp)) victim = s;
    }
    { /* a shape seen for the first time runs its kernels directly: a server's steps
       * mix prompt chunks and decodes into ever new token counts, and capturing and
       * instantiating a graph that is never replayed costs more than the launches */
        const unsigned key = 1u + (unsigned)n * 2654435761u + (unsigned)n_out * 40503u + (unsigned)max_blocks * 97u + (unsigned)mode;
        int seen = 0;
        for (int i = 0; i < SEEN_SHAPES && !seen; i++) seen = h->seen[i] == key;
        if (!seen && !h->graph_first_sighting) {
            h->seen[h->seen_next] = key;
            h->seen_next = (h->seen_next + 1) % SEEN_SHAPES;
            return NULL;
        }
    }
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) goto off;
    if (run_layers(h, n, n_out, max_blocks, mode, err, err_len)) {
        cudaStreamEndCapture(h->stream, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        *failed = 1;
        return NULL;
    }
    if (cudaStreamEndCapture(h->stream, &g) != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        goto off;
    }
    cudaGraphDestroy(g);
    if (victim->used) cudaGraphExecDestroy(victim->exec);
    victim->n = n;
    victim->n_out = n_out;
    victim->max_blocks = max_blocks;
    victim->mode = mode;
    victim->used = 1;
    victim->stamp = ++h->clock;
    victim->exec = exec;
    return exec;
off: // capture is not available here: run kernels directly from now on
    cudaGetLastError();
    h->use_graphs = 0;
    return NULL;
}

// every token of the step from a different sequence (a decode step, not a prompt chunk)
static int distinct(const int *seq, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (seq[i] == seq[j]) return 0;
    return 1;
}

// STEP_MMA_ROPE for a step of n tokens (one_each: each of another sequence) where the tensor-core attention may do RoPE
static int mma_rope_mode(const handle *h, int n, int one_each) { return h->rope_mma && n > 1 && one_each ? STEP_MMA_ROPE : 0; }

// PLUMB_CUDA_FUSED_CHECK: the fused step's logits against the unfused step's
static void compare_logits(handle *h, const float *ref, const float *got, int rows) {
    const int V = h->desc.n_vocab;
    h->chk_steps++;
    for (int r = 0; r < rows; r++) {
        const float *a = ref + (size_t)r * V, *b = got + (size_t)r * V;
        int ia = 0, ib = 0;
        for (int i = 0; i < V; i++) {
            const double diff = fabs((double)a[i] - b[i]);
            if (diff > h->chk_maxdiff || diff != diff) h->chk_maxdiff = diff != diff ? INFINITY : diff;
            if (fabs(a[i]) > h->chk_maxabs) h->chk_maxabs = fabs(a[i]);
            if (a[i] > a[ia]) ia = i;
            if (b[i] > b[ib]) ib = i;
        }
        h->chk_rows++;
        h->chk_agree += ia == ib;
    }
}

static handle::kp_stat *kprof_stat(handle *h, const void *fn, int key) {
    for (int i = 0; i < h->kp_nst; i++)
        if (h->kp_st[i].fn == fn && h->kp_st[i].key == key) return &h->kp_st[i];
    if (h->kp_nst == KPROF_STATS) return NULL;
    handle::kp_stat *s = &h->kp_st[h->kp_nst++];
    s->fn = fn;
    s->key = key;
    return s;
}

// adds the finished step's kernel times (key: tokens, negative for a prompt chunk)
static void kprof_collect(handle *h, int key) {
    handle::kp_stat *steps = kprof_stat(h, NULL, key);
    if (steps) steps->calls++;
    for (int i = 0; i < h->kp_n; i++) {
        float ms = 0;
        handle::kp_stat *s = kprof_stat(h, h->kp_fn[i], key);
        if (s && cudaEventElapsedTime(&ms, h->kp_ev[2 * i], h->kp_ev[2 * i + 1]) == cudaSuccess) {
            s->calls++;
            s->ms += ms;
        }
    }
    h->kp_n = 0;
}

static void kprof_print(handle *h) {
    for (int i = 0; i < h->kp_nst; i++) {
        const handle::kp_stat *st = &h->kp_st[i];
        if (st->fn || !st->calls) continue;
        double total = 0;
        for (int j = 0; j < h->kp_nst; j++)
            if (h->kp_st[j].fn && h->kp_st[j].key == st->key) total += h->kp_st[j].ms;
        fprintf(stderr, "plumb-cuda: kernels of %s steps of %d tokens (%ld steps): %.3f ms a step\n", st->key > 0 ? "decode" : "prompt",
                st->key > 0 ? st->key : -st->key, st->calls, total / st->calls);
        for (int j = 0; j < h->kp_nst; j++) {
            const handle::kp_stat *k = &h->kp_st[j];
            if (!k->fn || k->key != st->key) continue;
            const char *name = NULL;
            char *dm = NULL;
            if (cudaFuncGetName(&name, k->fn) != cudaSuccess || !name) name = "?";
            else {
                int status = 0;
                dm = abi::__cxa_demangle(name, NULL, NULL, &status);
                if (dm) { char *paren = strchr(dm, '('); if (paren) *paren = 0; name = dm; }
            }
            fprintf(stderr, "plumb-cuda:   %-40.40s %6.1f calls %9.3f ms %5.1f%%  %8.2f us a call\n", name, (double)k->calls / st->calls,
                    k->ms / st->calls, total > 0 ? 100 * k->ms / total : 0.0, 1e3 * k->ms / k->calls);
            free(dm);
        }
    }
}

static int is_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

static int forward(void *hv, const plumb_backend_batch *b, float *x_host, float *logits_host, char *err, size_t err_len) {
    handle *h = (handle *)hv;
    const plumb_backend_model_desc *d = &h->desc;
    const int n = b->n, D = d->n_embd, nb = d->max_batch;
    int n_out = 0, failed = 0, fused = 0, mode = 0, checking = 0, picks = 0, profiled = 0;
    const int one_each = distinct(b->seq, n); // a decode step (a token per sequence), not a prompt chunk
    cudaGraphExec_t exec = NULL;
    if (n > nb) { snprintf(err, err_len, "batch of %d exceeds the plugin's %d", n, nb); return -1; }
    if (b->max_blocks_per_seq > d->n_kv_blocks) {
        snprintf(err, err_len, "block table wider than the plugin's (%d > %d)", b->max_blocks_per_seq, d->n_kv_blocks);
        return -1;
    }
    const double t_start = h->times ? now_s() : 0;
    double t_launched = 0, t_done = 0, copy_s = 0;
    int *hp = h->hmeta;
    memcpy(hp, b->pos, (size_t)n * 4);
    memcpy(hp + nb, b->seq, (size_t)n * 4);
    if (d->has_head)
        for (int t = 0; t < n; t++) if (b->want[t]) hp[2 * nb + n_out++] = t;
    const size_t table_ints = (size_t)d->n_seq_max * b->max_blocks_per_seq;
    memcpy(hp + 3 * nb, b->block_table, table_ints * 4);
    memcpy(h->hx, x_host, (size_t)n * D * 4);
    CHECK(cudaMemcpyAsync(h->meta, hp, (3 * nb + table_ints) * 4, cudaMemcpyHostToDevice, h->stream), "copying positions and block tables");
    CHECK(cudaMemcpyAsync(h->x, h->hx, (size_t)n * D * 4, cudaMemcpyHostToDevice, h->stream), "copying hidden states");
    fused = h->fused_ok && fused_blocks(h, n) && one_each;
    mode = fused ? STEP_FUSED : mma_rope_mode(h, n, one_each);
    if (mode && h->fused_check && d->has_head && n_out > 0) { // the plain step first (mode 0), its logits kept
        exec = graph_for(h, n, n_out, b->max_blocks_per_seq, 0, err, err_len, &failed);
        if (failed) return -1;
        if (exec) CHECK(cudaGraphLaunch(exec, h->stream), "launching the step");
        else if (run_layers(h, n, n_out, b->max_blocks_per_seq, 0, err, err_len)) return -1;
        CHECK(cudaMemcpyAsync(h->hlogits, h->logits, (size_t)n_out * d->n_vocab * 4, cudaMemcpyDeviceToHost, h->stream), "copying logits");
        CHECK(cudaStreamSynchronize(h->stream), "running the layers");
        if (!h->check_logits && !(h->check_logits = (float *)malloc((size_t)nb * d->n_vocab * 4))) {
            snprintf(err, err_len, "out of host memory");
            return -1;
        }
        memcpy(h->check_logits, h->hlogits, (size_t)n_out * d->n_vocab * 4);
        CHECK(cudaMemcpyAsync(h->x, h->hx, (size_t)n * D * 4, cudaMemcpyHostToDevice, h->stream), "copying hidden states");
        checking = 1;
        h->chk_what = fused ? "fused" : "mma RoPE";
    }
    exec = graph_for(h, n, n_out, b->max_blocks_per_seq, mode, err, err_len, &failed);
    if (failed) return -1;
    profiled = h->prof_step > 0 && n_out == n && one_each && ++h->decode_steps == h->prof_step;
    if (profiled) CHECK(cudaProfilerStart(), "starting the profiler's range");
    if (h->times) cudaEventRecord(h->ev0, h->stream);
    if (exec) CHECK(cudaGraphLaunch(exec, h->stream), "launching the step");
    else if (run_layers(h, n, n_out, b->max_blocks_per_seq, mode, err, err_len)) return -1;
    if (fused) CHECK(cudaMemcpyAsync(h->hflag, h->fused_bar + 1, sizeof(unsigned), cudaMemcpyDeviceToHost, h->stream), "reading the step's status");
    if (h->times) {
        cudaEventRecord(h->ev1, h->stream);
        t_launched = now_s();
    }
    picks = d->has_head && b->argmax && n_out > 0;
    if (picks) { // before the logits copy, so the picks ride along with it
        k_argmax<<<n_out, 1024, 0, h->stream>>>(h->logits, d->n_vocab, h->ids);
        CHECK(cudaGetLastError(), "launching the greedy picks");
        CHECK(cudaMemcpyAsync(h->hids, h->ids, (size_t)n_out * 4, cudaMemcpyDeviceToHost, h->stream), "copying the greedy picks");
    }
    if (d->has_head && n_out > 0 && !h->staged_logits && is_pinned(logits_host)) { // the core's buffer came from host_alloc: one DMA, no host copy
        CHECK(cudaMemcpyAsync(logits_host, h->logits, (size_t)n_out * d->n_vocab * 4, cudaMemcpyDeviceToHost, h->stream), "copying logits");
        CHECK(cudaStreamSynchronize(h->stream), "running the layers");
        t_done = h->times ? now_s() : 0;
    } else if (d->has_head) {
        for (int r0 = 0; r0 < n_out; r0 += (int)h->hlogits_rows) { // through pinned memory, a chunk of rows at a time
            const int rn = n_out - r0 < (int)h->hlogits_rows ? n_out - r0 : (int)h->hlogits_rows;
            const size_t bytes = (size_t)rn * d->n_vocab * 4;
            CHECK(cudaMemcpyAsync(h->hlogits, h->logits + (size_t)r0 * d->n_vocab, bytes, cudaMemcpyDeviceToHost, h->stream), "copying logits");
            CHECK(cudaStreamSynchronize(h->stream), "running the layers");
            const double tc = h->times ? now_s() : 0;
            if (!t_done) t_done = tc;
            memcpy(logits_host + (size_t)r0 * d->n_vocab, h->hlogits, bytes);
            if (h->times) copy_s += now_s() - tc;
        }
    } else {
        CHECK(cudaMemcpyAsync(h->hx, h->x, (size_t)n * D * 4, cudaMemcpyDeviceToHost, h->stream), "copying hidden states back");
        CHECK(cudaStreamSynchronize(h->stream), "running the layers");
        memcpy(x_host, h->hx, (size_t)n * D * 4);
    }
    CHECK(cudaStreamSynchronize(h->stream), "running the layers");
    if (profiled) CHECK(cudaProfilerStop(), "ending the profiler's range");
    if (fused && *h->hflag) {
        h->fused_ok = 0;
        snprintf(err, err_len, "the fused decode kernel's grid barrier timed out (its blocks were not all resident); PLUMB_CUDA_FUSED=0 turns it off");
        return -1;
    }
    if (picks) memcpy(b->argmax, h->hids, (size_t)n_out * 4);
    if (checking) compare_logits(h, h->check_logits, logits_host, n_out);
    if (h->kprof) kprof_collect(h, n_out == n ? n : -n);
    if (h->times) {
        handle::step_time *t = &h->times[(one_each ? nb + 1 : 0) + n]; // decode steps apart from prompt chunks
        float ms = 0;
        cudaEventElapsedTime(&ms, h->ev0, h->ev1);
        if (!t_done) t_done = now_s();
        t->steps++;
        t->stage += t_launched - t_start;
        t->gpu += ms * 1e-3;
        t->wait += t_done - t_launched;
        t->copy += copy_s;
        const int key = n_out == n ? n : -n; /* decode steps (every token wants logits) apart from prompt chunks */
        if (h->last_n == key && h->last_end > 0 && n_out == n) {
            t->host += t_start - h->last_end;
            t->follow++;
        }
        h->last_n = key;
        h->last_end = now_s();
    }
    return 0;
fail:
    return -1;
}

// A greedy chain (see plumb_backend_chain): step s is enqueued before the
// host waits for step s - 1. Each step is one graph, the layers and then
// k_pick_next, which feeds the step's picks to the next step on the device
// (tokens embedded, positions advanced) and writes them to mapped host
// memory, so the GPU runs the steps back to back. The block table covers
// the whole chain, so nothing else changes from step to step.
static int decode_chain(void *hv, const plumb_backend_chain *c, char *err, size_t err_len) {
    handle *h = (handle *)hv;
    const plumb_backend_model_desc *d = &h->desc;
    const int n = c->n, D = d->n_embd, nb = d->max_batch;
    int delivered = 0, failed = 0, stopped = 0;
    /* (a chain's steps take a token of each of n sequences) */
    const int chain_mode = STEP_CHAIN | (n <= nb ? mma_rope_mode(h, n, distinct(c->seq, n)) : 0);
    int got[64], *ids = n <= 64 ? got : (int *)malloc((size_t)n * 4);
    const double t0 = now_s();
    if (!h->embd) {
        snprintf(err, err_len, "%s", h->chain_why);
        if (ids != got) free(ids);
        return -2;
    }
    if (!ids) { snprintf(err, err_len, "out of host memory"); return -1; }
    if (n < 1 || n > nb) { snprintf(err, err_len, "a chain of %d sequences (the plugin takes 1 to %d)", n, nb); goto fail; }
    if (c->max_blocks_per_seq > d->n_kv_blocks) {
        snprintf(err, err_len, "block table wider than the plugin's (%d > %d)", c->max_blocks_per_seq, d->n_kv_blocks);
        goto fail;
    }
    {
        int *hp = h->hmeta;
        memcpy(hp, c->pos, (size_t)n * 4);
        memcpy(hp + nb, c->seq, (size_t)n * 4);
        for (int t = 0; t < n; t++) hp[2 * nb + t] = t;
        const size_t table_ints = (size_t)d->n_seq_max * c->max_blocks_per_seq;
        memcpy(hp + 3 * nb, c->block_table, table_ints * 4);
        memcpy(h->hchain_in, c->tokens, (size_t)n * 4);
        memcpy(h->hchain_in + nb, c->pos, (size_t)n * 4);
        CHECK(cudaMemcpyAsync(h->meta, hp, (3 * nb + table_ints) * 4, cudaMemcpyHostToDevice, h->stream), "copying positions and block tables");
        CHECK(cudaMemcpyAsync(h->chain_in, h->hchain_in, (size_t)2 * nb * 4, cudaMemcpyHostToDevice, h->stream), "copying tokens");
        const rope_args ra = {d->n_rot / 2, d->rope_freq_base, h->cs, h->sn};
        k_embed_tokens<<<n, 1024, 0, h->stream>>>(h->embd, h->embd_type, h->embd_row_bytes, D, h->chain_in, h->x, h->meta, ra);
        CHECK(cudaGetLastError(), "launching the token embeddings");
    }
    for (int s = 0; s <= c->n_steps && !stopped; s++) {
        if (s < c->n_steps) { // enqueue step s
            cudaGraphExec_t exec = graph_for(h, n, n, c->max_blocks_per_seq, chain_mode, err, err_len, &failed);
            if (failed) goto fail;
            if (exec) CHECK(cudaGraphLaunch(exec, h->stream), "launching the step");
            else if (run_layers(h, n, n, c->max_blocks_per_seq, chain_mode, err, err_len)) goto fail;
            CHECK(cudaEventRecord(h->chain_ev[s % CHAIN_SLOTS], h->stream), "recording a step");
        }
        if (s > 0) { // step s - 1's picks, while step s runs
            const int slot = (s - 1) % CHAIN_SLOTS;
            CHECK(cudaEventSynchronize(h->chain_ev[slot]), "running a chained step");
            const volatile int *picks = h->hchain + (size_t)slot * nb;
            for (int t = 0; t < n; t++) ids[t] = picks[t];
            delivered = s;
            stopped = c->on_step(c->user, s - 1, ids) != 0;
        }
    }
    CHECK(cudaStreamSynchronize(h->stream), "running the chain");
    if (h->times) {
        h->chain_steps += delivered;
        h->chain_s += now_s() - t0;
    }
    if (ids != got) free(ids);
    return delivered;
fail:
    cudaStreamSynchronize(h->stream);
    cudaGetLastError();
    if (ids != got) free(ids);
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
    cudaGetLastError();
    return best;
}

static void *host_alloc(size_t bytes) {
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 16) == cudaSuccess ? p : NULL;
}
static void host_free(void *p) {
    if (p) cudaFreeHost(p);
}

static const plumb_backend_iface iface = {PLUMB_BACKEND_ABI, "cuda", dev_info, load, unload, forward, peak_bytes, copy_bandwidth, host_alloc, host_free, decode_chain};

extern "C" const plumb_backend_iface *plumb_cuda_backend_entry(void) { return &iface; }
