#!/usr/bin/env bash
# run_fuzzers.sh: runs the libFuzzer programs of a fuzz build (fuzz/CMakeLists.txt, `make fuzz`) one after another,
# each for a fixed time, and records what each did.
#
# Usage: bash fuzz/run_fuzzers.sh [target...]          (default: every fuzz_* program of the build)
# Environment (all optional):
#   FUZZ_BUILD_DIR  the fuzz build (default build-fuzz)
#   FUZZ_SECONDS    run time per target (default 60)
#   FUZZ_RSS_MB     memory limit per process; a larger single allocation is reported as a finding (default 2048)
#   FUZZ_NICE       nice level of the fuzzers (default 19: the machine is shared)
# Per target, under the build dir: fuzz-corpus/<t>/ (the growing corpus, started from fuzz/seeds/<t> and the committed
# regressions), fuzz-crashes/<t>/ (inputs that broke the contract: copy each into fuzz/regressions/<t>/ once fixed),
# fuzz-logs/<t>.log; one line per run is appended to fuzz-stats.tsv:
#   date  target  seconds  executions  exec/s  corpus files  new crash files  exit status
# and one to fuzz/ledger.tsv (the running total of all runs, committed), whose table in docs/reliability.md is rewritten.
# Exit status: 0 when no target found anything, 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECS="${FUZZ_SECONDS:-60}"
RSS="${FUZZ_RSS_MB:-2048}"
NICE="${FUZZ_NICE:-19}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for p in "$BUILD"/fuzz/fuzz_*; do [ -x "$p" ] && targets+=("$(basename "$p" | sed 's/^fuzz_//')"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "run_fuzzers: no fuzz programs in $BUILD/fuzz (run make fuzz)" >&2; exit 2; }
mkdir -p "$BUILD/fuzz-logs"
STATS="$BUILD/fuzz-stats.tsv"
[ -f "$STATS" ] || printf 'date\ttarget\tseconds\texecutions\texec_per_s\tcorpus_files\tnew_crash_files\texit\n' >"$STATS"
found=0
for t in "${targets[@]}"; do
  prog="$BUILD/fuzz/fuzz_$t"
  [ -x "$prog" ] || { echo "run_fuzzers: $prog not built" >&2; found=1; continue; }
  corpus="$BUILD/fuzz-corpus/$t" crashes="$BUILD/fuzz-crashes/$t" log="$BUILD/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$crashes"
  cp -n "$ROOT/fuzz/seeds/$t/"* "$corpus/" 2>/dev/null || true
  [ -d "$ROOT/fuzz/regressions/$t" ] && cp -n "$ROOT/fuzz/regressions/$t/"* "$corpus/" 2>/dev/null
  before=$(ls "$crashes" | wc -l)
  start=$(date +%s)
  # -timeout: one input taking longer is a hang (a finding); -max_len bounds the inputs the fuzzer makes up.
  LSAN_OPTIONS="suppressions=$ROOT/tools/sanitize/lsan.supp" HLM_FUZZ_TMP="${TMPDIR:-/tmp}" nice -n "$NICE" "$prog" -max_total_time="$SECS" -rss_limit_mb="$RSS" -timeout=25 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  units=$(grep -oE 'stat::new_units_added: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  new=$(( $(ls "$crashes" | wc -l) - before ))
  now="$(date -u +%FT%TZ)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$now" "$t" "$secs" "${execs:-?}" "${rate:-?}" \
    "$(ls "$corpus" | wc -l)" "$new" "$rc" >>"$STATS"
  # The running total of every run, here and on the GPU machine (fuzz/ledger.tsv, table in docs/reliability.md).
  python3 "$ROOT/fuzz/ledger.py" add here "$t" "$secs" "${execs:-?}" "${units:-?}" "$new" "run_fuzzers $now"
  echo "fuzz_$t: ${secs}s, ${execs:-?} executions (${rate:-?}/s), exit $rc, new crash files: $new"
  if [ "$rc" -ne 0 ] || [ "$new" -gt 0 ]; then
    found=1
    grep -E "ERROR: |SUMMARY: |hybridlm fuzz finding|runtime error" "$log" | head -5 | sed 's/^/  /'
  fi
done
python3 "$ROOT/fuzz/ledger.py" doc
exit $found
