/* model.h — internal model, tokenizer and context structures. */
#ifndef PLUMB_MODEL_H
#define PLUMB_MODEL_H

#include "../include/plumb.h"
#include "../simd/kernels.h"
#include "gguf.h"
#include "topology.h"

/* Vocabulary token types as GGUF stores them (tokenizer.ggml.token_type). */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

typedef struct plumb_bpe plumb_bpe;

typedef struct {
    int n;
    int kind;         /* VOCAB_SPM, VOCAB_BPE, or VOCAB_OTHER (loads, does not tokenize) */
    char model[32];   /* tokenizer.ggml.model */
    plumb_bpe *bpe;   /* VOCAB_BPE: merges, pre-tokenizer */
    int *special;     /* ids of user-defined and control tokens, longest text first */
    int n_special;
    char **text;      /* borrowed from the GGUF metadata */
    int *len;
    float *score;
    int32_t *type;
    int bos, eos, unk;
    int add_bos, add_space_prefix;
    int byte_token[256]; /* id of <0xXX>, or -1 */
    /* open-addressing hash from token text to id */
    int *hash;
    uint32_t hash_mask;
} plumb_vocab;

enum { VOCAB_SPM = 0, VOCAB_BPE = 1, VOCAB_OTHER = 2 };

int vocab_load(plumb_vocab *v, const gguf_file *f);
void vocab_free(plumb_vocab *v);
int vocab_find(const plumb_vocab *v, const char *s, int len); /* -1 if absent */

/* bpe.c */
plumb_bpe *bpe_load(const gguf_file *f);
void bpe_free(plumb_bpe *b);
int bpe_tokenize(const plumb_vocab *v, const plumb_bpe *b, const char *text, int len, void (*emit)(void *, int), void *ctx);
int bpe_decode(const plumb_bpe *b, const char *s, int n, char *out, int cap);
const char *bpe_pre_name(const plumb_bpe *b);

typedef struct {
    plumb_matrix attn_norm, ffn_norm;       /* [n_embd] (F32 vectors) */
    plumb_matrix wq, wk, wv, wo;            /* [n_embd -> n_embd / kv_dim], [n_embd -> n_embd] */
    plumb_matrix bq, bk, bv;                /* optional biases (qwen2) */
    plumb_matrix w_gate, w_up, w_down;      /* [n_embd -> n_ff], [n_ff -> n_embd] */
} plumb_layer;

/* A layer's seven weight matrices, in one fixed order: loading (repacking),
 * --numa mirror, scratch sizing, statistics and freeing all walk this list. */
#define PLUMB_LAYER_MATRICES 7
static inline void plumb_layer_matrices(const plumb_layer *L, plumb_matrix *out[PLUMB_LAYER_MATRICES]) {
    plumb_layer *l = (plumb_layer *)L;
    plumb_matrix *ws[PLUMB_LAYER_MATRICES] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
    for (int i = 0; i < PLUMB_LAYER_MATRICES; i++) out[i] = ws[i];
}

struct plumb_model {
    gguf_file *file;
    char *path;
    plumb_hparams hp;
    plumb_vocab vocab;
    plumb_matrix tok_embd;   /* [n_vocab rows of n_embd] */
    plumb_matrix output_norm;
    plumb_matrix output;     /* == tok_embd when tied */
    plumb_layer *layers;
    int vocab_only;
};

/* Paged KV cache: positions live in fixed-size blocks taken from one pool;
 * each sequence has a table of its blocks, so sequences of different
 * lengths share the memory without fragmenting it. */
#define PLUMB_KV_BLOCK 16

typedef struct {
    int open;
    int n_pos;     /* positions written (the sequence's length) */
    int n_blocks;
    int *blocks;   /* block ids, in position order */
} plumb_seq;

struct plumb_ctx {
    plumb_model *model;
    plumb_ctx_params p;
    int n_ctx;       /* KV positions in all, across sequences */
    int kv_dim;
    int n_kv_blocks;
    /* The KV cache of the layers the host runs, in kv_parts parts (one per
     * NUMA node under --numa distribute|mirror, else one): part i holds KV
     * heads kv_head0[i]..kv_head0[i+1]-1 as [block][gpu_first][PLUMB_KV_BLOCK]
     * [its heads x head_dim] at kv_part_off[i] floats into the pool, and
     * threads kv_thread0[i]..kv_thread0[i+1]-1 attend over it. */
    float *k_pool, *v_pool;
    void *k_mem, *v_mem; /* the allocations the pools are page-aligned inside */
    int kv_parts, head_dim;
    int kv_head0[PLUMB_MAX_NODES + 1], kv_thread0[PLUMB_MAX_NODES + 1];
    size_t kv_part_off[PLUMB_MAX_NODES];
    int *free_blocks, n_free;
    int n_seq_max;
    plumb_seq *seqs;
    /* scratch for a batch of up to n_batch tokens */
    int n_batch;
    float *x, *xb, *q, *k, *v, *att_out, *hb, *hb2, *att; /* see llama.c */
    const float **kv_rows; /* per thread: 2 x n_ctx row pointers (keys, values) for attention */
    float *logits;      /* [rows][n_vocab] */
    int n_logits;       /* rows the logits buffer holds */
    int n_logits_valid; /* rows the last eval wrote */
    int chain_off;      /* plumb_decode_greedy found the GPU cannot chain this model (decodes step by step) */
    int *argmax;        /* [n_logits] greedy picks of those rows, when the GPU made them */
    int argmax_valid;   /* argmax holds the last eval's picks */
    /* GPU offload: layers [gpu_first, n_layer) run in the CUDA plugin */
    const struct plumb_backend_iface *gpu;
    void *gpu_handle;
    int gpu_first, gpu_head;
    char gpu_status[512];
    int *block_table;   /* [n_seq_max][n_kv_blocks], sent with each GPU batch */
    void *act_buf;      /* quantized activations */
    size_t act_buf_bytes;
    size_t bytes;
};

/* The KV cache part holding KV head kvh. */
static inline int kv_part_of(const plumb_ctx *c, int kvh) {
    int part = 0;
    while (kvh >= c->kv_head0[part + 1]) part++;
    return part;
}

/* Keys (or values) of KV heads [kv_head0[part], ...) of the part at sequence
 * position pos, layer l: contiguous, head_dim floats a head. */
static inline float *kv_part_at(const plumb_ctx *c, float *pool, int part, const plumb_seq *s, int l, int pos) {
    const int block = s->blocks[pos / PLUMB_KV_BLOCK];
    const size_t width = (size_t)(c->kv_head0[part + 1] - c->kv_head0[part]) * (size_t)c->head_dim;
    return pool + c->kv_part_off[part] + (((size_t)block * c->gpu_first + (size_t)l) * PLUMB_KV_BLOCK + (size_t)(pos % PLUMB_KV_BLOCK)) * width;
}

/* The sequences' block lists as the GPU takes them: block_table[seq][j] */
static inline void fill_block_table(plumb_ctx *c) {
    for (int i = 0; i < c->n_seq_max; i++)
        for (int j = 0; j < c->seqs[i].n_blocks; j++) c->block_table[(size_t)i * c->n_kv_blocks + j] = c->seqs[i].blocks[j];
}

/* Key (or value) vector of KV head kvh at sequence position pos, layer l. */
static inline float *kv_head_at(const plumb_ctx *c, float *pool, const plumb_seq *s, int l, int pos, int kvh) {
    const int part = kv_part_of(c, kvh);
    return kv_part_at(c, pool, part, s, l, pos) + (size_t)(kvh - c->kv_head0[part]) * (size_t)c->head_dim;
}

/* Architecture hooks (models/llama.c). */
int llama_load_hparams(plumb_model *m);
int llama_bind_tensors(plumb_model *m);
/* Runs n <= c->n_batch tokens, token t of sequence seq[t] at position pos[t]
 * (blocks already allocated); for each t with want[t], writes a row of
 * logits to logits_out, in batch order. */
int llama_forward(plumb_ctx *c, const plumb_token *tokens, const int *pos, const int *seq, int n, const int8_t *want, float *logits_out, int *argmax_out);

#endif
