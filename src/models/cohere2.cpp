// Cohere2 (HF model_type "cohere2": Command R7B, and Tiny Aya, whose released files name this architecture [I]):
// a parallel-block decoder with sliding-window attention layers, three sliding per full one by default:
//   n = input_layernorm(h);  h += attn(n) + mlp(n)          (one LayerNorm, no bias, feeds both branches)
//   logits = lm_head(norm(h)) · logit_scale                   (a multiply; lm_head tied to embed_tokens by default)
// Attention: no q/k norm; RoPE with interleaved pairs (2i, 2i+1) on sliding_attention layers only, none on
// full_attention layers (NoPE); softmax scale head_dim^-1/2 with head_dim = hidden / heads. Spec:
// shared/docs/families.md §4 (transformers 5.17 modeling_cohere2). CPU only: the CUDA path and training refuse it.
#include "models/architecture.h"

namespace hlm {

const ArchitectureSpec kCohere2Spec = [] {
  ArchitectureSpec s{
      Architecture::Cohere2,
      "cohere2",
      "Cohere2 decoder (parallel blocks, LayerNorm, sliding-window layers with interleaved RoPE, NoPE full layers)",
      QkNorm::None,
      /*attention_post_norm=*/false,
      [](const ModelConfig& c) {
        DecoderHyper h;
        h.attention_scale = c.attention_scale();
        h.logits_multiplier = static_cast<float>(c.logit_scale);
        return h;
      }};
  s.parallel_block = true;
  s.layer_norm = true;
  return s;
}();

}  // namespace hlm
