#!/usr/bin/env bash
# gdn_v2_bwd_check.sh: the chunked gated delta rule's v2 backward kernels (src/ops/gated_delta_rule/gdn_bwd_v2.cuh,
# selected by HLM_GDN_KERNELS=v2) on the GPU machine: the chunked tests with v1 and with v2, the gdn bench with both,
# and one ncu launch of each v2 backward kernel (SpeedOfLight, Occupancy, LaunchStats, WarpStateStats) at the bench's
# first shape (B8×T1024, H32, D128), plus the reverse pass (dstate, v1 and v2) at B1×T16384. HLM_GDN_KERNELS also
# switches the forward's v2 kernels (gdnfwd's).
#
# usage: bash tools/device/gdn_v2_bwd_check.sh      (binaries under $BIN: test_cuda_ops, bench_cuda_kernels)
# Environment: BIN (default /tmp/hlm/bin), OUT (default /tmp/gdn_v2_bwd_check). ~3 min (+ ~1 min when v2 fails: the
# backward test is then rerun with one v2 backward kernel at a time, HLM_GDN_BWD_V2=<kernel>, to name the culprit).
# Expect: both test runs "[  PASSED  ]" for GatedDeltaRuleChunkedCuda.* (ForwardBf16TensorCores,
# BackwardBf16TensorCores, KeptForwardScratch; the [check] lines print each margin); bench lines
# "gdn_fwd_bwd ... chunked-tc X ms" for v1 and v2 (session 23 call C, at e9925b9: v1 5.03 / 5.69 / 12.75 ms, v2 3.25 /
# 3.73 / 9.57 ms at B8×T1024 / B2×T4096 / B1×T16384; FLA 3.76 / 3.50 / 4.80); the ncu summary per kernel (v1 at
# B8×T1024, call A: du_local 272 µs, dstate 631 µs, dqk 1.09 ms, wy 722 µs). Since the bf16 dU (BackwardScratch::dUh):
# the backward test and bench also under HLM_GDN_BWD_DU=f32 (v2 with the fp32 dU, as at call C): the plain v2 bench
# should be no slower (dstate writes, dqk and wy read half of dU's bytes; ~+30 s).
set -u
BIN=${BIN:-/tmp/hlm/bin}
OUT=${OUT:-/tmp/gdn_v2_bwd_check}
mkdir -p "$OUT"
v2_rc=0
for kv in v1 v2; do
  echo "== tests HLM_GDN_KERNELS=$kv"
  HLM_GDN_KERNELS=$kv timeout 300 "$BIN/test_cuda_ops" --gtest_filter='*Chunked*' > "$OUT/tests_$kv.log" 2>&1
  rc=$?
  echo "rc $rc"
  [ "$kv" = v2 ] && v2_rc=$rc
  grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|FAIL' "$OUT/tests_$kv.log" | head -30
done
# v2 failed: each v2 backward kernel alone (HLM_GDN_BWD_V2 names the v2 ones; the rest run v1), backward test only.
# HLM_GDN_KERNELS=v2 also selects gdnfwd's v2 forward kernels: all four failing points there (or at their scratch).
if [ "$v2_rc" != 0 ]; then
  for k in du_local dstate dqk wy; do
    echo "== bisect: HLM_GDN_KERNELS=v2 HLM_GDN_BWD_V2=$k"
    HLM_GDN_KERNELS=v2 HLM_GDN_BWD_V2=$k timeout 120 "$BIN/test_cuda_ops" \
      --gtest_filter='GatedDeltaRuleChunkedCuda.Backward*' > "$OUT/tests_v2_$k.log" 2>&1
    echo "rc $?"
    grep -E '^\[ *(OK|FAILED) *\]' "$OUT/tests_v2_$k.log" | head -4
  done
fi
for kv in v1 v2; do
  echo "== bench gdn HLM_GDN_KERNELS=$kv"
  HLM_GDN_KERNELS=$kv timeout 200 "$BIN/bench_cuda_kernels" gdn > "$OUT/bench_$kv.log" 2>&1
  echo "rc $?"
  grep chunked "$OUT/bench_$kv.log"
done
# v2 with the full dU kept fp32 (HLM_GDN_BWD_DU=f32): the A/B of holding it as bf16 (same output bits). Also the
# backward test under it, so both dU paths of the v2 kernels pass on the GPU.
echo "== tests + bench gdn HLM_GDN_KERNELS=v2 HLM_GDN_BWD_DU=f32"
HLM_GDN_KERNELS=v2 HLM_GDN_BWD_DU=f32 timeout 120 "$BIN/test_cuda_ops" \
  --gtest_filter='GatedDeltaRuleChunkedCuda.Backward*' > "$OUT/tests_v2_du_f32.log" 2>&1
echo "rc $?"
grep -E '^\[ *(OK|FAILED) *\]' "$OUT/tests_v2_du_f32.log" | head -4
HLM_GDN_KERNELS=v2 HLM_GDN_BWD_DU=f32 timeout 200 "$BIN/bench_cuda_kernels" gdn > "$OUT/bench_v2_du_f32.log" 2>&1
echo "rc $?"
grep chunked "$OUT/bench_v2_du_f32.log"
# One launch of each v2 backward kernel that exists (the first backward of the bench: B8×T1024). Kernels that were
# not launched are reported by ncu as not profiled.
if command -v ncu > /dev/null 2>&1; then
  kernels='v2::(du_local|dstate|dqk|wy)_kernel'
  echo "== ncu HLM_GDN_KERNELS=v2 ($kernels)"
  HLM_GDN_KERNELS=v2 timeout 240 ncu --kernel-name-base demangled --kernel-name "regex:$kernels" --launch-count 4 \
    --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    "$BIN/bench_cuda_kernels" gdn > "$OUT/ncu_v2.log" 2>&1
  echo "rc $?"
  grep -E 'v2::|_kernel<|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Dynamic Shared Memory Per|Block Limit|Warp Cycles Per Issued|No kernels' \
    "$OUT/ncu_v2.log" | head -80
  # The reverse pass at B1×T16384 (N·Hv·4 = 128 blocks: two chunk buffers, one block per SM; 256 chunks each), v1 and
  # v2: the bench runs each shape's chunked fwd+bwd 12 times (2 warm-up + 10), so skip the first two shapes' 24.
  for kv in v1 v2; do
    echo "== ncu HLM_GDN_KERNELS=$kv dstate at B1xT16384"
    HLM_GDN_KERNELS=$kv timeout 150 ncu --kernel-name-base demangled --kernel-name 'regex:dstate_kernel<' \
      --launch-skip 24 --launch-count 1 --clock-control none --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats "$BIN/bench_cuda_kernels" gdn > "$OUT/ncu_dstate_b1_$kv.log" 2>&1
    echo "rc $?"
    grep -E 'dstate_kernel<|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Dynamic Shared Memory Per|Warp Cycles Per Issued|No kernels' \
      "$OUT/ncu_dstate_b1_$kv.log" | head -12
  done
else
  echo "== ncu: not on this machine"
fi
