/* repack.c — the 8-row interleaved layouts of Q8_0, Q4_0, Q4_1, Q4_K, Q5_K
 * and Q6_K used by the fast matrix-vector kernels.
 *
 * A group of 8 consecutive rows is stored block by block. For block b:
 *   d[8]            the 8 rows' fp16 scales (one 128-bit load -> 8 floats)
 *   m[8]            Q4_1 only: the 8 rows' fp16 minimums
 *   quants          in steps of 4 bytes per row: step s holds bytes 4s..4s+3
 *                   of row 0, then of row 1, ... row 7 (32 bytes per step)
 * Q8_0 has 8 steps (32 signed bytes per row); Q4_0 and Q4_1 have 4 (16 bytes
 * of packed nibbles per row, low nibble = element j, high = element j+16). A SIMD
 * lane k then always holds row k, so one multiply-add instruction advances
 * eight dot products at once and no horizontal sums are needed. */
#include <string.h>

#include "quant.h"

/* Q4_K: a group of 8 rows stored super-block by super-block, 8 x 144 bytes
 * as the rows have them:
 *   d[8], dmin[8]   the rows' fp16 scales (one 128-bit load each)
 *   sc[3][8]        each row's 12 packed scale bytes as three 32-bit words,
 *                   word w of row r at sc[w][r] (so the 6-bit unpacking runs
 *                   on all 8 rows at once, a row per 32-bit lane)
 *   quants          64-value slice j (32 bytes a row: low nibbles values
 *                   64j.., high ones 64j+32..) in 8 steps of 4 bytes: step s
 *                   holds bytes 32j+4s..32j+4s+3 of row 0, then row 1, ...
 * Same bytes as the rows, so a decode step streams no more than before.
 * Q5_K: the same, with the rows' fifth bits between the scales and the
 * quants: qh in 8 steps of 4 bytes, step s holding qh bytes 4s..4s+3 of
 * each row (byte l's bit 2j is value 64j+l's, bit 2j+1 value 64j+32+l's,
 * so one step of qh serves step s of every slice).
 * Q6_K: per super-block of the group (8 x 210 bytes):
 *   d[8]            fp16
 *   sc[4][8]        each row's 16 int8 sub-block scales as four 32-bit words
 *   quants          ql's 32 steps of 4 bytes a row (step t = ql bytes
 *                   4t..4t+3) and qh's 16 (step u = qh bytes 4u..4u+3), in
 *                   the order the kernels use them: per half h and pair of
 *                   steps p, ql steps 16h+2p, 16h+2p+1, then 16h+8+2p, +1,
 *                   then qh steps 8h+2p, +1 (Q6X8_STEP). Kept as three
 *                   regions (all ql, then all qh) the reads jumped between
 *                   them, and Zen 4's prefetchers did not follow. */

/* Row r's super-block b (a block_q4_K, block_q5_K or block_q6_K) into the
 * group's super-block g, or back into b (unpack != 0). */
static void k_move(uint32_t type, uint8_t *g, uint8_t *b, int r, int unpack) {
#define MOVE(grp, row, n) (unpack ? memcpy(row, grp, n) : memcpy(grp, row, n))
    if (type == PLUMB_TYPE_Q6_K) {
        block_q6_K *q6 = (block_q6_K *)b;
        MOVE(g + 2 * r, &q6->d, 2);
        for (int w = 0; w < 4; w++) MOVE(g + 16 + 32 * w + 4 * r, q6->scales + 4 * w, 4);
        for (int t = 0; t < 32; t++) MOVE(g + Q6X8_STEP(t / 16, t % 8, (t / 8) % 2) + 4 * r, q6->ql + 4 * t, 4);
        for (int u = 0; u < 16; u++) MOVE(g + Q6X8_STEP(u / 8, u % 8, 2) + 4 * r, q6->qh + 4 * u, 4);
        return;
    }
    /* Q4_K and Q5_K: the header (d, dmin, scale words), Q5_K's qh steps, the quant steps */
    block_q4_K *q4 = (block_q4_K *)b;
    block_q5_K *q5 = (block_q5_K *)b;
    const int five = type == PLUMB_TYPE_Q5_K;
    uint8_t *scales = five ? q5->scales : q4->scales, *qs = five ? q5->qs : q4->qs, *q = g + 128 + (five ? 256 : 0);
    MOVE(g + 2 * r, five ? &q5->d : &q4->d, 2);
    MOVE(g + 16 + 2 * r, five ? &q5->dmin : &q4->dmin, 2);
    for (int w = 0; w < 3; w++) MOVE(g + 32 + 32 * w + 4 * r, scales + 4 * w, 4);
    if (five)
        for (int st = 0; st < 8; st++) MOVE(g + 128 + 32 * st + 4 * r, q5->qh + 4 * st, 4);
    for (int j = 0; j < 4; j++)
        for (int st = 0; st < 8; st++) MOVE(q + 256 * j + 32 * st + 4 * r, qs + 32 * j + 4 * st, 4);
#undef MOVE
}

static int k_type(uint32_t type) { return type == PLUMB_TYPE_Q4_K || type == PLUMB_TYPE_Q5_K || type == PLUMB_TYPE_Q6_K; }

int plumb_repack8_supported(uint32_t type) {
    return type == PLUMB_TYPE_Q8_0 || type == PLUMB_TYPE_Q4_0 || type == PLUMB_TYPE_Q4_1 || k_type(type);
}

/* bytes of quants per row in one block, the block size in bytes, and the
 * fp16 header fields a block starts with (d; Q4_1: d and m) */
static void layout(uint32_t type, int *qbytes, int *bsize, int *halves) {
    *qbytes = type == PLUMB_TYPE_Q8_0 ? QK8_0 : QK4_0 / 2;
    *bsize = type == PLUMB_TYPE_Q8_0 ? (int)sizeof(block_q8_0) : type == PLUMB_TYPE_Q4_1 ? (int)sizeof(block_q4_1) : (int)sizeof(block_q4_0);
    *halves = type == PLUMB_TYPE_Q4_1 ? 2 : 1;
}

void plumb_repack8(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t cols, uint8_t *dst) {
    if (k_type(type)) {
        const size_t bs = plumb_type_get(type)->type_size;
        for (int64_t i = 0; i < cols / QK_K; i++)
            for (int r = 0; r < 8; r++) k_move(type, dst + (size_t)i * 8 * bs, (uint8_t *)src + (size_t)r * row_bytes + (size_t)i * bs, r, 0);
        return;
    }
    int qb, bs, hv;
    layout(type, &qb, &bs, &hv);
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++) {
        for (int f = 0; f < hv; f++)
            for (int r = 0; r < 8; r++) memcpy(dst + 16 * f + 2 * r, src + (size_t)r * row_bytes + (size_t)b * (size_t)bs + 2 * f, 2);
        uint8_t *q = dst + 16 * hv;
        for (int s = 0; s < qb / 4; s++)
            for (int r = 0; r < 8; r++, q += 4) memcpy(q, src + (size_t)r * row_bytes + (size_t)b * (size_t)bs + 2 * hv + 4 * s, 4);
        dst += 16 * hv + 8 * qb;
    }
}

/* Row r of a repacked group back in the standard layout (for the reference). */
static void unpack_row(uint32_t type, const uint8_t *src, int64_t cols, int r, uint8_t *row) {
    if (k_type(type)) {
        const size_t bs = plumb_type_get(type)->type_size;
        for (int64_t i = 0; i < cols / QK_K; i++) k_move(type, (uint8_t *)src + (size_t)i * 8 * bs, row + (size_t)i * bs, r, 1);
        return;
    }
    int qb, bs, hv;
    layout(type, &qb, &bs, &hv);
    for (int64_t b = 0; b < cols / 32; b++) {
        const uint8_t *g = src + (size_t)b * (size_t)(16 * hv + 8 * qb);
        uint8_t *o = row + (size_t)b * (size_t)bs;
        for (int f = 0; f < hv; f++) memcpy(o + 2 * f, g + 16 * f + 2 * r, 2);
        for (int s = 0; s < qb / 4; s++) memcpy(o + 2 * hv + 4 * s, g + 16 * hv + 32 * s + 4 * r, 4);
    }
}

void plumb_dot8_ref(uint32_t type, int n, const void *w8, const void *act, float *out) {
    uint8_t row[(16384 / 32) * sizeof(block_q8_0)];
    for (int r = 0; r < 8; r++) {
        if (n > 16384) { out[r] = 0; continue; } /* reference is for tests; real rows are shorter */
        unpack_row(type, w8, n, r, row);
        out[r] = type == PLUMB_TYPE_Q8_0   ? plumb_dot_q8_0_q8a_ref(n, row, act)
                 : type == PLUMB_TYPE_Q4_K ? plumb_dot_q4_K_q8K_ref(n, row, act)
                 : type == PLUMB_TYPE_Q5_K ? plumb_dot_q5_K_q8K_ref(n, row, act)
                 : type == PLUMB_TYPE_Q6_K ? plumb_dot_q6_K_q8K_ref(n, row, act)
                 : type == PLUMB_TYPE_Q4_1 ? plumb_dot_q4_1_q8a_ref(n, row, act)
                                           : plumb_dot_q4_0_q8a_ref(n, row, act);
    }
}
