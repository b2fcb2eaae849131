/* backend.h — the interface a GPU plugin (plugins/cuda/libplumb-cuda.so)
 * implements. The core dlopen()s the plugin and never links a GPU library,
 * so one plumb binary runs with or without a GPU. Versioned: the core
 * refuses a plugin built against another PLUMB_BACKEND_ABI.
 *
 * The plugin runs a contiguous range of layers for a batch: the host hands
 * it hidden states x[n][n_embd] with each token's position and sequence
 * (and the sequences' KV block tables, mirroring the host's paged cache),
 * and gets back either the hidden states after those layers or, when the
 * range ends the model, the logits of the tokens that asked for them. */
#ifndef PLUMB_BACKEND_H
#define PLUMB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define PLUMB_BACKEND_ABI 4

typedef struct {
    uint32_t type;           /* plumb_type of data */
    int64_t rows, cols;
    const void *data;        /* host bytes, rows x row_bytes */
    size_t row_bytes;
} plumb_backend_tensor;

typedef struct {
    plumb_backend_tensor attn_norm, ffn_norm, wq, wk, wv, wo, bq, bk, bv, w_gate, w_up, w_down;
} plumb_backend_layer;

typedef struct {
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot, n_vocab, rope_neox;
    float rms_eps, rope_freq_base;
    int n_layers;                    /* layers in this range */
    const plumb_backend_layer *layers;
    int has_head;                    /* also the final norm and output projection */
    plumb_backend_tensor output_norm, output;
    int n_kv_blocks, kv_block, n_seq_max, max_batch;
    plumb_backend_tensor tok_embd;   /* the token embeddings when the range is the whole model (data NULL
                                      * otherwise): what lets decode_chain feed a step's picks to the next */
} plumb_backend_model_desc;

typedef struct {
    int n;                  /* tokens */
    const int *pos, *seq;
    const int8_t *want;     /* tokens that need logits (with has_head) */
    const int *block_table; /* [n_seq_max][max_blocks_per_seq] */
    int max_blocks_per_seq;
    int *argmax;            /* with has_head, when not NULL: each wanted row's greedy pick (index of its
                             * largest logit, the first on ties, as plumb_argmax), found where the logits are */
} plumb_backend_batch;

/* A greedy chain: n sequences, one token each, n_steps decode steps where
 * step 0 evaluates tokens[i] at pos[i] and step s the picks of step s - 1 at
 * pos[i] + s. block_table covers every position of the n_steps. on_step
 * gets each step's picks in order; nonzero stops (the step the device had
 * already started then runs to its end: its keys and values land at the
 * next position, which the caller's sequence does not count). */
typedef struct {
    int n, n_steps;
    const int *tokens, *pos, *seq;
    const int *block_table; /* [n_seq_max][max_blocks_per_seq] */
    int max_blocks_per_seq;
    int (*on_step)(void *user, int step, const int32_t *picks); /* picks: plumb_tokens, so plumb_step_fn fits */
    void *user;
} plumb_backend_chain;

typedef struct plumb_backend_iface {
    int abi;
    const char *name;
    /* device description and memory; 0 or -1 with err */
    int (*device_info)(char *name, size_t name_len, size_t *free_bytes, size_t *total_bytes, char *err, size_t err_len);
    /* uploads weights and allocates the KV cache for a layer range */
    void *(*load)(const plumb_backend_model_desc *d, char *err, size_t err_len);
    void (*unload)(void *handle);
    /* runs the range: x in/out [n][n_embd] (host); with has_head, logits
     * [n_wanted][n_vocab] (host) instead of x out */
    int (*forward)(void *handle, const plumb_backend_batch *b, float *x, float *logits, char *err, size_t err_len);
    size_t (*peak_bytes)(void *handle); /* device memory high-water mark */
    /* device-to-device copy bandwidth, bytes read + written per second (0 on error) */
    double (*copy_bandwidth)(void);
    /* page-locked host memory (NULL if none): the core keeps its logits there, so
     * forward's logits arrive by one DMA instead of a DMA and a host copy */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* runs a greedy chain with each step's picks fed back on the device: the
     * host launches step s + 1 before it reads step s's picks, so the GPU
     * never waits for it. Returns the steps whose picks went to on_step, -1
     * with err on errors, or -2 with the reason in err when this model cannot
     * chain (nothing run; the caller decodes step by step). */
    int (*decode_chain)(void *handle, const plumb_backend_chain *c, char *err, size_t err_len);
} plumb_backend_iface;

typedef const plumb_backend_iface *(*plumb_backend_entry_fn)(void);
#define PLUMB_BACKEND_ENTRY "plumb_cuda_backend_entry"

/* core side: loads the CUDA plugin once; NULL with a reason in why. */
const plumb_backend_iface *plumb_backend_cuda(char *why, size_t why_len);

#endif
