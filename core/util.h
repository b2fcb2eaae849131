/* util.h — small shared helpers: error reporting, half-precision conversion,
 * timing, memory accounting. Internal to libplumb. */
#ifndef PLUMB_UTIL_H
#define PLUMB_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Errors are returned as values (negative ints / NULL); the message for the
 * most recent failure on this thread is kept here, like sqlite3_errmsg. */
int plumb_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *plumb_last_error(void);

/* IEEE half <-> float, exact (round-to-nearest-even on the way down). */
static inline float plumb_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t plumb_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static inline float plumb_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t plumb_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

double plumb_time_s(void);          /* monotonic seconds */
size_t plumb_peak_rss_bytes(void);  /* peak resident set of this process */

/* Accounted allocation: every byte the runtime allocates for model state
 * (KV cache, scratch, dequantized copies) goes through here so it can be
 * reported. Returns NULL with an error set on failure. */
void *plumb_alloc(size_t n, const char *what);
void *plumb_calloc(size_t n, const char *what);
void plumb_dealloc(void *p);
size_t plumb_alloc_current(void);
size_t plumb_alloc_peak(void);

/* Overflow-checked size arithmetic: returns 0 on overflow. */
static inline int plumb_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int plumb_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Small deterministic RNG (xorshift64*), used for sampling and synthetic weights. */
typedef struct { uint64_t s; } plumb_rng;
static inline void plumb_rng_seed(plumb_rng *r, uint64_t seed) {
    r->s = seed ? seed * 0x9E3779B97F4A7C15ull : 0x853c49e6748fea9bull;
}
static inline uint64_t plumb_rng_u64(plumb_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}
static inline float plumb_rng_f32(plumb_rng *r) { /* [0,1) */
    return (float)(plumb_rng_u64(r) >> 40) / 16777216.0f;
}



/* A NUL-terminated copy of n bytes that is valid UTF-8 (each invalid byte
 * becomes U+FFFD), for JSON, whose strings must be; malloc'd (free it), NULL
 * when out of memory. */
char *plumb_utf8_clean(const char *p, size_t n);

/* SHA-256 (OpenSSL libcrypto) as 64 hex digits + NUL. The incremental form
 * hashes data given in pieces (a file, or a model's tensors). */
typedef struct plumb_sha256_ctx plumb_sha256_ctx;
plumb_sha256_ctx *plumb_sha256_begin(void);
void plumb_sha256_update(plumb_sha256_ctx *c, const void *data, size_t n);
void plumb_sha256_end(plumb_sha256_ctx *c, char hex[65]); /* frees c */
int plumb_sha256_file(const char *path, char hex[65]);    /* 0 or -1 with error */

#endif
