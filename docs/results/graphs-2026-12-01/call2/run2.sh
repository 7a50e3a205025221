#!/usr/bin/env bash
# graphs helper, device call 2: kernel trace of the decode steps alone (HLM_PROFILE_DECODE), qwen3_4b bf16 L 1024.
set -u
R=/tmp/res2; mkdir -p $R /tmp/hlm
tar xf out/graphs/bins.txz -C /tmp/hlm && tar xzf out/graphs/bench2.tgz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO"):${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; T=/tmp/hlm/lib/libhlm_kernel_trace.so
uptime; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
ps -eo pid,pcpu,etime,comm --sort=-pcpu | head -6
for cfg in "1 off" "1 on" "64 on"; do
  set -- $cfg
  HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_b$1_$2.txt HLM_TRACE_TOP=30 \
    timeout 60 env LD_PRELOAD=$T $B/bench_generate --models qwen3_4b --contexts 1024 --batches $1 --decode-steps 64 \
    --cuda-graphs $2 --out $R/b$1_$2 > $R/log_b$1_$2.txt 2>&1
  echo "== B $1 graphs $2 rc=$?"; grep -E "^\s*\| qwen" $R/log_b$1_$2.txt | head -2
  sed -n 3,40p $R/trace_b$1_$2.txt | cut -c1-150
done
# the hybrid at B 64 again, graphs off then on (call 1 measured it 2x slower than session 9's eager figure)
timeout 60 $B/bench_generate --models qwen3_4b_hybrid --contexts 1024 --batches 64 --decode-steps 16 --cuda-graphs off,on \
  --out $R/hyb64 > $R/log_hyb64.txt 2>&1
echo "== hybrid B64 rc=$?"; grep -E "^\s*\| qwen" $R/log_hyb64.txt | head -2
uptime; ps -eo pid,pcpu,etime,comm --sort=-pcpu | head -4
tar czf $OUT/res2.tgz -C $R .
