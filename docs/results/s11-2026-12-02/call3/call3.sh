#!/usr/bin/env bash
# Session 11, device call 3 (final): the GEMV's second version (first loads before x's staging, 16-byte staging, w
# widened once per chunk; taken at one row) tested and measured against cuBLASLt; Table 8's 32K rows at the largest
# batch (issue #18 5a); the Granite-4.0-H HF generate golden.
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
mkdir -p /tmp/hlm && tar xf out/coord/c3.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib:${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
R=$OUT/r; mkdir -p $R
timeout 60 $B/test_cuda_ops --gtest_filter='MatmulCuda.Gemv*:MatmulCuda.ForwardMixed:RmsnormCuda.*' > $R/ops.log 2>&1; el "ops rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/ops.log | head -8
timeout 120 $B/test_cuda_models --gtest_filter='CudaModelForward*:CudaEngine*:CudaBf16*:CudaTrainGraphs*:CudaKeptActivations*:CudaQwen35*' \
  > $R/models.log 2>&1; el "models rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/models.log | head -8
# the HF generate golden of Granite-4.0-H (models are read from the golden folder)
timeout 60 python3 tools/goldens/make_generate_goldens.py --out tests/golden --only generate_granitemoehybrid > $R/golden_granite.log 2>&1
el "golden rc $?"; tail -2 $R/golden_granite.log; tar czf $OUT/golden.tgz tests/golden/generate_granitemoehybrid 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r
# decode: default (GEMV at 1 row), GEMV up to 4 rows, cuBLASLt only
timeout 80 $B/bench_generate --models qwen3_4b,olmo_hybrid_7b --contexts 1024 --batches 1,2,4 --decode-steps 32 \
  --cuda-graphs on --out $R/dec_default > $R/dec_default.log 2>&1; el "decode default rc $?"; grep -E "^\| (qwen|olmo)" $R/dec_default.log
HLM_GEMV=4 timeout 70 $B/bench_generate --models qwen3_4b,olmo_hybrid_7b --contexts 1024 --batches 2,4 --decode-steps 32 \
  --cuda-graphs on --out $R/dec_gemv4 > $R/dec_gemv4.log 2>&1; el "decode gemv4 rc $?"; grep -E "^\| (qwen|olmo)" $R/dec_gemv4.log
HLM_GEMV=off timeout 60 $B/bench_generate --models qwen3_4b,olmo_hybrid_7b --contexts 1024 --batches 1 --decode-steps 32 \
  --cuda-graphs on --out $R/dec_off > $R/dec_off.log 2>&1; el "decode off rc $?"; grep -E "^\| (qwen|olmo)" $R/dec_off.log
tar czf $OUT/r.tgz -C $OUT r
# Table 8 at 32K: the largest batch of each 7B shape, measured
left=$(( 560 - ($(date +%s) - T0) )); el "table8 with ${left} s"
timeout $(( left * 2 / 3 )) $B/bench_generate --models olmo_hybrid_7b --contexts 32768 --batches max --decode-steps 8 --prefill-chunk 8192 \
  --out $R/t8_hyb32k > $R/t8_hyb32k.log 2>&1; el "hybrid 32K rc $?"; grep -E "^\| olmo" $R/t8_hyb32k.log
tar czf $OUT/r.tgz -C $OUT r
left=$(( 575 - ($(date +%s) - T0) ))
timeout $left $B/bench_generate --models olmo3_7b --contexts 32768 --batches max --decode-steps 8 --prefill-chunk 8192 \
  --out $R/t8_full32k > $R/t8_full32k.log 2>&1; el "full 32K rc $?"; grep -E "^\| olmo" $R/t8_full32k.log
tar czf $OUT/r.tgz -C $OUT r
el end
