#!/usr/bin/env bash
# bench/gpu-suite.sh — plumb's GPU checks and benchmarks, run on a machine
# with an NVIDIA GPU from a tree holding a built ./plumb and ./libplumb-cuda.so.
# PARTS (default "check synth tiny 7b") runs, in order:
#   check  correctness on the real models: greedy ids CPU vs GPU, teacher-forced
#          top-1 / KL / max log-prob difference against the CPU's exact path
#   synth  the same comparison on a synthetic TinyLlama-1.1B-shape Q4_0 model at
#          chunk sizes that take every product kernel (8 tokens: matrix-vector;
#          12/24/40/64: the tensor-core GEMM with 1, 2 and 4 token tiles), then
#          partial offload (-ngl 11) greedy ids with the host's one-region step on and off
#   tiny   TinyLlama-1.1B shape Q4_0: -ngl all at batch 1/8/64
#   7b     Llama-2-7B shape Q4_0: -ngl all at batch 1/8/64
#   ab     the same 7B file with the earlier split-K policy (batch 64), and unless
#          AB_SWITCHES=0 without programmatic dependent launch and without CUDA graphs;
#          with AB_PLUGIN=path, through that (older) plugin in the same binary
#   variants  kernel switches side by side on the 7B file, batch 1 and 64:
#          PLUMB_CUDA_MV_ROWS=1|2 (decode rows per warp; default now auto, see mv) and PLUMB_CUDA_GEMM_ROWS=32|16
#          (batch GEMM rows per warp), after a correctness check of the
#          2-row decode kernel on the synthetic TinyLlama (chunks of 8)
#   mv     the decode matrix-vector kernels: PLUMB_CUDA_MV_ROWS=1/auto against the CPU
#          (synthetic TinyLlama Q4_0/Q8_0 and the real models, chunks of 8), per-matrix time
#          and GB/s of every shape (PLUMB_CUDA_MVBENCH=1: 7B Q4_0, TinyLlama Q8_0; 1 and 8
#          tokens), 7B batch 1 alternating MV_ROWS (MV_AB, default "2 auto 2 auto"), and the
#          batch-1 step with the products, then all other kernels, left out (PLUMB_CUDA_SKIP)
#   att    attention that loads earlier steps' keys/values before waiting for the kernel
#          before it (PLUMB_CUDA_ATT_EARLY=none|few|all): synthetic TinyLlama against the CPU,
#          then 7B (and TinyLlama) batch 1/64 with AB_PLUGIN (an earlier plugin, if given) and
#          each setting, twice, and per-kernel times of 7B batch-1 steps
#   np     positions a warp loads per pass in 16-warp attention blocks (PLUMB_CUDA_ATT_NP=4|8):
#          greedy ids CPU vs GPU, then 7B and TinyLlama Q4_0 batch 1 alternating, twice
#   fused  the fused decode kernel (PLUMB_CUDA_FUSED=1): step-by-step check against the
#          separate kernels, greedy ids vs the CPU, and 7B batch 1/8 with it off and on
#   gemm   the int8 tensor-core batch GEMM (PLUMB_CUDA_GEMM=i8) against the CPU at
#          chunk sizes through every warp grid (Q4_0 and Q8_0 synthetic TinyLlama,
#          the real Q8_0 model), then 7B Q4_0 batch 1/64 and prefill with the
#          F16 GEMM and the int8 one (each warp grid at batch 64)
#   tiles  every built block shape of the int8 GEMM (PLUMB_CUDA_GEMM_TILE): checked
#          against the CPU (synthetic TinyLlama Q4_0/Q8_0, chunks of 40 and 64), then
#          per-kernel times of 7B batch-64 decode steps (PLUMB_CUDA_KPROF=1)
#   reg    the batch GEMM on weights dequantized in registers (PLUMB_CUDA_GEMM=reg, the
#          default) against the CPU: synthetic TinyLlama Q4_0/Q8_0 at chunk sizes through
#          its token tiles (12/24/40/64/100), other block shapes (RTILES) at 64, the real
#          Q8_0 model; the int8 GEMM at 64 beside it; then 7B Q4_0 batch 1/8/64 with it,
#          batch 64 with the int8 GEMM (REG_AB=0 leaves that out), per-kernel times of
#          batch-64 steps for each shape in RTILES_SPEED (PLUMB_CUDA_KPROF=1)
#   wg     the Hopper wgmma batch GEMM (PLUMB_CUDA_GEMM=wg, the default where the device runs
#          the plugin's sm_90a code): each block shape timed and compared with the reg GEMM on
#          7B Q4_0 / TinyLlama Q8_0 matrices (PLUMB_CUDA_GEMMBENCH; TinyLlama Q8_0 also unsplit),
#          the CPU comparison at chunk sizes (WG_CHECK_CHUNKS) through its token tiles
#          (synthetic TinyLlama WG_CHECK_TYPES, default Q4_0 and Q8_0; the real Q8_0 model), then 7B
#          Q4_0 batch WG_BATCH (1,64) with each of WG_VARIANTS (GEMM[:WG_TILE], default "wg reg") in
#          turn, WG_ROUNDS times (default 2), and per-kernel times of batch-64 steps
#   small  decode-sized steps (2 to 8 tokens) on the wgmma GEMM instead of the matrix-vector kernels
#          (PLUMB_CUDA_WG_SMALL=SMALL_CHECK, default 2; "default" leaves it unset): against the CPU at chunks
#          of 8 (synthetic TinyLlama Q4_0/Q8_0, the real Q8_0 model), then 7B and TinyLlama Q4_0 batch
#          SMALL_BATCH (2,4,8) with each of SMALL_SETTINGS (default "0 2") in turn, SMALL_ROUNDS times (1)
#   gemmbench  every batch GEMM variant timed on the 7B Q4_0 and TinyLlama Q8_0 matrices
#          (PLUMB_CUDA_GEMMBENCH, token counts GEMMBENCH_N, default 16,32,64)
#   q4k    Q4_K weights on the GPU: synthetic TinyLlama Q4_K against the CPU (greedy ids;
#          KL etc. at chunks of 8 and 64), then TinyLlama and 7B Q4_K -ngl all at batch 1/8/64
#          and TinyLlama Q4_K on the device's CPU at batch 1
#   cpu    TinyLlama and 7B on the device's CPU and with partial offload (-ngl 11 / 16)
#   prof7b ncu's full set for one 7B batch-64 decode step's GEMM and attention launches (see below)
#   chain  greedy chains (plumb_decode_greedy: steps back to back on the GPU, picks fed back there):
#          greedy ids with PLUMB_CUDA_CHAIN=0 (step by step) vs chained on the real models and
#          synthetic TinyLlama Q4_0/Q4_K/Q8_0/F16 (every embedding type the device reads), then
#          Q4_0 models of CHAIN_SHAPES (llama2-7b) at batch CHAIN_BATCH (1,8,64) step by step and chained in
#          turn, CHAIN_ROUNDS times (2)
#   rows   PLUMB_CUDA_WG_ROWS=auto (a tile's rows per matrix above 32 tokens) against 256 (the default before v19): the CPU
#          comparison at chunks 64 and 100 (synthetic TinyLlama Q4_0 and Q8_0), then 7B and TinyLlama Q4_0
#          batch 8/64 (and 128-token prefill) with it off and on, twice
#   tune   the default (33-64-token GEMMs in 128-row tiles, two blocks a multiprocessor, since v19; the tensor-core
#          attention at 4 blocks a multiprocessor since v18) against PLUMB_CUDA_WG_ROWS=256 (the earlier tiles),
#          tune (33-64-token steps: each matrix's GEMM tile timed at load) and auto: KL against the CPU (synthetic TinyLlama
#          Q4_0/Q8_0, chunks 64 and 100, each setting; 7B chunks of 64 ATT_MINB 3 against 4), then 7B Q4_0 batch 8/64 with
#          each setting in turn, twice, and per-kernel times of batch-64 steps with the default and 256
#   ropeatt  RoPE + KV writes a thread per rotation pair (PLUMB_CUDA_ROPE=pairs) against a thread per value (the default),
#          one-token steps doing them inside the attention (PLUMB_CUDA_ROPE=attention+pairs), and the tensor-core attention
#          prefetching its next 16 positions into L2 (PLUMB_CUDA_ATT_PREFETCH=1): greedy ids of each setting against the
#          default's (real models, synthetic TinyLlama and 7B Q4_0; one-token steps: the same bits), KL against the CPU (synthetic TinyLlama Q4_0/Q8_0, chunks 8/64, each setting), the
#          7B file's logits of each setting against the default's on the GPU (pairs: the same bits), then 7B Q4_0
#          batch 1/8/64 (prefetch: 64; attention: 1) with each setting in turn, twice, per-kernel times of batch-64 and
#          batch-1 steps, and a batch-1
#          step with the products, then all other kernels, left out (PLUMB_CUDA_SKIP); ROPEATT_QUICK=1: the ids of the
#          real models and TinyLlama, TinyLlama Q4_0 KL at chunks of 64, one speed round at batch 1/64, no kernel times
#   ab7b   settings (environment assignments) side by side on the 7B Q4_0 file: AB_SETTINGS (default: the
#          default, the pre-v20 launches (PLUMB_CUDA_PDL=decode+PLUMB_CUDA_ROPE=values), PLUMB_CUDA_ATT_PREFETCH=1, PLUMB_CUDA_NORM=cluster-all, PLUMB_CUDA_KV=heads;
#          "+PLUMB_" joins several into one setting, as in PLUMB_CUDA_PDL=all+PLUMB_CUDA_ROPE=attention+pairs); greedy ids of each against the default's (real models,
#          synthetic TinyLlama Q4_0), KL against the CPU (synthetic TinyLlama Q4_0, chunks of AB_CHUNKS, default 64),
#          then AB_ROUNDS (2) rounds of batch AB_BATCH (1,64) on the AB_SHAPE (llama2-7b) Q4_0 file, the settings in turn each round
#          (which of the v20 wide-model launches costs TinyLlama 8.4%: AB_SHAPE=tinyllama-1.1b AB_BATCH=64
#          AB_SETTINGS="X=default PLUMB_CUDA_PDL=all PLUMB_CUDA_ROPE=pairs PLUMB_CUDA_PDL=all+PLUMB_CUDA_ROPE=pairs PLUMB_CUDA_PDL=products")
#   same   settings that must not change a bit of the answers (SAME_SETTINGS, default PLUMB_CUDA_SWIGLU=kernel and
#          PLUMB_CUDA_PDL=products, joined at "+PLUMB_" as in ab7b) against the default on the GPU: every scored position's
#          log-probabilities (perplexity --kl) of the SAME_SHAPES Q4_0 files at chunks of SAME_CHUNKS (32 64 100). The base
#          stores its log-probabilities as F16, so equal runs do not read 0: they read its rounding (7B, chunks of 64: KL
#          mean 0.000010, max |delta| 0.0055, top 100%), the same figures for every setting. TinyLlama also with PLUMB_CUDA_GEMM_SPLITS=1 on
#          both sides (its gate/up GEMM otherwise splits k at 64 tokens, which takes the SwiGLU epilogue out)
#   prof   per-kernel GPU time of one 7B decode step (batch 1 and 64) with ncu
#   gemmprof  ncu speed-of-light / occupancy / stall sections of one batch GEMM launch
# Logs and records go to $OUT (default ./gpu-out; a part writes several files each run: where only a
# few files can come back from the machine, point OUT at a scratch folder and pack it afterwards). Runtime libraries the
# machine lacks can sit in .devlibs/; test models in $PLUMB_SHARED/models.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" models-cache
export LD_LIBRARY_PATH="$PWD/.devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
S=${PLUMB_SHARED:-../shared}
P=${PLUMB_BIN:-./plumb} # (PLUMB_BIN="timeout 150 ./plumb": a run that hangs ends)
T=${THREADS:-16}
TEXT="$S/reference/stories260K.greedy.once-upon-a-time.txt"
model() { # shape type -> path (made once)
    local f=models-cache/$1-$2.gguf
    [ -f "$f" ] || $P mkmodel --shape "$1" --type "$2" -o "$f" >/dev/null 2>&1
    echo "$f"
}
compare() { # model ctx chunks: KL etc. of -ngl all against the CPU's exact path (computed once per model, ctx, chunks)
    local base="$OUT/base-$(basename "$1")-$2-${3:-2}.bin"
    [ -f "$base" ] || $P perplexity -m "$1" -f "$TEXT" -c "$2" --chunks "${3:-2}" -t $T --exact --kl-base "$base" >/dev/null 2>&1 ||
        { echo "CPU reference failed"; rm -f "$base"; return; }
    $P perplexity -m "$1" -f "$TEXT" -c "$2" --chunks "${3:-2}" -t $T -ngl all --kl "$base" 2>&1 | tail -4
}
ids_against_default() { # model settings...: greedy ids of -ngl all with each setting (environment assignments joined at
    # "+PLUMB_") against those with none
    local m=$1 v
    shift
    $P run -m "$m" -p "Once upon a time" -n 32 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-default.txt"
    for v in "$@"; do
        env ${v//+PLUMB_/ PLUMB_} $P run -m "$m" -p "Once upon a time" -n 32 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-v.txt"
        echo "-- $(basename "$m") greedy ids, $v against the default: $(cmp -s "$OUT/ids-default.txt" "$OUT/ids-v.txt" && [ -s "$OUT/ids-v.txt" ] && echo identical || echo DIFFER)"
    done
}
compare_line() { # model ctx: compare's KL / top-1 (or error) lines joined into one
    compare "$1" "$2" 2 | grep -E "KL|top|rror|failed" | tr '\n' ' '
}
for part in ${PARTS:-check synth tiny 7b}; do
case $part in
check)
    nvidia-smi -L | tee "$OUT/gpu.txt"
    $P --version
    for m in stories260K.gguf TinyStories-656K-Q8_0.gguf; do
        echo "== $m: greedy ids, CPU exact vs GPU"
        $P run -m "$S/models/$m" -p "Once upon a time" -n 48 --temp 0 --show-ids --exact 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-cpu.txt"
        $P run -m "$S/models/$m" -p "Once upon a time" -n 48 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids" > "$OUT/ids-gpu.txt"
        cmp -s "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt" && echo "greedy ids identical" || { echo "greedy ids DIFFER"; cat "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt"; }
        for c in 8 64; do echo "-- $m -c $c"; compare "$S/models/$m" $c 2; done
    done 2>&1 | tee "$OUT/check.txt"
    ;;
synth)
    m=$(model tinyllama-1.1b q4_0)
    {
        echo "== synthetic TinyLlama Q4_0: greedy ids, CPU vs GPU (matrix-vector path)"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -t $T 2>&1 >/dev/null | grep "generated ids"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids|GPU"
        for c in 8 12 24 40 64; do echo "-- -c $c"; compare "$m" $c 2; done
        echo "== partial offload (-ngl 11: the host's 11 layers in its one-region decode step, the GPU's 11, the host's head)"
        for v in 1 0; do PLUMB_TOKEN_REGION=$v $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -t $T -ngl 11 2>&1 >/dev/null | grep "generated ids"; done
        $P perplexity -m "$m" -f "$TEXT" -c 64 --chunks 2 -t $T -ngl 11 2>&1 | tail -2
    } 2>&1 | tee "$OUT/synth.txt"
    ;;
tiny)
    m=$(model tinyllama-1.1b q4_0)
    PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
        -o "$OUT/tinyllama-gpu" 2>&1 | tee "$OUT/tinyllama-gpu.txt" | grep -E "^\| |GPU path|rror|plumb-cuda|^bench: batch"
    ;;
7b)
    m=$(model llama2-7b q4_0)
    PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
        -o "$OUT/llama2-7b-gpu" 2>&1 | tee "$OUT/llama2-7b-gpu.txt" | grep -E "^\| |GPU path|rror|plumb-cuda|^bench: batch"
    ;;
ab)
    m=$(model llama2-7b q4_0)
    {
        [ "${AB_SWITCHES:-1}" = 1 ] && echo "== current plugin, programmatic dependent launch off" &&
        PLUMB_CUDA_PDL=0 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 -p 128 -n 32 --reps 3 --no-quality -o "$OUT/ab-nopdl"
        [ "${AB_SWITCHES:-1}" = 1 ] && echo "== current plugin, CUDA graphs off" &&
        PLUMB_CUDA_GRAPHS=0 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 -p 128 -n 32 --reps 3 --no-quality -o "$OUT/ab-nographs"
        echo "== current plugin, the earlier split-K policy (2 slices per split at least, 2 blocks per SM)"
        PLUMB_CUDA_SPLITK=2,2 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 3 --no-quality -o "$OUT/ab-splitk"
        if [ -n "${AB_PLUGIN:-}" ]; then
            echo "== $AB_PLUGIN"
            PLUMB_CUDA_PLUGIN=$AB_PLUGIN $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 -p 128 -n 32 --reps 3 --no-quality -o "$OUT/ab-old"
        fi
    } 2>&1 | tee "$OUT/ab.txt" | grep -E "^\| |==|GPU path|rror"
    ;;
variants)
    m=$(model tinyllama-1.1b q4_0)
    { echo "== PLUMB_CUDA_MV_ROWS=2, synthetic TinyLlama Q4_0, chunks of 8 and 64"
      for c in 8 64; do echo "-- -c $c"; (export PLUMB_CUDA_MV_ROWS=2; compare "$m" $c 2); done
      echo "== PLUMB_CUDA_GEMM_ROWS=16, chunks of 40 and 64"
      for c in 40 64; do echo "-- -c $c"; (export PLUMB_CUDA_GEMM_ROWS=16; compare "$m" $c 2); done
    } 2>&1 | tee "$OUT/variants-check.txt"
    m=$(model llama2-7b q4_0)
    for v in "MV_ROWS=1 GEMM_ROWS=32" "MV_ROWS=2 GEMM_ROWS=32" "MV_ROWS=1 GEMM_ROWS=16"; do
        tag=$(echo "$v" | tr -d ' =_' | tr 'A-Z' 'a-z')
        echo "== $v"
        env PLUMB_CUDA_TIMING=1 PLUMB_CUDA_${v% *} PLUMB_CUDA_${v#* } $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 -p 128 -n 32 --reps 3 \
            --no-quality -o "$OUT/variants-$tag" 2>&1 | tee "$OUT/variants-$tag.txt" | grep -E "^\| models|rror|plumb-cuda"
    done
    ;;
att)
    {
        m=$(model tinyllama-1.1b q4_0)
        echo "== synthetic TinyLlama Q4_0: greedy ids, CPU vs GPU (attention loads earlier positions before waiting)"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -t $T 2>&1 >/dev/null | grep "generated ids"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids"
        for c in 8 64; do echo "-- -c $c: $(compare_line "$m" $c)"; done
    } 2>&1 | tee "$OUT/att-check.txt"
    # the plugin before these changes (AB_PLUGIN), then PLUMB_CUDA_ATT_EARLY none / few (default) / all, twice
    for sh in llama2-7b tinyllama-1.1b; do
        m=$(model $sh q4_0)
        for r in 1 2; do
            for v in old none few all; do
                [ $v = old ] && [ -z "${AB_PLUGIN:-}" ] && continue
                [ $sh = tinyllama-1.1b ] && [ $v = none -o $v = all ] && continue
                echo "== $sh $v pass $r"
                if [ $v = old ]; then env PLUMB_CUDA_PLUGIN=$AB_PLUGIN PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 \
                        -p 128 -n 32 --reps 3 --no-quality -o "$OUT/att-$sh-$v-$r" > "$OUT/att-$sh-$v-$r.txt" 2>&1
                else env PLUMB_CUDA_ATT_EARLY=$v PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,64 -p 128 -n 32 \
                        --reps 3 --no-quality -o "$OUT/att-$sh-$v-$r" > "$OUT/att-$sh-$v-$r.txt" 2>&1
                fi
                grep -E "^\| models|rror|decode steps" "$OUT/att-$sh-$v-$r.txt"
            done
        done
    done
    m=$(model llama2-7b q4_0)
    PLUMB_CUDA_KPROF=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 32 --reps 1 --warmup 0 \
        --no-quality -o "$OUT/att-kprof" 2>&1 | tee "$OUT/att-kprof.txt" | grep -E "plumb-cuda|rror"
    ;;
np)
    {
        m=$(model tinyllama-1.1b q4_0)
        echo "== synthetic TinyLlama Q4_0: greedy ids, CPU, then GPU with PLUMB_CUDA_ATT_NP=4 and 8"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -t $T 2>&1 >/dev/null | grep "generated ids"
        for v in 4 8; do PLUMB_CUDA_ATT_NP=$v $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep "generated ids"; done
    } 2>&1 | tee "$OUT/np-check.txt"
    for r in 1 2; do
        for v in 4 8; do
            for sh in llama2-7b tinyllama-1.1b; do
                m=$(model $sh q4_0)
                echo "== $sh PLUMB_CUDA_ATT_NP=$v pass $r"
                PLUMB_CUDA_ATT_NP=$v PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 32 --reps 3 \
                    --no-quality -o "$OUT/np-$sh-$v-$r" 2>&1 | tee "$OUT/np-$sh-$v-$r.txt" | grep -E "^\| models|rror|decode steps"
            done
        done
    done
    ;;
mv)
    {
        for q in q4_0 q8_0; do
            m=$(model tinyllama-1.1b $q)
            for v in 1 auto; do
                echo "== synthetic TinyLlama $q, PLUMB_CUDA_MV_ROWS=$v, chunks of 8: $( (export PLUMB_CUDA_MV_ROWS=$v; compare_line "$m" 8))"
            done
        done
        for mm in stories260K.gguf TinyStories-656K-Q8_0.gguf; do
            echo "== $mm, PLUMB_CUDA_MV_ROWS=1, greedy ids CPU exact vs GPU"
            $P run -m "$S/models/$mm" -p "Once upon a time" -n 48 --temp 0 --show-ids --exact 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-cpu.txt"
            PLUMB_CUDA_MV_ROWS=1 $P run -m "$S/models/$mm" -p "Once upon a time" -n 48 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids" > "$OUT/ids-gpu.txt"
            cmp -s "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt" && echo "greedy ids identical" || { echo "greedy ids DIFFER"; cat "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt"; }
            echo "-- -c 8: $( (export PLUMB_CUDA_MV_ROWS=1; compare_line "$S/models/$mm" 8))"
        done
    } 2>&1 | tee "$OUT/mv-check.txt"
    for mq in llama2-7b:q4_0 tinyllama-1.1b:q8_0; do
        m=$(model ${mq%:*} ${mq#*:})
        PLUMB_CUDA_MVBENCH=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 8 -p 16 -n 2 --reps 1 --warmup 0 --no-quality \
            -o "$OUT/mvbench" 2>&1 | grep -E "mvbench|rror"
    done 2>&1 | tee "$OUT/mvbench.txt"
    m=$(model llama2-7b q4_0)
    for v in ${MV_AB:-2 auto 2 auto}; do
        echo "== PLUMB_CUDA_MV_ROWS=$v"
        PLUMB_CUDA_MV_ROWS=$v timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 32 --reps 5 \
            --no-quality -o "$OUT/mv-$v" 2>&1 | grep -E "^\| models|rror"
    done 2>&1 | tee "$OUT/mv-ab.txt"
    # where batch-1 time goes: the same step with the products left out, then with everything else left out
    for sk in products others; do
        echo "== PLUMB_CUDA_SKIP=$sk (timing only)"
        PLUMB_CUDA_SKIP=$sk PLUMB_CUDA_TIMING=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 32 --reps 3 \
            --no-quality -o "$OUT/skip-$sk" 2>&1 | grep -E "^\| models|rror|plumb-cuda.*step"
    done 2>&1 | tee "$OUT/skip.txt"
    ;;
fused)
    # the fused decode kernel: step-by-step check against the separate kernels,
    # greedy ids against the CPU, then side by side at batch 1 and 8
    for shape in tinyllama-1.1b llama2-7b; do
        m=$(model $shape q4_0)
        echo "== $shape Q4_0: fused vs separate kernels on every decode step (batch 1, then 8)"
        PLUMB_CUDA_FUSED=1 PLUMB_CUDA_FUSED_CHECK=1 timeout 120 $P run -m "$m" -p "Once upon a time" -n 32 --temp 0 -ngl all 2>&1 >/dev/null | grep -E "fused check|rror"
        PLUMB_CUDA_FUSED=1 PLUMB_CUDA_FUSED_CHECK=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 8 -p 16 -n 16 --reps 1 --no-quality \
            -o "$OUT/fused-check8-$shape" 2>&1 | grep -E "fused check|rror"
        echo "== $shape Q4_0: greedy ids, CPU vs GPU fused"
        timeout 200 $P run -m "$m" -p "Once upon a time" -n 16 --temp 0 --show-ids -t $T 2>&1 >/dev/null | grep "generated ids"
        PLUMB_CUDA_FUSED=1 timeout 120 $P run -m "$m" -p "Once upon a time" -n 16 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids|rror"
    done 2>&1 | tee "$OUT/fused-check.txt"
    m=$(model llama2-7b q4_0)
    for f in 0 1; do
        echo "== PLUMB_CUDA_FUSED=$f"
        PLUMB_CUDA_FUSED=$f PLUMB_CUDA_TIMING=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,8 -p 128 -n 32 --reps 3 --no-quality \
            -o "$OUT/fused-$f-llama2-7b" 2>&1 | tee "$OUT/fused-$f-llama2-7b.txt" | grep -E "^\| models|^\| [0-9]|rror|plumb-cuda"
    done
    ;;
gemm)
    {
        for q in q4_0 q8_0; do
            m=$(model tinyllama-1.1b $q)
            for tile in auto 4x1 2x2 4x2; do
                echo "== synthetic TinyLlama $q, int8 GEMM, warp grid $tile"
                for c in 12 40 64; do
                    echo "-- -c $c"
                    (export PLUMB_CUDA_GEMM=i8; [ $tile = auto ] || export PLUMB_CUDA_GEMM_TILE=$tile; compare "$m" $c 2)
                done
            done
            echo "== synthetic TinyLlama $q, F16 GEMM"
            for c in 40 64; do echo "-- -c $c"; (export PLUMB_CUDA_GEMM=f16; compare "$m" $c 2); done
        done
        echo "== TinyStories-656K Q8_0, int8 GEMM"
        for c in 16 64; do echo "-- -c $c"; (export PLUMB_CUDA_GEMM=i8; compare "$S/models/TinyStories-656K-Q8_0.gguf" $c 2); done
    } 2>&1 | tee "$OUT/gemm-check.txt"
    m=$(model llama2-7b q4_0)
    for v in f16:auto i8:auto i8:4x1 i8:4x2; do
        echo "== PLUMB_CUDA_GEMM=${v%:*} tile ${v#*:}"
        batches=1,64; [ "${v#*:}" = auto ] || batches=64
        (export PLUMB_CUDA_GEMM=${v%:*}; [ "${v#*:}" = auto ] || export PLUMB_CUDA_GEMM_TILE=${v#*:}
         PLUMB_CUDA_TIMING=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch $batches -p 128 -n 32 --reps 3 --no-quality \
            -o "$OUT/gemm-${v%:*}-${v#*:}-llama2-7b" 2>&1 | tee "$OUT/gemm-${v%:*}-${v#*:}-llama2-7b.txt" | grep -E "^\| models|rror|plumb-cuda")
    done
    ;;
tiles)
    tiles=${TILES:-"2x2x2x2x1 4x1x2x2x1 2x2x2x4x1 2x2x2x4x2 4x1x2x4x2 2x2x2x8x2 2x2x2x8x4 2x2x4x4x2 2x2x2x4x1x4 4x1x2x2x1x4"}
    for q in q4_0 q8_0; do
        m=$(model tinyllama-1.1b $q)
        for tile in $tiles; do
            for c in 40 64; do
                echo "== $q $tile -c $c: $( (export PLUMB_CUDA_GEMM_TILE=$tile; compare_line "$m" $c))"
            done
        done
    done 2>&1 | tee "$OUT/tiles-check.txt"
    m=$(model llama2-7b q4_0)
    for tile in $tiles; do
        echo "== $tile"
        PLUMB_CUDA_GEMM_TILE=$tile PLUMB_CUDA_KPROF=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 1 --warmup 0 \
            --no-quality -o "$OUT/tiles-$tile" 2>&1 | grep -E "kernels of|k_gemm|k_splitk|^\| models|rror"
    done 2>&1 | tee "$OUT/tiles-7b.txt"
    for sk in ${SPLITS:-}; do # split-K policies (MIN_SLICES,BLOCKS_PER_SM) with the default shapes
        echo "== PLUMB_CUDA_SPLITK=$sk"
        PLUMB_CUDA_SPLITK=$sk PLUMB_CUDA_KPROF=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 1 --warmup 0 \
            --no-quality -o "$OUT/splits-$sk" 2>&1 | grep -E "kernels of|k_gemm|k_splitk|^\| models|rror"
    done 2>&1 | tee "$OUT/splits-7b.txt"
    echo "== PLUMB_CUDA_SPLIT_SUM=inline (split-K partials added by each tile's last split)"
    PLUMB_CUDA_SPLIT_SUM=inline PLUMB_CUDA_KPROF=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 1 --warmup 0 \
        --no-quality -o "$OUT/splitsum-inline" 2>&1 | grep -E "kernels of|k_gemm|k_splitk|^\| models|rror"
    ;;
reg)
    {
        for q in q4_0 q8_0; do
            m=$(model tinyllama-1.1b $q)
            for c in 12 24 40 64 100; do
                echo "== $q reg -c $c: $( (export PLUMB_CUDA_GEMM=reg; compare_line "$m" $c))"
            done
            for tile in ${RTILES:-4x2x8x4x1 4x2x8x4x4 4x2x8x8x2 4x2x2x4x4}; do
                echo "== $q reg $tile -c 64: $( (export PLUMB_CUDA_GEMM=reg PLUMB_CUDA_GEMM_RTILE=$tile; compare_line "$m" 64))"
            done
            echo "== $q i8 -c 64: $( (export PLUMB_CUDA_GEMM=i8; compare_line "$m" 64))"
        done
        for c in 16 64; do
            echo "== TinyStories-656K Q8_0 reg -c $c: $( (export PLUMB_CUDA_GEMM=reg; compare_line "$S/models/TinyStories-656K-Q8_0.gguf" $c))"
        done
    } 2>&1 | tee "$OUT/reg-check.txt"
    m=$(model llama2-7b q4_0)
    {
        echo "== PLUMB_CUDA_GEMM=reg"
        PLUMB_CUDA_GEMM=reg PLUMB_CUDA_TIMING=1 timeout 300 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
            -o "$OUT/reg-llama2-7b" 2>&1 | tee "$OUT/reg-llama2-7b.txt" | grep -E "^\| |rror|plumb-cuda"
        if [ "${REG_AB:-1}" = 1 ]; then
            echo "== PLUMB_CUDA_GEMM=i8"
            PLUMB_CUDA_GEMM=i8 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 3 --no-quality \
                -o "$OUT/i8-llama2-7b" 2>&1 | grep -E "^\| models|^\| [0-9]|rror"
        fi
        for tile in ${RTILES_SPEED:-auto 4x2x4x4x2 4x2x8x8x4}; do
            echo "== kernels, reg $tile"
            (export PLUMB_CUDA_GEMM=reg; [ $tile = auto ] || export PLUMB_CUDA_GEMM_RTILE=$tile
             PLUMB_CUDA_KPROF=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 1 --warmup 0 \
                --no-quality -o "$OUT/kp-$tile" 2>&1 | grep -E "kernels of|k_gemm|k_splitk|k_att|^\| models|rror")
        done
    } 2>&1 | tee "$OUT/reg-7b.txt"
    ;;
wg)
    {
        echo "== does this device run the wgmma GEMM? (PLUMB_CUDA_GEMM=wg refuses where it does not)"
        PLUMB_CUDA_GEMM=wg $P run -m "$S/models/stories260K.gguf" -p "Once" -n 4 --temp 0 -ngl all 2>&1 >/dev/null | grep -iE "rror|wg|sm_90a" || echo "wgmma GEMM available"
        for mq in ${WG_BENCH_MODELS:-llama2-7b:q4_0 tinyllama-1.1b:q8_0}; do
            m=$(model ${mq%:*} ${mq#*:})
            echo "== gemmbench $mq"
            PLUMB_CUDA_GEMMBENCH=${WG_BENCH_N:-64,128} timeout 300 $P bench -m "$m" --backends cuda --ngl all -t $T --batch ${WG_BENCH_MAXB:-128} -p 16 -n 2 --reps 1 --warmup 0 \
                --no-quality -o "$OUT/wgbench" 2>&1 | grep -E "gemmbench.*(wg|reg 4x2x8x4x2)|compare|rror"
        done
        [ "${WG_SPLIT1:-1}" = 1 ] && m=$(model tinyllama-1.1b q8_0) && echo "== TinyLlama Q8_0, PLUMB_CUDA_GEMM_SPLITS=1" &&
        PLUMB_CUDA_GEMM_SPLITS=1 PLUMB_CUDA_GEMMBENCH=64 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 16 -n 2 --reps 1 --warmup 0 \
            --no-quality -o "$OUT/wgbench" 2>&1 | grep -E "gemmbench.*(wg|reg 4x2x8x4x2)|compare|rror"
        for q in ${WG_CHECK_TYPES:-q4_0 q8_0}; do
            m=$(model tinyllama-1.1b $q)
            for c in ${WG_CHECK_CHUNKS:-12 24 40 64 100}; do
                echo "== $q wg -c $c: $( (export PLUMB_CUDA_GEMM=wg; compare_line "$m" $c))"
            done
            echo "== $q reg -c 64: $( (export PLUMB_CUDA_GEMM=reg; compare_line "$m" 64))"
        done
        for c in 16 64; do
            echo "== TinyStories-656K Q8_0 wg -c $c: $( (export PLUMB_CUDA_GEMM=wg; compare_line "$S/models/TinyStories-656K-Q8_0.gguf" $c))"
        done
    } 2>&1 | tee "$OUT/wg-check.txt"
    m=$(model llama2-7b q4_0)
    {
        for r in $(seq ${WG_ROUNDS:-2}); do
            for v in ${WG_VARIANTS:-wg reg}; do # GEMM[:WG_TILE]
                g=${v%%:*}; tile=${v#*:}; [ "$tile" = "$v" ] && tile=
                echo "== round $r PLUMB_CUDA_GEMM=$g${tile:+ PLUMB_CUDA_WG_TILE=$tile}"
                (export PLUMB_CUDA_GEMM=$g; [ -n "$tile" ] && export PLUMB_CUDA_WG_TILE=$tile
                 PLUMB_CUDA_TIMING=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch ${WG_BATCH:-1,64} -p 128 -n 32 --reps 3 \
                    --no-quality -o "$OUT/wg-$g$tile-$r" 2>&1 | tee "$OUT/wg-$g$tile-$r.txt" | grep -E "^\| |rror|plumb-cuda: decode")
            done
        done
        echo "== kernels of 7B batch-64 steps, wg"
        PLUMB_CUDA_KPROF=1 timeout 120 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 32 --reps 1 --warmup 0 \
            --no-quality -o "$OUT/kp-wg" 2>&1 | grep -E "kernels of|k_gemm|k_splitk|k_att|^\| models|rror"
    } 2>&1 | tee "$OUT/wg-7b.txt"
    ;;
small)
    {
        for q in q4_0 q8_0; do
            m=$(model tinyllama-1.1b $q)
            for c in 8; do # (perplexity's chunks are 8 tokens at least, so the 2-4-token steps are timed, not checked here)
                echo "== $q WG_SMALL=${SMALL_CHECK:-2} -c $c: $( ([ "${SMALL_CHECK:-2}" = default ] || export PLUMB_CUDA_WG_SMALL=${SMALL_CHECK:-2}; compare_line "$m" $c))"
            done
        done
        echo "== TinyStories-656K Q8_0 WG_SMALL=${SMALL_CHECK:-2} -c 8: $( ([ "${SMALL_CHECK:-2}" = default ] || export PLUMB_CUDA_WG_SMALL=${SMALL_CHECK:-2}; compare_line "$S/models/TinyStories-656K-Q8_0.gguf" 8))"
        for shape in llama2-7b tinyllama-1.1b; do
            m=$(model $shape q4_0)
            for r in $(seq ${SMALL_ROUNDS:-1}); do
                for v in ${SMALL_SETTINGS:-0 2}; do
                    echo "== $shape round $r PLUMB_CUDA_WG_SMALL=$v"
                    ([ "$v" = default ] || export PLUMB_CUDA_WG_SMALL=$v
                     PLUMB_BENCH_STEPS=1 PLUMB_CUDA_TIMING=1 timeout 200 $P bench -m "$m" --backends cuda --ngl all -t $T --batch ${SMALL_BATCH:-2,4,8} -p 128 -n 32 \
                        --reps 3 --no-quality -o "$OUT/small-$shape-$v-$r" 2>&1 | grep -E "^\| |rror|plumb-cuda: decode|differing")
                done
            done
        done
    } 2>&1 | tee "$OUT/small.txt"
    ;;
gemmbench)
    for mq in llama2-7b:q4_0 tinyllama-1.1b:q8_0; do
        m=$(model ${mq%:*} ${mq#*:})
        PLUMB_CUDA_GEMMBENCH=${GEMMBENCH_N:-16,32,64} timeout 300 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 16 -n 2 --reps 1 --warmup 0 \
            --no-quality -o "$OUT/gemmbench" 2>&1 | grep -E "gemmbench|rror"
    done 2>&1 | tee "$OUT/gemmbench.txt"
    ;;
tune)
    {
        for ty in q4_0 q8_0; do
            m=$(model tinyllama-1.1b $ty)
            for c in 64 100; do
                for v in X=default PLUMB_CUDA_WG_ROWS=256 PLUMB_CUDA_WG_ROWS=tune PLUMB_CUDA_WG_ROWS=auto; do echo "-- TinyLlama $ty -c $c, $v: $(env $v compare_line "$m" $c)"; done
            done
        done
        m=$(model llama2-7b q4_0)
        $P perplexity -m "$m" -f "$TEXT" -c 64 --chunks 2 -t $T -ngl all --kl-base "$OUT/tune-7b-base.bin" >/dev/null 2>&1
        echo "-- 7B -c 64, MINB 3 against 4: $(PLUMB_CUDA_ATT_MINB=3 $P perplexity -m "$m" -f "$TEXT" -c 64 --chunks 2 -t $T -ngl all \
            --kl "$OUT/tune-7b-base.bin" 2>&1 | grep -E "KL|top|rror" | tr '\n' ' ')"
    } 2>&1 | tee "$OUT/tune-check.txt"
    m=$(model llama2-7b q4_0)
    for r in 1 2; do
        for v in X=default "PLUMB_CUDA_WG_ROWS=256" "PLUMB_CUDA_WG_ROWS=tune" "PLUMB_CUDA_WG_ROWS=auto"; do
            echo "== 7B $v round $r"
            env $v $P bench -m "$m" --backends cuda --ngl all -t $T --batch 8,64 -p 128 -n 32 --reps 3 --no-quality \
                -o "$OUT/tune-$r-$(echo $v | tr -c 'a-z0-9' '_')" 2>&1 | grep -E "^\| |rror|tuned"
        done
    done 2>&1 | tee "$OUT/tune-speed.txt"
    for v in X=default "PLUMB_CUDA_WG_ROWS=256"; do
        echo "== kernels of 7B batch-64 steps, $v"
        env $v PLUMB_CUDA_KPROF=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 8 --reps 1 --warmup 0 --no-quality 2>&1 |
            grep -E "plumb-cuda:|rror"
    done 2>&1 | tee "$OUT/tune-kprof.txt"
    ;;
ropeatt)
    SETTINGS="X=default PLUMB_CUDA_ROPE=pairs PLUMB_CUDA_ATT_PREFETCH=1 PLUMB_CUDA_ROPE=attention+pairs"
    QUICK=${ROPEATT_QUICK:-0} # 1: ids of the real models and TinyLlama, its Q4_0 KL at 64, one speed round, no kernel times
    IDS_MODELS="$S/models/stories260K.gguf $S/models/TinyStories-656K-Q8_0.gguf $(model tinyllama-1.1b q4_0)"
    [ "$QUICK" = 1 ] || IDS_MODELS="$IDS_MODELS $(model llama2-7b q4_0)"
    {
        for m in $IDS_MODELS; do ids_against_default "$m" $SETTINGS; done
        for ty in q4_0 q8_0; do
            [ "$QUICK" = 1 ] && [ $ty = q8_0 ] && continue
            m=$(model tinyllama-1.1b $ty)
            for c in 8 64; do
                [ "$QUICK" = 1 ] && [ $c = 8 ] && continue
                for v in $SETTINGS; do echo "-- TinyLlama $ty -c $c, $v: $(env $v compare_line "$m" $c)"; done
            done
        done
        [ "$QUICK" = 1 ] && exit 0
        m=$(model llama2-7b q4_0)
        $P perplexity -m "$m" -f "$TEXT" -c 64 --chunks 2 -t $T -ngl all --kl-base "$OUT/ropeatt-7b-base.bin" >/dev/null 2>&1
        for v in $SETTINGS; do
            echo "-- 7B -c 64, $v against the default on the GPU: $(env $v $P perplexity -m "$m" -f "$TEXT" -c 64 --chunks 2 -t $T -ngl all \
                --kl "$OUT/ropeatt-7b-base.bin" 2>&1 | grep -E "KL|top|max|rror" | tr '\n' ' ')"
        done
    } 2>&1 | tee "$OUT/ropeatt-check.txt"
    m=$(model llama2-7b q4_0)
    ROUNDS="1 2"
    [ "$QUICK" = 1 ] && ROUNDS=1
    for r in $ROUNDS; do
        for v in $SETTINGS; do
            b=1,8,64
            [ "$QUICK" = 1 ] && b=1,64
            [ "$v" = PLUMB_CUDA_ATT_PREFETCH=1 ] && b=64
            [ "$v" = PLUMB_CUDA_ROPE=attention+pairs ] && b=1
            echo "== 7B $v round $r"
            env $v $P bench -m "$m" --backends cuda --ngl all -t $T --batch $b -p 128 -n 32 --reps 3 --no-quality \
                -o "$OUT/ropeatt-$r-$(echo $v | tr -c 'a-zA-Z0-9' '_')" 2>&1 | grep -E "^\| |rror"
        done
    done 2>&1 | tee "$OUT/ropeatt-speed.txt"
    [ "$QUICK" = 1 ] && continue
    for v in X=default PLUMB_CUDA_ROPE=pairs PLUMB_CUDA_ATT_PREFETCH=1; do
        echo "== kernels of 7B batch-64 steps, $v"
        env $v PLUMB_CUDA_KPROF=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 64 -p 128 -n 8 --reps 1 --warmup 0 --no-quality 2>&1 |
            grep -E "plumb-cuda:|rror"
    done 2>&1 | tee "$OUT/ropeatt-kprof.txt"
    for v in X=default PLUMB_CUDA_ROPE=attention+pairs; do
        echo "== kernels of 7B batch-1 steps, $v"
        env $v PLUMB_CUDA_KPROF=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 16 --reps 1 --warmup 0 --no-quality 2>&1 |
            grep -E "plumb-cuda:|rror"
    done 2>&1 | tee -a "$OUT/ropeatt-kprof.txt"
    for sk in products others; do
        echo "== 7B batch 1, PLUMB_CUDA_SKIP=$sk"
        PLUMB_CUDA_SKIP=$sk $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1 -p 128 -n 32 --reps 3 --no-quality 2>&1 | grep -E "^\| |rror"
    done 2>&1 | tee "$OUT/ropeatt-skip.txt"
    ;;
ab7b)
    SETTINGS=${AB_SETTINGS:-"X=default PLUMB_CUDA_PDL=decode+PLUMB_CUDA_ROPE=values PLUMB_CUDA_ATT_PREFETCH=1 PLUMB_CUDA_NORM=cluster-all PLUMB_CUDA_KV=heads"}
    {
        for m in "$S/models/stories260K.gguf" "$S/models/TinyStories-656K-Q8_0.gguf" "$(model tinyllama-1.1b q4_0)"; do ids_against_default "$m" $SETTINGS; done
        m=$(model tinyllama-1.1b q4_0)
        for c in ${AB_CHUNKS:-64}; do
            for v in $SETTINGS; do echo "-- TinyLlama q4_0 -c $c, $v: $(export ${v//+PLUMB_/ PLUMB_}; compare_line "$m" $c)"; done
        done
    } 2>&1 | tee "$OUT/ab7b-check.txt"
    m=$(model "${AB_SHAPE:-llama2-7b}" q4_0)
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        for v in $SETTINGS; do
            echo "== ${AB_SHAPE:-llama2-7b} $v round $r"
            env ${v//+PLUMB_/ PLUMB_} $P bench -m "$m" --backends cuda --ngl all -t $T --batch "${AB_BATCH:-1,64}" -p 128 -n 32 --reps 3 --no-quality \
                -o "$OUT/ab7b-$r-$(echo $v | tr -c 'a-zA-Z0-9' '_')" 2>&1 | grep -E "^\| |rror"
        done
    done 2>&1 | tee "$OUT/ab7b-speed.txt"
    ;;
same)
    {
        for sh in ${SAME_SHAPES:-llama2-7b tinyllama-1.1b tinyllama-1.1b+PLUMB_CUDA_GEMM_SPLITS=1}; do
            m=$(model "${sh%%+*}" q4_0)
            both=$([ "$sh" = "${sh#*+}" ] || echo "${sh#*+}")
            for c in ${SAME_CHUNKS:-32 64 100}; do
                base="$OUT/same-base.bin"
                rm -f "$base"
                env $both $P perplexity -m "$m" -f "$TEXT" -c $c --chunks 2 -t $T -ngl all --kl-base "$base" >/dev/null 2>&1 || echo "-- $sh -c $c: base run failed"
                for v in ${SAME_SETTINGS:-PLUMB_CUDA_SWIGLU=kernel PLUMB_CUDA_PDL=products}; do
                    echo "-- $sh -c $c, $v: $(env $both ${v//+PLUMB_/ PLUMB_} $P perplexity -m "$m" -f "$TEXT" -c $c --chunks 2 -t $T -ngl all --kl "$base" 2>&1 |
                        grep -E "KL|top|rror" | tr '\n' ' ')"
                done
            done
        done
    } 2>&1 | tee "$OUT/same.txt"
    ;;
rows)
    for ty in q4_0 q8_0; do
        m=$(model tinyllama-1.1b $ty)
        echo "== synthetic TinyLlama $ty, PLUMB_CUDA_WG_ROWS=auto against the CPU"
        for c in 64 100; do echo "-- -c $c: $(PLUMB_CUDA_WG_ROWS=auto compare_line "$m" $c)"; done
    done 2>&1 | tee "$OUT/rows-check.txt"
    for r in 1 2; do
        for sh in llama2-7b tinyllama-1.1b; do
            m=$(model $sh q4_0)
            for v in 256 auto; do
                echo "== $sh PLUMB_CUDA_WG_ROWS=$v round $r"
                PLUMB_CUDA_WG_ROWS=$v $P bench -m "$m" --backends cuda --ngl all -t $T --batch 8,64 -p 128 -n 32 --reps 3 --no-quality \
                    -o "$OUT/rows-$sh-$v-$r" 2>&1 | grep -E "^\| |rror"
            done
        done
    done 2>&1 | tee "$OUT/rows-speed.txt"
    ;;
q4k)
    m=$(model tinyllama-1.1b q4_k)
    {
        echo "== synthetic TinyLlama Q4_K: greedy ids, CPU vs GPU"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -t $T 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-cpu.txt"
        $P run -m "$m" -p "Once upon a time" -n 24 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids" > "$OUT/ids-gpu.txt"
        cmp -s "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt" && echo "greedy ids identical" || { echo "greedy ids DIFFER"; cat "$OUT/ids-cpu.txt" "$OUT/ids-gpu.txt"; }
        for c in 8 64; do echo "-- -c $c"; compare "$m" $c 2; done
    } 2>&1 | tee "$OUT/q4k-check.txt"
    for shape in tinyllama-1.1b llama2-7b; do
        m=$(model $shape q4_k)
        PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
            -o "$OUT/q4k-$shape" 2>&1 | tee "$OUT/q4k-$shape.txt" | grep -E "^\| |GPU path|rror|plumb-cuda: batch"
    done
    $P bench -m "$(model tinyllama-1.1b q4_k)" -t $T --batch 1 -p 128 -n 32 --reps 3 --no-quality -o "$OUT/q4k-tinyllama-cpu" 2>&1 | grep -E "^\| |rror"
    ;;
cpu)
    # the same binary on the device's CPU, and with part of the model on the GPU
    m=$(model tinyllama-1.1b q4_0)
    $P bench -m "$m" --backends cpu,cuda --ngl 11 -t $T --batch 1,8 -p 128 -n 32 --reps 2 --no-quality \
        -o "$OUT/tinyllama-cpu-partial" 2>&1 | tee "$OUT/tinyllama-cpu-partial.txt" | grep -E "^\| |GPU path|rror"
    m=$(model llama2-7b q4_0)
    $P bench -m "$m" --backends cpu,cuda --ngl 16 -t $T --batch 1 -p 16 -n 16 --reps 2 --no-quality \
        -o "$OUT/llama2-7b-cpu-partial" 2>&1 | tee "$OUT/llama2-7b-cpu-partial.txt" | grep -E "^\| |GPU path|rror"
    ;;
chain)
    {
        for m in "$S/models/stories260K.gguf" "$S/models/TinyStories-656K-Q8_0.gguf" $(model tinyllama-1.1b q4_0) $(model tinyllama-1.1b q4_k) \
            $(model tinyllama-1.1b q8_0) $(model tinyllama-1.1b f16); do
            echo "== $(basename "$m"): greedy ids, -ngl all step by step vs chained"
            PLUMB_CUDA_CHAIN=0 $P run -m "$m" -p "Once upon a time" -n 48 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep "generated ids" > "$OUT/ids-step.txt"
            $P run -m "$m" -p "Once upon a time" -n 48 --temp 0 --show-ids -ngl all 2>"$OUT/chain-run.txt" >/dev/null
            grep "generated ids" "$OUT/chain-run.txt" > "$OUT/ids-chain.txt"
            grep -E "^generation|rror" "$OUT/chain-run.txt"
            [ -s "$OUT/ids-step.txt" ] && cmp -s "$OUT/ids-step.txt" "$OUT/ids-chain.txt" && echo "greedy ids identical" ||
                { echo "greedy ids DIFFER"; cat "$OUT/ids-step.txt" "$OUT/ids-chain.txt"; }
        done
        for shape in ${CHAIN_SHAPES:-llama2-7b}; do
            m=$(model "$shape" q4_0)
            for r in $(seq "${CHAIN_ROUNDS:-2}"); do
                for ch in 0 1; do
                    echo "== $shape round $r, PLUMB_CUDA_CHAIN=$ch"
                    PLUMB_CUDA_CHAIN=$ch PLUMB_CUDA_TIMING=1 $P bench -m "$m" --backends cuda --ngl all -t $T --batch "${CHAIN_BATCH:-1,8,64}" -p 128 -n 32 \
                        --reps 3 --no-quality -o "$OUT/chain-$shape-$ch-r$r" 2>&1 | grep -E "^\| models|rror|plumb-cuda: (decode steps|greedy)"
                done
            done
        done
    } 2>&1 | tee "$OUT/chain.txt"
    ;;
prof)
    m=$(model llama2-7b q4_0)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu"; continue; }
    # batch 1: 5 prompt tokens, then decode steps; skip the first steps' kernels
    PLUMB_CUDA_GRAPHS=0 timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-skip 1400 --launch-count 340 --csv \
        $P run -m "$m" -p "Once upon a time" -n 8 --temp 0 -ngl all > "$OUT/ncu-b1.csv" 2>"$OUT/ncu-b1.err"
    python3 bench/ncu_summary.py "$OUT/ncu-b1.csv" | tee "$OUT/ncu-b1.txt"
    PLUMB_CUDA_GRAPHS=0 timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-skip 59500 --launch-count 460 --csv \
        $P bench -m "$m" --backends cuda --ngl all --batch 64 -p 128 -n 8 --reps 1 --warmup 0 --no-quality -o "$OUT/prof64" > "$OUT/ncu-b64.csv" 2>"$OUT/ncu-b64.err"
    python3 bench/ncu_summary.py "$OUT/ncu-b64.csv" | tee "$OUT/ncu-b64.txt"
    ;;
esac
done
rm -f "$OUT"/base-*.bin
# PARTS=prof7b: ncu's full set for the kernels of one 7B Q4_0 batch-PROF_BATCH (64) decode step at
# context ~PROF_PROMPT (128) (PLUMB_CUDA_PROFILE_STEP: step 3 inside the profiler's range, graphs off),
# those named by PROF_KERNELS (default the batch GEMM and attention), PROF_COUNT (10) launches:
# details (speed of light, memory, stall reasons) in $OUT/prof7b.txt, the report in $OUT/prof7b.ncu-rep, the most
# sampled instructions of launches PROF_SASS in $OUT/prof7b-sass-top-*.txt (bench/ncu_sass_top.py)
if [[ " ${PARTS:-} " == *" prof7b "* ]]; then
    m=$(model llama2-7b q4_0)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    PLUMB_CUDA_PROFILE_STEP=3 PLUMB_BENCH_STEPS=1 PLUMB_CUDA_GRAPHS=0 timeout 400 "$NCU" --clock-control none --profile-from-start off \
        --set full -k "regex:${PROF_KERNELS:-k_gemm_wg|k_attention}" --launch-count "${PROF_COUNT:-10}" -f -o "$OUT/prof7b" \
        $P bench -m "$m" --backends cuda --ngl all --batch "${PROF_BATCH:-64}" -p "${PROF_PROMPT:-128}" -n 6 --reps 1 --warmup 0 --no-quality \
        -o "$OUT/prof7b-bench" > "$OUT/prof7b-run.txt" 2>&1
    tail -3 "$OUT/prof7b-run.txt"
    "$NCU" -i "$OUT/prof7b.ncu-rep" --page details > "$OUT/prof7b.txt" 2>&1
    # where the warps of profiled launches PROF_SASS (0 2: the step's first and third, q/k/v and gate/up with the
    # default kernels) waited, instruction by instruction
    for i in ${PROF_SASS:-0 2}; do
        "$NCU" -i "$OUT/prof7b.ncu-rep" --page source --print-source sass --csv --launch-skip "$i" --launch-count 1 > "$OUT/prof7b-sass-$i.csv" 2>&1 &&
            python3 bench/ncu_sass_top.py "$OUT/prof7b-sass-$i.csv" 45 > "$OUT/prof7b-sass-top-$i.txt" 2>&1
        head -50 "$OUT/prof7b-sass-top-$i.txt"
    done
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Ipc" "$OUT/prof7b.txt" | head -120
fi
# PARTS=gemmprof: ncu's speed-of-light, occupancy and stall sections for one
# batch-64 GEMM launch (TinyLlama shape; GEMMPROF_KERNEL=k_gemm_q for the F16 one)
if [[ " ${PARTS:-} " == *" gemmprof "* ]]; then
    m=$(model tinyllama-1.1b q4_0)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    PLUMB_CUDA_GRAPHS=0 timeout 200 "$NCU" --clock-control none -k regex:${GEMMPROF_KERNEL:-k_gemm_i8} --launch-skip 300 --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis \
        $P bench -m "$m" --backends cuda --ngl all --batch 64 -p 16 -n 8 --reps 1 --warmup 0 --no-quality -o "$OUT/gp" > "$OUT/gemmprof.txt" 2>&1
    grep -vE "^\s*$|----|^==PROF==" "$OUT/gemmprof.txt" | grep -vE "^\s+(Section|Metric Name)" | head -150
fi
