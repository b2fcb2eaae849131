/* plumb.h — the public API of libplumb: load a GGUF model, tokenize, run the
 * forward pass, sample. Every call that can fail returns NULL or a negative
 * number, and plumb_last_error() says why (per thread). */
#ifndef PLUMB_H
#define PLUMB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLUMB_VERSION "0.1.0"

typedef int32_t plumb_token;
typedef struct plumb_model plumb_model;
typedef struct plumb_ctx plumb_ctx;
typedef struct plumb_sampler plumb_sampler;

const char *plumb_version(void);     /* "0.1.0 (git abc1234)" */
const char *plumb_last_error(void);
int plumb_default_threads(void);     /* threads a context uses when n_threads is 0: physical cores */

/* ---- model ---- */

typedef struct {
    char arch[32];          /* general.architecture: "llama", "qwen2", ... */
    int n_vocab;
    int n_ctx_train;        /* context length the model was trained with */
    int n_embd;             /* model width */
    int n_layer;
    int n_head, n_head_kv;  /* query heads, key/value heads (GQA when fewer) */
    int head_dim;           /* n_embd / n_head */
    int n_ff;               /* feed-forward hidden width */
    int n_rot;              /* dimensions of each head that RoPE rotates */
    float rms_eps;
    float rope_freq_base;
    int rope_neox;          /* 1: rotate-half pairs (i, i+d/2); 0: adjacent pairs */
    int tied_output;        /* output projection reuses token_embd */
    int has_qkv_bias;
} plumb_hparams;

plumb_model *plumb_model_load(const char *path);
/* Tokenizer only (any architecture, no tensors needed): tokenize/detokenize work, eval does not. */
plumb_model *plumb_model_load_vocab(const char *path);
void plumb_model_free(plumb_model *m);
const plumb_hparams *plumb_model_hparams(const plumb_model *m);
uint64_t plumb_model_n_params(const plumb_model *m);
uint64_t plumb_model_weight_bytes(const plumb_model *m); /* bytes of all tensors */
/* Bytes of weights one decode step reads (every matrix once; the embedding
 * table contributes a single row). The decode speed limit is bandwidth / this. */
uint64_t plumb_model_bytes_per_token(const plumb_model *m);
/* Multiply-adds one token's pass through the layers' matrices takes (their
 * weights; the embedding lookup, the output head and attention left out):
 * what a prefill token costs, to set against the CPU's compute peak. */
uint64_t plumb_model_layer_macs_per_token(const plumb_model *m);
const char *plumb_model_weight_type(const plumb_model *m); /* type of most matrix bytes */

/* ---- tokenizer ---- */

int plumb_n_vocab(const plumb_model *m);
plumb_token plumb_token_bos(const plumb_model *m); /* -1 if none */
plumb_token plumb_token_eos(const plumb_model *m);
int plumb_add_bos(const plumb_model *m); /* whether prompts get BOS by default */
/* Tokenizes len bytes of text into out (room for max_out). Returns the
 * number of tokens, or -1 with an error (including "needs N tokens"). */
int plumb_tokenize(const plumb_model *m, const char *text, size_t len, int add_bos, plumb_token *out, int max_out);
/* Same, and with parse_special the text's control tokens ("<|im_start|>", ...)
 * become their ids instead of being tokenized as text. */
int plumb_tokenize_special(const plumb_model *m, const char *text, size_t len, int add_bos, int parse_special, plumb_token *out, int max_out);
/* Text of one token (bytes, not necessarily whole UTF-8 characters); control
 * tokens give "". Returns the length, or -1 if buf is too small / id invalid. */
int plumb_token_to_piece(const plumb_model *m, plumb_token t, char *buf, int size);
const char *plumb_token_text(const plumb_model *m, plumb_token t); /* raw vocab string */
/* tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE), "" if none */
const char *plumb_tokenizer_kind(const plumb_model *m);

/* ---- chat templates ---- */

typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} plumb_chat_message;

/* The family of the model's tokenizer.chat_template ("chatml", "llama3",
 * "llama2", "llama2-sys", "mistral", "phi3", "gemma", "zephyr"), or NULL when
 * there is none or it is not recognised; *tmpl gets the raw template. */
const char *plumb_chat_template_detect(const plumb_model *m, const char **tmpl);
const char *const *plumb_chat_templates(void); /* NULL-terminated names */
/* The conversation as prompt text (malloc'd; NULL + error for an unknown
 * family). add_assistant opens the assistant's turn. */
char *plumb_chat_format(const char *family, const plumb_chat_message *msgs, int n, int add_assistant);
/* EOS, or a control token that closes a turn (<|im_end|>, <|eot_id|>, ...). */
int plumb_token_is_end_of_turn(const plumb_model *m, plumb_token t);

/* ---- inference context ---- */

typedef struct {
    int n_ctx;       /* KV cache positions in all; 0 = min(model's training context, 4096) */
    int n_threads;   /* 0 = all cores this process may use */
    int exact;       /* 1: dequantize weights and multiply in f32 (reference path);
                        0: quantize activations to int8 and use integer dot products */
    int n_seq_max;   /* sequences that can be open at once (0 = 1) */
    int n_gpu_layers; /* layers run by the CUDA plugin (the last ones); -1 = all, with the output head */
    const char *numa; /* thread placement: NULL/"off", "distribute", "isolate", "mirror" (see core/topology.h) */
} plumb_ctx_params;

plumb_ctx_params plumb_ctx_default_params(void);
plumb_ctx *plumb_ctx_new(plumb_model *m, const plumb_ctx_params *p);
void plumb_ctx_free(plumb_ctx *c);
int plumb_ctx_n_ctx(const plumb_ctx *c);
/* Layers actually on the GPU (0 when the GPU path is off), and why it is
 * off or what it runs on ("NVIDIA H200, 32 layers + head, 4.1 GiB"). */
int plumb_ctx_gpu_layers(const plumb_ctx *c);
const char *plumb_ctx_gpu_status(const plumb_ctx *c);
size_t plumb_ctx_gpu_peak_bytes(const plumb_ctx *c);
size_t plumb_ctx_bytes(const plumb_ctx *c); /* KV cache + scratch */
/* Runs tokens[0..n) at positions pos..pos+n-1 (earlier positions must be in
 * the cache). Afterwards plumb_get_logits gives the last token's logits. */
int plumb_eval(plumb_ctx *c, const plumb_token *tokens, int n, int pos);
/* Same, keeping logits for every token of the batch: plumb_get_logits_ith. */
int plumb_eval_all_logits(plumb_ctx *c, const plumb_token *tokens, int n, int pos);
const float *plumb_get_logits(const plumb_ctx *c);
const float *plumb_get_logits_ith(const plumb_ctx *c, int i);

/* ---- several sequences in one batch (continuous batching) ----
 * plumb_eval and friends use sequence 0. A server opens one sequence per
 * request and runs one batch per step holding every active sequence's next
 * tokens, so the weights are read once per step for all of them. */

#define PLUMB_ERR_KV_FULL (-2) /* plumb_decode: not enough free KV blocks (nothing was run) */

typedef struct {
    int n;
    const plumb_token *tokens;
    const int *pos;     /* position of each token in its sequence */
    const int *seq;     /* sequence of each token */
    const int8_t *logits; /* which tokens need logits (NULL: only the last) */
} plumb_batch;

int plumb_seq_open(plumb_ctx *c);             /* a free sequence id, or -1 */
void plumb_seq_close(plumb_ctx *c, int seq);  /* frees its KV blocks */
int plumb_seq_length(const plumb_ctx *c, int seq);
/* Forgets positions >= n_pos of a sequence (their blocks are kept). */
void plumb_seq_truncate(plumb_ctx *c, int seq, int n_pos);
int plumb_kv_free_positions(const plumb_ctx *c); /* positions in free blocks */
int plumb_decode(plumb_ctx *c, const plumb_batch *b);
/* Logits of the i-th token that asked for them, in batch order. */
const float *plumb_batch_logits(const plumb_ctx *c, int i);
/* The greedy picks (plumb_argmax) of logit rows first..first+n-1 into ids:
 * made on the GPU when it ran the output head (the host then reads n ints,
 * not n x n_vocab floats), else here, rows in parallel. -1 if the last
 * decode made fewer rows. */
int plumb_batch_argmax(const plumb_ctx *c, int first, int n, int *ids);

/* Greedy decoding of n sequences (distinct, one token each) for up to
 * n_steps steps: step 0 evaluates tokens[i] at pos[i] in seq[i], step s the
 * picks of step s - 1 at pos[i] + s. on_step(user, s, picks) gets each
 * step's n picks (plumb_argmax of its logits) in order and returns nonzero
 * to stop after that step. When the GPU holds the whole model, the steps
 * run back to back on it, each fed the previous step's picks there, and
 * the host reads the picks one step behind (plumb_ctx_greedy_chained says
 * whether it does); otherwise each step is a plumb_decode and a
 * plumb_batch_argmax. Returns the steps done (sequence i then holds
 * positions up to pos[i] + steps - 1; no logits are kept), or a negative
 * error (PLUMB_ERR_KV_FULL when the blocks for all n_steps are not free). */
typedef int (*plumb_step_fn)(void *user, int step, const plumb_token *picks);
int plumb_decode_greedy(plumb_ctx *c, int n, const plumb_token *tokens, const int *pos, const int *seq, int n_steps, plumb_step_fn on_step, void *user);
/* 1 when plumb_decode_greedy runs its steps chained on the GPU (known after
 * its first call: a model the device cannot chain falls back then) */
int plumb_ctx_greedy_chained(const plumb_ctx *c);

/* ---- sampling ---- */

typedef struct {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* tokens the penalty looks back over */
    uint64_t seed;
} plumb_sampler_params;

plumb_sampler_params plumb_sampler_default_params(void);
plumb_sampler *plumb_sampler_new(const plumb_sampler_params *p, int n_vocab);
void plumb_sampler_free(plumb_sampler *s);
/* Picks the next token from logits (not modified) and records it for the
 * repetition penalty. */
plumb_token plumb_sample(plumb_sampler *s, const float *logits);
/* Records a token (e.g. prompt tokens) for the repetition penalty. */
void plumb_sampler_accept(plumb_sampler *s, plumb_token t);
/* 1 when plumb_sample is plumb_argmax of the logits as given (temperature 0,
 * no repetition penalty): a caller holding that pick (plumb_batch_argmax) may
 * record it with plumb_sampler_accept instead of sampling. */
int plumb_sampler_is_greedy(const plumb_sampler *s);
/* Greedy pick: the index of the largest of x[0..n) (the first on ties; NaNs
 * are never picked; 0 when nothing compares). */
int plumb_argmax(const float *x, int n);

#ifdef __cplusplus
}
#endif
#endif
