/* gguf.h — GGUF reader (v1/v2/v3, mmap, validated) and writer. */
#ifndef PLUMB_GGUF_H
#define PLUMB_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum gguf_vtype {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12, GGUF_VT_COUNT = 13,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    char *key;
    uint32_t type;
    union {
        uint64_t u;  /* unsigned ints and bool */
        int64_t i;   /* signed ints */
        double f;    /* floats */
        char *str;   /* GGUF_VT_STRING */
    } v;
    /* GGUF_VT_ARRAY: element type and count; numeric elements copied into
     * arr (native layout of the element type), strings into strs. Arrays of
     * arrays are validated and skipped (arr and strs NULL). */
    uint32_t arr_type;
    uint64_t arr_n;
    void *arr;
    char **strs;
} gguf_kv;

typedef struct {
    char *name;
    uint32_t type;  /* plumb_type */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const void *data;          /* points into the mapping */
} gguf_tensor;

typedef struct {
    uint32_t version;
    uint64_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    const uint8_t *base;   /* whole file */
    uint64_t size;
    uint64_t data_offset;  /* start of tensor data within the file */
    int mapped;            /* base came from mmap (and must be unmapped) */
} gguf_file;

/* Open and fully validate. NULL on error, with plumb_last_error() saying
 * what is wrong ("file.gguf: tensor 'x' data runs past end of file"). */
gguf_file *gguf_open(const char *path);
/* Parse a caller-owned buffer (kept, not copied). Used by the fuzzer and tests. */
gguf_file *gguf_open_memory(const void *buf, size_t size, const char *label);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
const char *gguf_vtype_name(uint32_t t);

/* Typed getters: return 1 and set *out when the key exists with a compatible
 * type, 0 when absent, -1 (error set) when present with the wrong type. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
int gguf_get_str(const gguf_file *f, const char *key, const char **out);
/* value formatted for display (arrays summarised) */
void gguf_kv_format(const gguf_kv *kv, char *buf, size_t size);

/* SHA-256 over all tensor data, tensors taken in name order: equal for two
 * files holding the same tensors whatever their metadata or tensor order. */
int gguf_tensor_data_sha256(const gguf_file *f, char hex[65]);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Copies one key/value verbatim from a reader (used to keep metadata). */
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Declare tensors in file order; data is supplied later in the same order. */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne);
/* Writes header + metadata + tensor infos and pads to the data section. */
int gguf_w_begin(gguf_writer *w, FILE *fp);
/* Appends bytes of the current tensor (in one or more calls); once it is
 * complete, pads and moves on to the next. */
int gguf_w_tensor_data(gguf_writer *w, FILE *fp, const void *data, uint64_t nbytes);
/* Checks that every declared tensor received all its bytes. */
int gguf_w_finish(gguf_writer *w);

#endif
