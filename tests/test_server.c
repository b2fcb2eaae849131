/* The server as clients meet it: a real plumb serve process on a loopback
 * port, driven with libcurl. (tests/server/ drives it with the official
 * openai npm client.) */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "helpers.h"

static pid_t server_pid;
static int port;

typedef struct { char *data; size_t len; } buf;

static size_t collect(char *p, size_t s, size_t n, void *ud) {
    buf *b = ud;
    b->data = realloc(b->data, b->len + s * n + 1);
    memcpy(b->data + b->len, p, s * n);
    b->len += s * n;
    b->data[b->len] = 0;
    return s * n;
}

/* Returns the HTTP status; the body in *out (malloc'd). */
static long http(const char *method, const char *path, const char *body, const char *auth, char **out) {
    CURL *h = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    buf b = {calloc(1, 1), 0};
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (auth) hd = curl_slist_append(hd, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    long status = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    if (out) *out = b.data;
    else free(b.data);
    return status;
}

static void start_server(const char *extra) {
    const char *model = shared_file("models/stories260K.gguf");
    if (access(model, R_OK) != 0) return;
    port = 20000 + (int)(getpid() % 20000);
    const char *bin = getenv("PLUMB_BIN") ? getenv("PLUMB_BIN") : "./plumb";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "exec %s serve -m %s --port %d --parallel 4 -c 4096 --chat-template chatml --queue 8 %s 2>>%s", bin, model, port,
             extra ? extra : "", tmp_path("server.log"));
    server_pid = fork();
    if (server_pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* up to 10 s */
        if (http("GET", "/health", NULL, NULL, NULL) == 200) return;
        usleep(50 * 1000);
    }
    cr_assert_fail("server did not become healthy");
}

static void stop_server(void) {
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        int st;
        waitpid(server_pid, &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server exited badly (status %d)", st);
    }
    server_pid = 0;
}

static void setup(void) { curl_global_init(CURL_GLOBAL_DEFAULT); start_server(NULL); }
TestSuite(server, .init = setup, .fini = stop_server, .timeout = 120);

static char *completion_text(const char *resp) {
    json_t *j = json_loads(resp, 0, NULL);
    cr_assert_not_null(j, "not JSON: %s", resp);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c0, "text");
    if (!t) t = json_object_get(json_object_get(c0, "message"), "content");
    char *out = strdup(json_string_value(t) ? json_string_value(t) : "");
    json_decref(j);
    return out;
}

Test(server, health_models_and_greedy_completion) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    char *r;
    cr_expect_eq(http("GET", "/v1/models", NULL, NULL, &r), 200);
    cr_expect(strstr(r, "\"id\":\"stories260K\"") != NULL, "%s", r);
    free(r);
    cr_assert_eq(http("POST", "/v1/completions", "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\",\"max_tokens\":20,\"temperature\":0}", NULL, &r), 200, "%s", r);
    char *t = completion_text(r);
    /* the reference greedy continuation (../shared/reference) */
    char *ref = slurp(shared_file("reference/stories260K.greedy.once-upon-a-time.txt"), NULL);
    cr_assert(ref && strlen(t) > 40);
    cr_expect(strncmp(ref + strlen("Once upon a time"), t, strlen(t)) == 0, "greedy text: %s", t);
    free(ref);
    cr_expect(strstr(r, "\"prompt_tokens\":5") && strstr(r, "\"completion_tokens\":20"), "%s", r);
    free(t);
    free(r);
}

Test(server, bad_requests_get_openai_errors) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    struct { const char *method, *path, *body; long status; const char *needle; } cases[] = {
        {"POST", "/v1/completions", "{not json", 400, "malformed JSON"},
        {"POST", "/v1/completions", "[1,2]", 400, "JSON object"},
        {"POST", "/v1/completions", "{\"prompt\":42}", 400, "prompt must be a string"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"ten\"}", 400, "max_tokens"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"temperature\":9}", 400, "temperature"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "stream must be a boolean"},
        {"POST", "/v1/completions", "{\"model\":\"gpt-4\",\"prompt\":\"x\"}", 404, "model_not_found"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":100000}", 400, "context"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"n\":3}", 400, "n = 1"},
        {"POST", "/v1/chat/completions", "{\"messages\":[]}", 400, "messages"},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "role"},
        {"GET", "/v1/completions", NULL, 405, "POST"},
        {"GET", "/v2/nothing", NULL, 404, "no route"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r;
        long st = http(cases[i].method, cases[i].path, cases[i].body, NULL, &r);
        cr_expect_eq(st, cases[i].status, "case %zu: HTTP %ld: %s", i, st, r);
        cr_expect(strstr(r, "\"error\"") && strstr(r, cases[i].needle), "case %zu lacks '%s': %s", i, cases[i].needle, r);
        free(r);
    }
    /* a prompt longer than the whole context */
    size_t n = 200000;
    char *big = malloc(n + 64), *p = big + sprintf(big, "{\"prompt\":\"");
    for (size_t i = 0; i < n / 4; i++) p += sprintf(p, "abc ");
    sprintf(p, "\"}");
    char *r;
    cr_expect_eq(http("POST", "/v1/completions", big, NULL, &r), 400);
    cr_expect(strstr(r, "context_length_exceeded") != NULL, "%s", r);
    free(r);
    /* a body beyond --max-body (1 MiB) */
    char *huge = malloc((2 << 20) + 32);
    memset(huge, ' ', 2 << 20);
    strcpy(huge + (2 << 20), "{}");
    cr_expect_eq(http("POST", "/v1/completions", huge, NULL, &r), 413);
    free(r);
    free(huge);
    free(big);
}

typedef struct { const char *prompt; char *text; } par_job;

static void *par_run(void *arg) {
    par_job *j = arg;
    char body[512], *r;
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0}", j->prompt);
    if (http("POST", "/v1/completions", body, NULL, &r) == 200) j->text = completion_text(r);
    free(r);
    return NULL;
}

Test(server, parallel_greedy_equals_sequential) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    const char *prompts[6] = {"Once upon a time", "The dog", "Lily and Tom went", "One day", "The sun was", "A little bird"};
    par_job seq[6], par[6];
    for (int i = 0; i < 6; i++) {
        seq[i] = (par_job){prompts[i], NULL};
        par_run(&seq[i]);
        cr_assert_not_null(seq[i].text);
    }
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        par[i] = (par_job){prompts[i], NULL};
        pthread_create(&th[i], NULL, par_run, &par[i]);
    }
    for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 6; i++) {
        cr_assert_not_null(par[i].text, "parallel request %d failed", i);
        cr_expect_str_eq(par[i].text, seq[i].text, "prompt %d differs when batched", i);
        free(seq[i].text);
        free(par[i].text);
    }
    char *m;
    http("GET", "/metrics", NULL, NULL, &m);
    cr_expect(strstr(m, "plumb_batch_tokens_bucket") && strstr(m, "plumb_time_to_first_token_seconds_count"), "%s", m);
    free(m);
}

Test(server, streaming_chat_and_stop_strings) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    char *r;
    cr_assert_eq(http("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":30,\"temperature\":0,\"stream\":true}", NULL, &r), 200);
    cr_expect(strstr(r, "data: {") && strstr(r, "\"finish_reason\":\"length\"") && strstr(r, "data: [DONE]"), "%s", r);
    /* the streamed pieces concatenate to the non-streamed text */
    char joined[4096] = "";
    for (char *p = r; (p = strstr(p, "\"text\":\"")); p += 8) {
        char *e = strstr(p + 8, "\",\"logprobs\"");
        strncat(joined, p + 8, (size_t)(e - p - 8));
    }
    cr_expect(strncmp(joined, ", there was a little girl named Lily.", 37) == 0, "%s", joined);
    free(r);
    cr_assert_eq(http("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Lily\"]}", NULL, &r), 200);
    char *t = completion_text(r);
    cr_expect_str_eq(t, ", there was a little girl named ");
    cr_expect(strstr(r, "\"finish_reason\":\"stop\"") != NULL);
    free(t);
    free(r);
    cr_assert_eq(http("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,\"stream\":true}", NULL, &r), 200);
    cr_expect(strstr(r, "chat.completion.chunk") && strstr(r, "\"role\":\"assistant\""), "%s", r);
    free(r);
}

static size_t abort_after_first(char *p, size_t s, size_t n, void *ud) {
    (void)p;
    (*(int *)ud)++;
    return *(int *)ud > 1 ? 0 : s * n; /* returning less than given aborts the transfer */
}

Test(server, client_disconnect_frees_its_slot) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    /* four streams that hang up after the first chunk, holding all four slots if leaked */
    for (int k = 0; k < 4; k++) {
        CURL *h = curl_easy_init();
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
        int calls = 0;
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"prompt\":\"Once\",\"max_tokens\":1000,\"stream\":true,\"ignore_eos\":true}");
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, abort_after_first);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &calls);
        curl_easy_perform(h);
        curl_easy_cleanup(h);
    }
    char *r;
    long st = http("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}", NULL, &r);
    cr_expect_eq(st, 200, "%s", r);
    free(r);
    char *m;
    for (int i = 0; i < 100; i++) { /* the abandoned sequences are retired */
        http("GET", "/metrics", NULL, NULL, &m);
        int idle = strstr(m, "plumb_active_sequences 0") != NULL;
        free(m);
        if (idle) return;
        usleep(50 * 1000);
    }
    cr_expect_fail("abandoned streams still hold slots");
}

/* plumb loadtest against this server: every request of both levels
 * succeeds, the prompt is calibrated to the asked token count (the words
 * make more tokens than words in this vocabulary), each request yields
 * exactly max-tokens, and the JSON record says so; a dead port fails. */
Test(server, loadtest_calibrates_prompt_and_records) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    const char *bin = getenv("PLUMB_BIN") ? getenv("PLUMB_BIN") : "./plumb";
    const char *prefix = tmp_path("lt");
    char cmd[1024], path[600];
    snprintf(cmd, sizeof cmd, "%s loadtest --url http://127.0.0.1:%d/v1 --model stories260K --concurrency 1,2 --requests 4 --prompt-tokens 24 "
             "--max-tokens 5 -o %s > %s 2>&1", bin, port, prefix, tmp_path("lt.out"));
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(path, sizeof path, "%s.json", prefix);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    cr_assert_not_null(rec, "%s: %s", path, je.text);
    json_t *levels = json_object_get(rec, "levels");
    cr_assert_eq(json_array_size(levels), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *l = json_array_get(levels, i);
        cr_expect_eq(json_integer_value(json_object_get(l, "succeeded")), 4);
        cr_expect_eq(json_integer_value(json_object_get(l, "failed")), 0);
        cr_expect_eq(json_integer_value(json_object_get(l, "generated_tokens")), 4 * 5);
        json_t *range = json_object_get(l, "input_token_range");
        const long lo = (long)json_integer_value(json_array_get(range, 0)), hi = (long)json_integer_value(json_array_get(range, 1));
        cr_expect(lo > 0 && abs((int)(lo + hi) / 2 - 24) <= 3 && hi - lo <= 12, "prompt tokens %ld..%ld, asked 24", lo, hi);
    }
    cr_expect_lt(json_integer_value(json_object_get(rec, "prompt_words")), 24, "the words were scaled down");
    json_decref(rec);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s.%s", prefix, i == 0 ? "json" : i == 1 ? "md" : "svg");
        remove(path);
    }
    remove(tmp_path("lt.out"));
    snprintf(cmd, sizeof cmd, "%s loadtest --url http://127.0.0.1:1/v1 --model x --concurrency 1 --requests 1 --max-tokens 2 > /dev/null 2>&1", bin);
    cr_expect_neq(system(cmd), 0, "a server that is not there must fail the run");
}

static void setup_auth(void) { curl_global_init(CURL_GLOBAL_DEFAULT); start_server("--api-key sekret --rate-limit 1"); }
TestSuite(server_auth, .init = setup_auth, .fini = stop_server, .timeout = 60);

Test(server_auth, api_key_and_rate_limit) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    char *r;
    cr_expect_eq(http("GET", "/health", NULL, NULL, NULL), 200, "health needs no key");
    cr_expect_eq(http("GET", "/v1/models", NULL, NULL, &r), 401);
    cr_expect(strstr(r, "invalid_api_key") != NULL, "%s", r);
    free(r);
    cr_expect_eq(http("GET", "/v1/models", NULL, "Authorization: Bearer wrong", NULL), 401);
    cr_expect_eq(http("GET", "/v1/models", NULL, "Authorization: Bearer sekret", NULL), 200);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":2}";
    cr_expect_eq(http("POST", "/v1/completions", body, "Authorization: Bearer sekret", NULL), 200);
    long st = http("POST", "/v1/completions", body, "Authorization: Bearer sekret", &r);
    cr_expect_eq(st, 429, "second request within a second: %ld %s", st, r);
    cr_expect(strstr(r, "rate_limit_exceeded") != NULL, "%s", r);
    free(r);
}

/* --step-tokens 4 with 4 slots: each step is the decoding sequences' tokens
 * and then at most what is left of 4 for prompts, so a 5-token prompt takes
 * several steps beside other requests' decodes; the greedy text is still
 * the reference, alone and with five other requests in flight. */
static void setup_small_steps(void) { curl_global_init(CURL_GLOBAL_DEFAULT); start_server("--step-tokens 4"); }
TestSuite(server_small_steps, .init = setup_small_steps, .fini = stop_server, .timeout = 120);

Test(server_small_steps, prompts_in_chunks_between_decodes) {
    REQUIRE_SHARED(shared_file("models/stories260K.gguf"));
    char *ref = slurp(shared_file("reference/stories260K.greedy.once-upon-a-time.txt"), NULL);
    cr_assert_not_null(ref);
    const char *prompts[6] = {"Once upon a time", "The dog", "Lily and Tom went", "One day", "The sun was", "A little bird"};
    par_job par[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        par[i] = (par_job){prompts[i], NULL};
        pthread_create(&th[i], NULL, par_run, &par[i]);
    }
    for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 6; i++) cr_assert_not_null(par[i].text, "request %d failed", i);
    cr_expect(strncmp(ref + strlen("Once upon a time"), par[0].text, strlen(par[0].text)) == 0, "greedy text: %s", par[0].text);
    for (int i = 1; i < 6; i++) { /* each as it reads alone */
        par_job one = {prompts[i], NULL};
        par_run(&one);
        cr_assert_not_null(one.text);
        cr_expect_str_eq(par[i].text, one.text, "prompt %d differs when chunked beside others", i);
        free(one.text);
    }
    for (int i = 0; i < 6; i++) free(par[i].text);
    free(ref);
}
