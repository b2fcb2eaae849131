/* llama2c.c — convert a llama2.c checkpoint (model .bin + tokenizer .bin) to
 * a Llama GGUF. llama2.c stores every matrix as [out][in] row-major floats
 * and rotates adjacent pairs in RoPE, which is exactly GGUF's llama layout,
 * so the weights are copied as they are. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/gguf.h"
#include "../core/model.h"
#include "../core/util.h"
#include "convert.h"

typedef struct { int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; } l2c_config;

static int read_file(const char *path, uint8_t **out, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return plumb_set_error("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || st.st_size <= 0) {
        fclose(fp);
        return plumb_set_error("%s: empty or unreadable", path);
    }
    *size = (size_t)st.st_size;
    *out = malloc(*size);
    if (!*out || fread(*out, 1, *size, fp) != *size) {
        fclose(fp);
        free(*out);
        return plumb_set_error("%s: read failed", path);
    }
    fclose(fp);
    return 0;
}

/* llama2.c's exporter wrote SentencePiece pieces with "▁" turned into ' '
 * and BOS/EOS as "\n<s>\n" / "\n</s>\n": undo both. */
static char *gguf_piece(const char *s, int len, int id) {
    if (id == 1) return strdup("<s>");
    if (id == 2) return strdup("</s>");
    char *o = malloc((size_t)len * 3 + 1);
    if (!o) return NULL;
    int n = 0;
    for (int i = 0; i < len; i++) {
        if (s[i] == ' ') { memcpy(o + n, "\xe2\x96\x81", 3); n += 3; }
        else o[n++] = s[i];
    }
    o[n] = 0;
    return o;
}

int plumb_convert_llama2c(const char *model_path, const char *tok_path, const char *out_path) {
    uint8_t *mb = NULL, *tb = NULL;
    size_t msz = 0, tsz = 0;
    char **pieces = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    gguf_writer *w = NULL;
    FILE *fp = NULL;
    int rc = -1, vocab = 0;
    if (read_file(model_path, &mb, &msz) || read_file(tok_path, &tb, &tsz)) goto out;
    if (msz < sizeof(l2c_config)) { plumb_set_error("%s: too small for a llama2.c header", model_path); goto out; }
    l2c_config cfg;
    memcpy(&cfg, mb, sizeof cfg);
    int shared = cfg.vocab_size > 0;
    vocab = abs(cfg.vocab_size);
    if (cfg.dim <= 0 || cfg.hidden_dim <= 0 || cfg.n_layers <= 0 || cfg.n_heads <= 0 || cfg.n_kv_heads <= 0 || vocab <= 0 ||
        cfg.seq_len <= 0 || cfg.dim % cfg.n_heads || cfg.n_heads % cfg.n_kv_heads || cfg.dim > 65536 ||
        cfg.hidden_dim > 1 << 20 || cfg.n_layers > 1024 || vocab > 1 << 22 || cfg.seq_len > 1 << 22) {
        plumb_set_error("%s: implausible llama2.c header (dim %d, layers %d, heads %d/%d, vocab %d)", model_path, cfg.dim,
                        cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size);
        goto out;
    }
    const uint64_t d = (uint64_t)cfg.dim, hs = d / (uint64_t)cfg.n_heads, kv = hs * (uint64_t)cfg.n_kv_heads,
                   ff = (uint64_t)cfg.hidden_dim, L = (uint64_t)cfg.n_layers, V = (uint64_t)vocab;
    uint64_t floats = V * d + L * d + L * d * d + 2 * L * d * kv + L * d * d + L * d + 3 * L * d * ff + d +
                      (uint64_t)cfg.seq_len * hs + (shared ? 0 : V * d);
    if (floats * 4 + sizeof cfg != msz) {
        plumb_set_error("%s: size %zu bytes does not match its header (expected %llu)", model_path, msz,
                        (unsigned long long)(floats * 4 + sizeof cfg));
        goto out;
    }
    /* tokenizer */
    pieces = calloc(V, sizeof(char *));
    scores = malloc(V * sizeof(float));
    types = malloc(V * sizeof(int32_t));
    if (!pieces || !scores || !types) { plumb_set_error("out of memory"); goto out; }
    size_t tp = 4; /* skip max_token_length */
    for (int i = 0; i < vocab; i++) {
        int32_t len;
        if (tp + 8 > tsz) { plumb_set_error("%s: truncated at token %d", tok_path, i); goto out; }
        memcpy(&scores[i], tb + tp, 4);
        memcpy(&len, tb + tp + 4, 4);
        tp += 8;
        if (len < 0 || (size_t)len > tsz - tp) { plumb_set_error("%s: token %d has bad length %d", tok_path, i, len); goto out; }
        pieces[i] = gguf_piece((const char *)tb + tp, len, i);
        if (!pieces[i]) { plumb_set_error("out of memory"); goto out; }
        tp += (size_t)len;
        unsigned b;
        char close;
        types[i] = i == 0 ? TOK_UNKNOWN : (i == 1 || i == 2) ? TOK_CONTROL
                 : (strlen(pieces[i]) == 6 && sscanf(pieces[i], "<0x%2X%c", &b, &close) == 2 && close == '>') ? TOK_BYTE
                                                                                                              : TOK_NORMAL;
    }

    w = gguf_writer_new();
    if (!w) { plumb_set_error("out of memory"); goto out; }
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "general.name", "llama2.c");
    gguf_w_u32(w, "general.file_type", 0);
    gguf_w_u32(w, "llama.context_length", (uint32_t)cfg.seq_len);
    gguf_w_u32(w, "llama.embedding_length", (uint32_t)cfg.dim);
    gguf_w_u32(w, "llama.block_count", (uint32_t)cfg.n_layers);
    gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)cfg.hidden_dim);
    gguf_w_u32(w, "llama.attention.head_count", (uint32_t)cfg.n_heads);
    gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)cfg.n_kv_heads);
    gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)hs);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, V);
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, V);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, V);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);

    /* source offsets, in llama2.c's order */
    const float *base = (const float *)(mb + sizeof cfg);
    const float *emb = base, *rms_att = emb + V * d, *wq = rms_att + L * d, *wk = wq + L * d * d, *wv = wk + L * d * kv,
                *wo = wv + L * d * kv, *rms_ffn = wo + L * d * d, *w1 = rms_ffn + L * d, *w2 = w1 + L * d * ff,
                *w3 = w2 + L * ff * d, *rms_final = w3 + L * d * ff, *wcls = rms_final + d + (uint64_t)cfg.seq_len * hs;
    typedef struct { const char *name; const float *src; int64_t ne0, ne1; } src_tensor;
    int n_src = 0;
    src_tensor *src = malloc(sizeof(src_tensor) * (size_t)(3 + 9 * L));
    if (!src) { plumb_set_error("out of memory"); goto out; }
    char (*names)[48] = malloc(48 * (size_t)(3 + 9 * L));
    if (!names) { free(src); plumb_set_error("out of memory"); goto out; }
#define ADD(nm, s, a, b) (snprintf(names[n_src], 48, "%s", nm), src[n_src] = (src_tensor){names[n_src], s, a, b}, n_src++)
    ADD("token_embd.weight", emb, (int64_t)d, (int64_t)V);
    ADD("output_norm.weight", rms_final, (int64_t)d, 1);
    if (!shared) ADD("output.weight", wcls, (int64_t)d, (int64_t)V);
    for (uint64_t l = 0; l < L; l++) {
        char nm[48];
#define LAYER(suffix, s, a, b) (snprintf(nm, sizeof nm, "blk.%llu.%s", (unsigned long long)l, suffix), ADD(nm, s, a, b))
        LAYER("attn_norm.weight", rms_att + l * d, (int64_t)d, 1);
        LAYER("attn_q.weight", wq + l * d * d, (int64_t)d, (int64_t)d);
        LAYER("attn_k.weight", wk + l * d * kv, (int64_t)d, (int64_t)kv);
        LAYER("attn_v.weight", wv + l * d * kv, (int64_t)d, (int64_t)kv);
        LAYER("attn_output.weight", wo + l * d * d, (int64_t)d, (int64_t)d);
        LAYER("ffn_norm.weight", rms_ffn + l * d, (int64_t)d, 1);
        LAYER("ffn_gate.weight", w1 + l * d * ff, (int64_t)d, (int64_t)ff);
        LAYER("ffn_down.weight", w2 + l * ff * d, (int64_t)ff, (int64_t)d);
        LAYER("ffn_up.weight", w3 + l * d * ff, (int64_t)d, (int64_t)ff);
#undef LAYER
    }
#undef ADD
    int bad = 0;
    for (int i = 0; i < n_src && !bad; i++) {
        int64_t ne[2] = {src[i].ne0, src[i].ne1};
        bad = gguf_w_tensor(w, src[i].name, PLUMB_TYPE_F32, src[i].ne1 == 1 ? 1 : 2, ne);
    }
    fp = bad ? NULL : fopen(out_path, "wb");
    if (!bad && !fp) plumb_set_error("%s: cannot create: %s", out_path, strerror(errno));
    if (fp && gguf_w_begin(w, fp) == 0) {
        for (int i = 0; i < n_src && !bad; i++)
            bad = gguf_w_tensor_data(w, fp, src[i].src, (uint64_t)src[i].ne0 * (uint64_t)src[i].ne1 * 4);
        if (!bad && gguf_w_finish(w) == 0) rc = 0;
    }
    free(src);
    free(names);
out:
    if (fp && fclose(fp) != 0 && rc == 0) rc = plumb_set_error("%s: write failed", out_path);
    if (rc != 0 && fp) remove(out_path);
    if (pieces)
        for (int i = 0; i < vocab; i++) free(pieces[i]);
    free(pieces);
    free(scores);
    free(types);
    free(mb);
    free(tb);
    gguf_writer_free(w);
    return rc;
}
