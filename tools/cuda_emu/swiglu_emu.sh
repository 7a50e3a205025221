#!/usr/bin/env bash
# swiglu_emu.sh: runs the SwiGLU kernels (src/ops/swiglu/swiglu.cu, swiglu_forward_kernel / swiglu_backward_kernel) on
# the CPU through tools/cuda_emu (emu.h: a fiber per CUDA thread) and checks their bf16-input form (bf16 gate and up,
# the MLP's bf16 gate/up path) byte for byte against the fp32-input bf16-output form on the widened values, on the
# vector path (aligned, and 8- but not 16-byte aligned), the scalar path (one element past the boundary), odd lengths,
# edge values and every bf16 pattern as gate (NaN parity), grids of the launchers' size and of 1 block (grid-stride),
# the forward in place (out = gate); and the fp32-input form against a host evaluation of the kernels' own element
# functions (swiglu_math.cuh's value; swiglu_backward_value) rounded by bf16_round.cuh, NaN matching NaN of any payload
# there (swiglu_emu.cpp). It copies the kernel part of swiglu.cu (from "namespace {" to the host launch code); the CUDA
# headers it includes are tools/cuda_emu/stubs' stand-ins. ~3 s. Checks the kernels' logic (load order, widening,
# paths, indexing), not nvcc's code, alignment faults or the hardware; the GPU test is tests/cuda/cases_swiglu.cpp
# (Bf16InputForward, Bf16InputBackward).
# usage: bash tools/cuda_emu/swiglu_emu.sh     (prints one line per check; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/swiglu/swiglu.cu" "$work/swiglu_kernel_emu.h" <<'PY'
import sys
src = open(sys.argv[1]).read()
body = src[src.index('namespace {'):src.index('bool aligned(')]
head = '''#pragma once
#include "cuda_bf16.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "ops/cast/bf16_round.cuh"
#include "ops/swiglu/swiglu_cuda.h"
#include "ops/swiglu/swiglu_math.cuh"
namespace hlm {
'''
open(sys.argv[2], 'w').write(head + body + '\n}  // namespace\n}  // namespace hlm\n')
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$work" -I"$root/tools/cuda_emu/stubs" \
  -I"$root/tools/cuda_emu" -I"$root/src" "$root/tools/cuda_emu/swiglu_emu.cpp" -o "$work/swiglu_emu"
"$work/swiglu_emu" "$@"
