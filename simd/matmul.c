/* matmul.c — kernel selection and the matrix-vector / matrix-matrix driver. */
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/util.h"
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static const plumb_kernels *active;
static int cpu_prefetches_weights(void); /* (below, with how weights are streamed) */

static int cpu_has_avx2_fma_f16c(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* AVX-VNNI: CPUID leaf 7 sub-leaf 1, EAX bit 4 (gcc 12's cpu model lacks it). */
static int cpu_has_avxvnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!cpu_has_avx2_fma_f16c() || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 4) & 1;
#else
    return 0;
#endif
}

/* ARMv8.2 dot product (HWCAP_ASIMDDP; Apple Silicon, Graviton 2+, Cortex-A55/A76+) */
static int cpu_has_dotprod(void) {
#if defined(__aarch64__) && defined(__linux__)
    return (getauxval(AT_HWCAP) & (1ul << 20)) != 0;
#elif defined(__aarch64__) && defined(__APPLE__)
    return 1; /* every Apple Silicon core has it */
#else
    return 0;
#endif
}

/* AVX-512 F, BW, VL and VNNI: the AVX-512 table (its 256-bit kernels use the
 * EVEX vpdpbusd, so Zen 4, Ice Lake and Cascade Lake, which lack AVX-VNNI,
 * get it too) */
static int cpu_has_avx512vnni(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

const char *plumb_cpu_features(void) {
    static char buf[128];
    if (buf[0]) return buf;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    snprintf(buf, sizeof buf, "x86_64%s%s%s%s%s", __builtin_cpu_supports("avx2") ? " avx2" : "",
             __builtin_cpu_supports("fma") ? " fma" : "", __builtin_cpu_supports("f16c") ? " f16c" : "",
             __builtin_cpu_supports("avx512f") ? " avx512f" : "",
             __builtin_cpu_supports("avx512vnni") ? " avx512vnni" : "");
    if (cpu_has_avxvnni()) strncat(buf, " avxvnni", sizeof buf - strlen(buf) - 1);
#elif defined(__aarch64__)
    snprintf(buf, sizeof buf, "aarch64 neon%s", cpu_has_dotprod() ? " dotprod" : "");
#else
    snprintf(buf, sizeof buf, "generic");
#endif
    return buf;
}

int plumb_kernels_select(const char *name) {
    const plumb_kernels *k = NULL;
    if (!strcmp(name, "scalar")) k = plumb_kernels_scalar();
    else if (!strcmp(name, "avx2")) k = cpu_has_avx2_fma_f16c() ? plumb_kernels_avx2() : NULL;
    else if (!strcmp(name, "avx2-vnni")) k = cpu_has_avxvnni() ? plumb_kernels_avx2_vnni() : NULL;
    else if (!strcmp(name, "avx512-vnni")) k = cpu_has_avx512vnni() ? plumb_kernels_avx512_vnni() : NULL;
    else if (!strcmp(name, "neon")) k = plumb_kernels_neon();
    else if (!strcmp(name, "neon-dotprod")) k = cpu_has_dotprod() ? plumb_kernels_neon_dotprod() : NULL;
    else return plumb_set_error("unknown kernel set '%s' (scalar, avx2, avx2-vnni, avx512-vnni, neon, neon-dotprod)", name);
    if (!k) return plumb_set_error("kernel set '%s' is not available on this CPU/build", name);
    active = k;
    plumb_weight_prefetch = cpu_prefetches_weights();
    return 0;
}

const plumb_kernels *plumb_kernels_active(void) {
    if (active) return active;
    const char *env = getenv("PLUMB_SIMD");
    if (env && *env && plumb_kernels_select(env) == 0) return active;
    const plumb_kernels *k = NULL;
    if (cpu_has_avx512vnni()) k = plumb_kernels_avx512_vnni();
    if (!k && cpu_has_avxvnni()) k = plumb_kernels_avx2_vnni();
    if (!k && cpu_has_avx2_fma_f16c()) k = plumb_kernels_avx2();
    if (!k && cpu_has_dotprod()) k = plumb_kernels_neon_dotprod();
    if (!k) k = plumb_kernels_neon();
    if (!k) k = plumb_kernels_scalar();
    active = k;
    plumb_weight_prefetch = cpu_prefetches_weights();
    return active;
}

size_t plumb_matmul_act_bytes(uint32_t weight_type, int64_t cols, int n_tok) {
    const plumb_type_traits *t = plumb_type_get(weight_type);
    if (!t) return 0;
    switch (t->act) {
    case PLUMB_ACT_Q8: return (size_t)n_tok * (size_t)(cols / 32) * sizeof(block_q8a);
    case PLUMB_ACT_Q8K: return (size_t)n_tok * (size_t)(cols / QK_K) * sizeof(block_q8_K);
    default: return 0;
    }
}

void plumb_matrix_row_f32(const plumb_matrix *W, int64_t r, float *out) {
    plumb_type_get(W->type)->to_float((const uint8_t *)W->data + (size_t)r * W->row_bytes, out, W->cols);
}

/* Fetches row r+1 while row r is computed (single-token products only:
 * with a batch the row is reused from cache). One stream per core does not
 * reach full memory bandwidth on the hardware prefetcher alone. */
static inline void prefetch_next_row(const plumb_matrix *W, int64_t r, int n_tok) {
    if (n_tok != 1 || r + 1 >= W->rows) return;
    const uint8_t *next = (const uint8_t *)W->data + (size_t)(r + 1) * W->row_bytes;
    for (size_t off = 0; off < W->row_bytes; off += 64) __builtin_prefetch(next + off, 0, 3);
}

/* Float weights at prefill sizes: OpenBLAS sgemm, y = x W^T, on row chunks
 * (F16/BF16 chunks converted to f32 first: at this batch size the product,
 * not the conversion, dominates). */
#define BLAS_MIN_TOKENS 16
#define BLAS_CHUNK_ROWS 256
/* OpenBLAS is loaded on first use, not linked: OpenBLAS picks its kernels
 * when it loads, from the CPU model, and on CPUs it does not recognise
 * (virtual machines report generic models) it falls back to 2004-era SSE3
 * code. Loading it ourselves lets us name the kernel family from the
 * features we detected, unless the user set OPENBLAS_CORETYPE. Without
 * OpenBLAS the row-at-a-time kernels serve. */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
static sgemm_fn blas_sgemm;
static int blas_tried;

static sgemm_fn load_blas(void) {
    if (blas_tried) return blas_sgemm;
#pragma omp critical(plumb_blas_load)
    if (!blas_tried) {
        if (!getenv("OPENBLAS_CORETYPE")) {
#if defined(__x86_64__)
            __builtin_cpu_init();
            if (__builtin_cpu_supports("avx512f")) setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
            else if (__builtin_cpu_supports("avx2")) setenv("OPENBLAS_CORETYPE", "Haswell", 0);
#endif
        }
        void *h = getenv("PLUMB_NO_BLAS") ? NULL : dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (h) blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
        blas_tried = 1;
    }
    return blas_sgemm;
}

static void blas_matmul(const plumb_matrix *W, const float *x, int n_tok, float *y) {
    const plumb_type_traits *tt = plumb_type_get(W->type);
    const int64_t rows = W->rows, cols = W->cols;
    if (W->type == PLUMB_TYPE_F32) {
        blas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, n_tok, (int)rows, (int)cols, 1.0f, x, (int)cols, W->data, (int)cols, 0.0f, y, (int)rows);
        return;
    }
    float *chunk = malloc(sizeof(float) * (size_t)BLAS_CHUNK_ROWS * (size_t)cols);
    if (!chunk) { /* no memory for the chunk: the row-at-a-time path still works */
        const plumb_kernels *k = plumb_kernels_active();
        for (int64_t r = 0; r < rows; r++)
            for (int t = 0; t < n_tok; t++)
                y[(size_t)t * rows + r] = k->dot[W->type]((int)cols, (const uint8_t *)W->data + (size_t)r * W->row_bytes, x + (size_t)t * cols);
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += BLAS_CHUNK_ROWS) {
        const int nr = (int)(rows - r0 < BLAS_CHUNK_ROWS ? rows - r0 : BLAS_CHUNK_ROWS);
        const plumb_kernels *k = plumb_kernels_active();
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nr; r++) {
            const uint8_t *src = (const uint8_t *)W->data + (size_t)(r0 + r) * W->row_bytes;
            if (W->type == PLUMB_TYPE_F16) k->f16_to_f32((const uint16_t *)src, chunk + (size_t)r * cols, cols);
            else tt->to_float(src, chunk + (size_t)r * cols, cols);
        }
        blas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, n_tok, nr, (int)cols, 1.0f, x, (int)cols, chunk, (int)cols, 0.0f, y + r0, (int)rows);
    }
    free(chunk);
}

/* --numa mirror: each OpenMP thread reads the copy of its NUMA node. The
 * pool's threads persist, so a thread-local index set once holds. */
static __thread int thread_copy;
void plumb_matmul_set_thread_copy(int copy) { thread_copy = copy; }

static inline const uint8_t *packed_for_thread(const plumb_matrix *W) {
    return (const uint8_t *)(W->n_mirror > 1 && thread_copy < W->n_mirror ? W->mirror[thread_copy] : W->packed);
}

/* Single-token row loops with work stealing. A decode step is ~100 parallel
 * loops of 50-500 us each; with a static split, whichever thread its core's
 * neighbours slow down (a shared host) finishes last and the other waits in
 * the barrier. Here each thread still streams its own contiguous share of
 * the items from the front (so the hardware prefetchers see one long run),
 * and a thread that runs out takes chunks from the back of another's share.
 * A share is one 64-bit word, next item in the low half and end in the high
 * half, changed by compare-and-swap: owner and thief never take the same
 * chunk. PLUMB_ROW_STEAL=0 gives the static split back (measurements). */
typedef struct {
    _Alignas(64) uint64_t span; /* next | end << 32 */
} share;

/* PLUMB_ROW_STEAL=0 and PLUMB_STEAL_TAPER=0 (both on unless 0), read from
 * the environment once, by whichever thread gets there first (they were read
 * lazily by every thread that found them unset, a data race). Unlike the
 * one-token products' switches below, they are not meant for bench-ab. */
static pthread_once_t steal_switches_once = PTHREAD_ONCE_INIT;
static int sw_steal, sw_taper;
static void read_steal_switches(void) {
    const char *st = getenv("PLUMB_ROW_STEAL"), *tp = getenv("PLUMB_STEAL_TAPER");
    sw_steal = !(st && !strcmp(st, "0"));
    sw_taper = !(tp && !strcmp(tp, "0"));
}
void plumb_matmul_set_row_steal(int on) {
    pthread_once(&steal_switches_once, read_steal_switches);
    sw_steal = on != 0;
}
static int steal_enabled(void) {
    pthread_once(&steal_switches_once, read_steal_switches);
    return sw_steal;
}

/* Takes up to chunk items from the front (own share) or the back (another's),
 * and no more than a quarter of what is left (at least one): the last
 * chunks of a share get short, so the thread that finishes first waits for
 * the other's last one item or two, not for a sixteenth of its share
 * (PLUMB_STEAL_TAPER=0: chunk items to the end, for comparisons). First
 * item, or -1 when empty. */
static int64_t take(share *s, int64_t chunk, int from_back, int64_t *count) {
    uint64_t cur = __atomic_load_n(&s->span, __ATOMIC_RELAXED);
    for (;;) {
        const uint64_t next = cur & 0xFFFFFFFFu, end = cur >> 32;
        if (next >= end) return -1;
        uint64_t n = end - next < (uint64_t)chunk ? end - next : (uint64_t)chunk;
        if (sw_taper && n > (end - next + 3) / 4) n = (end - next + 3) / 4;
        const uint64_t want = from_back ? next | (end - n) << 32 : (next + n) | end << 32;
        if (__atomic_compare_exchange_n(&s->span, &cur, want, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *count = (int64_t)n;
            return (int64_t)(from_back ? end - n : next);
        }
    }
}

/* body(first, count, ctx) over items [0, n) in a parallel region of its own.
 * With pre, every thread first takes an even share of pre's items and all
 * wait for all of them (a token's activations quantized by both threads, not
 * by one while the other waits for the region). */
typedef plumb_prologue prologue;

static void run_share(const prologue *pre, int me, int nt) {
    const int64_t lo = pre->n * me / nt, hi = pre->n * (me + 1) / nt;
    if (hi > lo) pre->fn(lo, hi - lo, pre->ctx);
}

/* a share's chunk: a sixteenth of it, at least one item */
static int64_t share_chunk(int64_t n, int me, int nt) {
    const int64_t lo = n * me / nt, hi = n * (me + 1) / nt;
    return (hi - lo) / 16 > 1 ? (hi - lo) / 16 : 1;
}

static void set_share(share *shares, int64_t n, int me, int nt) {
    __atomic_store_n(&shares[me].span, (uint64_t)(n * me / nt) | (uint64_t)(n * (me + 1) / nt) << 32, __ATOMIC_RELAXED);
}

/* own share from the front, then the others' leftovers from their ends */
static void steal_loop(share *shares, int64_t n, int me, int nt, void (*body)(int64_t first, int64_t count, void *ctx), void *ctx) {
    pthread_once(&steal_switches_once, read_steal_switches); /* (sw_taper, for take) */
    const int64_t chunk = share_chunk(n, me, nt);
    int64_t first, count;
    while ((first = take(&shares[me], chunk, 0, &count)) >= 0) body(first, count, ctx);
    for (int k = 1; k < nt; k++)
        while ((first = take(&shares[(me + k) % nt], chunk, 1, &count)) >= 0) body(first, count, ctx);
}

static int steal_worthwhile(int64_t n, int nt) { return nt > 1 && n >= 2 * nt && n <= 0xFFFFFFFFLL && steal_enabled(); }

static void for_items(int64_t n, void (*body)(int64_t first, int64_t count, void *ctx), void *ctx, const prologue *pre) {
    const int T = omp_get_max_threads();
    if (!steal_worthwhile(n, T)) { /* each thread its contiguous share, in one call (the body may read it as two runs) */
#pragma omp parallel
        {
            const int me = omp_get_thread_num(), nt = omp_get_num_threads();
            if (pre) {
                run_share(pre, me, nt);
#pragma omp barrier
            }
            if (n * (me + 1) / nt > n * me / nt) body(n * me / nt, n * (me + 1) / nt - n * me / nt, ctx);
        }
        return;
    }
    share shares[T];
#pragma omp parallel num_threads(T)
    {
        const int me = omp_get_thread_num(), nt = omp_get_num_threads();
        set_share(shares, n, me, nt);
        if (pre) run_share(pre, me, nt);
#pragma omp barrier
        steal_loop(shares, n, me, nt, body, ctx);
    }
}

/* ---- weights read as two runs at once ----
 * One thread streaming one run of weights through an 8-row kernel reads it
 * slower than the same thread reading two runs far apart, 4 KiB of each in
 * turn. A throwaway program over 1.2 GB of Q8_0 groups (one thread on the
 * 2-core EPYC development machine, the variants alternating pass by pass;
 * bench/results/s21-cpu/throwaway): one run 29.0 GB/s, two runs in 4 KiB
 * slices 33.7, two runs a whole 17 KiB group of each in turn 30.3 (earlier
 * runs: 26.0-26.9, 29.4-30.7, 26.9-27.4). In decode (bench-ab,
 * alternating token by token, the AVX-512 kernels) two runs took Q8_0 /
 * Q4_0 / Q4_1 steps 0.82 / 0.90 / 0.89 of the time at one thread and 0.92 /
 * 0.97 / 0.96 at two (later, on a busier host, Q8_0 0.91 and Q4_0 0.94 at
 * one); three or four runs were slower than two (Q8_0 1.11 and 1.13 at one
 * thread), 2 and 8 KiB slices slower than 4 (1.03, 1.05). The K-quant
 * kernels, whose arithmetic is near the read bandwidth at one thread, did
 * not gain (three times each, at one and two threads: Q4_K 0.96-0.98 and
 * 1.03-1.05, Q5_K 1.02-1.07 and 1.09; Q6_K 0.98-1.36), nor did the AVX2
 * kernels on that machine (Q4_0 1.07, Q4_K 1.04, Q6_K 1.23 at one thread):
 * there the slices' extra calls cost more than the reads gain. So each
 * kernel table says which types read two runs (plumb_kernels.dot8_runs).
 * A thread walks the two halves of its groups side by side, slice by
 * slice, and the feed-forward takes gate's and up's slices in turn. A
 * slice's sums are added to the row's after the kernel, so the float
 * additions are in another order than one pass over the row (rounding; the
 * kernel tests bound it). PLUMB_WEIGHT_RUNS=1..4 sets the runs for every
 * type, for comparisons (read at each product: bench-ab switches it). */
enum { SLICE_BYTES = 4096, MAX_RUNS = 4 };

typedef struct {
    int runs;                /* runs read at once (1: one pass a group) */
    int block_elems;         /* elements in a block */
    int64_t blocks;          /* blocks in a row */
    int64_t slice;           /* blocks in a slice */
    size_t w_bytes, a_bytes; /* a block's bytes in a group of 8 rows, in the activations */
} slicing;

/* How a thread streams weights through the one-token kernels depends on
 * the CPU, and is fixed by it (not timed at load: the runs change the order
 * of a row's float additions, and one machine should give the same logits
 * every run). Measured with bench-ab, decode token by token in one process:
 *
 * Two runs (where a table's dot8_runs asks for them) on AMD Zen 5 (family
 * 0x1A), above. On Zen 4 (family 0x19, the development host of 2026-12-06)
 * with software prefetch, two runs were slower: AVX-512 kernels, two runs /
 * one run, twice each, Q4_0 1.043 / 1.041 at one thread and 1.079 / 1.070
 * at two, Q8_0 1.131 / 1.096 and 1.059 / 1.060. Without it (below), and
 * with Q6_K's groups in reading order, two runs are faster at one thread
 * for every type and slower at two: Q4_0 0.922 / 0.927 and 1.106, Q8_0
 * 0.931 / 0.944 and 1.054, Q4_1 0.939 and 1.025, Q4_K 0.939 and 1.040, Q5_K
 * 0.938 / 0.943 and 1.059, Q6_K 0.950 / 0.932 and 1.040 (four runs against
 * two at one thread: Q4_0 1.039, Q4_K 1.041). So Zen 4 reads two runs when
 * a product runs on one thread, every type of the AVX-512 table. Other CPUs
 * are unmeasured and read one run, as every kernel did before.
 *
 * Software prefetch of the weights (plumb_weight_prefetch) off on Zen 4
 * (family 0x19 with AVX-512):
 * there the hardware prefetchers alone were faster, one run, AVX-512
 * kernels, without / with: Q4_0 0.882 / 0.884 at one thread and 0.973 /
 * 0.877 at two, Q8_0 0.869 / 0.844 and 0.963 / 0.967, Q4_1 0.889 and 0.974,
 * Q4_K 0.878 and 0.907, Q5_K 0.897 and 0.885; Q6_K, since its groups keep
 * their quants in the order the kernel reads them (quant/repack.c),
 * 0.86-1.08 (median 0.89 of seven) at one thread and 0.86-0.99 at two
 * (before that reorder it was 1.70 and 1.46 slower without, and kept its
 * prefetch); a plain read loop
 * there is fastest as one run without prefetch. On Zen 5 it stays on (Q8_0
 * without it 0.96-1.07 at one thread, 0.95-1.03 at two: no clear gain), and
 * on unmeasured CPUs, as before. (bench/results/s22-cpu) */
int plumb_weight_prefetch = 1;

static unsigned amd_family(void) {
#if defined(__x86_64__) || defined(__i386__)
    static unsigned family = ~0u;
    if (family != ~0u) return family;
    unsigned a, b, c, d;
    char vendor[13] = {0};
    family = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return family;
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    if (strcmp(vendor, "AuthenticAMD") || !__get_cpuid(1, &a, &b, &c, &d)) return family;
    family = ((a >> 8) & 0xF) == 0xF ? 0xF + ((a >> 20) & 0xFF) : (a >> 8) & 0xF;
    return family;
#else
    return 0;
#endif
}

/* Zen 4: family 0x19 with AVX-512 (Zen 3, the same family, has none and is unmeasured) */
static int cpu_is_zen4(void) {
#if defined(__x86_64__) || defined(__i386__)
    return amd_family() == 0x19 && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* The one-token 8-row kernel: the table's dot8, or its 256-bit twin
 * (dot8_256) where this CPU streams the type faster through it. Zen 4 runs
 * 512-bit operations as two 256-bit halves; streamed from memory (a
 * throwaway loop over 220 MB of repacked groups, one thread, alternating
 * kernels, bench/results/s22-cpu) Q6_K read 19.5-20.2 GB/s through the
 * 512-bit kernel and 26.3-28.2 through the 256-bit one, while Q4_K (28 /
 * 29) and Q5_K (26 / 25) read alike, as did Q4_0 in decode (bench-ab
 * 0.997). PLUMB_DOT8_WIDTH=256|512 picks for every type with a twin, at
 * each product, for comparisons. */
static plumb_dot8_fn one_token_kernel(const plumb_kernels *k, uint32_t type) {
    const char *e = getenv("PLUMB_DOT8_WIDTH");
    int narrow = cpu_is_zen4() && type == PLUMB_TYPE_Q6_K;
    if (e && (!strcmp(e, "256") || !strcmp(e, "512"))) narrow = !strcmp(e, "256");
    return narrow && k->dot8_256[type] ? k->dot8_256[type] : k->dot8[type];
}
static int cpu_prefetches_weights(void) { return !cpu_is_zen4(); }

/* runs a thread reads at once (0 or 1: one) of TYPE through table K, when THREADS run the product */
static int weight_runs(const plumb_kernels *k, uint32_t type, int threads) {
    if (amd_family() >= 0x1A) return k->dot8_runs[type];
    if (cpu_is_zen4() && threads == 1 && k == plumb_kernels_avx512_vnni()) return 2;
    return 0;
}

static slicing slicing_for(const plumb_kernels *k, const plumb_matrix *W, int threads) {
    const plumb_type_traits *t = plumb_type_get(W->type);
    const char *e = getenv("PLUMB_WEIGHT_RUNS"), *pf = getenv("PLUMB_WEIGHT_PREFETCH");
    plumb_weight_prefetch = pf && (!strcmp(pf, "0") || !strcmp(pf, "1")) ? pf[0] == '1' : cpu_prefetches_weights();
    const int runs = weight_runs(k, W->type, threads);
    slicing s = {.runs = runs ? runs : 1, .block_elems = t->block_size, .w_bytes = 8 * t->type_size};
    if (e && atoi(e) >= 1 && atoi(e) <= MAX_RUNS) s.runs = atoi(e);
    if (s.runs > MAX_RUNS) s.runs = MAX_RUNS;
    s.blocks = W->cols / t->block_size;
    s.a_bytes = plumb_matmul_act_bytes(W->type, t->block_size, 1);
    s.slice = SLICE_BYTES / (int64_t)s.w_bytes > 1 ? SLICE_BYTES / (int64_t)s.w_bytes : 1;
    return s;
}

/* y[i] = group w[i] x act for i < runs, a slice of each in turn */
static void dot8_runs(plumb_dot8_fn dot8, const slicing *s, int runs, const uint8_t *const *w, const uint8_t *act, float *const *y) {
    float part[8];
    for (int64_t b = 0; b < s->blocks; b += s->slice) {
        const int n = (int)((s->blocks - b < s->slice ? s->blocks - b : s->slice) * s->block_elems);
        const uint8_t *a = act + (size_t)b * s->a_bytes;
        for (int i = 0; i < runs; i++) {
            dot8(n, w[i] + (size_t)b * s->w_bytes, a, b ? part : y[i]);
            if (b)
                for (int r = 0; r < 8; r++) y[i][r] += part[r];
        }
    }
}

/* the three single-token loops over 8-row groups of repacked weights */
typedef struct {
    plumb_dot8_fn dot8;
    const plumb_matrix *const *W; /* up to 4 matrices of the same type and width, their groups one after another */
    int64_t first[5];             /* first group of each matrix */
    const void *act;
    float *const *y;
    slicing s;
} dot8_job;

/* group g of the job's matrices: its weights and its 8 outputs */
static const uint8_t *job_group(const dot8_job *j, int64_t g, float **y) {
    int i = 0;
    while (g >= j->first[i + 1]) i++;
    const int64_t gi = g - j->first[i];
    *y = j->y[i] + 8 * gi;
    return packed_for_thread(j->W[i]) + (size_t)gi * 8 * j->W[i]->row_bytes;
}

static void dot8_items(int64_t first, int64_t count, void *ctx) {
    const dot8_job *j = ctx;
    const int runs = j->s.runs;
    const int64_t part = runs > 1 ? count / runs : 0; /* groups a run */
    const uint8_t *w[MAX_RUNS];
    float *y[MAX_RUNS];
    for (int64_t g = first; g < first + part; g++) {
        for (int i = 0; i < runs; i++) w[i] = job_group(j, g + i * part, &y[i]);
        dot8_runs(j->dot8, &j->s, runs, w, j->act, y);
    }
    for (int64_t g = first + runs * part; g < first + count; g++) {
        w[0] = job_group(j, g, &y[0]);
        j->dot8((int)j->s.blocks * j->s.block_elems, w[0], j->act, y[0]);
    }
}

static void dot8_job_init(dot8_job *j, const plumb_kernels *k, const plumb_matrix *const *W, int nw, const void *act, float *const *y, int threads) {
    *j = (dot8_job){.dot8 = one_token_kernel(k, W[0]->type), .W = W, .act = act, .y = y, .s = slicing_for(k, W[0], threads)};
    for (int i = 0; i < nw; i++) j->first[i + 1] = j->first[i] + W[i]->rows / 8;
}

/* pre (or NULL): the activations' quantization, done in the same region */
static void dot8_groups(const plumb_kernels *k, const plumb_matrix *const *W, int nw, const void *act, float *const *y, const prologue *pre) {
    dot8_job j;
    dot8_job_init(&j, k, W, nw, act, y, omp_get_max_threads());
    for_items(j.first[nw], dot8_items, &j, pre);
}

int plumb_matrix_mirror(plumb_matrix *W, int copies, int (*bind)(void *ctx, void *addr, size_t len, int copy), void *ctx) {
    if (!W->packed || W->n_mirror || copies < 2) return 0;
    if (copies > PLUMB_MAX_MIRRORS) copies = PLUMB_MAX_MIRRORS;
    const size_t bytes = (size_t)W->rows * W->row_bytes;
    W->mirror[0] = W->packed;
    for (int i = 1; i < copies; i++) {
        uint8_t *p = plumb_alloc(bytes, "mirrored weights");
        if (!p) {
            W->n_mirror = i;
            plumb_matrix_free_mirrors(W);
            return -1;
        }
        if (bind) bind(ctx, p, bytes, i); /* before the first touch */
        memcpy(p, W->packed, bytes);
        W->mirror[i] = p;
    }
    W->n_mirror = copies;
    return 0;
}

void plumb_matrix_free_mirrors(plumb_matrix *W) {
    for (int i = 1; i < W->n_mirror; i++) plumb_dealloc((void *)W->mirror[i]);
    W->n_mirror = 0;
}

/* One token's activations in the form a row type pairs with (block_q8a or
 * block_q8_K), block by block: the blocks are independent, so a for_items
 * prologue can split them over the threads. */
typedef struct {
    const plumb_kernels *k;
    int q8k; /* block_q8_K (K-quant rows), else block_q8a */
    const float *x;
    void *act;
    prologue all; /* every block of the token, as a prologue */
} quant_job;

static void quant_blocks(int64_t first, int64_t count, void *ctx) {
    const quant_job *q = ctx;
    if (q->q8k) q->k->quantize_q8K(q->x + first * QK_K, (block_q8_K *)q->act + first, count * QK_K);
    else q->k->quantize_q8a(q->x + first * 32, (block_q8a *)q->act + first, count * 32);
}

/* fills *q for x (cols values) quantized into act_buf; q->all runs it */
static void quant_job_init(quant_job *q, const plumb_kernels *k, uint32_t type, const float *x, void *act_buf, int64_t cols) {
    q->k = k, q->q8k = plumb_type_get(type)->act == PLUMB_ACT_Q8K, q->x = x, q->act = act_buf;
    q->all = (prologue){quant_blocks, cols / (q->q8k ? QK_K : 32), q};
}

static void quantize_act(const plumb_kernels *k, uint32_t type, const float *x, void *act_buf, int64_t cols) {
    quant_job q;
    quant_job_init(&q, k, type, x, act_buf, cols);
    quant_blocks(0, q.all.n, &q);
}

/* whether W runs one token on the 8-row integer kernels: a repacked copy,
 * a kernel for its type in a SIMD table, and quantized activations */
static int on_dot8(const plumb_kernels *k, const plumb_matrix *W) {
    return W->packed && k != plumb_kernels_scalar() && k->dot8[W->type] && plumb_type_get(W->type)->act != PLUMB_ACT_F32;
}

/* Rows are split into contiguous ranges, one per thread; for each row the
 * weights are read once and applied to every token of the batch, so a
 * prefill batch costs one pass over the weights. */
void plumb_matmul(const plumb_matrix *W, const float *x, int n_tok, float *y, void *act_buf, int exact) {
    const plumb_kernels *k = plumb_kernels_active();
    const plumb_type_traits *tt = plumb_type_get(W->type);
    const int64_t rows = W->rows, cols = W->cols;
    const uint8_t *wd = W->data;
    const int quantized_act = !exact && tt->act != PLUMB_ACT_F32;
    size_t act_row = 0;

    const int dot8_path = !exact && on_dot8(k, W);
    if (quantized_act) act_row = plumb_matmul_act_bytes(W->type, cols, 1);
    if (quantized_act && !(dot8_path && n_tok == 1)) { /* (one token on the 8-row kernels: quantized inside their parallel region) */
#pragma omp parallel for schedule(static) if (n_tok > 1)
        for (int t = 0; t < n_tok; t++) {
            quantize_act(k, W->type, x + (size_t)t * cols, (uint8_t *)act_buf + (size_t)t * act_row, cols);
        }
    }
    if (dot8_path) {
        /* eight rows at a time over the repacked copy */
        const plumb_dot8_fn dot8 = k->dot8[W->type];
        const size_t group_bytes = 8 * W->row_bytes;
        const plumb_gemm8_fn gemm8 = k->gemm8[W->type];
        const plumb_gemm16_fn gemm16 = k->gemm16[W->type];
        if (gemm16 && n_tok >= 4 && (rows / 8) % 2 == 0) {
            /* pairs of groups: 16 rows x 4 tokens per kernel call */
#pragma omp parallel for schedule(static)
            for (int64_t g = 0; g < rows / 8; g += 2) {
                const uint8_t *w0 = packed_for_thread(W) + (size_t)g * group_bytes, *w1 = w0 + group_bytes;
                int t0 = 0;
                for (; t0 + 4 <= n_tok; t0 += 4) {
                    float out[4][16];
                    const void *acts[4];
                    float *outs[4] = {out[0], out[1], out[2], out[3]};
                    for (int t = 0; t < 4; t++) acts[t] = (uint8_t *)act_buf + (size_t)(t0 + t) * act_row;
                    gemm16((int)cols, w0, w1, acts, outs);
                    for (int t = 0; t < 4; t++) memcpy(y + (size_t)(t0 + t) * rows + 8 * g, out[t], sizeof out[t]);
                }
                for (; t0 < n_tok; t0++) {
                    float out[8];
                    for (int h = 0; h < 2; h++) {
                        dot8((int)cols, h ? w1 : w0, (uint8_t *)act_buf + (size_t)t0 * act_row, out);
                        memcpy(y + (size_t)t0 * rows + 8 * (g + h), out, sizeof out);
                    }
                }
            }
            return;
        }
        if (n_tok == 1) {
            quant_job q;
            quant_job_init(&q, k, W->type, x, act_buf, cols);
            dot8_groups(k, &W, 1, act_buf, &y, &q.all);
            return;
        }
#pragma omp parallel for schedule(static)
        for (int64_t g = 0; g < rows / 8; g++) {
            const uint8_t *wg = packed_for_thread(W) + (size_t)g * group_bytes;
            if (!gemm8) {
                for (int t = 0; t < n_tok; t++) {
                    float out[8];
                    dot8((int)cols, wg, (uint8_t *)act_buf + (size_t)t * act_row, out);
                    memcpy(y + (size_t)t * rows + 8 * g, out, sizeof out);
                }
                continue;
            }
            int t0 = 0;
            for (; t0 + 4 <= n_tok; t0 += 4) { /* four tokens share each weight load */
                float out[4][8];
                const void *acts[4];
                float *outs[4] = {out[0], out[1], out[2], out[3]};
                for (int t = 0; t < 4; t++) acts[t] = (uint8_t *)act_buf + (size_t)(t0 + t) * act_row;
                gemm8((int)cols, wg, acts, outs);
                for (int t = 0; t < 4; t++) memcpy(y + (size_t)(t0 + t) * rows + 8 * g, out[t], sizeof out[t]);
            }
            for (; t0 < n_tok; t0++) {
                float out[8];
                dot8((int)cols, wg, (uint8_t *)act_buf + (size_t)t0 * act_row, out);
                memcpy(y + (size_t)t0 * rows + 8 * g, out, sizeof out);
            }
        }
        return;
    }
    if (tt->act == PLUMB_ACT_F32 && n_tok >= BLAS_MIN_TOKENS && !omp_in_parallel() && load_blas()) {
        blas_matmul(W, x, n_tok, y);
        return;
    }
    const int dequant_rows = exact && tt->act != PLUMB_ACT_F32;
    const int bs = tt->block_size;
    plumb_dot_fn dot = k->dot[W->type];
    plumb_dot4t_fn dot4t = k->dot4t[W->type];

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *wr = wd + (size_t)r * W->row_bytes;
        if (dequant_rows) {
            /* reference path: each block dequantized to floats, f32 dot */
            float blk[QK_K];
            for (int t = 0; t < n_tok; t++) {
                const float *xt = x + (size_t)t * cols;
                float s = 0;
                for (int64_t b = 0; b < cols / bs; b++) {
                    tt->to_float(wr + (size_t)b * tt->type_size, blk, bs);
                    s += k->dot_f32(bs, blk, xt + b * bs);
                }
                y[(size_t)t * rows + r] = s;
            }
        } else if (quantized_act) {
            prefetch_next_row(W, r, n_tok);
            int t = 0;
            if (dot4t) /* four tokens per unpacking of the row */
                for (; t + 4 <= n_tok; t += 4) {
                    const void *acts[4];
                    float o[4];
                    for (int i = 0; i < 4; i++) acts[i] = (uint8_t *)act_buf + (size_t)(t + i) * act_row;
                    dot4t((int)cols, wr, acts, o);
                    for (int i = 0; i < 4; i++) y[(size_t)(t + i) * rows + r] = o[i];
                }
            for (; t < n_tok; t++)
                y[(size_t)t * rows + r] = dot((int)cols, wr, (uint8_t *)act_buf + (size_t)t * act_row);
        } else {
            prefetch_next_row(W, r, n_tok);
            for (int t = 0; t < n_tok; t++)
                y[(size_t)t * rows + r] = dot((int)cols, wr, x + (size_t)t * cols);
        }
    }
}

int plumb_matrix_repack(plumb_matrix *W) {
    const plumb_kernels *k = plumb_kernels_active();
    if (W->packed || !plumb_repack8_supported(W->type) || !k->dot8[W->type] || k == plumb_kernels_scalar() || W->rows % 8)
        return 0;
    uint8_t *p = plumb_alloc((size_t)W->rows * W->row_bytes, "repacked weights");
    if (!p) return -1;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < W->rows / 8; g++)
        plumb_repack8(W->type, (const uint8_t *)W->data + (size_t)g * 8 * W->row_bytes, W->row_bytes, W->cols,
                      p + (size_t)g * 8 * W->row_bytes);
    W->packed = p;
    return 0;
}

void plumb_matrix_release_source(const plumb_matrix *W) {
    if (!W->packed) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)W->data + page - 1) & ~(page - 1),
                    hi = ((uintptr_t)W->data + (size_t)W->rows * W->row_bytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}


void plumb_matmul_n(const plumb_matrix *const *W, int nw, const float *x, int n_tok, float *const *y, void *act_buf, int exact) {
    const plumb_kernels *k = plumb_kernels_active();
    int fused = n_tok == 1 && !exact && nw <= 4;
    for (int i = 0; fused && i < nw; i++) fused = on_dot8(k, W[i]) && W[i]->type == W[0]->type && W[i]->cols == W[0]->cols;
    if (!fused) {
        for (int i = 0; i < nw; i++) plumb_matmul(W[i], x, n_tok, y[i], act_buf, exact);
        return;
    }
    quant_job q;
    quant_job_init(&q, k, W[0]->type, x, act_buf, W[0]->cols);
    dot8_groups(k, W, nw, act_buf, y, &q.all);
}

typedef struct {
    plumb_dot8_fn dot8;
    const plumb_matrix *gate, *up;
    const void *act;
    float *out;
    void (*silu_mul)(int64_t n, const float *gate, const float *up, float *out);
    slicing s; /* runs > 1: gate's and up's slices in turn */
} swiglu_job;

static void swiglu_items(int64_t first, int64_t count, void *ctx) {
    const swiglu_job *j = ctx;
    const size_t group_bytes = 8 * j->gate->row_bytes;
    for (int64_t g = first; g < first + count; g++) {
        float g8[8], u8[8];
        const uint8_t *wg = packed_for_thread(j->gate) + (size_t)g * group_bytes, *wu = packed_for_thread(j->up) + (size_t)g * group_bytes;
        if (j->s.runs > 1) {
            const uint8_t *w[2] = {wg, wu};
            float *y[2] = {g8, u8};
            dot8_runs(j->dot8, &j->s, 2, w, j->act, y);
        } else {
            j->dot8((int)j->gate->cols, wg, j->act, g8);
            j->dot8((int)j->up->cols, wu, j->act, u8);
        }
        j->silu_mul(8, g8, u8, j->out + 8 * g);
    }
}

/* For one token over repacked weights, each iteration takes the same 8-row
 * group of gate and up and writes its 8 outputs, so the SwiGLU is spread
 * over the threads and done while the group is in cache, without a second
 * pass over two [ff] vectors on one thread. */
void plumb_matmul_swiglu(const plumb_matrix *gate, const plumb_matrix *up, const float *x, int n_tok, float *out, float *scratch, void *act_buf,
                         int exact) {
    const plumb_kernels *k = plumb_kernels_active();
    const int fused = n_tok == 1 && !exact && on_dot8(k, gate) && on_dot8(k, up) && gate->type == up->type && gate->rows == up->rows &&
                      gate->cols == up->cols;
    const int64_t ff = gate->rows;
    if (!fused) {
        const plumb_matrix *gu[2] = {gate, up};
        float *ys[2] = {out, scratch};
        plumb_matmul_n(gu, 2, x, n_tok, ys, act_buf, exact);
        const size_t n = (size_t)n_tok * (size_t)ff;
        const int64_t chunk = 4096;
#pragma omp parallel for schedule(static) if (n >= 65536)
        for (size_t i = 0; i < n; i += chunk) k->silu_mul(n - i < chunk ? (int64_t)(n - i) : chunk, out + i, scratch + i, out + i);
        return;
    }
    quant_job q;
    quant_job_init(&q, k, gate->type, x, act_buf, gate->cols);
    swiglu_job j = {one_token_kernel(k, gate->type), gate, up, act_buf, out, k->silu_mul, slicing_for(k, gate, omp_get_max_threads())};
    for_items(ff / 8, swiglu_items, &j, &q.all);
}

/* ---- a team: one parallel region for a whole decode step ---- */

struct plumb_team {
    int nt;
    _Alignas(64) unsigned arrived;
    _Alignas(64) unsigned gen;
    _Alignas(64) share shares[]; /* nt of them */
};

plumb_team *plumb_team_new(int nt) {
    if (nt < 1) nt = 1;
    const size_t bytes = (sizeof(plumb_team) + (size_t)nt * sizeof(share) + 63) & ~(size_t)63;
    plumb_team *tm = aligned_alloc(64, bytes);
    if (!tm) return NULL;
    memset(tm, 0, bytes);
    tm->nt = nt;
    return tm;
}

void plumb_team_free(plumb_team *tm) { free(tm); }
int plumb_team_size(const plumb_team *tm) { return tm->nt; }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* A counting spin barrier (libgomp's measured 1.4 us for two threads on
 * the development machine). The last to arrive resets the count before it
 * opens the next generation, and the others cannot leave before that.
 * After 16k spins a waiter yields its core: a team larger than the cores
 * it has (or a thread its host took away) must not be spun against. */
void plumb_team_barrier(plumb_team *tm) {
    if (tm->nt == 1) return;
    const unsigned gen = __atomic_load_n(&tm->gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&tm->arrived, 1, __ATOMIC_ACQ_REL) == (unsigned)tm->nt) {
        __atomic_store_n(&tm->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&tm->gen, gen + 1, __ATOMIC_RELEASE);
        return;
    }
    for (unsigned spins = 0; __atomic_load_n(&tm->gen, __ATOMIC_ACQUIRE) == gen; spins++) {
        if (spins < (1u << 14)) cpu_relax();
        else sched_yield();
    }
}

/* Every thread of the team: its share of pre, a barrier, items [0, n)
 * (stealing as for_items does), a barrier. */
static void team_items(plumb_team *tm, int me, int64_t n, void (*body)(int64_t first, int64_t count, void *ctx), void *ctx, const prologue *pre) {
    const int nt = tm->nt, steal = steal_worthwhile(n, nt);
    if (steal) set_share(tm->shares, n, me, nt);
    if (pre) run_share(pre, me, nt);
    plumb_team_barrier(tm);
    if (steal) steal_loop(tm->shares, n, me, nt, body, ctx);
    else if (n * (me + 1) / nt > n * me / nt) body(n * me / nt, n * (me + 1) / nt - n * me / nt, ctx);
    plumb_team_barrier(tm);
}

int plumb_team_can_run(const plumb_matrix *W) { return on_dot8(plumb_kernels_active(), W); }

int64_t plumb_act_block(uint32_t weight_type) { return plumb_type_get(weight_type)->act == PLUMB_ACT_Q8K ? QK_K : 32; }

void plumb_quantize_act(uint32_t weight_type, const float *x, int64_t n, void *out) {
    quantize_act(plumb_kernels_active(), weight_type, x, out, n);
}

void plumb_team_matmul_n(plumb_team *tm, int me, const plumb_matrix *const *W, int nw, const void *act, float *const *y, const plumb_prologue *pre) {
    dot8_job j;
    dot8_job_init(&j, plumb_kernels_active(), W, nw, act, y, tm->nt);
    team_items(tm, me, j.first[nw], dot8_items, &j, pre);
}

void plumb_team_swiglu(plumb_team *tm, int me, const plumb_matrix *gate, const plumb_matrix *up, const void *act, float *out, const plumb_prologue *pre) {
    const plumb_kernels *k = plumb_kernels_active();
    swiglu_job j = {one_token_kernel(k, gate->type), gate, up, act, out, k->silu_mul, slicing_for(k, gate, tm->nt)};
    team_items(tm, me, gate->rows / 8, swiglu_items, &j, pre);
}
