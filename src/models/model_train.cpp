// Forward-with-trace and backward of the decoder (see model_train.h). The backward walks the layers in reverse:
//   pre-norm block   mid = in + m·mixer(norm_in(in));  out = mid + m·mlp(norm_post(mid))
//   post-norm block  mid = in + norm_post(mixer(in));  out = mid + norm_ff(mlp(mid))
// d_in = d_mid + (mixer branch)ᵀ d_mid;  d_mid = d_out + (mlp branch)ᵀ d_out.
#include "models/model_train.h"

#include "core/host_alloc.h"
#include "layers/attention_layer.h"
#include "layers/gdn_layer.h"
#include "layers/mlp_layer.h"
#include "layers/moe_layer_backward.h"
#include "models/architecture.h"
#include "models/tensor_table.h"
#include "ops/embedding/embedding.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

namespace {

// Every tensor of config's model at its runtime shape, from make(shape); a tied head shares the embedding.
template <class Make>
DecoderWeights weights_shaped_like(const ModelConfig& config, const Make& make) {
  DecoderWeights g;
  g.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (const TensorSpec& spec : expected_tensors(config)) {
    const Shape shape = spec.row->runtime_shape ? spec.row->runtime_shape(config) : spec.shape;
    tensor_slot(g, spec) = make(shape);
  }
  if (config.tie_word_embeddings) g.lm_head.weight = g.embed_tokens;
  return g;
}

}  // namespace

DecoderWeights zero_grads_like(const ModelConfig& config) {
  return weights_shaped_like(config, [](const Shape& shape) { return Tensor::zeros(shape); });
}

DecoderWeights unfilled_weights_like(const ModelConfig& config) {
  return weights_shaped_like(config, [](const Shape& shape) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
    std::shared_ptr<std::byte> storage = host_alloc_uninitialized(bytes);
    void* data = storage.get();
    return Tensor::wrap(std::move(storage), data, shape, DType::F32);
  });
}

std::vector<NamedParameter> named_parameters(const ModelConfig& config, DecoderWeights& weights,
                                             DecoderWeights& grads) {
  std::vector<NamedParameter> out;
  for (const TensorSpec& spec : expected_tensors(config))
    out.push_back({spec.name, spec.group, tensor_slot(weights, spec), tensor_slot(grads, spec)});
  return out;
}

Recompute recompute_from_name(const std::string& name) {
  if (name == "layer") return Recompute::Layer;
  if (name == "none") return Recompute::None;
  HLM_CHECK_INPUT(false, "unknown recompute mode '", name, "' (expected layer or none)");
  return Recompute::Layer;
}

const char* recompute_name(Recompute mode) { return mode == Recompute::Layer ? "layer" : "none"; }

size_t ForwardTrace::kept_bytes() const {
  size_t bytes = final_stream.nbytes() + final_hidden.nbytes();
  for (const auto* list : {&layer_in, &mixer_out})
    for (const Tensor& t : *list) bytes += t.nbytes();
  if (stash_arena) bytes += stash_arena->bytes_in_use();
  return bytes;
}

ForwardTrace model_forward_train(Model& model, const TokenBatch& batch, Recompute recompute) {
  const ModelConfig& c = model.config();
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  // Parallel LayerNorm blocks (Cohere2) have a CPU forward (inference, analysis) but no backward here yet.
  HLM_CHECK_INPUT(!spec.parallel_block && !spec.layer_norm, "training model_type ", c.model_type,
                  " is not supported (parallel LayerNorm blocks have no backward yet); it runs forward only");
  const int last = static_cast<int>(c.num_hidden_layers) - 1;
  ForwardTrace trace;
  ForwardOptions options;
  if (recompute == Recompute::None) {
    trace.stash_arena = std::make_shared<Arena>();
    trace.stash.mixer.assign(static_cast<size_t>(c.num_hidden_layers), LayerStash{trace.stash_arena.get(), {}, {}});
    trace.stash.mlp.assign(static_cast<size_t>(c.num_hidden_layers), LayerStash{trace.stash_arena.get(), {}, {}});
    options.stash = &trace.stash;
  }
  model.forward(batch, options, [&](CapturePoint point, int layer, const Tensor& value) {
    switch (point) {
      case CapturePoint::AttnIn: trace.layer_in.push_back(value.clone()); break;
      case CapturePoint::AttnOut: trace.mixer_out.push_back(value.clone()); break;
      case CapturePoint::MlpDelta:
        if (layer == last) {  // the stream before the final norm, by the forward's own add (bit-identical)
          const bool post_norm =
              c.layer_kinds[static_cast<size_t>(last)] == LayerKind::FullAttention && spec.attention_post_norm;
          trace.final_stream = trace.mixer_out.back().clone();
          residual_add_forward(trace.final_stream.f32(), value.f32(), post_norm ? 1.0f : hyper.residual_multiplier,
                               value.numel());
        }
        break;
      case CapturePoint::FinalHidden: trace.final_hidden = value.clone(); break;
      default: break;
    }
  });
  return trace;
}

namespace {

// Shallow views of a layer's gradient tensors typed as the layer backwards expect (Tensor copies share storage, so
// the backwards' += lands in `grads`).
template <class Grads, class Weights>
Grads as_grads(const Weights& w) {
  Grads g;
  static_cast<Weights&>(g) = w;
  return g;
}

}  // namespace

void model_backward(Model& model, const TokenBatch& batch, const ForwardTrace& trace, const Tensor& d_final_hidden,
                    DecoderWeights& grads) {
  const ModelConfig& c = model.config();
  const DecoderWeights& w = model.weights();
  const ArchitectureSpec& spec = architecture_spec(c.architecture);
  const DecoderHyper hyper = spec.hyper(c);
  const int64_t T = batch.total_tokens(), H = c.hidden_size, L = c.num_hidden_layers;
  const int64_t n = T * H;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::vector<int32_t> positions = batch.positions();
  const AttentionDims attention_dims{c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale,
                                     eps};
  HLM_CHECK(static_cast<int64_t>(trace.layer_in.size()) == L && static_cast<int64_t>(trace.mixer_out.size()) == L,
            "forward trace does not match the model");
  Arena& arena = model.arena();
  arena.reset();

  Tensor d_hidden = arena.tensor({T, H});   // gradient w.r.t. the residual stream at the current point
  Tensor normed = arena.tensor({T, H});
  Tensor branch = arena.tensor({T, H});
  Tensor d_branch = arena.tensor({T, H});
  Tensor d_normed = arena.tensor({T, H});

  HLM_CHECK(trace.final_stream.defined(), "forward trace has no final stream");
  const bool kept = !trace.stash.mixer.empty();
  HLM_CHECK(!kept || (static_cast<int64_t>(trace.stash.mixer.size()) == L &&
                      static_cast<int64_t>(trace.stash.mlp.size()) == L),
            "forward trace stash does not match the model");
  rmsnorm_backward(d_hidden.f32(), grads.norm.f32(), d_final_hidden.f32(), trace.final_stream.f32(), w.norm.f32(), T,
                   H, eps);

  for (int i = static_cast<int>(L) - 1; i >= 0; --i) {
    const DecoderLayerWeights& lw = w.layers[static_cast<size_t>(i)];
    DecoderLayerWeights& lg = grads.layers[static_cast<size_t>(i)];
    const bool full_attention = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention;
    const bool post_norm = full_attention && spec.attention_post_norm;
    const AttentionDims layer_dims = model.layer_attention_dims(attention_dims, i);  // with its sliding window
    const RopeTable* rope = model.layer_rope(i);
    const Tensor& in = trace.layer_in[static_cast<size_t>(i)];
    const Tensor& mid = trace.mixer_out[static_cast<size_t>(i)];
    const bool moe = c.moe_layer(i);
    MlpGrads mlp_grads = as_grads<MlpGrads>(lg.mlp);
    MoeGrads moe_grads = as_grads<MoeGrads>(lg.moe);
    const LayerStash* mixer_stash = kept ? &trace.stash.mixer[static_cast<size_t>(i)] : nullptr;
    // Routed-expert layers keep nothing in the forward: their backward recomputes.
    const LayerStash* mlp_stash = kept && !moe ? &trace.stash.mlp[static_cast<size_t>(i)] : nullptr;
    const auto ffn_forward = [&](float* out, const float* x) {
      if (moe) {
        moe_layer_forward(out, x, lw.moe, moe_dims(c), T, arena);
      } else {
        mlp_layer_forward(out, x, lw.mlp, T, arena);
      }
    };
    const auto ffn_backward = [&](float* dx, const float* d_out, const float* x) {
      if (moe) {
        moe_layer_backward(dx, moe_grads, d_out, x, lw.moe, moe_dims(c), T, arena);
      } else {
        mlp_layer_backward(dx, mlp_grads, d_out, x, lw.mlp, T, arena, mlp_stash);
      }
    };
    // A branch's output before its post-norm: kept, or recomputed.
    const auto branch_output = [&](const LayerStash* stash, const auto& recompute) -> const float* {
      if (stash != nullptr) return stash->output;
      recompute(branch.f32());
      return branch.f32();
    };

    // MLP branch: d_mid = d_out + branchᵀ(d_out).
    if (post_norm) {
      const float* mlp_out =
          branch_output(mlp_stash, [&](float* out) { ffn_forward(out, mid.f32()); });
      rmsnorm_backward(d_branch.f32(), lg.post_feedforward_layernorm.f32(), d_hidden.f32(), mlp_out,
                       lw.post_feedforward_layernorm.f32(), T, H, eps);
      ffn_backward(d_normed.f32(), d_branch.f32(), mid.f32());
      residual_add_forward(d_hidden.f32(), d_normed.f32(), 1.0f, n);
    } else {
      rmsnorm_forward(normed.f32(), mid.f32(), lw.post_attention_layernorm.f32(), T, H, eps);
      for (int64_t j = 0; j < n; ++j) d_branch.f32()[j] = hyper.residual_multiplier * d_hidden.f32()[j];
      ffn_backward(d_normed.f32(), d_branch.f32(), normed.f32());
      rmsnorm_backward(d_branch.f32(), lg.post_attention_layernorm.f32(), d_normed.f32(), mid.f32(),
                       lw.post_attention_layernorm.f32(), T, H, eps);
      residual_add_forward(d_hidden.f32(), d_branch.f32(), 1.0f, n);
    }

    // Mixer branch: d_in = d_mid + branchᵀ(d_mid).
    const auto mixer_backward = [&](float* dx, const float* d_out, const float* x) {
      if (full_attention) {
        AttentionGrads g = as_grads<AttentionGrads>(lg.self_attn);
        attention_layer_backward(dx, g, d_out, x, lw.self_attn, layer_dims, rope, batch, positions.data(), arena,
                                 mixer_stash);
      } else {
        GdnGrads g = as_grads<GdnGrads>(lg.linear_attn);
        gdn_layer_backward(dx, g, d_out, x, lw.linear_attn, gdn_dims(c), batch, nullptr, arena, mixer_stash);
      }
    };
    const auto mixer_forward = [&](float* out, const float* x) {
      if (full_attention) {
        attention_layer_forward(out, x, lw.self_attn, layer_dims, rope, batch, positions.data(), arena);
      } else {
        gdn_layer_forward(out, x, lw.linear_attn, gdn_dims(c), batch, nullptr, arena);
      }
    };
    if (post_norm) {
      const float* mixer_out = branch_output(mixer_stash, [&](float* out) { mixer_forward(out, in.f32()); });
      rmsnorm_backward(d_branch.f32(), lg.post_attention_layernorm.f32(), d_hidden.f32(), mixer_out,
                       lw.post_attention_layernorm.f32(), T, H, eps);
      mixer_backward(d_normed.f32(), d_branch.f32(), in.f32());
      residual_add_forward(d_hidden.f32(), d_normed.f32(), 1.0f, n);
    } else {
      rmsnorm_forward(normed.f32(), in.f32(), lw.input_layernorm.f32(), T, H, eps);
      for (int64_t j = 0; j < n; ++j) d_branch.f32()[j] = hyper.residual_multiplier * d_hidden.f32()[j];
      mixer_backward(d_normed.f32(), d_branch.f32(), normed.f32());
      rmsnorm_backward(d_branch.f32(), lg.input_layernorm.f32(), d_normed.f32(), in.f32(), lw.input_layernorm.f32(),
                       T, H, eps);
      residual_add_forward(d_hidden.f32(), d_branch.f32(), 1.0f, n);
    }
  }
  embedding_backward(grads.embed_tokens.f32(), d_hidden.f32(), batch.ids.data(), T, c.vocab_size, H,
                     hyper.embedding_multiplier);
}

}  // namespace hlm
