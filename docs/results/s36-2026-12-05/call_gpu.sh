#!/usr/bin/env bash
# Session 36's second device call set (H200 or H100): the GPU tests of this session's changes, then the 4B step under
# the seed's recipe (96 rows per optimizer step) with every new switch A/B'd in one process against the old defaults.
# Binaries: packed from 95e7e26 (README.md beside this script).
# Changes under test: the fused residual + norm loading its delta before any store and the norm's dx kernel with
# 32-bit indices (ops/rmsnorm/rmsnorm.cu, no switch: in every entry), HLM_NORM_BF16_OUT also writing the kept bf16
# input (models/cuda/cuda_model.cpp), the bf16 gate/up test measured against the bf16 mode's own difference,
# HLM_MATMUL_AUTOTUNE (ops/matmul/matmul.cu, beta 0 and beta ≠ 0); the attach's phases (HLM_PROFILE_STEP's new
# "profile attach:" line, train/cuda/cuda_train_device.cpp).
#
# Here, first (build-gpu, sm_90a):
#   ninja -C build-gpu bench/bench_distill_step tests/cuda/test_cuda_ops tests/test_cuda_models hybridlm
#   rm -f out/carry/all.txz.part.*; PIECE_MB=auto bash tools/device/pack_binaries.sh out/carry/all.txz \
#     build-gpu/bench/bench_distill_step build-gpu/tests/cuda/test_cuda_ops build-gpu/tests/test_cuda_models \
#     build-gpu/hybridlm
# One call per piece but the last, each carrying one piece (mkdir -p /tmp/keep && cp out/carry/all.txz.part.NN
# /tmp/keep/); the call running this script carries the last piece.
#
# PARTS (comma list, in this order):
#   tests   the whole test_cuda_ops and test_cuda_models (HLM_BINARY = the carried hybridlm)            (~175 s)
#   recipe  bench_distill_step, 4B, lean, --recompute none, micro-batch $MICRO (8 on an H200, 2 on an H100), 96 rows
#           per step, overwrite weight gradients, gate/up fp32|bf16 × norm16 off|on × autotune off|on, 1 warm-up
#           + 1 timed step each (HLM_PROFILE_STEP=1 as every recipe figure before)                       (~230 s)
set -u
export OUT=${OUT:-/tmp/call_gpu_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s)
has() { case ",${PARTS:-tests,recipe}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry/all.txz.part.*; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
if [ ! -x /tmp/hlm/bin/test_cuda_models ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
ls /tmp/hlm/bin
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
if has tests; then
  timeout 240 /tmp/hlm/bin/test_cuda_ops > "$OUT/tests_ops.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail -20
  echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  grep -E "^\[check\] matmul autotune" "$OUT/tests_ops.log"
  HLM_BINARY=/tmp/hlm/bin/hybridlm timeout 300 /tmp/hlm/bin/test_cuda_models > "$OUT/tests_models.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail -20
  echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[check\] (norm bf16 out|.*gate/up)" "$OUT/tests_models.log" | cut -c1-260
  echo "[$(( $(date +%s) - T0 )) s] tests done"
fi
if has recipe; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  MICRO=${MICRO:-$([ "${mib:-0}" -lt 100000 ] && echo 2 || echo 8)}
  echo "[$(( $(date +%s) - T0 )) s] recipe: micro $MICRO"
  # Within BUDGET seconds of this call (default 560) when STEP_TIMEOUT is not given: entries print as they finish.
  step_timeout=${STEP_TIMEOUT:-$(( ${BUDGET:-560} - ($(date +%s) - T0) - 10 ))}
  echo "recipe: time limit ${step_timeout} s"
  HLM_PROFILE_STEP=1 HLM_MATMUL_LOG_ALGO=1 timeout "$step_timeout" /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
    --precision bf16 --rows 96 --micro "$MICRO" --seq 1024 --memory-plan lean --recompute none \
    --loss-chunking 2048xfull --dw-paths overwrite --mlp-gate-up fp32,bf16 --norm-bf16-out off,on \
    --matmul-autotune off,on --steps 1 --warmup 1 > "$OUT/recipe.log" 2> "$OUT/recipe.err"
  echo "bench_distill_step rc=$?"
  grep -E "^distill_step" "$OUT/recipe.log" | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
  grep -E "^profile +attach" "$OUT/recipe.err"
  grep -c "autotune picked" "$OUT/recipe.err"
fi
echo "[$(( $(date +%s) - T0 )) s] done"
