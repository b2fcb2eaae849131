/* quantize.c — re-encode a model's weight matrices in another type. Norms
 * and biases (1-D tensors) stay F32; metadata is copied. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/gguf.h"
#include "../core/util.h"
#include "../quant/quant.h"
#include "convert.h"

/* llama.cpp's rule for which layers get more bits in the _M mixes. */
static int use_more_bits(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

static int layer_of(const char *name) {
    int l;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

static uint32_t target_type(const gguf_tensor *t, int type, int n_layers) {
    if (t->n_dims < 2) return PLUMB_TYPE_F32;
    if (type < PLUMB_MIX_Q4_K_M) return plumb_type_fit((uint32_t)type, t->ne[0]);
    uint32_t base = type == PLUMB_MIX_Q4_K_M ? PLUMB_TYPE_Q4_K : PLUMB_TYPE_Q5_K;
    uint32_t out = base;
    if (!strcmp(t->name, "output.weight")) out = PLUMB_TYPE_Q6_K;
    else if (strstr(t->name, "attn_v.weight") || strstr(t->name, "ffn_down.weight")) {
        int l = layer_of(t->name);
        if (l >= 0 && use_more_bits(l, n_layers)) out = PLUMB_TYPE_Q6_K;
    }
    return plumb_type_fit(out, t->ne[0]);
}

static uint32_t file_type_id(int type) {
    switch (type) { /* llama_ftype values */
    case PLUMB_TYPE_F32: return 0;
    case PLUMB_TYPE_F16: return 1;
    case PLUMB_TYPE_Q4_0: return 2;
    case PLUMB_TYPE_Q4_1: return 3;
    case PLUMB_TYPE_Q8_0: return 7;
    case PLUMB_TYPE_Q4_K: return 15;
    case PLUMB_TYPE_Q5_K: return 17;
    case PLUMB_TYPE_Q6_K: return 18;
    case PLUMB_TYPE_BF16: return 32;
    case PLUMB_MIX_Q4_K_M: return 15;
    case PLUMB_MIX_Q5_K_M: return 17;
    default: return 0;
    }
}

int plumb_quantize_file(const char *in_path, const char *out_path, int type, int n_threads) {
    if (type < PLUMB_MIX_Q4_K_M) {
        const plumb_type_traits *tt = plumb_type_get((uint32_t)type);
        if (!tt || !tt->runnable || !tt->from_float) return plumb_set_error("cannot quantize to type %s", plumb_type_name((uint32_t)type));
    }
    if (n_threads > 0) omp_set_num_threads(n_threads);
    gguf_file *f = gguf_open(in_path);
    if (!f) return -1;
    gguf_writer *w = gguf_writer_new();
    FILE *fp = NULL;
    int rc = w ? 0 : plumb_set_error("out of memory");
    const char *arch = "llama";
    gguf_get_str(f, "general.architecture", &arch);
    char key[96];
    snprintf(key, sizeof key, "%s.block_count", arch);
    uint32_t n_layers = 0;
    gguf_get_u32(f, key, &n_layers);
    for (uint64_t i = 0; i < f->n_kv && !rc; i++)
        if (strcmp(f->kv[i].key, "general.file_type") && strcmp(f->kv[i].key, "general.alignment")) gguf_w_copy_kv(w, &f->kv[i]);
    if (!rc) gguf_w_u32(w, "general.file_type", file_type_id(type));
    uint32_t *types = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *types);
    if (!types && !rc) rc = plumb_set_error("out of memory");
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const plumb_type_traits *src = plumb_type_get(t->type);
        types[i] = src->to_float ? target_type(t, type, (int)n_layers) : t->type; /* unknown payloads copied */
        rc = gguf_w_tensor(w, t->name, types[i], t->n_dims, t->ne);
    }
    if (!rc) {
        fp = fopen(out_path, "wb");
        if (!fp) rc = plumb_set_error("%s: cannot create: %s", out_path, strerror(errno));
    }
    if (!rc) rc = gguf_w_begin(w, fp);
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (types[i] == t->type) { rc = gguf_w_tensor_data(w, fp, t->data, t->nbytes); continue; }
        const plumb_type_traits *src = plumb_type_get(t->type), *dst = plumb_type_get(types[i]);
        const int64_t cols = t->ne[0], rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        const size_t in_row = (size_t)plumb_type_row_bytes(t->type, (uint64_t)cols);
        const size_t out_row = (size_t)plumb_type_row_bytes(types[i], (uint64_t)cols);
        enum { CHUNK = 256 };
        uint8_t *buf = malloc(out_row * CHUNK);
        if (!buf) { rc = plumb_set_error("out of memory"); break; }
        for (int64_t r0 = 0; r0 < rows && !rc; r0 += CHUNK) {
            int64_t nr = rows - r0 < CHUNK ? rows - r0 : CHUNK;
            int failed = 0;
#pragma omp parallel reduction(| : failed)
            {
                float *row = malloc(sizeof(float) * (size_t)cols);
                failed |= !row;
#pragma omp for schedule(static)
                for (int64_t r = 0; r < nr; r++) {
                    if (!row) continue;
                    src->to_float((const uint8_t *)t->data + (size_t)(r0 + r) * in_row, row, cols);
                    dst->from_float(row, buf + (size_t)r * out_row, cols);
                }
                free(row);
            }
            rc = failed ? plumb_set_error("out of memory") : gguf_w_tensor_data(w, fp, buf, out_row * (size_t)nr);
        }
        free(buf);
    }
    if (!rc) rc = gguf_w_finish(w);
    if (fp && fclose(fp) != 0 && !rc) rc = plumb_set_error("%s: write failed", out_path);
    if (rc && fp) remove(out_path);
    free(types);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}
