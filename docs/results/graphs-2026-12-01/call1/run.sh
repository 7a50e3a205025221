#!/usr/bin/env bash
# graphs helper, device call: tests, synth busy share before/after, decode before/after. Results under /tmp/res -> $OUT.
set -u
R=/tmp/res; mkdir -p $R/s $R/bench /tmp/hlm
tar xf out/graphs/bins.txz -C /tmp/hlm && tar xzf out/graphs/tests.tgz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO"):${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; T=/tmp/hlm/lib/libhlm_kernel_trace.so
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader | tee $R/gpu.txt
date +%T
# 1. tests (graph == eager, pools, synth padding; the engine tests run with graphs on)
HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm timeout 100 $B/test_cuda_models \
  --gtest_filter='CudaAllocatorPools.*:CudaEngineGraphs.*:SynthPadding.*:CudaEngine.*' > $R/tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[(graphs|synth pad)\]|FAILED|PASSED|rc=" $R/tests.txt | head -40; tail -2 $R/tests.txt
date +%T
# 2. synth: Table 14 model, state-based recall n in [2,32], 64 items/step, steps 101-300 traced
cat > /tmp/probe.json <<'J'
{"tasks":["state_based_recall"],"architectures":["transformer","hybrid_neg"],"train_min":2,"train_max":32,
 "steps":300,"batch_size":64,"log_every":100,"eval_items":64,"eval_batch":64,"eval_difficulties":[8]}
J
for prec in fp32 bf16; do
  for mode in before after; do
    if [ $mode = before ]; then E="HLM_SYNC_UPLOADS=1 HLM_SYNTH_PREFETCH=0"; X="--bucket-tokens 0"; else E=""; X=""; fi
    env $E HLM_SYNTH_HOST_TIMES=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/s/trace_${prec}_${mode}.txt HLM_TRACE_TOP=25 \
      timeout 40 env LD_PRELOAD=$T $B/hybridlm synth --config /tmp/probe.json --out /tmp/s_${prec}_${mode} \
      --device cuda --precision $prec --profile-steps 101:300 $X > $R/s/log_${prec}_${mode}.txt 2>&1
    echo "== synth $prec $mode rc=$?"; grep -E "step 300|host:" $R/s/log_${prec}_${mode}.txt
    grep -E "^(span|kernels|GPU busy|GPU idle)" $R/s/trace_${prec}_${mode}.txt
  done
done
date +%T
# 3. decode: graphs off vs on, same weights, same process
timeout 150 $B/bench_generate --models qwen3_4b,qwen3_4b_hybrid --contexts 1024 --batches 1,64 --decode-steps 16 \
  --cuda-graphs off,on --out $R/bench > $R/bench/log.txt 2>&1
echo "bench rc=$?"; grep -E "^\s*\||weights:" $R/bench/log.txt | tail -14
date +%T
tar czf $OUT/res.tgz -C $R .
