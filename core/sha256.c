/* sha256.c — SHA-256 through OpenSSL libcrypto (util.h declares it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include <errno.h>
#include <openssl/evp.h>

struct plumb_sha256_ctx { EVP_MD_CTX *md; };

plumb_sha256_ctx *plumb_sha256_begin(void) {
    plumb_sha256_ctx *c = malloc(sizeof *c);
    if (!c) return NULL;
    c->md = EVP_MD_CTX_new();
    if (!c->md || EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c->md);
        free(c);
        return NULL;
    }
    return c;
}

void plumb_sha256_update(plumb_sha256_ctx *c, const void *data, size_t n) {
    if (c) EVP_DigestUpdate(c->md, data, n);
}

void plumb_sha256_end(plumb_sha256_ctx *c, char hex[65]) {
    unsigned char d[32];
    unsigned int n = 0;
    hex[0] = 0;
    if (!c) return;
    if (EVP_DigestFinal_ex(c->md, d, &n) == 1)
        for (unsigned i = 0; i < n && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    EVP_MD_CTX_free(c->md);
    free(c);
}

int plumb_sha256_file(const char *path, char hex[65]) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return plumb_set_error("%s: cannot open: %s", path, strerror(errno));
    plumb_sha256_ctx *c = plumb_sha256_begin();
    static _Thread_local unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0) plumb_sha256_update(c, buf, n);
    int err = ferror(fp);
    fclose(fp);
    plumb_sha256_end(c, hex);
    if (err || !hex[0]) return plumb_set_error("%s: read or hash failed", path);
    return 0;
}
