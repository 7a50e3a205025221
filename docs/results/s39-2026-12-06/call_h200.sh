#!/usr/bin/env bash
# Session 39's H200 calls: the peer's 4B step, the new code's GPU tests, the 4B step under the seed's recipe.
# Binaries: out/carry/all.txz.part.00-01 (bench_distill_step, test_cuda_ops, test_cuda_models of this session), one
# piece per call into /tmp/keep (the first call also carries out/carry/anchors.txz: FLA + peer_probe.py).
# PARTS (comma list, in this order; BUDGET seconds for the call):
#   peer    SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 peer_probe.py hf_distill (no checkpointing: the peer's fastest
#           setup on an H200); its AdamW step alone is not re-run (session 38: 28.63 ms, session 36: 29.41)  (~350 s)
#   tests   test_cuda_ops $OPS_FILTER (SwigluCuda.*:RmsnormCuda.*), test_cuda_models $MODELS_FILTER
#           (CudaKeptActivations.*:CudaNormBf16Out.*)                                                   (~150 s)
#   recipe  bench_distill_step, 4B, lean, --recompute none, micro-batch 8, 96 rows per step, 2048xfull, defaults
#           (bf16 gate/up, bf16 epilogue, fused RMSNorm backward) × --matmul-autotune $AUTOTUNES (off,on) ×
#           --norm-bf16-dx $NORM_DXS (off) × --mlp-dh $DHS (fp32,bf16), 1 warm-up + 1 timed step each,
#           HLM_PROFILE_STEP=1                                                              (~45 s per entry + ~60 s)
set -u
export OUT=${OUT:-/tmp/call_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry/all.txz.part.* out/carry/anchors.txz; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if has peer; then
  [ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz || exit 3
  el "peer step, $(left) s left"
  SHAPE=qwen3-4b ROWS=8 WITH_FLA=1 STRONG=1 timeout $(( $(left) - 5 )) python3 -u .anchors/peer_probe.py \
    hf_distill > "$OUT/peer_hf_distill.log" 2>&1
  el "peer_probe rc=$?"
  grep -E 'hf_distill|rror' "$OUT/peer_hf_distill.log" | cut -c1-400
fi
has tests || has recipe || { el done; exit 0; }
if [ ! -x /tmp/hlm/bin/bench_distill_step ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  timeout 300 /tmp/hlm/bin/test_cuda_ops --gtest_filter="${OPS_FILTER:-SwigluCuda.*:RmsnormCuda.*}" \
    > "$OUT/tests_ops.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail; echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  timeout 300 /tmp/hlm/bin/test_cuda_models --gtest_filter="${MODELS_FILTER:-CudaKeptActivations.*:CudaNormBf16Out.*}" \
    > "$OUT/tests_models.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail; echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[check\].*(vs the|dh|dx|norm bf16)" "$OUT/tests_models.log" | cut -c1-260
  el "tests done"
fi
if has recipe; then
  el "recipe, $(left) s left"
  HLM_PROFILE_STEP=1 timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_distill_step --shape qwen3-4b \
    --precision bf16 --rows 96 --micro "${MICRO:-8}" --seq 1024 --memory-plan lean --recompute none \
    --loss-chunking 2048xfull --matmul-autotune "${AUTOTUNES:-off,on}" --norm-bf16-dx "${NORM_DXS:-off}" \
    --mlp-dh "${DHS:-fp32,bf16}" \
    --steps 1 --warmup 1 > "$OUT/recipe.log" 2> "$OUT/recipe.err"
  el "bench_distill_step rc=$?"
  grep -E "^distill_step" "$OUT/recipe.log" | sed 's/ precision=bf16 rows=96//; s/, allocator: .*//'
fi
el done
