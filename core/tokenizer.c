/* tokenizer.c — SentencePiece-style (SPM) tokenizer and detokenizer over a
 * GGUF vocabulary (tokenizer.ggml.*), following llama.cpp's algorithm so the
 * same text gives the same ids:
 *   1. spaces become U+2581 "▁" (and one is prepended if add_space_prefix);
 *   2. the text is split into UTF-8 characters;
 *   3. adjacent pairs whose concatenation is a vocabulary token are merged,
 *      highest score first (leftmost first on ties), until none is left;
 *   4. a piece that is not a token falls back to its bytes (<0xXX> tokens). */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "merge.h"
#include "model.h"
#include "util.h"

static uint32_t hash_bytes(const char *s, int len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

int vocab_find(const plumb_vocab *v, const char *s, int len) {
    for (uint32_t i = hash_bytes(s, len) & v->hash_mask;; i = (i + 1) & v->hash_mask) {
        int id = v->hash[i];
        if (id < 0) return -1;
        if (v->len[id] == len && memcmp(v->text[id], s, (size_t)len) == 0) return id;
    }
}

static int parse_byte_token(const char *s, int len) {
    /* "<0xAB>" */
    if (len != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int get_token_id(const gguf_file *f, const char *key, int n, int *out) {
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v);
    if (rc < 0) return -1;
    if (rc == 0) return 0;
    if (v >= (uint32_t)n) return plumb_set_error("%s = %u is outside the vocabulary (%d tokens)", key, v, n);
    *out = (int)v;
    return 0;
}

/* qsort_r comparator: token ids by text length, longest first (len = lengths) */
static int by_len_desc(const void *a, const void *b, void *len) {
    const int *L = len, x = *(const int *)a, y = *(const int *)b;
    return L[y] - L[x] ? L[y] - L[x] : x - y;
}

int vocab_load(plumb_vocab *v, const gguf_file *f) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = -1;
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!toks) return 0; /* a model without a tokenizer still runs on token ids */
    const char *model = "llama";
    if (gguf_get_str(f, "tokenizer.ggml.model", &model) < 0) return -1;
    snprintf(v->model, sizeof v->model, "%s", model);
    v->kind = !strcmp(model, "llama") ? VOCAB_SPM : !strcmp(model, "gpt2") ? VOCAB_BPE : VOCAB_OTHER;
    if (toks->type != GGUF_VT_ARRAY || toks->arr_type != GGUF_VT_STRING)
        return plumb_set_error("tokenizer.ggml.tokens is not an array of strings");
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24)) return plumb_set_error("tokenizer.ggml.tokens has %llu entries", (unsigned long long)toks->arr_n);
    int n = (int)toks->arr_n;
    v->n = n;
    v->text = toks->strs;
    v->len = malloc(sizeof(int) * (size_t)n);
    v->score = calloc((size_t)n, sizeof(float));
    v->type = malloc(sizeof(int32_t) * (size_t)n);
    uint32_t hsize = 1;
    while (hsize < 2u * (uint32_t)n) hsize <<= 1;
    v->hash = malloc(sizeof(int) * hsize);
    if (!v->len || !v->score || !v->type || !v->hash) return plumb_set_error("out of memory loading vocabulary");
    v->hash_mask = hsize - 1;
    memset(v->hash, -1, sizeof(int) * hsize);

    const gguf_kv *scores = gguf_find_kv(f, "tokenizer.ggml.scores");
    if (scores) {
        if (scores->type != GGUF_VT_ARRAY || scores->arr_type != GGUF_VT_FLOAT32 || scores->arr_n != (uint64_t)n)
            return plumb_set_error("tokenizer.ggml.scores must be %d f32 values", n);
        memcpy(v->score, scores->arr, sizeof(float) * (size_t)n);
    }
    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_VT_ARRAY || (types->arr_type != GGUF_VT_INT32 && types->arr_type != GGUF_VT_UINT32) ||
                  types->arr_n != (uint64_t)n))
        return plumb_set_error("tokenizer.ggml.token_type must be %d i32 values", n);
    for (int i = 0; i < 256; i++) v->byte_token[i] = -1;
    for (int i = 0; i < n; i++) {
        v->len[i] = (int)strlen(v->text[i]);
        v->type[i] = types ? ((const int32_t *)types->arr)[i] : TOK_NORMAL;
        int b = parse_byte_token(v->text[i], v->len[i]);
        if (b >= 0 && (!types || v->type[i] == TOK_BYTE)) {
            v->type[i] = TOK_BYTE;
            if (v->byte_token[b] < 0) v->byte_token[b] = i;
        }
        /* first occurrence wins, as in llama.cpp's token_to_id map */
        if (vocab_find(v, v->text[i], v->len[i]) < 0) {
            uint32_t h = hash_bytes(v->text[i], v->len[i]) & v->hash_mask;
            while (v->hash[h] >= 0) h = (h + 1) & v->hash_mask;
            v->hash[h] = i;
        }
    }
    if (get_token_id(f, "tokenizer.ggml.bos_token_id", n, &v->bos) || get_token_id(f, "tokenizer.ggml.eos_token_id", n, &v->eos) ||
        get_token_id(f, "tokenizer.ggml.unknown_token_id", n, &v->unk))
        return -1;
    bool b;
    v->add_bos = 1;
    v->add_space_prefix = 1;
    if (v->kind == VOCAB_BPE) {
        v->bpe = bpe_load(f);
        if (!v->bpe) return -1;
        const char *pre = bpe_pre_name(v->bpe);
        /* llama.cpp's defaults: BOS only for the Llama 3 family; no space prefix */
        v->add_bos = !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3") || !strcmp(pre, "llama-bpe") || !strcmp(pre, "falcon3");
        v->add_space_prefix = 0;
    }
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 1) v->add_bos = b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b) == 1) v->add_space_prefix = b;
    if (v->bos < 0) v->add_bos = 0;
    /* tokens matched in the text before the tokenizer runs */
    v->special = malloc(sizeof(int) * (size_t)n);
    if (!v->special) return plumb_set_error("out of memory loading vocabulary");
    for (int i = 0; i < n; i++)
        if ((v->type[i] == TOK_CONTROL || v->type[i] == TOK_USER_DEFINED) && v->len[i] > 0) v->special[v->n_special++] = i;
    qsort_r(v->special, (size_t)v->n_special, sizeof(int), by_len_desc, v->len);
    return 0;
}

void vocab_free(plumb_vocab *v) {
    bpe_free(v->bpe);
    free(v->special);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->hash);
    memset(v, 0, sizeof *v);
}

/* ---- SPM merge ---- */

static int try_add_bigram(const plumb_vocab *v, merge_queue *h, merge_symbol *sym, int left, int right) {
    if (left < 0 || right < 0) return 0;
    int size = sym[left].n + sym[right].n;
    int id = vocab_find(v, sym[left].text, size);
    if (id < 0) return 0;
    return merge_push(h, (merge_pair){left, right, v->score[id], size});
}


typedef struct {
    plumb_token *out;
    int n, max;
} tok_out;

static void emit(tok_out *o, int id) {
    if (o->n < o->max) o->out[o->n] = id;
    o->n++;
}

static void emit_piece(const plumb_vocab *v, tok_out *o, const char *s, int n) {
    int id = vocab_find(v, s, n);
    if (id >= 0) {
        emit(o, id);
        return;
    }
    for (int j = 0; j < n; j++) {
        int b = v->byte_token[(uint8_t)s[j]];
        if (b < 0) b = vocab_find(v, s + j, 1); /* vocabularies without byte tokens */
        emit(o, b >= 0 ? b : v->unk);
    }
}

static int spm_tokenize(const plumb_vocab *v, const char *text, size_t len, int space_prefix, tok_out *o) {
    /* 1. escape spaces */
    size_t cap = 3 * len + 4;
    char *s = malloc(cap);
    merge_symbol *sym = malloc(sizeof(merge_symbol) * (len + 2));
    merge_queue h = {0};
    int rc = -1;
    if (!s || !sym) goto done;
    size_t n = 0;
    if (space_prefix && len > 0) { memcpy(s, "\xe2\x96\x81", 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(s + n, "\xe2\x96\x81", 3); n += 3; }
        else s[n++] = text[i];
    }
    /* 2. characters */
    int ns = 0;
    for (size_t off = 0; off < n; ns++) {
        int cl = utf8_len((uint8_t)s[off]);
        if ((size_t)cl > n - off) cl = (int)(n - off);
        sym[ns] = (merge_symbol){ns - 1, (off + (size_t)cl == n) ? -1 : ns + 1, s + off, cl};
        off += (size_t)cl;
    }
    /* 3. merges */
    for (int i = 1; i < ns; i++)
        if (try_add_bigram(v, &h, sym, i - 1, i)) goto done;
    while (h.n > 0) {
        merge_pair b = merge_pop(&h);
        merge_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (try_add_bigram(v, &h, sym, l->prev, b.left) || try_add_bigram(v, &h, sym, b.left, l->next)) goto done;
    }
    /* 4. output */
    for (int i = ns > 0 ? 0 : -1; i >= 0; i = sym[i].next) emit_piece(v, o, sym[i].text, sym[i].n);
    rc = 0;
done:
    if (rc) plumb_set_error("out of memory while tokenizing");
    free(s);
    free(sym);
    free(h.a);
    return rc;
}

/* The text cut at special tokens: user-defined ones always, control ones
 * when parse_special (llama.cpp's tokenizer_st_partition), longest first. */
typedef struct { int token, off, len; } fragment; /* token >= 0: a special token */

static int partition(const plumb_vocab *v, const char *text, int len, int parse_special, fragment **out, int *n_out) {
    int cap = 16, n = 1;
    fragment *fr = malloc(sizeof(fragment) * (size_t)cap);
    if (!fr) return -1;
    fr[0] = (fragment){-1, 0, len};
    for (int si = 0; si < v->n_special; si++) {
        const int id = v->special[si];
        if (v->type[id] == TOK_CONTROL && !parse_special) continue;
        const char *tok = v->text[id];
        const int tl = v->len[id];
        for (int k = 0; k < n; k++) {
            if (fr[k].token >= 0 || fr[k].len < tl) continue;
            const char *base = text + fr[k].off;
            const char *hit = memmem(base, (size_t)fr[k].len, tok, (size_t)tl);
            if (!hit) continue;
            if (n + 2 > cap) {
                cap *= 2;
                fragment *nf = realloc(fr, sizeof(fragment) * (size_t)cap);
                if (!nf) { free(fr); return -1; }
                fr = nf;
            }
            const int pre = (int)(hit - base), rest = fr[k].len - pre - tl;
            memmove(&fr[k + 3], &fr[k + 1], sizeof(fragment) * (size_t)(n - k - 1));
            fragment left = {-1, fr[k].off, pre}, mid = {id, fr[k].off + pre, tl}, right = {-1, fr[k].off + pre + tl, rest};
            fr[k] = left;
            fr[k + 1] = mid;
            fr[k + 2] = right;
            n += 2;
            /* the right part is examined next, as fragment k+2 */
        }
    }
    *out = fr;
    *n_out = n;
    return 0;
}

static void emit_cb(void *ctx, int id) { emit(ctx, id); }

int plumb_tokenize_special(const plumb_model *m, const char *text, size_t len, int add_bos, int parse_special, plumb_token *out, int max_out) {
    const plumb_vocab *v = &m->vocab;
    if (v->n == 0) return plumb_set_error("this model has no tokenizer");
    if (v->kind == VOCAB_OTHER) return plumb_set_error("tokenizer '%s' is not supported (SentencePiece 'llama' and byte-level BPE 'gpt2' are)", v->model);
    if (len > (1u << 30)) return plumb_set_error("text too long to tokenize (%zu bytes)", len);
    tok_out o = {out, 0, max_out};
    if (add_bos && v->bos >= 0) emit(&o, v->bos);
    fragment *fr;
    int n_fr, rc = 0;
    if (partition(v, text, (int)len, parse_special, &fr, &n_fr)) return plumb_set_error("out of memory while tokenizing");
    int prev_special = 1; /* SPM: a space prefix after the start and after special tokens */
    for (int k = 0; k < n_fr && !rc; k++) {
        if (fr[k].token >= 0) {
            emit(&o, fr[k].token);
            prev_special = 1;
            continue;
        }
        if (fr[k].len == 0) continue;
        if (v->kind == VOCAB_BPE) rc = bpe_tokenize(v, v->bpe, text + fr[k].off, fr[k].len, emit_cb, &o);
        else rc = spm_tokenize(v, text + fr[k].off, (size_t)fr[k].len, prev_special && v->add_space_prefix, &o);
        prev_special = 0;
    }
    free(fr);
    if (rc) return -1;
    if (o.n > max_out) return plumb_set_error("prompt needs %d tokens, room for %d", o.n, max_out);
    return o.n;
}

int plumb_tokenize(const plumb_model *m, const char *text, size_t len, int add_bos, plumb_token *out, int max_out) {
    return plumb_tokenize_special(m, text, len, add_bos, 0, out, max_out);
}

int plumb_token_to_piece(const plumb_model *m, plumb_token t, char *buf, int size) {
    const plumb_vocab *v = &m->vocab;
    if (t < 0 || t >= v->n) return plumb_set_error("token id %d outside the vocabulary", t);
    const char *s = v->text[t];
    int n = 0;
    switch (v->type[t]) {
    case TOK_CONTROL:
    case TOK_UNUSED: break;
    case TOK_BYTE:
        if (size < 1) return plumb_set_error("buffer too small");
        buf[n++] = (char)parse_byte_token(s, v->len[t]);
        break;
    case TOK_UNKNOWN:
        if (size < 3) return plumb_set_error("buffer too small");
        memcpy(buf, "\xe2\x96\x85", 3);
        n = 3;
        break;
    default:
        if (v->kind == VOCAB_BPE && v->type[t] != TOK_USER_DEFINED) {
            n = bpe_decode(v->bpe, s, v->len[t], buf, size);
            if (n < 0) return plumb_set_error("buffer too small");
            break;
        }
        for (int i = 0; i < v->len[t]; i++) {
            if (i + 2 < v->len[t] && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                if (n >= size) return plumb_set_error("buffer too small");
                buf[n++] = ' ';
                i += 2;
            } else {
                if (n >= size) return plumb_set_error("buffer too small");
                buf[n++] = s[i];
            }
        }
    }
    return n;
}

const char *plumb_token_text(const plumb_model *m, plumb_token t) {
    return t >= 0 && t < m->vocab.n ? m->vocab.text[t] : NULL;
}
int plumb_n_vocab(const plumb_model *m) { return m->hp.n_vocab; }
plumb_token plumb_token_bos(const plumb_model *m) { return m->vocab.bos; }
plumb_token plumb_token_eos(const plumb_model *m) { return m->vocab.eos; }
int plumb_add_bos(const plumb_model *m) { return m->vocab.add_bos; }
const char *plumb_tokenizer_kind(const plumb_model *m) { return m->vocab.model; }
