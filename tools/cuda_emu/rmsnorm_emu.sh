#!/usr/bin/env bash
# rmsnorm_emu.sh: runs the RMSNorm forward kernels for rows longer than one warp's (src/ops/rmsnorm/rmsnorm.cu:
# rmsnorm_forward_kernel, the block path, and rmsnorm_forward_regs_kernel, the row held in registers, which also takes
# the fused residual add and the bf16 rounding of its output) on the CPU through tools/cuda_emu (emu.h: a fiber per
# CUDA thread) and checks the register kernel byte for byte: without delta against the block kernel; with delta, x
# against the residual add's element formula (residual_add.cuh) and out against the block kernel on that x; out16
# against f32_to_bf16_bits(out); out aliasing delta; with post (a post-norm block's residual add of the normed output,
# session 40) post against the same formula on out, out unchanged, also with out aliasing x; grids of one block per row and of fewer blocks (grid-stride);
# D from 1,025 to 4,096 (both register sizes, rows not a multiple of the block); edge values (NaN, ±Inf, 1e30, 0);
# and out against a double evaluation (relative 1e-5 on finite rows, a gross-error check). The backward's elementwise
# dx kernel (rows longer than a warp's) with 32- and 64-bit indices, fresh and accumulating, against its formula on
# the host (bits) after the row-stats kernel. It copies the kernel part
# of rmsnorm.cu (from "// ---- Block path" to DweightTerm) and cuda_common.cuh's conversions and block_sum
# (from "// Storage <-> compute" to "// ---- Two-pass column sum"); the CUDA headers those include are
# tools/cuda_emu/stubs' stand-ins. A few seconds. Checks the kernels' logic (load order, masking, aliasing,
# indexing), not nvcc's code or the hardware; the GPU tests are tests/cuda/cases_rmsnorm.cpp.
# usage: bash tools/cuda_emu/rmsnorm_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/rmsnorm/rmsnorm.cu" "$root/src/backend/cuda/cuda_common.cuh" "$work/rmsnorm_kernel_emu.h" <<'PY'
import sys
src = open(sys.argv[1]).read()
common = open(sys.argv[2]).read()
kernels = src[src.index('// ---- Block path'):src.index('template <typename T>\nstruct DweightTerm')]
helpers = common[common.index('// Storage <-> compute'):common.index('// ---- Two-pass column sum')]
head = '''#pragma once
#include <type_traits>
#include "cuda_runtime.h"
#include "emu.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "ops/cast/bf16_round.cuh"
#include "ops/residual/residual_add.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.h"
inline float __int_as_float(int i) { return __uint_as_float(static_cast<uint32_t>(i)); }
namespace hlm::cuda {
'''
mid = '''}  // namespace hlm::cuda
namespace hlm {
namespace {
using cuda::block_sum;
using cuda::from_f32;
using cuda::to_f32;
constexpr int kThreads = rmsnorm_cuda_threads();
'''
helpers = helpers.replace('__device__ __forceinline__ float quiet_nan()', '[[maybe_unused]] inline float quiet_nan_unused()')
open(sys.argv[3], 'w').write(head + helpers + mid + kernels + '\n}  // namespace\n}  // namespace hlm\n')
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$work" -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/rmsnorm_emu.cpp" -o "$work/rmsnorm_emu"
"$work/rmsnorm_emu" "$@"
