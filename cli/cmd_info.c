/* cmd_info.c — plumb info FILE.gguf: what a GGUF file holds. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/gguf.h"
#include "../core/topology.h"
#include "../core/util.h"
#include "../quant/quant.h"
#include "cli.h"

static void human(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (1ull << 20));
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024);
    else snprintf(buf, n, "%llu B", (unsigned long long)b);
}

static void tensor_sha256(const gguf_tensor *t, char hex[65]) {
    plumb_sha256_ctx *c = plumb_sha256_begin();
    plumb_sha256_update(c, t->data, t->nbytes);
    plumb_sha256_end(c, hex);
}

/* an unsigned value (jansson's integers are signed: above INT64_MAX, a real) */
static json_t *json_unsigned(uint64_t u) { return u <= INT64_MAX ? json_integer((json_int_t)u) : json_real((double)u); }

static json_t *json_text(const char *s) {
    char *c = plumb_utf8_clean(s, strlen(s));
    json_t *j = json_string(c ? c : "");
    free(c);
    return j;
}

/* element i of a numeric or string array value as JSON */
static json_t *json_array_element(const gguf_kv *kv, uint64_t i) {
    const void *a = kv->arr;
    switch (kv->arr_type) {
    case GGUF_VT_UINT8: return json_integer(((const uint8_t *)a)[i]);
    case GGUF_VT_INT8: return json_integer(((const int8_t *)a)[i]);
    case GGUF_VT_UINT16: return json_integer(((const uint16_t *)a)[i]);
    case GGUF_VT_INT16: return json_integer(((const int16_t *)a)[i]);
    case GGUF_VT_UINT32: return json_integer(((const uint32_t *)a)[i]);
    case GGUF_VT_INT32: return json_integer(((const int32_t *)a)[i]);
    case GGUF_VT_UINT64: return json_unsigned(((const uint64_t *)a)[i]);
    case GGUF_VT_INT64: return json_integer(((const int64_t *)a)[i]);
    case GGUF_VT_FLOAT32: return json_real(((const float *)a)[i]);
    case GGUF_VT_FLOAT64: return json_real(((const double *)a)[i]);
    case GGUF_VT_BOOL: return json_boolean(((const uint8_t *)a)[i]);
    case GGUF_VT_STRING: return json_text(kv->strs[i]);
    default: return json_null();
    }
}

/* A metadata value as JSON: numbers, strings and booleans as themselves; an
 * array in full when `full` (and it holds numbers or strings), else as
 * {"array": element type, "length": n} (the tokenizer's arrays run to 100k+). */
static json_t *json_kv_value(const gguf_kv *kv, int full) {
    switch (kv->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64: return json_unsigned(kv->v.u);
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64: return json_integer(kv->v.i);
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return json_real(kv->v.f);
    case GGUF_VT_BOOL: return json_boolean(kv->v.u);
    case GGUF_VT_STRING: return json_text(kv->v.str);
    case GGUF_VT_ARRAY:
        if (full && (kv->arr || kv->strs)) {
            json_t *a = json_array();
            for (uint64_t i = 0; i < kv->arr_n; i++) json_array_append_new(a, json_array_element(kv, i));
            return a;
        }
        return json_pack("{s:s,s:I}", "array", gguf_vtype_name(kv->arr_type), "length", (json_int_t)kv->arr_n);
    default: return json_null();
    }
}

/* plumb info --json: the file as one JSON object (every tensor listed); with
 * --hash each tensor's SHA-256 and that of all the data instead of shapes */
static int info_json(const gguf_file *f, const char *path, int all_keys, int hash) {
    json_t *root = json_object(), *meta = json_object(), *tensors = json_array();
    json_object_set_new(root, "file", json_text(path));
    json_object_set_new(root, "gguf_version", json_integer(f->version));
    json_object_set_new(root, "alignment", json_integer((json_int_t)f->alignment));
    const char *arch = NULL;
    gguf_get_str(f, "general.architecture", &arch);
    json_object_set_new(root, "architecture", arch ? json_text(arch) : json_null());
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        const int tok = !strncmp(kv->key, "tokenizer.", 10) && kv->type == GGUF_VT_ARRAY;
        char *key = plumb_utf8_clean(kv->key, strlen(kv->key));
        if (key) json_object_set_new(meta, key, json_kv_value(kv, all_keys || !tok));
        free(key);
    }
    json_object_set_new(root, "metadata", meta);
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens"), *merges = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (toks) {
        const char *tmodel = NULL;
        gguf_get_str(f, "tokenizer.ggml.model", &tmodel);
        json_object_set_new(root, "tokenizer", json_pack("{s:o,s:I,s:I}", "model", tmodel ? json_text(tmodel) : json_null(), "tokens",
                                                         (json_int_t)toks->arr_n, "merges", (json_int_t)(merges ? merges->arr_n : 0)));
    } else json_object_set_new(root, "tokenizer", json_null());
    uint64_t total = 0, params = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        json_t *shape = json_array(), *o = json_pack("{s:o,s:s}", "name", json_text(t->name), "type", plumb_type_name(t->type));
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
        for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
        if (hash) {
            char hex[65];
            tensor_sha256(t, hex);
            json_object_set_new(o, "sha256", json_string(hex));
        }
        json_array_append_new(tensors, o);
        total += t->nbytes;
        params += n;
    }
    json_object_set_new(root, "tensors", tensors);
    json_object_set_new(root, "parameters", json_integer((json_int_t)params));
    json_object_set_new(root, "tensor_bytes", json_integer((json_int_t)total));
    if (hash) {
        char hex[65];
        gguf_tensor_data_sha256(f, hex);
        json_object_set_new(root, "tensor_data_sha256", json_string(hex));
    }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return cli_fail("info", "out of memory writing JSON");
    puts(text);
    free(text);
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *synthetic = NULL;
    int all_tensors = 0, all_keys = 0, hash = 0, topology = 0, as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: plumb info FILE.gguf [--all-tensors] [--all-keys] [--hash] [--json]\n"
                   "       plumb info --topology [--synthetic 'pack:2 numa:2 core:8 pu:2']  CPUs, NUMA nodes and thread plans\n"
                   "  --hash  SHA-256 of each tensor's data and of all of it (tensors in name order)\n"
                   "          (compares quantizations across tools, whatever the metadata)\n"
                   "  --json  one JSON object: metadata (the tokenizer's arrays as their length unless\n"
                   "          --all-keys), tokenizer summary, every tensor (name, type, shape, bytes), totals\n");
            return 0;
        } else if (!strcmp(argv[i], "--all-tensors")) all_tensors = 1;
        else if (!strcmp(argv[i], "--all-keys")) all_keys = 1;
        else if (!strcmp(argv[i], "--hash")) hash = 1;
        else if (!strcmp(argv[i], "--topology")) topology = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--synthetic")) { if (cli_str(argc, argv, &i, &synthetic)) return 2; topology = 1; }
        else if (!strcmp(argv[i], "-m")) { if (cli_str(argc, argv, &i, &path)) return 2; }
        else if (argv[i][0] == '-') return cli_fail("info", "unknown option '%s'", argv[i]);
        else path = argv[i];
    }
    if (topology && as_json) return cli_fail("info", "--json describes a GGUF file; --topology has no JSON form");
    if (topology) {
        char buf[8192];
        plumb_topology_describe(synthetic, buf, sizeof buf);
        fputs(buf, stdout);
        if (!path) return strstr(buf, "topology (") ? 0 : 1;
    }
    if (!path) return cli_fail("info", "no file given (usage: plumb info FILE.gguf | plumb info --topology)");
    gguf_file *f = gguf_open(path);
    if (!f) return cli_fail("info", "%s", plumb_last_error());

    if (as_json) {
        const int rc = info_json(f, path, all_keys, hash);
        gguf_close(f);
        return rc;
    }
    char buf[256];
    if (hash) {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            char hex[65];
            tensor_sha256(t, hex);
            printf("%s  %-6s %s\n", hex, plumb_type_name(t->type), t->name);
        }
        char hex[65];
        gguf_tensor_data_sha256(f, hex);
        printf("%s  all tensor data (in name order)\n", hex);
        gguf_close(f);
        return 0;
    }
    printf("file:        %s\n", path);
    printf("gguf:        version %u, %llu metadata keys, %llu tensors, alignment %llu\n", f->version,
           (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors, (unsigned long long)f->alignment);
    const char *arch = NULL;
    gguf_get_str(f, "general.architecture", &arch);
    printf("arch:        %s\n", arch ? arch : "(none)");

    /* metadata: everything except the big tokenizer arrays, unless asked */
    printf("\nmetadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        int tok = !strncmp(kv->key, "tokenizer.", 10) && kv->type == GGUF_VT_ARRAY;
        if (tok && !all_keys) continue;
        gguf_kv_format(kv, buf, sizeof buf);
        printf("  %-44s %s\n", kv->key, buf);
    }
    /* tokenizer summary */
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const char *tmodel = NULL;
    gguf_get_str(f, "tokenizer.ggml.model", &tmodel);
    if (toks) {
        const gguf_kv *merges = gguf_find_kv(f, "tokenizer.ggml.merges");
        printf("\ntokenizer:   %s, %llu tokens%s%s", tmodel ? tmodel : "?", (unsigned long long)toks->arr_n,
               gguf_find_kv(f, "tokenizer.ggml.scores") ? ", scores" : "",
               gguf_find_kv(f, "tokenizer.ggml.token_type") ? ", token types" : "");
        if (merges) printf(", %llu merges", (unsigned long long)merges->arr_n);
        printf("\n");
    }

    /* tensors: a table, grouped summary by type */
    uint64_t total = 0, params = 0, by_type[PLUMB_TYPE_COUNT] = {0};
    printf("\ntensors:\n  %-34s %-6s %-28s %s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        total += t->nbytes;
        params += n;
        by_type[t->type] += t->nbytes;
        if (!all_tensors && f->n_tensors > 24 && i >= 12 && i + 4 < f->n_tensors) {
            if (i == 12) printf("  ... (%llu more; --all-tensors lists them)\n", (unsigned long long)(f->n_tensors - 16));
            continue;
        }
        char shape[64] = "[", sz[32];
        for (int d = 0; d < t->n_dims; d++) {
            char part[24];
            snprintf(part, sizeof part, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
            strncat(shape, part, sizeof shape - strlen(shape) - 2);
        }
        strcat(shape, "]");
        human(t->nbytes, sz, sizeof sz);
        printf("  %-34s %-6s %-28s %s\n", t->name, plumb_type_name(t->type), shape, sz);
    }
    human(total, buf, sizeof buf);
    printf("\ntotal:       %.2fM parameters, %s of tensor data (%.2f bits/weight)\n", (double)params / 1e6, buf,
           params ? 8.0 * (double)total / (double)params : 0.0);
    printf("by type:    ");
    for (int t = 0; t < PLUMB_TYPE_COUNT; t++)
        if (by_type[t]) {
            human(by_type[t], buf, sizeof buf);
            printf(" %s %s;", plumb_type_name((uint32_t)t), buf);
        }
    printf("\n");
    gguf_close(f);
    return 0;
}
