#!/usr/bin/env bash
# Session 54, the merged call: the 8-bit AdamW tests of this session's kernel (stop if any fails), its lean bench, then
# the peer and the 4B step under the recipe (tools/device/device_call.sh PARTS=peer,recipe) with the same binaries.
# Carry: out/carry_m54 (bench_distill_step, test_cuda_ops, bench_cuda_kernels of c0a5869) and out/carry (FLA + peer).
set -u
T0=$(date +%s)
mkdir -p /tmp/keep /tmp/hlm && cp out/carry_m54/m54.txz.part.* /tmp/keep/ && cat /tmp/keep/m54.txz.part.* | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 90 /tmp/hlm/bin/test_cuda_ops --gtest_filter='AdamWLowmemCuda.*:AdamWLeanCuda.*' > "$OUT/tests_adamw.log" 2>&1
rc=$?
grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|differs' "$OUT/tests_adamw.log" | head -30
echo "tests rc $rc, $(( $(date +%s) - T0 )) s"
[ "$rc" = 0 ] || exit 4
timeout 60 /tmp/hlm/bin/bench_cuda_kernels adamw8 2>&1 | grep adamw8
echo "bench done, $(( $(date +%s) - T0 )) s"
PACK=m54 NEED=bench_distill_step PARTS=peer,recipe AUTOTUNES=${AUTOTUNES:-on,off} NORM_DXS=off DHS=bf16 \
  BUDGET=$(( ${TOTAL:-590} - ($(date +%s) - T0) )) bash tools/device/device_call.sh
