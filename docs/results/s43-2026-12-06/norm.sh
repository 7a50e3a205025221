#!/usr/bin/env bash
# Session 43's check of the batch-1 decode norms in the GEMV prologue ([infer] #18; HLM_DECODE_NORM_PROLOGUE,
# models/cuda/cuda_model.h): binaries out/carry_norm/norm.txz.part.* (bench_generate, test_cuda_ops,
# test_cuda_models; three pieces beside the ~51-MB tracked tree, one per call, kept in /tmp/keep), packed here with
#   PIECE_MB=auto RESERVE_MB=1 bash tools/device/pack_binaries.sh out/carry_norm/norm.txz build-gpu/bench/bench_generate \
#     build-gpu/tests/cuda/test_cuda_ops build-gpu/tests/test_cuda_models
# PARTS (comma list, in this order; none: only keep the carried piece):
#   tests    test_cuda_ops $OPS_FILTER (default MatmulCuda.Gemv*: the prologue against the norm launch + GEMV, byte for
#            byte, and the GEMV's own tests), test_cuda_models $MODELS_FILTER (default CudaEngineFusions.*:CudaEngine*:
#            the engine's decode logits with the prologue on and off, byte for byte, and the other fusions)
#   decode   bench_generate --models $MODELS --contexts 1024 --batches 1 --decode-steps 128
#            --decode-variants no-norm-prologue,norm-prologue,no-norm-prologue,norm-prologue (one process per model)
set -u
export OUT=${OUT:-/tmp/call_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry_norm/norm.txz.part.*; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ -n "${PARTS:-}" ] && [ "${PARTS}" != none ] || { el "kept: $(ls /tmp/keep)"; exit 0; }
if [ ! -x /tmp/hlm/bin/test_cuda_models ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/norm.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  el "tests, $(left) s left"
  timeout $(( $(left) / 3 )) /tmp/hlm/bin/test_cuda_ops --gtest_filter="${OPS_FILTER:-MatmulCuda.Gemv*}" \
    > "$OUT/tests_ops.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail; echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  grep -E "^\[check\]" "$OUT/tests_ops.log" | cut -c1-200
  timeout $(( $(left) / 2 )) /tmp/hlm/bin/test_cuda_models \
    --gtest_filter="${MODELS_FILTER:-CudaEngineFusions.*:CudaEngine*}" > "$OUT/tests_models.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail; echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[fusions\].*(prologue|FAIL)" "$OUT/tests_models.log" | cut -c1-200
  el "tests done, $(left) s left"
fi
if has decode; then
  for m in ${MODELS:-olmo3_7b qwen3_4b olmo_hybrid_7b}; do
    el "decode $m, $(left) s left"
    timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_generate --models "$m" --contexts 1024 --batches 1 \
      --decode-steps 128 --decode-variants no-norm-prologue,norm-prologue,no-norm-prologue,norm-prologue \
      --out "/tmp/decode_$m" > "$OUT/decode_$m.log" 2>&1
    el "bench_generate $m rc=$?"
    grep -E "^\| (olmo|qwen)|norms issued" "$OUT/decode_$m.log" | cut -d'|' -f2,3,9 | cut -c1-160
  done
fi
el done
