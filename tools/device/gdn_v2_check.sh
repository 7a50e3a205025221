#!/usr/bin/env bash
# gdn_v2_check.sh: the chunked gated delta rule's v2 FORWARD kernels (src/ops/gated_delta_rule/gdn_fwd_v2.cuh,
# selected by HLM_GDN_KERNELS=v2; the backward's v2 kernels switch with it) on the GPU machine: the chunked tests
# with v1 and with v2, the gdn bench with both, and ncu (SpeedOfLight, Occupancy, LaunchStats, WarpStateStats,
# --clock-control none) on the first launch of each v2 forward kernel at the bench's first shape (B8×T1024, H32,
# D128: state_v2 with 8 warps per block), plus the state pass at B1×T16384 (2 warps per block, 128 blocks).
#
# usage: bash tools/device/gdn_v2_check.sh      (binaries under $BIN: test_cuda_ops, bench_cuda_kernels)
# Environment: BIN (default /tmp/hlm/bin), OUT (default /tmp/gdn_v2_check), AB=1 (three more v2 benches: v1's prep,
# state_v2 with 1 and with 4 warps per block). ~2.5 min (+3 bench runs with AB=1).
# Expect: both test runs "[  PASSED  ]" for GatedDeltaRuleChunkedCuda.* (ForwardBf16TensorCores,
# BackwardBf16TensorCores, KeptForwardScratch: the [check] lines print each margin); bench lines
# "gdn_fwd ... chunked-tc X ms" and "gdn_fwd_bwd ... chunked-tc" for v1 and v2 at B8×T1024, B2×T4096, B1×T16384
# (session 6 v1: fwd 1.31 ms, fwd+bwd 5.04 ms at B8×T1024; FLA fwd 0.715 ms); the ncu summary per kernel (v1 state:
# 471 µs, 35% occupancy, 105 registers, 75 KB smem at B8×T1024).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/gdn_v2_check}
mkdir -p "$OUT"
for kv in v1 v2; do
  echo "== tests HLM_GDN_KERNELS=$kv"
  HLM_GDN_KERNELS=$kv timeout 200 "$BIN/test_cuda_ops" --gtest_filter='*Chunked*' > "$OUT/tests_$kv.log" 2>&1
  echo "rc $?"
  grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|FAIL|\[check\].*(margin|worst)' "$OUT/tests_$kv.log" | head -40
done
for kv in v1 v2; do
  echo "== bench gdn HLM_GDN_KERNELS=$kv"
  HLM_GDN_KERNELS=$kv timeout 150 "$BIN/bench_cuda_kernels" gdn > "$OUT/bench_$kv.log" 2>&1
  echo "rc $?"
  grep chunked "$OUT/bench_$kv.log"
done
# AB=1: the v2 bench again with v1's prep (HLM_GDN_PREP=v1) and with one-warp state blocks (HLM_GDN_STATE_WARPS=1,
# the rule of call C at B1xT16384), to split prep_v2's and the rows-per-block rule's shares.
if [ "${AB:-0}" = 1 ]; then
  for ab in HLM_GDN_PREP=v1 HLM_GDN_STATE_WARPS=1 HLM_GDN_STATE_WARPS=4; do
    echo "== bench gdn HLM_GDN_KERNELS=v2 $ab"
    env HLM_GDN_KERNELS=v2 "$ab" timeout 150 "$BIN/bench_cuda_kernels" gdn > "$OUT/bench_v2_$ab.log" 2>&1
    echo "rc $?"
    grep chunked "$OUT/bench_v2_$ab.log"
  done
fi
ncu_sections='--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats'
ncu_grep='fwd_v2::|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Dynamic Shared Memory Per|Block Limit|Grid Size|Block Size|Warp Cycles Per Issued|No kernels'
if command -v ncu > /dev/null 2>&1; then
  # The first forward of the bench (B8×T1024): one launch of each v2 forward kernel that exists (up to 3).
  echo "== ncu HLM_GDN_KERNELS=v2, first v2 forward launches (B8xT1024)"
  HLM_GDN_KERNELS=v2 timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:fwd_v2::' --launch-count 3 \
    --clock-control none $ncu_sections "$BIN/bench_cuda_kernels" gdn > "$OUT/ncu_v2_fwd.log" 2>&1
  echo "rc $?"
  grep -E "$ncu_grep" "$OUT/ncu_v2_fwd.log" | head -60
  echo "== ncu HLM_GDN_KERNELS=v2, state_v2 with 2 warps per block (B1xT16384)"
  HLM_GDN_KERNELS=v2 timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:state_v2_kernel<2>' \
    --launch-count 1 --clock-control none $ncu_sections "$BIN/bench_cuda_kernels" gdn > "$OUT/ncu_v2_state_w2.log" 2>&1
  echo "rc $?"
  grep -E "$ncu_grep" "$OUT/ncu_v2_state_w2.log" | head -25
else
  echo "== ncu: not on this machine"
fi
