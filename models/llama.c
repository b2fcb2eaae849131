/* llama.c — the Llama-family transformer (Llama 2/3, TinyLlama, Mistral,
 * SmolLM, Qwen2): hyper-parameters from GGUF metadata, tensors by GGUF name,
 * and the forward pass, readable top to bottom. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/backend.h"
#include "../core/model.h"
#include "../core/util.h"

/* ---- hyper-parameters ---- */

static int get_u32(plumb_model *m, const char *suffix, int required, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    uint32_t v;
    int rc = gguf_get_u32(m->file, key, &v);
    if (rc < 0) return -1;
    if (rc == 0) return required ? plumb_set_error("missing metadata '%s'", key) : 0;
    if (v > (1u << 30)) return plumb_set_error("metadata '%s' = %u is implausible", key, v);
    *out = (int)v;
    return 0;
}

static int get_f32(plumb_model *m, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    return gguf_get_f32(m->file, key, out) < 0 ? -1 : 0;
}

int llama_load_hparams(plumb_model *m) {
    plumb_hparams *hp = &m->hp;
    hp->n_ctx_train = 0;
    hp->rms_eps = 1e-5f;
    hp->rope_freq_base = 10000.0f;
    if (get_u32(m, "context_length", 0, &hp->n_ctx_train) || get_u32(m, "embedding_length", 1, &hp->n_embd) ||
        get_u32(m, "block_count", 1, &hp->n_layer) || get_u32(m, "feed_forward_length", 1, &hp->n_ff) ||
        get_u32(m, "attention.head_count", 1, &hp->n_head))
        return -1;
    hp->n_head_kv = hp->n_head;
    if (get_u32(m, "attention.head_count_kv", 0, &hp->n_head_kv)) return -1;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0)
        return plumb_set_error("model dimensions must be positive");
    if (hp->n_embd % hp->n_head) return plumb_set_error("embedding_length %d not divisible by head_count %d", hp->n_embd, hp->n_head);
    if (hp->n_head % hp->n_head_kv) return plumb_set_error("head_count %d not divisible by head_count_kv %d", hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = hp->head_dim;
    if (get_u32(m, "rope.dimension_count", 0, &hp->n_rot) || get_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps) ||
        get_f32(m, "rope.freq_base", &hp->rope_freq_base))
        return -1;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2) return plumb_set_error("rope.dimension_count %d invalid for head size %d", hp->n_rot, hp->head_dim);
    if (!(hp->rms_eps > 0) || !(hp->rope_freq_base > 0)) return plumb_set_error("rms epsilon and rope freq_base must be positive");
    hp->rope_neox = strcmp(hp->arch, "qwen2") == 0; /* llama.cpp: LLM_ARCH_QWEN2 uses NEOX rope */
    return 0;
}

/* ---- tensors ---- */

static int bind(plumb_model *m, plumb_matrix *w, const char *name, int64_t cols, int64_t rows, int required) {
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    memset(w, 0, sizeof *w);
    if (!t) return required ? plumb_set_error("missing tensor '%s'", name) : 0;
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return plumb_set_error("tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                               (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                               (long long)cols, (long long)rows);
    const plumb_type_traits *tr = plumb_type_get(t->type);
    if (!tr->runnable) return plumb_set_error("tensor '%s' has type %s, which plumb does not run", name, tr->name);
    *w = (plumb_matrix){t->type, rows, cols, (size_t)plumb_type_row_bytes(t->type, (uint64_t)cols), t->data, t->name, NULL, 0, {NULL}};
    return 0;
}

/* Norm weights and biases are small: keep them as plain floats. */
static int bind_vector(plumb_model *m, plumb_matrix *w, const char *name, int64_t n, int required) {
    if (bind(m, w, name, n, 1, required)) return -1;
    if (!w->data) return 0;
    float *f = plumb_alloc((size_t)n * sizeof(float), name);
    if (!f) return -1;
    plumb_matrix_row_f32(w, 0, f);
    *w = (plumb_matrix){PLUMB_TYPE_F32, 1, n, (size_t)n * 4, f, w->name, NULL, 0, {NULL}};
    return 0;
}

/* Interleaved copies of the matrices the fast kernels read 8 rows at a time
 * (PLUMB_REPACK=0 turns this off, for comparisons); the weights come from
 * the mapped GGUF file, so the originals' pages are given back. */
static int repack_one(plumb_matrix *w) {
    if (plumb_matrix_repack(w)) return -1;
    plumb_matrix_release_source(w);
    return 0;
}

static int repack_matrices(plumb_model *m) {
    const char *env = getenv("PLUMB_REPACK");
    if (env && !strcmp(env, "0")) return 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        plumb_matrix *ws[PLUMB_LAYER_MATRICES];
        plumb_layer_matrices(&m->layers[l], ws);
        for (int i = 0; i < PLUMB_LAYER_MATRICES; i++)
            if (repack_one(ws[i])) return -1;
    }
    return repack_one(&m->output);
}

int llama_bind_tensors(plumb_model *m) {
    plumb_hparams *hp = &m->hp;
    const gguf_tensor *emb = gguf_find_tensor(m->file, "token_embd.weight");
    if (!emb) return plumb_set_error("missing tensor 'token_embd.weight'");
    hp->n_vocab = (int)emb->ne[1];
    if (m->vocab.n && m->vocab.n != hp->n_vocab)
        return plumb_set_error("vocabulary has %d tokens but token_embd.weight has %d rows", m->vocab.n, hp->n_vocab);
    const int64_t d = hp->n_embd, kv = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    if (bind(m, &m->tok_embd, "token_embd.weight", d, hp->n_vocab, 1)) return -1;
    if (bind_vector(m, &m->output_norm, "output_norm.weight", d, 1)) return -1;
    if (bind(m, &m->output, "output.weight", d, hp->n_vocab, 0)) return -1;
    if (!m->output.data) {
        m->output = m->tok_embd;
        hp->tied_output = 1;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof(plumb_layer));
    if (!m->layers) return plumb_set_error("out of memory");
    for (int l = 0; l < hp->n_layer; l++) {
        plumb_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        if (bind_vector(m, &L->attn_norm, NAME("attn_norm.weight"), d, 1) || bind_vector(m, &L->ffn_norm, NAME("ffn_norm.weight"), d, 1) ||
            bind(m, &L->wq, NAME("attn_q.weight"), d, d, 1) || bind(m, &L->wk, NAME("attn_k.weight"), d, kv, 1) ||
            bind(m, &L->wv, NAME("attn_v.weight"), d, kv, 1) || bind(m, &L->wo, NAME("attn_output.weight"), d, d, 1) ||
            bind(m, &L->w_gate, NAME("ffn_gate.weight"), d, ff, 1) || bind(m, &L->w_up, NAME("ffn_up.weight"), d, ff, 1) ||
            bind(m, &L->w_down, NAME("ffn_down.weight"), ff, d, 1) || bind_vector(m, &L->bq, NAME("attn_q.bias"), d, 0) ||
            bind_vector(m, &L->bk, NAME("attn_k.bias"), kv, 0) || bind_vector(m, &L->bv, NAME("attn_v.bias"), kv, 0))
            return -1;
#undef NAME
        if (L->bq.data) hp->has_qkv_bias = 1;
    }
    return repack_matrices(m);
}

/* ---- forward pass ---- */

/* 1 / rms of x (+ add, when given: the residual not yet stored), in double
 * (the sum of squares of a wide vector loses bits in float) over eight
 * lanes in a fixed order: the same answer whichever thread computes it. */
static float rms_scale(const float *x, const float *add, int n, float eps) {
    double lane[8] = {0}, ss = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            const float v = add ? x[i + j] + add[i + j] : x[i + j];
            lane[j] += (double)v * v;
        }
    for (; i < n; i++) {
        const float v = add ? x[i] + add[i] : x[i];
        ss += (double)v * v;
    }
    for (int j = 0; j < 8; j++) ss += lane[j];
    return (float)(1.0 / sqrt(ss / n + eps));
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    const float scale = rms_scale(x, NULL, n, eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* Rotates the first n_rot dims of each head of vec by the angles pos * freq_i.
 * cs/sn hold cos/sin for the n_rot/2 frequencies of this position. */
static void rope(float *vec, int n_heads, int head_dim, int n_rot, int neox, const float *cs, const float *sn) {
    for (int h = 0; h < n_heads; h++) {
        float *v = vec + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

static void add_bias(float *x, const plumb_matrix *b, int n_tok) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < b->cols; i++) x[t * b->cols + i] += bv[i];
}

/* this thread's part [lo, hi) of n things */
#define PART_LO(n, me, nt) ((int)((long)(n) * (me) / (nt)))
#define PART_HI(n, me, nt) ((int)((long)(n) * ((me) + 1) / (nt)))

/* softmax(q . K / sqrt(hd)) V for query heads [h0, h1) of token t:
 * att_out[t][h*hd ..]. The heads of one KV group go through attend_group
 * together (each cached row read once for all of them). *rows_of caches
 * which (token, KV head) the thread's row pointers hold. */
static void attend_heads(plumb_ctx *c, int l, int t, int h0, int h1, const int *pos, const int *seq, int me, int *rows_of) {
    const plumb_hparams *hp = &c->model->hp;
    const plumb_kernels *kn = plumb_kernels_active();
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv, len = pos[t] + 1;
    float *att = c->att + (size_t)me * c->n_ctx * group;
    const float **krow = c->kv_rows + (size_t)me * 2 * c->n_ctx, **vrow = krow + c->n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = h0; h < h1;) {
        const int kvh = h / group, run = (h1 < (kvh + 1) * group ? h1 : (kvh + 1) * group) - h; /* heads left in h's group */
        if (*rows_of != t * hp->n_head_kv + kvh) {
            const plumb_seq *s = &c->seqs[seq[t]];
            for (int p = 0; p < len; p++) {
                krow[p] = kv_head_at(c, c->k_pool, s, l, p, kvh);
                vrow[p] = kv_head_at(c, c->v_pool, s, l, p, kvh);
            }
            *rows_of = t * hp->n_head_kv + kvh;
        }
        const float *q = c->q + (size_t)t * hp->n_embd + (size_t)h * hd;
        float *out = c->att_out + (size_t)t * hp->n_embd + (size_t)h * hd;
        if (run > 1 && kn->attend_group) kn->attend_group(hd, len, run, q, krow, vrow, scale, att, out);
        else
            for (int i = 0; i < run; i++) kn->attend(hd, len, q + (size_t)i * hd, krow, vrow, scale, att, out + (size_t)i * hd);
        h += run;
    }
}

/* Causal attention for a batch: token t of sequence seq[t] at position
 * pos[t] attends to that sequence's positions 0..pos[t] through its block
 * table. With one KV part: parallel over (token, head), heads of one KV group
 * next to each other on a thread (static schedule) so they share the cached
 * rows. With a part per NUMA node: each node's threads take the query heads
 * of their part's KV heads, split evenly, for every token, so they read
 * only their node's memory. */
static void attention(plumb_ctx *c, int l, int n, const int *pos, const int *seq) {
    const plumb_hparams *hp = &c->model->hp;
    const int group = hp->n_head / hp->n_head_kv;
#pragma omp parallel
    {
        const int me = omp_get_thread_num();
        int rows_of = -1;
        if (c->kv_parts > 1 && omp_get_num_threads() == c->kv_thread0[c->kv_parts]) {
            int part = 0;
            while (me >= c->kv_thread0[part + 1]) part++;
            const int tn = c->kv_thread0[part + 1] - c->kv_thread0[part], i = me - c->kv_thread0[part];
            const int h0 = c->kv_head0[part] * group, nh = (c->kv_head0[part + 1] - c->kv_head0[part]) * group;
            for (int t = 0; t < n; t++) attend_heads(c, l, t, h0 + PART_LO(nh, i, tn), h0 + PART_HI(nh, i, tn), pos, seq, me, &rows_of);
        } else { /* this thread's run of the (token, head) pairs, a token's heads at a time */
            const int nt = omp_get_num_threads(), end = PART_HI(n * hp->n_head, me, nt);
            for (int th = PART_LO(n * hp->n_head, me, nt); th < end;) {
                const int t = th / hp->n_head, h = th % hp->n_head, stop = end - t * hp->n_head < hp->n_head ? end - t * hp->n_head : hp->n_head;
                attend_heads(c, l, t, h, stop, pos, seq, me, &rows_of);
                th += stop - h;
            }
        }
    }
}

/* ---- one token, one parallel region ---- */

/* A token's pass over the host's layers is five parallel loops a layer;
 * a region for each costs a fork and a join (3 us for two threads, more for
 * sixteen) and leaves the norms, RoPE and residual adds to one thread while
 * the others wait in the next fork. For a single token over repacked
 * weights one region runs the whole pass: the threads go through the
 * layers together and meet at spin barriers (plumb_team), and the small
 * steps are split between them. The arithmetic is the same as the loop
 * in llama_forward, so the logits are too, bit for bit (tests/test_model.c).
 * PLUMB_TOKEN_REGION=0 turns it off, for comparisons. */

/* The next product's input, in its activation form: x, plus add (the
 * residual still pending; the sum goes to x_out, which add needs), RMS-
 * normalized with w when w is given, quantized block by block. A
 * prologue: each thread its blocks. */
typedef struct {
    const float *x, *add, *w;
    float *x_out;
    int n;
    float eps;
    uint32_t type; /* the type of the rows that read it */
    void *act;
} act_prep;

static void prep_blocks(int64_t first, int64_t count, void *ctx) {
    const act_prep *a = ctx;
    const int64_t bs = plumb_act_block(a->type);
    const size_t block_bytes = plumb_matmul_act_bytes(a->type, bs, 1);
    const float scale = a->w ? rms_scale(a->x, a->add, a->n, a->eps) : 1.0f;
    float blk[QK_K];
    for (int64_t b = first; b < first + count; b++) {
        const float *x = a->x + b * bs;
        if (a->add) { /* (separate loops, each simple enough to vectorize) */
            const float *add = a->add + b * bs;
            float *x_out = a->x_out + b * bs;
            for (int64_t i = 0; i < bs; i++) x_out[i] = x[i] + add[i];
            x = x_out;
        }
        if (a->w) {
            const float *w = a->w + b * bs;
            for (int64_t i = 0; i < bs; i++) blk[i] = x[i] * scale * w[i];
            x = blk;
        }
        plumb_quantize_act(a->type, x, bs, (uint8_t *)a->act + (size_t)b * block_bytes);
    }
}

static plumb_prologue prep(act_prep *a, const float *x, const float *add, float *x_out, const float *w, int n, const plumb_matrix *W, plumb_ctx *c) {
    *a = (act_prep){x, add, w, x_out, n, c->model->hp.rms_eps, W->type, c->act_buf};
    return (plumb_prologue){prep_blocks, n / plumb_act_block(W->type), a};
}

static int team_wanted(void) { /* (read every step: tests switch it) */
    const char *e = getenv("PLUMB_TOKEN_REGION");
    return !(e && !strcmp(e, "0"));
}

/* whether the team pass can run this step: one token, integer kernels over
 * repacked weights for every product, one KV part */
static int team_fits(const plumb_ctx *c, int n) {
    const plumb_model *m = c->model;
    const plumb_hparams *hp = &m->hp;
    if (n != 1 || c->p.exact || c->kv_parts != 1 || c->gpu_first < 1 || hp->n_ff < hp->n_embd || !team_wanted()) return 0;
    for (int l = 0; l < c->gpu_first; l++) {
        const plumb_layer *L = &m->layers[l];
        const plumb_matrix *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if (!plumb_team_can_run(all[i]) || hp->n_embd % plumb_act_block(all[i]->type) || hp->n_ff % plumb_act_block(all[i]->type)) return 0;
        if (L->wk.type != L->wq.type || L->wv.type != L->wq.type || L->w_up.type != L->w_gate.type) return 0;
    }
    return c->gpu_handle || plumb_team_can_run(&m->output);
}

/* biases, RoPE and the cache writes of thread me's heads */
static void team_rope(plumb_ctx *c, int l, int pos, const plumb_seq *s, const float *cs, const float *sn, int me, int nt) {
    const plumb_layer *L = &c->model->layers[l];
    const plumb_hparams *hp = &c->model->hp;
    const int hd = hp->head_dim;
    for (int h = PART_LO(hp->n_head, me, nt); h < PART_HI(hp->n_head, me, nt); h++) {
        float *q = c->q + (size_t)h * hd;
        for (int i = 0; L->bq.data && i < hd; i++) q[i] += ((const float *)L->bq.data)[h * hd + i];
        rope(q, 1, hd, hp->n_rot, hp->rope_neox, cs, sn);
    }
    for (int h = PART_LO(hp->n_head_kv, me, nt); h < PART_HI(hp->n_head_kv, me, nt); h++) {
        float *k = c->k + (size_t)h * hd, *v = c->v + (size_t)h * hd;
        for (int i = 0; L->bk.data && i < hd; i++) k[i] += ((const float *)L->bk.data)[h * hd + i];
        for (int i = 0; L->bv.data && i < hd; i++) v[i] += ((const float *)L->bv.data)[h * hd + i];
        rope(k, 1, hd, hp->n_rot, hp->rope_neox, cs, sn);
        memcpy(kv_part_at(c, c->k_pool, 0, s, l, pos) + (size_t)h * hd, k, sizeof(float) * (size_t)hd);
        memcpy(kv_part_at(c, c->v_pool, 0, s, l, pos) + (size_t)h * hd, v, sizeof(float) * (size_t)hd);
    }
}

/* The host's layers (and the head, unless the GPU runs layers after them)
 * for one token, run by every thread of the team. The residual stream
 * alternates between c->x and a second buffer: a residual add is folded
 * into the next product's prologue, whose threads all read the old stream
 * while each writes its part of the new one. It is written 2 x layers
 * times, so it ends in c->x, as llama_forward leaves it. */
static void team_pass(plumb_ctx *c, plumb_team *tm, int me, int pos, int seq, int want, float *logits_out, const float *cs, const float *sn) {
    const plumb_model *m = c->model;
    const plumb_hparams *hp = &m->hp;
    const int d = hp->n_embd, ff = hp->n_ff, nt = plumb_team_size(tm);
    float *xcur = c->x, *xalt = c->hb2;
    const float *pending = NULL; /* the block output not yet added to xcur */
    act_prep a;
    for (int l = 0; l < c->gpu_first; l++) {
        const plumb_layer *L = &m->layers[l];
        /* q, k, v = attn_norm(x) Wq, Wk, Wv                     q: [d], k, v: [kv_dim] */
        const plumb_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->k, c->v};
        plumb_prologue pre = prep(&a, xcur, pending, pending ? xalt : NULL, L->attn_norm.data, d, &L->wq, c);
        plumb_team_matmul_n(tm, me, qkv, 3, c->act_buf, qkv_out, &pre);
        if (pending) {
            float *t = xcur;
            xcur = xalt, xalt = t;
        }
        team_rope(c, l, pos, &c->seqs[seq], cs, sn, me, nt);
        plumb_team_barrier(tm);
        /* att_out = attention over the sequence's cache             [d] */
        int rows_of = -1;
        attend_heads(c, l, 0, PART_LO(hp->n_head, me, nt), PART_HI(hp->n_head, me, nt), &pos, &seq, me, &rows_of);
        plumb_team_barrier(tm); /* (the blocks a thread quantizes next are not all its heads') */
        /* xb = att_out Wo                                               [d] */
        pre = prep(&a, c->att_out, NULL, NULL, NULL, d, &L->wo, c);
        plumb_team_matmul_n(tm, me, (const plumb_matrix *const[]){&L->wo}, 1, c->act_buf, (float *const[]){c->xb}, &pre);
        /* x += xb; hb = silu(ffn_norm(x) Wgate) * (ffn_norm(x) Wup)    [ff] */
        pre = prep(&a, xcur, c->xb, xalt, L->ffn_norm.data, d, &L->w_gate, c);
        plumb_team_swiglu(tm, me, &L->w_gate, &L->w_up, c->act_buf, c->hb, &pre);
        float *t = xcur;
        xcur = xalt, xalt = t;
        /* xb = hb Wdown                                                 [d] */
        pre = prep(&a, c->hb, NULL, NULL, NULL, ff, &L->w_down, c);
        plumb_team_matmul_n(tm, me, (const plumb_matrix *const[]){&L->w_down}, 1, c->act_buf, (float *const[]){c->xb}, &pre);
        pending = c->xb;
    }
    /* the last residual add into c->x; logits = output_norm(x) Wout */
    if (!c->gpu_handle && want) {
        plumb_prologue pre = prep(&a, xcur, pending, xalt, m->output_norm.data, d, &m->output, c);
        plumb_team_matmul_n(tm, me, (const plumb_matrix *const[]){&m->output}, 1, c->act_buf, (float *const[]){logits_out}, &pre);
    } else {
        /* (each thread its own part: were xcur c->x, in place would be safe) */
        for (int i = PART_LO(d, me, nt); i < PART_HI(d, me, nt); i++) c->x[i] = xcur[i] + pending[i];
        plumb_team_barrier(tm);
    }
}

/* 1 when the team ran the pass (logits written unless the GPU runs layers
 * after the host's), 0 when this step needs llama_forward's loop */
static int team_forward(plumb_ctx *c, int n, const int *pos, const int *seq, const int8_t *want, float *logits_out, const float *cs, const float *sn) {
    if (!team_fits(c, n)) return 0;
    const int T = omp_get_max_threads();
    plumb_team *tm = plumb_team_new(T);
    if (!tm) return 0;
    int ran = 0;
#pragma omp parallel num_threads(T)
    if (omp_get_num_threads() == T) { /* (else every thread skips: the caller's loop runs) */
        team_pass(c, tm, omp_get_thread_num(), pos[0], seq[0], want[0], logits_out, cs, sn);
        if (omp_get_thread_num() == 0) ran = 1;
    }
    plumb_team_free(tm);
    return ran;
}

/* argmax_out: where the GPU, when it computes the head, puts each wanted
 * row's greedy pick (left alone otherwise; the caller knows which) */
int llama_forward(plumb_ctx *c, const plumb_token *tokens, const int *pos, const int *seq, int n, const int8_t *want, float *logits_out, int *argmax_out) {
    const plumb_model *m = c->model;
    const plumb_hparams *hp = &m->hp;
    const int d = hp->n_embd, kv_dim = c->kv_dim, exact = c->p.exact;
    float cs[n][hp->n_rot / 2], sn[n][hp->n_rot / 2];

    /* x[t] = token embedding                                 x: [n][d] */
    for (int t = 0; t < n; t++) plumb_matrix_row_f32(&m->tok_embd, tokens[t], c->x + (size_t)t * d);

    /* RoPE angles for each token's position (the same for every layer; the
     * GPU computes its own) */
    for (int t = 0; t < n && c->gpu_first > 0; t++)
        for (int i = 0; i < hp->n_rot / 2; i++) {
            double theta = (double)pos[t] * pow((double)hp->rope_freq_base, -2.0 * i / hp->n_rot);
            cs[t][i] = (float)cos(theta);
            sn[t][i] = (float)sin(theta);
        }

    const int team_ran = team_forward(c, n, pos, seq, want, logits_out, cs[0], sn[0]);
    for (int l = 0; l < c->gpu_first && !team_ran; l++) {
        const plumb_layer *L = &m->layers[l];

        /* attention block */
        for (int t = 0; t < n; t++) rmsnorm(c->xb + (size_t)t * d, c->x + (size_t)t * d, L->attn_norm.data, d, hp->rms_eps);
        /* q: [n][d], k and v: [n][kv_dim], one pass over the input */
        const plumb_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {c->q, c->k, c->v};
        plumb_matmul_n(qkv, 3, c->xb, n, qkv_out, c->act_buf, exact);
        add_bias(c->q, &L->bq, n);
        add_bias(c->k, &L->bk, n);
        add_bias(c->v, &L->bv, n);
        for (int t = 0; t < n; t++) {
            rope(c->q + (size_t)t * d, hp->n_head, hp->head_dim, hp->n_rot, hp->rope_neox, cs[t], sn[t]);
            rope(c->k + (size_t)t * kv_dim, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_neox, cs[t], sn[t]);
            /* this token's key and value go to its sequence's cache */
            const plumb_seq *s = &c->seqs[seq[t]];
            for (int part = 0; part < c->kv_parts; part++) { /* each part's heads are contiguous in k and v */
                const size_t h0 = (size_t)c->kv_head0[part] * hp->head_dim, w = (size_t)(c->kv_head0[part + 1] - c->kv_head0[part]) * hp->head_dim;
                memcpy(kv_part_at(c, c->k_pool, part, s, l, pos[t]), c->k + (size_t)t * kv_dim + h0, sizeof(float) * w);
                memcpy(kv_part_at(c, c->v_pool, part, s, l, pos[t]), c->v + (size_t)t * kv_dim + h0, sizeof(float) * w);
            }
        }
        attention(c, l, n, pos, seq);                                   /* att_out: [n][d] */
        plumb_matmul(&L->wo, c->att_out, n, c->xb, c->act_buf, exact); /* xb: [n][d] */
        for (size_t i = 0; i < (size_t)n * d; i++) c->x[i] += c->xb[i];

        /* feed-forward block: down(silu(gate(x)) * up(x)) */
        for (int t = 0; t < n; t++) rmsnorm(c->xb + (size_t)t * d, c->x + (size_t)t * d, L->ffn_norm.data, d, hp->rms_eps);
        plumb_matmul_swiglu(&L->w_gate, &L->w_up, c->xb, n, c->hb, c->hb2, c->act_buf, exact); /* hb: [n][ff] */
        plumb_matmul(&L->w_down, c->hb, n, c->xb, c->act_buf, exact); /* xb: [n][d] */
        for (size_t i = 0; i < (size_t)n * d; i++) c->x[i] += c->xb[i];
    }

    /* the remaining layers on the GPU: hidden states cross over, and come
     * back (or, when the GPU has the head too, the logits do) */
    if (c->gpu_handle) {
        fill_block_table(c);
        plumb_backend_batch gb = {n, pos, seq, want, c->block_table, c->n_kv_blocks, c->gpu_head ? argmax_out : NULL};
        char err[512];
        if (c->gpu->forward(c->gpu_handle, &gb, c->x, logits_out, err, sizeof err)) return plumb_set_error("GPU: %s", err);
        if (c->gpu_head) return 0;
    }

    /* final norm and output projection, for the tokens that want logits */
    if (team_ran && !c->gpu_handle) return 0; /* (the team ran the head; after GPU layers the host's head runs here) */
    int n_out = 0;
    for (int t = 0; t < n; t++)
        if (want[t]) rmsnorm(c->xb + (size_t)(n_out++) * d, c->x + (size_t)t * d, m->output_norm.data, d, hp->rms_eps);
    if (n_out) plumb_matmul(&m->output, c->xb, n_out, logits_out, c->act_buf, exact); /* [n_out][n_vocab] */
    return 0;
}
