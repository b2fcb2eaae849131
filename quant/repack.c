/* repack.c — the 8-row interleaved layouts of Q8_0 and Q4_0 used by the
 * fast matrix-vector kernels.
 *
 * A group of 8 consecutive rows is stored block by block. For block b:
 *   d[8]            the 8 rows' fp16 scales (one 128-bit load -> 8 floats)
 *   quants          in steps of 4 bytes per row: step s holds bytes 4s..4s+3
 *                   of row 0, then of row 1, ... row 7 (32 bytes per step)
 * Q8_0 has 8 steps (32 signed bytes per row); Q4_0 has 4 (16 bytes of packed
 * nibbles per row, low nibble = element j, high = element j+16). A SIMD
 * lane k then always holds row k, so one multiply-add instruction advances
 * eight dot products at once and no horizontal sums are needed. */
#include <string.h>

#include "quant.h"

int plumb_repack8_supported(uint32_t type) { return type == PLUMB_TYPE_Q8_0 || type == PLUMB_TYPE_Q4_0; }

/* bytes of quants per row in one block, and the block size in bytes */
static void layout(uint32_t type, int *qbytes, int *bsize) {
    *qbytes = type == PLUMB_TYPE_Q8_0 ? QK8_0 : QK4_0 / 2;
    *bsize = type == PLUMB_TYPE_Q8_0 ? (int)sizeof(block_q8_0) : (int)sizeof(block_q4_0);
}

void plumb_repack8(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t cols, uint8_t *dst) {
    int qb, bs;
    layout(type, &qb, &bs);
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < 8; r++) memcpy(dst + 2 * r, src + (size_t)r * row_bytes + (size_t)b * (size_t)bs, 2);
        uint8_t *q = dst + 16;
        for (int s = 0; s < qb / 4; s++)
            for (int r = 0; r < 8; r++, q += 4) memcpy(q, src + (size_t)r * row_bytes + (size_t)b * (size_t)bs + 2 + 4 * s, 4);
        dst += 16 + 8 * qb;
    }
}

/* Row r of a repacked group back in the standard layout (for the reference). */
static void unpack_row(uint32_t type, const uint8_t *src, int64_t cols, int r, uint8_t *row) {
    int qb, bs;
    layout(type, &qb, &bs);
    for (int64_t b = 0; b < cols / 32; b++) {
        const uint8_t *g = src + (size_t)b * (size_t)(16 + 8 * qb);
        uint8_t *o = row + (size_t)b * (size_t)bs;
        memcpy(o, g + 2 * r, 2);
        for (int s = 0; s < qb / 4; s++) memcpy(o + 2 + 4 * s, g + 16 + 32 * s + 4 * r, 4);
    }
}

void plumb_dot8_ref(uint32_t type, int n, const void *w8, const void *act, float *out) {
    uint8_t row[(16384 / 32) * sizeof(block_q8_0)];
    for (int r = 0; r < 8; r++) {
        if (n > 16384) { out[r] = 0; continue; } /* reference is for tests; real rows are shorter */
        unpack_row(type, w8, n, r, row);
        out[r] = type == PLUMB_TYPE_Q8_0 ? plumb_dot_q8_0_q8a_ref(n, row, act) : plumb_dot_q4_0_q8a_ref(n, row, act);
    }
}
