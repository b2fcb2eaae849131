/* helpers.h — shared test helpers. Tests that need ../shared skip with a
 * message when it is absent (a fresh clone has none; CI always has it). */
#ifndef PLUMB_TEST_HELPERS_H
#define PLUMB_TEST_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Path of a file under the shared test data (PLUMB_SHARED or ../shared). */
static inline const char *shared_file(const char *rel) {
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    const char *root = getenv("PLUMB_SHARED");
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/%s", root && *root ? root : "../shared", rel);
    return b;
}

#define REQUIRE_SHARED(path)                                                                       \
    do {                                                                                           \
        if (access((path), R_OK) != 0) {                                                           \
            cr_skip_test("needs %s (shared test data is absent: set PLUMB_SHARED or run from a "   \
                         "checkout with ../shared)", (path));                                       \
        }                                                                                          \
    } while (0)

/* Whole file into a NUL-terminated buffer; NULL if unreadable. */
static inline char *slurp(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    fclose(fp);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

/* A scratch directory for files a test writes. */
static inline const char *tmp_path(const char *name) {
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/plumb-test-%d-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), name);
    return b;
}

#endif
