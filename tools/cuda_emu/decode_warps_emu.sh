#!/usr/bin/env bash
# decode_warps_emu.sh: runs the warp decode attention kernel (src/ops/attention/attention_decode_warps.cuh: the split
# kernel with and without the q/k preparation folded in, and the split merge kernel) on the CPU through tools/cuda_emu
# (emu.h: a fiber per CUDA thread, the warp's shuffles through its barrier), against a double-precision host
# model (decode_warps_emu.cpp): fp32 and bf16 caches, head dims 128, 64 and 40 (lanes past the row), 1, 2 and 4 query
# heads per block, one split (the output written by the kernel itself), several, and splits longer than one batch of
# keys, a sliding window, the separate and the fused merge, bad block ids (the flag); with the q/k preparation: per-head
# norms, full and partial RoPE, two head groups per KV head, the new k/v rows written to their cache slots. The real
# headers are compiled by g++ with stand-ins for the few CUDA headers they include (tools/cuda_emu/stubs). ~10 s.
# It checks the kernels' logic (lanes, groups, batches, shuffles, merges, index math), not nvcc's code or the hardware;
# the GPU tests are tests/cuda/cases_attention_cache.cpp and cases_attention_decode_prep.cpp.
# usage: bash tools/cuda_emu/decode_warps_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/decode_warps_emu.cpp" -o "$work/decode_warps_emu"
"$work/decode_warps_emu" "$@"
