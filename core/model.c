/* model.c — model loading (GGUF -> plumb_model), inference contexts and the
 * public entry points that wrap the architecture code in models/. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"

#ifndef PLUMB_GIT_COMMIT
#define PLUMB_GIT_COMMIT "unknown"
#endif

const char *plumb_version(void) { return PLUMB_VERSION " (git " PLUMB_GIT_COMMIT ")"; }

int plumb_default_threads(void) { return omp_get_max_threads(); }

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
            const plumb_layer *L = &m->layers[l];
            const plumb_matrix *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->bq, &L->bk, &L->bv};
            for (int i = 0; i < 7; i++) plumb_dealloc((void *)ws[i]->packed);
            for (int i = 7; i < 10; i++) plumb_dealloc((void *)ws[i]->data);
        }
    }
    free(m->layers);
    plumb_dealloc((void *)m->output_norm.data);
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

const char *plumb_model_weight_type(const plumb_model *m) {
    uint64_t by_type[PLUMB_TYPE_COUNT] = {0};
    for (int l = 0; l < m->hp.n_layer; l++) {
        const plumb_matrix *ws[] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv, &m->layers[l].wo,
                                    &m->layers[l].w_gate, &m->layers[l].w_up, &m->layers[l].w_down};
        for (int i = 0; i < 7; i++) by_type[ws[i]->type] += matrix_bytes(ws[i]);
    }
    int best = 0;
    for (int t = 1; t < PLUMB_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    return plumb_type_name((uint32_t)best);
}

/* ---- contexts ---- */

plumb_ctx_params plumb_ctx_default_params(void) { return (plumb_ctx_params){.n_ctx = 0, .n_threads = 0, .exact = 0}; }

#define N_BATCH 64 /* tokens per forward chunk during prefill */

static float *scratch(plumb_ctx *c, size_t n_floats, const char *what) {
    float *p = plumb_calloc(n_floats * sizeof(float), what);
    if (p) c->bytes += n_floats * sizeof(float);
    return p;
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
    if (c->p.n_ctx < 0) {
        plumb_set_error("context size %d is negative", c->p.n_ctx);
        free(c);
        return NULL;
    }
    c->n_ctx = c->p.n_ctx ? c->p.n_ctx : (hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (c->p.n_threads > 0) omp_set_num_threads(c->p.n_threads);
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->n_batch = N_BATCH;
    size_t kv = (size_t)hp->n_layer * (size_t)c->n_ctx * (size_t)c->kv_dim;
    size_t nb = (size_t)c->n_batch;
    int n_threads = omp_get_max_threads();
    c->k_cache = scratch(c, kv, "KV cache (keys)");
    c->v_cache = scratch(c, kv, "KV cache (values)");
    c->x = scratch(c, nb * (size_t)hp->n_embd, "activations");
    c->xb = scratch(c, nb * (size_t)hp->n_embd, "activations");
    c->q = scratch(c, nb * (size_t)hp->n_embd, "queries");
    c->k = scratch(c, nb * (size_t)c->kv_dim, "keys");
    c->v = scratch(c, nb * (size_t)c->kv_dim, "values");
    c->att_out = scratch(c, nb * (size_t)hp->n_embd, "attention output");
    c->hb = scratch(c, nb * (size_t)hp->n_ff, "ffn hidden");
    c->hb2 = scratch(c, nb * (size_t)hp->n_ff, "ffn hidden");
    c->att = scratch(c, (size_t)n_threads * (size_t)c->n_ctx, "attention scores");
    c->logits = scratch(c, (size_t)hp->n_vocab, "logits");
    c->n_logits = 1;
    /* activation scratch: enough for the widest matrix input at full batch */
    size_t act = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const plumb_layer *L = &m->layers[l];
        const plumb_matrix *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) {
            size_t b = plumb_matmul_act_bytes(ws[i]->type, ws[i]->cols, c->n_batch);
            if (b > act) act = b;
        }
    }
    size_t b = plumb_matmul_act_bytes(m->output.type, m->output.cols, c->n_batch);
    if (b > act) act = b;
    c->act_buf_bytes = act;
    c->act_buf = act ? plumb_alloc(act, "quantized activations") : NULL;
    c->bytes += act;
    if (!c->k_cache || !c->v_cache || !c->x || !c->xb || !c->q || !c->k || !c->v || !c->att_out || !c->hb ||
        !c->hb2 || !c->att || !c->logits || (act && !c->act_buf)) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s (context of %d positions needs %.1f MiB of KV cache)", plumb_last_error(), c->n_ctx,
                 2.0 * (double)kv * 4 / (1 << 20));
        plumb_ctx_free(c);
        plumb_set_error("%s", msg);
        return NULL;
    }
    return c;
}

void plumb_ctx_free(plumb_ctx *c) {
    if (!c) return;
    float *bufs[] = {c->k_cache, c->v_cache, c->x, c->xb, c->q, c->k, c->v, c->att_out, c->hb, c->hb2, c->att, c->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) plumb_dealloc(bufs[i]);
    plumb_dealloc(c->act_buf);
    free(c);
}

int plumb_ctx_n_ctx(const plumb_ctx *c) { return c->n_ctx; }
size_t plumb_ctx_bytes(const plumb_ctx *c) { return c->bytes; }

static int eval(plumb_ctx *c, const plumb_token *tokens, int n, int pos, int all) {
    if (n <= 0) return plumb_set_error("nothing to evaluate");
    if (pos < 0 || pos > c->n_ctx - n)
        return plumb_set_error("context full: positions %d..%d exceed the context size %d (-c)", pos, pos + n - 1, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->model->hp.n_vocab)
            return plumb_set_error("token id %d outside the vocabulary (%d)", tokens[i], c->model->hp.n_vocab);
    if (all && n > c->n_logits) {
        float *nl = plumb_alloc((size_t)n * (size_t)c->model->hp.n_vocab * sizeof(float), "logits");
        if (!nl) return -1;
        plumb_dealloc(c->logits);
        c->logits = nl;
        c->n_logits = n;
    }
    for (int done = 0; done < n; done += c->n_batch) {
        int chunk = n - done < c->n_batch ? n - done : c->n_batch;
        float *out = all ? c->logits + (size_t)done * (size_t)c->model->hp.n_vocab : c->logits;
        int rc = llama_forward(c, tokens + done, chunk, pos + done, out, all);
        if (rc) return rc;
    }
    c->n_logits_valid = all ? n : 1;
    return 0;
}

int plumb_eval(plumb_ctx *c, const plumb_token *tokens, int n, int pos) { return eval(c, tokens, n, pos, 0); }
int plumb_eval_all_logits(plumb_ctx *c, const plumb_token *tokens, int n, int pos) { return eval(c, tokens, n, pos, 1); }

const float *plumb_get_logits(const plumb_ctx *c) {
    return c->logits + (size_t)(c->n_logits_valid - 1) * (size_t)c->model->hp.n_vocab;
}
const float *plumb_get_logits_ith(const plumb_ctx *c, int i) {
    if (i < 0 || i >= c->n_logits_valid) return NULL;
    return c->logits + (size_t)i * (size_t)c->model->hp.n_vocab;
}
