#!/usr/bin/env bash
# decode_attention_emu.sh: runs the decode attention kernels on the CPU through tools/cuda_emu (emu.h: a fiber per CUDA
# thread, the warp's shuffles through its barrier) against a double-precision host model (decode_attention_emu.cpp):
# the warp kernel (src/ops/attention/attention_decode_warps.cuh, with and without the q/k preparation folded in), the
# tiled kernel (attention_decode_tiled.cuh, the default; its cp.async copies done at once, no cluster form) and the
# split merge kernel: fp32 and bf16 caches, head dims 128, 64 and 40 (lanes and chunks past the row), 1, 2 and 4
# query heads per block, one split (the warp kernel's output written by itself), several, and splits longer than one
# batch or tile of keys, block sizes 16 (key rows by shift) and 5 (by division), a sliding window, the separate and the
# fused merge, bad block ids (the flag); with the q/k preparation: per-head norms, full and partial RoPE, two head
# groups per KV head, the new k/v rows written to their cache slots. The real headers are compiled by g++ with
# stand-ins for the few CUDA headers they include (tools/cuda_emu/stubs). ~15 s.
# It checks the kernels' logic (lanes, groups, tiles, batches, shuffles, merges, index math), not nvcc's code or the
# hardware; the GPU tests are tests/cuda/cases_attention_cache.cpp and cases_attention_decode_prep.cpp.
# usage: bash tools/cuda_emu/decode_attention_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/decode_attention_emu.cpp" -o "$work/decode_attention_emu"
"$work/decode_attention_emu" "$@"
