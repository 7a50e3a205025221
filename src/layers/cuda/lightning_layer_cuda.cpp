// Lightning Attention-2 mixer forward on CUDA, step for step as layers/lightning_layer.cpp (contract in
// lightning_layer_cuda.h).
#include "layers/cuda/lightning_layer_cuda.h"

#include <algorithm>

#include "core/error.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/simple_gla/simple_gla.h"
#include "ops/simple_gla/simple_gla_cuda.h"

namespace hlm {

CudaLightningWeights cuda_upload_lightning(CudaContext& ctx, const LightningWeights& w, const LightningDims& d) {
  const int64_t I = d.inner(), D = d.head_dim;
  HLM_CHECK_INPUT(w.qkv.weight.defined() && w.qkv.out_features() == 3 * I,
                  "attention.query_key_value.weight must have ", 3 * I, " rows");
  const int64_t H = w.qkv.in_features();
  HLM_CHECK_INPUT(!w.qkv.bias.defined() && !w.g_proj.bias.defined() && !w.dense.bias.defined(),
                  "the CUDA Lightning layer has no projection biases (use_bias / use_qkv_bias)");
  HLM_CHECK_INPUT(w.g_proj.weight.defined() && w.g_proj.out_features() == I && w.g_proj.in_features() == H,
                  "attention.g_proj.weight must be [", I, ", ", H, "]");
  HLM_CHECK_INPUT(w.dense.weight.defined() && w.dense.in_features() == I && w.dense.out_features() == H,
                  "attention.dense.weight must be [", H, ", ", I, "]");
  HLM_CHECK_INPUT(static_cast<int64_t>(d.decay.size()) == d.heads && d.group_norm_size >= 1 &&
                      I % d.group_norm_size == 0,
                  "Lightning layer: ", d.decay.size(), " decays for ", d.heads, " heads, group_norm_size ",
                  d.group_norm_size);
  HLM_CHECK_INPUT(D <= simple_gla_cuda_max_dim(), "Lightning head dim ", D, " exceeds the CUDA limit of ",
                  simple_gla_cuda_max_dim());
  CudaLightningWeights c;
  c.q_proj = cuda_upload_linear(ctx, linear_row_block(w.qkv, 0, I), "attention.query_key_value (q rows)");
  c.k_proj = cuda_upload_linear(ctx, linear_row_block(w.qkv, I, I), "attention.query_key_value (k rows)");
  c.v_proj = cuda_upload_linear(ctx, linear_row_block(w.qkv, 2 * I, I), "attention.query_key_value (v rows)");
  c.g_proj = cuda_upload_linear(ctx, w.g_proj, "attention.g_proj");
  c.dense = cuda_upload_linear(ctx, w.dense, "attention.dense");
  c.q_norm = cuda_upload_f32_sized(ctx, w.q_norm, D, "attention.query_layernorm.weight");
  c.k_norm = cuda_upload_f32_sized(ctx, w.k_norm, D, "attention.key_layernorm.weight");
  c.g_norm = cuda_upload_f32_sized(ctx, w.g_norm, I, "attention.g_norm.weight");
  c.decay = CudaTensor::empty(ctx, {d.heads});
  cuda_copy_to_device(ctx, c.decay.raw(), d.decay.data(), sizeof(float) * d.decay.size());
  return c;
}

void lightning_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaLightningWeights& w,
                                  const LightningDims& d, const RopeCudaTable* rope, const CudaBatchView& b,
                                  float* state) {
  HLM_CHECK(out != x, "Lightning forward: out may not alias x");
  const int64_t T = b.tokens, N = b.n_seqs, nq = d.heads, D = d.head_dim, I = d.inner();
  const cudaStream_t stream = ctx.stream();
  if (T == 0) return;
  CudaTensor q = CudaTensor::empty(ctx, {T, I}), k = CudaTensor::empty(ctx, {T, I});
  CudaTensor v = CudaTensor::empty(ctx, {T, I}), gate = CudaTensor::empty(ctx, {T, I});
  const CudaLinearOut projections[] = {{q.data<float>(), &w.q_proj},
                                       {k.data<float>(), &w.k_proj},
                                       {v.data<float>(), &w.v_proj},
                                       {gate.data<float>(), &w.g_proj}};
  cuda_linear_forward_group(ctx, projections, CudaLinearInput{x, nullptr}, T);
  const RmsnormCudaParams head_norm{T * nq, D, d.norm_eps};
  rmsnorm_forward_cuda(q.data<float>(), q.data<float>(), w.q_norm.data<float>(), head_norm, stream);
  rmsnorm_forward_cuda(k.data<float>(), k.data<float>(), w.k_norm.data<float>(), head_norm, stream);
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != Lightning head_dim ", D);
    rope_forward_cuda(q.data<float>(), b.positions, T, nq, *rope, b.error_flag, stream);
    rope_forward_cuda(k.data<float>(), b.positions, T, nq, *rope, b.error_flag, stream);
  }

  SimpleGlaCudaParams p;
  p.total_tokens = T;
  p.heads = nq;
  p.key_dim = D;
  p.value_dim = D;
  p.n_seqs = N;
  p.chunk = kSimpleGlaChunk;  // the CPU layer's chunk
  const SimpleGlaCudaInputs in{q.data<float>(), k.data<float>(), v.data<float>(), w.decay.data<float>(), state,
                               b.cu_seqlens};
  CudaTensor o = CudaTensor::empty(ctx, {T, I});
  if (T == N) {  // one token per sequence (a decode step): the recurrence
    CudaTensor scratch;  // no carried state: the recurrence still needs somewhere to keep it
    float* s = state;
    if (s == nullptr) {
      scratch = CudaTensor::empty(ctx, {N, nq * D * D});
      s = scratch.data<float>();
    }
    simple_gla_recurrent_forward_cuda(o.data<float>(), s, in, p, stream);
  } else {
    const size_t bytes = simple_gla_chunked_cuda_workspace_bytes(p);
    CudaTensor ws = cuda_scratch_bytes(ctx, std::max<size_t>(bytes, 16));
    simple_gla_chunked_forward_cuda(o.data<float>(), state, in, p, ws.raw(), bytes, stream);
  }
  // Group RMSNorm, then the sigmoid gate (in place), then dense.
  lightning_group_norm_gate_cuda(o.data<float>(), o.data<float>(), gate.data<float>(), w.g_norm.data<float>(), T, I,
                                 d.group_norm_size, d.norm_eps, stream);
  cuda_linear_forward(ctx, out, o.data<float>(), w.dense, T);
}

}  // namespace hlm
