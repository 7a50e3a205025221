#!/usr/bin/env bash
# run_cuda_tests.sh: the one command that builds and runs the CUDA backend's comparison tests on the GPU machine.
#
# What it does (from the repository root, whatever the current directory):
#   1. records the machine (GPU, driver, nvcc, cmake, compiler, which optional packages exist) in $OUT/env.txt;
#   2. configures and builds tests/cuda/standalone: hlm_core, the CPU references, hlm_cuda (src/backend/cuda and
#      src/ops/*/*.cu, sm_90a) and tests/cuda. It needs only CMake >= 3.25, a C++20 host compiler and nvcc with
#      cuBLASLt; GoogleTest, OpenBLAS and OpenMP are optional (the image has no Debian -dev packages):
#        - no GoogleTest: the stand-in tests/cuda/gtest_shim is used (same test code, same output lines);
#        - no OpenBLAS (cblas.h + libopenblas): matmul's fp32 CPU side is naive loops instead of matmul_ref.cpp
#          (the fp64 reference is naive loops either way), and the test log says so in a "[note]" line;
#        - no OpenMP: the CPU references run single-threaded;
#   3. runs test_cuda_ops (every CUDA-vs-CPU case prints one "[check] ..." line with its worst error);
#   4. unless HLM_SANITIZE=0, runs it again under compute-sanitizer (memcheck on every test but the deliberate
#      out-of-memory one, racecheck on the kernels with shared memory);
#   5. writes $OUT/summary.txt and prints it last: the counts of tests run / passed / failed / skipped / unfinished
#      and the verdict of tools/device/gtest_counts.sh (FAIL when no test ran, any skipped -- a skip here always means
#      "CUDA unavailable" -- failed or did not finish).
#
# Usage (device tool, one call; about 3-6 minutes on the 16-core H200 machine, most of it the build):
#   bash tools/device/run_cuda_tests.sh
# Environment (all optional):
#   OUT            where logs go (the device tool sets it; default ./out/cuda_tests)
#   HLM_FILTER     GoogleTest filter for both runs (default '*'), e.g. 'Rmsnorm*:Matmul*'
#   HLM_SANITIZE   1 (default) or 0
#   HLM_RACECHECK  GoogleTest filter of the racecheck run (default: the kernels that share memory between threads
#                  of a block or stage copies through it: 'Rmsnorm*:L2norm*:GatedRmsnorm*:GatedDeltaRule*:LogSoftmax*:
#                  CausalConv1d*')
#   HLM_BUILD_DIR  build folder (default /tmp/hlm-cuda-tests)
#   HLM_CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default 90a, from cmake/cuda.cmake)
#   HLM_JOBS       build parallelism (default: nproc)
# Files in $OUT (6, within the device tool's 8-file limit): env.txt, configure.log, build.log, test.log,
# sanitizer.log, summary.txt.
# Prints: the environment, "BUILD OK" or the build log's tail, the test output, the sanitizer's ERROR SUMMARY lines,
# then the summary: counts of run / passed / failed / skipped / unfinished tests, the failed tests' names, the
# fallbacks used, and "RESULT: PASS" or "RESULT: FAIL".
# Exit status: 0 when tests ran, every one passed (none skipped: this script is for the GPU machine) and the sanitizer
# found nothing; 1 otherwise; 2 when configuring or building failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$ROOT/tools/device/gtest_counts.sh"
OUT="${OUT:-$ROOT/out/cuda_tests}"
BUILD="${HLM_BUILD_DIR:-/tmp/hlm-cuda-tests}"
FILTER="${HLM_FILTER:-*}"
SANITIZE="${HLM_SANITIZE:-1}"
RACECHECK="${HLM_RACECHECK:-Rmsnorm*:L2norm*:GatedRmsnorm*:GatedDeltaRule*:LogSoftmax*:CausalConv1d*}"
JOBS="${HLM_JOBS:-$(nproc 2>/dev/null || echo 8)}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

say() { echo "== $*"; }

# ---- 1. environment
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -a)"
  echo "cores: $JOBS"
  echo "--- nvidia-smi"
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1; else echo "nvidia-smi: not available"; fi
  echo "--- nvcc"
  NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  "$NVCC" --version 2>&1 | tail -2 || echo "nvcc: not found"
  echo "--- cmake: $(cmake --version 2>/dev/null | head -1 || echo 'not found')"
  echo "--- ninja: $(ninja --version 2>/dev/null || echo 'not found')"
  echo "--- c++: $(c++ --version 2>/dev/null | head -1 || echo 'not found')"
  echo "--- optional packages"
  for h in gtest/gtest.h cblas.h omp.h; do
    found="$(find /usr/include /usr/local/include /usr/lib/gcc -name "$(basename $h)" -path "*$h" 2>/dev/null | head -1)"
    echo "$h: ${found:-missing}"
  done
  echo "libopenblas: $(ls /usr/lib/x86_64-linux-gnu/libopenblas* /usr/lib64/libopenblas* 2>/dev/null | head -1 || true)"
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo missing)"
} >"$OUT/env.txt" 2>&1
say "environment ($OUT/env.txt)"
cat "$OUT/env.txt"

# ---- 2. configure and build
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
CMAKE_ARGS=(-S "$ROOT/tests/cuda/standalone" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ -x "${NVCC:-}" ] && CMAKE_ARGS+=(-DCMAKE_CUDA_COMPILER="$NVCC")
[ -n "${HLM_CUDA_ARCH:-}" ] && CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES="$HLM_CUDA_ARCH")
say "configure: cmake ${CMAKE_ARGS[*]}"
if ! cmake "${CMAKE_ARGS[@]}" >"$OUT/configure.log" 2>&1; then
  tail -40 "$OUT/configure.log"
  { echo "RESULT: FAIL (configure failed; see configure.log)"; } | tee -a "$SUMMARY"
  exit 2
fi
grep -E "hybridlm|CUDA compiler|GTest|OpenMP" "$OUT/configure.log"
say "build (-j $JOBS)"
T0=$(date +%s)
if ! cmake --build "$BUILD" -j "$JOBS" >"$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  tail -30 "$OUT/build.log"
  { echo "RESULT: FAIL (build failed; see build.log)"; } | tee -a "$SUMMARY"
  exit 2
fi
echo "BUILD OK ($(( $(date +%s) - T0 )) s)"
BIN="$BUILD/tests_cuda/test_cuda_ops"

# ---- 3. tests
say "tests: $BIN --gtest_filter=$FILTER"
T0=$(date +%s)
"$BIN" --gtest_filter="$FILTER" 2>&1 | tee "$OUT/test.log"
TEST_RC=${PIPESTATUS[0]}
TEST_S=$(( $(date +%s) - T0 ))

# ---- 4. compute-sanitizer
SAN_RC=0
SAN_NOTE="not run"
SANITIZER="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
: >"$OUT/sanitizer.log"
if [ "$SANITIZE" != "1" ]; then
  SAN_NOTE="skipped (HLM_SANITIZE=$SANITIZE)"
elif grep -q "CUDA unavailable" "$OUT/test.log"; then
  SAN_NOTE="skipped (no usable GPU)"
elif [ ! -x "$SANITIZER" ]; then
  SAN_NOTE="skipped (compute-sanitizer not found)"
else
  # The out-of-memory test makes cudaMalloc fail on purpose, which memcheck would report as an API error.
  case "$FILTER" in *-*) SAN_FILTER="$FILTER:CudaAllocator.OutOfMemory*" ;; *) SAN_FILTER="$FILTER-CudaAllocator.OutOfMemory*" ;; esac
  say "compute-sanitizer memcheck ($SAN_FILTER) and racecheck ($RACECHECK)"
  {
    echo "### memcheck"
    timeout 420 "$SANITIZER" --tool memcheck --leak-check no --error-exitcode 9 "$BIN" --gtest_filter="$SAN_FILTER"
    echo "memcheck exit: $?"
    echo "### racecheck"
    timeout 240 "$SANITIZER" --tool racecheck --error-exitcode 9 "$BIN" --gtest_filter="$RACECHECK"
    echo "racecheck exit: $?"
  } >"$OUT/sanitizer.log" 2>&1
  grep -E "ERROR SUMMARY|exit:" "$OUT/sanitizer.log"
  if grep -E "^(memcheck|racecheck) exit: [1-9]" "$OUT/sanitizer.log" >/dev/null; then
    SAN_RC=1
    SAN_NOTE="FOUND PROBLEMS (see sanitizer.log)"
  else
    SAN_NOTE="clean"
  fi
fi

# ---- 5. summary
{
  echo "test_cuda_ops: exit $TEST_RC after ${TEST_S} s"
  TESTS_LINE="$(gtest_counts "$OUT/test.log" "$TEST_RC")"
  TESTS_OK=$?
  echo "tests: $TESTS_LINE"
  grep -E '^\[  FAILED  \] [^ ]+.* \([0-9]+ ms\)$' "$OUT/test.log" | sed 's/^/  /'
  echo "checks: $(grep -c '^\[check\]' "$OUT/test.log") lines, $(grep '^\[check\]' "$OUT/test.log" | grep -c ' FAIL') failing"
  grep '^\[check\].* FAIL' "$OUT/test.log" | head -20 | sed 's/^/  /'
  grep -E '^\[note\]|^\[info\]|CUDA unavailable' "$OUT/test.log" | sort -u | sed 's/^/  /'
  echo "fallbacks: $(grep -E 'GoogleTest stand-in|OpenBLAS matmul reference' "$OUT/configure.log" | sed 's/^-- //' | tr '\n' ';')"
  echo "sanitizer: $SAN_NOTE"
  if [ "$TESTS_OK" -eq 0 ] && [ "$SAN_RC" -eq 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
} >"$SUMMARY"
say "summary ($SUMMARY)"
cat "$SUMMARY"
grep -q "^RESULT: PASS" "$SUMMARY"
