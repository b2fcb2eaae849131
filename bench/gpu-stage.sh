#!/usr/bin/env bash
# bench/gpu-stage.sh — prepares this tree for a run of bench/gpu-suite.sh on a
# GPU machine that has the CUDA driver but not plumb's build dependencies:
#   ./plumb                 built here (make)
#   ./libplumb-cuda.so      built here for sm_90a only (the H100/H200 image with the wgmma GEMM;
#                           ARCH=sm_80 etc. for another GPU), a fraction of the all-architecture build's size
#   .devlibs/               the shared libraries ./plumb links that are not glibc's
#   .devdata/models, .devdata/reference   the test models of ../shared it reads
# Those paths are ignored by git: name them in the device run's carry list
# (plumb, libplumb-cuda.so, .devlibs, .devdata) and run there with
# PLUMB_SHARED=.devdata. `make cuda` rebuilds the all-architecture plugin after.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ARCH:-sm_90a}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
make -j"$(nproc)" plumb
"$NVCC" -O2 -std=c++17 -Xcompiler -fPIC -shared -gencode arch=compute_${ARCH#sm_},code=$ARCH -o libplumb-cuda.so plugins/cuda/plumb_cuda.cu -lcublas
rm -rf .devlibs .devdata
mkdir -p .devlibs .devdata/models .devdata/reference
ldd ./plumb | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' | xargs -I{} cp -L {} .devlibs/
S=${PLUMB_SHARED:-../shared}
cp "$S"/models/*.gguf .devdata/models/
cp "$S"/reference/* .devdata/reference/
du -sh plumb libplumb-cuda.so .devlibs .devdata
