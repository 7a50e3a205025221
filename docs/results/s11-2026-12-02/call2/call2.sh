#!/usr/bin/env bash
# Session 11, device call 2: the small-row GEMV (ops/matmul/gemv.cu), register-held RMSNorm rows and the fused
# residual + norm, tested against the CPU references and measured at decode (GEMV on vs HLM_GEMV=off, same binary).
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
mkdir -p /tmp/hlm && tar xf out/coord/c2.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO"):${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; TR=/tmp/hlm/lib/libhlm_kernel_trace.so
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
R=$OUT/r; mkdir -p $R
# 1. kernels vs the CPU reference
timeout 90 $B/test_cuda_ops --gtest_filter='MatmulCuda.*:RmsnormCuda.*:Residual*' > $R/ops.log 2>&1; el "ops rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/ops.log | head -12
# 2. model and engine tests (forward parity, engine parity + HF ids + graphs, training bits, bf16)
timeout 240 $B/test_cuda_models --gtest_filter='CudaModelForward*:CudaEngine*:CudaBf16*:CudaTrainGraphs*:CudaKeptActivations*:CudaModelBackward*:CudaTrainStep*:CudaQwen35*:CudaNiahCli*' \
  > $R/models.log 2>&1; el "models rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/models.log | head -20
tar czf $OUT/r.tgz -C $OUT r
# 3. decode A/B in one process each: B1 and B64 at L 1024 (GEMV on, then off)
for g in on off; do
  HLM_GEMV=$g timeout 100 $B/bench_generate --models qwen3_4b,qwen3_4b_hybrid,olmo_hybrid_7b --contexts 1024 \
    --batches 1,4,64 --decode-steps 32 --cuda-graphs on --out $R/dec_$g > $R/dec_$g.log 2>&1; el "decode gemv=$g rc $?"
  grep -E "^\| (qwen|olmo)" $R/dec_$g.log | head -9
done
tar czf $OUT/r.tgz -C $OUT r
# 4. the B1 decode kernels again (qwen3_4b)
HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_b1.txt \
  timeout 60 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 64 \
  --cuda-graphs on --out $R/b1t > $R/b1t.log 2>&1; el "b1 traced rc $?"; sed -n 1,32p $R/trace_b1.txt | cut -c1-150
tar czf $OUT/r.tgz -C $OUT r
# 5. the Granite-4.0-H HF generate golden (helper mamba2-engine)
mkdir -p $OUT/g; timeout 60 python3 tools/goldens/make_generate_goldens.py --out $OUT/g --only generate_granitemoehybrid > $R/golden_granite.log 2>&1; el "golden rc $?"; tail -3 $R/golden_granite.log
tar czf $OUT/g.tgz -C $OUT g; tar czf $OUT/r.tgz -C $OUT r
el end
