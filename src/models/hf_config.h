// config.json of an HF model directory, parsed into one typed struct for every architecture hybridlm loads.
// Supported model_type values are those of architecture_specs() (architecture.h). Keys we read are validated (type and
// range); keys we know but do not support with their present value are errors (e.g. use_sliding_window: true);
// keys we do not know are collected in `unknown_keys` and reported by the caller, never silently dropped.
//
// Defaults and rope standardisation follow transformers 5.x (configuration_qwen3.py, configuration_granite.py,
// configuration_utils.py, modeling_rope_utils.py): a key absent from the file takes the HF config class's default,
// except the five sizes (vocab, hidden, intermediate, layers, heads), which are required: HF's defaults there are a
// particular 8B/3B model's, so a file without them is broken, not small.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/rope/rope.h"

namespace hlm {

enum class Architecture {
  Qwen3, Granite, OlmoHybrid, Qwen3Hybrid, Qwen3Moe, Qwen35, Qwen35Moe, Olmo3, Cohere2, Qwen3Next, GraniteMoeHybrid,
  GraniteHybrid, BailingMoeLinear
};

// A layer's token mixer: softmax attention ("full_attention", and "sliding_attention": the same mixer over the last
// ModelConfig::sliding_window keys, see attention_window), Gated DeltaNet ("linear_attention"), or a Mamba-2 mixer
// (Granite-4.0-H's "mamba" layers, layers/mamba2_layer.h), or Lightning Attention-2 (the bailing hybrid-linear
// models' linear layers, layers/lightning_layer.h; layer_types entry "linear_attention" in those models).
enum class LayerKind { FullAttention, LinearAttention, Mamba2, Lightning };

// A layer's feed-forward block: the dense SwiGLU MLP, or routed experts (layers/moe_layer.h).
enum class FfnKind { Dense, Moe };

// Routed-expert (mixture-of-experts) FFN hyperparameters, keys named as in HF's qwen3_moe config. A layer i is MoE
// iff i is not in mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer).
struct MoeConfig {
  int64_t num_experts = 128;           // E
  int64_t num_experts_per_tok = 8;     // k: experts each token is routed to
  int64_t moe_intermediate_size = 768; // each expert's SwiGLU width
  bool norm_topk_prob = false;         // divide the k chosen softmax probabilities by their sum
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;  // layers that stay dense (width intermediate_size)
  // Qwen3.5-MoE / Qwen3-Next: a shared SwiGLU expert of this width beside the routed ones, scaled per token by
  // sigmoid(x · mlp.shared_expert_gate.weightᵀ); 0 = none (qwen3_moe).
  int64_t shared_expert_intermediate_size = 0;
  // bailing_moe_linear (Ring-mini-linear-2.0): the shared expert is not gated (added as is), and the router is
  // sigmoid scores with a per-expert selection bias (mlp.gate.expert_bias), group-limited top-k (n_group groups,
  // group score = sum of its two best biased scores, the best topk_group groups kept), weights = the unbiased scores
  // (renormalised when norm_topk_prob) · routed_scaling_factor (layers/moe_layer.h).
  bool shared_expert_gated = true;
  bool sigmoid_grouped_router = false;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
};

// The bailing hybrid-linear models' keys (BailingMoeLinearV2Config as Ring-mini-linear-2.0's config.json has them).
struct LightningConfig {
  int64_t layer_group_size = 5;       // layer i is softmax attention iff (i+1) % gs == 0 or i >= L // gs * gs
  int64_t group_norm_size = 4;        // groups of the output RMSNorm over the heads·head_dim channels
  int64_t first_k_dense_replace = 1;  // layers i < this have the dense SwiGLU of intermediate_size
};

// The GDN layers' hyperparameters, keys named as in HF's olmo_hybrid / qwen3_5 configs.
struct LinearAttentionConfig {
  int64_t num_key_heads = 0;    // linear_num_key_heads (q, k)
  int64_t num_value_heads = 0;  // linear_num_value_heads (v, gate, β, state); a multiple of num_key_heads
  int64_t key_head_dim = 0;     // linear_key_head_dim
  int64_t value_head_dim = 0;   // linear_value_head_dim
  int64_t conv_kernel_dim = 4;  // linear_conv_kernel_dim
  bool allow_neg_eigval = false;  // linear_allow_neg_eigval: β = 2·sigmoid(b)
  double norm_eps = 1e-5;       // eps of the gated output RMSNorm (OLMo-Hybrid: fixed 1e-5; student: rms_norm_eps)
  // Initialisation ranges (OLMo-Hybrid keys; used by `convert`): A_log ~ log U(a_log_min, a_log_max) ...
  double a_log_min = 0.0, a_log_max = 16.0;
  double dt_min = 1e-3, dt_max = 0.1, dt_init_floor = 1e-4;
};

// Granite-4.0-H's Mamba-2 layers (GraniteMoeHybridConfig's mamba_* keys). Im = expand·hidden = heads·head_dim.
struct Mamba2Config {
  int64_t heads = 128;        // mamba_n_heads (nh)
  int64_t head_dim = 0;       // mamba_d_head (P; "auto" = expand·hidden / heads)
  int64_t state_dim = 256;    // mamba_d_state (N)
  int64_t groups = 1;         // mamba_n_groups (G)
  int64_t conv_kernel = 4;    // mamba_d_conv
  int64_t expand = 2;         // mamba_expand
  int64_t chunk_size = 256;   // mamba_chunk_size
  bool conv_bias = true;      // mamba_conv_bias
  bool proj_bias = false;     // mamba_proj_bias (true is refused)
  double dt_limit_lo = 0.0, dt_limit_hi = 1e300;  // time_step_limit (default (0, inf))
  int64_t inner() const { return heads * head_dim; }                  // Im
  int64_t conv_channels() const { return inner() + 2 * groups * state_dim; }  // xBC width
};

struct ModelConfig {
  std::string model_type;  // "qwen3", "granite"
  Architecture architecture = Architecture::Qwen3;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // absent: 32 for qwen3 (HF's class default), num_attention_heads for granite
  int64_t head_dim = 0;             // absent: 128 for qwen3 (HF's class default), hidden_size / heads for granite
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";  // only silu is supported
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o projections carry a bias
  bool mlp_bias = false;        // gate/up/down projections carry a bias (Granite)
  RopeParams rope;

  // Granite's multipliers; neutral values for other architectures.
  double embedding_multiplier = 1.0;  // embeddings scaled after lookup
  double residual_multiplier = 1.0;   // block outputs scaled before each residual add
  double logits_scaling = 1.0;        // logits divided by this
  std::optional<double> attention_multiplier;  // softmax scale; nullopt = head_dim^-1/2 (granite: always set, HF default 1)

  // Per-layer kinds as written ("full_attention" / "linear_attention") and parsed.
  std::vector<std::string> layer_types;
  std::vector<LayerKind> layer_kinds;
  std::optional<LinearAttentionConfig> linear;  // present for hybrid architectures
  std::optional<Mamba2Config> mamba;  // present for granitemoehybrid (LayerKind::Mamba2 layers)
  std::optional<LightningConfig> lightning;  // present for bailing_moe_linear (LayerKind::Lightning layers)
  // granitemoehybrid: position_embedding_type as written ("rope" turns RoPE on; anything else is NoPE).
  std::string position_embedding_type;
  // granitemoehybrid: the shared SwiGLU MLP's width (shared_intermediate_size); every layer has it, routed experts
  // (intermediate_size wide) are added when num_local_experts > 0.
  int64_t shared_intermediate_size = 0;
  bool use_rope = true;  // false when rope_parameters is null (OLMo-Hybrid allows a NoPE model)
  // Sliding-window attention (OLMo-3): layer_types "sliding_attention" layers attend to the last sliding_window keys
  // (the token itself and W−1 before it); 0 when the class has no such layers.
  int64_t sliding_window = 0;
  // RoPE of the sliding_attention layers when the config gives it per layer type (OLMo-3's rope_parameters
  // {"full_attention": ..., "sliding_attention": ...}); `rope` is then the full_attention layers'.
  std::optional<RopeParams> sliding_rope;
  // Cohere2: full_attention layers use no positional encoding (RoPE only on sliding_attention layers).
  bool nope_full_layers = false;
  double logit_scale = 1.0;  // Cohere2: logits are multiplied by this
  // The attention window of layer i: sliding_window for a "sliding_attention" layer, else 0 (unbounded).
  int64_t attention_window(int64_t layer) const {
    return layer_types[static_cast<size_t>(layer)] == "sliding_attention" ? sliding_window : 0;
  }
  std::optional<MoeConfig> moe;  // present for MoE architectures
  std::vector<FfnKind> ffn_kinds;  // per layer; empty means every layer dense
  bool moe_layer(int64_t layer) const {
    return !ffn_kinds.empty() && ffn_kinds[static_cast<size_t>(layer)] == FfnKind::Moe;
  }
  bool has_moe_layers() const;

  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;       // the first one when config.json lists several
  std::vector<int64_t> eos_token_ids;        // all of them (empty when eos_token_id is unset)
  std::string dtype;  // "float32", "bfloat16", ... as written ("dtype" or "torch_dtype"); informational

  std::vector<std::string> unknown_keys;  // present in the file, not read by us (sorted; rope keys as "rope_parameters.k")

  float attention_scale() const;  // attention_multiplier or head_dim^-1/2
};

// The most decoder layers a config may ask for (hf_config.cpp's resource limits; the deepest released models have
// ~128): more is an input error before anything is sized from it.
inline constexpr int64_t kModelMaxLayers = int64_t{1} << 12;

// Parses config.json text/JSON. `source` names the file in error messages. The rope parameters come back standardised
// (rope_theta, rope_type, original_max_position_embeddings resolved) and ready for rope_table_build.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
// Reads and parses `<dir>/config.json` (or a path to a .json file). Errors are input errors naming the file.
ModelConfig load_model_config(const std::filesystem::path& path);
// Serialises back to HF-style JSON (for models hybridlm writes).
nlohmann::json model_config_to_json(const ModelConfig& config);

}  // namespace hlm
