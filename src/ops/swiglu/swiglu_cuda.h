// SwiGLU on CUDA: launchers for the contract in swiglu.h (same formulas and aliasing rules), f32 (bf16 outputs, and
// bf16 gate / up, below), raw device pointers, queued on `stream`.
// Numerics: fp32 throughout (the CPU backward computes in double and rounds once). CUDA's expf is within 2 ulp; the
// sigmoid complement 1 − σ(g) is computed as σ(−g) (no cancellation). Intermediates are fp32, so products such as
// d_out · up that exceed 3.4e38 overflow to inf where the CPU's double does not.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

// out = silu(gate) ⊙ up; out may alias gate or up.
void swiglu_forward_cuda(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
// The same values rounded to bf16 (bf16 compute mode, where a bf16 product is their only reader): bit-identical to
// swiglu_forward_cuda followed by cast_f32_to_bf16_cuda, without the fp32 round trip through memory.
void swiglu_forward_bf16_cuda(__nv_bfloat16* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);

// dgate = d_out · up · σ · (1 + gate · (1 − σ)), dup = d_out · silu(gate), both OVERWRITTEN; each may alias d_out,
// gate or up (not each other).
void swiglu_backward_cuda(float* dgate, float* dup, const float* d_out, const float* gate, const float* up, int64_t n,
                          cudaStream_t stream);
// The same dgate and dup rounded to bf16 (bf16 compute mode, where the gate_proj / up_proj backward products are their
// only readers): bit-identical to swiglu_backward_cuda followed by cast_f32_to_bf16_cuda of each. The outputs may not
// alias the inputs (different element sizes) or each other.
void swiglu_backward_bf16_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const float* d_out, const float* gate,
                               const float* up, int64_t n, cudaStream_t stream);

// bf16 gate and up (the products' bf16 roundings, layers/cuda/mlp_layer_cuda.h's bf16 gate/up path): out = the bf16
// rounding of silu(g)·u computed in fp32 on the widened (exact) values; bit-identical to swiglu_forward_bf16_cuda on
// fp32 copies of gate and up. out may alias gate or up.
void swiglu_forward_bf16_in_cuda(__nv_bfloat16* out, const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n,
                                 cudaStream_t stream);
// dgate, dup as swiglu_backward_bf16_cuda on fp32 copies of gate and up (bit-identical); d_out fp32. Outputs may not
// alias each other or any input.
void swiglu_backward_bf16_in_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const float* d_out,
                                  const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, cudaStream_t stream);
// The same with d_out given as bf16 too (the MLP backward's dh written by its down_proj product as bf16,
// layers/mlp_bf16_gate_up.h's HLM_MLP_BF16_DH): dgate, dup as swiglu_backward_bf16_in_cuda on an fp32 copy of d_out
// (bit-identical: the widening is exact). Outputs may not alias each other or any input.
void swiglu_backward_bf16_all_cuda(__nv_bfloat16* dgate, __nv_bfloat16* dup, const __nv_bfloat16* d_out,
                                   const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, cudaStream_t stream);

}  // namespace hlm
