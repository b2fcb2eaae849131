/* Chat templates: recognition from tokenizer.chat_template, and the exact
 * prompt text each family produces (as the models' Jinja templates render it). */
#include "../core/gguf.h"
#include "../include/plumb.h"
#include "helpers.h"

static const plumb_chat_message conv[] = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Name a color."}};

static void expect_format(const char *family, const char *want) {
    char *got = plumb_chat_format(family, conv, 4, 1);
    cr_assert_not_null(got, "%s: %s", family, plumb_last_error());
    cr_expect_str_eq(got, want, "%s", family);
    free(got);
}

Test(chat, chatml) {
    expect_format("chatml", "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
                            "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n");
}

Test(chat, llama3) {
    expect_format("llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

Test(chat, llama2_with_system) {
    expect_format("llama2-sys", "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST]Hello.</s>[INST] Name a color. [/INST]");
}

Test(chat, mistral) { expect_format("mistral", "[INST] You are terse.\nHi [/INST]Hello.</s>[INST] Name a color. [/INST]"); }

Test(chat, phi3) {
    expect_format("phi3", "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nName a color.<|end|>\n<|assistant|>\n");
}

Test(chat, gemma) {
    expect_format("gemma", "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                           "<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n");
}

Test(chat, zephyr) {
    expect_format("zephyr", "<|system|>\nYou are terse.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\nHello.<|endoftext|>\n"
                            "<|user|>\nName a color.<|endoftext|>\n<|assistant|>\n");
}

Test(chat, unknown_family_is_an_error) {
    cr_expect_null(plumb_chat_format("jinja-magic", conv, 4, 1));
    cr_expect(strstr(plumb_last_error(), "unknown chat template") != NULL);
}

/* A vocabulary-only GGUF carrying a given template. */
static plumb_model *with_template(const char *tmpl) {
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    const char *toks[] = {"<unk>", "<s>", "</s>", "a"};
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    if (tmpl) gguf_w_str(w, "tokenizer.chat_template", tmpl);
    const char *path = tmp_path("tmpl.gguf");
    FILE *fp = fopen(path, "wb");
    cr_assert_eq(gguf_w_begin(w, fp), 0);
    fclose(fp);
    gguf_writer_free(w);
    plumb_model *m = plumb_model_load_vocab(path);
    cr_assert_not_null(m, "%s", plumb_last_error());
    remove(path);
    return m;
}

Test(chat, detection_from_gguf) {
    struct { const char *tmpl, *family; } cases[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", "chatml"},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", "llama3"},
        {"{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}", "llama2-sys"},
        {"{{ '[INST] ' + message['content'] + ' [/INST]' }}", "mistral"},
        {"{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n' + '<|assistant|>\\n'}}", "phi3"},
        {"{{ '<start_of_turn>' + role + '\\n' }}", "gemma"},
        {"{{ '<|user|>\\n' + message['content'] + eos_token }}{{ '<|assistant|>' }}", "zephyr"},
        {"{{ something nobody uses }}", NULL},
        {NULL, NULL},
    };
    for (int i = 0; i < 9; i++) {
        plumb_model *m = with_template(cases[i].tmpl);
        const char *raw = NULL, *fam = plumb_chat_template_detect(m, &raw);
        if (cases[i].family) cr_expect(fam && !strcmp(fam, cases[i].family), "case %d: %s, expected %s", i, fam ? fam : "(none)", cases[i].family);
        else cr_expect_null(fam, "case %d recognised as %s", i, fam);
        cr_expect((raw != NULL) == (cases[i].tmpl != NULL));
        plumb_model_free(m);
    }
}
