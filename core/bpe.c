/* bpe.c — byte-level BPE (GPT-2 style, tokenizer.ggml.model = "gpt2") as
 * llama.cpp runs it:
 *   1. the text is split by the pre-tokenizer regexes named by
 *      tokenizer.ggml.pre (PCRE2, Unicode classes), each regex splitting the
 *      pieces the previous one left, text between matches kept as pieces;
 *   2. each piece's bytes are mapped to printable code points (GPT-2's
 *      bytes_to_unicode) and merged pairwise by merge rank, lowest first;
 *   3. the merged symbols are looked up in the vocabulary. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"
#include "model.h"
#include "util.h"

typedef struct {
    const char *name;     /* tokenizer.ggml.pre values */
    const char *regex[6]; /* applied in order */
    int ignore_merges;    /* a piece that is already a token is taken whole */
} pre_rule;

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_RE                                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                     \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const pre_rule rules[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+"}, 0},
    {"gpt-2", {GPT2_RE}, 0},
    {"gpt2", {GPT2_RE}, 0},
    {"phi-2", {GPT2_RE}, 0},
    {"mpt", {GPT2_RE}, 0},
    {"olmo", {GPT2_RE}, 0},
    {"jais", {GPT2_RE}, 0},
    {"roberta-bpe", {GPT2_RE}, 0},
    {"llama3", {LLAMA3_RE}, 1},
    {"llama-v3", {LLAMA3_RE}, 1},
    {"llama-bpe", {LLAMA3_RE}, 1},
    {"falcon3", {LLAMA3_RE}, 1},
    {"dbrx", {LLAMA3_RE}, 0},
    {"smaug-bpe", {LLAMA3_RE}, 0},
    {"chatglm-bpe", {LLAMA3_RE}, 0},
    {"qwen2", {QWEN2_RE}, 0},
    {"deepseek-r1-qwen", {QWEN2_RE}, 0},
    {"stablelm2", {QWEN2_RE}, 0},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, 0},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]"}, 0},
    {"starcoder", {"\\p{N}", GPT2_RE}, 0},
    {"refact", {"\\p{N}", GPT2_RE}, 0},
    {"command-r", {"\\p{N}", GPT2_RE}, 0},
    {"smollm", {"\\p{N}", GPT2_RE}, 0},
    {"codeshell", {"\\p{N}", GPT2_RE}, 0},
    {"exaone", {"\\p{N}", GPT2_RE}, 0},
    {"minerva-7b", {"\\p{N}", GPT2_RE}, 0},
};

struct plumb_bpe {
    pcre2_code *re[6];
    int n_re;
    int ignore_merges;
    char pre[48];
    /* merges: "left right" -> rank, open addressing */
    char **merge_text; /* borrowed from the GGUF metadata */
    int *merge_len;
    int n_merges;
    int *mhash;
    uint32_t mmask;
    /* GPT-2 byte <-> code point maps */
    char byte_enc[256][3]; /* UTF-8 of the code point standing for byte b */
    int byte_enc_len[256];
    int16_t cp_byte[324];  /* code point -> byte, -1 where none */
};

static uint32_t fnv(const char *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

static void init_byte_map(plumb_bpe *b) {
    int n = 0;
    for (int i = 0; i < 324; i++) b->cp_byte[i] = -1;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        uint32_t cp = printable ? (uint32_t)c : (uint32_t)(256 + n++);
        b->byte_enc_len[c] = utf8_put(cp, b->byte_enc[c]);
        b->cp_byte[cp] = (int16_t)c;
    }
}

void bpe_free(plumb_bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b->merge_len);
    free(b->mhash);
    free(b);
}

plumb_bpe *bpe_load(const gguf_file *f) {
    const gguf_kv *merges = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!merges || merges->type != GGUF_VT_ARRAY || merges->arr_type != GGUF_VT_STRING) {
        plumb_set_error("BPE vocabulary without tokenizer.ggml.merges");
        return NULL;
    }
    const char *pre = "default";
    gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    const pre_rule *rule = NULL;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (!strcmp(rules[i].name, pre)) rule = &rules[i];
    if (!rule) {
        plumb_set_error("BPE pre-tokenizer '%s' is not known to plumb", pre);
        return NULL;
    }
    plumb_bpe *b = calloc(1, sizeof *b);
    if (!b) { plumb_set_error("out of memory"); return NULL; }
    snprintf(b->pre, sizeof b->pre, "%s", pre);
    b->ignore_merges = rule->ignore_merges;
    for (int i = 0; i < 6 && rule->regex[i]; i++) {
        int err;
        PCRE2_SIZE off;
        b->re[i] = pcre2_compile((PCRE2_SPTR)rule->regex[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
        if (!b->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            plumb_set_error("pre-tokenizer regex for '%s' does not compile: %s", pre, (char *)msg);
            bpe_free(b);
            return NULL;
        }
        b->n_re++;
    }
    b->n_merges = (int)merges->arr_n;
    b->merge_text = merges->strs;
    b->merge_len = malloc(sizeof(int) * (size_t)(b->n_merges + 1));
    uint32_t hs = 1;
    while (hs < 2u * (uint32_t)b->n_merges + 2) hs <<= 1;
    b->mhash = malloc(sizeof(int) * hs);
    if (!b->merge_len || !b->mhash) { bpe_free(b); plumb_set_error("out of memory"); return NULL; }
    b->mmask = hs - 1;
    memset(b->mhash, -1, sizeof(int) * hs);
    for (int i = 0; i < b->n_merges; i++) {
        b->merge_len[i] = (int)strlen(b->merge_text[i]);
        uint32_t h = fnv(b->merge_text[i], b->merge_len[i]) & b->mmask;
        int dup = 0;
        while (b->mhash[h] >= 0) {
            int j = b->mhash[h];
            if (b->merge_len[j] == b->merge_len[i] && !memcmp(b->merge_text[j], b->merge_text[i], (size_t)b->merge_len[i])) { dup = 1; break; }
            h = (h + 1) & b->mmask;
        }
        if (!dup) b->mhash[h] = i; /* the first (lowest) rank wins */
    }
    init_byte_map(b);
    return b;
}

/* rank of merging left and right, or -1 */
static int merge_rank(const plumb_bpe *b, const char *l, int ln, const char *r, int rn) {
    char buf[512];
    if (ln + rn + 1 > (int)sizeof buf) return -1;
    memcpy(buf, l, (size_t)ln);
    buf[ln] = ' ';
    memcpy(buf + ln + 1, r, (size_t)rn);
    const int n = ln + rn + 1;
    for (uint32_t h = fnv(buf, n) & b->mmask;; h = (h + 1) & b->mmask) {
        int j = b->mhash[h];
        if (j < 0) return -1;
        if (b->merge_len[j] == n && !memcmp(b->merge_text[j], buf, (size_t)n)) return j;
    }
}

static int add_big(const plumb_bpe *b, merge_queue *h, merge_symbol *s, int l, int r) {
    if (l < 0 || r < 0) return 0;
    int rank = merge_rank(b, s[l].text, s[l].n, s[r].text, s[r].n);
    return rank < 0 ? 0 : merge_push(h, (merge_pair){l, r, -(float)rank, s[l].n + s[r].n}); /* lowest rank first */
}


typedef void (*emit_fn)(void *ctx, int id);

/* Merges one pre-tokenized piece (raw bytes) and emits its tokens. */
static int bpe_piece(const plumb_vocab *v, const plumb_bpe *b, const char *p, int n, emit_fn emit, void *ctx) {
    /* byte-encode */
    char *enc = malloc((size_t)n * 2 + 1);
    merge_symbol *s = malloc(sizeof(merge_symbol) * (size_t)(n + 1));
    merge_queue h = {0};
    int rc = -1, m = 0;
    if (!enc || !s) goto out;
    for (int i = 0; i < n; i++) {
        const uint8_t c = (uint8_t)p[i];
        memcpy(enc + m, b->byte_enc[c], (size_t)b->byte_enc_len[c]);
        m += b->byte_enc_len[c];
    }
    if (b->ignore_merges) {
        int id = vocab_find(v, enc, m);
        if (id >= 0) { emit(ctx, id); rc = 0; goto out; }
    }
    int ns = 0;
    for (int off = 0; off < m; ns++) {
        int cl = utf8_len((uint8_t)enc[off]);
        if (cl > m - off) cl = m - off;
        s[ns] = (merge_symbol){ns - 1, off + cl == m ? -1 : ns + 1, enc + off, cl};
        off += cl;
    }
    for (int i = 1; i < ns; i++)
        if (add_big(b, &h, s, i - 1, i)) goto out;
    while (h.n > 0) {
        merge_pair g = merge_pop(&h);
        merge_symbol *l = &s[g.left], *r = &s[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size || l->next != g.right) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = g.left;
        if (add_big(b, &h, s, l->prev, g.left) || add_big(b, &h, s, g.left, l->next)) goto out;
    }
    for (int i = ns ? 0 : -1; i >= 0; i = s[i].next) {
        int id = vocab_find(v, s[i].text, s[i].n);
        if (id >= 0) { emit(ctx, id); continue; }
        for (int j = 0; j < s[i].n; j++) { /* as llama.cpp: single bytes that happen to be tokens */
            int bid = vocab_find(v, s[i].text + j, 1);
            if (bid >= 0) emit(ctx, bid);
        }
    }
    rc = 0;
out:
    if (rc) plumb_set_error("out of memory while tokenizing");
    free(enc);
    free(s);
    free(h.a);
    return rc;
}

/* Pre-tokenization: pieces as (offset, length) pairs over text. */
typedef struct { int *off, *len; int n, cap; } pieces;

static int pieces_add(pieces *p, int off, int len) {
    if (len <= 0) return 0;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        int *no = realloc(p->off, sizeof(int) * (size_t)cap), *nl = no ? realloc(p->len, sizeof(int) * (size_t)cap) : NULL;
        if (no) p->off = no;
        if (!nl) return -1;
        p->len = nl;
        p->cap = cap;
    }
    p->off[p->n] = off;
    p->len[p->n] = len;
    p->n++;
    return 0;
}

int bpe_tokenize(const plumb_vocab *v, const plumb_bpe *b, const char *text, int len, emit_fn emit, void *ctx) {
    pieces cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    int rc = -1;
    if (!md || pieces_add(&cur, 0, len)) goto out;
    for (int r = 0; r < b->n_re; r++) {
        next.n = 0;
        for (int k = 0; k < cur.n; k++) {
            const char *sub = text + cur.off[k];
            const PCRE2_SIZE sn = (PCRE2_SIZE)cur.len[k];
            PCRE2_SIZE start = 0, last = 0;
            while (start <= sn) {
                int m = pcre2_match(b->re[r], (PCRE2_SPTR)sub, sn, start, 0, md, NULL);
                if (m == PCRE2_ERROR_NOMATCH) break;
                if (m < 0) { plumb_set_error("pre-tokenizer regex failed on the input (invalid UTF-8?)"); goto out; }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                if (ov[1] == ov[0]) { /* empty match: step one character */
                    start = ov[0] + 1;
                    while (start < sn && ((uint8_t)sub[start] & 0xC0) == 0x80) start++;
                    continue;
                }
                if (pieces_add(&next, cur.off[k] + (int)last, (int)(ov[0] - last)) || pieces_add(&next, cur.off[k] + (int)ov[0], (int)(ov[1] - ov[0])))
                    goto oom;
                last = start = ov[1];
            }
            if (pieces_add(&next, cur.off[k] + (int)last, (int)(sn - last))) goto oom;
        }
        pieces t = cur; cur = next; next = t;
    }
    for (int k = 0; k < cur.n; k++)
        if (bpe_piece(v, b, text + cur.off[k], cur.len[k], emit, ctx)) goto out;
    rc = 0;
    goto out;
oom:
    plumb_set_error("out of memory while tokenizing");
out:
    pcre2_match_data_free(md);
    free(cur.off); free(cur.len); free(next.off); free(next.len);
    return rc;
}

/* Token text (byte-encoded) back to raw bytes. Returns length or -1. */
int bpe_decode(const plumb_bpe *b, const char *s, int n, char *out, int cap) {
    int k = 0;
    for (int i = 0; i < n;) {
        const uint8_t c0 = (uint8_t)s[i];
        int cl = utf8_len(c0);
        if (cl > n - i) cl = n - i;
        uint32_t cp = c0;
        if (cl == 2) cp = ((c0 & 0x1Fu) << 6) | ((uint8_t)s[i + 1] & 0x3Fu);
        const int byte = cl <= 2 && cp < 324 ? b->cp_byte[cp] : -1;
        if (byte < 0) { /* not a byte-level symbol: copy through */
            if (k + cl > cap) return -1;
            memcpy(out + k, s + i, (size_t)cl);
            k += cl;
        } else {
            if (k + 1 > cap) return -1;
            out[k++] = (char)byte;
        }
        i += cl;
    }
    return k;
}

const char *bpe_pre_name(const plumb_bpe *b) { return b->pre; }
