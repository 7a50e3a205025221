// A loaded model: config, f32 weights and the forward pass over packed token batches, with capture points.
// Model::load reads an HF model directory (config.json + safetensors, sharded or not), checks every tensor named by
// the tensor table against the shape config.json implies, and reports checkpoint tensors it does not use.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "layers/attention_layer.h"
#include "layers/capture.h"
#include "layers/layer_stash.h"
#include "layers/token_batch.h"
#include "models/decoder_weights.h"
#include "models/hf_config.h"
#include "layers/gdn_layer.h"
#include "layers/lightning_layer.h"
#include "layers/mamba2_layer.h"
#include "layers/moe_layer.h"
#include "ops/rope/rope.h"

namespace hlm {

// An input error naming `dir` unless it is a directory (what Model::load checks first): for callers that want the
// message before other checks that would otherwise speak first (a missing tokenizer.json beside the model).
void check_model_dir(const std::filesystem::path& dir);

// Kept activations of every layer (training without recomputation, layers/layer_stash.h): mixer[i] and mlp[i] are
// filled by layer i's forward. Sized and given an arena by the caller (models/model_train.h does).
struct ModelStash {
  std::vector<LayerStash> mixer;
  std::vector<LayerStash> mlp;
};

// One token-mixer call of the forward, handed to a MixerHook: layer index and kind, the attention dims the forward
// uses for this architecture, the mixer's input [T, H] (after the block's input norm; the residual stream in a
// post-norm block) and its output [T, H] to overwrite. Scratch may come from Model::arena().
struct MixerCall {
  int layer;
  LayerKind kind;
  const AttentionDims& attention;
  const float* in;
  float* out;
};
// Replaces every layer's token mixer while the rest of the block (norms, MLP, residual multipliers) stays the
// forward's own: inference runs attention over a KV cache and GDN from a carried state this way (infer/).
using MixerHook = std::function<void(const MixerCall&)>;

struct ForwardOptions {
  // Logits for every token ([T, V]) or only for the last token of each sequence ([N, V]).
  bool all_logits = false;
  ModelStash* stash = nullptr;  // optional: keep each layer's intermediates for model_backward
  const MixerHook* mixer = nullptr;  // optional (no stash with it): replaces the layers' token mixers
  // Optional: for each routed-expert layer, where to write its router distribution (softmax over all experts) of
  // every token: called with (layer, T, E), returns a [T, E] buffer valid until the layer has run (or nullptr).
  std::function<float*(int layer, int64_t T, int64_t E)> router_probs = nullptr;
};

// The GDN layer dimensions a config implies (hybrid architectures only).
GdnDims gdn_dims(const ModelConfig& config);
// The routed-expert dimensions a config implies (MoE architectures only).
MoeDims moe_dims(const ModelConfig& config);
// The Mamba-2 layer dimensions a config implies (granitemoehybrid only).
Mamba2Dims mamba2_dims(const ModelConfig& config);
// The Lightning layer dimensions of layer `layer` (its decay depends on the global index; bailing_moe_linear only).
LightningDims lightning_dims(const ModelConfig& config, int64_t layer);

class Model {
 public:
  static Model load(const std::filesystem::path& dir);
  // A model with freshly drawn weights (counter-based RNG: independent of thread count): matrices ~ N(0, 0.02),
  // norm weights 1, GDN A_log = log U(a_log_min, a_log_max), dt_bias = softplus⁻¹(dt) with log dt ~
  // U(log dt_min, log dt_max) floored at dt_init_floor. For tests and from-scratch pretraining.
  static Model create(const ModelConfig& config, uint64_t seed);
  // A model from a config and weights already in tensor-table layout (runtime shapes), e.g. a converted student
  // (models/convert.h). The caller has checked the shapes; tied configs get lm_head = embed_tokens.
  static Model from_weights(ModelConfig config, DecoderWeights weights) {
    Model m;
    m.config_ = std::move(config);
    m.weights_ = std::move(weights);
    if (m.config_.tie_word_embeddings) m.weights_.lm_head.weight = m.weights_.embed_tokens;
    m.build_rope_tables();
    return m;
  }
  // Writes config.json and model.safetensors (f32, canonical HF names) into dir, each file atomically.
  void save(const std::filesystem::path& dir) const;

  const ModelConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }
  const std::filesystem::path& dir() const { return dir_; }
  const RopeTable& rope() const { return rope_; }
  // The RoPE table attention layer `layer` uses: the sliding_attention layers' own table when the config gives one
  // (OLMo-3), else rope(); nullptr for a NoPE model (use_rope false) or a NoPE full layer (Cohere2).
  const RopeTable* layer_rope(int64_t layer) const {
    const bool sliding = config_.attention_window(layer) > 0;
    if (!config_.use_rope || (config_.nope_full_layers && !sliding)) return nullptr;
    return config_.sliding_rope && sliding ? &rope_sliding_ : &rope_;
  }
  // The attention dims of layer `layer`: `base` with the layer's sliding window (ModelConfig::attention_window).
  AttentionDims layer_attention_dims(const AttentionDims& base, int64_t layer) const {
    AttentionDims d = base;
    d.window = config_.attention_window(layer);
    return d;
  }
  // Builds rope() (and the sliding layers' table) from the config; every constructor path calls it.
  void build_rope_tables() {
    const ModelConfig& c = config_;
    if (c.use_rope) rope_ = rope_table_build(c.rope, c.head_dim, c.max_position_embeddings);
    if (c.use_rope && c.sliding_rope)
      rope_sliding_ = rope_table_build(*c.sliding_rope, c.head_dim, c.max_position_embeddings);
  }
  DecoderWeights& mutable_weights() { return weights_; }
  // Scratch memory of this model's passes (forward resets it; model_backward reuses it).
  Arena& arena() { return arena_; }
  // Checkpoint tensors that the tensor table does not name (reported by the CLI, never silently dropped).
  const std::vector<std::string>& unused_tensors() const { return unused_tensors_; }

  // Runs the decoder; returns logits (see ForwardOptions). `capture` sees every capture point.
  Tensor forward(const TokenBatch& batch, const ForwardOptions& options = {}, const Capture& capture = {});

 private:
  ModelConfig config_;
  DecoderWeights weights_;
  RopeTable rope_;
  RopeTable rope_sliding_;  // sliding_attention layers' RoPE (ModelConfig::sliding_rope); empty otherwise
  std::filesystem::path dir_;
  std::vector<std::string> unused_tensors_;
  Arena arena_;
};

}  // namespace hlm
