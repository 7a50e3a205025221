#!/usr/bin/env bash
# adamw8_check.sh: the 8-bit AdamW kernel (src/ops/adamw/adamw_lowmem.cu, issue #28) on the GPU machine: its bit-for-bit
# tests, its time on the lean bench (bench_cuda_kernels adamw8: 2^29 elements, Q8 moments, bf16 master with
# stochastic rounding, bf16 grads) on the vector path and on the scalar path (HLM_ADAMW8_VEC=0) and with the binary
# search (HLM_ADAMW8_SEARCH=binary), and, where the tools exist, the executed instructions per element (ncu) and
# the static SASS size of the lean instantiation (cuobjdump).
#
# usage: bash tools/device/adamw8_check.sh      (binaries under $BIN: test_cuda_ops, bench_cuda_kernels)
# Environment: BIN (default /tmp/hlm/bin), OUT (default /tmp/adamw8_check);
#   PACK=NAME: first unpack /tmp/keep/NAME.txz.part.* (copied there from out/carry*/ by this script) into /tmp/hlm;
#   OLD=1: bench_cuda_kernels_old (the kernel before a change, packed beside the new one) is timed and counted too,
#     the two binaries alternated twice in the same process tree (session 54);
#   MODELS=1: test_cuda_models' lean-plan tests (CudaMemoryPlans.*: the GPU lean step against the CPU step bit for
#     bit), when test_cuda_models is packed; DIST=1: test_dist_cuda (the ZeRO-1 lean step draws the one-rank step's
#     random bits), when test_dist_cuda and hybridlm are packed (MPI/NCCL set-up: tools/device/mpi_env.sh).
# Expect: the tests pass (AdamWLowmemCuda.* incl. VectorAndScalarPathsAndSpecialValuesMatchTheReference, and
# AdamWLeanCuda.*); "adamw8 lean ... ms" lines, the default below the VEC=0 one (before the vector path: 6.3 ms).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/adamw8_check}
mkdir -p "$OUT"
if [ -n "${PACK:-}" ]; then
  mkdir -p /tmp/keep /tmp/hlm
  for f in out/carry*/"$PACK".txz.part.*; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
  cat /tmp/keep/"$PACK".txz.part.* | tar xJ -C /tmp/hlm || exit 3
  export LD_LIBRARY_PATH=/tmp/hlm/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export HLM_GOLDEN_DIR=${HLM_GOLDEN_DIR:-$PWD/tests/golden}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
echo "== tests"
"$BIN/test_cuda_ops" --gtest_filter='AdamWLowmemCuda.*:AdamWLeanCuda.*' > "$OUT/tests.log" 2>&1
echo "rc $?"
grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|differs' "$OUT/tests.log" | head -40
if [ "${MODELS:-0}" = 1 ] && [ -x "$BIN/test_cuda_models" ]; then
  echo "== test_cuda_models CudaMemoryPlans.*"
  "$BIN/test_cuda_models" --gtest_filter='CudaMemoryPlans.*' > "$OUT/tests_models.log" 2>&1
  echo "rc $?"
  grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure' "$OUT/tests_models.log" | head -20
fi
if [ "${DIST:-0}" = 1 ] && [ -x "$BIN/test_dist_cuda" ]; then
  echo "== test_dist_cuda"
  . tools/device/mpi_env.sh
  echo "mpirun: ${MPIRUN:-none}"
  HLM_BINARY=$BIN/hybridlm timeout 150 "$BIN/test_dist_cuda" > "$OUT/tests_dist.log" 2>&1
  echo "rc $?"
  grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure' "$OUT/tests_dist.log" | head -20
fi
# "default" sets nothing (HLM_ADAMW8_DEFAULT is read by no one).
env_of() { [ "$1" = default ] && echo HLM_ADAMW8_DEFAULT=1 || echo "$1"; }
benches=(bench_cuda_kernels)
[ "${OLD:-0}" = 1 ] && [ -x "$BIN/bench_cuda_kernels_old" ] && benches=(bench_cuda_kernels_old bench_cuda_kernels)
for round in 1 2; do
  for b in "${benches[@]}"; do
    echo "== bench $b default (round $round)"
    "$BIN/$b" adamw8 2>&1 | grep adamw8
  done
done
for setting in HLM_ADAMW8_VEC=0 HLM_ADAMW8_SEARCH=binary; do
  echo "== bench bench_cuda_kernels $setting"
  env "$(env_of "$setting")" "$BIN/bench_cuda_kernels" adamw8 2>&1 | grep adamw8
done
# Executed warp instructions of the kernel's launches (the bench's 12: 2 warm-up + 10 timed; one is profiled), per
# element: inst_executed (warp instructions) * 32 / 2^29.
if command -v ncu > /dev/null 2>&1; then
  for b in "${benches[@]}"; do
    echo "== ncu $b"
    ncu --kernel-name regex:adamw_lowmem_kernel --launch-count 1 \
      --metrics smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed_pipe_xu.sum \
      "$BIN/$b" adamw8 > "$OUT/ncu_$b.log" 2>&1
    grep -E 'inst_executed|throughput|duration|registers' "$OUT/ncu_$b.log"
    awk '/smsp__inst_executed.sum/ {v=$NF; gsub(",", "", v); printf "instructions per element: %.1f\n", v * 32 / 2^29}' \
      "$OUT/ncu_$b.log"
  done
else
  echo "== ncu: not on this machine"
fi
# Static SASS instructions of the lean instantiation <Q8, Sr, GradBf16> = <true, true, true> (both paths inside).
if command -v cuobjdump > /dev/null 2>&1; then
  for b in "${benches[@]}"; do
    cuobjdump -sass "$BIN/$b" > "$OUT/$b.sass" 2>/dev/null
    awk '/Function :/ {on = ($0 ~ /adamw_lowmem_kernelILb1ELb1ELb1E/)} on && /^ +\/\*[0-9a-f]+\*\// {n++} END {print "static SASS instructions of adamw_lowmem_kernel<1,1,1>: " n}' \
      "$OUT/$b.sass"
    awk '/Function :/ {on = ($0 ~ /adamw_lowmem_kernelILb1ELb1ELb1E/)} on' "$OUT/$b.sass" > "$OUT/$b.lean.sass"
    rm -f "$OUT/$b.sass"
  done
else
  echo "== cuobjdump: not on this machine"
fi
