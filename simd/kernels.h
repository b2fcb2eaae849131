/* kernels.h — the compute kernels plumb's forward pass runs on, and the
 * run-time choice between their scalar, AVX2 and NEON implementations.
 *
 * Every fast kernel has a scalar twin in scalar.c that defines the answer;
 * tests/test_kernels.c compares them on random data of awkward sizes. */
#ifndef PLUMB_KERNELS_H
#define PLUMB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../quant/quant.h"

#define PLUMB_MAX_MIRRORS 8 /* --numa mirror: weight copies at most (one per NUMA node) */

/* A 2-D view of a GGUF tensor: rows of `cols` elements, each row_bytes long. */
typedef struct {
    uint32_t type;
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
    const char *name;
    const void *packed; /* 8-row repacked copy (rows % 8 == 0), or NULL */
    /* --numa mirror: copies of `packed`, one per NUMA node (mirror[0] is
     * packed itself); a thread reads mirror[its copy index] */
    int n_mirror;
    const void *mirror[PLUMB_MAX_MIRRORS];
} plumb_matrix;

typedef float (*plumb_dot_fn)(int n, const void *w_row, const void *act);
/* eight rows of a repacked group (quant/repack.c) at once: out[0..8) */
typedef void (*plumb_dot8_fn)(int n, const void *w_group, const void *act, float *out);
/* the same for four tokens at once: out[t][0..8) from act[t], t < 4 */
typedef void (*plumb_gemm8_fn)(int n, const void *w_group, const void *const *act, float *const *out);
/* one plain row x four tokens' activations: out[0..4) */
typedef void (*plumb_dot4t_fn)(int n, const void *w_row, const void *const *act, float *out);
/* two groups (16 rows) x four tokens: out[t][0..16) */
typedef void (*plumb_gemm16_fn)(int n, const void *w_group0, const void *w_group1, const void *const *act, float *const *out);

typedef void (*plumb_attend_fn)(int hd, int len, const float *q, const float *const *k, const float *const *v, float scale, float *att,
                                float *out);

typedef struct {
    const char *name;
    /* plain float dot product */
    float (*dot_f32)(int n, const float *a, const float *b);
    /* one query head against len cached positions: out[0..hd) = sum over p
     * of softmax_p(scale * q . k[p]) * v[p]; att is len floats of scratch */
    plumb_attend_fn attend;
    /* g query heads of one KV group at once: q, out g x hd, att g x len;
     * attend's results bit for bit (NULL: the caller loops attend) */
    void (*attend_group)(int hd, int len, int g, const float *q, const float *const *k, const float *const *v, float scale, float *att,
                         float *out);
    /* weight row (by plumb_type) x activations in the type's activation form;
     * NULL entries are types this table does not run */
    plumb_dot_fn dot[PLUMB_TYPE_COUNT];
    /* kernels over 8-row repacked groups; NULL where the table has none */
    plumb_dot8_fn dot8[PLUMB_TYPE_COUNT];
    /* runs of weights a thread reads at once through dot8 (slices of each in
     * turn, matmul.c), where more than one was measured faster; 0: one.
     * Only on CPUs measured to gain from it (matmul.c: cpu_reads_two_runs) */
    uint8_t dot8_runs[PLUMB_TYPE_COUNT];
    /* 256-bit twins of dot8 in a table whose dot8 are 512-bit (AVX-512: the
     * EVEX vpdpbusd), for CPUs that stream some types faster through them
     * (matmul.c: cpu_dot8_256); NULL elsewhere */
    plumb_dot8_fn dot8_256[PLUMB_TYPE_COUNT];
    plumb_gemm8_fn gemm8[PLUMB_TYPE_COUNT]; /* may be NULL where dot8 is not */
    plumb_gemm16_fn gemm16[PLUMB_TYPE_COUNT]; /* AVX-512 only */
    plumb_dot4t_fn dot4t[PLUMB_TYPE_COUNT];   /* row-at-a-time types with a four-token kernel */
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n); /* with F16C where present */
    void (*quantize_q8a)(const float *x, block_q8a *y, int64_t n);
    void (*quantize_q8K)(const float *x, block_q8_K *y, int64_t n);
    /* the feed-forward's gate: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) */
    void (*silu_mul)(int64_t n, const float *gate, const float *up, float *out);
    /* Compute ceilings for bench (prefill is compute bound): `rounds` rounds
     * of the table's int8 multiply-add (what its integer kernels are made of)
     * or of its f32 fused multiply-add, on independent register accumulators,
     * nothing read from memory; each returns the multiply-adds it did. NULL
     * where the table has no such instruction sequence (scalar). */
    int64_t (*int8_peak)(int64_t rounds);
    int64_t (*f32_peak)(int64_t rounds);
} plumb_kernels;

/* Whether the one-token 8-row kernels (dot8) of Q8_0, Q4_0, Q4_1, Q4_K, Q5_K
 * and Q6_K prefetch their weights in software (1) or leave it to the hardware
 * prefetchers (0): set by the CPU when the kernels are chosen (matmul.c),
 * PLUMB_WEIGHT_PREFETCH=0|1 overrides it at each product. The kernels read
 * it once per call. */
extern int plumb_weight_prefetch;

/* scalar silu_mul (the reference; the NEON tables use it too) */
void plumb_silu_mul_ref(int64_t n, const float *gate, const float *up, float *out);

const plumb_kernels *plumb_kernels_scalar(void);
const plumb_kernels *plumb_kernels_avx2(void);  /* NULL when not compiled in */
const plumb_kernels *plumb_kernels_avx2_vnni(void); /* AVX2 + AVX-VNNI */
const plumb_kernels *plumb_kernels_avx512_vnni(void); /* + AVX-512 VNNI 16-row kernels */
const plumb_kernels *plumb_kernels_neon(void);  /* NULL when not compiled in */
const plumb_kernels *plumb_kernels_neon_dotprod(void); /* NEON + ARMv8.2 sdot (NULL when not compiled in) */

/* The table the forward pass uses: the best one this CPU supports, unless
 * PLUMB_SIMD=scalar|avx2|avx2-vnni|avx512-vnni|neon|neon-dotprod names another (an unsupported name is refused). */
const plumb_kernels *plumb_kernels_active(void);
int plumb_kernels_select(const char *name); /* 0 ok, -1 with error */
const char *plumb_cpu_features(void);      /* "avx2 fma f16c" etc. */

/* Bytes of activation scratch plumb_matmul needs for n_tok rows of cols. */
size_t plumb_matmul_act_bytes(uint32_t weight_type, int64_t cols, int n_tok);

/* y[t][r] = dot(W row r, x[t]) for t < n_tok, r < W->rows.
 *   x: [n_tok][W->cols] floats, y: [n_tok][W->rows].
 * exact != 0 dequantizes weight rows to f32 (the reference arithmetic);
 * otherwise activations are quantized once (act_buf) and integer kernels run.
 * Runs on the calling OpenMP team if inside a parallel region, else opens one. */
void plumb_matmul(const plumb_matrix *W, const float *x, int n_tok, float *y, void *act_buf, int exact);

/* Gives W an 8-row repacked copy when the active kernels have a kernel for
 * it (allocated, accounted; free with plumb_dealloc(W->packed)). Returns 0
 * also when nothing was done. */
int plumb_matrix_repack(plumb_matrix *W);

/* After plumb_matrix_repack, when W->data is a read-only mapping of a file:
 * gives the original's pages back (the fast path reads only the copy; the
 * exact path can still fault them in from the file), so the process holds
 * the weights once, not twice. Never for memory the caller allocated: there
 * MADV_DONTNEED would discard the data. */
void plumb_matrix_release_source(const plumb_matrix *W);

/* --numa mirror: gives W's repacked copy `copies` copies in all, copy i
 * handed to bind(ctx, addr, len, i) before it is written (bind may be NULL);
 * freed with plumb_matrix_free_mirrors. 0, or -1 out of memory. */
int plumb_matrix_mirror(plumb_matrix *W, int copies, int (*bind)(void *ctx, void *addr, size_t len, int copy), void *ctx);
void plumb_matrix_free_mirrors(plumb_matrix *W);
/* Which copy the calling thread reads (set once per OpenMP thread). */
void plumb_matmul_set_thread_copy(int copy);
/* single-token row loops: work stealing between threads (1, the default) or the static split (0) */
void plumb_matmul_set_row_steal(int on);

/* Several matrices applied to the same input (q/k/v, gate/up): y[i] = x W[i]^T.
 * For a single token over repacked weights this is one parallel loop over
 * all their row groups (one barrier instead of one per matrix) with the
 * activations quantized once; otherwise it is plumb_matmul per matrix. */
void plumb_matmul_n(const plumb_matrix *const *W, int nw, const float *x, int n_tok, float *const *y, void *act_buf, int exact);

/* The feed-forward's SwiGLU: out[t][i] = silu(x[t] . gate[i]) * (x[t] . up[i]),
 * out and scratch [n_tok][gate->rows] (scratch holds up's products where the
 * two are not computed side by side: several tokens, exact, unpacked). */
void plumb_matmul_swiglu(const plumb_matrix *gate, const plumb_matrix *up, const float *x, int n_tok, float *out, float *scratch, void *act_buf,
                         int exact);

/* Work every thread does its even share of before a parallel loop's items
 * (a token's activations quantized by all threads, not by one): fn over
 * [first, first + count) of [0, n). */
typedef struct {
    void (*fn)(int64_t first, int64_t count, void *ctx);
    int64_t n;
    void *ctx;
} plumb_prologue;

/* A team runs a whole single-token step in one OpenMP parallel region:
 * every thread of the region calls the plumb_team_* functions in the same
 * order, with its thread number `me`, and they meet at spin barriers
 * instead of forking and joining a region per product. */
typedef struct plumb_team plumb_team;
plumb_team *plumb_team_new(int n_threads); /* NULL when out of memory */
void plumb_team_free(plumb_team *tm);
int plumb_team_size(const plumb_team *tm);
void plumb_team_barrier(plumb_team *tm);
/* whether W runs on the team's kernels (repacked, 8-row integer kernel) */
int plumb_team_can_run(const plumb_matrix *W);
/* y[i] = W[i] x for one token, the activations already quantized in act by
 * pre (the team's shares of it; may be NULL); barriers before and after the
 * items. W all of one type and width, nw <= 4. */
void plumb_team_matmul_n(plumb_team *tm, int me, const plumb_matrix *const *W, int nw, const void *act, float *const *y, const plumb_prologue *pre);
/* out[i] = silu(gate[i] . x) * (up[i] . x), as plumb_team_matmul_n */
void plumb_team_swiglu(plumb_team *tm, int me, const plumb_matrix *gate, const plumb_matrix *up, const void *act, float *out, const plumb_prologue *pre);
/* The activation form of a row type: its block (32 or 256 values), and n
 * values (whole blocks) quantized into out, as plumb_matmul does it. */
int64_t plumb_act_block(uint32_t weight_type);
void plumb_quantize_act(uint32_t weight_type, const float *x, int64_t n, void *out);

/* Row r of W as floats (for embedding lookup). */
void plumb_matrix_row_f32(const plumb_matrix *W, int64_t r, float *out);

#endif
