/* cmd_info.c — plumb info FILE.gguf: what a GGUF file holds. */
#include <stdio.h>
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

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *synthetic = NULL;
    int all_tensors = 0, all_keys = 0, hash = 0, topology = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: plumb info FILE.gguf [--all-tensors] [--all-keys] [--hash]\n"
                   "       plumb info --topology [--synthetic 'pack:2 numa:2 core:8 pu:2']  CPUs, NUMA nodes and thread plans\n"
                   "  --hash  SHA-256 of each tensor's data and of all of it (tensors in name order)\n"
                   "          (compares quantizations across tools, whatever the metadata)\n");
            return 0;
        } else if (!strcmp(argv[i], "--all-tensors")) all_tensors = 1;
        else if (!strcmp(argv[i], "--all-keys")) all_keys = 1;
        else if (!strcmp(argv[i], "--hash")) hash = 1;
        else if (!strcmp(argv[i], "--topology")) topology = 1;
        else if (!strcmp(argv[i], "--synthetic")) { if (cli_str(argc, argv, &i, &synthetic)) return 2; topology = 1; }
        else if (!strcmp(argv[i], "-m")) { if (cli_str(argc, argv, &i, &path)) return 2; }
        else if (argv[i][0] == '-') return cli_fail("info", "unknown option '%s'", argv[i]);
        else path = argv[i];
    }
    if (topology) {
        char buf[8192];
        plumb_topology_describe(synthetic, buf, sizeof buf);
        fputs(buf, stdout);
        if (!path) return strstr(buf, "topology (") ? 0 : 1;
    }
    if (!path) return cli_fail("info", "no file given (usage: plumb info FILE.gguf | plumb info --topology)");
    gguf_file *f = gguf_open(path);
    if (!f) return cli_fail("info", "%s", plumb_last_error());

    char buf[256];
    if (hash) {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            char hex[65];
            plumb_sha256_ctx *one = plumb_sha256_begin();
            plumb_sha256_update(one, t->data, t->nbytes);
            plumb_sha256_end(one, hex);
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
