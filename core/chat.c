/* chat.c — chat templates. GGUF files carry a Jinja template
 * (tokenizer.chat_template); plumb recognises the common families by their
 * marker strings, as llama.cpp does, and formats conversations with
 * hand-written equivalents rather than running Jinja. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"

static const char *families[] = {"chatml", "llama2", "llama2-sys", "mistral", "llama3", "phi3", "gemma", "zephyr", NULL};

const char *const *plumb_chat_templates(void) { return families; }

const char *plumb_chat_template_detect(const plumb_model *m, const char **tmpl_out) {
    const char *t = NULL;
    if (gguf_get_str(m->file, "tokenizer.chat_template", &t) != 1) t = NULL;
    if (tmpl_out) *tmpl_out = t;
    if (!t) return NULL;
#define HAS(s) (strstr(t, s) != NULL)
    if (HAS("<|im_start|>")) return "chatml";
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) return "llama3";
    if (HAS("<|assistant|>") && HAS("<|end|>")) return "phi3";
    if (HAS("<start_of_turn>")) return "gemma";
    if (HAS("<|user|>") && HAS("<|assistant|>")) return "zephyr";
    if (HAS("[INST]")) return HAS("<<SYS>>") ? "llama2-sys" : HAS("[SYSTEM_PROMPT]") ? NULL : "mistral";
#undef HAS
    return NULL;
}

typedef struct { char *buf; size_t len, cap; int oom; } sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) { b->oom = 1; return; }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }
static void put_trim(sbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    put(b, s, n);
}

char *plumb_chat_format(const char *family, const plumb_chat_message *msgs, int n, int add_assistant) {
    sbuf b = {0};
    puts_(&b, "");
    if (!strcmp(family, "chatml")) {
        for (int i = 0; i < n; i++) { puts_(&b, "<|im_start|>"); puts_(&b, msgs[i].role); puts_(&b, "\n"); puts_(&b, msgs[i].content); puts_(&b, "<|im_end|>\n"); }
        if (add_assistant) puts_(&b, "<|im_start|>assistant\n");
    } else if (!strcmp(family, "llama3")) {
        for (int i = 0; i < n; i++) {
            puts_(&b, "<|start_header_id|>"); puts_(&b, msgs[i].role); puts_(&b, "<|end_header_id|>\n\n");
            put_trim(&b, msgs[i].content); puts_(&b, "<|eot_id|>");
        }
        if (add_assistant) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else if (!strcmp(family, "llama2") || !strcmp(family, "llama2-sys") || !strcmp(family, "mistral")) {
        /* [INST] user [/INST] assistant</s>[INST] ... ; system inside the first turn */
        const int sys_tags = !strcmp(family, "llama2-sys");
        int inside = 1;
        puts_(&b, "[INST] ");
        for (int i = 0; i < n; i++) {
            if (!inside) { inside = 1; puts_(&b, "[INST] "); }
            if (!strcmp(msgs[i].role, "system")) {
                if (sys_tags) { puts_(&b, "<<SYS>>\n"); puts_(&b, msgs[i].content); puts_(&b, "\n<</SYS>>\n\n"); }
                else { puts_(&b, msgs[i].content); puts_(&b, "\n"); }
            } else if (!strcmp(msgs[i].role, "user")) {
                put_trim(&b, msgs[i].content); puts_(&b, " [/INST]");
            } else {
                put_trim(&b, msgs[i].content); puts_(&b, "</s>");
                inside = 0;
            }
        }
    } else if (!strcmp(family, "phi3")) {
        for (int i = 0; i < n; i++) { puts_(&b, "<|"); puts_(&b, msgs[i].role); puts_(&b, "|>\n"); puts_(&b, msgs[i].content); puts_(&b, "<|end|>\n"); }
        if (add_assistant) puts_(&b, "<|assistant|>\n");
    } else if (!strcmp(family, "zephyr")) {
        for (int i = 0; i < n; i++) { puts_(&b, "<|"); puts_(&b, msgs[i].role); puts_(&b, "|>\n"); puts_(&b, msgs[i].content); puts_(&b, "<|endoftext|>\n"); }
        if (add_assistant) puts_(&b, "<|assistant|>\n");
    } else if (!strcmp(family, "gemma")) {
        /* no system role: it is prepended to the first user turn */
        const char *sys = NULL;
        for (int i = 0; i < n; i++) {
            if (!strcmp(msgs[i].role, "system")) { sys = msgs[i].content; continue; }
            const int model = !strcmp(msgs[i].role, "assistant");
            puts_(&b, "<start_of_turn>"); puts_(&b, model ? "model" : msgs[i].role); puts_(&b, "\n");
            if (sys && !model) { put_trim(&b, sys); puts_(&b, "\n\n"); sys = NULL; }
            put_trim(&b, msgs[i].content); puts_(&b, "<end_of_turn>\n");
        }
        if (add_assistant) puts_(&b, "<start_of_turn>model\n");
    } else {
        free(b.buf);
        plumb_set_error("unknown chat template '%s'", family);
        return NULL;
    }
    if (b.oom) { free(b.buf); plumb_set_error("out of memory"); return NULL; }
    return b.buf;
}

/* Tokens that end an assistant turn besides EOS. */
int plumb_token_is_end_of_turn(const plumb_model *m, plumb_token t) {
    if (t == m->vocab.eos) return 1;
    const char *s = plumb_token_text(m, t);
    if (!s) return 0;
    static const char *ends[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>", NULL};
    for (int i = 0; ends[i]; i++)
        if (!strcmp(s, ends[i]) && m->vocab.type[t] != TOK_NORMAL) return 1;
    return 0;
}
