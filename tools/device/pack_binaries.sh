#!/usr/bin/env bash
# pack_binaries.sh: packs programs built HERE (Debian bookworm, nvcc, sm_90a) for the GPU machine, whose image lacks
# the Debian -dev/runtime packages the full build links against (OpenBLAS, zstd, PCRE2, ICU, GoogleTest).
#
# Usage: bash tools/device/pack_binaries.sh OUT_TGZ PROGRAM|LIB.so...   (OUT ending in .txz: xz-compressed)
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
# .txz: xz (about 0.65× the gzip size, 1-2 minutes here): for carries near the device tool's 64 MiB limit.
case "$out" in *.txz|*.tar.xz) tar cJf "$out" -C "$stage" bin lib ;; *) tar czf "$out" -C "$stage" bin lib ;; esac
echo "pack_binaries: $(du -h "$out" | cut -f1) -> $out ($(ls "$stage/bin" | tr '\n' ' ')$(ls "$stage/lib" | grep '^libhlm' | tr '\n' ' '))"
