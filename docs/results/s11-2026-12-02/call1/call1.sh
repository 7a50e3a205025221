#!/usr/bin/env bash
# Session 11, device call 1: (1) batch-1 decode kernel profile (qwen3_4b, L 1024, bf16, graphs) and the untraced B1
# baseline, (2) the synth busy share measured in one call (same steps untraced for wall time, traced for GPU busy),
# (3) the NIAH GPU experiment (issue #21 item 4) with the time that is left (resumable).
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
mkdir -p /tmp/hlm && tar xf out/coord/c1.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO"):${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; TR=/tmp/hlm/lib/libhlm_kernel_trace.so
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader
# 1. batch-1 decode: untraced baseline (both 4B shapes), then the traced decode steps of qwen3_4b
timeout 70 $B/bench_generate --models qwen3_4b,qwen3_4b_hybrid --contexts 1024 --batches 1 --decode-steps 32 \
  --cuda-graphs on --out $R/b1 > $R/b1.log 2>&1; el "b1 rc $?"; grep -E "^\| qwen" $R/b1.log | head -4
HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_b1.txt HLM_TRACE_TSV=$R/trace_b1.tsv \
  timeout 60 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 64 \
  --cuda-graphs on --out $R/b1t > $R/b1t.log 2>&1; el "b1 traced rc $?"; sed -n 1,45p $R/trace_b1.txt | cut -c1-160
tar czf $OUT/r.tgz -C $OUT r
# 2. synth: steps 101-300 of each pair, untraced (wall) then traced (GPU busy), graphs on and off
cat > /tmp/probe.json <<'J'
{"tasks":["state_based_recall"],"architectures":["transformer","hybrid_neg"],"train_min":2,"train_max":32,
 "steps":300,"batch_size":64,"log_every":100,"eval_items":64,"eval_batch":64,"eval_difficulties":[8]}
J
for g in on off; do
  timeout 40 $B/hybridlm synth --config /tmp/probe.json --out /tmp/su_$g --device cuda --precision bf16 \
    --cuda-graphs $g --bucket-tokens 128 --profile-steps 101:300 > $R/synth_untraced_$g.log 2>&1; el "synth untraced $g rc $?"
  grep -E "profiled steps" $R/synth_untraced_$g.log
  HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/synth_trace_$g.txt timeout 60 env LD_PRELOAD=$TR $B/hybridlm synth \
    --config /tmp/probe.json --out /tmp/st_$g --device cuda --precision bf16 --cuda-graphs $g --bucket-tokens 128 \
    --profile-steps 101:300 > $R/synth_traced_$g.log 2>&1; el "synth traced $g rc $?"
  grep -E "profiled steps" $R/synth_traced_$g.log; sed -n 1,14p $R/synth_trace_$g.txt | cut -c1-160
done
tar czf $OUT/r.tgz -C $OUT r
# 3. NIAH experiment (resumable; out/ is kept on a warm machine between calls)
left=$(( 585 - ($(date +%s) - T0) ))
el "niah with ${left} s"
mkdir -p out/niah
timeout $left $B/hybridlm niah experiment --config configs/niah/experiment-gpu.json --out out/niah/gpu --device cuda \
  > out/niah/gpu.stdout 2> out/niah/gpu.log; el "niah rc $?"; tail -5 out/niah/gpu.log
tar czf $OUT/niah-gpu.tgz --exclude='*.safetensors' --exclude='*.jsonl.zst' out/niah/gpu out/niah/gpu.log out/niah/gpu.stdout
el end
