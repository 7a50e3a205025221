// Programmatic dependent launch (Hopper, sm_90+): a kernel launched with the programmatic-serialization attribute may
// start while the kernel queued before it is still running, and waits for that kernel's completion (and its memory)
// only where it calls dependent_launch_wait(). What it does before the wait must not read anything the kernel before
// it writes (the batch-1 decode GEMV loads its first weights there: weights are not written during inference).
// dependent_launch_trigger() in a kernel lets the next programmatic launch start before this kernel ends; without it
// the next one starts when this one's blocks have all exited. Both are no-ops on older GPUs and in kernels launched
// the ordinary way (the wait then returns at once: stream order already holds).
//
// dependent_launch_enabled(): on unless HLM_PDL=off|0 in the environment (read once). Measured on the H200 (session
// 13, call 1, graphs on): qwen3_4b's batch-1 decode step 3.86 → 3.72 ms with the GEMVs launched this way. Session 27
// made the kernels that follow a decode GEMV dependents too (residual + RMSNorm, SwiGLU, the GDN decode preparation,
// the gated delta rule decode step, the gated RMSNorm; each waits at its first instruction): olmo_hybrid_7b 4.83 →
// 4.76 ms, qwen3_4b 3.60 → 3.54 ms.
#pragma once
#include <cuda_runtime.h>

namespace hlm::cuda {

__device__ __forceinline__ void dependent_launch_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void dependent_launch_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

bool dependent_launch_enabled();

// The decode attention's three launches as dependents too, each on its own: the q/k norm + RoPE + cache write, the
// split kernel (which loads its first K/V tile before its wait when every key in it is older than the step's new
// token: the kernel before it writes only q and the new token's cache row) and the split merge. HLM_PDL_ATTN picks
// them: on (all), off (none) or a comma list of qk, split, merge; unset: split alone; never without
// dependent_launch_enabled(). Session 28 (H200, batch-1 decode, L 1024, one call, ms per step): none 3.39 / 4.74
// (qwen3_4b / olmo3_7b), qk 3.36 / 4.69, split 3.31 / 4.65, merge 3.53 / 4.71, split + merge 3.43 / 4.62, all 3.57 /
// 4.60; olmo_hybrid_7b 4.68-4.69 with each of none, split + merge, all. The merge as a dependent costs qwen3_4b
// 0.14 ms (not understood), hence split alone.
enum class AttentionLaunch { kQk = 1, kSplit = 2, kMerge = 4 };
bool dependent_launch_attention(AttentionLaunch which);

// Launches kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialization attribute when `pdl`.
template <typename... KArgs, typename... Args>
cudaError_t launch_maybe_dependent(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl ? attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<KArgs>(args)...);
}

}  // namespace hlm::cuda
