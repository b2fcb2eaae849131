/* merge.h — the pieces SentencePiece and byte-level BPE tokenization share:
 * a linked list of symbols over the text, and a priority queue of adjacent
 * pairs that may merge (highest priority first, leftmost first on ties).
 * SPM uses the merged token's score as the priority, BPE minus the merge
 * rank (exact in a float for any real merge list). */
#ifndef PLUMB_MERGE_H
#define PLUMB_MERGE_H

#include <stdint.h>
#include <stdlib.h>

typedef struct { int prev, next; const char *text; int n; } merge_symbol;
typedef struct { int left, right; float priority; int size; } merge_pair;
typedef struct { merge_pair *a; int n, cap; } merge_queue;

static inline int merge_before(const merge_pair *x, const merge_pair *y) {
    return x->priority > y->priority || (x->priority == y->priority && x->left < y->left);
}

static inline int merge_push(merge_queue *h, merge_pair b) {
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        merge_pair *na = realloc(h->a, sizeof(merge_pair) * (size_t)cap);
        if (!na) return -1;
        h->a = na;
        h->cap = cap;
    }
    int i = h->n++;
    h->a[i] = b;
    while (i > 0 && merge_before(&h->a[i], &h->a[(i - 1) / 2])) {
        merge_pair t = h->a[i]; h->a[i] = h->a[(i - 1) / 2]; h->a[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
    return 0;
}

static inline merge_pair merge_pop(merge_queue *h) {
    merge_pair top = h->a[0];
    h->a[0] = h->a[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && merge_before(&h->a[l], &h->a[m])) m = l;
        if (r < h->n && merge_before(&h->a[r], &h->a[m])) m = r;
        if (m == i) break;
        merge_pair t = h->a[i]; h->a[i] = h->a[m]; h->a[m] = t;
        i = m;
    }
    return top;
}

/* bytes of the UTF-8 character starting with c (1 for stray bytes) */
static inline int utf8_len(uint8_t c) {
    static const int lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

#endif
