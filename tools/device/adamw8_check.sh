#!/usr/bin/env bash
# adamw8_check.sh: the 8-bit AdamW kernel (src/ops/adamw/adamw_lowmem.cu, issue #28) on the GPU machine: its bit-for-bit
# tests, its time on the lean bench (bench_cuda_kernels adamw8: 2^29 elements, Q8 moments, bf16 master with
# stochastic rounding, bf16 grads) on the vector path and on the scalar path (HLM_ADAMW8_VEC=0) and with the binary
# search (HLM_ADAMW8_SEARCH=binary), and, where the tools exist, the executed instructions per element (ncu) and
# the static SASS size of the lean instantiation (cuobjdump).
#
# usage: bash tools/device/adamw8_check.sh      (binaries under $BIN: test_cuda_ops, bench_cuda_kernels)
# Environment: BIN (default /tmp/hlm/bin), OUT (default /tmp/adamw8_check).
# Expect: the tests pass (AdamWLowmemCuda.* incl. VectorAndScalarPathsAndSpecialValuesMatchTheReference, and
# AdamWLeanCuda.*); "adamw8 lean ... ms" lines, the default below the VEC=0 one (before the vector path: 6.3 ms).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/adamw8_check}
mkdir -p "$OUT"
echo "== tests"
"$BIN/test_cuda_ops" --gtest_filter='AdamWLowmemCuda.*:AdamWLeanCuda.*' > "$OUT/tests.log" 2>&1
echo "rc $?"
grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|differs' "$OUT/tests.log" | head -40
# "default" sets nothing (HLM_ADAMW8_DEFAULT is read by no one).
env_of() { [ "$1" = default ] && echo HLM_ADAMW8_DEFAULT=1 || echo "$1"; }
for setting in default HLM_ADAMW8_VEC=0 HLM_ADAMW8_SEARCH=binary; do
  echo "== bench $setting"
  env "$(env_of "$setting")" "$BIN/bench_cuda_kernels" adamw8 2>&1 | grep adamw8
done
# Executed warp instructions of the kernel's launches (the bench's 12: 2 warm-up + 10 timed; one is profiled), per
# element: inst_executed (warp instructions) * 32 / 2^29.
if command -v ncu > /dev/null 2>&1; then
  for setting in default HLM_ADAMW8_VEC=0; do
    echo "== ncu $setting"
    env "$(env_of "$setting")" ncu --kernel-name regex:adamw_lowmem_kernel --launch-count 1 \
      --metrics smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      "$BIN/bench_cuda_kernels" adamw8 > "$OUT/ncu_${setting//=/_}.log" 2>&1
    grep -E 'inst_executed|throughput|duration|registers' "$OUT/ncu_${setting//=/_}.log"
    awk '/smsp__inst_executed.sum/ {v=$NF; gsub(",", "", v); printf "instructions per element: %.1f\n", v * 32 / 2^29}' \
      "$OUT/ncu_${setting//=/_}.log"
  done
else
  echo "== ncu: not on this machine"
fi
# Static SASS instructions of the lean instantiation <Q8, Sr, GradBf16> = <true, true, true> (both paths inside).
if command -v cuobjdump > /dev/null 2>&1; then
  cuobjdump -sass "$BIN/bench_cuda_kernels" > "$OUT/bench.sass" 2>/dev/null
  awk '/Function :/ {on = ($0 ~ /adamw_lowmem_kernelILb1ELb1ELb1E/)} on && /^ +\/\*[0-9a-f]+\*\// {n++} END {print "static SASS instructions of adamw_lowmem_kernel<1,1,1>: " n}' \
    "$OUT/bench.sass"
else
  echo "== cuobjdump: not on this machine"
fi
