#!/usr/bin/env bash
# gdn_bwd_emu.sh: runs the v2 backward kernels of the chunked gated delta rule (src/ops/gated_delta_rule/
# gdn_bwd_v2.cuh) on the CPU, through tools/cuda_emu (emu.h: a fiber per CUDA thread; emu_mma.h: mma.sync and
# ldmatrix by the PTX fragment layouts), on tiny shapes against a double-precision evaluation of the CPU chunked
# backward's formulas (gdn_bwd_emu.cpp). It builds one translation unit from the sources as they are: the scratch
# structs, constants and tile loaders of gdn_chunked_tiles.cuh (cp.async turned into plain copies), gdn_mma_bwd.cuh
# and gdn_bwd_v2.cuh (extern shared memory pointed at the emulator's buffer). Checks the kernels' logic (fragment
# layouts, strips, masks, decays, row/column sums, guards for partial chunks and odd dims, GVA), not nvcc's code or
# the hardware. Then the chain again with the full dU held as bf16 (kDuBf16), compared bit for bit with the fp32-dU
# chain. ~20 s (the build half of it). -fno-strict-aliasing: dstate writes bf16 dU over the fp32 dU_loc it has read.
# usage: bash tools/cuda_emu/gdn_bwd_emu.sh      (prints one line per case and output; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/src/ops/gated_delta_rule" "$work" <<'PY'
import re, sys
src, out = sys.argv[1], sys.argv[2]
tiles = open(src + '/gdn_chunked_tiles.cuh').read()
def cut(text, begin, end):
    i = text.index(begin)
    return text[i:text.index(end, i)]
a = cut(tiles, 'using bf16 = __nv_bfloat16;', '// Kernels and device functions below have internal linkage')
fit = re.search(r'constexpr bool blocks_fit_per_sm\(.*?\n}\n', tiles, re.S).group(0)
fit += re.search(r'__device__ __forceinline__ void chunk_suffix_sum\(.*?\n}\n', tiles, re.S).group(0)
b = cut(tiles, '// ---- Tile loaders', '// ---- Block GEMM')
c = cut(tiles, '// The inputs as the kernels read them', 'ForwardScratch carve_forward')
cp = re.search(r'(__device__ __forceinline__ void cp_async16\(void\* smem_dst, const void\* gmem_src, bool valid\) \{).*?\n}\n',
               b, re.S)
b = b.replace(cp.group(0), cp.group(1) + '\n  if (valid) std::memcpy(smem_dst, gmem_src, 16); else std::memset(smem_dst, 0, 16);\n}\n')
b = re.sub(r'asm volatile\("cp\.async\.(commit|wait)_group.*?\);', '', b, flags=re.S)
assert 'asm' not in a + b + c + fit, 'unpatched asm in the prelude'
open(out + '/gdn_prelude_emu.h', 'w').write(
    '#pragma once\n#include "ops/gated_delta_rule/gated_delta_rule.h"\nnamespace hlm::gdn_chunked {\n' + a + fit + b + c +
    '}  // namespace hlm::gdn_chunked\n')
v2 = open(src + '/gdn_bwd_v2.cuh').read()
n_smem = v2.count('extern __shared__ __align__(128) char smem[];')
assert n_smem >= 1
v2 = v2.replace('extern __shared__ __align__(128) char smem[];', 'char* smem = emu_dyn_smem;')
v2 = re.sub(r'__launch_bounds__\([^)]*\)', '', v2)
open(out + '/gdn_bwd_v2_emu.cuh', 'w').write(v2)
PY
g++ -std=c++20 -O2 -ffp-contract=off -fno-strict-aliasing -pthread -I"$work" -I"$root/tools/cuda_emu" -I"$root/src" \
  "$root/tools/cuda_emu/gdn_bwd_emu.cpp" "$root/src/ops/gated_delta_rule/gated_delta_rule_chunked.cpp" \
  "$root/src/ops/gated_delta_rule/gated_delta_rule_chunked_backward.cpp" \
  -o "$work/gdn_bwd_emu"
"$work/gdn_bwd_emu" "$@"
