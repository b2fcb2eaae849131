/* convert.h — producers of GGUF files: format converters, the synthetic
 * model generator and the quantizer. Each returns 0 or -1 with an error. */
#ifndef PLUMB_CONVERT_H
#define PLUMB_CONVERT_H

#include <stdint.h>

int plumb_convert_llama2c(const char *model_bin, const char *tokenizer_bin, const char *out_gguf);

typedef struct {
    const char *name;      /* "tinyllama-1.1b", ... */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_freq_base;
    int tied_output, qkv_bias;
    const char *arch;
} plumb_shape;

/* NULL if unknown; plumb_shapes() lists them (NULL-terminated). */
const plumb_shape *plumb_shape_find(const char *name);
const plumb_shape *plumb_shapes(void);

typedef struct {
    plumb_shape shape;
    uint32_t type;           /* matrix type (plumb_type) */
    const char *vocab_path;  /* GGUF to copy tokenizer.* from; NULL = built-in */
    uint64_t seed;
} plumb_synth_params;

/* The type itself, or a fallback when its blocks do not divide cols. */
uint32_t plumb_type_fit(uint32_t type, int64_t cols);

int plumb_make_synthetic(const plumb_synth_params *p, const char *out_path);

/* Re-encodes every weight matrix of a model. type is a plumb_type, or one of
 * the mixes below (ggml's "_M" recipes: some tensors kept at higher precision). */
enum { PLUMB_MIX_Q4_K_M = 1000, PLUMB_MIX_Q5_K_M = 1001 };
int plumb_quantize_file(const char *in_path, const char *out_path, int type, int n_threads);

#endif
