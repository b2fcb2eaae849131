/* model.c — model loading (GGUF -> plumb_model), inference contexts and the
 * public entry points that wrap the architecture code in models/. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "topology.h"
#include "util.h"

/* written by the Makefile from git (builds outside it report "unknown") */
#if defined(__has_include)
#if __has_include("plumb_version.h")
#include "plumb_version.h"
#endif
#endif
#ifndef PLUMB_GIT_COMMIT
#define PLUMB_GIT_COMMIT "unknown"
#endif

const char *plumb_version(void) { return PLUMB_VERSION " (git " PLUMB_GIT_COMMIT ")"; }

int plumb_default_threads(void) { return plumb_physical_cores(); }

static plumb_model *load(const char *path, int vocab_only) {
    plumb_model *m = calloc(1, sizeof *m);
    if (!m) {
        plumb_set_error("out of memory");
        return NULL;
    }
    m->path = strdup(path);
    m->file = gguf_open(path);
    if (!m->file) goto bad;
    const char *arch = NULL;
    if (gguf_get_str(m->file, "general.architecture", &arch) != 1) {
        plumb_set_error("%s: no general.architecture string; not a model file?", path);
        goto bad;
    }
    if (strlen(arch) >= sizeof m->hp.arch) {
        plumb_set_error("%s: architecture name too long", path);
        goto bad;
    }
    strcpy(m->hp.arch, arch);
    if (vocab_only) {
        if (vocab_load(&m->vocab, m->file)) goto bad;
        if (m->vocab.n == 0) {
            plumb_set_error("%s: no tokenizer.ggml.tokens", path);
            goto bad;
        }
        m->hp.n_vocab = m->vocab.n;
        m->vocab_only = 1;
        return m;
    }
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "mistral")) {
        plumb_set_error("%s: architecture '%s' is not supported (llama, mistral, qwen2 are)", path, arch);
        goto bad;
    }
    if (vocab_load(&m->vocab, m->file)) {
        plumb_set_error("%s: %s", path, plumb_last_error());
        goto bad;
    }
    if (llama_load_hparams(m) || llama_bind_tensors(m)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", plumb_last_error());
        plumb_set_error("%s: %s", path, msg);
        goto bad;
    }
    return m;
bad:
    plumb_model_free(m);
    return NULL;
}

plumb_model *plumb_model_load(const char *path) { return load(path, 0); }
plumb_model *plumb_model_load_vocab(const char *path) { return load(path, 1); }

void plumb_model_free(plumb_model *m) {
    if (!m) return;
    vocab_free(&m->vocab);
    if (m->layers) {
        for (int l = 0; l < m->hp.n_layer; l++) {
            plumb_dealloc((void *)m->layers[l].attn_norm.data);
            plumb_dealloc((void *)m->layers[l].ffn_norm.data);
            plumb_layer *L = &m->layers[l];
            plumb_matrix *ws[PLUMB_LAYER_MATRICES];
            plumb_layer_matrices(L, ws);
            for (int i = 0; i < PLUMB_LAYER_MATRICES; i++) {
                plumb_matrix_free_mirrors(ws[i]);
                plumb_dealloc((void *)ws[i]->packed);
            }
            plumb_dealloc((void *)L->bq.data);
            plumb_dealloc((void *)L->bk.data);
            plumb_dealloc((void *)L->bv.data);
        }
    }
    free(m->layers);
    plumb_dealloc((void *)m->output_norm.data);
    plumb_matrix_free_mirrors(&m->output);
    plumb_dealloc((void *)m->output.packed);
    gguf_close(m->file);
    free(m->path);
    free(m);
}

const plumb_hparams *plumb_model_hparams(const plumb_model *m) { return &m->hp; }

uint64_t plumb_model_n_params(const plumb_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        n += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return n;
}

uint64_t plumb_model_weight_bytes(const plumb_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) n += m->file->tensors[i].nbytes;
    return n;
}

static uint64_t matrix_bytes(const plumb_matrix *w) { return w->data ? (uint64_t)w->rows * w->row_bytes : 0; }

uint64_t plumb_model_bytes_per_token(const plumb_model *m) {
    uint64_t n = m->tok_embd.row_bytes + matrix_bytes(&m->output);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const plumb_layer *L = &m->layers[l];
        n += matrix_bytes(&L->wq) + matrix_bytes(&L->wk) + matrix_bytes(&L->wv) + matrix_bytes(&L->wo) +
             matrix_bytes(&L->w_gate) + matrix_bytes(&L->w_up) + matrix_bytes(&L->w_down);
    }
    return n;
}

static uint64_t matrix_weights(const plumb_matrix *w) { return w->data ? (uint64_t)w->rows * (uint64_t)w->cols : 0; }

uint64_t plumb_model_layer_macs_per_token(const plumb_model *m) {
    uint64_t n = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        plumb_matrix *ws[PLUMB_LAYER_MATRICES];
        plumb_layer_matrices(&m->layers[l], ws);
        for (int i = 0; i < PLUMB_LAYER_MATRICES; i++) n += matrix_weights(ws[i]);
    }
    return n;
}

const char *plumb_model_weight_type(const plumb_model *m) {
    uint64_t by_type[PLUMB_TYPE_COUNT] = {0};
    for (int l = 0; l < m->hp.n_layer; l++) {
        plumb_matrix *ws[PLUMB_LAYER_MATRICES];
        plumb_layer_matrices(&m->layers[l], ws);
        for (int i = 0; i < PLUMB_LAYER_MATRICES; i++) by_type[ws[i]->type] += matrix_bytes(ws[i]);
    }
    int best = 0;
    for (int t = 1; t < PLUMB_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    return plumb_type_name((uint32_t)best);
}

/* ---- contexts ---- */

plumb_ctx_params plumb_ctx_default_params(void) {
    return (plumb_ctx_params){.n_ctx = 0, .n_threads = 0, .exact = 0, .n_seq_max = 1, .n_gpu_layers = 0};
}

#define N_BATCH 64 /* tokens per forward chunk */

static float *scratch(plumb_ctx *c, size_t n_floats, const char *what) {
    float *p = plumb_calloc(n_floats * sizeof(float), what);
    if (p) c->bytes += n_floats * sizeof(float);
    return p;
}

/* The logits buffer: page-locked by the GPU plugin when it computes the
 * head (logits then come back by DMA straight into it), else ordinary. */
static float *logits_alloc(plumb_ctx *c, size_t n_floats) {
    if (c->gpu_handle && c->gpu_head) {
        float *p = c->gpu->host_alloc(n_floats * sizeof(float));
        if (p) memset(p, 0, n_floats * sizeof(float));
        else plumb_set_error("out of page-locked host memory for %zu logits", n_floats);
        return p;
    }
    return plumb_calloc(n_floats * sizeof(float), "logits");
}
static void logits_free(plumb_ctx *c, float *p) {
    if (c->gpu_handle && c->gpu_head) c->gpu->host_free(p);
    else plumb_dealloc(p);
}

static plumb_backend_tensor btensor(const plumb_matrix *w) {
    return (plumb_backend_tensor){w->type, w->rows, w->cols, w->data, w->row_bytes};
}

/* Hands the last n_gpu_layers layers (and the head, when all) to the CUDA
 * plugin. Failure is not an error: the context runs on the CPU and
 * gpu_status says why. */
static void gpu_setup(plumb_ctx *c) {
    const plumb_hparams *hp = &c->model->hp;
    char why[512];
    c->gpu = plumb_backend_cuda(why, sizeof why);
    if (!c->gpu) {
        snprintf(c->gpu_status, sizeof c->gpu_status, "GPU path off: %.480s", why);
        return;
    }
    const int n = c->p.n_gpu_layers < 0 || c->p.n_gpu_layers >= hp->n_layer ? hp->n_layer : c->p.n_gpu_layers;
    plumb_backend_layer *ls = calloc((size_t)n, sizeof *ls);
    c->block_table = calloc((size_t)c->n_seq_max * (size_t)c->n_kv_blocks, sizeof(int));
    if (!ls || !c->block_table) {
        free(ls);
        snprintf(c->gpu_status, sizeof c->gpu_status, "GPU path off: out of host memory");
        return;
    }
    const int first = hp->n_layer - n;
    for (int i = 0; i < n; i++) {
        const plumb_layer *L = &c->model->layers[first + i];
        ls[i] = (plumb_backend_layer){btensor(&L->attn_norm), btensor(&L->ffn_norm), btensor(&L->wq), btensor(&L->wk), btensor(&L->wv), btensor(&L->wo),
                                      btensor(&L->bq), btensor(&L->bk), btensor(&L->bv), btensor(&L->w_gate), btensor(&L->w_up), btensor(&L->w_down)};
    }
    plumb_backend_model_desc d = {hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_rot, hp->n_vocab, hp->rope_neox,
                                  hp->rms_eps, hp->rope_freq_base, n, ls, n == hp->n_layer, btensor(&c->model->output_norm),
                                  btensor(&c->model->output), c->n_kv_blocks, PLUMB_KV_BLOCK, c->n_seq_max, c->n_batch,
                                  n == hp->n_layer ? btensor(&c->model->tok_embd) : (plumb_backend_tensor){0}};
    char err[512] = "";
    double t0 = plumb_time_s();
    c->gpu_handle = c->gpu->load(&d, err, sizeof err);
    free(ls);
    if (!c->gpu_handle) {
        snprintf(c->gpu_status, sizeof c->gpu_status, "GPU path off: %.480s", err);
        return;
    }
    c->gpu_first = first;
    c->gpu_head = n == hp->n_layer;
    char dev[128];
    size_t fr, tot;
    c->gpu->device_info(dev, sizeof dev, &fr, &tot, err, sizeof err);
    snprintf(c->gpu_status, sizeof c->gpu_status, "%s: %d of %d layers%s on the GPU, %.2f GiB of device memory, loaded in %.1f s", dev, n, hp->n_layer,
             c->gpu_head ? " and the output head" : "", (double)c->gpu->peak_bytes(c->gpu_handle) / (1 << 30), plumb_time_s() - t0);
}

/* --numa mirror: a copy of every repacked matrix per NUMA node, each bound
 * to its node, and every thread told which copy is its node's. The copies
 * belong to the model (made once, freed with it). PLUMB_NUMA_MIRROR_COPIES=N
 * forces N copies with thread i reading copy i % N, so a one-node machine
 * can check that every thread's reads of its own copy give the same answer. */
static int bind_copy(void *numa, void *addr, size_t len, int copy) { return plumb_numa_bind(numa, addr, len, copy); }

static int mirror_weights(plumb_model *m, const plumb_placement *pl) {
    const char *force = getenv("PLUMB_NUMA_MIRROR_COPIES");
    const int copies = force ? atoi(force) : pl->n_nodes;
    if (copies < 2) return 0;
    if (copies > PLUMB_MAX_MIRRORS) return plumb_set_error("--numa mirror: %d copies, at most %d", copies, PLUMB_MAX_MIRRORS);
    plumb_numa *numa = force ? NULL : plumb_numa_open(); /* forced copies are not bound */
    if (!force && !numa) return -1;
    int rc = 0;
    for (int l = 0; l < m->hp.n_layer && !rc; l++) {
        plumb_matrix *ws[PLUMB_LAYER_MATRICES];
        plumb_layer_matrices(&m->layers[l], ws);
        for (int i = 0; i < PLUMB_LAYER_MATRICES && !rc; i++) rc = plumb_matrix_mirror(ws[i], copies, numa ? bind_copy : NULL, numa);
    }
    if (!rc) rc = plumb_matrix_mirror(&m->output, copies, numa ? bind_copy : NULL, numa);
    plumb_numa_close(numa);
    if (rc) return -1;
#pragma omp parallel num_threads(pl->n_threads)
    {
        const int i = omp_get_thread_num();
        plumb_matmul_set_thread_copy(force ? i % copies : (pl->node[i] >= 0 && pl->node[i] < copies ? pl->node[i] : 0));
    }
    return 0;
}

/* The KV pools: each part page-aligned, bound to its node before anything
 * touches it (bind != 0), then zeroed (by this thread: the binding, not the
 * toucher, decides where the pages go). */
static int kv_alloc(plumb_ctx *c, const int *node, int bind) {
    const size_t page = 4096 / sizeof(float), per_head = (size_t)c->n_kv_blocks * PLUMB_KV_BLOCK * (size_t)c->gpu_first * (size_t)c->head_dim;
    size_t total = 0;
    for (int i = 0; i < c->kv_parts; i++) {
        c->kv_part_off[i] = total;
        total += ((size_t)(c->kv_head0[i + 1] - c->kv_head0[i]) * per_head + page - 1) / page * page;
    }
    if (!total) total = page;
    void **mem[2] = {&c->k_mem, &c->v_mem};
    float **pool[2] = {&c->k_pool, &c->v_pool};
    plumb_numa *numa = bind ? plumb_numa_open() : NULL; /* without it the parts stay wherever the OS puts them */
    for (int kv = 0; kv < 2; kv++) {
        *mem[kv] = plumb_alloc(total * sizeof(float) + 4096, kv ? "KV cache (values)" : "KV cache (keys)");
        if (!*mem[kv]) {
            plumb_set_error("%s (context of %d positions needs %.1f MiB of KV cache)", plumb_last_error(), c->n_ctx,
                            2.0 * (double)total * sizeof(float) / (1 << 20));
            plumb_numa_close(numa);
            return -1;
        }
        c->bytes += total * sizeof(float) + 4096;
        *pool[kv] = (float *)(((uintptr_t)*mem[kv] + 4095) & ~(uintptr_t)4095);
        for (int i = 0; i < c->kv_parts; i++) {
            const size_t len = (i + 1 < c->kv_parts ? c->kv_part_off[i + 1] : total) - c->kv_part_off[i];
            if (numa) plumb_numa_bind(numa, *pool[kv] + c->kv_part_off[i], len * sizeof(float), node[i]);
            memset(*pool[kv] + c->kv_part_off[i], 0, len * sizeof(float));
        }
    }
    plumb_numa_close(numa);
    return 0;
}

plumb_ctx *plumb_ctx_new(plumb_model *m, const plumb_ctx_params *p) {
    const plumb_hparams *hp = &m->hp;
    if (m->vocab_only) {
        plumb_set_error("%s was loaded for its vocabulary only", m->path);
        return NULL;
    }
    plumb_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        plumb_set_error("out of memory");
        return NULL;
    }
    c->model = m;
    c->p = p ? *p : plumb_ctx_default_params();
    if (c->p.n_ctx < 0 || c->p.n_seq_max < 0 || c->p.n_seq_max > 4096) {
        plumb_set_error("invalid context parameters (n_ctx %d, n_seq_max %d)", c->p.n_ctx, c->p.n_seq_max);
        free(c);
        return NULL;
    }
    int n_ctx = c->p.n_ctx ? c->p.n_ctx : (hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    c->n_kv_blocks = (n_ctx + PLUMB_KV_BLOCK - 1) / PLUMB_KV_BLOCK;
    c->n_ctx = n_ctx;
    c->n_seq_max = c->p.n_seq_max ? c->p.n_seq_max : 1;
    /* threads: one per physical core unless told otherwise; pinned when a
     * NUMA plan asks for it */
    c->head_dim = hp->head_dim;
    c->kv_parts = 1;
    c->kv_head0[0] = 0, c->kv_head0[1] = hp->n_head_kv;
    int kv_node[PLUMB_MAX_NODES] = {0}, kv_bind = 0;
    if (c->p.numa && strcmp(c->p.numa, "off")) {
        plumb_placement pl;
        if (plumb_topology_plan(NULL, c->p.numa, c->p.n_threads, &pl) || plumb_topology_apply(&pl) ||
            (!strcmp(c->p.numa, "mirror") && mirror_weights(m, &pl))) {
            free(c);
            return NULL;
        }
        c->kv_parts = plumb_kv_partition(&pl, hp->n_head_kv, c->kv_head0, c->kv_thread0, kv_node);
        kv_bind = c->kv_parts > 1;
    } else {
        omp_set_num_threads(c->p.n_threads > 0 ? c->p.n_threads : plumb_physical_cores());
    }
    const char *split = getenv("PLUMB_KV_SPLIT"); /* test hook: the split layout planned on a synthetic topology, nothing bound */
    if (split && *split && c->kv_parts == 1) {
        plumb_placement pl;
        if (plumb_topology_plan(split, "distribute", omp_get_max_threads(), &pl)) {
            free(c);
            return NULL;
        }
        c->kv_parts = plumb_kv_partition(&pl, hp->n_head_kv, c->kv_head0, c->kv_thread0, kv_node);
    }
    c->kv_thread0[0] = 0;
    if (c->kv_parts == 1) c->kv_thread0[1] = omp_get_max_threads();
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->n_batch = N_BATCH;
    /* the GPU first: the host keeps a KV cache only for the layers it runs
     * (with -ngl all, none: a 7B model with 64 sequences of 160 positions
     * held 10.7 GB of host memory it never used) */
    c->gpu_first = hp->n_layer;
    snprintf(c->gpu_status, sizeof c->gpu_status, "GPU offload not requested (-ngl 0)");
    if (c->p.n_gpu_layers != 0) gpu_setup(c);
    size_t kv = (size_t)c->n_kv_blocks * PLUMB_KV_BLOCK * (size_t)c->gpu_first * (size_t)c->kv_dim;
    size_t nb = (size_t)c->n_batch;
    int n_threads = omp_get_max_threads();
    if (kv_alloc(c, kv_node, kv_bind)) {
        plumb_ctx_free(c);
        return NULL;
    }
    c->free_blocks = malloc(sizeof(int) * (size_t)c->n_kv_blocks);
    c->seqs = calloc((size_t)c->n_seq_max, sizeof(plumb_seq));
    for (int i = 0; c->free_blocks && i < c->n_kv_blocks; i++) c->free_blocks[i] = c->n_kv_blocks - 1 - i;
    c->n_free = c->n_kv_blocks;
    c->x = scratch(c, nb * (size_t)hp->n_embd, "activations");
    c->xb = scratch(c, nb * (size_t)hp->n_embd, "activations");
    c->q = scratch(c, nb * (size_t)hp->n_embd, "queries");
    c->k = scratch(c, nb * (size_t)c->kv_dim, "keys");
    c->v = scratch(c, nb * (size_t)c->kv_dim, "values");
    c->att_out = scratch(c, nb * (size_t)hp->n_embd, "attention output");
    c->hb = scratch(c, nb * (size_t)hp->n_ff, "ffn hidden");
    c->hb2 = scratch(c, nb * (size_t)hp->n_ff, "ffn hidden");
    c->att = scratch(c, (size_t)n_threads * (size_t)c->n_ctx * (size_t)(hp->n_head / hp->n_head_kv), "attention scores"); /* a KV group's heads */
    c->kv_rows = plumb_calloc((size_t)n_threads * 2 * (size_t)c->n_ctx * sizeof(float *), "attention row pointers");
    if (c->kv_rows) c->bytes += (size_t)n_threads * 2 * (size_t)c->n_ctx * sizeof(float *);
    c->logits = logits_alloc(c, (size_t)hp->n_vocab);
    if (c->logits) c->bytes += (size_t)hp->n_vocab * sizeof(float);
    c->argmax = malloc(sizeof(int));
    c->n_logits = 1;
    /* activation scratch: enough for the widest matrix input at full batch */
    size_t act = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        plumb_matrix *ws[PLUMB_LAYER_MATRICES];
        plumb_layer_matrices(&m->layers[l], ws);
        for (int i = 0; i < PLUMB_LAYER_MATRICES; i++) {
            size_t b = plumb_matmul_act_bytes(ws[i]->type, ws[i]->cols, c->n_batch);
            if (b > act) act = b;
        }
    }
    size_t b = plumb_matmul_act_bytes(m->output.type, m->output.cols, c->n_batch);
    if (b > act) act = b;
    c->act_buf_bytes = act;
    c->act_buf = act ? plumb_alloc(act, "quantized activations") : NULL;
    c->bytes += act;
    if (!c->free_blocks || !c->seqs || !c->x || !c->xb || !c->q || !c->k || !c->v || !c->att_out ||
        !c->hb || !c->hb2 || !c->att || !c->kv_rows || !c->logits || !c->argmax || (act && !c->act_buf)) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s (context of %d positions needs %.1f MiB of KV cache)", plumb_last_error(), c->n_ctx,
                 2.0 * (double)kv * 4 / (1 << 20));
        plumb_ctx_free(c);
        plumb_set_error("%s", msg);
        return NULL;
    }
    return c;
}

int plumb_ctx_gpu_layers(const plumb_ctx *c) { return c->gpu_handle ? c->model->hp.n_layer - c->gpu_first : 0; }
const char *plumb_ctx_gpu_status(const plumb_ctx *c) { return c->gpu_status; }
size_t plumb_ctx_gpu_peak_bytes(const plumb_ctx *c) { return c->gpu_handle ? c->gpu->peak_bytes(c->gpu_handle) : 0; }

void plumb_ctx_free(plumb_ctx *c) {
    if (!c) return;
    plumb_dealloc(c->k_mem);
    plumb_dealloc(c->v_mem);
    float *bufs[] = {c->x, c->xb, c->q, c->k, c->v, c->att_out, c->hb, c->hb2, c->att};
    if (c->logits) logits_free(c, c->logits);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) plumb_dealloc(bufs[i]);
    plumb_dealloc(c->act_buf);
    plumb_dealloc(c->kv_rows);
    free(c->argmax);
    if (c->gpu_handle) c->gpu->unload(c->gpu_handle);
    free(c->block_table);
    for (int i = 0; c->seqs && i < c->n_seq_max; i++) free(c->seqs[i].blocks);
    free(c->seqs);
    free(c->free_blocks);
    free(c);
}

int plumb_ctx_n_ctx(const plumb_ctx *c) { return c->n_ctx; }
size_t plumb_ctx_bytes(const plumb_ctx *c) { return c->bytes; }

/* ---- sequences and their KV blocks ---- */

int plumb_seq_open(plumb_ctx *c) {
    for (int i = 0; i < c->n_seq_max; i++)
        if (!c->seqs[i].open) {
            plumb_seq *s = &c->seqs[i];
            if (!s->blocks) s->blocks = malloc(sizeof(int) * (size_t)c->n_kv_blocks);
            if (!s->blocks) return plumb_set_error("out of memory");
            s->open = 1;
            s->n_pos = 0;
            s->n_blocks = 0;
            return i;
        }
    return plumb_set_error("all %d sequences are in use", c->n_seq_max);
}

void plumb_seq_close(plumb_ctx *c, int seq) {
    if (seq < 0 || seq >= c->n_seq_max || !c->seqs[seq].open) return;
    plumb_seq *s = &c->seqs[seq];
    for (int i = 0; i < s->n_blocks; i++) c->free_blocks[c->n_free++] = s->blocks[i];
    s->n_blocks = s->n_pos = 0;
    s->open = 0;
}

int plumb_seq_length(const plumb_ctx *c, int seq) {
    return seq >= 0 && seq < c->n_seq_max && c->seqs[seq].open ? c->seqs[seq].n_pos : -1;
}

void plumb_seq_truncate(plumb_ctx *c, int seq, int n_pos) {
    if (seq >= 0 && seq < c->n_seq_max && c->seqs[seq].open && n_pos >= 0 && n_pos < c->seqs[seq].n_pos) c->seqs[seq].n_pos = n_pos;
}

int plumb_kv_free_positions(const plumb_ctx *c) { return c->n_free * PLUMB_KV_BLOCK; }

/* KV blocks so that each sequence s can hold positions up to last[s]
 * (last: [n_seq_max], -1 for none), for all of them or none
 * (PLUMB_ERR_KV_FULL, nothing changed). */
static int reserve_blocks(plumb_ctx *c, const int *last) {
    int need = 0;
    for (int s = 0; s < c->n_seq_max; s++) {
        const int more = last[s] < 0 ? 0 : last[s] / PLUMB_KV_BLOCK + 1 - c->seqs[s].n_blocks;
        if (more > 0) need += more;
    }
    if (need > c->n_free) {
        plumb_set_error("KV cache full: %d more blocks needed, %d free (context %d positions)", need, c->n_free, c->n_ctx);
        return PLUMB_ERR_KV_FULL;
    }
    for (int s = 0; s < c->n_seq_max; s++)
        while (last[s] >= 0 && c->seqs[s].n_blocks <= last[s] / PLUMB_KV_BLOCK) c->seqs[s].blocks[c->seqs[s].n_blocks++] = c->free_blocks[--c->n_free];
    return 0;
}

/* a list of n_seq_max -1s (reserve_blocks' "nothing"), or NULL */
static int *no_last_positions(const plumb_ctx *c) {
    int *last = malloc(sizeof(int) * (size_t)c->n_seq_max);
    if (!last) plumb_set_error("out of memory");
    else memset(last, 0xff, sizeof(int) * (size_t)c->n_seq_max);
    return last;
}

int plumb_decode(plumb_ctx *c, const plumb_batch *b) {
    const int n = b->n, nv = c->model->hp.n_vocab;
    if (n <= 0) return plumb_set_error("nothing to evaluate");
    /* validate everything, and find each sequence's last position, before changing anything */
    int n_out = 0;
    int *last = no_last_positions(c);
    if (!last) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const int s = b->seq[i], p = b->pos[i];
        if (s < 0 || s >= c->n_seq_max || !c->seqs[s].open) rc = plumb_set_error("token %d: sequence %d is not open", i, s);
        else if (b->tokens[i] < 0 || b->tokens[i] >= nv) rc = plumb_set_error("token id %d outside the vocabulary (%d)", b->tokens[i], nv);
        else if (p < 0 || p >= c->n_ctx) rc = plumb_set_error("context full: position %d exceeds the context size %d (-c)", p, c->n_ctx);
        else if (p > c->seqs[s].n_pos + i) rc = plumb_set_error("token %d: position %d leaves a gap after %d cached positions", i, p, c->seqs[s].n_pos);
        else if (p > last[s]) last[s] = p;
        if (!b->logits ? i == n - 1 : b->logits[i] != 0) n_out++;
    }
    if (!rc) rc = reserve_blocks(c, last);
    free(last);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        plumb_seq *s = &c->seqs[b->seq[i]];
        if (b->pos[i] + 1 > s->n_pos) s->n_pos = b->pos[i] + 1;
    }
    if (n_out > c->n_logits) {
        float *nl = logits_alloc(c, (size_t)n_out * (size_t)nv);
        int *na = nl ? realloc(c->argmax, sizeof(int) * (size_t)n_out) : NULL;
        if (!na) {
            if (nl) logits_free(c, nl);
            return nl ? plumb_set_error("out of memory") : -1;
        }
        c->bytes += (size_t)(n_out - c->n_logits) * (size_t)nv * sizeof(float);
        logits_free(c, c->logits);
        c->logits = nl;
        c->argmax = na;
        c->n_logits = n_out;
    }
    int8_t *want = malloc((size_t)n);
    if (!want) return plumb_set_error("out of memory");
    for (int i = 0; i < n; i++) want[i] = b->logits ? b->logits[i] != 0 : i == n - 1;
    int out = 0;
    for (int done = 0; done < n && !rc; done += c->n_batch) {
        const int chunk = n - done < c->n_batch ? n - done : c->n_batch;
        rc = llama_forward(c, b->tokens + done, b->pos + done, b->seq + done, chunk, want + done, c->logits + (size_t)out * (size_t)nv, c->argmax + out);
        for (int i = done; i < done + chunk; i++) out += want[i];
    }
    free(want);
    c->n_logits_valid = rc ? 0 : n_out;
    c->argmax_valid = !rc && c->gpu_handle && c->gpu_head;
    return rc;
}

int plumb_batch_argmax(const plumb_ctx *c, int first, int n, int *ids) {
    if (first < 0 || n < 0 || first + n > c->n_logits_valid) return plumb_set_error("logit rows %d..%d not made by the last decode", first, first + n - 1);
    if (c->argmax_valid) {
        memcpy(ids, c->argmax + first, sizeof(int) * (size_t)n);
        return 0;
    }
#pragma omp parallel for if (n > 1)
    for (int i = 0; i < n; i++) ids[i] = plumb_argmax(plumb_batch_logits(c, first + i), c->model->hp.n_vocab);
    return 0;
}

const float *plumb_batch_logits(const plumb_ctx *c, int i) {
    if (i < 0 || i >= c->n_logits_valid) return NULL;
    return c->logits + (size_t)i * (size_t)c->model->hp.n_vocab;
}

/* ---- greedy chains (plumb_decode_greedy) ---- */

int plumb_ctx_greedy_chained(const plumb_ctx *c) {
    return c->gpu_handle && c->gpu_head && c->gpu->decode_chain && !c->chain_off;
}

/* The chain on the GPU: 0 with *done steps, 1 when this model cannot chain
 * (nothing run; c->chain_off set and the reason added to gpu_status), or
 * a negative error. */
static int greedy_on_gpu(plumb_ctx *c, int n, const plumb_token *tokens, const int *pos, const int *seq, int n_steps, plumb_step_fn on_step, void *user,
                         int *done) {
    int *last = no_last_positions(c);
    if (!last) return -1;
    for (int i = 0; i < n; i++) last[seq[i]] = pos[i] + n_steps - 1;
    const int rc = reserve_blocks(c, last);
    free(last);
    if (rc) return rc;
    fill_block_table(c);
    const plumb_backend_chain ch = {n, n_steps, tokens, pos, seq, c->block_table, c->n_kv_blocks, on_step, user};
    char err[512] = "";
    c->n_logits_valid = 0;
    c->argmax_valid = 0;
    const int got = c->gpu->decode_chain(c->gpu_handle, &ch, err, sizeof err);
    if (got == -2) {
        c->chain_off = 1;
        const size_t len = strlen(c->gpu_status);
        snprintf(c->gpu_status + len, sizeof c->gpu_status - len, "; greedy steps not chained on the GPU: %.200s", err);
        return 1;
    }
    if (got < 0) return plumb_set_error("GPU: %s", err);
    for (int i = 0; i < n; i++) c->seqs[seq[i]].n_pos = pos[i] + got;
    *done = got;
    return 0;
}

int plumb_decode_greedy(plumb_ctx *c, int n, const plumb_token *tokens, const int *pos, const int *seq, int n_steps, plumb_step_fn on_step, void *user) {
    const int nv = c->model->hp.n_vocab;
    if (n <= 0 || n_steps <= 0) return plumb_set_error("nothing to decode (%d sequences, %d steps)", n, n_steps);
    if (n > c->n_batch) return plumb_set_error("%d sequences exceed the batch of %d", n, c->n_batch);
    if (!on_step) return plumb_set_error("plumb_decode_greedy needs an on_step callback");
    for (int i = 0; i < n; i++) {
        const int s = seq[i];
        if (s < 0 || s >= c->n_seq_max || !c->seqs[s].open) return plumb_set_error("sequence %d is not open", s);
        for (int j = 0; j < i; j++)
            if (seq[j] == s) return plumb_set_error("sequence %d appears twice (a greedy chain takes one token a sequence)", s);
        if (tokens[i] < 0 || tokens[i] >= nv) return plumb_set_error("token id %d outside the vocabulary (%d)", tokens[i], nv);
        if (pos[i] < 0 || pos[i] > c->seqs[s].n_pos) return plumb_set_error("position %d leaves a gap after %d cached positions", pos[i], c->seqs[s].n_pos);
        if (pos[i] + n_steps > c->n_ctx)
            return plumb_set_error("context full: %d steps from position %d exceed the context size %d (-c)", n_steps, pos[i], c->n_ctx);
    }
    if (plumb_ctx_greedy_chained(c)) {
        int done = 0;
        const int rc = greedy_on_gpu(c, n, tokens, pos, seq, n_steps, on_step, user, &done);
        if (rc <= 0) return rc ? rc : done;
    }
    /* step by step: each step a plumb_decode, its picks the next step's tokens */
    plumb_token *cur = malloc(sizeof(plumb_token) * (size_t)n), *picks = malloc(sizeof(plumb_token) * (size_t)n);
    int *at = malloc(sizeof(int) * (size_t)n);
    int8_t *want = malloc((size_t)n);
    int steps = 0, rc = 0;
    if (!cur || !picks || !at || !want) rc = plumb_set_error("out of memory");
    else {
        memcpy(cur, tokens, sizeof(plumb_token) * (size_t)n);
        memset(want, 1, (size_t)n);
    }
    while (!rc && steps < n_steps) {
        for (int i = 0; i < n; i++) at[i] = pos[i] + steps;
        const plumb_batch b = {n, cur, at, seq, want};
        if ((rc = plumb_decode(c, &b)) || (rc = plumb_batch_argmax(c, 0, n, picks))) break;
        steps++;
        if (on_step(user, steps - 1, picks)) break;
        memcpy(cur, picks, sizeof(plumb_token) * (size_t)n);
    }
    free(cur);
    free(picks);
    free(at);
    free(want);
    return rc ? rc : steps;
}

/* single-sequence convenience: sequence 0 */
static int eval(plumb_ctx *c, const plumb_token *tokens, int n, int pos, int all) {
    if (n <= 0) return plumb_set_error("nothing to evaluate");
    if (!c->seqs[0].open && plumb_seq_open(c) != 0) return plumb_set_error("sequence 0 is not available");
    if (pos < 0 || pos > c->n_ctx - n)
        return plumb_set_error("context full: positions %d..%d exceed the context size %d (-c)", pos, pos + n - 1, c->n_ctx);
    if (pos > c->seqs[0].n_pos) return plumb_set_error("position %d leaves a gap after %d cached positions", pos, c->seqs[0].n_pos);
    c->seqs[0].n_pos = pos; /* evaluating at pos replaces what followed */
    int *ps = malloc(sizeof(int) * (size_t)n), *ss = calloc((size_t)n, sizeof(int));
    int8_t *want = malloc((size_t)n);
    int rc = ps && ss && want ? 0 : plumb_set_error("out of memory");
    for (int i = 0; !rc && i < n; i++) {
        ps[i] = pos + i;
        want[i] = all || i == n - 1;
    }
    if (!rc) {
        plumb_batch b = {n, tokens, ps, ss, want};
        rc = plumb_decode(c, &b);
        if (rc == PLUMB_ERR_KV_FULL) rc = -1;
    }
    free(ps);
    free(ss);
    free(want);
    return rc;
}

int plumb_eval(plumb_ctx *c, const plumb_token *tokens, int n, int pos) { return eval(c, tokens, n, pos, 0); }
int plumb_eval_all_logits(plumb_ctx *c, const plumb_token *tokens, int n, int pos) { return eval(c, tokens, n, pos, 1); }

const float *plumb_get_logits(const plumb_ctx *c) {
    return c->n_logits_valid ? c->logits + (size_t)(c->n_logits_valid - 1) * (size_t)c->model->hp.n_vocab : c->logits;
}
const float *plumb_get_logits_ith(const plumb_ctx *c, int i) { return plumb_batch_logits(c, i); }
