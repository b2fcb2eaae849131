/* gguf_write.c — GGUF v3 writer. Metadata is serialised into a byte buffer
 * as it is added; tensor data is streamed afterwards, in declaration order,
 * so a multi-gigabyte model never has to sit in memory. */
#include <stdlib.h>
#include <string.h>

#include "../quant/quant.h"
#include "gguf.h"
#include "util.h"

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    uint8_t *kv;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    uint64_t next_data; /* next tensor to receive data */
    uint64_t written;   /* bytes of it written so far */
    int oom;
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->oom) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap * 2 : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) { w->oom = 1; return; }
        w->kv = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(gguf_writer *w, const char *s) {
    uint64_t n = strlen(s);
    put_u64(w, n);
    put(w, s, n);
}
static void key(gguf_writer *w, const char *k, uint32_t type) {
    put_str(w, k);
    put_u32(w, type);
    w->n_kv++;
}

void gguf_w_u32(gguf_writer *w, const char *k, uint32_t v) { key(w, k, GGUF_VT_UINT32); put_u32(w, v); }
void gguf_w_i32(gguf_writer *w, const char *k, int32_t v) { key(w, k, GGUF_VT_INT32); put(w, &v, 4); }
void gguf_w_f32(gguf_writer *w, const char *k, float v) { key(w, k, GGUF_VT_FLOAT32); put(w, &v, 4); }
void gguf_w_bool(gguf_writer *w, const char *k, bool v) { uint8_t b = v; key(w, k, GGUF_VT_BOOL); put(w, &b, 1); }
void gguf_w_str(gguf_writer *w, const char *k, const char *v) { key(w, k, GGUF_VT_STRING); put_str(w, v); }

void gguf_w_arr_str(gguf_writer *w, const char *k, const char *const *v, uint64_t n) {
    key(w, k, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, v[i]);
}
static void arr_scalar(gguf_writer *w, const char *k, uint32_t et, const void *v, uint64_t n, size_t sz) {
    key(w, k, GGUF_VT_ARRAY);
    put_u32(w, et);
    put_u64(w, n);
    put(w, v, n * sz);
}
void gguf_w_arr_f32(gguf_writer *w, const char *k, const float *v, uint64_t n) { arr_scalar(w, k, GGUF_VT_FLOAT32, v, n, 4); }
void gguf_w_arr_i32(gguf_writer *w, const char *k, const int32_t *v, uint64_t n) { arr_scalar(w, k, GGUF_VT_INT32, v, n, 4); }

static size_t vt_size(uint32_t t) {
    static const size_t sz[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_VT_COUNT ? sz[t] : 0;
}

void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    if (kv->type == GGUF_VT_STRING) { gguf_w_str(w, kv->key, kv->v.str); return; }
    if (kv->type == GGUF_VT_ARRAY) {
        if (kv->arr_type == GGUF_VT_STRING) gguf_w_arr_str(w, kv->key, (const char *const *)kv->strs, kv->arr_n);
        else if (kv->arr) arr_scalar(w, kv->key, kv->arr_type, kv->arr, kv->arr_n, vt_size(kv->arr_type));
        return; /* nested arrays are not carried over */
    }
    key(w, kv->key, kv->type);
    uint8_t b[8];
    size_t n = vt_size(kv->type);
    switch (kv->type) {
    case GGUF_VT_FLOAT32: { float f = (float)kv->v.f; memcpy(b, &f, 4); break; }
    case GGUF_VT_FLOAT64: memcpy(b, &kv->v.f, 8); break;
    default: memcpy(b, &kv->v.u, 8); break; /* little-endian: low bytes first */
    }
    put(w, b, n);
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne) {
    uint64_t nelem = 1;
    for (int d = 0; d < n_dims; d++) nelem *= (uint64_t)ne[d];
    uint64_t nbytes = plumb_type_row_bytes(type, nelem);
    if (!nbytes || n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return plumb_set_error("tensor '%s': shape does not fit type %s", name, plumb_type_name(type));
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return plumb_set_error("out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    t->offset = w->n_t ? w->t[w->n_t - 1].offset + ((w->t[w->n_t - 1].nbytes + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT) * GGUF_DEFAULT_ALIGNMENT : 0;
    w->n_t++;
    return 0;
}

static int pad(FILE *fp, uint64_t pos) {
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    uint64_t n = (GGUF_DEFAULT_ALIGNMENT - pos % GGUF_DEFAULT_ALIGNMENT) % GGUF_DEFAULT_ALIGNMENT;
    return fwrite(zeros, 1, n, fp) == n ? 0 : -1;
}

int gguf_w_begin(gguf_writer *w, FILE *fp) {
    if (w->oom) return plumb_set_error("out of memory building GGUF metadata");
    uint32_t hdr[2] = {0x46554747u, 3};
    uint64_t counts[2] = {w->n_t, w->n_kv};
    uint64_t pos = 0;
    if (fwrite(hdr, 4, 2, fp) != 2 || fwrite(counts, 8, 2, fp) != 2) goto io;
    if (fwrite(w->kv, 1, w->kv_len, fp) != w->kv_len) goto io;
    pos = 24 + w->kv_len;
    for (uint64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims;
        if (fwrite(&len, 8, 1, fp) != 1 || fwrite(t->name, 1, len, fp) != len || fwrite(&nd, 4, 1, fp) != 1)
            goto io;
        for (int d = 0; d < t->n_dims; d++) {
            uint64_t v = (uint64_t)t->ne[d];
            if (fwrite(&v, 8, 1, fp) != 1) goto io;
        }
        if (fwrite(&t->type, 4, 1, fp) != 1 || fwrite(&t->offset, 8, 1, fp) != 1) goto io;
        pos += 8 + len + 4 + 8ull * (uint64_t)t->n_dims + 4 + 8;
    }
    if (pad(fp, pos)) goto io;
    w->next_data = 0;
    return 0;
io:
    return plumb_set_error("write failed while writing GGUF header");
}

int gguf_w_tensor_data(gguf_writer *w, FILE *fp, const void *data, uint64_t nbytes) {
    if (w->next_data >= w->n_t) return plumb_set_error("more tensor data than declared tensors");
    wtensor *t = &w->t[w->next_data];
    if (nbytes > t->nbytes - w->written)
        return plumb_set_error("tensor '%s': %llu bytes more than its size %llu", t->name,
                               (unsigned long long)(w->written + nbytes), (unsigned long long)t->nbytes);
    if (fwrite(data, 1, nbytes, fp) != nbytes) return plumb_set_error("write failed for tensor '%s'", t->name);
    w->written += nbytes;
    if (w->written == t->nbytes) {
        if (pad(fp, t->nbytes)) return plumb_set_error("write failed for tensor '%s'", t->name);
        w->next_data++;
        w->written = 0;
    }
    return 0;
}

int gguf_w_finish(gguf_writer *w) {
    if (w->next_data != w->n_t)
        return plumb_set_error("only %llu of %llu tensors were written", (unsigned long long)w->next_data,
                               (unsigned long long)w->n_t);
    return 0;
}
