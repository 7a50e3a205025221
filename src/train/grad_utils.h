// Gradient helpers for a list of parameter gradients (f32, contiguous): zeroing, scaling (gradient accumulation:
// sum micro-batch gradients, then scale by 1/k, or weight the per-token loss instead) and global-norm clipping
// (Algorithm 1 line 25 of the seed: g ← g · min(1, c / ‖g‖₂), c = 1.0 in Table C.3).
// Norms accumulate squares in double (a sum of ~4e9 fp32 squares would lose ~1e-7 relative per add in fp32).
#pragma once
#include <span>

#include "core/tensor.h"

namespace hlm {

// Sets every gradient to zero.
void grad_zero(std::span<const Tensor> grads);

// Multiplies every gradient by `factor`.
void grad_scale(std::span<const Tensor> grads, double factor);

// ‖g‖₂ over all gradients together (double accumulation). NaN if any element is NaN, +inf if any is ±inf (and none
// is NaN).
double grad_global_norm(std::span<const Tensor> grads);

// Returns the global norm BEFORE clipping. When it is finite and > max_norm, scales every gradient by
// max_norm / norm (exactly Algorithm 1's min(1, c/‖g‖); torch.nn.utils.clip_grad_norm_ divides by norm + 1e-6,
// a relative difference of 1e-6/‖g‖). When it is NaN or inf the gradients are NOT modified and the non-finite value
// is returned: the caller must skip the optimizer step. max_norm must be positive.
double clip_grad_norm(std::span<const Tensor> grads, double max_norm);

}  // namespace hlm
