// CudaModel's per-layer weights (private to models/cuda: cuda_model.cpp uploads and runs them, cuda_model_train.cpp
// differentiates them). The slots mirror models/decoder_weights.h's DecoderLayerWeights.
#pragma once
#include <utility>

#include "layers/cuda/lightning_layer_cuda.h"
#include "layers/cuda/mamba2_layer_cuda.h"
#include "layers/cuda/moe_layer_cuda.h"
#include "models/cuda/cuda_model.h"

namespace hlm {

// The projections of each block kind: the device slot and its host twin, in the tensor table's order. One list for
// for_each_tensor (download, names, zeroing) and for_each_linear (the bf16 copies).
inline constexpr std::pair<CudaLinear CudaAttentionWeights::*, Linear AttentionWeights::*> kAttentionLinears[] = {
    {&CudaAttentionWeights::q_proj, &AttentionWeights::q_proj},
    {&CudaAttentionWeights::k_proj, &AttentionWeights::k_proj},
    {&CudaAttentionWeights::v_proj, &AttentionWeights::v_proj},
    {&CudaAttentionWeights::o_proj, &AttentionWeights::o_proj}};
inline constexpr std::pair<CudaLinear CudaGdnWeights::*, Linear GdnWeights::*> kGdnLinears[] = {
    {&CudaGdnWeights::q_proj, &GdnWeights::q_proj}, {&CudaGdnWeights::k_proj, &GdnWeights::k_proj},
    {&CudaGdnWeights::v_proj, &GdnWeights::v_proj}, {&CudaGdnWeights::g_proj, &GdnWeights::g_proj},
    {&CudaGdnWeights::a_proj, &GdnWeights::a_proj}, {&CudaGdnWeights::b_proj, &GdnWeights::b_proj},
    {&CudaGdnWeights::o_proj, &GdnWeights::o_proj}};
// A Lightning layer's linears (query_key_value is held as three row blocks: no slot-for-slot host twin either).
inline constexpr CudaLinear CudaLightningWeights::* kLightningLinears[] = {
    &CudaLightningWeights::q_proj, &CudaLightningWeights::k_proj, &CudaLightningWeights::v_proj,
    &CudaLightningWeights::g_proj, &CudaLightningWeights::dense};
// A Mamba-2 layer's linears (in_proj is held as three row blocks, so there is no slot-for-slot host twin).
inline constexpr CudaLinear CudaMamba2Weights::* kMamba2Linears[] = {
    &CudaMamba2Weights::in_z, &CudaMamba2Weights::in_xbc, &CudaMamba2Weights::in_dt, &CudaMamba2Weights::out_proj};
inline constexpr std::pair<CudaLinear CudaMlpWeights::*, Linear MlpWeights::*> kMlpLinears[] = {
    {&CudaMlpWeights::gate_proj, &MlpWeights::gate_proj},
    {&CudaMlpWeights::up_proj, &MlpWeights::up_proj},
    {&CudaMlpWeights::down_proj, &MlpWeights::down_proj}};

struct CudaModel::Layer {
  bool full_attention = false;
  CudaTensor input_layernorm;             // [hidden]; empty in post-norm blocks
  CudaAttentionWeights self_attn;         // full_attention layers
  CudaGdnWeights linear_attn;             // linear_attention layers
  bool mamba2 = false;                    // Mamba-2 layers (granitemoehybrid): mamba, not linear_attn
  CudaMamba2Weights mamba;
  bool lightning = false;                 // Lightning Attention-2 layers (bailing_moe_linear): lightning_attn
  CudaLightningWeights lightning_attn;
  CudaTensor post_attention_layernorm;    // [hidden]
  CudaMlpWeights mlp;                     // dense FFN layers
  bool moe = false;                       // routed-expert FFN layers (ModelConfig::moe_layer): moe_ffn, not mlp
  CudaMoeWeights moe_ffn;
  bool shared_mlp = false;                // granitemoehybrid: mlp is the shared SwiGLU, added to moe_ffn's output
  CudaTensor post_feedforward_layernorm;  // [hidden]; post-norm blocks only
};

// Every linear of every layer (the LM head is not a CudaLinear): the bf16 copies (cuda_model_precision.cpp), the
// gradient holders' zeroed marks (set_zero).
template <class Fn>
void CudaModel::for_each_linear(const Fn& fn) {
  for (auto& layer : layers_) {
    Layer& d = *layer;
    if (d.full_attention) {
      for (const auto& slots : kAttentionLinears) fn(d.self_attn.*slots.first);
    } else if (d.mamba2) {
      for (const auto slot : kMamba2Linears) fn(d.mamba.*slot);
    } else if (d.lightning) {
      for (const auto slot : kLightningLinears) fn(d.lightning_attn.*slot);
    } else {
      for (const auto& slots : kGdnLinears) fn(d.linear_attn.*slots.first);
    }
    if (!d.moe || d.shared_mlp) for (const auto& slots : kMlpLinears) fn(d.mlp.*slots.first);
    if (!d.moe) continue;
    fn(d.moe_ffn.gate_up);  // the stacked experts; the router stays fp32 (moe_layer_cuda.h says why)
    fn(d.moe_ffn.down);
    if (d.moe_ffn.has_shared)
      for (const auto& slots : kMlpLinears) fn(d.moe_ffn.shared_expert.*slots.first);
  }
}

}  // namespace hlm
