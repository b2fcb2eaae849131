# plumb — one Makefile, no other build system.
#   make              libplumb.a and the plumb binary
#   make test         build and run the Criterion test suite
#   make check-asan   the same suite under AddressSanitizer + UBSan
#   make fuzz         libFuzzer target for the GGUF reader (clang), short run
#   make neon-test    cross-build for aarch64 and run the kernel tests under qemu
#   make cuda         the CUDA plugin (when nvcc is found)

CC       ?= gcc
BUILD    ?= build
GIT      := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp -Iinclude -DPLUMB_GIT_COMMIT='"$(GIT)"'
LDLIBS   += -lm -ldl -lpthread
LDFLAGS  += -fopenmp

LIB_SRC  := $(wildcard core/*.c quant/*.c simd/*.c models/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
BIN      ?= plumb

.PHONY: all test check-asan fuzz neon-test clean
all: $(BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libplumb.a: $(LIB_OBJ)
	$(AR) rcs $@ $^

$(BIN): $(CLI_OBJ) $(BUILD)/libplumb.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/plumb-tests: $(TEST_OBJ) $(BUILD)/libplumb.a
	$(CC) $(LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

# The tests run the plumb binary too (CLI behaviour), so build both.
test: $(BIN) $(BUILD)/plumb-tests
	PLUMB_BIN=./$(BIN) $(BUILD)/plumb-tests $(TEST_ARGS)

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
check-asan:
	$(MAKE) BUILD=build-asan BIN=build-asan/plumb OPT=-O1 CFLAGS="-O1 -g $(SAN)" LDFLAGS="-fopenmp $(SAN)" test

FUZZ_SECONDS ?= 30
fuzz: $(BUILD)/fuzz-gguf
	mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz-gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 $(BUILD)/fuzz-corpus tests/fuzz/seeds

$(BUILD)/fuzz-gguf: tests/fuzz/fuzz_gguf.c core/gguf.c core/util.c quant/quant.c
	@mkdir -p $(dir $@)
	clang -g -O1 -Iinclude -fsanitize=fuzzer,address,undefined -o $@ $^ -lm

# NEON: cross-compile the kernel tests and run them under qemu-aarch64.
neon-test:
	$(MAKE) CC=aarch64-linux-gnu-gcc AR=aarch64-linux-gnu-ar BUILD=build-aarch64 BIN=build-aarch64/plumb \
	  build-aarch64/libplumb.a build-aarch64/kernel-tests
	qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/kernel-tests

$(BUILD)/kernel-tests: tests/kernel_check.c $(BUILD)/libplumb.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

clean:
	rm -rf build build-asan build-aarch64 plumb

-include $(DEPS)
