#!/usr/bin/env bash
# gemv_swiglu_emu.sh: runs the small-row GEMV kernel (src/ops/matmul/gemv.cu, gemv_pipe_kernel) on the CPU through
# tools/cuda_emu (emu.h: a fiber per CUDA thread), in both forms: the group GEMV of an MLP's gate and up products,
# followed by SwiGLU on the host with the kernels' own expression (swiglu_math.cuh), and the form with SwiGLU in its
# epilogue (kSwiglu: (gate j, up j) column pairs per warp). The two must agree byte for byte (fp32 h and its bf16
# rounding), and the group GEMV must match a double-precision product (gemv_swiglu_emu.cpp): rows M = 1..4, K of one
# chunk, of unequal chunk counts per lane and of several rounds, n of one pair and of more pairs than the grid's warps
# (pairs strided over warps), biases on and off; and the form with the input's RMSNorm in its prologue (kNorm,
# GemvNorm: pre / pre + branch + bf16 out / post, group and SwiGLU, M 1-3, K 1032 / 1152 / 2056, 1-5 blocks) against a
# host model of the norm's block-path order, byte for byte (norm, bf16 and stream outputs; products against the plain
# kernel on the model's x). It copies the kernel part of gemv.cu (from "namespace {" to the host
# launch code) and cuda_common.cuh's block_sum, with the dynamic shared memory from emu_launch; the CUDA headers it includes are tools/cuda_emu/stubs'
# stand-ins. ~3 s. Checks the kernel's logic, not nvcc's code or
# the hardware; the GPU test is tests/cuda/cases_matmul.cpp (GemvSwigluEqualsGemvThenSwigluBitForBit).
# usage: bash tools/cuda_emu/gemv_swiglu_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/matmul/gemv.cu" "$work/gemv_kernel_emu.h" "$root/src/backend/cuda/cuda_common.cuh" <<'PY'
import sys
src = open(sys.argv[1]).read()
body = src[src.index('namespace {'):src.index('int sm_count() {')]
common = open(sys.argv[3]).read()  # block_sum, which the norm prologue uses (the stub header lacks it)
block_sum = common[common.index('template <int kThreads, typename T>\n__device__ T block_sum'):]
block_sum = block_sum[:block_sum.index('\n}\n') + 3]
old = 'extern __shared__ __align__(16) unsigned char smem_raw[];'
assert old in body
body = body.replace(old, 'unsigned char* smem_raw = reinterpret_cast<unsigned char*>(emu_dyn_smem);')
head = '''#pragma once
#include "cuda_bf16.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "ops/cast/bf16_round.cuh"
#include "ops/matmul/gemv_cuda.h"
#include "ops/residual/residual_add.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/swiglu/swiglu_math.cuh"
namespace hlm {
'''
head += 'namespace cuda {\n' + block_sum + '}  // namespace cuda\n'
open(sys.argv[2], 'w').write(head + body + '\n}  // namespace\n}  // namespace hlm\n')
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$work" -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/gemv_swiglu_emu.cpp" -o "$work/gemv_swiglu_emu"
"$work/gemv_swiglu_emu" "$@"
