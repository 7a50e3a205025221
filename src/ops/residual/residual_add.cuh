// The residual add's one element, x + scale · delta with the product and the sum rounded separately (as on the CPU,
// residual_ref.cpp): the single definition of its bits for residual_add_forward_cuda and for the kernels that fuse
// the add into their own pass (rmsnorm's residual + norm forward, its accumulating backward at scale 1).
#pragma once

namespace hlm::cuda {

__device__ __forceinline__ float residual_add_value(float x, float scale, float delta) {
  return __fadd_rn(x, __fmul_rn(scale, delta));
}

}  // namespace hlm::cuda
