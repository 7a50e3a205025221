#!/usr/bin/env bash
# conv_emu.sh: runs the causal conv's kernels (src/ops/causal_conv1d/causal_conv1d.cu, the 4-channel path K = KMAX = 4)
# on the CPU through tools/cuda_emu (emu.h: a fiber per CUDA thread). The forward with the per-head l2norm fused
# (conv_forward_kernel<4, true, 4, true>, heads of 128: session 41): y byte for byte as the plain forward kernel's, yn
# as l2norm_forward_cuda's warp path computes it (each lane's 4 channels an fmaf chain of squares, the 5-level xor
# tree, 1 / sqrtf(Σ + eps), y · inv), with and without SiLU, edge values. The backward (conv_backward_kernel, fp32 and
# bf16 dx): its interior walk (runs whose tokens and halo lie in one sequence, session 41) byte for byte
# against its general walk, and both against a host evaluation of the documented formulas in the kernel's order (dx:
# the fmaf chain over the taps inside t's sequence, dpre from the same expf; dw: the per-run fmaf chains, the runs of a
# tile added in run order): packed sequences of 1,024 (the training shape's structure), boundaries inside runs and
# inside a run's halo, at run starts, sequences shorter than K − 1, T = 300 (a last run of 12 tokens), with and
# without SiLU and an initial state, edge values (±0, 1e30, NaN) in x and dy, C = 8 and 136 (a partial channel block).
# It copies the kernel part of causal_conv1d.cu (from "namespace {" to check_params), with cp.async as a plain copy
# (each thread reads only its own ring slots, after their copy) and the block's 32 × 4 threads as 128 in a row (x
# fastest, as CUDA numbers them); the CUDA headers are tools/cuda_emu/stubs' stand-ins. A few seconds. Checks the
# kernel's logic (walks, halo, masks, ring indexing), not nvcc's code or the hardware; the GPU tests are
# tests/cuda/cases_causal_conv1d.cpp (InteriorWalkEqualsTheGeneralWalk and the rest).
# usage: bash tools/cuda_emu/conv_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/causal_conv1d/causal_conv1d.cu" "$work/conv_kernel_emu.h" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
body = src[src.index('namespace {'):src.index('Geometry check_params(')]
# cp.async: the row copied at once (4 or 16 bytes); commit and wait: nothing to do.
m = re.search(r'template <int V>\n__device__ __forceinline__ void cp_async_row\(float\* smem, const float\* gmem\) \{.*?\n\}\n',
              body, re.S)
assert m, 'cp_async_row not found'
body = body[:m.start()] + '''template <int V>
__device__ __forceinline__ void cp_async_row(float* smem, const float* gmem) {
  std::memcpy(smem, gmem, V * sizeof(float));
}
''' + body[m.end():]
for old in ('asm volatile("cp.async.commit_group;\\n" ::: "memory");', 'asm volatile("cp.async.wait_group %0;\\n" ::"n"(N) : "memory");'):
    assert body.count(old) == 1, old
    body = body.replace(old, '')
assert 'asm' not in body, 'unpatched asm'
# The 32 × 4 block as 128 threads in a row (emu_launch's blocks are one-dimensional).
body = body.replace('threadIdx.y', 'EMU_TY').replace('threadIdx.x', 'EMU_TX')
head = '''#pragma once
#include <atomic>
#include <cstring>
#include <type_traits>
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "emu.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/env_switch.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/causal_conv1d/conv_decode.cuh"
#define EMU_TX (threadIdx.x % 32u)
#define EMU_TY (threadIdx.x / 32u)
namespace hlm {
'''
open(sys.argv[2], 'w').write(head + body + '\n}  // namespace\n}  // namespace hlm\n')
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$work" -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/conv_emu.cpp" -o "$work/conv_emu"
"$work/conv_emu" "$@"
