// Full-attention layer backward on CUDA, step for step as attention_layer.cpp's forward_activations (keep_pre_norm)
// followed by its backward_from.
#include "core/error.h"
#include "layers/cuda/attention_layer_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

// The rows of a q/k norm over a [T, heads·D] projection: per head (norm_size D) or the whole projection (heads·D).
RmsnormCudaParams qk_norm_params(int64_t norm_size, int64_t tokens, int64_t heads, int64_t D, float eps) {
  HLM_CHECK(norm_size == D || norm_size == heads * D, "q/k norm of ", norm_size, " entries for ", heads,
            " heads of ", D);
  return {tokens * heads * D / norm_size, norm_size, eps};
}

// In-place backward of one q/k norm: d (gradient at the normed output) becomes the gradient at the projection `lin`;
// dweight += (accumulated, as the CPU).
void qk_norm_backward(CudaContext& ctx, float* d, float* dweight, const float* lin, const float* weight,
                      const RmsnormCudaParams& p) {
  CudaTensor ws = cuda_scratch_bytes(ctx, rmsnorm_backward_cuda_workspace_bytes(p));
  rmsnorm_backward_cuda(d, dweight, d, lin, weight, p, ws.raw(), rmsnorm_backward_cuda_workspace_bytes(p),
                        ctx.stream());
}

}  // namespace

void attention_layer_backward_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& g, const float* d_out,
                                   const float* x, const CudaAttentionWeights& w, const AttentionDims& d,
                                   const RopeCudaTable* rope, const CudaBatchView& b) {
  HLM_CHECK(dx != x && dx != d_out, "attention backward: dx may not alias x or d_out");
  HLM_CHECK(g.q_norm_size == w.q_norm_size && g.k_norm_size == w.k_norm_size,
            "attention backward: the gradient holder's q/k norms do not match the weights");
  const cudaStream_t stream = ctx.stream();
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;

  // Forward, keeping the projections before the norms (q_lin, k_lin) apart from q, k.
  CudaTensor q_lin = CudaTensor::empty(ctx, {n, Cq}), k_lin = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor q = CudaTensor::empty(ctx, {n, Cq}), k = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor v = CudaTensor::empty(ctx, {n, Ckv}), o = CudaTensor::empty(ctx, {n, Cq});
  CudaTensor lse = CudaTensor::empty(ctx, {n, d.q_heads});
  cuda_linear_forward(ctx, q_lin.data<float>(), x, w.q_proj, n);
  cuda_linear_forward(ctx, k_lin.data<float>(), x, w.k_proj, n);
  cuda_linear_forward(ctx, v.data<float>(), x, w.v_proj, n);
  RmsnormCudaParams q_norm{}, k_norm{};
  if (w.q_norm_size > 0) {
    q_norm = qk_norm_params(w.q_norm_size, n, d.q_heads, D, d.norm_eps);
    rmsnorm_forward_cuda(q.data<float>(), q_lin.data<float>(), w.q_norm.data<float>(), q_norm, stream);
  } else {
    cuda_copy_device(ctx, q.raw(), q_lin.raw(), q.nbytes());
  }
  if (w.k_norm_size > 0) {
    k_norm = qk_norm_params(w.k_norm_size, n, d.kv_heads, D, d.norm_eps);
    rmsnorm_forward_cuda(k.data<float>(), k_lin.data<float>(), w.k_norm.data<float>(), k_norm, stream);
  } else {
    cuda_copy_device(ctx, k.raw(), k_lin.raw(), k.nbytes());
  }
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != attention head_dim ", D);
    HLM_CHECK(rope->num_positions >= b.max_seqlen, "rope table of ", rope->num_positions,
              " positions for sequences of ", b.max_seqlen);
    rope_forward_cuda(q.data<float>(), b.positions, n, d.q_heads, *rope, b.error_flag, stream);
    rope_forward_cuda(k.data<float>(), b.positions, n, d.kv_heads, *rope, b.error_flag, stream);
  }
  const AttentionCudaParams ap{n, d.q_heads, d.kv_heads, D, b.n_seqs, b.max_seqlen, d.scale};
  attention_forward_cuda(o.data<float>(), lse.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                         b.cu_seqlens, ap, b.error_flag, stream);

  // Backward.
  CudaTensor d_o = CudaTensor::empty(ctx, {n, Cq});
  cuda_linear_backward(ctx, d_o.data<float>(), g.o_proj, d_out, o.data<float>(), w.o_proj, n, false);
  CudaTensor dq = CudaTensor::empty(ctx, {n, Cq}), dk = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor dv = CudaTensor::empty(ctx, {n, Ckv});
  {
    const size_t bytes = attention_backward_cuda_workspace_bytes(ap);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    attention_backward_cuda(dq.data<float>(), dk.data<float>(), dv.data<float>(), d_o.data<float>(),
                            q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(), lse.data<float>(),
                            b.cu_seqlens, ap, ws.raw(), bytes, b.error_flag, stream);
  }
  if (rope != nullptr) {
    rope_backward_cuda(dq.data<float>(), b.positions, n, d.q_heads, *rope, b.error_flag, stream);
    rope_backward_cuda(dk.data<float>(), b.positions, n, d.kv_heads, *rope, b.error_flag, stream);
  }
  if (w.q_norm_size > 0)
    qk_norm_backward(ctx, dq.data<float>(), g.q_norm.data<float>(), q_lin.data<float>(), w.q_norm.data<float>(),
                     q_norm);
  if (w.k_norm_size > 0)
    qk_norm_backward(ctx, dk.data<float>(), g.k_norm.data<float>(), k_lin.data<float>(), w.k_norm.data<float>(),
                     k_norm);
  cuda_linear_backward(ctx, dx, g.q_proj, dq.data<float>(), x, w.q_proj, n, /*accumulate_dx=*/false);
  cuda_linear_backward(ctx, dx, g.k_proj, dk.data<float>(), x, w.k_proj, n, /*accumulate_dx=*/true);
  cuda_linear_backward(ctx, dx, g.v_proj, dv.data<float>(), x, w.v_proj, n, /*accumulate_dx=*/true);
}

}  // namespace hlm
