/* harness.h — the measurement core of plumb bench: timed prefill + decode
 * runs on a model, and the quality spot check between two precisions. */
#ifndef PLUMB_HARNESS_H
#define PLUMB_HARNESS_H

#include "../include/plumb.h"
#include "stats.h"

typedef struct {
    int n_prompt, n_gen;  /* fixed lengths: generation never stops early */
    int reps, warmup;
    int threads;
    int exact;
    int n_gpu_layers;   /* 0: CPU only; -1: all layers on the GPU */
    int batch;          /* concurrent sequences decoded together (1 = a single request) */
} bench_config;

typedef struct {
    int reps, n_prompt, n_gen;
    long generated_tokens;  /* over the measured reps */
    double total_s;         /* wall time of the measured reps */
    plumb_stats prefill_tps, decode_tps, ttft_ms, e2e_ms, itl_ms;
    int gpu_layers;         /* layers that really ran on the GPU */
    double gpu_peak_mib;
    int greedy_chained;     /* decode steps ran as a greedy chain on the GPU (plumb_decode_greedy) */
    uint64_t picks_hash;    /* FNV-1a of the first rep's greedy picks (after the prompt, then each step, sequence by sequence):
                             * two runs with equal hashes generated the same tokens */
    int picks_stable;       /* every rep picked the same tokens as the first */
    char gpu_status[512];
} bench_result;

/* A fixed prompt of exactly n tokens: a built-in English text tokenized and
 * repeated (or, for a model without a usable tokenizer, fixed ids). */
int bench_prompt(const plumb_model *m, int n, plumb_token *out);

int bench_run(plumb_model *m, const bench_config *cfg, bench_result *out);

/* Decode against the memory-bandwidth limit with the limit measured beside
 * each token: cfg's prompt, then cfg->n_gen greedy steps on the CPU, each
 * right after one read pass, with the same threads, over as many bytes as a
 * token reads (a part of a buffer of 2 GiB or more whose parts are read in
 * turn, so no part is still cached). The passes take the read loops of
 * plumb_measure_read_bandwidth in turn, token by token, and the figures are
 * those of the loop whose passes read fastest (median): which loop is
 * fastest changes with the machine and the moment, and a slow loop would
 * flatter the decode. Each pair gives read time / token time: the token's
 * speed as a fraction of the limit at that moment. */
typedef struct {
    int n;                 /* pairs of the fastest loop */
    int loop;              /* that loop */
    plumb_stats fraction;  /* read pass time / token time */
    plumb_stats token_ms, read_gbs;
} bench_paired;

int bench_paired_limit(plumb_model *m, const bench_config *cfg, bench_paired *out);

typedef struct {
    int n;               /* positions compared */
    double top1;         /* fraction where both models' argmax agree */
    double kl_mean, kl_max;
    char ref_text[512], text[512];
} bench_quality;

/* Greedy n tokens from the reference after a fixed prompt; the candidate is
 * scored teacher-forced on the reference's sequence (top-1 agreement, KL of
 * the candidate from the reference), and also generates its own text. */
int bench_quality_check(plumb_model *ref, plumb_model *cand, int n, int threads, bench_quality *q);

#endif
