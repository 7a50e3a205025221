#!/usr/bin/env bash
# Session 23, device call C: the first GPU run of the GDN v2 kernels (helpers gdnfwd / gdnbwd; binaries of e9925b9:
# state_v2, output_v2, du_local_v2, dstate_v2, dqk_v2, wy_v2; prep still v1). The chunked tests with v1 and v2; if
# v2 fails, the backward kernels one at a time (HLM_GDN_BWD_V2) to bisect; then the gdn bench with v1 and v2.
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && [ -x /tmp/hlm/bin/test_cuda_ops ] || cat /tmp/stage/p_a? | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
B=/tmp/hlm/bin
t() {  # name env...: the chunked tests under the given environment
  local name=$1; shift
  env "$@" timeout 120 $B/test_cuda_ops --gtest_filter='*Chunked*' > $OUT/tests_$name.log 2>&1; local rc=$?
  echo "tests $name ($*): rc $rc, $(grep -c '^\[       OK \]' $OUT/tests_$name.log) ok, $(grep -c '^\[  FAILED  \]' $OUT/tests_$name.log) failed lines"
  grep -E '^\[  FAILED  \]' $OUT/tests_$name.log | head -6
  return $rc
}
el "tests"
t v1 HLM_GDN_KERNELS=v1
if ! t v2 HLM_GDN_KERNELS=v2; then
  grep -B2 -A12 'Failure' $OUT/tests_v2.log | head -60
  t v2_fwd_only HLM_GDN_KERNELS=v2 HLM_GDN_BWD_V2=none
  for k in du_local dstate dqk wy; do t v2_bwd_$k HLM_GDN_KERNELS=v2 HLM_GDN_BWD_V2=$k; done
fi
el "bench"
for kv in v1 v2; do
  HLM_GDN_KERNELS=$kv timeout 100 $B/bench_cuda_kernels gdn > $OUT/bench_$kv.log 2>&1
  echo "bench $kv rc $?"; grep chunked $OUT/bench_$kv.log
done
el done
