/* synthetic.c — GGUF models of real shapes with random weights, for speed
 * work without downloads. Speed does not depend on weight values (quality
 * does: quality checks use real models). Weights are uniform with standard
 * deviation 1/sqrt(fan_in), so activations stay well scaled through depth.
 * Every row's values come from its own seed, so files are reproducible
 * whatever the thread count. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/gguf.h"
#include "../core/model.h"
#include "../core/util.h"
#include "convert.h"

static const plumb_shape shapes[] = {
    /* name              embd  lay head kv   ff     vocab   ctx    rope      tied bias arch */
    {"tinyllama-1.1b",   2048, 22, 32, 4,  5632,  32000,  2048,  10000.f,   0, 0, "llama"},
    {"llama2-7b",        4096, 32, 32, 32, 11008, 32000,  4096,  10000.f,   0, 0, "llama"},
    {"llama3-8b",        4096, 32, 32, 8,  14336, 128256, 8192,  500000.f,  0, 0, "llama"},
    {"qwen2.5-0.5b",     896,  24, 14, 2,  4864,  151936, 32768, 1000000.f, 1, 1, "qwen2"},
    {"smollm-135m",      576,  30, 9,  3,  1536,  49152,  2048,  10000.f,   1, 0, "llama"},
    {"mini-60m",         512,  8,  8,  4,  1408,  32000,  2048,  10000.f,   0, 0, "llama"},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
};

const plumb_shape *plumb_shapes(void) { return shapes; }

const plumb_shape *plumb_shape_find(const char *name) {
    for (const plumb_shape *s = shapes; s->name; s++)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

/* Built-in SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then
 * lower-case letter strings (alternately with the "▁" word prefix) so random
 * generations still print readable bytes. */
static int builtin_vocab(gguf_writer *w, int n) {
    char **tok = calloc((size_t)n, sizeof(char *));
    float *score = malloc(sizeof(float) * (size_t)n);
    int32_t *type = malloc(sizeof(int32_t) * (size_t)n);
    int rc = -1;
    if (!tok || !score || !type) goto out;
    for (int i = 0; i < n; i++) {
        char buf[32];
        if (i == 0) snprintf(buf, sizeof buf, "<unk>"), type[i] = TOK_UNKNOWN;
        else if (i == 1) snprintf(buf, sizeof buf, "<s>"), type[i] = TOK_CONTROL;
        else if (i == 2) snprintf(buf, sizeof buf, "</s>"), type[i] = TOK_CONTROL;
        else if (i < 259) snprintf(buf, sizeof buf, "<0x%02X>", i - 3), type[i] = TOK_BYTE;
        else {
            int k = i - 259, p = 0;
            if (k % 2 == 0) { memcpy(buf, "\xe2\x96\x81", 3); p = 3; }
            k /= 2;
            do { buf[p++] = (char)('a' + k % 26); k /= 26; } while (k > 0 && p < 20);
            buf[p] = 0;
            type[i] = TOK_NORMAL;
        }
        tok[i] = strdup(buf);
        if (!tok[i]) goto out;
        score[i] = -(float)i;
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n);
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", score, (uint64_t)n);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)n);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc = 0;
out:
    if (tok)
        for (int i = 0; i < n; i++) free(tok[i]);
    free(tok);
    free(score);
    free(type);
    if (rc) plumb_set_error("out of memory building vocabulary");
    return rc;
}

/* Copies tokenizer.* from a vocabulary GGUF; the shape's vocabulary size is
 * kept (real shape), so a shorter vocabulary is padded with unused tokens. */
static int copy_vocab(gguf_writer *w, const char *path, int n) {
    gguf_file *f = gguf_open(path);
    if (!f) return -1;
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!toks || toks->arr_type != GGUF_VT_STRING) {
        gguf_close(f);
        return plumb_set_error("%s: has no tokenizer.ggml.tokens", path);
    }
    if (toks->arr_n > (uint64_t)n) {
        gguf_close(f);
        return plumb_set_error("%s: vocabulary of %llu tokens is larger than the shape's %d", path,
                               (unsigned long long)toks->arr_n, n);
    }
    int have = (int)toks->arr_n, rc = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        int per_token = !strcmp(kv->key, "tokenizer.ggml.tokens") || !strcmp(kv->key, "tokenizer.ggml.scores") ||
                        !strcmp(kv->key, "tokenizer.ggml.token_type");
        if (!per_token || have == n) { gguf_w_copy_kv(w, kv); continue; }
        if (!strcmp(kv->key, "tokenizer.ggml.tokens")) {
            char **t = malloc(sizeof(char *) * (size_t)n);
            if (!t) { rc = plumb_set_error("out of memory"); break; }
            for (int j = 0; j < n; j++) {
                t[j] = j < have ? strdup(kv->strs[j]) : malloc(32);
                if (t[j] && j >= have) snprintf(t[j], 32, "<unused_%d>", j - have);
            }
            gguf_w_arr_str(w, kv->key, (const char *const *)t, (uint64_t)n);
            for (int j = 0; j < n; j++) free(t[j]);
            free(t);
        } else if (kv->arr && (kv->arr_type == GGUF_VT_FLOAT32 || kv->arr_type == GGUF_VT_INT32)) {
            int32_t *v = malloc(4 * (size_t)n);
            if (!v) { rc = plumb_set_error("out of memory"); break; }
            memcpy(v, kv->arr, 4 * (size_t)have);
            for (int j = have; j < n; j++) {
                if (kv->arr_type == GGUF_VT_INT32) v[j] = TOK_UNUSED;
                else { float s = -1e9f; memcpy(&v[j], &s, 4); }
            }
            if (kv->arr_type == GGUF_VT_INT32) gguf_w_arr_i32(w, kv->key, v, (uint64_t)n);
            else gguf_w_arr_f32(w, kv->key, (const float *)v, (uint64_t)n);
            free(v);
        }
    }
    gguf_close(f);
    return rc;
}

/* A row length the type's blocks do not divide falls back to Q8_0, then F16
 * (as llama-quantize does for such tensors). */
uint32_t plumb_type_fit(uint32_t type, int64_t cols) {
    if (cols % plumb_type_get(type)->block_size == 0) return type;
    return cols % QK8_0 == 0 ? PLUMB_TYPE_Q8_0 : PLUMB_TYPE_F16;
}

typedef struct {
    char name[64];
    uint32_t type;
    int64_t ne0, ne1;
    float center, spread; /* values in center +- spread */
} synth_tensor;

int plumb_make_synthetic(const plumb_synth_params *p, const char *out_path) {
    const plumb_shape *s = &p->shape;
    const plumb_type_traits *tt = plumb_type_get(p->type);
    if (!tt || !tt->runnable || !tt->from_float) return plumb_set_error("type %s cannot be generated", plumb_type_name(p->type));
    if (s->n_embd <= 0 || s->n_layer <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 || s->n_ff <= 0 || s->n_vocab < 259 ||
        s->n_embd % s->n_head || s->n_head % s->n_head_kv)
        return plumb_set_error("invalid shape (dims must be positive, heads must divide the width, vocab >= 259)");
    const int64_t d = s->n_embd, hd = d / s->n_head, kv = hd * s->n_head_kv, ff = s->n_ff, V = s->n_vocab;
    const char *arch = s->arch ? s->arch : "llama";
    gguf_writer *w = gguf_writer_new();
    if (!w) return plumb_set_error("out of memory");
    char key[96], name[96];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_w_str(w, "general.architecture", arch);
    snprintf(name, sizeof name, "plumb synthetic %s %s", s->name ? s->name : "custom", tt->name);
    gguf_w_str(w, "general.name", name);
    gguf_w_str(w, "general.description", "random weights of a real model shape, for speed measurements only");
    gguf_w_u32(w, K("context_length"), (uint32_t)s->n_ctx);
    gguf_w_u32(w, K("embedding_length"), (uint32_t)d);
    gguf_w_u32(w, K("block_count"), (uint32_t)s->n_layer);
    gguf_w_u32(w, K("feed_forward_length"), (uint32_t)ff);
    gguf_w_u32(w, K("attention.head_count"), (uint32_t)s->n_head);
    gguf_w_u32(w, K("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)hd);
    gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
    gguf_w_f32(w, K("rope.freq_base"), s->rope_freq_base > 0 ? s->rope_freq_base : 10000.f);
#undef K
    int rc = p->vocab_path ? copy_vocab(w, p->vocab_path, (int)V) : builtin_vocab(w, (int)V);
    if (rc) { gguf_writer_free(w); return -1; }

    int n_t = 0, cap = 4 + 12 * s->n_layer;
    synth_tensor *ts = calloc((size_t)cap, sizeof *ts);
    if (!ts) { gguf_writer_free(w); return plumb_set_error("out of memory"); }
#define T(nm, ty, a, b, c0, sp) (snprintf(ts[n_t].name, 64, "%s", nm), ts[n_t].type = plumb_type_fit(ty, a), ts[n_t].ne0 = a, ts[n_t].ne1 = b, ts[n_t].center = c0, ts[n_t].spread = sp, n_t++)
    const float ws = sqrtf(3.0f / (float)d), wsf = sqrtf(3.0f / (float)ff);
    T("token_embd.weight", p->type, d, V, 0, 1.0f);
    T("output_norm.weight", PLUMB_TYPE_F32, d, 1, 1, 0.1f);
    if (!s->tied_output) T("output.weight", p->type, d, V, 0, ws);
    for (int l = 0; l < s->n_layer; l++) {
        char nm[64];
#define L(suffix, ty, a, b, c0, sp) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), T(nm, ty, a, b, c0, sp))
        L("attn_norm.weight", PLUMB_TYPE_F32, d, 1, 1, 0.1f);
        L("attn_q.weight", p->type, d, d, 0, ws);
        L("attn_k.weight", p->type, d, kv, 0, ws);
        L("attn_v.weight", p->type, d, kv, 0, ws);
        if (s->qkv_bias) {
            L("attn_q.bias", PLUMB_TYPE_F32, d, 1, 0, 0.1f);
            L("attn_k.bias", PLUMB_TYPE_F32, kv, 1, 0, 0.1f);
            L("attn_v.bias", PLUMB_TYPE_F32, kv, 1, 0, 0.1f);
        }
        L("attn_output.weight", p->type, d, d, 0, ws);
        L("ffn_norm.weight", PLUMB_TYPE_F32, d, 1, 1, 0.1f);
        L("ffn_gate.weight", p->type, d, ff, 0, ws);
        L("ffn_up.weight", p->type, d, ff, 0, ws);
        L("ffn_down.weight", p->type, ff, d, 0, wsf);
#undef L
    }
#undef T
    for (int i = 0; i < n_t && !rc; i++) {
        int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        rc = gguf_w_tensor(w, ts[i].name, ts[i].type, ts[i].ne1 == 1 ? 1 : 2, ne);
    }
    FILE *fp = rc ? NULL : fopen(out_path, "wb");
    if (!rc && !fp) rc = plumb_set_error("%s: cannot create: %s", out_path, strerror(errno));
    if (!rc) rc = gguf_w_begin(w, fp);
    /* generate CHUNK rows at a time in parallel, then write them in order */
    enum { CHUNK = 256 };
    for (int i = 0; i < n_t && !rc; i++) {
        const synth_tensor *t = &ts[i];
        const plumb_type_traits *ty = plumb_type_get(t->type);
        const size_t row_bytes = (size_t)plumb_type_row_bytes(t->type, (uint64_t)t->ne0);
        uint8_t *buf = malloc(row_bytes * CHUNK);
        if (!buf) { rc = plumb_set_error("out of memory"); break; }
        for (int64_t r0 = 0; r0 < t->ne1 && !rc; r0 += CHUNK) {
            int64_t nr = t->ne1 - r0 < CHUNK ? t->ne1 - r0 : CHUNK;
#pragma omp parallel
            {
                float *row = malloc(sizeof(float) * (size_t)t->ne0);
#pragma omp for schedule(static)
                for (int64_t r = 0; r < nr; r++) {
                    if (!row) continue;
                    plumb_rng rng;
                    plumb_rng_seed(&rng, p->seed * 1000003ull + (uint64_t)i * 7919ull + (uint64_t)(r0 + r) * 104729ull + 1);
                    for (int64_t j = 0; j < t->ne0; j++) row[j] = t->center + t->spread * (2.0f * plumb_rng_f32(&rng) - 1.0f);
                    ty->from_float(row, buf + (size_t)r * row_bytes, t->ne0);
                }
                free(row);
            }
            rc = gguf_w_tensor_data(w, fp, buf, row_bytes * (size_t)nr);
        }
        free(buf);
    }
    if (!rc) rc = gguf_w_finish(w);
    if (fp && fclose(fp) != 0 && !rc) rc = plumb_set_error("%s: write failed", out_path);
    if (rc && fp) remove(out_path);
    free(ts);
    gguf_writer_free(w);
    return rc;
}
