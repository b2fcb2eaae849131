/* cmd_convert.c — plumb convert-llama2c, plumb mkmodel, plumb quantize:
 * the commands that write GGUF files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/util.h"
#include "../include/plumb.h"
#include "../models/convert.h"
#include "../quant/quant.h"
#include "cli.h"

int cmd_convert_llama2c(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: plumb convert-llama2c MODEL.bin TOKENIZER.bin OUT.gguf\n");
        return 0;
    }
    if (argc != 4) return cli_fail("convert-llama2c", "usage: plumb convert-llama2c MODEL.bin TOKENIZER.bin OUT.gguf");
    if (plumb_convert_llama2c(argv[1], argv[2], argv[3])) return cli_fail("convert-llama2c", "%s", plumb_last_error());
    fprintf(stderr, "wrote %s\n", argv[3]);
    return 0;
}

static const char *mkmodel_help =
    "usage: plumb mkmodel --shape NAME --type TYPE -o OUT.gguf [--vocab VOCAB.gguf] [--seed S]\n"
    "  shapes: %s custom\n"
    "  custom: --dim N --layers N --heads N --kv-heads N --ffn N --vocab-size N [--ctx N]\n"
    "  types:  f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k\n"
    "  The weights are random (speed work only); the vocabulary is built in unless\n"
    "  --vocab names a GGUF to copy tokenizer.* from.\n";

int cmd_mkmodel(int argc, char **argv) {
    plumb_synth_params p = {0};
    const char *shape = NULL, *type = "f16", *out = NULL;
    plumb_shape custom = {.name = "custom", .n_ctx = 2048, .rope_freq_base = 10000.f, .arch = "llama"};
    char names[256] = "";
    for (const plumb_shape *s = plumb_shapes(); s->name; s++) {
        strncat(names, s->name, sizeof names - strlen(names) - 2);
        strcat(names, " ");
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf(mkmodel_help, names); return 0; }
        else if (!strcmp(a, "--shape")) rc = cli_str(argc, argv, &i, &shape);
        else if (!strcmp(a, "--type")) rc = cli_str(argc, argv, &i, &type);
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) rc = cli_str(argc, argv, &i, &out);
        else if (!strcmp(a, "--vocab")) rc = cli_str(argc, argv, &i, &p.vocab_path);
        else if (!strcmp(a, "--seed")) rc = cli_u64(argc, argv, &i, &p.seed);
        else if (!strcmp(a, "--dim")) rc = cli_int(argc, argv, &i, 1, 65536, &custom.n_embd);
        else if (!strcmp(a, "--layers")) rc = cli_int(argc, argv, &i, 1, 1024, &custom.n_layer);
        else if (!strcmp(a, "--heads")) rc = cli_int(argc, argv, &i, 1, 1024, &custom.n_head);
        else if (!strcmp(a, "--kv-heads")) rc = cli_int(argc, argv, &i, 1, 1024, &custom.n_head_kv);
        else if (!strcmp(a, "--ffn")) rc = cli_int(argc, argv, &i, 1, 1 << 20, &custom.n_ff);
        else if (!strcmp(a, "--vocab-size")) rc = cli_int(argc, argv, &i, 259, 1 << 22, &custom.n_vocab);
        else if (!strcmp(a, "--ctx")) rc = cli_int(argc, argv, &i, 1, 1 << 22, &custom.n_ctx);
        else return cli_fail("mkmodel", "unknown option '%s'", a);
        if (rc) return 2;
    }
    if (!shape || !out) return cli_fail("mkmodel", "--shape and -o are required (plumb mkmodel --help)");
    if (!strcmp(shape, "custom")) {
        if (!custom.n_head_kv) custom.n_head_kv = custom.n_head;
        p.shape = custom;
    } else {
        const plumb_shape *s = plumb_shape_find(shape);
        if (!s) return cli_fail("mkmodel", "unknown shape '%s' (known: %scustom)", shape, names);
        p.shape = *s;
    }
    int t = plumb_type_from_name(type);
    if (t < 0) return cli_fail("mkmodel", "unknown type '%s'", type);
    p.type = (uint32_t)t;
    double t0 = plumb_time_s();
    if (plumb_make_synthetic(&p, out)) return cli_fail("mkmodel", "%s", plumb_last_error());
    fprintf(stderr, "wrote %s (%s, %s) in %.1f s\n", out, p.shape.name, plumb_type_name(p.type), plumb_time_s() - t0);
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: plumb quantize IN.gguf OUT.gguf TYPE [-t THREADS]\n"
                   "  TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k q4_k_m q5_k_m\n");
            return 0;
        } else if (!strcmp(argv[i], "-t")) {
            if (cli_threads(argc, argv, &i, &threads)) return 2;
        } else if (n_pos < 3) pos[n_pos++] = argv[i];
        else return cli_fail("quantize", "unexpected argument '%s'", argv[i]);
    }
    if (n_pos != 3) return cli_fail("quantize", "usage: plumb quantize IN.gguf OUT.gguf TYPE");
    int type;
    if (!strcasecmp(pos[2], "q4_k_m")) type = PLUMB_MIX_Q4_K_M;
    else if (!strcasecmp(pos[2], "q5_k_m")) type = PLUMB_MIX_Q5_K_M;
    else if ((type = plumb_type_from_name(pos[2])) < 0) return cli_fail("quantize", "unknown type '%s'", pos[2]);
    if (!strcmp(pos[0], pos[1])) return cli_fail("quantize", "output must differ from input");
    double t0 = plumb_time_s();
    if (plumb_quantize_file(pos[0], pos[1], type, threads)) return cli_fail("quantize", "%s", plumb_last_error());
    fprintf(stderr, "wrote %s (%s) in %.1f s\n", pos[1], pos[2], plumb_time_s() - t0);
    return 0;
}
