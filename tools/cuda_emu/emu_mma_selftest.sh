#!/usr/bin/env bash
# emu_mma_selftest.sh: builds and runs the CPU self-test of the emulated mma.sync / ldmatrix (emu_mma.h) and of
# gdn_mma.cuh's fragment helpers, and of emu.h's schedule (a read racing a write without a barrier sees the old
# value in some block; emu_mma_selftest.cpp). A few seconds. Prints the check count; exit 0 when all pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O1 -ffp-contract=off -pthread -I"$root/tools/cuda_emu" -I"$root/src" \
  "$root/tools/cuda_emu/emu_mma_selftest.cpp" -o "$work/emu_mma_selftest"
"$work/emu_mma_selftest"
