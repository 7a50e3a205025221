#!/usr/bin/env bash
# Checks pack_binaries.sh's SLIM_LIBS=1 on a test program of this build (argument: its path, e.g. test_models, which
# links OpenBLAS and ICU): the archive holds the small stand-ins (libopenblas.so.0 a shim over the reference
# libblas.so.3, libicudata a stub) and none of what only OpenBLAS needed (libgfortran); the unpacked program, run on
# the archive's libraries alone, passes its golden tests (CPU matrix products through the reference BLAS); and without
# SLIM_LIBS the real libraries are packed. Run by ctest (device_pack_slim, label cpu): exit 0 when every check holds.
set -u
prog="${1:?usage: test_pack_slim.sh PROGRAM (a GoogleTest program linking OpenBLAS and ICU)}"
filter="${2:-*MatchHF*}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
SLIM_LIBS=1 bash "$here/pack_binaries.sh" "$dir/slim.tgz" "$prog" > "$dir/log" 2>&1 \
  || { echo "FAIL: pack_binaries SLIM_LIBS=1 exited non-zero: $(cat "$dir/log")"; exit 1; }
bash "$here/pack_binaries.sh" "$dir/full.tgz" "$prog" > "$dir/log" 2>&1 \
  || { echo "FAIL: pack_binaries exited non-zero: $(cat "$dir/log")"; exit 1; }
mkdir -p "$dir/slim" "$dir/full"
tar xzf "$dir/slim.tgz" -C "$dir/slim" && tar xzf "$dir/full.tgz" -C "$dir/full" || { echo "FAIL: unpacking"; exit 1; }
bad=0
size() { stat -c %s "$1" 2>/dev/null || echo missing; }
for lib in libopenblas.so.0 libicudata.so.*; do
  f=$(ls "$dir"/slim/lib/$lib 2>/dev/null | head -1)
  s=$(size "${f:-none}")
  [ "$s" != missing ] && [ "$s" -lt 65536 ] || { echo "FAIL: slim $lib: $s bytes, want a stand-in under 64 KiB"; bad=1; }
  f=$(ls "$dir"/full/lib/$lib 2>/dev/null | head -1)
  s=$(size "${f:-none}")
  [ "$s" != missing ] && [ "$s" -gt 1048576 ] || { echo "FAIL: full $lib: $s bytes, want the real library"; bad=1; }
done
[ -f "$dir/slim/lib/libblas.so.3" ] || { echo "FAIL: the slim archive lacks libblas.so.3"; bad=1; }
ls "$dir"/slim/lib/libgfortran* > /dev/null 2>&1 && { echo "FAIL: the slim archive keeps libgfortran"; bad=1; }
# The program on the archive's libraries alone (the C/C++ runtimes come from the system, as on the GPU machine).
resolved=$(LD_LIBRARY_PATH="$dir/slim/lib" ldd "$dir/slim/bin/$(basename "$prog")")
grep -q "libopenblas.so.0 => $dir/slim/lib/" <<< "$resolved" || { echo "FAIL: libopenblas.so.0 not the stand-in: $resolved"; bad=1; }
if LD_LIBRARY_PATH="$dir/slim/lib" "$dir/slim/bin/$(basename "$prog")" --gtest_filter="$filter" > "$dir/run.log" 2>&1; then
  grep -qE "^\[  PASSED  \] [1-9]" "$dir/run.log" || { echo "FAIL: no test ran under '$filter'"; bad=1; }
else
  echo "FAIL: the slim program's tests failed:"; tail -20 "$dir/run.log"; bad=1
fi
[ "$bad" -eq 0 ] && echo "ok: slim stand-ins packed and $(grep -oE '^\[  PASSED  \] [0-9]+' "$dir/run.log" | grep -oE '[0-9]+$') tests pass on them"
exit "$bad"
