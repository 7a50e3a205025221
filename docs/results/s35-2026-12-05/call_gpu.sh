#!/usr/bin/env bash
# Session 35's prepared device calls (H200 or H100) for what this session wrote without a GPU: the bf16 MLP gate/up
# form (HLM_MLP_BF16_GATE_UP: SwigluCuda.Bf16Input*, CudaKeptActivations.* with the form, the A/B in the 4B step), the
# gradient holder built without an upload of zeros (CudaModelZerosLike.*, and every test that trains), and what
# sessions 34-35 left unmeasured ([perf] #20 item 4 on an H200, item 1's all-ones B1×T16384, the kernel trace).
#
# Here, first (build-gpu, sm_90a):
#   ninja -C build-gpu bench/bench_distill_step bench/bench_cuda_kernels tests/cuda/test_cuda_ops \
#     tests/test_cuda_models hybridlm tools/profile/libhlm_kernel_trace.so
#   rm -f out/carry/all.txz.part.*; PIECE_MB=auto bash tools/device/pack_binaries.sh out/carry/all.txz \
#     build-gpu/bench/bench_distill_step build-gpu/bench/bench_cuda_kernels build-gpu/tests/cuda/test_cuda_ops \
#     build-gpu/tests/test_cuda_models build-gpu/hybridlm build-gpu/tools/profile/libhlm_kernel_trace.so
# (Packed at the end of session 35 from a42eeaa's code: two 15.7-MB pieces in out/carry/ of this machine.)
# Then one call per piece but the last, each carrying one piece (the carry limit leaves room for one beside the tree):
#   mkdir -p /tmp/keep && cp out/carry/all.txz.part.NN /tmp/keep/
# and the first call running this script carries the last piece and out/carry/anchors.txz (FLA + peer_probe.py).
#
# PARTS (comma list, run in this order, each only if its expected time fits what is left of BUDGET s, default 560):
#   tests      the whole test_cuda_ops and test_cuda_models (HLM_BINARY = the carried hybridlm), verdicts by
#              tools/device/gtest_counts.sh                                                        (~130 + ~60 s)
#   recipe     ours under the seed's recipe (96 rows per optimizer step, micro-batch $MICRO: 8 on an H200, 2 on an
#              H100, chosen from the card's memory unless set), weight gradients overwrite/epilogue × MLP gate/up
#              fp32/bf16, then the peer's optimizer step
#              (call_h200.sh of session 34 with GATE_UPS=fp32,bf16)                               (~350 s)
#   peer_step  the peer's step of $PEER_ROWS rows (8 on an H200; on an H100 4 without checkpointing, its fastest there,
#              session 35; chosen from the card's memory unless set)                                                                        (~250 s)
#   trace      one 8-row step under the CUPTI kernel tracer (give it a call of its own: session 35's H100 run did not
#              reach its step within 171 s)                                                       (~200 s?)
#   kernels    the LM-head loss by chunking, attention at B1×T16384 with all-ones output gradients, the peer's SDPA
#                                                                                                  (~210 s)
# Results go to $OUT (tests_ops.log, tests_models.log, and the .tgz files of call_h200.sh's parts).
set -u
export OUT=${OUT:-/tmp/call_gpu_out}
mkdir -p "$OUT"
T0=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
has() { case ",${PARTS:-tests}," in *",$1,"*) return 0 ;; esac; return 1; }
mkdir -p /tmp/keep
for f in out/carry/all.txz.part.* out/carry/anchors.txz; do [ -f "$f" ] && cp "$f" /tmp/keep/; done
if [ ! -x /tmp/hlm/bin/test_cuda_models ]; then
  rm -rf /tmp/hlm && mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm || exit 3
fi
ls /tmp/hlm/bin
export LD_LIBRARY_PATH=/tmp/hlm/lib HLM_GOLDEN_DIR=$PWD/tests/golden
. tools/device/gtest_counts.sh
if has tests; then
  timeout 240 /tmp/hlm/bin/test_cuda_ops > "$OUT/tests_ops.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_ops.log" | tail -20
  echo "test_cuda_ops: $(gtest_counts "$OUT/tests_ops.log" "$rc")"
  grep -E "^\[swiglu|Bf16Input" "$OUT/tests_ops.log" | tail -8 | cut -c1-200
  HLM_BINARY=/tmp/hlm/bin/hybridlm timeout 300 /tmp/hlm/bin/test_cuda_models > "$OUT/tests_models.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail -20
  echo "test_cuda_models: $(gtest_counts "$OUT/tests_models.log" "$rc")"
  grep -E "^\[check\] (zeros_like|kept activations|.*gate/up)" "$OUT/tests_models.log" | cut -c1-220
  echo "[$(( $(date +%s) - T0 )) s] tests done, $(left) s left"
fi
rest=$(echo ",${PARTS:-tests}," | sed 's/,tests,/,/; s/^,//; s/,$//')
if [ -n "$rest" ]; then
  # Sizes by the card unless given: an 80-GB H100 holds ours at micro-batch 2 and the peer at 4 rows without
  # checkpointing (session 35); an H200 holds both at 8.
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "${mib:-0}" -lt 100000 ]; then small=1; else small=0; fi
  export MICRO=${MICRO:-$([ $small = 1 ] && echo 2 || echo 8)} PEER_ROWS=${PEER_ROWS:-$([ $small = 1 ] && echo 4 || echo 8)}
  echo "card: ${mib} MiB -> MICRO=$MICRO PEER_ROWS=$PEER_ROWS"
  GATE_UPS=${GATE_UPS:-fp32,bf16} PARTS=$rest BUDGET=$(left) bash docs/results/s34-2026-12-05/call_h200.sh
fi
echo "[$(( $(date +%s) - T0 )) s] done"
