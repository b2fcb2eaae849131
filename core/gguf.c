/* gguf.c — GGUF reader and writer.
 *
 * The reader treats the file as untrusted: every length, count, offset and
 * type id is checked against the bytes that are really there before use, and
 * arithmetic on them is overflow-checked. Failure yields one line naming the
 * problem. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../quant/quant.h"
#include "util.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */

typedef struct {
    const uint8_t *p;
    uint64_t pos, size;
    uint32_t version;
    const char *label;
} cursor;

static int fail(const cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const cursor *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return plumb_set_error("%s: %s", c->label, msg);
}

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return fail(c, "truncated: %s needs %llu bytes at offset %llu, file has %llu", what,
                    (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)c->size);
    return 0;
}

static int rd(cursor *c, void *out, uint64_t n, const char *what) {
    if (need(c, n, what)) return -1;
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* Counts and string lengths are u32 in GGUF v1, u64 from v2 on. */
static int rd_count(cursor *c, uint64_t *v, const char *what) {
    if (c->version == 1) {
        uint32_t x;
        if (rd_u32(c, &x, what)) return -1;
        *v = x;
        return 0;
    }
    return rd_u64(c, v, what);
}

/* Reads a GGUF string into a fresh NUL-terminated copy. */
static int rd_str(cursor *c, char **out, const char *what) {
    uint64_t len;
    if (rd_count(c, &len, what)) return -1;
    if (need(c, len, what)) return -1;
    if (memchr(c->p + c->pos, 0, len)) return fail(c, "%s contains a NUL byte", what);
    char *s = malloc(len + 1);
    if (!s) return fail(c, "out of memory reading %s (%llu bytes)", what, (unsigned long long)len);
    memcpy(s, c->p + c->pos, len);
    s[len] = 0;
    c->pos += len;
    *out = s;
    return 0;
}

static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "str", "arr", "u64", "i64", "f64"};
    return t < GGUF_VT_COUNT ? names[t] : "invalid";
}

static int rd_scalar(cursor *c, uint32_t t, gguf_kv *kv, const char *key) {
    uint8_t b[8] = {0};
    size_t n = scalar_size(t);
    if (rd(c, b, n, key)) return -1;
    switch (t) {
    case GGUF_VT_UINT8: kv->v.u = b[0]; break;
    case GGUF_VT_BOOL:
        if (b[0] > 1) return fail(c, "key '%s': bool value %u is not 0 or 1", key, b[0]);
        kv->v.u = b[0];
        break;
    case GGUF_VT_INT8: kv->v.i = (int8_t)b[0]; break;
    case GGUF_VT_UINT16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
    case GGUF_VT_INT16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case GGUF_VT_UINT32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
    case GGUF_VT_INT32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case GGUF_VT_FLOAT32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case GGUF_VT_UINT64: memcpy(&kv->v.u, b, 8); break;
    case GGUF_VT_INT64: memcpy(&kv->v.i, b, 8); break;
    case GGUF_VT_FLOAT64: memcpy(&kv->v.f, b, 8); break;
    }
    return 0;
}

/* Validates and skips an array value without storing it (arrays of arrays). */
static int skip_array(cursor *c, const char *key, int depth) {
    uint32_t et;
    uint64_t n;
    if (depth > 8) return fail(c, "key '%s': arrays nested too deeply", key);
    if (rd_u32(c, &et, key) || rd_count(c, &n, key)) return -1;
    if (et >= GGUF_VT_COUNT) return fail(c, "key '%s': invalid array element type %u", key, et);
    for (uint64_t i = 0; i < n; i++) {
        if (et == GGUF_VT_STRING) {
            uint64_t len;
            if (rd_count(c, &len, key) || need(c, len, key)) return -1;
            c->pos += len;
        } else if (et == GGUF_VT_ARRAY) {
            if (skip_array(c, key, depth + 1)) return -1;
        } else {
            uint64_t bytes;
            if (!plumb_mul_ok(n, scalar_size(et), &bytes) || need(c, bytes, key)) return fail(c, "key '%s': array of %llu elements runs past end of file", key, (unsigned long long)n);
            c->pos += bytes;
            break;
        }
    }
    return 0;
}

static int rd_array(cursor *c, gguf_kv *kv) {
    const char *key = kv->key;
    if (rd_u32(c, &kv->arr_type, key) || rd_count(c, &kv->arr_n, key)) return -1;
    uint32_t et = kv->arr_type;
    uint64_t n = kv->arr_n;
    if (et >= GGUF_VT_COUNT) return fail(c, "key '%s': invalid array element type %u", key, et);
    if (et == GGUF_VT_STRING) {
        /* every string costs at least its length field */
        uint64_t min_bytes;
        if (!plumb_mul_ok(n, c->version == 1 ? 4 : 8, &min_bytes) || min_bytes > c->size - c->pos)
            return fail(c, "key '%s': array of %llu strings runs past end of file", key, (unsigned long long)n);
        kv->strs = calloc(n ? n : 1, sizeof(char *));
        if (!kv->strs) return fail(c, "out of memory for key '%s'", key);
        for (uint64_t i = 0; i < n; i++)
            if (rd_str(c, &kv->strs[i], key)) return -1;
        return 0;
    }
    if (et == GGUF_VT_ARRAY) {
        for (uint64_t i = 0; i < n; i++)
            if (skip_array(c, key, 1)) return -1;
        return 0;
    }
    uint64_t bytes;
    if (!plumb_mul_ok(n, scalar_size(et), &bytes) || need(c, bytes, key))
        return fail(c, "key '%s': array of %llu elements runs past end of file", key, (unsigned long long)n);
    kv->arr = malloc(bytes ? bytes : 1);
    if (!kv->arr) return fail(c, "out of memory for key '%s'", key);
    memcpy(kv->arr, c->p + c->pos, bytes);
    c->pos += bytes;
    if (et == GGUF_VT_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((uint8_t *)kv->arr)[i] > 1) return fail(c, "key '%s': bool element is not 0 or 1", key);
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

/* Sorts pointers to the name fields and reports the first repeated name. */
static int check_unique(cursor *c, char **first, size_t stride, uint64_t n, const char *what) {
    if (n < 2) return 0;
    char ***ptrs = malloc(n * sizeof *ptrs);
    if (!ptrs) return fail(c, "out of memory");
    for (uint64_t i = 0; i < n; i++) ptrs[i] = (char **)((char *)first + i * stride);
    qsort(ptrs, n, sizeof *ptrs, cmp_str_ptr);
    int rc = 0;
    for (uint64_t i = 1; i < n && !rc; i++)
        if (strcmp(*ptrs[i], *ptrs[i - 1]) == 0) rc = fail(c, "duplicate %s '%s'", what, *ptrs[i]);
    free(ptrs);
    return rc;
}

static int parse_kvs(cursor *c, gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        if (rd_str(c, &kv->key, "metadata key")) return -1;
        if (rd_u32(c, &kv->type, kv->key)) return -1;
        if (kv->type >= GGUF_VT_COUNT) return fail(c, "key '%s': invalid value type %u", kv->key, kv->type);
        int rc = kv->type == GGUF_VT_STRING  ? rd_str(c, &kv->v.str, kv->key)
                 : kv->type == GGUF_VT_ARRAY ? rd_array(c, kv)
                                             : rd_scalar(c, kv->type, kv, kv->key);
        if (rc) return -1;
    }
    if (check_unique(c, &f->kv[0].key, sizeof(gguf_kv), f->n_kv, "metadata key")) return -1;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (al) {
        if (al->type != GGUF_VT_UINT32) return fail(c, "general.alignment must be u32, is %s", gguf_vtype_name(al->type));
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            return fail(c, "general.alignment %llu is not a power of two", (unsigned long long)al->v.u);
        f->alignment = al->v.u;
    }
    return 0;
}

static int parse_tensor_infos(cursor *c, gguf_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint32_t nd;
        if (rd_str(c, &t->name, "tensor name")) return -1;
        if (rd_u32(c, &nd, t->name)) return -1;
        if (nd < 1 || nd > GGUF_MAX_DIMS) return fail(c, "tensor '%s': %u dimensions (1..4 allowed)", t->name, nd);
        t->n_dims = (int)nd;
        uint64_t nelem = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t dim;
            if (rd_count(c, &dim, t->name)) return -1;
            if (dim == 0 || dim > INT64_MAX / 2 || !plumb_mul_ok(nelem, dim, &nelem) || nelem > INT64_MAX / 2)
                return fail(c, "tensor '%s': invalid dimension %llu", t->name, (unsigned long long)dim);
            t->ne[d] = (int64_t)dim;
        }
        if (rd_u32(c, &t->type, t->name) || rd_u64(c, &t->offset, t->name)) return -1;
        const plumb_type_traits *tr = plumb_type_get(t->type);
        if (!tr) return fail(c, "tensor '%s': unknown type id %u", t->name, t->type);
        if (t->ne[0] % tr->block_size)
            return fail(c, "tensor '%s': row length %lld is not a multiple of %s block size %d", t->name,
                        (long long)t->ne[0], tr->name, tr->block_size);
        t->nbytes = plumb_type_row_bytes(t->type, nelem);
        if (!t->nbytes) return fail(c, "tensor '%s': size overflows", t->name);
        if (t->offset % f->alignment)
            return fail(c, "tensor '%s': offset %llu is not aligned to %llu", t->name,
                        (unsigned long long)t->offset, (unsigned long long)f->alignment);
    }
    return check_unique(c, &f->tensors[0].name, sizeof(gguf_tensor), f->n_tensors, "tensor name");
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Tensor data must lie inside the file and no two tensors may overlap. */
static int check_tensor_data(cursor *c, gguf_file *f) {
    uint64_t data_size = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (!plumb_add_ok(t->offset, t->nbytes, &end) || end > data_size)
            return fail(c, "tensor '%s': data (%llu bytes at offset %llu) runs past end of file", t->name,
                        (unsigned long long)t->nbytes, (unsigned long long)t->offset);
        t->data = f->base + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return 0;
    gguf_tensor **order = malloc(f->n_tensors * sizeof *order);
    if (!order) return fail(c, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_tensor_offset);
    int rc = 0;
    for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            rc = fail(c, "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
    free(order);
    return rc;
}

static gguf_file *parse(const uint8_t *base, uint64_t size, const char *label) {
    cursor c = {.p = base, .pos = 0, .size = size, .version = 3, .label = label};
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        plumb_set_error("%s: out of memory", label);
        return NULL;
    }
    f->base = base;
    f->size = size;
    uint32_t magic;
    if (rd_u32(&c, &magic, "magic")) goto bad;
    if (magic != GGUF_MAGIC) {
        if (magic == 0x47475546u) fail(&c, "big-endian GGUF files are not supported");
        else fail(&c, "not a GGUF file (bad magic 0x%08x)", magic);
        goto bad;
    }
    if (rd_u32(&c, &f->version, "version")) goto bad;
    if (f->version < 1 || f->version > 3) {
        fail(&c, "unsupported GGUF version %u (1..3 supported)", f->version);
        goto bad;
    }
    c.version = f->version;
    if (rd_count(&c, &f->n_tensors, "tensor count") || rd_count(&c, &f->n_kv, "metadata count")) goto bad;
    /* each entry needs at least a few bytes: reject absurd counts up front */
    if (f->n_kv > size / 9 || f->n_tensors > size / 16) {
        fail(&c, "counts (%llu tensors, %llu keys) are impossible for a %llu-byte file",
             (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv, (unsigned long long)size);
        goto bad;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        fail(&c, "out of memory");
        goto bad;
    }
    if (parse_kvs(&c, f) || parse_tensor_infos(&c, f)) goto bad;
    uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    f->data_offset = c.pos + pad;
    if (f->n_tensors && f->data_offset > size) {
        fail(&c, "truncated before the tensor data section");
        goto bad;
    }
    if (f->data_offset > size) f->data_offset = size;
    if (check_tensor_data(&c, f)) goto bad;
    return f;
bad:
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_memory(const void *buf, size_t size, const char *label) {
    return parse(buf, size, label ? label : "<memory>");
}

gguf_file *gguf_open(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        plumb_set_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        plumb_set_error("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 8) {
        plumb_set_error("%s: too small to be a GGUF file (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        plumb_set_error("%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    gguf_file *f = parse(base, (uint64_t)st.st_size, path);
    if (!f) {
        munmap(base, (size_t)st.st_size);
        return NULL;
    }
    f->mapped = 1;
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        free(kv->key);
        if (kv->type == GGUF_VT_STRING) free(kv->v.str);
        if (kv->strs)
            for (uint64_t j = 0; j < kv->arr_n; j++) free(kv->strs[j]);
        free(kv->strs);
        free(kv->arr);
    }
    for (uint64_t i = 0; f->tensors && i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static int wrong_type(const char *key, const gguf_kv *kv, const char *want) {
    return plumb_set_error("metadata '%s' has type %s, expected %s", key, gguf_vtype_name(kv->type), want);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        if (kv->v.u > UINT32_MAX) return plumb_set_error("metadata '%s' value too large", key);
        *out = (uint32_t)kv->v.u;
        return 1;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        if (kv->v.i < 0 || kv->v.i > UINT32_MAX) return plumb_set_error("metadata '%s' value %lld out of range", key, (long long)kv->v.i);
        *out = (uint32_t)kv->v.i;
        return 1;
    default: return wrong_type(key, kv, "an integer");
    }
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_VT_FLOAT32 && kv->type != GGUF_VT_FLOAT64) return wrong_type(key, kv, "a float");
    *out = (float)kv->v.f;
    return 1;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_VT_BOOL) return wrong_type(key, kv, "bool");
    *out = kv->v.u != 0;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, const char **out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_VT_STRING) return wrong_type(key, kv, "string");
    *out = kv->v.str;
    return 1;
}

void gguf_kv_format(const gguf_kv *kv, char *buf, size_t size) {
    switch (kv->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        snprintf(buf, size, "%llu", (unsigned long long)kv->v.u);
        break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        snprintf(buf, size, "%lld", (long long)kv->v.i);
        break;
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: snprintf(buf, size, "%g", kv->v.f); break;
    case GGUF_VT_BOOL: snprintf(buf, size, "%s", kv->v.u ? "true" : "false"); break;
    case GGUF_VT_STRING: {
        size_t len = strlen(kv->v.str);
        snprintf(buf, size, "\"%.*s%s", (int)(len > 60 ? 60 : len), kv->v.str, len > 60 ? "...\" (truncated)" : "\"");
        for (char *p = buf; *p; p++)
            if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
        break;
    }
    case GGUF_VT_ARRAY:
        if (kv->arr_type == GGUF_VT_STRING && kv->arr_n > 0)
            snprintf(buf, size, "[%s x %llu] \"%.20s\", ...", gguf_vtype_name(kv->arr_type),
                     (unsigned long long)kv->arr_n, kv->strs[0]);
        else
            snprintf(buf, size, "[%s x %llu]", gguf_vtype_name(kv->arr_type), (unsigned long long)kv->arr_n);
        break;
    default: snprintf(buf, size, "?");
    }
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

int gguf_tensor_data_sha256(const gguf_file *f, char hex[65]) {
    const gguf_tensor **order = malloc(sizeof *order * (f->n_tensors ? f->n_tensors : 1));
    plumb_sha256_ctx *c = plumb_sha256_begin();
    if (!order || !c) {
        free(order);
        plumb_sha256_end(c, hex);
        return plumb_set_error("out of memory");
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_tensor_name);
    for (uint64_t i = 0; i < f->n_tensors; i++) plumb_sha256_update(c, order[i]->data, order[i]->nbytes);
    plumb_sha256_end(c, hex);
    free(order);
    return 0;
}
