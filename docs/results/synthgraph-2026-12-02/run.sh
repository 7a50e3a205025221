#!/usr/bin/env bash
# synthgraph helper, one device call: CUDA tests (captured train steps == eager, decode graphs, pools, synth padding),
# then the synth busy share (Table 14 model, 64 items/step) for bf16 and fp32 with --cuda-graphs on and off.
set -u
R=/tmp/res; mkdir -p $R /tmp/hlm
tar xf out/synthgraph/bins.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO"):${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; T=/tmp/hlm/lib/libhlm_kernel_trace.so
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee $R/gpu.txt
date +%T
# 1. synth busy share first (the deliverable): Table 14 model, state-based recall n in [2,32], 64 items/step,
#    transformer + hybrid neg. in one process, steps 101-300 of each traced.
cat > /tmp/probe.json <<'J'
{"tasks":["state_based_recall"],"architectures":["transformer","hybrid_neg"],"train_min":2,"train_max":32,
 "steps":300,"batch_size":64,"log_every":100,"eval_items":64,"eval_batch":64,"eval_difficulties":[8]}
J
for run in bf16:on:128 bf16:off:128 fp32:on:128 fp32:env-off:128 bf16:on:256; do
  IFS=: read prec g bt <<< "$run"
  E=""; G=$g; if [ $g = env-off ]; then E="HLM_CUDA_GRAPHS=off"; G=on; fi
  n=${prec}_${g}_${bt}
  {
    env $E HLM_SYNTH_HOST_TIMES=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_$n.txt HLM_TRACE_TOP=25 \
      timeout 40 env LD_PRELOAD=$T $B/hybridlm synth --config /tmp/probe.json --out /tmp/s_$n \
      --device cuda --precision $prec --cuda-graphs $G --bucket-tokens $bt --profile-steps 101:300 > $R/log_$n.txt 2>&1
    echo "== synth $prec graphs $g bucket $bt rc=$?"; grep -E "step 300|host:|cuda graphs|note:" $R/log_$n.txt | head -8
    grep -E "^(span|kernels|GPU busy|GPU idle)" $R/trace_$n.txt
  }
done
date +%T
# 2. tests
HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm timeout 110 $B/test_cuda_models \
  --gtest_filter='CudaTrainGraphs.*:CudaEngineGraphs.*:SynthPadding.*:CudaAllocatorPools.*' > $R/tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[(train graphs|graphs|synth pad)\]|FAILED|PASSED|OK \]|Failure|differ" $R/tests.txt | head -40
tail -3 $R/tests.txt
date +%T
cd $R && tar czf $OUT/res.tgz . && cp $R/tests.txt $R/log_bf16_on_128.txt $R/trace_bf16_on_128.txt $OUT/ 2>/dev/null
