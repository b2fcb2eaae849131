/* backend.c — finds and loads the GPU plugin with dlopen. */
#include "backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const plumb_backend_iface *loaded;
static char load_error[512];
static int tried;

/* Candidates: $PLUMB_CUDA_PLUGIN, beside the executable, plugins/cuda/ of
 * the source tree, then the library path. */
static void *open_plugin(char *tried_list, size_t n) {
    char exe[PATH_MAX] = "", path[PATH_MAX + 64];
    const char *env = getenv("PLUMB_CUDA_PLUGIN");
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
    }
    const char *cands[4] = {env, NULL, NULL, "libplumb-cuda.so"};
    char c1[PATH_MAX + 32], c2[PATH_MAX + 48];
    if (exe[0]) {
        snprintf(c1, sizeof c1, "%s/libplumb-cuda.so", exe);
        snprintf(c2, sizeof c2, "%s/plugins/cuda/libplumb-cuda.so", exe);
        cands[1] = c1;
        cands[2] = c2;
    }
    tried_list[0] = 0;
    for (int i = 0; i < 4; i++) {
        if (!cands[i] || !cands[i][0]) continue;
        snprintf(path, sizeof path, "%s", cands[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        size_t l = strlen(tried_list);
        snprintf(tried_list + l, n - l, "%s%s (%s)", l ? "; " : "", path, dlerror());
    }
    return NULL;
}

const plumb_backend_iface *plumb_backend_cuda(char *why, size_t why_len) {
    if (!tried) {
        tried = 1;
        char list[1024];
        void *h = open_plugin(list, sizeof list);
        if (!h) {
            snprintf(load_error, sizeof load_error, "the CUDA plugin libplumb-cuda.so was not found or would not load: %.400s", list);
        } else {
            plumb_backend_entry_fn entry = (plumb_backend_entry_fn)dlsym(h, PLUMB_BACKEND_ENTRY);
            const plumb_backend_iface *b = entry ? entry() : NULL;
            if (!b) snprintf(load_error, sizeof load_error, "libplumb-cuda.so has no %s entry point", PLUMB_BACKEND_ENTRY);
            else if (b->abi != PLUMB_BACKEND_ABI)
                snprintf(load_error, sizeof load_error, "libplumb-cuda.so speaks backend ABI %d, this plumb needs %d", b->abi, PLUMB_BACKEND_ABI);
            else {
                char name[128], err[256];
                size_t fr, tot;
                if (b->device_info(name, sizeof name, &fr, &tot, err, sizeof err))
                    snprintf(load_error, sizeof load_error, "CUDA plugin loaded, but no usable GPU: %s", err);
                else
                    loaded = b;
            }
        }
    }
    if (!loaded && why) snprintf(why, why_len, "%s", load_error);
    return loaded;
}
