#!/usr/bin/env bash
# fuzz_background.sh: runs every packed fuzz program (tools/device/pack_fuzz.sh) at once, one process per target, for
# a given time, on CPU cores that another job leaves idle (the GPU machine while a GPU benchmark runs), and leaves ONE
# archive of what they found. Meant to run in the background of a device call:
#
#   bash tools/device/fuzz_background.sh 480 "$OUT" & FUZZ_PID=$!
#   ... the GPU work ...
#   wait $FUZZ_PID            # or: kill -TERM $FUZZ_PID; wait $FUZZ_PID   (stops the fuzzers now, still packs)
#
# Usage: bash tools/device/fuzz_background.sh SECONDS OUTDIR [CARRY_DIR]      (CARRY_DIR default out/carry/fuzz)
#   Each fuzzer gets -max_total_time=SECONDS (wall time, counted from its start; the unpacking before takes a few
#   seconds) at nice 19; the corpus it loads first is the carried one; on SIGTERM/SIGINT the fuzzers get SIGINT, print
#   their final statistics and stop.
# Writes OUTDIR/fuzz-results-<UTC time>.tgz (the device tool brings back at most 8 files, so everything is in one):
#   stats.tsv   target, seconds, executions, new_units (corpus entries added), cov_start, cov_end (libFuzzer's
#               coverage counters at start and end), crashes (crash-/leak-/timeout-/oom- files), slow_units, exit
#   new/<target>/       the new corpus entries (libFuzzer's writable corpus, empty at start)
#   crashes/<target>/   every artifact (crash-, leak-, timeout-, oom-, slow-unit- files)
#   logs/<target>.log   each fuzzer's output (the first and last 300 lines when longer than 2000)
#   meta.txt            the carry's meta.txt, this machine's nproc and load, SECONDS, start and end times, whether
#                       LeakSanitizer could run (below)
# Merge it here with tools/device/fuzz_merge.py (corpora, crash inputs, the running total in docs/reliability.md).
# Environment: FUZZ_RSS_MB (per-process memory limit, default 2048), FUZZ_NICE (default 19), FUZZ_WORK (scratch
# directory, default /tmp/hlm-fuzz-bg), FUZZ_TARGETS (space-separated subset), FUZZ_SITE (default device; `here` when
# run on this machine, so that fuzz_merge.py counts the time as local).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 SECONDS OUTDIR [CARRY_DIR]" >&2; exit 2; }
SECS="$1" OUTDIR="$2"
CARRY="${3:-out/carry/fuzz}"
RSS="${FUZZ_RSS_MB:-2048}" NICE="${FUZZ_NICE:-19}" WORK="${FUZZ_WORK:-/tmp/hlm-fuzz-bg}"
[[ "$SECS" =~ ^[0-9]+$ ]] && [ "$SECS" -gt 0 ] || { echo "fuzz_background: SECONDS must be a positive integer" >&2; exit 2; }
for f in bins.txz inputs.txz; do
  [ -f "$CARRY/$f" ] || { echo "fuzz_background: $CARRY/$f missing (make it with tools/device/pack_fuzz.sh)" >&2; exit 2; }
done
mkdir -p "$OUTDIR" || exit 2
OUTDIR="$(cd "$OUTDIR" && pwd)"
rm -rf "$WORK" && mkdir -p "$WORK/pkg" "$WORK/res/new" "$WORK/res/crashes" "$WORK/res/logs" || exit 2
# tar needs the xz program for .txz; where it is missing, Python's lzma module unpacks instead.
unpack() {
  if command -v xz >/dev/null; then tar xJf "$1" -C "$2"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; fi
}
unpack "$CARRY/bins.txz" "$WORK/pkg" && unpack "$CARRY/inputs.txz" "$WORK/pkg" ||
  { echo "fuzz_background: cannot unpack $CARRY" >&2; exit 2; }
PKG="$WORK/pkg" RES="$WORK/res"
start_utc="$(date -u +%FT%TZ)"

targets=()
if [ -n "${FUZZ_TARGETS:-}" ]; then read -ra targets <<<"$FUZZ_TARGETS"
else for p in "$PKG"/bin/fuzz_*; do t="$(basename "$p")"; targets+=("${t#fuzz_}"); done; fi

# One process per target; fuzz_tokenizer_encode reads its tokenizers from the packed src/ (HLM_FUZZ_SOURCE_DIR).
declare -A pid started
export LD_LIBRARY_PATH="$PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LSAN_OPTIONS="suppressions=$PKG/lsan.supp" HLM_FUZZ_SOURCE_DIR="$PKG/src"
# LeakSanitizer stops the process's threads with ptrace to scan them; a sandbox that refuses that (the GPU machine runs
# under gVisor) makes every fuzzer die at its first leak check. A short trial run decides; without it, leaks go
# undetected there (ASan and UBSan still work) and meta.txt says so.
leaks=1
mkdir -p "$WORK/trial"
HLM_FUZZ_TMP="$WORK/trial" "$PKG/bin/fuzz_${targets[0]}" -runs=500 -detect_leaks=1 "$WORK/trial" >"$WORK/trial.log" 2>&1
grep -q "LeakSanitizer has encountered a fatal error" "$WORK/trial.log" && leaks=0
for t in "${targets[@]}"; do
  prog="$PKG/bin/fuzz_$t"
  [ -x "$prog" ] || { echo "fuzz_background: no program fuzz_$t in the carry" >&2; continue; }
  mkdir -p "$RES/new/$t" "$RES/crashes/$t" "$WORK/tmp/$t" "$PKG/corpus/$t"
  # The first corpus directory is the writable one: it starts empty, so it holds exactly the new entries.
  HLM_FUZZ_TMP="$WORK/tmp/$t" nice -n "$NICE" "$prog" -max_total_time="$SECS" -rss_limit_mb="$RSS" -timeout=25 \
    -max_len=65536 -detect_leaks=$leaks -print_final_stats=1 -artifact_prefix="$RES/crashes/$t/" "$RES/new/$t" "$PKG/corpus/$t" \
    >"$WORK/$t.log" 2>&1 &
  pid[$t]=$! started[$t]=$(date +%s)
done
[ ${#pid[@]} -gt 0 ] || { echo "fuzz_background: no fuzz program started" >&2; exit 2; }

stop() { local k; for k in "${!pid[@]}"; do kill -INT "${pid[$k]}" 2>/dev/null; done; }
trap stop TERM INT
declare -A rc secs
for t in "${!pid[@]}"; do
  # wait returns early when a trapped signal arrives: wait again until this fuzzer has really ended.
  while kill -0 "${pid[$t]}" 2>/dev/null; do wait "${pid[$t]}"; rc[$t]=$?; done
  [ -n "${rc[$t]:-}" ] || { wait "${pid[$t]}"; rc[$t]=$?; }
  secs[$t]=$(( $(date +%s) - started[$t] ))
done
trap - TERM INT

last_num() { grep -oE "$1" "$2" | grep -oE '[0-9]+$' | tail -1; }
printf 'target\tseconds\texecutions\tnew_units\tcov_start\tcov_end\tcrashes\tslow_units\texit\n' >"$RES/stats.tsv"
for t in "${targets[@]}"; do
  [ -n "${pid[$t]:-}" ] || continue
  log="$WORK/$t.log"
  execs=$(last_num 'stat::number_of_executed_units: *[0-9]+' "$log")
  newu=$(last_num 'stat::new_units_added: *[0-9]+' "$log")
  cov0=$(grep -m1 -oE 'INITED cov: [0-9]+' "$log" | grep -oE '[0-9]+$')
  cov1=$(last_num '(NEW|REDUCE|pulse|DONE|INITED) +cov: [0-9]+' "$log")
  crashes=$(find "$RES/crashes/$t" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  slow=$(find "$RES/crashes/$t" -type f -name 'slow-unit-*' | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${secs[$t]}" "${execs:-?}" "${newu:-?}" "${cov0:-?}" "${cov1:-?}" \
    "$crashes" "$slow" "${rc[$t]}" >>"$RES/stats.tsv"
  if [ "$(wc -l <"$log")" -gt 2000 ]; then
    { head -300 "$log"; echo "... ($(wc -l <"$log") lines; middle left out) ..."; tail -300 "$log"; } >"$RES/logs/$t.log"
  else cp "$log" "$RES/logs/$t.log"; fi
done
{
  cat "$PKG/meta.txt"
  echo "site ${FUZZ_SITE:-device}"
  echo "where $(uname -n) nproc $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "seconds $SECS"; echo "start $start_utc"; echo "end $(date -u +%FT%TZ)"
  echo "leak_detection $leaks"
} >"$RES/meta.txt"
archive="$OUTDIR/fuzz-results-$(date -u +%Y%m%dT%H%M%SZ).tgz"
tar czf "$archive" -C "$RES" stats.tsv meta.txt new crashes logs
# The device tool brings back files of at most 16 MiB: drop the logs first, then the new corpus entries.
if [ "$(stat -c %s "$archive")" -gt $((15 * 1048576)) ]; then
  tar czf "$archive" -C "$RES" stats.tsv meta.txt new crashes
  [ "$(stat -c %s "$archive")" -le $((15 * 1048576)) ] || tar czf "$archive" -C "$RES" stats.tsv meta.txt crashes
fi
echo "fuzz_background: $archive ($(du -h "$archive" | cut -f1))"
column -t "$RES/stats.tsv" 2>/dev/null || cat "$RES/stats.tsv"
rm -rf "$WORK"
