#!/usr/bin/env bash
# gdn_fwd_emu.sh: runs the v2 forward kernels of the chunked gated delta rule (src/ops/gated_delta_rule/
# gdn_fwd_v2.cuh) on the CPU through tools/cuda_emu (emu.h: a fiber per CUDA thread; emu_mma.h: mma.sync and
# ldmatrix by their PTX layouts), against a double-precision host model of the same stage (gdn_fwd_emu.cpp), on tiny
# shapes: partial last chunks, packed sequences, dk ≠ dv, odd dims (the scalar copy paths), GVA, h0 / hT, and every
# rows-per-block variant. It copies the kernels' headers with the few host substitutions below (cp.async as a plain
# copy, the dynamic shared memory from emu_launch, the wmma helpers left out) and builds with g++. ~10 s.
# It checks the kernels' logic (fragment and index math, masks, the chunk loop), not nvcc's code or the hardware;
# the GPU test is tests/cuda/cases_gated_delta_rule_chunked.cpp with HLM_GDN_KERNELS=v2.
# usage: bash tools/cuda_emu/gdn_fwd_emu.sh     (prints one line per check and a summary; exit 0 when all pass)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ops/gated_delta_rule"
python3 - "$root/src/ops/gated_delta_rule" "$work/ops/gated_delta_rule" <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]

def cut(s, start, end):
    i, j = s.index(start), s.index(end)
    assert i < j, (start, end)
    return s[:i] + s[j:]

t = open(src + '/gdn_chunked_tiles.cuh').read()
for inc in ('#include <cuda_bf16.h>\n', '#include <cuda_runtime.h>\n', '#include <mma.h>\n',
            '#include "backend/cuda/cuda_error.h"\n'):
    assert inc in t, inc
    t = t.replace(inc, '')
t = t.replace('#pragma once\n', '''#pragma once
#include "emu_mma.h"
#define HLM_CUDA_CHECK(x) (void)(x)
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
inline int cudaGetDevice(int* d) { *d = 0; return 0; }
inline int cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 132; return 0; }
struct CUstream_st;
using cudaStream_t = CUstream_st*;
''', 1)
t = cut(t, '// ---- Block GEMM on tensor cores', '// ---- Chunk-local decay')
t = cut(t, '// The kBV × 128 state tile as wmma accumulators', '// Ab[i][j] = bf16(s · QK')
# cp.async: a plain copy (16 bytes, or zeros), commit and wait: nothing to do.
m = re.search(r'__device__ __forceinline__ void cp_async16\(void\* smem_dst, const void\* gmem_src, bool valid\) \{.*?\n\}\n', t, re.S)
assert m
t = t[:m.start()] + '''__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool valid) {
  if (valid) std::memcpy(smem_dst, gmem_src, 16); else std::memset(smem_dst, 0, 16);
}
''' + t[m.end():]
for old, new in (('asm volatile("cp.async.commit_group;\\n" ::: "memory");', ''),
                 ('asm volatile("cp.async.wait_group %0;\\n" ::"n"(kPending) : "memory");', '')):
    assert old in t, old
    t = t.replace(old, new)
open(dst + '/gdn_chunked_tiles.cuh', 'w').write(t)

v = open(src + '/gdn_fwd_v2.cuh').read()
old = 'extern __shared__ __align__(128) char smem[];'
assert old in v
v = v.replace(old, 'char* smem = emu_dyn_smem;')
# The split-key pair barrier (bar.sync on 64 threads) as the block barrier: every warp of state_v2 reaches it at the
# same points, and pairs exchange data only within themselves, so the stronger barrier orders the same accesses.
for bar in range(1, 3):
    old = 'asm volatile("bar.sync %d, 64;" ::: "memory");' % bar
    assert old in v, old
    v = v.replace(old, '__syncthreads();')
open(dst + '/gdn_fwd_v2.cuh', 'w').write(v)
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -DHLM_CUDA_EMU=1 -I"$work" -I"$root/tools/cuda_emu" -I"$root/src" \
  "$root/tools/cuda_emu/gdn_fwd_emu.cpp" "$root/src/ops/gated_delta_rule/gated_delta_rule_chunked.cpp" \
  -o "$work/gdn_fwd_emu"
"$work/gdn_fwd_emu" "$@"
