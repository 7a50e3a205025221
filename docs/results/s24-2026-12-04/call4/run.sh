#!/usr/bin/env bash
# Session 24, device call 4 ([perf] #20 item 1): torch's SDPA backends (peer_probe.py sdpa) and our cuDNN engine
# (bench_cuda_kernels attn_engines) in the same call, A-B-A, with SM clock and power logged (100 ms).
set -u
START=$(date +%s)
el() { echo "[$(( $(date +%s) - START )) s] $*"; }
mkdir -p /tmp/hlm && tar xJf out/carry2/bins.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > $OUT/clocks.csv &
SMI=$!
for run in 1 2; do
  el "sdpa $run"
  timeout 150 python3 .anchors/peer_probe.py sdpa > $OUT/peer_sdpa_$run.log 2>&1; echo "rc=$?" >> $OUT/peer_sdpa_$run.log
  grep -E 'sdpa|rc=' $OUT/peer_sdpa_$run.log | cut -c1-300
  [ $run = 2 ] && break
  el "ours"
  timeout 120 /tmp/hlm/bin/bench_cuda_kernels attn_engines > $OUT/attn_engines.log 2>&1; echo "rc $?"
  grep -E "fwd\+bwd" $OUT/attn_engines.log | cut -c1-330
done
kill $SMI; xz -9 $OUT/clocks.csv
el done
