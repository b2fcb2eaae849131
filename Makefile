# plumb — one Makefile, no other build system.
#   make              libplumb.a and the plumb binary
#   make test         build and run the Criterion test suite
#   make check-asan   the same suite under AddressSanitizer + UBSan
#   make fuzz         libFuzzer target for the GGUF reader (clang), short run
#   make neon-test    cross-build for aarch64 and run the kernel tests under qemu
#   make node-test    the server driven by the official openai npm client
#   make check        all of the above: what CI runs
#   make demo         build, write a small synthetic model (once) and generate from it

CC       ?= gcc
BUILD    ?= build
# the commit a build reports (plumb --version, bench records); "-dirty" when
# tracked files differ from it. It lives in a generated header that is rewritten
# only when the text changes, so an incremental build never reports a stale one.
GIT_HASH := $(shell git rev-parse --short HEAD 2>/dev/null)
GIT      := $(if $(GIT_HASH),$(GIT_HASH)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty),unknown)
OPT      ?= -O2
CFLAGS   ?= -g
CFLAGS   += $(OPT)
SAN_FLAGS ?=
# project flags are kept apart from CFLAGS/LDFLAGS so a command-line CFLAGS adds to them
ALL_CFLAGS  = $(CFLAGS) $(SAN_FLAGS) -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp -Iinclude -I$(BUILD)
ALL_LDFLAGS = $(LDFLAGS) $(SAN_FLAGS) -fopenmp
LDLIBS   += -lmicrohttpd -lcurl -lpcre2-8 -ljansson -lcrypto -lhwloc -lm -ldl -lpthread

LIB_SRC  := $(filter-out $(LIB_EXCLUDE),$(wildcard core/*.c quant/*.c simd/*.c models/*.c))
CLI_SRC  := $(wildcard cli/*.c) bench/stats.c bench/sysinfo.c bench/harness.c bench/report.c $(wildcard server/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
BIN      ?= plumb

.PHONY: all test check version-header check-asan fuzz neon-test node-test demo bench-kernels bench-ab cuda clean
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_PLUGIN := libplumb-cuda.so
all: $(BIN) $(if $(NVCC),$(CUDA_PLUGIN))

# The CUDA plugin, dlopen()ed by plumb (never linked): the GPUs users have
# (Ampere sm_80/86, Ada sm_89, Hopper sm_90) plus PTX for newer ones, and
# sm_90a, Hopper's arch-specific code (the wgmma batch GEMM), which a Hopper
# GPU runs in place of sm_90's (the plugin checks which one it got).
CUDA_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
              -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
$(CUDA_PLUGIN): plugins/cuda/plumb_cuda.cu core/backend.h
	$(NVCC) -O2 -std=c++17 -Xcompiler -fPIC -shared $(CUDA_ARCHS) -o $@ $< -lcublas
cuda: $(CUDA_PLUGIN)

$(BUILD)/plumb_version.h: version-header
	@mkdir -p $(BUILD)
	@echo '#define PLUMB_GIT_COMMIT "$(GIT)"' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/core/model.o: $(BUILD)/plumb_version.h

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libplumb.a: $(LIB_OBJ)
	$(AR) rcs $@ $^

$(BIN): $(CLI_OBJ) $(BUILD)/libplumb.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/plumb-tests: $(TEST_OBJ) $(BUILD)/libplumb.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

# a stand-in for the CUDA plugin: partial offload's host side, tested without a GPU
$(BUILD)/libplumb-mock-backend.so: tests/mock_backend.c core/backend.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -shared -o $@ $<

# The tests run the plumb binary too (CLI behaviour), so build both.
test: $(BIN) $(BUILD)/plumb-tests $(BUILD)/libplumb-mock-backend.so
	PLUMB_BIN=./$(BIN) PLUMB_MOCK_BACKEND=$(BUILD)/libplumb-mock-backend.so $(BUILD)/plumb-tests $(TEST_ARGS)

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
check-asan:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp $(MAKE) BUILD=build-asan BIN=build-asan/plumb OPT=-O1 SAN_FLAGS="$(SAN)" test

FUZZ_SECONDS ?= 30
# seeds: small valid files of several types, written by plumb itself
fuzz: $(BUILD)/fuzz-gguf $(BIN)
	mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-seeds
	for t in f32 q8_0 q4_k; do ./$(BIN) mkmodel --shape custom --dim 256 --layers 1 --heads 2 --ffn 256 --vocab-size 260 \
	  --type $$t -o $(BUILD)/fuzz-seeds/seed-$$t.gguf 2>/dev/null || exit 1; done
	@echo "fuzzing the GGUF reader for $(FUZZ_SECONDS) s (log: $(BUILD)/fuzz.log)"
	@$(BUILD)/fuzz-gguf -max_total_time=$(FUZZ_SECONDS) -max_len=300000 -rss_limit_mb=2048 -print_final_stats=1 \
	  $(BUILD)/fuzz-corpus $(BUILD)/fuzz-seeds >$(BUILD)/fuzz.log 2>&1 || { tail -60 $(BUILD)/fuzz.log; exit 1; }
	@grep -E "^Done|number_of_executed_units|new_units_added" $(BUILD)/fuzz.log

$(BUILD)/fuzz-gguf: tests/fuzz/fuzz_gguf.c core/gguf.c core/util.c core/sha256.c quant/quant.c
	@mkdir -p $(dir $@)
	clang -g -O1 -Iinclude -fsanitize=fuzzer,address,undefined -o $@ $^ -lcrypto -lm

# NEON: cross-compile the kernel tests and run them under qemu-aarch64.
neon-test:
	$(MAKE) CC=aarch64-linux-gnu-gcc AR=aarch64-linux-gnu-ar BUILD=build-aarch64 BIN=build-aarch64/plumb \
	  LIB_EXCLUDE="core/sha256.c core/topology.c" LDLIBS="-lm -ldl -lpthread" build-aarch64/libplumb.a build-aarch64/kernel-tests
	qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/kernel-tests

$(BUILD)/kernel-tests: tests/kernel_check.c $(BUILD)/libplumb.a
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

check: test check-asan neon-test fuzz node-test

# the server driven by the official openai npm client (tests/server/)
node-test: $(BIN)
	cd tests/server && npm ci --silent --no-audit --no-fund && PLUMB_BIN=$(BIN) node --test openai.test.mjs

DEMO_MODEL := models-cache/mini-60m-q8_0.gguf
$(DEMO_MODEL): | $(BIN)
	@mkdir -p models-cache
	./$(BIN) mkmodel --shape mini-60m --type q8_0 -o $@

demo: $(BIN) $(DEMO_MODEL)
	./$(BIN) run -m $(DEMO_MODEL) -p "The quick brown fox" -n 64 --seed 1

$(BUILD)/bench-kernels: $(BUILD)/bench/bench_kernels.o $(BUILD)/bench/stats.o $(BUILD)/libplumb.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
bench-kernels: $(BUILD)/bench-kernels

$(BUILD)/bench-ab: $(BUILD)/bench/ab_switch.o $(BUILD)/libplumb.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
bench-ab: $(BUILD)/bench-ab

clean:
	rm -rf build build-asan build-aarch64 plumb $(CUDA_PLUGIN)

-include $(DEPS)
