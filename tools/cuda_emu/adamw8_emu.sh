#!/usr/bin/env bash
# adamw8_emu.sh: runs the 8-bit AdamW step kernel (src/ops/adamw/adamw_lowmem.cu) on the CPU against its reference,
# bit for bit, on a machine without a GPU (tools/cuda_emu/emu.h emulates the CUDA it uses). It copies the kernel's
# source (from "namespace {" to the host launch helpers), swaps its three asm approximations (lg2, ex2, rsqrt) for
# libm, and builds adamw8_emu.cpp with g++. ~4 s. Not a substitute for the GPU tests (tests/cuda/
# cases_adamw_lowmem.cpp): it checks the kernel's logic (paths, indexing, packing, reductions, NaN rules), not
# nvcc's code or the hardware.
# usage: bash tools/cuda_emu/adamw8_emu.sh     (prints "N passed, M failed"; exit status 0 when none failed)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/adamw/adamw_lowmem.cu" "$work/kernel_emu.h" <<'PY'
import sys
src = open(sys.argv[1]).read()
body = src[src.index('namespace {'):src.index('unsigned blocks_for')]
for op, fn in (('lg2', 'std::log2(x)'), ('ex2', 'std::exp2(x)'), ('rsqrt', '1.0f / std::sqrt(x)')):
    asm = 'asm("%s.approx.ftz.f32 %%0, %%1;" : "=f"(y) : "f"(x));' % op
    assert asm in body, op
    body = body.replace(asm, 'y = %s;' % fn)
body = body.replace('HLM_CUDA_CHECK(', '(')
open(sys.argv[2], 'w').write('#include "emu.h"\n#include "ops/adamw/adamw_lowmem.h"\nnamespace hlm {\n'
                             'using AdamWLowmemCudaTensor = AdamWLowmemTensor;\n' + body +
                             '\n}  // namespace\n}  // namespace hlm\n')
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -I"$work" -I"$root/tools/cuda_emu" -I"$root/src" \
  "$root/tools/cuda_emu/adamw8_emu.cpp" "$root/src/ops/adamw/adamw_lowmem_ref.cpp" -o "$work/adamw8_emu"
"$work/adamw8_emu"
