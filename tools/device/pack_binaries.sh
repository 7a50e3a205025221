#!/usr/bin/env bash
# pack_binaries.sh: packs programs built HERE (Debian bookworm, nvcc, sm_90a) for the GPU machine, whose image lacks
# the Debian -dev/runtime packages the full build links against (OpenBLAS, zstd, PCRE2, ICU, GoogleTest).
#
# Usage: [SLIM_LIBS=1] [STRIP_PTX=1] [PIECE_MB=N|auto [RESERVE_MB=2]] bash tools/device/pack_binaries.sh OUT_TGZ PROGRAM|LIB.so...   (OUT ending in .txz: xz -9)
#   Writes OUT_TGZ holding bin/<program> (stripped) and lib/<the shared libraries they need>, except the C library
#   family and the CUDA libraries (CUPTI and NCCL included), which the GPU machine has. An argument ending in .so is a
#   shared
#   library of ours (e.g. build/tools/profile/libhlm_kernel_trace.so, docs/profiling.md): it goes to lib/ itself. Put OUT_TGZ under a git-ignored folder (out/carry/) and
#   name that folder in the device tool's `carry`; there:
#     mkdir -p /tmp/hlm && tar xzf out/carry/bins.tgz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
#     /tmp/hlm/bin/hybridlm --help
# Programs keep their build-tree paths to goldens (HLM_GOLDEN_DIR is compiled in as an absolute path of THIS checkout,
# /work/main/tests/golden), so run tests from a checkout at the same path or with their own path options.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_TGZ PROGRAM|LIB.so..." >&2; exit 2; }
out="$1"; shift
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for prog in "$@"; do
  if [[ "$prog" == *.so ]]; then
    [ -f "$prog" ] || { echo "pack_binaries: $prog is not a file" >&2; exit 2; }
    strip --strip-unneeded -o "$stage/lib/$(basename "$prog")" "$prog"
  else
    [ -x "$prog" ] || { echo "pack_binaries: $prog is not an executable" >&2; exit 2; }
    strip -o "$stage/bin/$(basename "$prog")" "$prog"
  fi
  # Libraries that the GPU machine brings itself: glibc's family, libstdc++/libgcc (newer there), CUDA's own.
  ldd "$prog" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*.so*|libnvrtc*.so*|libcupti.so*|libnccl.so*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
done
# SLIM_LIBS=1: two large libraries replaced by small stand-ins, so that four programs fit one call's carry (session 45:
# libicudata is 31 MB / 7.5 MB xz, OpenBLAS 36.5 MB / 4.2 MB xz, of a ~22-MB pack). Only for GPU runs that never
# tokenize text and do little CPU matrix work (CUDA tests, benches on random weights):
#   libicudata.so.NN  a stub whose common data fails ICU's header check: ICU then reports U_INVALID_FORMAT_ERROR,
#                     so a tokenizer's normalizer fails with a clear error instead of running (none of these programs
#                     tokenizes on the GPU machine);
#   libopenblas.so.0  a shim that keeps OpenBLAS's thread-count calls (no-ops) over Debian's reference BLAS
#                     (libblas.so.3: cblas_sgemm/dgemm, single-threaded, slower on the CPU references, same results
#                     within the tests' stated tolerances).
if [ "${SLIM_LIBS:-0}" = 1 ]; then
  ref_blas=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3
  for lib in "$stage"/lib/libicudata.so.*; do
    [ -e "$lib" ] || continue
    ver=$(basename "$lib" | sed -n 's/^libicudata\.so\.\([0-9]*\).*/\1/p')
    printf '__attribute__((aligned(16))) const unsigned char icudt%s_dat[64] = {0};\n' "$ver" > "$stage/icudata_stub.c"
    gcc -shared -fPIC -O2 -Wl,-soname,libicudata.so."$ver" -o "$lib" "$stage/icudata_stub.c"
  done
  if [ -e "$stage/lib/libopenblas.so.0" ]; then
    [ -f "$ref_blas" ] || { echo "pack_binaries: SLIM_LIBS needs $ref_blas (Debian libblas3)" >&2; exit 2; }
    printf 'void openblas_set_num_threads(int n) { (void)n; }\nint openblas_get_num_threads(void) { return 1; }\n' \
      > "$stage/openblas_shim.c"
    gcc -shared -fPIC -O2 -Wl,-soname,libopenblas.so.0 -Wl,--no-as-needed -o "$stage/lib/libopenblas.so.0" \
      "$stage/openblas_shim.c" "$ref_blas"
    cp -L "$ref_blas" "$stage/lib/libblas.so.3"
    # The stand-in must serve every CBLAS call the programs make: refuse to pack one it lacks.
    served=$(nm -D --defined-only "$stage/lib/libopenblas.so.0" "$stage/lib/libblas.so.3" | awk 'NF == 3 {print $3}')
    for prog in "$@"; do
      [[ "$prog" == *.so ]] && continue
      for sym in $(nm -D --undefined-only "$prog" | awk '$2 ~ /^(cblas_|openblas_)/ {print $2}'); do
        grep -qx "$sym" <<< "$served" ||
          { echo "pack_binaries: SLIM_LIBS: $prog needs $sym, which the reference BLAS shim lacks" >&2; exit 2; }
      done
    done
  fi
  rm -f "$stage"/*.c
  # Drop what only the replaced libraries needed (OpenBLAS's libgfortran, libquadmath), until nothing changes; the
  # libraries given as arguments stay.
  given_libs=$(for prog in "$@"; do if [[ "$prog" == *.so ]]; then printf '\n%s' "$(basename "$prog")"; fi; done)
  while :; do
    needed=$(for f in "$stage"/bin/* "$stage"/lib/*; do readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u)
    dropped=0
    for lib in "$stage"/lib/*; do
      name=$(basename "$lib")
      grep -qx "$name" <<< "$needed$given_libs" || { rm -f "$lib"; dropped=1; }
    done
    [ "$dropped" = 1 ] || break
  done
fi
# STRIP_PTX=1: the programs' PTX blanked (tools/device/strip_ptx.py; the sm_90a SASS stays): their zstd-compressed PTX,
# ~5.8 MB that xz cannot shrink, leaves the archive (bench_generate alone: 15.5 -> 9.7 MB as .txz). The GPU machine's
# H100/H200 load the SASS; a program so packed fails to load its kernels on a GPU without sm_90a SASS.
if [ "${STRIP_PTX:-0}" = 1 ]; then
  python3 "$(dirname "$0")/strip_ptx.py" --skip-non-cuda "$stage"/bin/*
fi
# .txz: xz -9 in one thread (its 64-MiB window spans neighbouring programs, so the CUDA fatbins they share compress
# once: six programs in 36.5 MB instead of 76 MB at the default level, session 31; ~2.5 minutes here; XZ_OPT
# overrides): for carries near the device tool's 64 MiB limit.
case "$out" in
  *.txz|*.tar.xz) XZ_OPT=${XZ_OPT:--9 -T1} tar cJf "$out" -C "$stage" bin lib ;;
  *) tar czf "$out" -C "$stage" bin lib ;;
esac
echo "pack_binaries: $(du -h "$out" | cut -f1) -> $out ($(ls "$stage/bin" | tr '\n' ' ')$(ls "$stage/lib" | grep '^libhlm' | tr '\n' ' '))"
# PIECE_MB=N (an integer): also split the archive into pieces of N MiB (OUT.part.00, .01, ...; the archive itself removed): the
# carry limit counts the tracked tree too (~47 MB in session 31), so a large archive travels one piece per call into
# a folder that outlives the call on the warm machine, then is joined there.
# PIECE_MB=auto: the fewest equal pieces that each fit beside the tracked tree as it travels (its files as a tar
# archive, headers and padding included: 48.8 MB for 47.0 MB of files in session 34) under the 64-MiB limit, less
# RESERVE_MB (default 2) for what else a call carries (the peer's FLA archive is 0.74 MB). The tree grows with every
# commit, so pack shortly before the calls. CARRY_LIMIT_BYTES replaces the 64 MiB (tools/device/test_pack_pieces.sh).
if [ "${PIECE_MB:-}" = auto ]; then
  tree_bytes=$(cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" && git ls-files -z | tar --null -T - -cf - | wc -c)
  room=$(( ${CARRY_LIMIT_BYTES:-67108864} - tree_bytes - ${RESERVE_MB:-2} * 1048576 ))
  [ "$room" -ge 65536 ] || { echo "pack_binaries: the tracked tree ($tree_bytes bytes as tar) leaves no room" >&2; exit 2; }
  size=$(stat -c %s "$out")
  pieces=$(( (size + room - 1) / room ))
  piece_bytes=$(( (size + pieces - 1) / pieces ))
  echo "pack_binaries: tree $tree_bytes bytes as tar, room $room per call -> $pieces piece(s) of $piece_bytes bytes"
fi
if [ -n "${PIECE_MB:-}" ]; then
  rm -f "$out".part.*
  if [ "$PIECE_MB" = auto ]; then split -b "$piece_bytes" -d "$out" "$out.part."
  else split -b "${PIECE_MB}M" -d "$out" "$out.part."; fi
  rm -f "$out"
  echo "pack_binaries: pieces $(ls "$out".part.* | tr '\n' ' ')"
  echo "  on the device, one call per piece (carry that piece): mkdir -p /tmp/keep && cp PIECE /tmp/keep/"
  case "$out" in *.txz|*.tar.xz) unpack=xJ ;; *) unpack=xz ;; esac
  echo "  then: mkdir -p /tmp/hlm && cat /tmp/keep/$(basename "$out").part.* | tar $unpack -C /tmp/hlm" \
       "(the machine must stay warm between the calls: idle_release_s)"
fi
