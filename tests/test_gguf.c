/* GGUF reader/writer tests: round trip of every value type, the shared
 * models, and a catalogue of malformed files that must be refused with a
 * clear message (never a crash). */
#include "../core/gguf.h"
#include "../core/util.h"
#include "../quant/quant.h"
#include "helpers.h"

/* A small valid file: metadata of each kind and two tensors. */
static uint8_t *make_valid(size_t *size) {
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "llama.block_count", 2);
    gguf_w_i32(w, "test.i32", -7);
    gguf_w_f32(w, "test.f32", 0.5f);
    gguf_w_bool(w, "test.bool", true);
    const char *strs[] = {"a", "bc", ""};
    gguf_w_arr_str(w, "test.strs", strs, 3);
    float fs[] = {1, 2, 3};
    gguf_w_arr_f32(w, "test.f32s", fs, 3);
    int64_t ne1[2] = {32, 2}, ne2[1] = {8};
    gguf_w_tensor(w, "a.weight", PLUMB_TYPE_Q8_0, 2, ne1);
    gguf_w_tensor(w, "b.weight", PLUMB_TYPE_F32, 1, ne2);
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    cr_assert_eq(gguf_w_begin(w, fp), 0);
    uint8_t q[68] = {0};
    float b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_eq(gguf_w_tensor_data(w, fp, q, sizeof q), 0);
    cr_assert_eq(gguf_w_tensor_data(w, fp, b, sizeof b), 0);
    cr_assert_eq(gguf_w_finish(w), 0);
    fclose(fp);
    gguf_writer_free(w);
    *size = len;
    return (uint8_t *)buf;
}

Test(gguf, round_trip) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    gguf_file *f = gguf_open_memory(buf, n, "mem");
    cr_assert_not_null(f, "%s", plumb_last_error());
    cr_expect_eq(f->version, 3);
    cr_expect_eq(f->n_kv, 7);
    cr_expect_eq(f->n_tensors, 2);
    const char *s;
    uint32_t u;
    float fl;
    bool b;
    cr_expect_eq(gguf_get_str(f, "general.architecture", &s), 1);
    cr_expect_str_eq(s, "llama");
    cr_expect_eq(gguf_get_u32(f, "llama.block_count", &u), 1);
    cr_expect_eq(u, 2);
    cr_expect_eq(gguf_get_f32(f, "test.f32", &fl), 1);
    cr_expect_float_eq(fl, 0.5f, 0);
    cr_expect_eq(gguf_get_bool(f, "test.bool", &b), 1);
    cr_expect(b);
    cr_expect_eq(gguf_get_u32(f, "test.i32", &u), -1, "negative value must not read as u32");
    cr_expect_eq(gguf_get_u32(f, "absent", &u), 0);
    cr_expect_eq(gguf_get_str(f, "llama.block_count", &s), -1);
    const gguf_kv *kv = gguf_find_kv(f, "test.strs");
    cr_assert_not_null(kv);
    cr_expect_eq(kv->arr_n, 3);
    cr_expect_str_eq(kv->strs[1], "bc");
    cr_expect_str_eq(kv->strs[2], "");
    const gguf_tensor *t = gguf_find_tensor(f, "b.weight");
    cr_assert_not_null(t);
    cr_expect_eq(t->ne[0], 8);
    cr_expect_float_eq(((const float *)t->data)[7], 8.0f, 0);
    cr_expect_eq((uintptr_t)((const uint8_t *)t->data - buf) % 32, 0, "tensor data aligned");
    gguf_close(f);
    free(buf);
}

Test(gguf, every_truncation_is_refused) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size so ASan sees overreads */
        memcpy(copy, buf, cut);
        gguf_file *f = gguf_open_memory(copy, cut, "cut");
        /* the last tensor ends exactly at the end of the file: every cut loses data */
        cr_expect_null(f, "file truncated to %zu of %zu bytes accepted", cut, n);
        if (f) gguf_close(f);
        else cr_expect(strlen(plumb_last_error()) > 5);
        free(copy);
    }
    free(buf);
}

/* Finds the byte offset of a string in the buffer (for targeted corruption). */
static size_t find(const uint8_t *buf, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 0; i + l <= n; i++)
        if (!memcmp(buf + i, s, l)) return i;
    cr_assert_fail("marker '%s' not found", s);
    return 0;
}

static void expect_refused(uint8_t *buf, size_t n, const char *needle) {
    gguf_file *f = gguf_open_memory(buf, n, "bad.gguf");
    cr_expect_null(f, "malformed file accepted (expected error containing '%s')", needle);
    if (f) gguf_close(f);
    else cr_expect(strstr(plumb_last_error(), needle) != NULL, "error '%s' lacks '%s'", plumb_last_error(), needle);
}

Test(gguf, bad_magic_and_version) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    buf[0] = 'X';
    expect_refused(buf, n, "not a GGUF file");
    memcpy(buf, "FUGG", 4);
    expect_refused(buf, n, "big-endian");
    memcpy(buf, "GGUF", 4);
    buf[4] = 9;
    expect_refused(buf, n, "unsupported GGUF version 9");
    free(buf);
}

Test(gguf, impossible_counts) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    uint64_t huge = 1ull << 60;
    memcpy(buf + 8, &huge, 8);
    expect_refused(buf, n, "impossible");
    free(buf);
}

Test(gguf, bad_value_type_and_lengths) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    size_t k = find(buf, n, "test.f32s");
    uint32_t bad = 77;
    uint8_t *copy = malloc(n);
    memcpy(copy, buf, n);
    memcpy(copy + k + 9, &bad, 4); /* value type after the key */
    expect_refused(copy, n, "invalid value type 77");
    /* a string length that runs past the end */
    memcpy(copy, buf, n);
    size_t a = find(buf, n, "general.architecture") + 20 + 4;
    uint64_t len = 1ull << 40;
    memcpy(copy + a, &len, 8);
    expect_refused(copy, n, "truncated");
    /* array element count beyond the file */
    memcpy(copy, buf, n);
    uint64_t cnt = 1ull << 50;
    memcpy(copy + k + 9 + 4 + 4, &cnt, 8);
    expect_refused(copy, n, "runs past end of file");
    free(copy);
    free(buf);
}

Test(gguf, bad_tensor_infos) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    uint8_t *copy = malloc(n);
    size_t t = find(buf, n, "a.weight") + 8; /* -> n_dims */
    uint32_t nd = 9;
    memcpy(copy, buf, n);
    memcpy(copy + t, &nd, 4);
    expect_refused(copy, n, "dimensions");
    uint64_t zero = 0;
    memcpy(copy, buf, n);
    memcpy(copy + t + 4, &zero, 8);
    expect_refused(copy, n, "invalid dimension 0");
    uint64_t odd = 33; /* Q8_0 rows must be multiples of 32 */
    memcpy(copy, buf, n);
    memcpy(copy + t + 4, &odd, 8);
    expect_refused(copy, n, "not a multiple");
    uint32_t type = 99;
    memcpy(copy, buf, n);
    memcpy(copy + t + 4 + 16, &type, 4);
    expect_refused(copy, n, "unknown type id 99");
    uint64_t off = 8; /* misaligned */
    memcpy(copy, buf, n);
    memcpy(copy + t + 4 + 16 + 4, &off, 8);
    expect_refused(copy, n, "not aligned");
    off = 1ull << 40;
    memcpy(copy, buf, n);
    memcpy(copy + t + 4 + 16 + 4, &off, 8);
    expect_refused(copy, n, "runs past end of file");
    /* b.weight moved onto a.weight's bytes */
    size_t tb = find(buf, n, "b.weight") + 8 + 4 + 8 + 4;
    uint64_t z = 0;
    memcpy(copy, buf, n);
    memcpy(copy + tb, &z, 8);
    expect_refused(copy, n, "overlap");
    free(copy);
    free(buf);
}

Test(gguf, duplicates_refused) {
    size_t n;
    uint8_t *buf = make_valid(&n);
    size_t b = find(buf, n, "b.weight");
    buf[b] = 'a';
    expect_refused(buf, n, "duplicate tensor name 'a.weight'");
    free(buf);
    buf = make_valid(&n);
    size_t k2 = find(buf, n, "test.i32");
    memcpy(buf + k2, "test.f32", 8);
    expect_refused(buf, n, "duplicate metadata key 'test.f32'");
    free(buf);
}

Test(gguf, shared_model_opens) {
    const char *p = shared_file("models/stories260K.gguf");
    REQUIRE_SHARED(p);
    gguf_file *f = gguf_open(p);
    cr_assert_not_null(f, "%s", plumb_last_error());
    cr_expect_eq(f->version, 3);
    cr_expect_eq(f->n_tensors, 48);
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_k.weight");
    cr_assert_not_null(t);
    cr_expect_eq(t->ne[0], 64);
    cr_expect_eq(t->ne[1], 32);
    gguf_close(f);
}

Test(gguf, missing_file_message) {
    cr_expect_null(gguf_open("/nonexistent/x.gguf"));
    cr_expect(strstr(plumb_last_error(), "cannot open") != NULL);
}
