#!/usr/bin/env bash
# run_suites.sh: the CUDA test suites and the benchmarks from binaries built HERE and carried, in one device call
# (the device image cannot build the full project: it lacks the Debian -dev packages; tools/device/run_cuda_tests.sh
# builds only the op tests there).
#
# Here, first:
#   cmake --build build --target hybridlm test_cuda_ops test_cuda_models bench_cuda_kernels bench_distill_step \
#       bench_memory_ops
#   bash tools/device/pack_binaries.sh out/carry/bins.tgz build/hybridlm build/tests/cuda/test_cuda_ops \
#       build/tests/test_cuda_models build/bench/bench_cuda_kernels build/bench/bench_distill_step \
#       build/bench/bench_memory_ops
# Then, with the device tool (carry out/carry, and .anchors for the peer section; see ../shared/bench/README.md):
#   bash tools/device/run_suites.sh [tests] [sanitize] [bench] [peer]   (tests, bench, peer when none is given)
# Sections:
#   tests     test_cuda_ops, test_cuda_models (HLM_GOLDEN_DIR / HLM_BINARY point at this checkout and the carried
#             binary)
#   sanitize  compute-sanitizer on the carried test_cuda_ops: memcheck on every test but the deliberate out-of-memory
#             one, racecheck and synccheck on the kernels that share memory inside a block (HLM_RACECHECK overrides
#             that filter); prints each tool's ERROR SUMMARY line, log in sanitizer.log
#   bench  bench_cuda_kernels (gdn, attn, decode, lmhead), bench_memory_ops (conv, norms) and bench_distill_step
#          --precision bf16
#   peer   python3 .anchors/peer_probe.py env sdpa fla, then the best peer distillation step (WITH_FLA=1 STRONG=1
#          hf_distill), in separate processes
#   trace  bench_distill_step --precision bf16 --steps 3 under the CUPTI kernel tracer (docs/profiling.md; pack
#          build/tools/profile/libhlm_kernel_trace.so too): per-kernel times and GPU idle time of the timed steps
#   ncu    Nsight Compute (speed of light, occupancy, warp stalls, launch statistics) on one launch of each chunked GDN
#          kernel at B8×T1024 H32 and of each tensor-core attention kernel (bench_cuda_kernels gdn / attn)
# Logs go to $OUT (at most 8 files come back): tests_ops.log, tests_models.log, sanitizer.log, bench.log, peer.log,
# peer_distill.log, trace.txt (+ trace.tsv), ncu.txt. Each section prints its summary lines; a section's failure does not stop the next one.
# The tests and sanitize sections print, per program, the counts of tests run / passed / failed / skipped / unfinished
# and a verdict (tools/device/gtest_counts.sh): FAIL when no test ran or any skipped (here a skip always means "CUDA
# unavailable"), failed or did not finish, or the program exited non-zero.
# Exit status: 0 when every test section's verdict is PASS, 1 otherwise.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
. "$ROOT/tools/device/gtest_counts.sh"
OUT="${OUT:-$ROOT/out/suites}"
mkdir -p "$OUT" /tmp/hlm
bins="$(ls out/carry/bins.tgz out/carry/bins.txz 2>/dev/null | head -1)"
[ -n "$bins" ] || { echo "run_suites: out/carry/bins.tgz (or .txz) is missing (see the header)" >&2; exit 2; }
tar xf "$bins" -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(tests bench peer)
status=0
for section in "${sections[@]}"; do
  SECONDS=0
  case "$section" in
    tests)
      timeout 200 "$B/test_cuda_ops" >"$OUT/tests_ops.log" 2>&1
      rc=$?
      grep -E "^\[  FAILED  \] .* ms\)$| FAIL$" "$OUT/tests_ops.log" | tail -20
      verdict="$(gtest_counts "$OUT/tests_ops.log" "$rc")" || status=1
      echo "test_cuda_ops: $verdict"
      HLM_GOLDEN_DIR="$ROOT/tests/golden" HLM_BINARY="$B/hybridlm" timeout 300 "$B/test_cuda_models" \
        >"$OUT/tests_models.log" 2>&1
      rc=$?
      grep -E "^\[  FAILED  \] .* ms\)$" "$OUT/tests_models.log" | tail -20
      verdict="$(gtest_counts "$OUT/tests_models.log" "$rc")" || status=1
      echo "test_cuda_models: $verdict" ;;
    sanitize)
      # racecheck is slow (AttentionCuda.BackwardF32 alone takes ~260 s under it), so that test is left to memcheck
      # and synccheck; each tool gets its own timeout and its own summary line.
      san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
      shared="Attention*:GatedDeltaRule*:Cast*:Rmsnorm*:L2norm*:GatedRmsnorm*:LogSoftmax*:LmHeadLoss*"
      race="${HLM_RACECHECK:-$shared-AttentionCuda.BackwardF32}"
      : >"$OUT/sanitizer.log"
      for tool in memcheck racecheck synccheck; do
        case "$tool" in memcheck) filter="*-CudaAllocator.OutOfMemory*" ;; racecheck) filter="$race" ;;
          *) filter="$shared" ;; esac
        log="$(mktemp)"
        timeout 400 "$san" --tool "$tool" --error-exitcode 9 "$B/test_cuda_ops" --gtest_filter="$filter" \
          >"$log" 2>&1
        rc=$?
        { echo "### $tool ($filter)"; cat "$log"; } >>"$OUT/sanitizer.log"
        verdict="$(gtest_counts "$log" "$rc")" || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 || true); $verdict"
        rm -f "$log"
      done ;;
    bench)
      { timeout 150 "$B/bench_cuda_kernels"; timeout 60 "$B/bench_memory_ops";
        timeout 120 "$B/bench_distill_step" --precision bf16 --steps 3; } >"$OUT/bench.log" 2>&1
      grep -vE "^step |^memory plan|^setup|^device" "$OUT/bench.log" ;;
    peer)
      [ -f .anchors/peer_probe.py ] || { echo "peer: .anchors/peer_probe.py not carried"; continue; }
      PYTHONUNBUFFERED=1 timeout 200 python3 .anchors/peer_probe.py env sdpa fla >"$OUT/peer.log" 2>&1
      grep -v "^ " "$OUT/peer.log" | cut -c1-300 | tail -12
      PYTHONUNBUFFERED=1 WITH_FLA=1 STRONG=1 timeout 240 python3 .anchors/peer_probe.py hf_distill \
        >"$OUT/peer_distill.log" 2>&1
      tail -3 "$OUT/peer_distill.log" | cut -c1-300 ;;
    trace)
      [ -f /tmp/hlm/lib/libhlm_kernel_trace.so ] || { echo "trace: libhlm_kernel_trace.so not packed"; continue; }
      source "$(dirname "$0")/cupti_dir.sh"
      cupti="$(cupti_dir)"
      echo "trace: CUPTI in $cupti"
      # LD_PRELOAD through env, so that only the bench (not the timeout wrapper) loads the tracer.
      HLM_TRACE_RANGE=profiler HLM_TRACE_OUT="$OUT/trace.txt" HLM_TRACE_TSV="$OUT/trace.tsv" HLM_PROFILE_STEP=1 \
        timeout 150 env LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cupti" \
        LD_PRELOAD=/tmp/hlm/lib/libhlm_kernel_trace.so "$B/bench_distill_step" --precision bf16 --steps 3 2>&1 |
        grep -vE "^memory plan|^setup|^device"
      head -45 "$OUT/trace.txt" | cut -c1-200 ;;
    ncu)
      ncu_="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
      sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis)
      gdn='regex:^(prep|state|output|du_local|dstate|dqk|wy)_kernel$'
      { timeout 200 "$ncu_" --clock-control none "${sections[@]}" -k "$gdn" --launch-count 60 \
          "$B/bench_cuda_kernels" gdn
        timeout 100 "$ncu_" --clock-control none "${sections[@]}" -k 'regex:^tc_forward_kernel' --launch-count 1 \
          "$B/bench_cuda_kernels" attn
        timeout 100 "$ncu_" --clock-control none "${sections[@]}" -k 'regex:^tc_(dkdv|dq)_kernel' --launch-count 2 \
          "$B/bench_cuda_kernels" attn; } >"$OUT/ncu.txt" 2>&1
      grep -E "^  [a-z_]+.*\(|Duration|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Shared Memory Configuration Size" "$OUT/ncu.txt" | head -80 ;;
    *) echo "run_suites: unknown section '$section' (tests, sanitize, bench, peer, trace, ncu)" >&2; exit 2 ;;
  esac
  echo "== $section: ${SECONDS}s"
done
exit $status
