/* engine.c — continuous batching. See engine.h. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/util.h"

#define STEP_TOKENS 256 /* default for the most tokens one step runs (prompt chunks + decodes) */

struct engine {
    plumb_model *model;
    plumb_ctx *ctx;
    int parallel, max_queue, n_ctx, free_reserve; /* blocks not yet reserved */
    int step_tokens;                              /* most tokens a step runs: every decoding sequence's one, then prompt chunks */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *queue_head, *queue_tail;
    int queue_len;
    request **active;
    int n_active;
    int stop;
    double last_step; /* end of the previous decode step, 0 when idle */
    engine_stats st;
};

const double engine_ttft_bounds[12] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 1e300};
const double engine_itl_bounds[12] = {0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 1e300};
const int engine_batch_bounds[10] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1 << 30};

request *request_new(void) {
    request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->seq = -1;
    r->refs = 1;
    return r;
}

void request_release(request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    free(r->prompt);
    free(r->text);
    plumb_sampler_free(r->sampler);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static int blocks_for(int positions) { return (positions + 15) / 16; }

/* Bytes at the end of s that could be the start of a stop string, or of an
 * unfinished UTF-8 character: they are held back from streaming. */
static size_t held_back(const request *r) {
    size_t hold = 0;
    for (int i = 0; i < r->n_stops; i++) {
        const size_t sl = strlen(r->stops[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= r->text_len && !memcmp(r->text + r->text_len - k, r->stops[i], k)) { hold = k; break; }
    }
    /* an incomplete multi-byte character */
    size_t n = r->text_len, back = 0;
    while (back < 4 && back < n && ((uint8_t)r->text[n - 1 - back] & 0xC0) == 0x80) back++;
    if (back < n) {
        const uint8_t lead = (uint8_t)r->text[n - 1 - back];
        const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (need > back + 1 && back + 1 > hold) hold = back + 1;
    }
    return hold;
}

static void finish(request *r, const char *reason) {
    r->done = 1;
    r->finish_reason = reason;
    r->text_ready = r->text_len;
    r->t_done = plumb_time_s();
}

/* Appends a token's text; returns 1 when a stop string ended the request. */
static int append_text(request *r, const char *piece, int n) {
    if (r->text_len + (size_t)n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap * 2 : 256;
        while (cap < r->text_len + (size_t)n + 1) cap *= 2;
        char *nt = realloc(r->text, cap);
        if (!nt) return 0;
        r->text = nt;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, piece, (size_t)n);
    r->text_len += (size_t)n;
    r->text[r->text_len] = 0;
    for (int i = 0; i < r->n_stops; i++) {
        const size_t sl = strlen(r->stops[i]);
        /* the stop string may end anywhere in the new piece */
        const size_t from = r->text_len >= sl + (size_t)n ? r->text_len - sl - (size_t)n : 0;
        const char *hit = strstr(r->text + from, r->stops[i]);
        if (hit) {
            r->text_len = (size_t)(hit - r->text);
            r->text[r->text_len] = 0;
            return 1;
        }
    }
    return 0;
}

static void observe(long *buckets, const double *bounds, int nb, double v) {
    for (int i = 0; i < nb; i++)
        if (v <= bounds[i]) { buckets[i]++; return; }
}

static void retire(engine *e, int i) {
    request *r = e->active[i];
    pthread_mutex_lock(&r->mu);
    if (!r->done) finish(r, "cancelled");
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    plumb_seq_close(e->ctx, r->seq);
    e->free_reserve += r->reserved_blocks;
    e->active[i] = e->active[--e->n_active];
    request_release(r);
}

static void *engine_main(void *arg) {
    engine *e = arg;
    const plumb_model *m = e->model;
    const int ST = e->step_tokens;
    plumb_token *toks = malloc(sizeof(plumb_token) * ST);
    int *pos = malloc(sizeof(int) * ST), *seq = malloc(sizeof(int) * ST), *owner = malloc(sizeof(int) * ST);
    int8_t *want = malloc(ST);
    int *picks = malloc(sizeof(int) * ST); /* greedy picks of the step's logit rows, when some request wants them */
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->queue_head && e->n_active == 0) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) { pthread_mutex_unlock(&e->mu); break; }
        /* admit waiting requests while slots and KV blocks allow (first come, first served) */
        while (e->queue_head && e->n_active < e->parallel) {
            request *r = e->queue_head;
            const int need = blocks_for(r->n_prompt + r->max_tokens);
            if (need > e->free_reserve) break;
            int s = plumb_seq_open(e->ctx);
            if (s < 0) break;
            e->queue_head = r->next;
            if (!e->queue_head) e->queue_tail = NULL;
            e->queue_len--;
            r->seq = s;
            r->reserved_blocks = need;
            e->free_reserve -= need;
            r->sampler = plumb_sampler_new(&r->sp, plumb_n_vocab(m));
            for (int i = 0; i < r->n_prompt && r->sampler; i++) plumb_sampler_accept(r->sampler, r->prompt[i]);
            e->active[e->n_active++] = r;
        }
        e->st.queue_depth = e->queue_len;
        pthread_mutex_unlock(&e->mu);

        /* drop requests whose clients left */
        for (int i = 0; i < e->n_active;) {
            request *r = e->active[i];
            pthread_mutex_lock(&r->mu);
            int gone = r->cancelled || !r->sampler;
            if (!r->sampler && !r->done) { snprintf(r->error, sizeof r->error, "out of memory"); r->error_status = 500; finish(r, "error"); pthread_cond_broadcast(&r->cv); }
            pthread_mutex_unlock(&r->mu);
            if (gone) retire(e, i);
            else i++;
        }
        /* one step: first every decoding sequence's next token (ST >= parallel:
         * they all fit), then prompts in chunks with what is left of the budget */
        int n = 0;
        for (int i = 0; i < e->n_active; i++) {
            request *r = e->active[i];
            if (r->n_done_prompt < r->n_prompt) continue;
            toks[n] = r->last;
            pos[n] = r->n_prompt + r->n_gen - 1;
            seq[n] = r->seq;
            owner[n] = i;
            want[n] = 1;
            n++;
        }
        for (int i = 0; i < e->n_active && n < ST; i++) {
            request *r = e->active[i];
            if (r->n_done_prompt >= r->n_prompt) continue;
            int take = r->n_prompt - r->n_done_prompt;
            if (take > ST - n) take = ST - n;
            for (int k = 0; k < take; k++, n++) {
                toks[n] = r->prompt[r->n_done_prompt + k];
                pos[n] = r->n_done_prompt + k;
                seq[n] = r->seq;
                owner[n] = i;
                want[n] = r->n_done_prompt + k == r->n_prompt - 1;
            }
            r->n_done_prompt += take;
        }
        if (n == 0) continue;
        plumb_batch b = {n, toks, pos, seq, want};
        const int rc = plumb_decode(e->ctx, &b);
        const double now = plumb_time_s();
        pthread_mutex_lock(&e->mu);
        e->st.last_batch = n;
        e->st.active = e->n_active;
        e->st.batch_count++;
        e->st.batch_sum += n;
        for (int i = 0; i < 10; i++)
            if (n <= engine_batch_bounds[i]) { e->st.batch_buckets[i]++; break; }
        pthread_mutex_unlock(&e->mu);
        /* greedy requests take the step's picks: made on the GPU when it has
         * the head (n ints read, not n x n_vocab floats), else here in parallel */
        int n_out = 0, greedy = 0;
        for (int t = 0; t < n; t++)
            if (want[t]) n_out++, greedy += e->active[owner[t]]->sampler && plumb_sampler_is_greedy(e->active[owner[t]]->sampler);
        const int have_picks = !rc && greedy && picks && plumb_batch_argmax(e->ctx, 0, n_out, picks) == 0;
        int out = 0;
        for (int t = 0; t < n; t++) {
            if (!want[t]) continue;
            request *r = e->active[owner[t]];
            pthread_mutex_lock(&r->mu);
            if (rc) {
                snprintf(r->error, sizeof r->error, "%s", plumb_last_error());
                r->error_status = 500;
                finish(r, "error");
            } else {
                plumb_token tok;
                if (have_picks && plumb_sampler_is_greedy(r->sampler)) plumb_sampler_accept(r->sampler, tok = picks[out]);
                else tok = plumb_sample(r->sampler, plumb_batch_logits(e->ctx, out));
                if (r->n_gen == 0) {
                    r->t_first = now;
                    pthread_mutex_lock(&e->mu);
                    observe(e->st.ttft_buckets, engine_ttft_bounds, 12, now - r->t_submit);
                    e->st.ttft_sum += now - r->t_submit;
                    e->st.ttft_count++;
                    e->st.prompt_tokens += r->n_prompt;
                    pthread_mutex_unlock(&e->mu);
                }
                r->n_gen++;
                r->last = tok;
                pthread_mutex_lock(&e->mu);
                e->st.generated_tokens++;
                pthread_mutex_unlock(&e->mu);
                if (!r->ignore_eos && plumb_token_is_end_of_turn(m, tok)) finish(r, "stop");
                else {
                    char piece[256];
                    int k = plumb_token_to_piece(m, tok, piece, sizeof piece);
                    if (k > 0 && append_text(r, piece, k)) finish(r, "stop");
                    else if (r->n_gen >= r->max_tokens) finish(r, "length");
                    else r->text_ready = r->text_len - held_back(r);
                }
            }
            out++;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
        /* inter-token latency: one step for every sequence that decoded */
        if (e->last_step > 0) {
            pthread_mutex_lock(&e->mu);
            observe(e->st.itl_buckets, engine_itl_bounds, 12, now - e->last_step);
            e->st.itl_sum += now - e->last_step;
            e->st.itl_count++;
            pthread_mutex_unlock(&e->mu);
        }
        e->last_step = now;
        for (int i = 0; i < e->n_active;) {
            request *r = e->active[i];
            pthread_mutex_lock(&r->mu);
            int d = r->done;
            pthread_mutex_unlock(&r->mu);
            if (d) retire(e, i);
            else i++;
        }
        if (e->n_active == 0) e->last_step = 0;
    }
    free(toks); free(pos); free(seq); free(owner); free(want); free(picks);
    return NULL;
}

plumb_ctx *engine_ctx(engine *e) { return e->ctx; }

engine *engine_new(plumb_model *m, int parallel, int n_ctx, int threads, int max_queue, int exact, const char *numa, int n_gpu_layers, int step_tokens) {
    engine *e = calloc(1, sizeof *e);
    if (!e) { plumb_set_error("out of memory"); return NULL; }
    plumb_ctx_params cp = plumb_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = parallel;
    cp.n_threads = threads;
    cp.exact = exact;
    cp.numa = numa;
    cp.n_gpu_layers = n_gpu_layers;
    e->ctx = plumb_ctx_new(m, &cp);
    e->active = calloc((size_t)parallel, sizeof(request *));
    if (!e->ctx || !e->active) { plumb_ctx_free(e->ctx); free(e->active); free(e); return NULL; }
    e->model = m;
    e->parallel = parallel;
    e->step_tokens = step_tokens > 0 ? step_tokens : STEP_TOKENS;
    if (e->step_tokens < parallel) e->step_tokens = parallel; /* every decoding sequence fits in a step */
    e->max_queue = max_queue;
    e->n_ctx = plumb_ctx_n_ctx(e->ctx);
    e->free_reserve = plumb_kv_free_positions(e->ctx) / 16;
    e->st.t_start = plumb_time_s();
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        plumb_set_error("cannot start the scheduler thread");
        plumb_ctx_free(e->ctx);
        free(e->active);
        free(e);
        return NULL;
    }
    return e;
}

void engine_shutdown(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    if (e->stop) { pthread_mutex_unlock(&e->mu); return; }
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    /* fail whatever is left so no handler waits forever */
    for (request *r = e->queue_head; r;) {
        request *next = r->next;
        pthread_mutex_lock(&r->mu);
        snprintf(r->error, sizeof r->error, "server shutting down");
        r->error_status = 503;
        finish(r, "error");
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        request_release(r);
        r = next;
    }
    while (e->n_active) {
        request *r = e->active[0];
        pthread_mutex_lock(&r->mu);
        if (!r->done) { snprintf(r->error, sizeof r->error, "server shutting down"); r->error_status = 503; finish(r, "error"); }
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        retire(e, 0);
    }
    e->queue_head = e->queue_tail = NULL;
    e->queue_len = 0;
}

void engine_free(engine *e) {
    if (!e) return;
    engine_shutdown(e);
    plumb_ctx_free(e->ctx);
    free(e->active);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int engine_n_ctx(const engine *e) { return e->n_ctx; }

int engine_submit(engine *e, request *r) {
    const int need = blocks_for(r->n_prompt + r->max_tokens);
    if (need > e->n_ctx / 16) { /* could never be admitted */
        snprintf(r->error, sizeof r->error, "this request needs %d positions (prompt %d + max_tokens %d), the context holds %d",
                 r->n_prompt + r->max_tokens, r->n_prompt, r->max_tokens, e->n_ctx);
        return 400;
    }
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        snprintf(r->error, sizeof r->error, "server shutting down");
        return 503;
    }
    e->st.requests_total++;
    if (e->queue_len >= e->max_queue) {
        e->st.requests_rejected++;
        pthread_mutex_unlock(&e->mu);
        snprintf(r->error, sizeof r->error, "server busy: %d requests waiting (--queue)", e->max_queue);
        return 503;
    }
    r->t_submit = plumb_time_s();
    r->refs++; /* the engine's reference */
    r->next = NULL;
    if (e->queue_tail) e->queue_tail->next = r;
    else e->queue_head = r;
    e->queue_tail = r;
    e->queue_len++;
    e->st.queue_depth = e->queue_len;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_stats_get(engine *e, engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->active = e->n_active;
    pthread_mutex_unlock(&e->mu);
}
