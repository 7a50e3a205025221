// Model::forward: the pre-norm decoder shared by Qwen3 and Granite, read top to bottom.
//   h = embed(ids)·m_emb;  per layer: h += m_res·attn(norm(h));  h += m_res·mlp(norm(h));  logits = lm_head(norm(h))/s
#include "models/model.h"

#include <algorithm>

#include "layers/attention_layer.h"
#include "layers/mlp_layer.h"
#include "models/architecture.h"
#include "ops/embedding/embedding.h"
#include "ops/matmul/matmul.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

Tensor Model::forward(const TokenBatch& batch, const ForwardOptions& options, const Capture& capture) {
  batch.validate();
  const ModelConfig& c = config_;
  const DecoderHyper hyper = architecture_spec(c.architecture).hyper(c);
  const int64_t T = batch.total_tokens();
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::vector<int32_t> positions = batch.positions();
  const AttentionDims dims{c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale, eps};
  const auto emit = [&](CapturePoint point, int layer, const Tensor& value) {
    if (capture) capture(point, layer, value);
  };

  arena_.reset();
  Tensor hidden = arena_.tensor({T, H});  // residual stream [T, H]
  Tensor normed = arena_.tensor({T, H});  // norm(hidden) [T, H]
  Tensor delta = arena_.tensor({T, H});   // block output [T, H]
  embedding_forward(hidden.f32(), weights_.embed_tokens.f32(), batch.ids.data(), T, c.vocab_size, H,
                    hyper.embedding_multiplier);

  for (int i = 0; i < static_cast<int>(c.num_hidden_layers); ++i) {
    const DecoderLayerWeights& layer = weights_.layers[static_cast<size_t>(i)];
    emit(CapturePoint::AttnIn, i, hidden);
    rmsnorm_forward(normed.f32(), hidden.f32(), layer.input_layernorm.f32(), T, H, eps);
    attention_layer_forward(delta.f32(), normed.f32(), layer.self_attn, dims, rope_, batch, positions.data(), arena_);
    emit(CapturePoint::AttnDelta, i, delta);
    residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
    emit(CapturePoint::AttnOut, i, hidden);
    rmsnorm_forward(normed.f32(), hidden.f32(), layer.post_attention_layernorm.f32(), T, H, eps);
    mlp_layer_forward(delta.f32(), normed.f32(), layer.mlp, T, arena_);
    emit(CapturePoint::MlpDelta, i, delta);
    residual_add_forward(hidden.f32(), delta.f32(), hyper.residual_multiplier, T * H);
  }
  rmsnorm_forward(normed.f32(), hidden.f32(), weights_.norm.f32(), T, H, eps);
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
  if (options.all_logits) emit(CapturePoint::Logits, -1, logits);
  return logits;
}

}  // namespace hlm
