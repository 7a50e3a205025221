#!/usr/bin/env bash
# Session 42's decode-attention check ([infer] #18): binaries out/carry_dec/dec.txz.part.* (bench_generate,
# bench_cuda_kernels, test_cuda_ops; two pieces beside the ~49-MB tracked tree, one per call, kept in /tmp/keep), packed
# here with
#   PIECE_MB=auto RESERVE_MB=1 bash tools/device/pack_binaries.sh out/carry_dec/dec.txz build-gpu/bench/bench_generate \
#     build-gpu/bench/bench_cuda_kernels build-gpu/tests/cuda/test_cuda_ops
# PARTS (comma list, in this order):
#   tests    test_cuda_ops AttentionCache*:AttentionDecodePrep* (every decode kernel and split merge against the CPU
#            reference, the merges bit for bit against each other, bad metadata)
#   kernels  bench_cuda_kernels attn_decode: the decode attention alone, by kernel form and shape
#   decode   bench_generate --models $MODELS --contexts 1024 --batches 1 --decode-steps 128
#            --decode-variants default,fused-merge,default,fused-merge (one process per model)
set -u
export OUT=${OUT:-/tmp/call_out}
mkdir -p "$OUT" /tmp/keep
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
has() { case ",${PARTS:-}," in *",$1,"*) return 0 ;; esac; return 1; }
for f in out/carry_dec/dec.txz.part.*; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ -n "${PARTS:-}" ] && [ "${PARTS}" != none ] || { el "kept: $(ls /tmp/keep)"; exit 0; }
if [ ! -x /tmp/hlm/bin/bench_generate ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/dec.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  el "tests, $(left) s left"
  timeout $(( $(left) / 2 )) /tmp/hlm/bin/test_cuda_ops --gtest_filter="${OPS_FILTER:-AttentionCache*:AttentionDecodePrep*}" \
    > "$OUT/tests_ops.log" 2>&1
  rc=$?; grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail; echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
fi
if has kernels; then
  el "kernels, $(left) s left"
  timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_cuda_kernels attn_decode > "$OUT/kernels.log" 2>&1
  el "bench_cuda_kernels rc=$?"; grep -E "^attn_decode" "$OUT/kernels.log" | cut -c1-112
fi
if has decode; then
  for m in ${MODELS:-olmo3_7b olmo_hybrid_7b qwen3_4b}; do
    el "decode $m, $(left) s left"
    timeout $(( $(left) - 5 )) /tmp/hlm/bin/bench_generate --models "$m" --contexts 1024 --batches 1 \
      --decode-steps 128 --decode-variants default,fused-merge,default,fused-merge --out "/tmp/decode_$m" \
      > "$OUT/decode_$m.log" 2>&1
    el "bench_generate $m rc=$?"
    grep -E "^\| (olmo|qwen)" "$OUT/decode_$m.log" | cut -d'|' -f2,3,9
  done
fi
el done
