// Routed experts on CUDA: upload (experts stacked) and the sorted, grouped forward (contract in moe_layer_cuda.h).
#include "layers/cuda/moe_layer_cuda.h"

#include <string>

#include "backend/cuda/cuda_tensor.h"
#include "core/error.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/moe_dispatch/moe_dispatch_cuda.h"
#include "ops/moe_dispatch/moe_grouped_gemm_cuda.h"

namespace hlm {

namespace {

// Copies host tensor `t` (contiguous f32, `numel` entries) into device memory at dst.
void upload_into(CudaContext& ctx, float* dst, const Tensor& t, int64_t numel, const std::string& name) {
  HLM_CHECK_INPUT(t.defined() && t.numel() == numel && t.dtype() == DType::F32 && t.is_contiguous(), "moe: ", name,
                  " must be a contiguous f32 tensor of ", numel, " entries");
  cuda_copy_to_device(ctx, dst, t.f32(), sizeof(float) * static_cast<size_t>(numel));
}

CudaLinear stacked_linear(CudaContext& ctx, int64_t out, int64_t in) {
  CudaLinear l;
  l.weight = CudaTensor::empty(ctx, {out, in});
  l.out_features = out;
  l.in_features = in;
  return l;
}

}  // namespace

CudaMoeWeights cuda_upload_moe(CudaContext& ctx, const MoeWeights& w, const MoeDims& dims) {
  CudaMoeWeights d;
  d.dims = dims;
  const int64_t E = dims.experts;
  HLM_CHECK_INPUT(w.router.weight.defined() && w.router.weight.rank() == 2 && w.router.out_features() == E,
                  "moe: router weight must be [", E, ", hidden]");
  HLM_CHECK_INPUT(static_cast<int64_t>(w.experts.size()) == E && E > 0, "moe: ", w.experts.size(),
                  " experts loaded, config says ", E);
  HLM_CHECK_INPUT(E <= kMoeMaxExperts && dims.top_k > 0 && dims.top_k <= E && dims.top_k <= kMoeMaxTopK,
                  "the CUDA MoE path runs at most ", kMoeMaxExperts, " experts and top_k ", kMoeMaxTopK, " (", E,
                  " experts, top_k ", dims.top_k, "): use --device cpu");
  const int64_t H = w.router.in_features(), F = w.experts[0].gate_proj.out_features();
  d.hidden = H;
  d.width = F;
  d.router = CudaTensor::empty(ctx, {E, H});
  upload_into(ctx, d.router.data<float>(), w.router.weight, E * H, "mlp.gate.weight");
  d.gate_up = stacked_linear(ctx, E * 2 * F, H);
  d.down = stacked_linear(ctx, E * H, F);
  for (int64_t e = 0; e < E; ++e) {
    const MlpWeights& x = w.experts[static_cast<size_t>(e)];
    const std::string name = "mlp.experts." + std::to_string(e) + ".";
    HLM_CHECK_INPUT(x.gate_proj.weight.shape() == Shape({F, H}) && x.up_proj.weight.shape() == Shape({F, H}) &&
                        x.down_proj.weight.shape() == Shape({H, F}) && !x.gate_proj.bias.defined() &&
                        !x.up_proj.bias.defined() && !x.down_proj.bias.defined(),
                    "moe: ", name, "{gate,up,down}_proj must be [", F, ", ", H, "], [", F, ", ", H, "], [", H, ", ",
                    F, "] without biases");
    float* gu = d.gate_up.weight.data<float>() + e * 2 * F * H;
    upload_into(ctx, gu, x.gate_proj.weight, F * H, name + "gate_proj.weight");
    upload_into(ctx, gu + F * H, x.up_proj.weight, F * H, name + "up_proj.weight");
    upload_into(ctx, d.down.weight.data<float>() + e * H * F, x.down_proj.weight, H * F, name + "down_proj.weight");
  }
  if (dims.sigmoid_grouped) {
    d.expert_bias = CudaTensor::empty(ctx, {E});
    upload_into(ctx, d.expert_bias.data<float>(), w.expert_bias, E, "mlp.gate.expert_bias");
  }
  d.shared_gated = w.has_shared_expert();
  d.has_shared = d.shared_gated || w.has_ungated_shared_expert();
  if (d.has_shared) {
    d.shared_expert = cuda_upload_mlp(ctx, w.shared_expert);
    HLM_CHECK_INPUT(d.shared_expert.gate_proj.in_features == H, "moe: shared expert input width ",
                    d.shared_expert.gate_proj.in_features, ", hidden ", H);
  }
  if (d.shared_gated) {
    HLM_CHECK_INPUT(w.shared_expert_gate.weight.rank() == 2 && w.shared_expert_gate.out_features() == 1 &&
                        w.shared_expert_gate.in_features() == H,
                    "moe: shared_expert_gate weight must be [1, ", H, "]");
    d.shared_gate = CudaTensor::empty(ctx, {1, H});
    upload_into(ctx, d.shared_gate.data<float>(), w.shared_expert_gate.weight, H, "mlp.shared_expert_gate.weight");
  }
  return d;
}

void moe_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaMoeWeights& w, int64_t tokens) {
  HLM_CHECK(out != x, "moe forward: out may not alias x");
  const int64_t T = tokens, E = w.dims.experts, k = w.dims.top_k, H = w.hidden, F = w.width, R = T * k;
  if (T == 0) return;
  const cudaStream_t stream = ctx.stream();
  CudaTensor logits = CudaTensor::empty(ctx, {T, E});
  matmul_forward_cuda(ctx.blaslt(), logits.data<float>(), x, w.router.data<float>(), nullptr, {T, E, H});
  CudaTensor expert = CudaTensor::empty(ctx, {R}, DType::I32), weight = CudaTensor::empty(ctx, {R});
  if (w.dims.sigmoid_grouped)
    moe_route_sigmoid_grouped_cuda(expert.data<int32_t>(), weight.data<float>(), nullptr, logits.data<float>(),
                                   w.expert_bias.data<float>(), T, E, k, w.dims.n_group, w.dims.topk_group,
                                   w.dims.norm_topk_prob, w.dims.routed_scaling, stream);
  else
    moe_route_cuda(expert.data<int32_t>(), weight.data<float>(), nullptr, logits.data<float>(), T, E, k,
                   w.dims.norm_topk_prob, stream);
  CudaTensor counts = CudaTensor::empty(ctx, {E}, DType::I32), offsets = CudaTensor::empty(ctx, {E + 1}, DType::I32);
  CudaTensor perm = CudaTensor::empty(ctx, {R}, DType::I32), slot = CudaTensor::empty(ctx, {R}, DType::I32);
  moe_dispatch_cuda(counts.data<int32_t>(), offsets.data<int32_t>(), perm.data<int32_t>(), slot.data<int32_t>(),
                    expert.data<int32_t>(), T, k, E, stream);
  CudaTensor gu = CudaTensor::empty(ctx, {R, 2 * F});
  CudaTensor y = CudaTensor::empty(ctx, {R, H});
  const int32_t* off = offsets.data<int32_t>();
  if (cuda_linear_is_bf16(w.gate_up)) {
    CudaTensor xs = CudaTensor::empty(ctx, {R, H}, DType::BF16);
    moe_gather_rows_bf16_cuda(xs.data<__nv_bfloat16>(), x, perm.data<int32_t>(), T, k, H, stream);
    moe_grouped_gemm_bf16_cuda(gu.data<float>(), xs.data<__nv_bfloat16>(),
                               w.gate_up.weight_bf16.data<__nv_bfloat16>(), off, E, R, 2 * F, H, stream);
    CudaTensor h = CudaTensor::empty(ctx, {R, F}, DType::BF16);
    moe_swiglu_bf16_cuda(h.data<__nv_bfloat16>(), gu.data<float>(), R, F, stream);
    moe_grouped_gemm_bf16_cuda(y.data<float>(), h.data<__nv_bfloat16>(), w.down.weight_bf16.data<__nv_bfloat16>(),
                               off, E, R, H, F, stream);
  } else {
    CudaTensor xs = CudaTensor::empty(ctx, {R, H});
    moe_gather_rows_cuda(xs.data<float>(), x, perm.data<int32_t>(), T, k, H, stream);
    moe_grouped_gemm_cuda(gu.data<float>(), xs.data<float>(), w.gate_up.weight.data<float>(), off, E, R, 2 * F, H,
                          stream);
    CudaTensor h = CudaTensor::empty(ctx, {R, F});
    moe_swiglu_cuda(h.data<float>(), gu.data<float>(), R, F, stream);
    moe_grouped_gemm_cuda(y.data<float>(), h.data<float>(), w.down.weight.data<float>(), off, E, R, H, F, stream);
  }
  CudaTensor shared, gate;
  if (w.has_shared) {
    shared = CudaTensor::empty(ctx, {T, H});
    if (w.shared_gated) gate = CudaTensor::empty(ctx, {T, 1});
    mlp_layer_forward_cuda(ctx, shared.data<float>(), x, w.shared_expert, T);
    if (w.shared_gated)
      matmul_forward_cuda(ctx.blaslt(), gate.data<float>(), x, w.shared_gate.data<float>(), nullptr, {T, 1, H});
  }
  moe_combine_cuda(out, y.data<float>(), weight.data<float>(), expert.data<int32_t>(), slot.data<int32_t>(),
                   w.has_shared ? shared.data<float>() : nullptr, w.shared_gated ? gate.data<float>() : nullptr, T,
                   k, H, stream);
}

}  // namespace hlm
