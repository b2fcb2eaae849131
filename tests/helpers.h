/* helpers.h — shared test helpers. Tests that need ../shared skip with a
 * message when it is absent (a fresh clone has none; CI always has it). */
#ifndef PLUMB_TEST_HELPERS_H
#define PLUMB_TEST_HELPERS_H

#include <criterion/criterion.h>
#include <dirent.h>
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

static inline const char *tmp_dir(void) { return getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"; }

/* Removes what this process wrote under tmp_path names (and names derived
 * from them, such as a bench record's .json/.md, or a report directory's
 * files), when it exits normally: a crashed test leaves its files to look at. */
static inline void tmp_cleanup(void) {
    char prefix[64], path[1024];
    snprintf(prefix, sizeof prefix, "plumb-test-%d-", (int)getpid());
    DIR *d = opendir(tmp_dir());
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        snprintf(path, sizeof path, "%s/%s", tmp_dir(), e->d_name);
        if (unlink(path) == 0) continue;
        DIR *sub = opendir(path); /* a directory: its files, then itself */
        if (!sub) continue;
        char inner[1536];
        for (struct dirent *f; (f = readdir(sub));)
            if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                snprintf(inner, sizeof inner, "%s/%s", path, f->d_name);
                unlink(inner);
            }
        closedir(sub);
        rmdir(path);
    }
    closedir(d);
}

/* A scratch path for a file a test writes (removed when the test's process exits). */
static inline const char *tmp_path(const char *name) {
    static _Thread_local char buf[4][512];
    static _Thread_local int k;
    static int cleanup_for_pid;
    if (cleanup_for_pid != (int)getpid()) { /* once per process (Criterion runs each test in its own) */
        cleanup_for_pid = (int)getpid();
        atexit(tmp_cleanup);
    }
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/plumb-test-%d-%s", tmp_dir(), (int)getpid(), name);
    return b;
}

#endif
