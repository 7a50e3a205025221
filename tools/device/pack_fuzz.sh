#!/usr/bin/env bash
# pack_fuzz.sh: one command that packs the libFuzzer programs of the fuzz build and their corpora into a carry for the
# GPU machine, where tools/device/fuzz_background.sh runs them on the CPU cores a GPU job leaves idle.
#
# Usage: bash tools/device/pack_fuzz.sh [--build] [--no-tokenizers] [OUT_DIR]      (OUT_DIR default out/carry/fuzz)
#   --build          first (re)build the fuzz programs (clang, build-fuzz; configured as `make fuzz` does)
#   --no-tokenizers  leave out the four real tokenizer.json files (about 9 MB of the carry); fuzz_tokenizer_encode then
#                    fuzzes the built-in and the two fixture tokenizers only
# Writes into OUT_DIR (git-ignored under out/; name it in the device tool's `carry`):
#   bins.txz    bin/fuzz_<target> (stripped) + lib/<shared libraries they need> (tools/device/pack_binaries.sh: all
#               but the C library family and libstdc++/libgcc_s, which the GPU machine has). libFuzzer and the
#               ASan/UBSan runtimes are linked statically by clang.
#   inputs.txz  corpus/<target>/ (this machine's grown corpus build-fuzz/fuzz-corpus/<target> + fuzz/seeds/<target> +
#               fuzz/regressions/<target>), src/ (the files fuzz_tokenizer_encode reads: the tokenizer fixtures and, unless
#               --no-tokenizers, data/tokenizers/*/tokenizer.json), lsan.supp, meta.txt (commit, date, targets)
# Environment: FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
build=0 tokenizers=1 out=out/carry/fuzz
for a in "$@"; do
  case "$a" in
    --build) build=1 ;;
    --no-tokenizers) tokenizers=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "pack_fuzz: unknown option $a (see --help)" >&2; exit 2 ;;
    *) out="$a" ;;
  esac
done
[ "$build" = 0 ] || make fuzz-build FUZZ_BUILD_DIR="$BUILD"
mapfile -t progs < <(ls "$BUILD"/fuzz/fuzz_* 2>/dev/null | grep -v '\.' || true)
[ ${#progs[@]} -gt 0 ] || { echo "pack_fuzz: no fuzz programs in $BUILD/fuzz (run make fuzz, or pass --build)" >&2; exit 2; }
# A program older than a source file would fuzz stale code: say so (mtimes; `ninja -n` cannot tell here, since the
# glob check of the build re-runs CMake first).
oldest="$(ls -tr "${progs[@]}" | head -1)"
stale=$(find src fuzz \( -name '*.cpp' -o -name '*.h' \) -newer "$oldest" | wc -l)
[ "$stale" = 0 ] || echo "pack_fuzz: warning: $stale source files are newer than $oldest; pass --build" >&2
mkdir -p "$out"
bash tools/device/pack_binaries.sh "$out/bins.txz" "${progs[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
targets=()
for p in "${progs[@]}"; do
  t="$(basename "$p")"; t="${t#fuzz_}"; targets+=("$t")
  mkdir -p "$stage/corpus/$t"
  for d in "$BUILD/fuzz-corpus/$t" "fuzz/seeds/$t" "fuzz/regressions/$t"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name '*.md' -exec cp -n -t "$stage/corpus/$t/" {} +
  done
done
mkdir -p "$stage/src/tests/golden/tokenizer"
cp -r tests/golden/tokenizer/fixtures "$stage/src/tests/golden/tokenizer/"
if [ "$tokenizers" = 1 ]; then
  for f in data/tokenizers/*/tokenizer.json; do
    [ -f "$f" ] || continue
    mkdir -p "$stage/src/$(dirname "$f")" && cp "$f" "$stage/src/$f"
  done
fi
cp tools/sanitize/lsan.supp "$stage/"
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src fuzz 2>/dev/null || echo '-dirty')"
  echo "built $(date -u -r "$oldest" +%FT%TZ) (the oldest program's time; the commit below is the one at packing)"
  echo "packed $(date -u +%FT%TZ)"
  echo "targets ${targets[*]}"
} >"$stage/meta.txt"
tar cf - -C "$stage" corpus src lsan.supp meta.txt | xz -T2 -6 >"$out/inputs.txz"
total=$(du -cb "$out/bins.txz" "$out/inputs.txz" | tail -1 | cut -f1)
echo "pack_fuzz: $out/bins.txz $(du -h "$out/bins.txz" | cut -f1), $out/inputs.txz $(du -h "$out/inputs.txz" | cut -f1)" \
     "(together $((total / 1048576)) MiB of the device tool's 64 MiB); ${#targets[@]} targets: ${targets[*]}"
[ "$total" -lt $((64 * 1048576)) ] || { echo "pack_fuzz: over 64 MiB: pass --no-tokenizers" >&2; exit 1; }
