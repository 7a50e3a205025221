#!/usr/bin/env bash
# device_call.sh: the sessions' device calls, run from the repository root on the GPU machine (sessions 44-45 ran it as
# docs/results/s44-2026-12-06/call.sh, commit 9fba86b; session 45 added the `prefill` part). PACK / NEED choose the
# packed binaries (PACK: the archive's name in /tmp/keep, NEED: a program that must be in /tmp/hlm/bin). Packs, built
# here (docs/results/s45-2026-12-06/README.md; SLIM_LIBS and STRIP_PTX make four programs one piece):
#   STRIP_PTX=1 SLIM_LIBS=1 PIECE_MB=auto RESERVE_MB=0 bash tools/device/pack_binaries.sh out/carry_s46/s46.txz \
#     build-gpu/bench/bench_generate build-gpu/tests/cuda/test_cuda_ops build-gpu/tests/test_cuda_models \
#     build-gpu/tools/profile/libhlm_kernel_trace.so
#   STRIP_PTX=1 SLIM_LIBS=1 PIECE_MB=auto RESERVE_MB=1 bash tools/device/pack_binaries.sh out/carry_s46/step.txz \
#     build-gpu/bench/bench_distill_step          (with room for out/carry/anchors.txz: the peer + recipe calls)
# One piece per call, copied into /tmp/keep by this script (PARTS=none for a call that only carries one; the machine
# must stay warm between calls: idle_release_s); the call that runs `peer` also carries out/carry/anchors.txz
# (FLA + peer_probe.py).
# PARTS (comma list, run in this order; BUDGET seconds for the call):
#   peer    SHAPE=qwen3-4b ROWS=$PEER_ROWS (8 on an H200, 2 on an H100) WITH_FLA=1 STRONG=1 peer_probe.py hf_distill
#           (the peer's fastest setup), then (PEER_OPT=1, the default) tools/device/peer_optimizer_time.py, the
#           peer's AdamW step alone                                                                        (~400 s)
#   tests   test_cuda_ops $OPS_FILTER, test_cuda_models $MODELS_FILTER (HLM_BINARY set), env $TEST_ENV
#           (defaults: the new and switched tests; OPS_FILTER='*' MODELS_FILTER='*' for the whole suites)
#   decode  bench_generate --models $DECODE_MODELS --contexts 1024 --batches 1 --decode-steps 128, variants
#           $DECODE_VARIANTS (default: postnorm-add / no-postnorm-add twice each), interleaved on the same weights                    (~60 s/model)
#   splits  bench_generate --models $SPLIT_MODELS (olmo3_7b) --contexts 1024 --batches 1 --decode-steps 128
#           --decode-variants default,fused-merge (twice) with HLM_DECODE_MIN_SPLIT_KEYS in $SPLIT_KEYS (64 128 256):
#           the decode attention's split count and merge at the MHA shape ([infer] #18)     (~40 s per setting)
#   trace   bench_generate --models $TRACE_MODEL (olmo3_7b) --decode-variants $TRACE_VARIANT (default) --contexts 1024
#           --batches 1 --decode-steps 32 under the
#           kernel tracer (HLM_TRACE_GRID=1, the decode steps' profiler range; needs libhlm_kernel_trace.so packed:
#           docs/profiling.md), for the step's kernel-by-kernel time                                        (~40 s)
#   steptrace  one 8-row 4B step at micro-batch $MICRO under the kernel tracer (tools/device/loss_chunking_check.sh
#           PARTS=trace): where the step's time goes now, kernel by kernel ([perf] #20 item 4)          (~100-150 s)
#   kernels bench_cuda_kernels conv attn_decode: the causal conv at the 4B student's shape and the decode attention
#           by kernel form and shape                                                                          (~60 s)
#   ncu     one launch each of the conv backward (bench_cuda_kernels conv) and of the decode attention's split and
#           merge kernels at the 7B MHA shape, B1, L 1088 (bench_cuda_kernels attn_decode, its first rows): SpeedOfLight,
#           Occupancy, LaunchStats, WarpStateStats, SchedulerStats — what limits each                         (~90 s)
#   ab      the recipe (below) as two processes, one entry each (autotune off): $AB_OFF (default: the conv's interior
#           walk and the direct residual snapshots off) and the defaults, ab_off.log / ab_on.log         (~75 s each)
#   prefill HLM_ATTENTION_ENGINE=cudnn bench_generate --search-context --models $PREFILL_MODELS (qwen3_4b) --memory-caps
#           $PREFILL_CAPS (device) --prefill-chunk 8192 --search-probe 131072 --search-time-limit ${PREFILL_LIMIT:-$(left - 60)}: the
#           longest prefill within the whole GPU, run whole when its extrapolated time fits the limit, else its memory
#           measured on the last chunk alone and its time on $PREFILL_SAMPLES (16) sampled chunks (session 47; a whole
#           run gets the same sampled run beside it) (session 46; PREFILL_LIMIT=0 for that on every model) ([infer] #18 item
#           5(b); session 14 predicted 917,504 tokens in ~500 s for qwen3_4b on an H200); the bench's lines time-stamped and
#           nvidia-smi's SM clock, power and temperature every 500 ms in prefill_smi.csv (session 48)
#                                                                      (~560 s whole, ~90 s per model last chunk)
#   recipe  bench_distill_step, 4B, lean, --recompute none, micro-batch $MICRO (8 on an H200, 2 on an H100), 96 rows
#           per step, 2048xfull, defaults × --matmul-autotune $AUTOTUNES × --norm-bf16-dx $NORM_DXS × --mlp-dh $DHS,
#           1 warm-up + 1 timed step each, HLM_PROFILE_STEP=1                               (~45 s per entry + ~60 s)
set -u
export OUT=${OUT:-/tmp/call_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry*/*.txz.part.* out/carry/anchors.txz; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
MICRO=${MICRO:-$([ "${mib:-0}" -lt 100000 ] && echo 2 || echo 8)}
if has peer; then
  [ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz || exit 3
  el "peer step, $(left) s left"
  # The peer's 4B step needs more than an H100's 80 GB at 4 rows (session 40, call 6): 2 rows there.
  PEER_ROWS=${PEER_ROWS:-$([ "${mib:-0}" -lt 100000 ] && echo 2 || echo 8)}
  SHAPE=qwen3-4b ROWS=$PEER_ROWS WITH_FLA=1 STRONG=1 timeout $(( $(left) - 5 )) python3 -u \
    .anchors/peer_probe.py hf_distill > "$OUT/peer_hf_distill.log" 2>&1
  el "peer_probe rc=$?"
  grep -E 'hf_distill|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
  if [ "${PEER_OPT:-1}" = 1 ]; then  # the peer's AdamW step alone (its share under the recipe: once per 96 rows)
    timeout $(( $(left) - 5 )) python3 -u tools/device/peer_optimizer_time.py > "$OUT/peer_opt.log" 2>&1
    el "peer_optimizer_time rc=$?"; tail -2 "$OUT/peer_opt.log" | cut -c1-400
  fi
fi
has tests || has recipe || has prefill || has decode || has splits || has trace || has steptrace || has kernels || has ncu || has ab || { el done; exit 0; }
# PACK: which packed binaries to unpack (all: the seven above; step: bench_distill_step alone, out/carry_step/step.txz,
# for the peer + recipe calls); NEED: a binary that must be there.
if [ ! -x "/tmp/hlm/bin/${NEED:-test_cuda_models}" ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/${PACK:-all}.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  el "tests with: ${TEST_ENV:-(defaults)}"
  env ${TEST_ENV:-} timeout $(( $(left) / 2 )) /tmp/hlm/bin/test_cuda_ops \
    --gtest_filter="${OPS_FILTER:-RmsnormCuda.*:SwigluCuda.*:ResidualCuda*}" > "$OUT/tests_ops.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail; echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  env ${TEST_ENV:-} HLM_BINARY=/tmp/hlm/bin/hybridlm timeout $(( $(left) - 10 )) /tmp/hlm/bin/test_cuda_models \
    --gtest_filter="${MODELS_FILTER:-CudaEngineFusions.*:CudaKeptActivations.*:CudaNormBf16Out.*:CudaModelForward*}" \
    > "$OUT/tests_models.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail; echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[(fusions|check)\].*(post-norm|vs the|norm bf16)" "$OUT/tests_models.log" | cut -c1-260
  el "tests done, $(left) s left"
fi
if has decode; then
  for m in ${DECODE_MODELS:-olmo3_7b olmo_hybrid_7b}; do
    el "decode $m, $(left) s left"
    timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_generate --models "$m" --contexts 1024 --batches 1 \
      --decode-steps 128 --decode-variants "${DECODE_VARIANTS:-postnorm-add,no-postnorm-add,postnorm-add,no-postnorm-add}" \
      --out "$OUT/decode_$m" > "$OUT/decode_$m.log" 2>&1
    el "bench_generate $m rc=$?"
    grep -E "^\|" "$OUT/decode_$m.log" | head -12
  done
fi
if has splits; then  # the decode attention's split count and merge at olmo3_7b's MHA shape (32 heads, L 1024)
  for keys in ${SPLIT_KEYS:-64 128 256}; do
    el "decode splits: >= $keys keys per split, $(left) s left"
    HLM_DECODE_MIN_SPLIT_KEYS=$keys timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_generate \
      --models "${SPLIT_MODELS:-olmo3_7b}" --contexts 1024 --batches 1 --decode-steps 128 \
      --decode-variants default,fused-merge,default,fused-merge --out "$OUT/splits_$keys" > "$OUT/splits_$keys.log" 2>&1
    el "bench_generate rc=$?"
    grep -E "^\| olmo|^\| qwen" "$OUT/splits_$keys.log" | cut -d'|' -f2,3,9
  done
fi
if has trace; then  # where a batch-1 decode step of $TRACE_MODEL goes, kernel by kernel and launch shape
  el "decode trace, $(left) s left"
  HLM_PROFILE_DECODE=1 HLM_TRACE_RANGE=profiler HLM_TRACE_GRID=1 HLM_TRACE_OUT="$OUT/trace_decode.txt" \
    HLM_TRACE_TSV="$OUT/trace_decode.tsv" timeout $(( $(left) - 5 )) env \
    LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so /tmp/hlm/bin/bench_generate --models "${TRACE_MODEL:-olmo3_7b}" \
    --contexts 1024 --batches 1 --decode-steps 32 --decode-variants "${TRACE_VARIANT:-default}" \
    --out "$OUT/trace_bench" > "$OUT/trace_decode.log" 2>&1
  el "traced bench_generate rc=$?"; head -40 "$OUT/trace_decode.txt" 2>/dev/null | cut -c1-160
fi
if has steptrace; then
  el "step trace: micro $MICRO, $(left) s left"
  env BIN=/tmp/hlm/bin OUT="$OUT" MICRO="$MICRO" RECOMPUTE=none CHUNKINGS=2048xfull DW_PATHS=overwrite PARTS=trace \
    STEP_TIMEOUT=$(( $(left) - 10 )) bash tools/device/loss_chunking_check.sh > "$OUT/steptrace.log" 2>&1
  el "loss_chunking_check trace rc=$?"
  cp /tmp/loss_chunking/trace.txt "$OUT/steptrace.txt" 2>/dev/null; head -75 "$OUT/steptrace.txt" 2>/dev/null | cut -c1-150
fi
if has kernels; then
  el "kernels, $(left) s left"
  timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_cuda_kernels ${KERNELS:-conv attn_decode} > "$OUT/kernels.log" 2>&1
  el "bench_cuda_kernels rc=$?"; grep -E "^(conv|attn_decode)" "$OUT/kernels.log" | cut -c1-170
fi
if has ncu; then
  for what in "conv_backward_kernel conv" "cache_decode_(tiled|merge) attn_decode"; do
    set -- $what
    el "ncu $1, $(left) s left"
    timeout $(( $(left) / 2 )) ncu --kernel-name-base demangled --kernel-name "regex:$1" --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats /tmp/hlm/bin/bench_cuda_kernels "$2" > "$OUT/ncu_$2.log" 2>&1
    el "ncu rc=$?"
    grep -E "^  [a-z_:]+.*\(|Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occ|Theoretical Occ|Issued Warp|No Eligible|Stall|Warp Cycles Per Issued" \
      "$OUT/ncu_$2.log" | cut -c1-150 | head -40
  done
fi
if has ab; then
  for side in off on off on; do
    [ "$side" = on ] && envs="" || envs="${AB_OFF:-HLM_CONV_INTERIOR=off HLM_RESIDUAL_SNAPSHOTS=off}"
    [ "$(left)" -gt 90 ] || { el "ab: no time left for $side"; break; }
    el "ab $side (${envs:-defaults}), micro $MICRO, $(left) s left"
    env $envs HLM_PROFILE_STEP=1 timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
      --precision bf16 --rows 96 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
      --loss-chunking 2048xfull --matmul-autotune off --steps 1 --warmup 1 >> "$OUT/ab_$side.log" 2>&1
    el "bench_distill_step rc=$?"
    grep -E "^distill_step" "$OUT/ab_$side.log" | tail -1 | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
  done
fi
if has prefill; then
  el "prefill within the device, $(left) s left"
  # cuDNN comes from the PyTorch environment (ops/attention/attention_cudnn.h): its folder on the library path.
  cudnn_dir=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
  # The GPU's SM clock, power and temperature every 500 ms beside the log's time-stamped lines (session 48: do the
  # sampled chunks run at another clock than a whole prefill's?).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/prefill_smi.csv" 2>&1 & smi=$!
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir" HLM_ATTENTION_ENGINE=cudnn timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_generate --search-context \
    --models "${PREFILL_MODELS:-qwen3_4b}" --memory-caps "${PREFILL_CAPS:-device}" --prefill-chunk 8192 --search-probe 131072 \
    --search-time-limit ${PREFILL_LIMIT:-$(( $(left) - 60 ))} --search-chunk-samples ${PREFILL_SAMPLES:-16} --out "$OUT/prefill" 2>&1 \
    | while IFS= read -r line; do printf '%(%H:%M:%S)T %s\n' -1 "$line"; done > "$OUT/prefill.log"
  el "bench_generate --search-context rc=${PIPESTATUS[0]}"; kill $smi 2>/dev/null
  grep -E " \||sampled chunks" "$OUT/prefill.log" | head -12
fi
if has recipe; then
  el "recipe: micro $MICRO, $(left) s left"
  HLM_PROFILE_STEP=1 timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
    --precision bf16 --rows 96 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
    --loss-chunking 2048xfull --matmul-autotune "${AUTOTUNES:-off,on}" --norm-bf16-dx "${NORM_DXS:-off,on}" \
    --mlp-dh "${DHS:-bf16}" --steps 1 --warmup 1 > "$OUT/recipe.log" 2> "$OUT/recipe.err"
  el "bench_distill_step rc=$?"
  grep -E "^distill_step" "$OUT/recipe.log" | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
fi
el done
