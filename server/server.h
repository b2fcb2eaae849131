/* server.h — plumb's OpenAI-compatible HTTP server. */
#ifndef PLUMB_SERVER_H
#define PLUMB_SERVER_H

#include <stdint.h>

typedef struct {
    const char *model_path;
    const char *model_name;   /* id reported by /v1/models (default: file name) */
    const char *host;         /* 127.0.0.1 */
    int port;                 /* 8080 */
    int parallel;             /* sequences decoded together (slots) */
    int n_ctx;                /* KV positions shared by all slots (0 = parallel x 2048, capped by the model) */
    int threads;
    int max_queue;            /* waiting requests before 503 */
    const char *api_key;      /* NULL: no auth */
    double rate_limit;        /* requests per second allowed (token bucket), 0 = off */
    const char *chat_template;/* override */
    int default_max_tokens;
    int max_body;             /* bytes */
    int exact;
    const char *numa;
    int n_gpu_layers;      /* -ngl: layers on the GPU (-1 all, 0 none) */
    int step_tokens;       /* --step-tokens: most tokens a scheduler step runs (0: 256) */
    volatile int *stop_flag;  /* set to non-zero to shut down (signal handler) */
} plumb_serve_opts;

int plumb_serve(const plumb_serve_opts *o);

#endif
