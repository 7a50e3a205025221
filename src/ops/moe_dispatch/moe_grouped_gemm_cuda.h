// Grouped GEMM over routed experts on CUDA: every expert's product in ONE launch, no host loop and no host read of
// the routing. Rows are grouped by expert (moe_dispatch.h's offsets):
//   y [R, N] (fp32, OVERWRITTEN): for each expert e and row r in [offsets[e], offsets[e + 1]):  y[r] = a[r] · w[e]ᵀ
//   a [R, K] row-major; w [E, N, K] (HF's [out, in] per expert, stacked); offsets [E + 1] device, offsets[E] = R.
// The grid covers ⌈R / BM⌉ + E row tiles (an upper bound on Σ_e ⌈count_e / BM⌉ that needs no counts on the host);
// each tile finds its expert from offsets and the spare tiles exit. Sizes: any R, N, K >= 1.
//   fp32:  fp32 operands, fp32 FMA (64×64 tiles, 4×4 per thread); each output is a K-long fp32 dot product in
//          increasing k (error ≤ ~K·u·Σ|a·w|, as a naive fp32 loop).
//   bf16:  bf16 operands on tensor cores (wmma 16×16×16, 128×128×32 tiles), fp32 accumulation; when K % 8 == 0 and
//          a, w are 16-byte aligned, cp.async 16-byte copies through 4 shared-memory stages (80 KiB, opted in on the
//          first call); otherwise element loads through a register-prefetched double buffer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

void moe_grouped_gemm_cuda(float* y, const float* a, const float* w, const int32_t* offsets, int64_t E, int64_t R,
                           int64_t N, int64_t K, cudaStream_t stream);
void moe_grouped_gemm_bf16_cuda(float* y, const __nv_bfloat16* a, const __nv_bfloat16* w, const int32_t* offsets,
                                int64_t E, int64_t R, int64_t N, int64_t K, cudaStream_t stream);

}  // namespace hlm
