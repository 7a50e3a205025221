#!/usr/bin/env bash
# Coordinator's final device call, session 10 (2026-12-02): the new decode kernels (tiled flash decoding, decode conv,
# pinned logits) tested and measured, HF + FLA peer for the hybrid in the same call, synth untraced step time, goldens.
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p /tmp/hlm && tar xf out/coord/final.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
R=$OUT/r; mkdir -p $R $OUT/g
# 1. kernels vs the CPU reference (tiled default, then the stream kernel), engine graph/eager and bf16 tests
timeout 60 $B/test_cuda_ops --gtest_filter='*AttentionCache*:*CausalConv1d*' > $R/ops_new.log 2>&1; el "ops new rc $?"; grep -E "^\[  (PASSED|FAILED)" $R/ops_new.log
HLM_DECODE_KERNEL=streams timeout 40 $B/test_cuda_ops --gtest_filter='*AttentionCache*' > $R/ops_streams.log 2>&1; el "ops streams rc $?"; grep -E "^\[  (PASSED|FAILED)" $R/ops_streams.log
timeout 90 $B/test_cuda_models --gtest_filter='CudaEngine*:CudaNiahCli*:CudaAllocatorPools*' > $R/models_engine.log 2>&1; el "models engine rc $?"; grep -E "^\[  (PASSED|FAILED)" $R/models_engine.log
tar czf $OUT/logs.tgz -C $OUT r
# 2. goldens of the helpers (skipped when the case does not exist)
for c in ${GOLDENS:-}; do timeout 40 python3 tools/goldens/make_goldens.py --out $OUT/g --only $c > $R/golden_$c.log 2>&1; el "golden $c rc $?"; done
tar czf $OUT/goldens.tgz -C $OUT g
# 3. serving: ours, then HF + FLA on the 7B hybrid shape
timeout 100 $B/bench_generate --models qwen3_4b,olmo_hybrid_7b --contexts 1024 --batches 1,64 --decode-steps 16 --cuda-graphs on --out $R/ours > $R/ours.log 2>&1; el "ours rc $?"; grep -E "^\| (qwen3_4b|olmo_hybrid_7b) " $R/ours.log | tail -4
tar czf $OUT/logs.tgz -C $OUT r
PYTHONUNBUFFERED=1 timeout 110 python3 tools/peer/hf_generate.py --shape olmo_hybrid_7b --with-fla --contexts 1024 --batches 1,64 --new-tokens 16 --dtypes bfloat16 > $R/hf_fla.jsonl 2> $R/hf_fla.err; el "hf+fla rc $?"; cat $R/hf_fla.jsonl; tail -2 $R/hf_fla.err
tar czf $OUT/logs.tgz -C $OUT r
# 4. synth step time without the tracer (busy share = traced GPU busy / untraced step)
cat > /tmp/probe.json <<'J'
{"tasks":["state_based_recall"],"architectures":["transformer","hybrid_neg"],"train_min":2,"train_max":32,
 "steps":1000,"batch_size":64,"log_every":500,"eval_items":64,"eval_batch":64,"eval_difficulties":[8]}
J
for g in on off; do HLM_SYNTH_HOST_TIMES=1 timeout 30 $B/hybridlm synth --config /tmp/probe.json --out /tmp/s_$g --device cuda --precision bf16 --cuda-graphs $g --bucket-tokens 128 > $R/synth_untraced_$g.log 2>&1; el "synth $g rc $?"; grep -E "host:|cuda graphs|finished" $R/synth_untraced_$g.log | head -6; done
tar czf $OUT/logs.tgz -C $OUT r
el end
