// CudaModel's view for the fused batch-1 decode (contract in cuda_model.h; the kernel: ops/fused_decode/).
#include <string>

#include "core/error.h"
#include "models/architecture.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/cuda_model_layer.h"

namespace hlm {

std::string CudaModel::fused_decode_refusal() const {
  const ModelConfig& c = config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  // The block shapes the kernel does not have: each is a capability of the architecture, not a model name.
  if (spec.attention_post_norm) return "post-norm attention blocks";
  if (spec.parallel_block) return "a parallel block";
  if (spec.layer_norm) return "LayerNorm decoder norms";
  if (!bf16_compute_) return "fp32 weights (the kernel reads bf16 weights)";
  const int64_t D = c.head_dim;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    const std::string at = " (layer " + std::to_string(i) + ")";
    if (!l.full_attention) return "a token mixer other than full attention" + at;
    if (l.moe) return "a mixture-of-experts FFN" + at;
    const CudaAttentionWeights& a = l.self_attn;
    if (a.gate_proj.out_features > 0) return "an attention output gate" + at;
    if ((a.q_norm_size != 0 && a.q_norm_size != D) || (a.k_norm_size != 0 && a.k_norm_size != D))
      return "q/k norms over the whole projection" + at;
    for (const CudaLinear* p : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &l.mlp.gate_proj, &l.mlp.up_proj,
                                &l.mlp.down_proj}) {
      if (p->has_bias) return "a projection bias" + at;
      if (!cuda_linear_is_bf16(*p)) return "a projection without its bf16 copy" + at;
    }
  }
  return {};
}

FusedDecodeLayer CudaModel::fused_decode_layer(int layer) const {
  HLM_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()), "fused_decode_layer: layer ", layer);
  const Layer& l = *layers_[static_cast<size_t>(layer)];
  HLM_CHECK(l.full_attention && !l.moe, "fused_decode_layer: layer ", layer, " is not a dense attention block");
  const auto bf16 = [](const CudaLinear& p) { return p.weight_bf16.data<__nv_bfloat16>(); };
  FusedDecodeLayer f;
  f.input_norm = l.input_layernorm.data<float>();
  f.post_attention_norm = l.post_attention_layernorm.data<float>();
  f.q = bf16(l.self_attn.q_proj);
  f.k = bf16(l.self_attn.k_proj);
  f.v = bf16(l.self_attn.v_proj);
  f.o = bf16(l.self_attn.o_proj);
  f.gate = bf16(l.mlp.gate_proj);
  f.up = bf16(l.mlp.up_proj);
  f.down = bf16(l.mlp.down_proj);
  f.q_norm = l.self_attn.q_norm_size > 0 ? l.self_attn.q_norm.data<float>() : nullptr;
  f.k_norm = l.self_attn.k_norm_size > 0 ? l.self_attn.k_norm.data<float>() : nullptr;
  f.window = config_.attention_window(layer);
  return f;
}

}  // namespace hlm
