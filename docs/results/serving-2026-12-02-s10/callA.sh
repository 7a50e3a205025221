#!/usr/bin/env bash
# Coordinator call A, session 10 (2026-12-02): Table 8 rest, hybrid decode profile, HF+FLA peer, longest prefill.
set -x
mkdir -p /tmp/hlm && tar xf out/coord/a.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
FUZZ_TARGETS="corpus tokenizer_json tokenizer_encode" bash tools/device/fuzz_background.sh 540 "$OUT" out/carry/fuzz3 >"$OUT/fuzz_bg.log" 2>&1 & FUZZ_PID=$!
B=/tmp/hlm/bin/bench_generate
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv > $R/gpu.txt 2>&1
T0=$(date +%s)
# 1. the hybrid's B 64 decode, eager and graphs, traced (regression localisation): decode steps only.
HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_hyb.txt HLM_TRACE_TSV=$R/trace_hyb.tsv HLM_TRACE_TOP=30 \
  LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so timeout 60 $B --models qwen3_4b_hybrid --contexts 1024 --batches 64 --decode-steps 32 --cuda-graphs off --out $R/hyb_eager > $R/hyb_eager.log 2>&1
echo "t1 $(( $(date +%s)-T0 ))" >> $R/times.txt
# 2. the HF + FLA peer for both hybrid shapes, then ours on the same shapes.
for S in olmo_hybrid_7b; do
  PYTHONUNBUFFERED=1 timeout 100 python3 tools/peer/hf_generate.py --shape $S --with-fla --contexts 1024 --batches 1,64 --new-tokens 16 --dtypes bfloat16 > $R/hf_fla_$S.jsonl 2> $R/hf_fla_$S.err
done
echo "t2 $(( $(date +%s)-T0 ))" >> $R/times.txt
timeout 60 $B --models olmo_hybrid_7b --contexts 1024 --batches 1,64 --decode-steps 16 --cuda-graphs on --out $R/same > $R/same.log 2>&1
echo "t3 $(( $(date +%s)-T0 ))" >> $R/times.txt
# 3. Table 8's remaining rows.
timeout 200 $B --models olmo_hybrid_7b --contexts 4096,8192,16384,32768 --batches 4,max --decode-steps 8 --prefill-chunk 8192 --out $R/t8_hyb > $R/t8_hyb.log 2>&1
echo "t4 $(( $(date +%s)-T0 ))" >> $R/times.txt
timeout 90 $B --models olmo3_7b --contexts 4096,16384 --batches 4,max --decode-steps 8 --prefill-chunk 8192 --out $R/t8_full > $R/t8_full.log 2>&1
echo "t5 $(( $(date +%s)-T0 ))" >> $R/times.txt
# 4. Longest prefill within 48 GB and the whole H200 (Qwen3-4B pair).
timeout 80 $B --search-context --models qwen3_4b,qwen3_4b_hybrid --memory-caps 48G,device --prefill-chunk 8192 --search-time-limit 40 --out $R/search > $R/search.log 2>&1
echo "t6 $(( $(date +%s)-T0 ))" >> $R/times.txt
kill -TERM $FUZZ_PID; wait $FUZZ_PID
tar czf $OUT/callA.tgz -C $OUT r fuzz_bg.log
ls -la $OUT
