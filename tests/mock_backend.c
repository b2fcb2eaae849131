/* mock_backend.c — a stand-in for the CUDA plugin, built as a shared library
 * for the tests: it speaks the backend ABI and "runs" its layers as a fixed
 * elementwise map of the hidden states (x -> x / 2 + 1/4), so the host's
 * side of partial offload (its layers, the hand-over of x, its head after
 * the device's layers) can be checked on a machine without a GPU. It never
 * takes the head (the tests offload part of the model) and cannot chain. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/backend.h"

typedef struct {
    int n_embd, calls;
} mock;

static int mock_device_info(char *name, size_t name_len, size_t *free_bytes, size_t *total_bytes, char *err, size_t err_len) {
    snprintf(name, name_len, "mock device");
    *free_bytes = *total_bytes = (size_t)1 << 30;
    return 0;
}

static void *mock_load(const plumb_backend_model_desc *d, char *err, size_t err_len) {
    if (d->has_head) {
        snprintf(err, err_len, "the mock backend runs no output head (offload part of the model)");
        return NULL;
    }
    mock *m = calloc(1, sizeof *m);
    if (!m) snprintf(err, err_len, "out of memory");
    else m->n_embd = d->n_embd;
    return m;
}

static void mock_unload(void *h) { free(h); }

static int mock_forward(void *h, const plumb_backend_batch *b, float *x, float *logits, char *err, size_t err_len) {
    mock *m = h;
    for (size_t i = 0; i < (size_t)b->n * (size_t)m->n_embd; i++) x[i] = x[i] * 0.5f + 0.25f;
    m->calls++;
    return 0;
}

static size_t mock_peak_bytes(void *h) { return 0; }
static double mock_copy_bandwidth(void) { return 0; }
static void *mock_host_alloc(size_t bytes) { return NULL; }
static void mock_host_free(void *p) {}

static int mock_decode_chain(void *h, const plumb_backend_chain *c, char *err, size_t err_len) {
    snprintf(err, err_len, "the mock backend does not chain");
    return -2;
}

static const plumb_backend_iface mock_iface = {
    .abi = PLUMB_BACKEND_ABI,
    .name = "mock",
    .device_info = mock_device_info,
    .load = mock_load,
    .unload = mock_unload,
    .forward = mock_forward,
    .peak_bytes = mock_peak_bytes,
    .copy_bandwidth = mock_copy_bandwidth,
    .host_alloc = mock_host_alloc,
    .host_free = mock_host_free,
    .decode_chain = mock_decode_chain,
};

const plumb_backend_iface *plumb_cuda_backend_entry(void) { return &mock_iface; }
