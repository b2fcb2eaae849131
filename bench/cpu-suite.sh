#!/usr/bin/env bash
# bench/cpu-suite.sh — the CPU measurements behind bench/results/: kernel
# throughput vs read bandwidth, decode/prefill per type on a synthetic
# TinyLlama-1.1B-shape model, and the server's throughput vs concurrency.
# Run on an otherwise idle machine; everything lands in bench/results/.
set -eu
cd "$(dirname "$0")/.."
make -s plumb bench-kernels
mkdir -p bench/results models-cache
DATE=$(date -u +%Y-%m-%d)
[ -f models-cache/tinyllama-1.1b.gguf ] || ./plumb mkmodel --shape tinyllama-1.1b --type f16 -o models-cache/tinyllama-1.1b.gguf
echo "== kernels"
build/bench-kernels 5632 2048 | tee "bench/results/kernels-$DATE.md"
echo "== precisions"
./plumb bench -m models-cache/tinyllama-1.1b.gguf --types f16,q8_0,q4_0,q4_1,q4_k,q5_k,q6_k -t 1,2 -p 128 -n 32 --reps 3 \
    -o "bench/results/tinyllama-types-$DATE"
echo "== server"
./plumb serve -m models-cache/tinyllama-1.1b.Q4_0.gguf --port 18181 --parallel 8 -c 8192 -n 128 2>/tmp/plumb-serve.log &
pid=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:18181/health >/dev/null && break; sleep 0.2; done
./plumb loadtest --url http://127.0.0.1:18181/v1 --model tinyllama-1.1b.Q4_0 --concurrency 1,2,4,8 --requests 16 \
    --prompt-tokens 128 --max-tokens 64 -o "bench/results/server-tinyllama-q4_0-$DATE" | tee "bench/results/server-tinyllama-q4_0-$DATE.md"
kill $pid; wait $pid || true
