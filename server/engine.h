/* engine.h — the continuous-batching scheduler between HTTP handlers and
 * the model. One scheduler thread owns the context: every step it admits
 * waiting requests into free slots (when their KV blocks can be reserved),
 * then runs one batched forward pass over all active sequences (prompt
 * chunks for new ones, one token for the others) and samples each. */
#ifndef PLUMB_ENGINE_H
#define PLUMB_ENGINE_H

#include <pthread.h>
#include <stddef.h>

#include "../include/plumb.h"

typedef struct request request;

struct request {
    /* set by the handler before submission */
    plumb_token *prompt;
    int n_prompt;
    int max_tokens;
    plumb_sampler_params sp;
    char **stops;
    int n_stops;
    int stream;
    int ignore_eos;      /* generate exactly max_tokens (benchmarks) */
    /* progress, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;          /* generated text, stop strings cut off */
    size_t text_len, text_cap;
    size_t text_ready;   /* bytes safe to send (no partial stop string / UTF-8 char) */
    int n_gen;
    int done;            /* finished: finish_reason set */
    const char *finish_reason;
    int error_status;    /* HTTP status for an error raised after submission, 0 if none */
    char error[256];
    int cancelled;       /* the client went away */
    double t_submit, t_first, t_done;
    /* engine-private */
    int seq, n_done_prompt, reserved_blocks;
    plumb_token last;
    plumb_sampler *sampler;
    request *next;
    int refs;            /* handler + engine */
};

typedef struct {
    double t_start;
    long requests_total, requests_rejected, prompt_tokens, generated_tokens;
    int queue_depth, active, last_batch;
    /* histograms: TTFT and inter-token latency (seconds), batch sizes */
    long ttft_buckets[12], itl_buckets[12], batch_buckets[10];
    double ttft_sum, itl_sum;
    long ttft_count, itl_count, batch_count, batch_sum;
} engine_stats;

typedef struct engine engine;

engine *engine_new(plumb_model *m, int parallel, int n_ctx, int threads, int max_queue, int exact, const char *numa, int n_gpu_layers,
                   int step_tokens);
plumb_ctx *engine_ctx(engine *e);
/* Stops the scheduler and fails every pending request (503), so waiting
 * handlers return; later submissions are refused. engine_free after the
 * HTTP side has stopped. */
void engine_shutdown(engine *e);
void engine_free(engine *e);
/* Queues a request (refs taken). Returns 0, or an HTTP status (400 context,
 * 503 queue full) with r->error set. */
int engine_submit(engine *e, request *r);
int engine_n_ctx(const engine *e);
void engine_stats_get(engine *e, engine_stats *out);
extern const double engine_ttft_bounds[12], engine_itl_bounds[12];
extern const int engine_batch_bounds[10];

request *request_new(void);
void request_release(request *r); /* drops one reference */

#endif
