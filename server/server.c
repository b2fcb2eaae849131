/* server.c — the HTTP side of plumb serve: libmicrohttpd (a thread per
 * connection, so a handler may wait for its request), jansson for JSON.
 * Endpoints: GET /health, /metrics, /v1/models; POST /v1/completions,
 * /v1/chat/completions (with SSE streaming). Errors are OpenAI-style JSON
 * with the matching HTTP status. */
#include "server.h"

#include <jansson.h>
#include <math.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/util.h"
#include "../include/plumb.h"
#include "engine.h"

typedef struct {
    const plumb_serve_opts *o;
    char model_name[256];
    plumb_model *model;
    engine *eng;
    const char *family;   /* chat template */
    volatile int ready;
    char load_error[512];
    /* rate limiting: token bucket */
    pthread_mutex_t mu;
    double tokens, last_refill;
    long id_counter;
    long by_status[6];    /* 2xx 3xx 4xx 5xx counts (index status/100) */
} server;

typedef struct {
    char *body;
    size_t len, cap;
    int too_large;
} conn_state;

/* ---- responses ---- */

static enum MHD_Result send_text(struct MHD_Connection *c, server *s, int status, const char *type, char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&s->mu);
    if (status / 100 < 6) s->by_status[status / 100]++;
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, server *s, int status, json_t *j) {
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text) text = strdup("{}");
    return send_text(c, s, status, "application/json", text);
}

static enum MHD_Result send_error(struct MHD_Connection *c, server *s, int status, const char *type, const char *code, const char *param,
                                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error(struct MHD_Connection *c, server *s, int status, const char *type, const char *code, const char *param,
                                  const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *err = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", type, "param", param ? json_string(param) : json_null(),
                            "code", code ? json_string(code) : json_null());
    return send_json(c, s, status, err);
}
#define BAD_REQUEST(param, ...) send_error(conn, s, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

static json_t *json_text(const char *p, size_t n) {
    char *c = plumb_utf8_clean(p, n);
    json_t *j = c ? json_string(c) : json_string("");
    free(c);
    return j;
}

/* ---- request parsing ---- */

typedef struct {
    int chat, stream, include_usage;
    char id[48];
    long created;
} call_info;

/* Reads the fields both endpoints share into r; returns 0 or sends a 400. */
static int parse_common(struct MHD_Connection *conn, server *s, json_t *j, request *r, enum MHD_Result *ret) {
    json_t *v;
    r->max_tokens = s->o->default_max_tokens;
    if ((v = json_object_get(j, "max_tokens")) || (v = json_object_get(j, "max_completion_tokens"))) {
        if (!json_is_null(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 20) { *ret = BAD_REQUEST("max_tokens", "max_tokens must be a positive integer"); return -1; }
            r->max_tokens = (int)json_integer_value(v);
        }
    }
    r->sp = plumb_sampler_default_params();
    r->sp.temp = 1.0f;
    r->sp.top_k = 0;
    r->sp.top_p = 1.0f;
    r->sp.min_p = 0.0f;
    r->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)r << 7);
#define NUMBER(name, lo, hi, dst)                                                                                             \
    if ((v = json_object_get(j, name)) && !json_is_null(v)) {                                                                 \
        if (!json_is_number(v) || json_number_value(v) < (lo) || json_number_value(v) > (hi)) {                              \
            *ret = BAD_REQUEST(name, "%s must be a number in [%g, %g]", name, (double)(lo), (double)(hi));                     \
            return -1;                                                                                                        \
        }                                                                                                                     \
        dst = (float)json_number_value(v);                                                                                    \
    }
    NUMBER("temperature", 0, 2, r->sp.temp)
    NUMBER("top_p", 0, 1, r->sp.top_p)
    NUMBER("min_p", 0, 1, r->sp.min_p)
    NUMBER("repeat_penalty", 0.01, 100, r->sp.repeat_penalty)
#undef NUMBER
    if ((v = json_object_get(j, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) { *ret = BAD_REQUEST("top_k", "top_k must be a non-negative integer"); return -1; }
        r->sp.top_k = (int)json_integer_value(v);
    }
    if ((v = json_object_get(j, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) { *ret = BAD_REQUEST("seed", "seed must be an integer"); return -1; }
        r->sp.seed = (uint64_t)json_integer_value(v);
    }
    if ((v = json_object_get(j, "n")) && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1)) {
        *ret = BAD_REQUEST("n", "only n = 1 is supported");
        return -1;
    }
    if ((v = json_object_get(j, "stream")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) { *ret = BAD_REQUEST("stream", "stream must be a boolean"); return -1; }
        r->stream = json_is_true(v);
    }
    if ((v = json_object_get(j, "ignore_eos")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) { *ret = BAD_REQUEST("ignore_eos", "ignore_eos must be a boolean"); return -1; }
        r->ignore_eos = json_is_true(v);
    }
    if ((v = json_object_get(j, "stop")) && !json_is_null(v)) {
        json_t *arr = json_is_string(v) ? json_pack("[O]", v) : json_incref(v);
        if (!json_is_array(arr) || json_array_size(arr) > 4) { json_decref(arr); *ret = BAD_REQUEST("stop", "stop must be a string or up to 4 strings"); return -1; }
        r->stops = calloc(json_array_size(arr) + 1, sizeof(char *));
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            if (!json_is_string(e) || !json_string_length(e)) { json_decref(arr); *ret = BAD_REQUEST("stop", "stop strings must be non-empty strings"); return -1; }
            r->stops[r->n_stops++] = strdup(json_string_value(e));
        }
        json_decref(arr);
    }
    return 0;
}

/* content: a string, or OpenAI's array of parts ({"type":"text","text":...}) */
static char *message_text(json_t *content) {
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (!json_is_array(content)) return NULL;
    size_t len = 0, i;
    json_t *part;
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) return NULL;
        len += json_string_length(t);
    }
    char *out = malloc(len + 1), *p = out;
    if (!out) return NULL;
    json_array_foreach(content, i, part) {
        size_t n = json_string_length(json_object_get(part, "text"));
        memcpy(p, json_string_value(json_object_get(part, "text")), n);
        p += n;
    }
    *p = 0;
    return out;
}

/* ---- streaming ---- */

typedef struct {
    server *s;
    request *r;
    call_info info;
    size_t sent;          /* bytes of r->text already sent */
    char *pending;        /* formatted SSE bytes not yet handed to MHD */
    size_t pending_len, pending_off;
    int sent_role, finished;
} stream_state;

static void chunk_append(stream_state *st, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const char *body = t ? t : "[DONE]";
    size_t n = strlen(body) + 8;
    char *np = realloc(st->pending, st->pending_len + n + 1);
    if (np) {
        st->pending = np;
        st->pending_len += (size_t)snprintf(st->pending + st->pending_len, n + 1, "data: %s\n\n", body);
    }
    free(t);
}

static json_t *chunk_json(stream_state *st, const char *text, size_t n, const char *finish) {
    json_t *choice;
    if (st->info.chat) {
        json_t *delta = json_object();
        if (!st->sent_role) { json_object_set_new(delta, "role", json_string("assistant")); st->sent_role = 1; }
        if (text) json_object_set_new(delta, "content", json_text(text, n));
        choice = json_pack("{s:i,s:o,s:o}", "index", 0, "delta", delta, "finish_reason", finish ? json_string(finish) : json_null());
    } else {
        choice = json_pack("{s:i,s:o,s:n,s:o}", "index", 0, "text", json_text(text ? text : "", text ? n : 0), "logprobs", "finish_reason",
                           finish ? json_string(finish) : json_null());
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", st->info.id, "object", st->info.chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)st->info.created, "model", st->s->model_name, "choices", choice);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_state *st = cls;
    for (;;) {
        if (st->pending_off < st->pending_len) {
            size_t n = st->pending_len - st->pending_off;
            if (n > max) n = max;
            memcpy(buf, st->pending + st->pending_off, n);
            st->pending_off += n;
            return (ssize_t)n;
        }
        st->pending_len = st->pending_off = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        request *r = st->r;
        pthread_mutex_lock(&r->mu);
        while (!r->done && r->text_ready <= st->sent) pthread_cond_wait(&r->cv, &r->mu);
        if (r->text_ready > st->sent) {
            chunk_append(st, chunk_json(st, r->text + st->sent, r->text_ready - st->sent, NULL));
            st->sent = r->text_ready;
        }
        if (r->done && st->sent >= r->text_len) {
            if (r->error_status) {
                chunk_append(st, json_pack("{s:{s:s,s:s}}", "error", "message", r->error, "type", "server_error"));
            } else {
                chunk_append(st, chunk_json(st, NULL, 0, r->finish_reason));
                if (st->info.include_usage)
                    chunk_append(st, json_pack("{s:s,s:s,s:I,s:s,s:[],s:{s:i,s:i,s:i}}", "id", st->info.id, "object",
                                               st->info.chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)st->info.created,
                                               "model", st->s->model_name, "choices", "usage", "prompt_tokens", r->n_prompt, "completion_tokens", r->n_gen,
                                               "total_tokens", r->n_prompt + r->n_gen));
            }
            chunk_append(st, NULL);
            st->finished = 1;
        }
        pthread_mutex_unlock(&r->mu);
    }
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    pthread_mutex_lock(&st->r->mu);
    if (!st->r->done) st->r->cancelled = 1; /* the client left: free its slot */
    pthread_mutex_unlock(&st->r->mu);
    request_release(st->r);
    free(st->pending);
    free(st);
}

/* ---- the completion endpoints ---- */

static enum MHD_Result completion(struct MHD_Connection *conn, server *s, const char *body, size_t len, int chat) {
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (!j) return BAD_REQUEST(NULL, "malformed JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    if (!json_is_object(j)) { json_decref(j); return BAD_REQUEST(NULL, "the request body must be a JSON object"); }
    enum MHD_Result ret = MHD_NO;
    request *r = request_new();
    char *prompt = NULL;
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_string(model)) { ret = BAD_REQUEST("model", "model must be a string"); goto out; }
    if (model && strcmp(json_string_value(model), s->model_name)) {
        ret = send_error(conn, s, 404, "invalid_request_error", "model_not_found", "model", "The model '%s' does not exist; this server has '%s'",
                         json_string_value(model), s->model_name);
        goto out;
    }
    if (parse_common(conn, s, j, r, &ret)) goto out;
    call_info info = {.chat = chat, .stream = r->stream, .created = (long)time(NULL)};
    json_t *so = json_object_get(j, "stream_options");
    info.include_usage = json_is_true(json_object_get(so, "include_usage"));
    if (chat) {
        json_t *msgs = json_object_get(j, "messages");
        if (!json_is_array(msgs) || json_array_size(msgs) == 0) { ret = BAD_REQUEST("messages", "messages must be a non-empty array"); goto out; }
        if (!s->family) { ret = BAD_REQUEST(NULL, "the model has no chat template plumb recognises; start the server with --chat-template"); goto out; }
        size_t n = json_array_size(msgs), i;
        plumb_chat_message *cm = calloc(n, sizeof *cm);
        json_t *msg;
        int bad = 0;
        json_array_foreach(msgs, i, msg) {
            json_t *role = json_object_get(msg, "role");
            const char *rs = json_is_string(role) ? json_string_value(role) : NULL;
            char *text = message_text(json_object_get(msg, "content"));
            if (!rs || (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer")) || !text) {
                free(text);
                bad = 1;
                break;
            }
            cm[i].role = !strcmp(rs, "developer") ? "system" : rs;
            cm[i].content = text;
        }
        if (!bad) prompt = plumb_chat_format(s->family, cm, (int)n, 1);
        for (i = 0; i < n; i++) free((void *)cm[i].content);
        free(cm);
        if (bad) { ret = BAD_REQUEST("messages", "each message needs a role (system, user, assistant) and text content"); goto out; }
        if (!prompt) { ret = send_error(conn, s, 500, "server_error", NULL, NULL, "%s", plumb_last_error()); goto out; }
    } else {
        json_t *p = json_object_get(j, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
        if (!json_is_string(p)) { ret = BAD_REQUEST("prompt", "prompt must be a string"); goto out; }
        prompt = strdup(json_string_value(p));
    }
    const int n_ctx = engine_n_ctx(s->eng), cap = n_ctx + 8;
    r->prompt = malloc(sizeof(plumb_token) * (size_t)cap);
    r->n_prompt = r->prompt ? plumb_tokenize_special(s->model, prompt, strlen(prompt), plumb_add_bos(s->model), chat, r->prompt, cap) : -1;
    if (r->n_prompt < 0 || r->n_prompt >= n_ctx) {
        ret = send_error(conn, s, 400, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt",
                         "the prompt does not fit the context of %d tokens", n_ctx);
        goto out;
    }
    if (r->n_prompt == 0) { ret = BAD_REQUEST("prompt", "the prompt is empty"); goto out; }
    int status = engine_submit(s->eng, r);
    if (status) {
        ret = send_error(conn, s, status, status == 503 ? "server_error" : "invalid_request_error", status == 400 ? "context_length_exceeded" : NULL,
                         status == 400 ? "max_tokens" : NULL, "%s", r->error);
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    snprintf(info.id, sizeof info.id, "%s-%ld", chat ? "chatcmpl" : "cmpl", ++s->id_counter);
    pthread_mutex_unlock(&s->mu);
    if (r->stream) {
        stream_state *st = calloc(1, sizeof *st);
        st->s = s;
        st->r = r;
        st->info = info;
        r = NULL; /* the stream owns the handler's reference now */
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, st, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        ret = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        pthread_mutex_lock(&s->mu);
        s->by_status[2]++;
        pthread_mutex_unlock(&s->mu);
        goto out;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (r->error_status) { ret = send_error(conn, s, r->error_status, "server_error", NULL, NULL, "%s", r->error); goto out; }
    json_t *choice = chat ? json_pack("{s:i,s:{s:s,s:o},s:s}", "index", 0, "message", "role", "assistant", "content", json_text(r->text ? r->text : "", r->text_len),
                                      "finish_reason", r->finish_reason)
                          : json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", json_text(r->text ? r->text : "", r->text_len), "logprobs", "finish_reason",
                                      r->finish_reason);
    json_t *resp = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:{s:i,s:i,s:i}}", "id", info.id, "object", chat ? "chat.completion" : "text_completion",
                             "created", (json_int_t)info.created, "model", s->model_name, "choices", choice, "usage", "prompt_tokens", r->n_prompt,
                             "completion_tokens", r->n_gen, "total_tokens", r->n_prompt + r->n_gen);
    ret = send_json(conn, s, 200, resp);
out:
    free(prompt);
    request_release(r);
    json_decref(j);
    return ret;
}

/* ---- metrics ---- */

static void hist(char **p, size_t *len, size_t *cap, const char *name, const char *help, const long *b, const double *bounds, int nb, double sum, long count) {
    char line[256];
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
#define PUT(str, k) do { size_t need = *len + (size_t)(k) + 1; if (need > *cap) { *cap = need * 2; *p = realloc(*p, *cap); } memcpy(*p + *len, str, (size_t)(k)); *len += (size_t)(k); (*p)[*len] = 0; } while (0)
    PUT(line, n);
    long cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += b[i];
        if (bounds[i] > 1e299) n = snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
        else n = snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %ld\n", name, bounds[i], cum);
        PUT(line, n);
    }
    n = snprintf(line, sizeof line, "%s_sum %g\n%s_count %ld\n", name, sum, name, count);
    PUT(line, n);
#undef PUT
}

static enum MHD_Result metrics(struct MHD_Connection *conn, server *s) {
    engine_stats st;
    engine_stats_get(s->eng, &st);
    size_t len = 0, cap = 4096;
    char *p = malloc(cap);
    p[0] = 0;
    long by[6];
    pthread_mutex_lock(&s->mu);
    memcpy(by, s->by_status, sizeof by);
    pthread_mutex_unlock(&s->mu);
    len += (size_t)snprintf(p + len, cap - len,
                            "# HELP plumb_requests_total Completion requests accepted into the queue.\n# TYPE plumb_requests_total counter\nplumb_requests_total %ld\n"
                            "# HELP plumb_requests_rejected_total Requests refused because the queue was full.\n# TYPE plumb_requests_rejected_total counter\nplumb_requests_rejected_total %ld\n"
                            "# HELP plumb_http_responses_total HTTP responses by status class.\n# TYPE plumb_http_responses_total counter\n"
                            "plumb_http_responses_total{class=\"2xx\"} %ld\nplumb_http_responses_total{class=\"4xx\"} %ld\nplumb_http_responses_total{class=\"5xx\"} %ld\n"
                            "# HELP plumb_prompt_tokens_total Prompt tokens processed.\n# TYPE plumb_prompt_tokens_total counter\nplumb_prompt_tokens_total %ld\n"
                            "# HELP plumb_generated_tokens_total Tokens generated.\n# TYPE plumb_generated_tokens_total counter\nplumb_generated_tokens_total %ld\n"
                            "# HELP plumb_queue_depth Requests waiting for a slot.\n# TYPE plumb_queue_depth gauge\nplumb_queue_depth %d\n"
                            "# HELP plumb_active_sequences Requests being decoded.\n# TYPE plumb_active_sequences gauge\nplumb_active_sequences %d\n"
                            "# HELP plumb_batch_size Tokens in the last forward step.\n# TYPE plumb_batch_size gauge\nplumb_batch_size %d\n",
                            st.requests_total, st.requests_rejected, by[2], by[4], by[5], st.prompt_tokens, st.generated_tokens, st.queue_depth, st.active,
                            st.last_batch);
    double bb[10];
    for (int i = 0; i < 10; i++) bb[i] = i == 9 ? 1e300 : engine_batch_bounds[i];
    hist(&p, &len, &cap, "plumb_batch_tokens", "Tokens per forward step.", st.batch_buckets, bb, 10, (double)st.batch_sum, st.batch_count);
    hist(&p, &len, &cap, "plumb_time_to_first_token_seconds", "Time from arrival to the first generated token.", st.ttft_buckets, engine_ttft_bounds, 12,
         st.ttft_sum, st.ttft_count);
    hist(&p, &len, &cap, "plumb_step_latency_seconds", "Time between decode steps (inter-token latency).", st.itl_buckets, engine_itl_bounds, 12, st.itl_sum,
         st.itl_count);
    return send_text(conn, s, 200, "text/plain; version=0.0.4", p);
}

/* ---- routing ---- */

static int rate_ok(server *s) {
    if (s->o->rate_limit <= 0) return 1;
    pthread_mutex_lock(&s->mu);
    const double now = plumb_time_s(), burst = s->o->rate_limit < 1 ? 1 : s->o->rate_limit;
    s->tokens += (now - s->last_refill) * s->o->rate_limit;
    if (s->tokens > burst) s->tokens = burst;
    s->last_refill = now;
    int ok = s->tokens >= 1;
    if (ok) s->tokens -= 1;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_large) {
            if (cs->len + *upload_size > (size_t)s->o->max_body) cs->too_large = 1;
            else {
                if (cs->len + *upload_size + 1 > cs->cap) {
                    cs->cap = (cs->len + *upload_size + 1) * 2;
                    char *nb = realloc(cs->body, cs->cap);
                    if (!nb) return MHD_NO;
                    cs->body = nb;
                }
                memcpy(cs->body + cs->len, upload, *upload_size);
                cs->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(conn, s, 405, "invalid_request_error", NULL, NULL, "use GET");
        if (s->load_error[0]) return send_json(conn, s, 500, json_pack("{s:s,s:s}", "status", "error", "error", s->load_error));
        return s->ready ? send_json(conn, s, 200, json_pack("{s:s}", "status", "ok")) : send_json(conn, s, 503, json_pack("{s:s}", "status", "loading"));
    }
    if (s->o->api_key && s->o->api_key[0]) {
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
        char want[512];
        snprintf(want, sizeof want, "Bearer %s", s->o->api_key);
        if (!auth || strcmp(auth, want))
            return send_error(conn, s, 401, "invalid_request_error", "invalid_api_key", NULL, "missing or wrong API key (Authorization: Bearer ...)");
    }
    if (!s->ready) return send_error(conn, s, 503, "server_error", NULL, NULL, "the model is still loading");
    if (!strcmp(url, "/metrics")) return get ? metrics(conn, s) : send_error(conn, s, 405, "invalid_request_error", NULL, NULL, "use GET");
    if (!strcmp(url, "/v1/models")) {
        if (!get) return send_error(conn, s, 405, "invalid_request_error", NULL, NULL, "use GET");
        return send_json(conn, s, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", s->model_name, "object", "model",
                                                 "created", (json_int_t)time(NULL), "owned_by", "plumb"));
    }
    const int chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!post) return send_error(conn, s, 405, "invalid_request_error", NULL, NULL, "use POST");
        if (cs->too_large) return send_error(conn, s, 413, "invalid_request_error", NULL, NULL, "request body larger than %d bytes", s->o->max_body);
        if (!rate_ok(s)) return send_error(conn, s, 429, "rate_limit_error", "rate_limit_exceeded", NULL, "rate limit of %g requests/s exceeded", s->o->rate_limit);
        return completion(conn, s, cs->body ? cs->body : "", cs->len, chat);
    }
    return send_error(conn, s, 404, "invalid_request_error", NULL, NULL, "no route for %s %s", method, url);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)conn; (void)toe;
    conn_state *cs = *con_cls;
    if (cs) { free(cs->body); free(cs); }
    *con_cls = NULL;
}

static void *loader(void *arg) {
    server *s = arg;
    double t0 = plumb_time_s();
    s->model = plumb_model_load(s->o->model_path);
    if (s->model) {
        s->family = s->o->chat_template ? s->o->chat_template : plumb_chat_template_detect(s->model, NULL);
        int n_ctx = s->o->n_ctx;
        if (!n_ctx) {
            const int train = plumb_model_hparams(s->model)->n_ctx_train;
            n_ctx = s->o->parallel * (train > 0 && train < 2048 ? train : 2048);
        }
        s->eng = engine_new(s->model, s->o->parallel, n_ctx, s->o->threads, s->o->max_queue, s->o->exact, s->o->numa, s->o->n_gpu_layers, s->o->step_tokens);
    }
    if (!s->model || !s->eng) {
        snprintf(s->load_error, sizeof s->load_error, "%s", plumb_last_error());
        fprintf(stderr, "plumb serve: %s\n", s->load_error);
        return NULL;
    }
    if (s->o->n_gpu_layers) /* asked for the GPU: say whether it is in use, and if not why */
        fprintf(stderr, "plumb serve: %s%s\n", plumb_ctx_gpu_status(engine_ctx(s->eng)), plumb_ctx_gpu_layers(engine_ctx(s->eng)) ? "" : "; serving on the CPU");
    fprintf(stderr, "plumb serve: model %s ready in %.1f s (%d slots, context %d, chat template %s)\n", s->model_name, plumb_time_s() - t0,
            s->o->parallel, engine_n_ctx(s->eng), s->family ? s->family : "none");
    s->ready = 1;
    return NULL;
}

int plumb_serve(const plumb_serve_opts *o) {
    server s = {.o = o};
    pthread_mutex_init(&s.mu, NULL);
    s.last_refill = plumb_time_s();
    s.tokens = o->rate_limit < 1 ? 1 : o->rate_limit;
    if (o->model_name) snprintf(s.model_name, sizeof s.model_name, "%s", o->model_name);
    else {
        const char *b = strrchr(o->model_path, '/');
        snprintf(s.model_name, sizeof s.model_name, "%s", b ? b + 1 : o->model_path);
        char *dot = strstr(s.model_name, ".gguf");
        if (dot && !dot[5]) *dot = 0;
    }
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)o->port);
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        fprintf(stderr, "plumb serve: --host '%s' is not an IPv4 address\n", o->host);
        return 1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)o->port, NULL, NULL,
                                            handler, &s, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_NOTIFY_COMPLETED, completed, &s,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "plumb serve: cannot listen on %s:%d (in use, or not permitted)\n", o->host, o->port);
        return 1;
    }
    fprintf(stderr, "plumb serve: listening on http://%s:%d (loading %s)\n", o->host, o->port, o->model_path);
    pthread_t lt;
    pthread_create(&lt, NULL, loader, &s);
    while (!*o->stop_flag) usleep(100 * 1000);
    fprintf(stderr, "plumb serve: shutting down\n");
    pthread_join(lt, NULL);
    MHD_quiesce_daemon(d);
    engine_shutdown(s.eng); /* fails anything still waiting, so handlers return */
    MHD_stop_daemon(d);
    engine_free(s.eng);
    plumb_model_free(s.model);
    pthread_mutex_destroy(&s.mu);
    return s.load_error[0] ? 1 : 0;
}
