// Gated DeltaNet layer forward on CUDA, step for step as gdn_layer_ref.cpp's forward_activations + o_proj (plain, or
// handing the intermediates back for kept activations).
#include "layers/cuda/gdn_layer_cuda.h"

#include <utility>

#include "core/error.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

CudaGdnWeights cuda_upload_gdn(CudaContext& ctx, const GdnWeights& w, const GdnDims& dims) {
  gdn_check_weights(w, dims);
  HLM_CHECK_INPUT(dims.key_dim <= gated_delta_rule_cuda_max_dim() && dims.value_dim <= gated_delta_rule_cuda_max_dim(),
                  "GDN head dims ", dims.key_dim, " / ", dims.value_dim, " exceed the CUDA limit of ",
                  gated_delta_rule_cuda_max_dim());
  HLM_CHECK_INPUT(dims.conv_kernel <= causal_conv1d_cuda_max_kernel(), "GDN conv kernel ", dims.conv_kernel,
                  " exceeds the CUDA limit of ", causal_conv1d_cuda_max_kernel());
  CudaGdnWeights d;
  d.q_proj = cuda_upload_linear(ctx, w.q_proj, "linear_attn.q_proj");
  d.k_proj = cuda_upload_linear(ctx, w.k_proj, "linear_attn.k_proj");
  d.v_proj = cuda_upload_linear(ctx, w.v_proj, "linear_attn.v_proj");
  d.g_proj = cuda_upload_linear(ctx, w.g_proj, "linear_attn.g_proj");
  d.a_proj = cuda_upload_linear(ctx, w.a_proj, "linear_attn.a_proj");
  d.b_proj = cuda_upload_linear(ctx, w.b_proj, "linear_attn.b_proj");
  d.o_proj = cuda_upload_linear(ctx, w.o_proj, "linear_attn.o_proj");
  d.q_conv = cuda_upload_f32(ctx, w.q_conv, "linear_attn.q_conv1d.weight");
  d.k_conv = cuda_upload_f32(ctx, w.k_conv, "linear_attn.k_conv1d.weight");
  d.v_conv = cuda_upload_f32(ctx, w.v_conv, "linear_attn.v_conv1d.weight");
  d.A_log = cuda_upload_f32(ctx, w.A_log, "linear_attn.A_log");
  d.dt_bias = cuda_upload_f32(ctx, w.dt_bias, "linear_attn.dt_bias");
  d.o_norm = cuda_upload_f32(ctx, w.o_norm, "linear_attn.o_norm.weight");
  return d;
}

GdnInputs<float> gdn_rule_inputs_cuda(const GdnCudaActivations& act, const CudaBatchView& b) {
  GdnInputs<float> in;
  in.q = act.qn.data<float>();
  in.k = act.kn.data<float>();
  in.v = act.vc.data<float>();
  in.g = act.g.data<float>();
  in.beta = act.beta.data<float>();
  in.h0 = nullptr;
  in.cu_seqlens = b.cu_seqlens;
  in.n_seqs = b.n_seqs;
  return in;
}

GdnCudaActivations gdn_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x, const CudaGdnWeights& w,
                                                const GdnDims& d, const CudaBatchView& b, bool keep_rule_scratch) {
  const int64_t n = b.tokens, Ck = d.key_channels(), Cv = d.value_channels(), Hv = d.value_heads;
  const cudaStream_t stream = ctx.stream();
  GdnCudaActivations act;
  for (CudaTensor* t : {&act.qp, &act.kp, &act.qc, &act.kc, &act.qn, &act.kn}) *t = CudaTensor::empty(ctx, {n, Ck});
  for (CudaTensor* t : {&act.vp, &act.z, &act.vc, &act.o}) *t = CudaTensor::empty(ctx, {n, Cv});
  for (CudaTensor* t : {&act.a, &act.b, &act.g, &act.beta}) *t = CudaTensor::empty(ctx, {n, Hv});
  {
    CudaTensor x16;  // bf16 mode: x rounded once for the six projections (unless the caller has it)
    const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.q_proj, n);
    cuda_linear_forward(ctx, act.qp.data<float>(), in, w.q_proj, n);
    cuda_linear_forward(ctx, act.kp.data<float>(), in, w.k_proj, n);
    cuda_linear_forward(ctx, act.vp.data<float>(), in, w.v_proj, n);
    cuda_linear_forward(ctx, act.z.data<float>(), in, w.g_proj, n);
    cuda_linear_forward(ctx, act.a.data<float>(), in, w.a_proj, n);
    cuda_linear_forward(ctx, act.b.data<float>(), in, w.b_proj, n);
  }
  const CausalConv1dCudaParams sk{n, Ck, d.conv_kernel, b.n_seqs, true}, sv{n, Cv, d.conv_kernel, b.n_seqs, true};
  // q and k: the conv and the per-head l2norm (one launch each where the head is 128 wide; the bits of the two).
  const L2normCudaParams l2{n * d.key_heads, d.key_dim};
  causal_conv1d_l2norm_forward_cuda(act.qc.data<float>(), act.qn.data<float>(), act.qp.data<float>(),
                                    w.q_conv.data<float>(), b.cu_seqlens, sk, d.key_dim, l2.eps, stream);
  causal_conv1d_l2norm_forward_cuda(act.kc.data<float>(), act.kn.data<float>(), act.kp.data<float>(),
                                    w.k_conv.data<float>(), b.cu_seqlens, sk, d.key_dim, l2.eps, stream);
  causal_conv1d_forward_cuda(act.vc.data<float>(), nullptr, act.vp.data<float>(), w.v_conv.data<float>(), nullptr,
                             b.cu_seqlens, sv, stream);
  gdn_gate_forward_cuda(act.g.data<float>(), act.beta.data<float>(), act.a.data<float>(), act.b.data<float>(),
                        w.A_log.data<float>(), w.dt_bias.data<float>(), {n, Hv, d.neg_eigval}, stream);
  GdnOutputs<float> out;
  out.o = act.o.data<float>();
  const GdnShape shape{n, d.key_heads, d.value_heads, d.key_dim, d.value_dim};
  // The CPU reference gets static_cast<float>(q_scale()) for T = float.
  const float scale = static_cast<float>(d.q_scale());
  if (w.bf16_compute) {
    const size_t bytes = keep_rule_scratch ? gated_delta_rule_chunked_kept_bytes(shape, b.n_seqs)
                                           : gated_delta_rule_chunked_forward_cuda_workspace_bytes(shape, b.n_seqs);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    gated_delta_rule_chunked_forward_cuda(out, gdn_rule_inputs_cuda(act, b), shape, scale, ws.raw(), bytes, stream,
                                          keep_rule_scratch);
    if (keep_rule_scratch) act.rule_scratch = std::move(ws);
  } else {
    gated_delta_rule_forward_cuda(out, gdn_rule_inputs_cuda(act, b), shape, scale, stream);
  }
  // y in fp32; in the bf16 mode only its rounding, written by the norm itself (gated_rmsnorm_forward_bf16_cuda: the
  // bits of casting the fp32 y, no fp32 y in memory), since o_proj (forward and backward) is its one reader and would
  // round it anyway.
  const GatedRmsnormCudaParams norm{n * Hv, d.value_dim, d.norm_eps};
  if (cuda_linear_is_bf16(w.o_proj)) {
    act.y16 = CudaTensor::empty(ctx, {n, Cv}, DType::BF16);
    gated_rmsnorm_forward_bf16_cuda(act.y16.data<__nv_bfloat16>(), act.o.data<float>(), act.z.data<float>(),
                                    w.o_norm.data<float>(), norm, stream);
  } else {
    act.y = CudaTensor::empty(ctx, {n, Cv});
    gated_rmsnorm_forward_cuda(act.y.data<float>(), act.o.data<float>(), act.z.data<float>(), w.o_norm.data<float>(),
                               norm, stream);
  }
  return act;
}

GdnCudaActivations gdn_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                               const CudaGdnWeights& w, const GdnDims& d, const CudaBatchView& b,
                                               bool keep_rule_scratch) {
  HLM_CHECK(out != x.f32 && static_cast<const void*>(out) != static_cast<const void*>(x.bf16),
            "GDN forward: out may not alias x");
  GdnCudaActivations act = gdn_forward_activations_cuda(ctx, x, w, d, b, keep_rule_scratch);
  cuda_linear_forward(ctx, out, cuda_linear_input(act.y, act.y16), w.o_proj, b.tokens);
  return act;
}

void gdn_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x, const CudaGdnWeights& w,
                            const GdnDims& d, const CudaBatchView& b) {
  gdn_layer_forward_keep_cuda(ctx, out, x, w, d, b);  // the intermediates go back to the allocator
}

void gdn_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaGdnWeights& w,
                            const GdnDims& d, const CudaBatchView& b) {
  gdn_layer_forward_cuda(ctx, out, CudaLinearInput{x, nullptr}, w, d, b);
}

}  // namespace hlm
