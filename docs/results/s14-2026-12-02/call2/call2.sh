#!/usr/bin/env bash
# Session 14, call 2 (lead2.txz): why the batch-1 GEMV kernel of call 1 was slower. qwen3_4b, B1, L 1024, bf16,
# graphs; one variable at a time: the session-13 kernel (HLM_GEMV_KERNEL=rows), the batch-1 kernel with 1 / 2 blocks
# per SM (HLM_GEMV_ROW_BLOCKS), alone on its SM (HLM_GEMV_ROW_ALONE=on), SwiGLU fold off; dependent launches of the
# GEMVs only (HLM_PDL=gemv, the new default) vs every kernel (all). Then a trace with HLM_PDL=off (kernel durations
# without overlap) of the session-13 kernel and of the batch-1 kernel. Op tests of the GEMV first.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-280}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/lead2.txz -C /tmp/hlm || exit 3
CUPTI_SO=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')" /usr/local/cuda -name 'libcupti.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/hlm/lib:$(dirname "${CUPTI_SO:-/x/y}")
B=/tmp/hlm/bin R=$OUT/r TR=/tmp/hlm/lib/libhlm_kernel_trace.so
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
export HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$B/hybridlm
pack() { tar czf $OUT/logs.tgz -C $OUT r; }
timeout 60 $B/test_cuda_ops --gtest_filter='MatmulCuda.Gemv*:RmsnormCuda.*:SwigluCuda.*' > $R/ops.log 2>&1; el "ops rc $?"
grep -hE "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $R/ops.log | head -12
run_ab() {  # name, env...
  local n=$1; shift
  [ $(left) -gt 30 ] || { el "skip $n"; return; }
  env "$@" timeout 60 $B/bench_generate --models ${M:-qwen3_4b} --contexts 1024 --batches 1 --decode-steps 32 \
    --cuda-graphs on --out $R/$n > $R/$n.log 2>&1; el "$n rc $?"
  grep -hE "^\s*\| (qwen|olmo)" $R/$n.log | head -1 | cut -d'|' -f2,7,9,10
}
run_ab rows HLM_GEMV_KERNEL=rows
run_ab row1 HLM_GEMV_ROW_BLOCKS=1
run_ab row2 HLM_GEMV_ROW_BLOCKS=2
run_ab alone HLM_GEMV_ROW_ALONE=on
run_ab row2_noswi HLM_GEMV_ROW_BLOCKS=2 HLM_GEMV_SWIGLU=off
run_ab rows_all HLM_GEMV_KERNEL=rows HLM_PDL=all
pack
for v in rows row1; do
  [ $(left) -gt 30 ] || break
  K=$([ $v = rows ] && echo rows || echo row)
  HLM_PDL=off HLM_GEMV_KERNEL=$K HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_OUT=$R/trace_$v.txt \
    timeout 50 env LD_PRELOAD=$TR $B/bench_generate --models qwen3_4b --contexts 1024 --batches 1 --decode-steps 32 \
    --cuda-graphs on --out $R/t_$v > $R/t_$v.log 2>&1; el "trace $v rc $?"; sed -n 9,20p $R/trace_$v.txt | cut -c1-140
done
pack
el end
