#!/usr/bin/env bash
# Session 25, device call 1 ([perf] #20): where the remaining attention and GDN gaps are.
#   1. attention: our cuDNN engine (bench_cuda_kernels attn_engines) with a normal output gradient and with the
#      peer's all-ones gradient, and torch SDPA cuDNN with both (sdpa_dout.py), A-B-A in one call: does the
#      gradient's content move the time (power / clocks), and does peer_probe's ones_like(o) flatter the peer?
#   2. per-kernel times: ours under the CUPTI tracer, torch's under torch.profiler, at B1xT16384 (normal gradient)
#   3. GDN v2 per kernel (chunked only, tracer with grids) at the three shapes, and ncu of the sequential passes
#      (state_v2, dstate) at B1xT16384 and B2xT4096
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && tar xJf out/carry/bins.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO")
B=/tmp/hlm/bin
D=docs/results/s25-2026-12-04/call1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 200 > $OUT/clocks.csv &
SMI=$!
el "1a. ours, normal d_out"
timeout 100 $B/bench_cuda_kernels attn_engines --shapes 8x1024,2x4096,1x16384 > $OUT/attn_normal_1.log 2>&1; echo "rc $?"
grep -E "d_out|fwd\+bwd" $OUT/attn_normal_1.log | grep -v native | cut -c1-200
el "1b. ours, ones d_out"
timeout 100 $B/bench_cuda_kernels attn_engines --d-out-ones > $OUT/attn_ones_1.log 2>&1; echo "rc $?"
grep -E "d_out|fwd\+bwd" $OUT/attn_ones_1.log | grep -v native | cut -c1-200
el "1c. torch SDPA cuDNN, ones and normal, twice each"
timeout 150 python3 $D/sdpa_dout.py --repeats 2 > $OUT/sdpa_dout.log 2>&1; echo "rc $?"; cat $OUT/sdpa_dout.log | cut -c1-200
el "1d. ours, normal d_out again"
timeout 100 $B/bench_cuda_kernels attn_engines > $OUT/attn_normal_2.log 2>&1; echo "rc $?"
grep -E "d_out|fwd\+bwd" $OUT/attn_normal_2.log | grep -v native | cut -c1-200
el "2a. torch kernels at T16384, normal d_out"
timeout 100 python3 $D/sdpa_dout.py --shapes 1x16384 --repeats 1 --trace-dout normal > $OUT/sdpa_trace.log 2>&1; echo "rc $?"
cut -c1-230 $OUT/sdpa_trace.log | head -40
el "2b. our kernels at T16384, normal d_out"
HLM_TRACE_GRID=1 HLM_TRACE_OUT=$OUT/attn_trace.txt HLM_TRACE_TSV=$OUT/attn_trace.tsv timeout 100 \
  env LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so $B/bench_cuda_kernels attn_engines --shapes 1x16384 > $OUT/attn_traced.log 2>&1
echo "rc $?"; head -30 $OUT/attn_trace.txt | cut -c1-230
el "3a. GDN chunked, plain"
timeout 60 $B/bench_cuda_kernels gdn --chunked-only > $OUT/gdn.log 2>&1; echo "rc $?"; cat $OUT/gdn.log
el "3b. GDN chunked, traced"
HLM_TRACE_GRID=1 HLM_TRACE_OUT=$OUT/gdn_trace.txt HLM_TRACE_TSV=$OUT/gdn_trace.tsv timeout 60 \
  env LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so $B/bench_cuda_kernels gdn --chunked-only > $OUT/gdn_traced.log 2>&1
echo "rc $?"; head -45 $OUT/gdn_trace.txt | cut -c1-200
el "3c. ncu of the sequential passes"
ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
secs=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats)
for shp in 1x16384 2x4096; do
  timeout 100 "$ncu_" --clock-control none "${secs[@]}" -k 'regex:state' --launch-count 2 \
    $B/bench_cuda_kernels gdn --chunked-only --shapes $shp > $OUT/ncu_state_$shp.txt 2>&1
  echo "ncu $shp rc $?"
  grep -E "^  [a-zA-Z_:<>0-9 ]+\(|Duration|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued" $OUT/ncu_state_$shp.txt | cut -c1-160 | head -40
done
kill $SMI
xz -9 $OUT/clocks.csv
el done
