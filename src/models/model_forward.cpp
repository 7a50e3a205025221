// Model::forward: the decoder shared by every architecture, read top to bottom.
//   h = embed(ids)·m_emb
//   per layer, pre-norm block:  h += m_res·mixer(norm_in(h));  h += m_res·mlp(norm_post(h))
//              post-norm block: h += norm_post(mixer(h));       h += norm_ff(mlp(h))        (OLMo-Hybrid attention)
//              parallel block:  n = norm_in(h); h += mixer(n); h += mlp(n)                  (Cohere2)
//   norms are RMSNorm, or LayerNorm without bias where the spec says so (Cohere2)
//   mixer = softmax attention (full_attention), Gated DeltaNet (linear_attention), Mamba-2 (granitemoehybrid) or
//           Lightning Attention-2 (bailing_moe_linear)
//   mlp   = dense SwiGLU or routed experts, by the layer's FfnKind; with a shared MLP (granitemoehybrid) the
//           shared SwiGLU plus, on MoE layers, the routed experts
//   logits = lm_head(norm(h)) / logits_scaling · logit_scale
#include <algorithm>

#include "layers/attention_layer.h"
#include "layers/gdn_layer.h"
#include "layers/lightning_layer.h"
#include "layers/mamba2_layer.h"
#include "layers/mlp_layer.h"
#include "layers/moe_layer.h"
#include "models/architecture.h"
#include "models/model.h"
#include "ops/embedding/embedding.h"
#include "ops/layernorm/layernorm.h"
#include "ops/matmul/matmul.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

GdnDims gdn_dims(const ModelConfig& c) {
  HLM_CHECK(c.linear.has_value(), "model_type ", c.model_type, " has no linear-attention config");
  const LinearAttentionConfig& l = *c.linear;
  GdnDims d;
  d.key_heads = l.num_key_heads;
  d.value_heads = l.num_value_heads;
  d.key_dim = l.key_head_dim;
  d.value_dim = l.value_head_dim;
  d.conv_kernel = l.conv_kernel_dim;
  d.neg_eigval = l.allow_neg_eigval;
  d.norm_eps = static_cast<float>(l.norm_eps);
  return d;
}

Mamba2Dims mamba2_dims(const ModelConfig& c) {
  HLM_CHECK(c.mamba.has_value(), "model_type ", c.model_type, " has no Mamba-2 config");
  const Mamba2Config& m = *c.mamba;
  Mamba2Dims d;
  d.heads = m.heads;
  d.head_dim = m.head_dim;
  d.groups = m.groups;
  d.state_dim = m.state_dim;
  d.conv_kernel = m.conv_kernel;
  d.chunk = m.chunk_size;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.limits = {m.dt_limit_lo, m.dt_limit_hi, /*apply=*/true};  // HF's chunked (prefill) path clamps
  return d;
}

MoeDims moe_dims(const ModelConfig& c) {
  HLM_CHECK(c.moe.has_value(), "model_type ", c.model_type, " has no expert config");
  MoeDims d{c.moe->num_experts, c.moe->num_experts_per_tok, c.moe->norm_topk_prob};
  d.sigmoid_grouped = c.moe->sigmoid_grouped_router;
  d.n_group = c.moe->n_group;
  d.topk_group = c.moe->topk_group;
  d.routed_scaling = static_cast<float>(c.moe->routed_scaling_factor);
  return d;
}

LightningDims lightning_dims(const ModelConfig& c, int64_t layer) {
  HLM_CHECK(c.lightning.has_value(), "model_type ", c.model_type, " has no Lightning-attention config");
  LightningDims d;
  d.heads = c.num_attention_heads;
  d.head_dim = c.head_dim;
  d.group_norm_size = c.lightning->group_norm_size;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.decay = lightning_decay(layer, c.num_hidden_layers, c.num_attention_heads);
  return d;
}

Tensor Model::forward(const TokenBatch& batch, const ForwardOptions& options, const Capture& capture) {
  batch.validate();
  const ModelConfig& c = config_;
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const int64_t T = batch.total_tokens();
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::vector<int32_t> positions = batch.positions();
  const AttentionDims attention_dims{c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale,
                                     eps};
  const auto emit = [&](CapturePoint point, int layer, const Tensor& value) {
    if (capture) capture(point, layer, value);
  };
  // A block's or the final norm over [T, H] rows: RMSNorm, or LayerNorm without bias (spec.layer_norm).
  const auto norm_rows = [&](float* out, const float* in, const Tensor& weight) {
    if (spec.layer_norm)
      layernorm_forward<float>(out, in, weight.f32(), T, H, c.rms_norm_eps);
    else
      rmsnorm_forward(out, in, weight.f32(), T, H, eps);
  };

  ModelStash* stash = options.stash;
  HLM_CHECK(stash == nullptr || (static_cast<int64_t>(stash->mixer.size()) == c.num_hidden_layers &&
                                 static_cast<int64_t>(stash->mlp.size()) == c.num_hidden_layers),
            "forward: the stash is not sized for this model");
  HLM_CHECK(stash == nullptr || options.mixer == nullptr, "forward: a mixer hook does not fill a stash");
  arena_.reset();
  Tensor hidden = arena_.tensor({T, H});  // residual stream [T, H]
  Tensor normed = arena_.tensor({T, H});  // a norm's output [T, H]
  Tensor delta = arena_.tensor({T, H});   // a branch's output [T, H]
  embedding_forward(hidden.f32(), weights_.embed_tokens.f32(), batch.ids.data(), T, c.vocab_size, H,
                    hyper.embedding_multiplier);

  for (int i = 0; i < static_cast<int>(c.num_hidden_layers); ++i) {
    const DecoderLayerWeights& layer = weights_.layers[static_cast<size_t>(i)];
    const bool full_attention = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention;
    const bool post_norm = full_attention && spec.attention_post_norm;
    LayerStash* mixer_stash = stash ? &stash->mixer[static_cast<size_t>(i)] : nullptr;
    LayerStash* mlp_stash = stash ? &stash->mlp[static_cast<size_t>(i)] : nullptr;
    const AttentionDims layer_dims = layer_attention_dims(attention_dims, i);  // with the layer's sliding window
    const RopeTable* rope = layer_rope(i);
    const auto mixer = [&](float* out, const float* in) {
      if (options.mixer != nullptr) {
        (*options.mixer)(MixerCall{i, c.layer_kinds[static_cast<size_t>(i)], layer_dims, in, out});
      } else if (full_attention) {
        attention_layer_forward(out, in, layer.self_attn, layer_dims, rope, batch, positions.data(), arena_,
                                mixer_stash);
      } else if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Lightning) {
        HLM_CHECK_INPUT(mixer_stash == nullptr, "Lightning attention layers have no backward yet (training is not "
                                                "supported)");
        lightning_layer_forward(out, in, layer.lightning, lightning_dims(c, i), rope, positions.data(), batch, nullptr,
                                nullptr, arena_);
      } else if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::Mamba2) {
        HLM_CHECK_INPUT(mixer_stash == nullptr, "Mamba-2 layers have no backward yet (training is not supported)");
        mamba2_layer_forward(out, in, layer.mamba, mamba2_dims(c), batch, {}, arena_);
      } else {
        gdn_layer_forward(out, in, layer.linear_attn, gdn_dims(c), batch, nullptr, arena_, mixer_stash);
      }
    };
    const auto ffn = [&](float* out, const float* in) {
      if (spec.shared_mlp) {  // shared SwiGLU, plus the routed experts on MoE layers (HF: moe + shared)
        HLM_CHECK_INPUT(mlp_stash == nullptr, "shared-MLP models are not trainable yet");
        mlp_layer_forward(out, in, layer.mlp, T, arena_, nullptr);
        if (c.moe_layer(i)) {
          const Arena::Mark mark = arena_.mark();
          float* routed = arena_.tensor({T, H}).f32();
          float* probs = options.router_probs ? options.router_probs(i, T, c.moe->num_experts) : nullptr;
          moe_layer_forward(routed, in, layer.moe, moe_dims(c), T, arena_, probs);
          for (int64_t j = 0; j < T * H; ++j) out[j] = routed[j] + out[j];
          arena_.release(mark);
        }
      } else if (c.moe_layer(i)) {  // keeps no activations: its backward recomputes (layers/moe_layer_backward.h)
        float* probs = options.router_probs ? options.router_probs(i, T, c.moe->num_experts) : nullptr;
        moe_layer_forward(out, in, layer.moe, moe_dims(c), T, arena_, probs);
      } else {
        mlp_layer_forward(out, in, layer.mlp, T, arena_, mlp_stash);
      }
    };
    emit(CapturePoint::AttnIn, i, hidden);
    if (spec.parallel_block) {  // attn_out: h after the mixer's add, before the MLP's (HF adds h + a + m in that order)
      norm_rows(normed.f32(), hidden.f32(), layer.input_layernorm);
      mixer(delta.f32(), normed.f32());
      emit(CapturePoint::AttnDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
      emit(CapturePoint::AttnOut, i, hidden);
      ffn(delta.f32(), normed.f32());
      emit(CapturePoint::MlpDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
    } else if (post_norm) {
      mixer(normed.f32(), hidden.f32());
      rmsnorm_forward(delta.f32(), normed.f32(), layer.post_attention_layernorm.f32(), T, H, eps);
      emit(CapturePoint::AttnDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), 1.0f, T * H);
      emit(CapturePoint::AttnOut, i, hidden);
      ffn(normed.f32(), hidden.f32());
      rmsnorm_forward(delta.f32(), normed.f32(), layer.post_feedforward_layernorm.f32(), T, H, eps);
      emit(CapturePoint::MlpDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), 1.0f, T * H);
    } else {
      rmsnorm_forward(normed.f32(), hidden.f32(), layer.input_layernorm.f32(), T, H, eps);
      mixer(delta.f32(), normed.f32());
      emit(CapturePoint::AttnDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
      emit(CapturePoint::AttnOut, i, hidden);
      rmsnorm_forward(normed.f32(), hidden.f32(), layer.post_attention_layernorm.f32(), T, H, eps);
      ffn(delta.f32(), normed.f32());
      emit(CapturePoint::MlpDelta, i, delta);
      residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
    }
  }
  norm_rows(normed.f32(), hidden.f32(), weights_.norm);
  emit(CapturePoint::FinalHidden, -1, normed);

  // Rows that get logits: every token, or the last token of each sequence.
  Tensor rows = normed;
  if (!options.all_logits) {
    const int64_t N = batch.num_sequences();
    rows = arena_.tensor({N, H});
    for (int64_t s = 0; s < N; ++s) {
      const int64_t last = batch.cu_seqlens[s + 1] - 1;
      HLM_CHECK_INPUT(last >= batch.cu_seqlens[s], "sequence ", s, " is empty");
      std::copy_n(normed.f32() + last * H, H, rows.f32() + s * H);
    }
  }
  Tensor logits = Tensor::zeros({rows.dim(0), c.vocab_size});
  matmul_forward(logits.f32(), rows.f32(), weights_.lm_head.weight.f32(), nullptr, rows.dim(0), c.vocab_size, H);
  if (hyper.logits_divisor != 1.0f) {
    float* l = logits.f32();
    for (int64_t j = 0; j < logits.numel(); ++j) l[j] /= hyper.logits_divisor;
  }
  if (hyper.logits_multiplier != 1.0f) {
    float* l = logits.f32();
    for (int64_t j = 0; j < logits.numel(); ++j) l[j] *= hyper.logits_multiplier;
  }
  if (options.all_logits) emit(CapturePoint::Logits, -1, logits);
  return logits;
}

}  // namespace hlm
