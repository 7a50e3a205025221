#!/usr/bin/env bash
# Session 24, device call 3 ([perf] #20 item 1, attention at B1xT16384 1.06x): where the bench's cuDNN fwd+bwd time
# goes. bench_cuda_kernels attn_engines (binaries of 0f80663) once plain and once under the CUPTI kernel tracer with
# one row per kernel and grid (HLM_TRACE_GRID=1), SM clock and power sampled every 100 ms meanwhile.
set -u
mkdir -p /tmp/hlm && tar xJf out/carry2/bins.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
[ -n "$CUPTI_SO" ] || CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" -name 'libcupti.so.13' | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "$CUPTI_SO")
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/clocks.csv &
SMI=$!
timeout 120 /tmp/hlm/bin/bench_cuda_kernels attn_engines > $OUT/attn_engines.log 2>&1; echo "plain rc $?"
grep -E "fwd\+bwd|refused" $OUT/attn_engines.log | cut -c1-400
HLM_TRACE_GRID=1 HLM_TRACE_OUT=$OUT/trace.txt HLM_TRACE_TSV=$OUT/trace.tsv timeout 150 \
  env LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so /tmp/hlm/bin/bench_cuda_kernels attn_engines > $OUT/attn_traced.log 2>&1
echo "traced rc $?"
kill $SMI
head -40 $OUT/trace.txt | cut -c1-220
