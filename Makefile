# pagoda: the two commands for a fresh machine.
#   make run   installs what is missing, builds, and generates with the embedded default model
#   make test  installs what is missing, builds (optimized, then ASan+UBSan) and runs every test
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
# ON where the CUDA toolkit is installed (nvcc on PATH): the optimized build then compiles the
# CUDA backend too (its GPU tests, label `cuda`, run on a GPU machine through scripts/gpu-check)
CUDA ?= $(if $(shell command -v nvcc 2>/dev/null),ON,OFF)
# empty: the model compiled into pagoda (models/pagoda-tiny.gguf); else any --model value
MODEL ?=
PROMPT ?= Once upon a time

.PHONY: deps build run test test-release test-asan clean

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=$(CUDA)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/pagoda generate $(if $(MODEL),--model $(MODEL)) --prompt "$(PROMPT)" --max-tokens 64 --temperature 0

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE cuda

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGODA_SANITIZE=ON -DPAGODA_BUILD_BENCH=OFF

test-asan: deps $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -LE "slow|e2e"

test: test-release test-asan

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
