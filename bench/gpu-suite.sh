#!/usr/bin/env bash
# bench/gpu-suite.sh — plumb's GPU checks and benchmarks, run on a machine
# with an NVIDIA GPU from a tree holding a built ./plumb and ./libplumb-cuda.so.
#   PART=check  correctness: GPU vs CPU on the real models (top-1, KL, max
#               log-prob difference, greedy ids)
#   PART=tiny   TinyLlama-1.1B shape: CPU vs -ngl all vs partial; batch 1/8/64
#   PART=tiny-gpu  TinyLlama shape, -ngl all only, batch 1/8/64
#   PART=7b     Llama-2-7B shape: the same at batch 1/8/64 on the GPU
# Logs and records go to $OUT (default ./gpu-out). Runtime libraries the
# machine lacks can sit in .devlibs/; test models in $PLUMB_SHARED/models.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" models-cache
export LD_LIBRARY_PATH="$PWD/.devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for d in /usr/local/lib/python3*/dist-packages/nvidia/cublas/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
S=${PLUMB_SHARED:-../shared}
P=./plumb
T=${THREADS:-16}
case "${PART:-check}" in
check)
    nvidia-smi -L | tee "$OUT/gpu.txt"
    $P --version
    for m in stories260K.gguf TinyStories-656K-Q8_0.gguf; do
        echo "== $m: greedy ids, CPU vs GPU"
        $P run -m "$S/models/$m" -p "Once upon a time" -n 48 --temp 0 --show-ids --exact 2>&1 >/dev/null | grep "generated ids" | tee "$OUT/ids-cpu-$m.txt"
        $P run -m "$S/models/$m" -p "Once upon a time" -n 48 --temp 0 --show-ids -ngl all 2>&1 >/dev/null | grep -E "generated ids|GPU|plumb:" | tee "$OUT/ids-gpu-$m.txt"
        echo "== $m: teacher-forced KL / top-1 / max log-prob difference, GPU vs CPU exact"
        $P perplexity -m "$S/models/$m" -f "$S/reference/stories260K.greedy.once-upon-a-time.txt" -c 64 --exact --kl-base "$OUT/base-$m.bin" | tail -2
        $P perplexity -m "$S/models/$m" -f "$S/reference/stories260K.greedy.once-upon-a-time.txt" -c 64 -ngl all --kl "$OUT/base-$m.bin" | tail -4
        rm -f "$OUT/base-$m.bin"
    done 2>&1 | tee "$OUT/check.txt"
    ;;
tiny-gpu)
    [ -f models-cache/tl-q4_0.gguf ] || $P mkmodel --shape tinyllama-1.1b --type q4_0 -o models-cache/tl-q4_0.gguf
    $P bench -m models-cache/tl-q4_0.gguf --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
        -o "$OUT/tinyllama-gpu" 2>&1 | tee "$OUT/tinyllama-gpu.txt"
    ;;
tiny)
    for t in q4_0 q8_0; do
        [ -f models-cache/tl-$t.gguf ] || $P mkmodel --shape tinyllama-1.1b --type $t -o models-cache/tl-$t.gguf
    done
    $P bench -m models-cache/tl-q4_0.gguf -m models-cache/tl-q8_0.gguf --backends cpu,cuda --ngl 11,all -t $T --batch 1,8,64 \
        -p 128 -n 32 --reps 3 --no-quality -o "$OUT/tinyllama" 2>&1 | tee "$OUT/tinyllama.txt"
    ;;
7b)
    [ -f models-cache/l7-q4_0.gguf ] || $P mkmodel --shape llama2-7b --type q4_0 -o models-cache/l7-q4_0.gguf
    $P bench -m models-cache/l7-q4_0.gguf --backends cuda --ngl all -t $T --batch 1,8,64 -p 128 -n 32 --reps 3 --no-quality \
        -o "$OUT/llama2-7b-gpu" 2>&1 | tee "$OUT/llama2-7b-gpu.txt"
    $P bench -m models-cache/l7-q4_0.gguf --backends cpu,cuda --ngl 16 -t $T --batch 1 -p 16 -n 16 --reps 2 --no-quality \
        -o "$OUT/llama2-7b-cpu" 2>&1 | tee "$OUT/llama2-7b-cpu.txt"
    ;;
esac
