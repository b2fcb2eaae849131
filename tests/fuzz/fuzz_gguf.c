/* fuzz_gguf.c — libFuzzer target for the GGUF reader: any byte string must
 * be either accepted (and then be internally consistent) or refused with a
 * message; never a crash, leak or out-of-bounds read. `make fuzz`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/gguf.h"
#include "../../core/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a private copy of exactly `size` bytes so ASan catches any overread */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    gguf_file *f = gguf_open_memory(buf, size, "fuzz");
    if (f) {
        char line[256];
        for (uint64_t i = 0; i < f->n_kv; i++) gguf_kv_format(&f->kv[i], line, sizeof line);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            /* touch the first and last byte of every tensor: must be in bounds */
            if (t->nbytes) {
                volatile uint8_t a = ((const uint8_t *)t->data)[0], b = ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)a;
                (void)b;
            }
        }
        gguf_close(f);
    } else if (!plumb_last_error()[0]) {
        abort(); /* refused without a message */
    }
    free(buf);
    return 0;
}
