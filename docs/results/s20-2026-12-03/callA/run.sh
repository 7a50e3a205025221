#!/usr/bin/env bash
# Session 20, device call A (after a staging call that copied the first half of the binaries to /tmp/stage/p_aa):
# the whole CUDA suites at the allocator change (large blocks cut from segments, 2c7014d) and the teacher held in bf16
# only (57b4214, never run on a GPU before); the 4B lean step at micro-batch 2 on the whole H200 under the CUPTI
# kernel tracer (its host setup and attach overlap the tests, its steps run alone); the 4B step at micro-batches 2
# and 4 on a device left with 45.4 GiB free by a ballast process (the allocator's effect at 46 GiB); ncu of the
# batch-1 decode GEMV (qwen3_4b, L 1024). Stops itself at BUDGET s.
set -u
START=$(date +%s); BUDGET=${BUDGET:-570}
left() { local l=$((BUDGET - ($(date +%s) - START))); [ $l -lt 5 ] && l=5; echo $l; }
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && cat /tmp/stage/p_aa out/coord/s20/a/p_ab | tar xJ -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=/tmp/hlm/bin/hybridlm
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null) && export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
cupti="$(ls /usr/local/cuda/lib64/libcupti.so* /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* \
  /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* 2>/dev/null | head -1)"
[ -n "$cupti" ] || cupti="$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)"
el "unpacked; CUPTI $cupti"
rm -f /tmp/gate1 /tmp/gate2 /tmp/ballast_ready
# 1. Whole H200, micro 2, traced (attach overlaps the tests; steps after gate1).
HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$OUT/trace_4b_m2.txt HLM_TRACE_TSV=$OUT/trace_4b_m2.tsv HLM_TRACE_TOP=60 \
  HLM_PROFILE_STEP=1 HLM_BENCH_TIME_AFTER=/tmp/gate1 timeout $(( BUDGET - 20 )) \
  env LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cupti")" LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so \
  /tmp/hlm/bin/bench_distill_step --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 2 --seq 1024 \
  --steps 3 > $OUT/distill_4b_traced.log 2>&1 &
BENCH1=$!
# 2. 46-GiB device, micro 2 and 4: host setup now, GPU work after gate2 (the ballast in place).
HLM_PROFILE_STEP=1 HLM_BENCH_START_AFTER=/tmp/gate2 timeout $(( BUDGET - 20 )) /tmp/hlm/bin/bench_distill_step \
  --shape qwen3-4b --memory-plan lean --precision bf16 --rows 8 --micro 2,4 --seq 1024 --steps 3 \
  > $OUT/distill_4b_46g.log 2>&1 &
BENCH2=$!
suite() {  # name, binary, [filter]
  el "$1"; timeout $(( $(left) - 240 )) /tmp/hlm/bin/$2 ${3:+--gtest_filter=$3} > $OUT/$1.log 2>&1; echo "rc=$?" >> $OUT/$1.log
  grep -E '^\[  FAILED  \]|tests ran|^rc=' $OUT/$1.log | tail -15
}
suite ops test_cuda_ops
grep -E "CudaAllocator\.|CudaBackend\." $OUT/ops.log | grep -E "OK|FAILED" | head
suite models test_cuda_models
suite dist test_dist_cuda
touch /tmp/gate1; el "gate1 opened (traced steps)"
wait $BENCH1; echo "bench rc $?" >> $OUT/distill_4b_traced.log
grep -E "^attach|^distill_step|profile +adamw|rror|what|bench rc" $OUT/distill_4b_traced.log | cut -c1-300 | head -12
head -70 $OUT/trace_4b_m2.txt | cut -c1-200
el "ballast"
python3 - <<'PY' > $OUT/ballast.log 2>&1 &
import torch, time
free, total = torch.cuda.mem_get_info()
keep = int(45.4 * 2**30)
b = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
free2, _ = torch.cuda.mem_get_info()
print(f"total {total/2**30:.2f} GiB, free before {free/2**30:.2f}, ballast {b.numel()/2**30:.2f}, free after {free2/2**30:.2f} GiB", flush=True)
open("/tmp/ballast_ready", "w").close()
time.sleep(3600)
PY
BALLAST=$!
for i in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
cat $OUT/ballast.log
touch /tmp/gate2; el "gate2 opened (46 GiB)"
wait $BENCH2; echo "bench rc $?" >> $OUT/distill_4b_46g.log
kill $BALLAST 2>/dev/null
grep -E "^attach|^memory plan|^distill_step|profile +adamw|rror|what|bench rc" $OUT/distill_4b_46g.log | cut -c1-300 | head -20
grep -E "profile +(teacher|student|backward)" $OUT/distill_4b_46g.log | tail -6 | cut -c1-250
# 3. ncu of the batch-1 decode GEMV (graphs off so each launch is profiled alone), if time is left.
if [ $(left) -gt 100 ]; then
  el "ncu gemv"
  ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  timeout $(( $(left) - 10 )) "$ncu_" --clock-control none --set full -k 'regex:gemv_kernel' --launch-skip 300 \
    --launch-count 8 /tmp/hlm/bin/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 8 \
    --cuda-graphs off > $OUT/ncu_gemv.txt 2>&1
  grep -E "gemv_kernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Limit|Stall|Issue Slots Busy|L2 Hit" $OUT/ncu_gemv.txt | head -100
fi
el "done"
