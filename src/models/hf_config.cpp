// config.json -> ModelConfig as transformers 5.x reads it: the class defaults of Qwen3Config / GraniteConfig, the
// rope standardisation of RotaryEmbeddingConfigMixin (rope_scaling or rope_parameters, rope_theta moved in, legacy
// "type", original_max_position_embeddings filled in) and the checks that HF turns into errors or broken shapes.
// Non-goals: sliding-window layers, per-layer rope other than full_attention, longrope.
#include "models/hf_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"
#include "models/config_classes.h"
#include "models/tensor_table.h"

namespace hlm {
namespace {

using json = nlohmann::json;

// Which recurrent-layer keys a config class reads.
enum class HybridKeys {
  None,        // dense: every layer full_attention
  OlmoHybrid,  // OlmoHybridConfig defaults (every 4th layer full attention, β×2, dk = 0.75·hidden/heads)
  Student,     // hybridlm's converted student (seed Algorithm 1: heads and head dims of the teacher)
  Qwen35,      // Qwen3_5(Moe)TextConfig defaults (layer i full iff (i+1) % full_attention_interval == 0, Hk 16,
               // Hv 32, dk = dv = 128, β = sigmoid(b), gated norm eps = rms_norm_eps)
};

// What differs between the HF config classes we mirror.
struct ConfigClass {
  Architecture architecture;
  std::string_view hf_class;                   // architectures[0] in files we write
  std::optional<int64_t> num_key_value_heads;  // class default when the key is absent; nullopt = num_attention_heads
  std::optional<int64_t> head_dim;             // class default when absent; nullopt = hidden_size / heads
  int64_t max_position_embeddings;
  std::optional<int64_t> bos_token_id, eos_token_id;
  bool granite_scalars;  // reads mlp_bias, embedding/residual/attention multipliers, logits_scaling
  bool qwen3_sliding;    // reads use_sliding_window (sliding_window, max_window_layers are then irrelevant)
  HybridKeys hybrid;
  bool moe_keys = false;  // reads Qwen3MoeConfig's expert keys
  // Qwen3.5 text configs: partial_rotary_factor honoured (default 0.25; M-RoPE keys accepted: text positions are
  // equal on its three axes, so it is 1-D partial RoPE), attn_output_gate must be true (or absent).
  bool qwen35 = false;
  // Qwen3_5MoeTextConfig: every layer routed experts + a gated shared expert, top-k always renormalised; it has no
  // intermediate_size, norm_topk_prob, decoder_sparse_step or mlp_only_layers.
  bool shared_expert_moe = false;
  // Olmo3Config: layer_types may hold "sliding_attention" (default: every 4th layer full, the rest sliding), read
  // with sliding_window (default 4096); rope_parameters may be given per layer type.
  bool sliding_layers = false;
  double rms_norm_eps = 1e-6;     // the class default of rms_norm_eps
  double default_theta = 10000.0; // RotaryEmbeddingConfigMixin.default_theta (Olmo3Config: 5e5)
  // Cohere2Config (Command R7B, Tiny Aya): head_dim is hidden // heads whatever the file says; the norm eps is
  // layer_norm_eps (LayerNorm); logit_scale multiplies the logits; layer_types default from sliding_window_pattern;
  // RoPE is interleaved and only on sliding layers (full layers are NoPE); embeddings tied by default.
  bool cohere2_keys = false;
  // GraniteMoeHybridConfig (Granite-4.0-H): layer_types / layers_block_type of "mamba" and "attention" (default all
  // mamba), mamba_* keys, NoPE unless position_embedding_type is "rope", a shared MLP of shared_intermediate_size in
  // every layer plus num_local_experts routed experts of intermediate_size (0 = none), Granite's four scalars.
  bool granite_hybrid = false;
  // BailingMoeLinearV2Config (Ring-mini-linear-2.0): Lightning / softmax layers from layer_group_size, partial RoPE
  // (partial_rotary_factor, default 0.5), the sigmoid group-limited router with expert bias, an ungated shared
  // expert, dense layers below first_k_dense_replace (parse_bailing).
  bool bailing = false;
};

constexpr std::array<ConfigClass, 13> kConfigClasses{{
    {Architecture::Qwen3, "Qwen3ForCausalLM", 32, 128, 32768, std::nullopt, std::nullopt, false, true,
     HybridKeys::None, false},
    {Architecture::Granite, "GraniteForCausalLM", std::nullopt, std::nullopt, 2048, 1, 2, true, false,
     HybridKeys::None, false},
    {Architecture::OlmoHybrid, "OlmoHybridForCausalLM", std::nullopt, std::nullopt, 65536, std::nullopt, 100257, false,
     false, HybridKeys::OlmoHybrid, false},
    {Architecture::Qwen3Hybrid, "Qwen3HybridForCausalLM", 32, 128, 32768, std::nullopt, std::nullopt, false, false,
     HybridKeys::Student, false},
    // Qwen3MoeConfig has no head_dim field: its attention takes getattr(config, "head_dim", hidden // heads).
    {Architecture::Qwen3Moe, "Qwen3MoeForCausalLM", 4, std::nullopt, 32768, std::nullopt, std::nullopt, false, true,
     HybridKeys::None, /*moe_keys=*/true},
    {Architecture::Qwen35, "Qwen3_5ForCausalLM", 4, 256, 32768, std::nullopt, std::nullopt, false, false,
     HybridKeys::Qwen35, /*moe_keys=*/false, /*qwen35=*/true},
    {Architecture::Qwen35Moe, "Qwen3_5MoeForCausalLM", 2, 256, 32768, std::nullopt, std::nullopt, false, false,
     HybridKeys::Qwen35, /*moe_keys=*/true, /*qwen35=*/true, /*shared_expert_moe=*/true},
    // Olmo3Config: no head_dim field (hidden // heads), num_key_value_heads defaults to the heads, eps 1e-5.
    {.architecture = Architecture::Olmo3, .hf_class = "Olmo3ForCausalLM", .num_key_value_heads = std::nullopt,
     .head_dim = std::nullopt, .max_position_embeddings = 2048, .bos_token_id = std::nullopt, .eos_token_id = 50279,
     .granite_scalars = false, .qwen3_sliding = false, .hybrid = HybridKeys::None, .sliding_layers = true,
     .rms_norm_eps = 1e-5, .default_theta = 500000.0},
    // Cohere2Config: head_dim forced to hidden // heads, num_key_value_heads defaults to the heads, bos 5, eos 255001.
    {.architecture = Architecture::Cohere2, .hf_class = "Cohere2ForCausalLM", .num_key_value_heads = std::nullopt,
     .head_dim = std::nullopt, .max_position_embeddings = 8192, .bos_token_id = 5, .eos_token_id = 255001,
     .granite_scalars = false, .qwen3_sliding = false, .hybrid = HybridKeys::None, .sliding_layers = true,
     .rms_norm_eps = 1e-5, .default_theta = 10000.0, .cohere2_keys = true},
    // Qwen3NextConfig: Qwen3.5's attention / GDN keys and defaults, Qwen3-MoE's expert schedule plus a shared expert.
    {Architecture::Qwen3Next, "Qwen3NextForCausalLM", 2, 256, 32768, std::nullopt, std::nullopt, false, false,
     HybridKeys::Qwen35, /*moe_keys=*/true, /*qwen35=*/true},
    // GraniteMoeHybridConfig: num_key_value_heads defaults to the heads, no head_dim field (hidden // heads).
    {.architecture = Architecture::GraniteMoeHybrid, .hf_class = "GraniteMoeHybridForCausalLM",
     .num_key_value_heads = std::nullopt, .head_dim = std::nullopt, .max_position_embeddings = 2048,
     .bos_token_id = 1, .eos_token_id = 2, .granite_scalars = true, .qwen3_sliding = false,
     .hybrid = HybridKeys::None, .rms_norm_eps = 1e-6, .default_theta = 10000.0, .granite_hybrid = true},
    // hybridlm's hybrid student of a dense Granite teacher (convert): GraniteConfig's keys and defaults (Granite's four
    // scalars, mlp_bias) plus the student's layer_types and GDN geometry, as qwen3_hybrid has them.
    {Architecture::GraniteHybrid, "GraniteHybridForCausalLM", std::nullopt, std::nullopt, 2048, 1, 2, true, false,
     HybridKeys::Student, false},
    // BailingMoeLinearV2Config: the class was not read here (its file is only on the HF hub); absent keys take
    // Ring-mini-linear-2.0's config.json values or, failing those, Ring-2.5's class defaults (families.md §6).
    {.architecture = Architecture::BailingMoeLinear, .hf_class = "BailingMoeLinearV2ForCausalLM",
     .num_key_value_heads = std::nullopt, .head_dim = std::nullopt, .max_position_embeddings = 131072,
     .bos_token_id = std::nullopt, .eos_token_id = std::nullopt, .granite_scalars = false, .qwen3_sliding = false,
     .hybrid = HybridKeys::None, .rms_norm_eps = 1e-6, .default_theta = 600000.0, .bailing = true},
}};

// Multimodal wrappers whose config.json nests the text decoder's config under "text_config" (Qwen3_5Config,
// Qwen3_5MoeConfig): the text config is read, with the model_type it names (default: the second column).
constexpr std::pair<std::string_view, std::string_view> kTextConfigWrappers[] = {
    {"qwen3_5", "qwen3_5_text"}, {"qwen3_5_moe", "qwen3_5_moe_text"}};

const ConfigClass& config_class(Architecture architecture) {
  for (const ConfigClass& c : kConfigClasses)
    if (c.architecture == architecture) return c;
  throw_internal_error("hf_config: no ConfigClass for architecture ", static_cast<int>(architecture));
}

// PreTrainedConfig bookkeeping and training-only keys: accepted without a word. Qwen3's sliding-window keys are
// read (and so accepted) by the qwen3 branch below.
constexpr std::string_view kIgnoredKeys[] = {
    "_attn_implementation_autoset", "_commit_hash", "_name_or_path", "architectures", "attention_dropout",
    "chunk_size_feed_forward", "id2label", "initializer_range", "is_encoder_decoder", "label2id", "name_or_path",
    "num_labels", "output_attentions", "output_hidden_states", "pad_token_id", "problem_type", "return_dict",
    "tie_encoder_decoder", "transformers_version", "use_cache"};

std::string json_desc(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return str_cat(v.type_name(), " ", s);
}

int64_t as_int(const json& v, std::string_view key) {
  HLM_CHECK_INPUT(v.is_number_integer(), "key '", key, "' must be an integer, got ", json_desc(v));
  return v.get<int64_t>();
}
double as_number(const json& v, std::string_view key) {
  HLM_CHECK_INPUT(v.is_number(), "key '", key, "' must be a number, got ", json_desc(v));
  return v.get<double>();
}
bool as_bool(const json& v, std::string_view key) {
  HLM_CHECK_INPUT(v.is_boolean(), "key '", key, "' must be true or false, got ", json_desc(v));
  return v.get<bool>();
}
std::string as_string(const json& v, std::string_view key) {
  HLM_CHECK_INPUT(v.is_string(), "key '", key, "' must be a string, got ", json_desc(v));
  return v.get<std::string>();
}

// A JSON object whose keys are marked as they are read, so the unread ones can be reported.
class KeyReader {
 public:
  KeyReader(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}
  const json* get(const std::string& key) {
    read_.insert(key);
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  std::string name(const std::string& key) const { return prefix_ + key; }
  const json& require(const std::string& key) {
    const json* v = get(key);
    HLM_CHECK_INPUT(v != nullptr, "missing required key '", name(key), "'");
    return *v;
  }
  // Absent -> fallback; null is a type error (HF's strict fields reject it).
  int64_t int_or(const std::string& key, int64_t fallback) {
    const json* v = get(key);
    return v ? as_int(*v, name(key)) : fallback;
  }
  double number_or(const std::string& key, double fallback) {
    const json* v = get(key);
    return v ? as_number(*v, name(key)) : fallback;
  }
  bool bool_or(const std::string& key, bool fallback) {
    const json* v = get(key);
    return v ? as_bool(*v, name(key)) : fallback;
  }
  // Absent or null -> nullopt.
  std::optional<double> optional_number(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    return as_number(*v, name(key));
  }
  void collect_unread(std::vector<std::string>& out) const {
    for (const auto& [key, value] : object_.items())
      if (!read_.count(key)) out.push_back(prefix_ + key);
  }

 private:
  const json& object_;
  std::string prefix_;
  std::set<std::string> read_;
};

int64_t positive(int64_t value, std::string_view key) {
  HLM_CHECK_INPUT(value > 0, "key '", key, "' must be > 0, got ", value);
  return value;
}

// Resource limits (docs/reliability.md): a config.json asking for sizes beyond any real model is refused while it is
// parsed, before anything (layer lists, rope tables, weights) is sized from it. Each limit is far above every
// released model: the largest vocabularies are ~262k ids (Gemma 3), the widest matrices ~53k (Llama 3.1 405B's MLP),
// the deepest stacks ~128 layers, the longest contexts ~10M positions.
constexpr int64_t kMaxVocab = int64_t{1} << 24;           // 16.8M ids
constexpr int64_t kMaxWidth = int64_t{1} << 20;           // hidden, intermediate and head sizes
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxPositions = int64_t{1} << 31;
constexpr int64_t kMaxConvKernel = int64_t{1} << 10;
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;  // one weight tensor (4 TiB in f32)

int64_t bounded(int64_t value, std::string_view key, int64_t limit) {
  HLM_CHECK_INPUT(value <= limit, "key '", key, "' is ", value, ", above the limit ", limit,
                  " (larger than any real model; refused before allocating)");
  return value;
}

const ArchitectureSpec& spec_for_model_type(const std::string& model_type) {
  std::string supported;
  for (const ArchitectureSpec* spec : architecture_specs()) {
    if (spec->model_type == model_type) return *spec;
    supported += str_cat(supported.empty() ? "" : ", ", spec->model_type);
  }
  throw_input_error("unsupported model_type '", model_type, "' (supported: ", supported, ")");
}

void parse_rope_dict(KeyReader& top, const json& dict, const std::string& prefix, ModelConfig& c, RopeParams& p);

// The rope dict as RotaryEmbeddingConfigMixin.convert_rope_params_to_dict + standardize_rope_params leave it, then
// the keys each rope_type's init function reads. Keys HF would warn about as unrecognised go to unknown_keys.
void parse_rope(KeyReader& top, ModelConfig& c) {
  const json* scaling = top.get("rope_scaling");
  const json* parameters = top.get("rope_parameters");
  json dict = json::object();
  std::string prefix = "rope_parameters.";
  // `rope_scaling or rope_parameters or {}`: a 4.x rope_scaling wins when it is a non-empty dict.
  if (scaling && !scaling->is_null() && !(scaling->is_object() && scaling->empty())) {
    HLM_CHECK_INPUT(scaling->is_object(), "key 'rope_scaling' must be an object or null, got ", json_desc(*scaling));
    dict = *scaling;
    prefix = "rope_scaling.";
  } else if (parameters && parameters->is_null() && config_class(c.architecture).hybrid == HybridKeys::OlmoHybrid) {
    // OLMo-Hybrid: `rope_parameters: null` disables RoPE (NoPE attention layers, e.g. after DroPE).
    c.use_rope = false;
    (void)top.get("rope_theta");
    return;
  } else if (parameters && !parameters->is_null()) {
    HLM_CHECK_INPUT(parameters->is_object(), "key 'rope_parameters' must be an object or null, got ",
                    json_desc(*parameters));
    dict = *parameters;
  }
  // Per-layer-type form {"full_attention": {...}}: every layer here is full attention, so that entry is the dict;
  // classes with sliding layers (Olmo3Config) also read {"sliding_attention": {...}} for those.
  const bool sliding_class = config_class(c.architecture).sliding_layers;
  if (const auto it = dict.find("full_attention"); it != dict.end()) {
    HLM_CHECK_INPUT(it->is_object(), "key '", prefix, "full_attention' must be an object, got ", json_desc(*it));
    for (const auto& [key, value] : dict.items())
      if (key != "full_attention" && !(sliding_class && key == "sliding_attention"))
        c.unknown_keys.push_back(prefix + key);
    if (const auto sit = dict.find("sliding_attention"); sliding_class && sit != dict.end()) {
      HLM_CHECK_INPUT(sit->is_object(), "key '", prefix, "sliding_attention' must be an object, got ",
                      json_desc(*sit));
      RopeParams sliding;
      parse_rope_dict(top, *sit, prefix + "sliding_attention.", c, sliding);
      c.sliding_rope = sliding;
    }
    prefix += "full_attention.";
    json inner = *it;
    dict = std::move(inner);
  }
  parse_rope_dict(top, dict, prefix, c, c.rope);
  if (sliding_class && !c.sliding_rope) {
    // A flat dict or a legacy rope_scaling (Olmo3Config.convert_rope_params_to_dict): the scaling is merged into
    // full_attention only; sliding layers keep default RoPE with the same θ.
    RopeParams sliding;
    sliding.rope_type = "default";
    sliding.rope_theta = c.rope.rope_theta;
    c.sliding_rope = sliding;
  }
}

// One rope dict (standardised keys of RotaryEmbeddingConfigMixin) into p; `prefix` names its keys in messages.
void parse_rope_dict(KeyReader& top, const json& dict, const std::string& prefix, ModelConfig& c, RopeParams& p) {
  KeyReader r(dict, prefix);

  const json* type = r.get("rope_type");
  const json* legacy_type = r.get("type");
  p.rope_type = type ? as_string(*type, r.name("rope_type"))
                     : (legacy_type ? as_string(*legacy_type, r.name("type")) : std::string("default"));
  // rope_theta: the dict's, else the top-level 4.x key, else RotaryEmbeddingConfigMixin.default_theta.
  const double top_theta = top.number_or("rope_theta", config_class(c.architecture).default_theta);
  p.rope_theta = r.number_or("rope_theta", top_theta);
  const bool qwen35 = config_class(c.architecture).qwen35;
  const bool partial = qwen35 || config_class(c.architecture).bailing;  // classes whose RoPE reads the factor
  const double top_partial =
      top.number_or("partial_rotary_factor", qwen35 ? 0.25 : config_class(c.architecture).bailing ? 0.5 : 1.0);
  p.partial_rotary_factor = r.number_or("partial_rotary_factor", top_partial);
  if (qwen35) {  // M-RoPE: with text-only positions (equal on the three axes) it is 1-D RoPE
    (void)r.get("mrope_section");
    (void)r.get("mrope_interleaved");
  }

  const std::string& t = p.rope_type;
  auto original_max = [&]() {
    // A top-level original_max_position_embeddings overrides the dict's (standardize_rope_params, Phi3 case).
    if (const json* v = top.get("original_max_position_embeddings"))
      return positive(as_int(*v, "original_max_position_embeddings"), "original_max_position_embeddings");
    return positive(r.int_or("original_max_position_embeddings", c.max_position_embeddings),
                    r.name("original_max_position_embeddings"));
  };
  if (t == "default") {
    // Qwen3/Granite compute_default_rope_parameters use the full head_dim: HF ignores partial_rotary_factor here;
    // Qwen3.5's reads it (rotary dim int(head_dim · factor), the first dims of each head).
    if (!partial) p.partial_rotary_factor = 1.0;
  } else if (t == "linear" || t == "dynamic") {
    p.factor = as_number(r.require("factor"), r.name("factor"));
  } else if (t == "yarn") {
    const json& factor = r.require("factor");
    p.original_max_position_embeddings = original_max();
    // A null factor is the ratio of the two context lengths (_compute_yarn_parameters).
    p.factor = factor.is_null() ? static_cast<double>(c.max_position_embeddings) /
                                      static_cast<double>(*p.original_max_position_embeddings)
                                : as_number(factor, r.name("factor"));
    p.attention_factor = r.optional_number("attention_factor");
    p.beta_fast = r.optional_number("beta_fast").value_or(32.0);
    p.beta_slow = r.optional_number("beta_slow").value_or(1.0);
    p.mscale = r.optional_number("mscale");
    p.mscale_all_dim = r.optional_number("mscale_all_dim");
    p.truncate = r.bool_or("truncate", true);
  } else if (t == "llama3") {
    p.factor = as_number(r.require("factor"), r.name("factor"));
    p.low_freq_factor = as_number(r.require("low_freq_factor"), r.name("low_freq_factor"));
    p.high_freq_factor = as_number(r.require("high_freq_factor"), r.name("high_freq_factor"));
    p.original_max_position_embeddings = original_max();
  } else {
    throw_input_error("unsupported rope type '", t, "' in ", prefix.substr(0, prefix.size() - 1),
                      " (supported: default, linear, dynamic, yarn, llama3)");
  }
  // HF's Qwen3/Granite apply_rotary_pos_emb rotate the whole head: a shorter table would not broadcast.
  HLM_CHECK_INPUT(partial || p.partial_rotary_factor == 1.0, "partial_rotary_factor ", p.partial_rotary_factor,
                  " is not supported for model_type ", c.model_type, " (HF rotates the whole head)");
  r.collect_unread(c.unknown_keys);
  try {
    (void)rope_table_build(p, c.head_dim, c.max_position_embeddings);  // range checks of the values
  } catch (Error& e) {
    e.add_context(prefix.substr(0, prefix.size() - 1));
    throw;
  }
}

void parse_token_ids(KeyReader& r, ModelConfig& c, const ConfigClass& cls) {
  if (const json* v = r.get("bos_token_id"); v == nullptr) {
    c.bos_token_id = cls.bos_token_id;
  } else if (!v->is_null()) {
    c.bos_token_id = as_int(*v, "bos_token_id");
  }
  const json* v = r.get("eos_token_id");
  if (v == nullptr) {
    if (cls.eos_token_id) c.eos_token_ids = {*cls.eos_token_id};
  } else if (v->is_array()) {
    for (const json& id : *v) c.eos_token_ids.push_back(as_int(id, "eos_token_id[]"));
  } else if (!v->is_null()) {
    c.eos_token_ids = {as_int(*v, "eos_token_id")};
  }
  if (!c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids.front();
}

// layer_types: dense classes allow only full_attention; hybrid classes both kinds. Absent: all full attention
// (dense), OLMo-Hybrid's default (every 4th layer full, at least one), required for the student.
void parse_granite_layer_types(KeyReader& r, ModelConfig& c);

void parse_layer_types(KeyReader& r, ModelConfig& c, const ConfigClass& cls) {
  if (cls.granite_hybrid) return parse_granite_layer_types(r, c);
  if (cls.bailing) return;  // from layer_group_size (parse_bailing)
  const json* v = r.get("layer_types");
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "full_attention");
  if (v == nullptr || v->is_null()) {
    HLM_CHECK_INPUT(cls.hybrid != HybridKeys::Student, "key 'layer_types' is required for model_type ", c.model_type);
    if (cls.hybrid == HybridKeys::OlmoHybrid) {
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        if (i % 4 != 3) c.layer_types[static_cast<size_t>(i)] = "linear_attention";
      if (c.num_hidden_layers < 4) c.layer_types.back() = "full_attention";
    }
    if (cls.sliding_layers) {  // Olmo3Config / Cohere2Config.__post_init__: full iff (i + 1) % pattern == 0
      const int64_t pattern =
          cls.cohere2_keys ? positive(r.int_or("sliding_window_pattern", 4), "sliding_window_pattern") : 4;
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        if ((i + 1) % pattern != 0) c.layer_types[static_cast<size_t>(i)] = "sliding_attention";
    }
    if (cls.hybrid == HybridKeys::Qwen35) {  // Qwen3_5TextConfig.__post_init__
      const int64_t interval = positive(r.int_or("full_attention_interval", 4), "full_attention_interval");
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        if ((i + 1) % interval != 0) c.layer_types[static_cast<size_t>(i)] = "linear_attention";
    }
  } else {
    if (cls.hybrid == HybridKeys::Qwen35) (void)r.get("full_attention_interval");  // unused beside layer_types
    if (cls.cohere2_keys) (void)r.get("sliding_window_pattern");                   // likewise
    HLM_CHECK_INPUT(v->is_array(), "key 'layer_types' must be a list, got ", json_desc(*v));
    HLM_CHECK_INPUT(static_cast<int64_t>(v->size()) == c.num_hidden_layers, "layer_types has ", v->size(),
                    " entries but num_hidden_layers is ", c.num_hidden_layers);
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string kind = as_string((*v)[i], "layer_types[]");
      if (cls.sliding_layers) {
        HLM_CHECK_INPUT(kind == "full_attention" || kind == "sliding_attention", "layer_types[", i, "] is '", kind,
                        "' (expected 'full_attention' or 'sliding_attention')");
      } else if (cls.hybrid == HybridKeys::None) {
        HLM_CHECK_INPUT(kind == "full_attention", "layer_types[", i, "] is '", kind, "': model_type ", c.model_type,
                        " is dense, only 'full_attention' is supported");
      } else {
        HLM_CHECK_INPUT(kind == "full_attention" || kind == "linear_attention", "layer_types[", i, "] is '", kind,
                        "' (expected 'full_attention' or 'linear_attention')");
      }
      c.layer_types[i] = kind;
    }
  }
  c.layer_kinds.clear();
  for (const std::string& kind : c.layer_types)  // a sliding_attention layer's mixer is softmax attention
    c.layer_kinds.push_back(kind == "linear_attention" ? LayerKind::LinearAttention : LayerKind::FullAttention);
  if (cls.sliding_layers) {
    // Olmo3Config: sliding_window (int or null, default 4096); used only by sliding_attention layers.
    const json* w = r.get("sliding_window");
    const bool any_sliding =
        std::find(c.layer_types.begin(), c.layer_types.end(), "sliding_attention") != c.layer_types.end();
    c.sliding_window = (w == nullptr) ? 4096 : w->is_null() ? 0 : as_int(*w, "sliding_window");
    HLM_CHECK_INPUT(!any_sliding || c.sliding_window > 0, "key 'sliding_window' must be a positive integer when ",
                    "layer_types holds sliding_attention layers, got ", w ? json_desc(*w) : std::string("null"));
    c.sliding_window = bounded(c.sliding_window, "sliding_window", kMaxPositions);
  }
  if (cls.hybrid == HybridKeys::OlmoHybrid) {
    const auto full = std::count(c.layer_types.begin(), c.layer_types.end(), "full_attention");
    HLM_CHECK_INPUT(full > 0 && full < c.num_hidden_layers,
                    "olmo_hybrid needs at least one full_attention and one linear_attention layer");
  }
}

// GraniteMoeHybridConfig: layer_types (attribute alias layers_block_type) of "mamba" / "attention" (transformers
// 5.x's remapped names "linear_attention" / "full_attention" accepted too); absent or null: every layer mamba.
void parse_granite_layer_types(KeyReader& r, ModelConfig& c) {
  const json* v = r.get("layer_types");
  const json* alias = r.get("layers_block_type");
  if (v == nullptr || v->is_null()) v = alias;
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), "mamba");
  if (v != nullptr && !v->is_null()) {
    HLM_CHECK_INPUT(v->is_array(), "key 'layer_types' must be a list, got ", json_desc(*v));
    HLM_CHECK_INPUT(static_cast<int64_t>(v->size()) == c.num_hidden_layers, "layer_types has ", v->size(),
                    " entries but num_hidden_layers is ", c.num_hidden_layers);
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string kind = as_string((*v)[i], "layer_types[]");
      HLM_CHECK_INPUT(kind == "mamba" || kind == "attention" || kind == "linear_attention" ||
                          kind == "full_attention",
                      "layer_types[", i, "] is '", kind, "' (expected 'mamba' or 'attention')");
      c.layer_types[i] = kind;
    }
  }
  c.layer_kinds.clear();
  for (const std::string& kind : c.layer_types)
    c.layer_kinds.push_back(kind == "mamba" || kind == "linear_attention" ? LayerKind::Mamba2
                                                                          : LayerKind::FullAttention);
}

// GraniteMoeHybridConfig's mamba_*, expert and position keys (class defaults of transformers' config class).
void parse_granite_hybrid(KeyReader& r, ModelConfig& c) {
  Mamba2Config m;
  const auto size = [&](const char* key, int64_t fallback, int64_t limit) {
    return bounded(positive(r.int_or(key, fallback), key), key, limit);
  };
  m.heads = size("mamba_n_heads", m.heads, kMaxHeads);
  m.groups = size("mamba_n_groups", m.groups, kMaxHeads);
  m.state_dim = size("mamba_d_state", m.state_dim, kMaxWidth);
  m.conv_kernel = size("mamba_d_conv", m.conv_kernel, kMaxConvKernel);
  m.expand = size("mamba_expand", m.expand, kMaxHeads);
  m.chunk_size = size("mamba_chunk_size", m.chunk_size, kMaxPositions);
  const int64_t inner = m.expand * c.hidden_size;
  HLM_CHECK_INPUT(inner % m.heads == 0, "mamba_n_heads (", m.heads, ") does not divide mamba_expand * hidden_size (",
                  inner, ")");
  const json* d_head = r.get("mamba_d_head");
  m.head_dim = (d_head == nullptr || d_head->is_null() || (d_head->is_string() && d_head->get<std::string>() == "auto"))
                   ? inner / m.heads
                   : bounded(positive(as_int(*d_head, "mamba_d_head"), "mamba_d_head"), "mamba_d_head", kMaxWidth);
  HLM_CHECK_INPUT(m.head_dim * m.heads == inner, "mamba_d_head (", m.head_dim, ") * mamba_n_heads (", m.heads,
                  ") is not mamba_expand * hidden_size (", inner, ")");
  HLM_CHECK_INPUT(m.heads % m.groups == 0, "mamba_n_heads (", m.heads, ") is not a multiple of mamba_n_groups (",
                  m.groups, ")");
  m.conv_bias = r.bool_or("mamba_conv_bias", true);
  m.proj_bias = r.bool_or("mamba_proj_bias", false);
  HLM_CHECK_INPUT(!m.proj_bias, "mamba_proj_bias: true is not supported (in_proj/out_proj biases)");
  if (const json* t = r.get("time_step_limit"); t != nullptr && !t->is_null()) {
    HLM_CHECK_INPUT(t->is_array() && t->size() == 2, "key 'time_step_limit' must be a pair, got ", json_desc(*t));
    m.dt_limit_lo = as_number((*t)[0], "time_step_limit[0]");
    // No upper limit: null, or +Infinity as transformers 5.x writes it into config.json ({"__float__": "Infinity"}).
    const json& hi = (*t)[1];
    const bool unbounded = hi.is_null() || (hi.is_object() && hi.size() == 1 && hi.contains("__float__") &&
                                            hi["__float__"].is_string() && hi["__float__"] == "Infinity");
    m.dt_limit_hi = unbounded ? 1e300 : as_number(hi, "time_step_limit[1]");
    HLM_CHECK_INPUT(m.dt_limit_lo <= m.dt_limit_hi, "time_step_limit is not an interval");
  }
  for (const char* key : {"time_step_min", "time_step_max", "time_step_floor"}) (void)r.get(key);  // init only
  if (const json* p = r.get("position_embedding_type"); p != nullptr && !p->is_null())
    c.position_embedding_type = as_string(*p, "position_embedding_type");
  c.use_rope = c.position_embedding_type == "rope";
  c.mamba = m;
  c.shared_intermediate_size =
      bounded(positive(r.int_or("shared_intermediate_size", 1024), "shared_intermediate_size"),
              "shared_intermediate_size", kMaxWidth);
  const int64_t experts = bounded(r.int_or("num_local_experts", 8), "num_local_experts", kMaxHeads);
  HLM_CHECK_INPUT(experts >= 0, "key 'num_local_experts' must be >= 0, got ", experts);
  const int64_t top_k = positive(r.int_or("num_experts_per_tok", 2), "num_experts_per_tok");
  (void)r.get("output_router_logits");
  (void)r.get("router_aux_loss_coef");
  if (experts > 0) {
    // Router: top-k of the logits, softmax over those k = softmax over all, top-k, renormalised (norm_topk_prob).
    HLM_CHECK_INPUT(top_k <= experts, "num_experts_per_tok (", top_k, ") exceeds num_local_experts (", experts, ")");
    MoeConfig moe;
    moe.num_experts = experts;
    moe.num_experts_per_tok = top_k;
    moe.moe_intermediate_size = c.intermediate_size;
    moe.norm_topk_prob = true;
    c.moe = moe;
    c.ffn_kinds.assign(static_cast<size_t>(c.num_hidden_layers), FfnKind::Moe);
  }
}

// BailingMoeLinearV2Config's keys (Ring-mini-linear-2.0): layer kinds, Lightning geometry, the routed experts.
void parse_bailing(KeyReader& r, ModelConfig& c) {
  LightningConfig l;
  l.layer_group_size =
      bounded(positive(r.int_or("layer_group_size", l.layer_group_size), "layer_group_size"), "layer_group_size",
              kModelMaxLayers);
  l.group_norm_size =
      bounded(positive(r.int_or("group_norm_size", l.group_norm_size), "group_norm_size"), "group_norm_size", kMaxWidth);
  l.first_k_dense_replace = r.int_or("first_k_dense_replace", l.first_k_dense_replace);
  HLM_CHECK_INPUT(l.first_k_dense_replace >= 0, "key 'first_k_dense_replace' must be >= 0, got ",
                  l.first_k_dense_replace);
  const int64_t inner = c.num_attention_heads * c.head_dim;
  // The ports read differ on which head size the linear layers take when head_dim != hidden / heads (Ring-mini has
  // them equal): refused rather than guessed.
  HLM_CHECK_INPUT(inner == c.hidden_size, "head_dim (", c.head_dim, ") * num_attention_heads (", c.num_attention_heads,
                  ") != hidden_size (", c.hidden_size, ") is not supported for model_type ", c.model_type);
  HLM_CHECK_INPUT(inner % l.group_norm_size == 0, "group_norm_size (", l.group_norm_size,
                  ") does not divide num_attention_heads * head_dim (", inner, ")");
  HLM_CHECK_INPUT(r.bool_or("use_qk_norm", true), "use_qk_norm: false is not supported for model_type ", c.model_type);
  for (const char* key : {"use_bias", "use_qkv_bias"})
    HLM_CHECK_INPUT(!r.bool_or(key, false), key, ": true is not supported for model_type ", c.model_type);
  HLM_CHECK_INPUT(r.bool_or("use_rmsnorm", true), "use_rmsnorm: false is not supported for model_type ", c.model_type);
  for (const char* key : {"linear_silu", "use_linear_silu"})
    HLM_CHECK_INPUT(!r.bool_or(key, false), key, ": true (SiLU on the Lightning q/k/v) is not supported");
  for (const char* key : {"embedding_dropout", "output_dropout", "num_nextn_predict_layers"}) (void)r.get(key);
  if (const json* v = r.get("rotary_dim"); v != nullptr && !v->is_null())
    throw_input_error("key 'rotary_dim' is not supported for model_type ", c.model_type, " (partial_rotary_factor is)");
  // Layer kinds: BailingMoeLinearV2DecoderLayer's rule (families.md §6).
  const int64_t L = c.num_hidden_layers, gs = l.layer_group_size;
  c.layer_types.assign(static_cast<size_t>(L), "linear_attention");
  c.layer_kinds.assign(static_cast<size_t>(L), LayerKind::Lightning);
  for (int64_t i = 0; i < L; ++i)
    if ((i + 1) % gs == 0 || i >= L / gs * gs) {
      c.layer_types[static_cast<size_t>(i)] = "full_attention";
      c.layer_kinds[static_cast<size_t>(i)] = LayerKind::FullAttention;
    }
  // Routed experts.
  MoeConfig m;
  m.num_experts = bounded(positive(r.int_or("num_experts", 256), "num_experts"), "num_experts", kMaxHeads);
  m.num_experts_per_tok = positive(r.int_or("num_experts_per_tok", 8), "num_experts_per_tok");
  m.moe_intermediate_size =
      bounded(positive(r.int_or("moe_intermediate_size", 512), "moe_intermediate_size"), "moe_intermediate_size",
              kMaxWidth);
  const int64_t shared = r.int_or("num_shared_experts", 1);
  HLM_CHECK_INPUT(shared >= 0 && shared <= 64, "key 'num_shared_experts' must be in [0, 64], got ", shared);
  if (const json* v = r.get("moe_shared_expert_intermediate_size"); v != nullptr && !v->is_null())
    HLM_CHECK_INPUT(as_int(*v, "moe_shared_expert_intermediate_size") == m.moe_intermediate_size,
                    "moe_shared_expert_intermediate_size != moe_intermediate_size is not supported (the shared "
                    "expert's width rule differs between the ports read)");
  m.shared_expert_intermediate_size = shared * m.moe_intermediate_size;
  m.shared_expert_gated = false;
  m.sigmoid_grouped_router = true;
  m.norm_topk_prob = r.bool_or("norm_topk_prob", true);
  m.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
  HLM_CHECK_INPUT(std::isfinite(m.routed_scaling_factor), "key 'routed_scaling_factor' must be finite");
  const json* ng = r.get("n_group");
  const json* kg = r.get("topk_group");
  m.n_group = ng == nullptr || ng->is_null() ? 1 : positive(as_int(*ng, "n_group"), "n_group");
  m.topk_group = kg == nullptr || kg->is_null() ? m.n_group : positive(as_int(*kg, "topk_group"), "topk_group");
  const json* score = r.get("score_function");
  HLM_CHECK_INPUT(score != nullptr && as_string(*score, "score_function") == "sigmoid",
                  "score_function must be 'sigmoid' for model_type ", c.model_type, " (the softmax router is not ",
                  "supported)");
  HLM_CHECK_INPUT(r.bool_or("moe_router_enable_expert_bias", false),
                  "moe_router_enable_expert_bias: false is not supported for model_type ", c.model_type);
  if (const json* v = r.get("router_dtype"); v != nullptr && !v->is_null())
    HLM_CHECK_INPUT(as_string(*v, "router_dtype") == "fp32", "router_dtype ", v->dump(),
                    " is not supported (the router runs in fp32)");
  HLM_CHECK_INPUT(m.num_experts >= 2 && m.num_experts % m.n_group == 0 && m.num_experts / m.n_group >= 2,
                  "num_experts (", m.num_experts, ") must be n_group (", m.n_group, ") groups of >= 2 experts");
  HLM_CHECK_INPUT(m.topk_group <= m.n_group, "topk_group (", m.topk_group, ") exceeds n_group (", m.n_group, ")");
  HLM_CHECK_INPUT(m.num_experts_per_tok <= m.topk_group * (m.num_experts / m.n_group), "num_experts_per_tok (",
                  m.num_experts_per_tok, ") exceeds the experts of topk_group groups");
  c.ffn_kinds.assign(static_cast<size_t>(L), FfnKind::Moe);
  for (int64_t i = 0; i < std::min(L, l.first_k_dense_replace); ++i) c.ffn_kinds[static_cast<size_t>(i)] = FfnKind::Dense;
  c.moe = m;
  c.lightning = l;
}

// Qwen3MoeConfig's expert keys and the per-layer FFN kinds they imply (every class: ffn_kinds sized to the layers).
void parse_moe(KeyReader& r, ModelConfig& c, const ConfigClass& cls) {
  c.ffn_kinds.assign(static_cast<size_t>(c.num_hidden_layers), FfnKind::Dense);
  if (!cls.moe_keys) return;
  MoeConfig m;
  if (cls.qwen35) {  // Qwen3_5MoeTextConfig / Qwen3NextConfig defaults, a gated shared expert
    m.num_experts = cls.shared_expert_moe ? 256 : 512;
    m.num_experts_per_tok = cls.shared_expert_moe ? 8 : 10;
    m.moe_intermediate_size = 512;
    m.shared_expert_intermediate_size =
        bounded(positive(r.int_or("shared_expert_intermediate_size", 512), "shared_expert_intermediate_size"),
                "shared_expert_intermediate_size", kMaxWidth);
    m.norm_topk_prob = true;
  }
  if (cls.shared_expert_moe)  // Qwen3_5MoeTextConfig: every layer MoE, top-k renormalised
    HLM_CHECK_INPUT(r.bool_or("norm_topk_prob", true), "norm_topk_prob: false is not what model_type ", c.model_type,
                    " does (its router always renormalises the top-k)");
  // Qwen3MoeConfig's attribute_map aliases num_experts to num_local_experts: a saved file may hold either name.
  const json* local = r.get("num_local_experts");
  const int64_t local_experts = local ? as_int(*local, "num_local_experts") : m.num_experts;
  m.num_experts = bounded(r.int_or("num_experts", local_experts), "num_experts", kMaxHeads);
  HLM_CHECK_INPUT(local == nullptr || local_experts == m.num_experts, "num_experts (", m.num_experts,
                  ") and num_local_experts (", local_experts, ") disagree");
  HLM_CHECK_INPUT(m.num_experts >= 0, "key 'num_experts' must be >= 0, got ", m.num_experts);
  m.num_experts_per_tok = positive(r.int_or("num_experts_per_tok", m.num_experts_per_tok), "num_experts_per_tok");
  m.moe_intermediate_size = bounded(positive(r.int_or("moe_intermediate_size", m.moe_intermediate_size),
                                             "moe_intermediate_size"),
                                    "moe_intermediate_size", kMaxWidth);
  if (!cls.shared_expert_moe) m.norm_topk_prob = r.bool_or("norm_topk_prob", m.norm_topk_prob);
  m.decoder_sparse_step = positive(r.int_or("decoder_sparse_step", m.decoder_sparse_step), "decoder_sparse_step");
  if (const json* v = r.get("mlp_only_layers"); v != nullptr && !v->is_null()) {
    HLM_CHECK_INPUT(v->is_array(), "key 'mlp_only_layers' must be a list of layer indices, got ", json_desc(*v));
    for (const json& i : *v) {
      const int64_t layer = as_int(i, "mlp_only_layers[]");
      HLM_CHECK_INPUT(layer >= 0 && layer < c.num_hidden_layers, "mlp_only_layers holds ", layer,
                      ", not a layer index (num_hidden_layers is ", c.num_hidden_layers, ")");
      m.mlp_only_layers.push_back(layer);
    }
  }
  // Training-only keys (the auxiliary load-balancing loss): read so they are not reported as unknown.
  (void)r.get("output_router_logits");
  (void)r.get("router_aux_loss_coef");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool dense_only =
        std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), i) != m.mlp_only_layers.end();
    if (!dense_only && m.num_experts > 0 && (i + 1) % m.decoder_sparse_step == 0)
      c.ffn_kinds[static_cast<size_t>(i)] = FfnKind::Moe;
  }
  if (c.has_moe_layers())
    HLM_CHECK_INPUT(m.num_experts_per_tok <= m.num_experts, "num_experts_per_tok (", m.num_experts_per_tok,
                    ") exceeds num_experts (", m.num_experts, ")");
  c.moe = m;
}

// The linear_* keys of hybrid classes, with each class's defaults.
void parse_linear(KeyReader& r, ModelConfig& c, const ConfigClass& cls) {
  if (cls.hybrid == HybridKeys::None) return;
  LinearAttentionConfig l;
  const bool olmo = cls.hybrid == HybridKeys::OlmoHybrid;
  const bool qwen35 = cls.hybrid == HybridKeys::Qwen35;
  const auto optional_int = [&](const char* key, int64_t limit) -> std::optional<int64_t> {
    const json* v = r.get(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    return bounded(positive(as_int(*v, key), key), key, limit);
  };
  l.num_key_heads = optional_int("linear_num_key_heads", kMaxHeads).value_or(qwen35 ? 16 : c.num_attention_heads);
  l.num_value_heads = optional_int("linear_num_value_heads", kMaxHeads).value_or(qwen35 ? 32 : c.num_attention_heads);
  // OLMo-Hybrid: dk = int(0.75·hidden / key heads), dv = 2·dk; the student keeps the teacher's head_dim.
  l.key_head_dim = optional_int("linear_key_head_dim", kMaxWidth)
                       .value_or(olmo     ? static_cast<int64_t>(0.75 * static_cast<double>(c.hidden_size) /
                                                                 static_cast<double>(l.num_key_heads))
                                 : qwen35 ? 128
                                          : c.head_dim);
  l.value_head_dim = optional_int("linear_value_head_dim", kMaxWidth)
                         .value_or(olmo ? 2 * l.key_head_dim : qwen35 ? 128 : c.head_dim);
  l.conv_kernel_dim = optional_int("linear_conv_kernel_dim", kMaxConvKernel).value_or(4);
  // Qwen3.5: β = sigmoid(b), no key for it (a file that sets one is read, and must say false).
  l.allow_neg_eigval = r.bool_or("linear_allow_neg_eigval", olmo);
  HLM_CHECK_INPUT(!(qwen35 && l.allow_neg_eigval), "linear_allow_neg_eigval: true is not Qwen3.5's GDN");
  l.norm_eps = olmo ? 1e-5 : c.rms_norm_eps;  // HF OLMo-Hybrid hard-codes its gated norm eps
  l.a_log_min = r.number_or("linear_a_log_min", 0.0);
  l.a_log_max = r.number_or("linear_a_log_max", 16.0);
  l.dt_min = r.number_or("linear_dt_min", 1e-3);
  l.dt_max = r.number_or("linear_dt_max", 0.1);
  l.dt_init_floor = r.number_or("linear_dt_init_floor", 1e-4);
  HLM_CHECK_INPUT(l.num_value_heads % l.num_key_heads == 0, "linear_num_value_heads (", l.num_value_heads,
                  ") is not a multiple of linear_num_key_heads (", l.num_key_heads, ")");
  positive(l.key_head_dim, "linear_key_head_dim");
  positive(l.value_head_dim, "linear_value_head_dim");
  c.linear = l;
}

ModelConfig parse_config_object(const json& j);

// A multimodal wrapper (kTextConfigWrappers): its text_config, with the wrapper's tie_word_embeddings (the flag
// Qwen3_5ForConditionalGeneration reads). The vision tower and the wrapper's token ids are not read.
std::optional<ModelConfig> parse_wrapped_text_config(const json& j) {
  const auto type = j.find("model_type");
  if (type == j.end() || !type->is_string()) return std::nullopt;
  for (const auto& [wrapper, text_type] : kTextConfigWrappers) {
    if (type->get<std::string>() != wrapper) continue;
    const auto text = j.find("text_config");
    HLM_CHECK_INPUT(text != j.end() && text->is_object(), "model_type '", wrapper,
                    "' needs a 'text_config' object (the text decoder's config)");
    json inner = *text;
    if (!inner.contains("model_type")) inner["model_type"] = std::string(text_type);
    HLM_CHECK_INPUT(inner["model_type"] == text_type, "text_config.model_type is ", inner["model_type"].dump(),
                    ", expected '", text_type, "' under model_type '", wrapper, "'");
    if (const auto tie = j.find("tie_word_embeddings"); tie != j.end()) inner["tie_word_embeddings"] = *tie;
    try {
      return parse_config_object(inner);
    } catch (Error& e) {
      e.add_context("text_config");
      throw;
    }
  }
  return std::nullopt;
}

ModelConfig parse_config_object(const json& j) {
  HLM_CHECK_INPUT(j.is_object(), "config must be a JSON object, got ", j.type_name());
  if (std::optional<ModelConfig> text = parse_wrapped_text_config(j)) return std::move(*text);
  KeyReader r(j, "");
  ModelConfig c;
  c.model_type = as_string(r.require("model_type"), "model_type");
  c.architecture = spec_for_model_type(c.model_type).architecture;
  const ConfigClass& cls = config_class(c.architecture);

  struct SizeKey {
    int64_t* field;
    const char* key;
    int64_t limit;
  };
  for (const SizeKey& k : {SizeKey{&c.vocab_size, "vocab_size", kMaxVocab},
                           SizeKey{&c.hidden_size, "hidden_size", kMaxWidth},
                           SizeKey{&c.intermediate_size, "intermediate_size", kMaxWidth},
                           SizeKey{&c.num_hidden_layers, "num_hidden_layers", kModelMaxLayers},
                           SizeKey{&c.num_attention_heads, "num_attention_heads", kMaxHeads}}) {
    // Qwen3_5MoeTextConfig has no intermediate_size (no dense layer): absent, it is set after the expert keys.
    if (cls.shared_expert_moe && k.field == &c.intermediate_size && r.get(k.key) == nullptr) continue;
    *k.field = bounded(positive(as_int(r.require(k.key), k.key), k.key), k.key, k.limit);
  }

  // num_key_value_heads: absent -> the class default; null -> num_attention_heads (both classes' __post_init__).
  const json* kv = r.get("num_key_value_heads");
  c.num_key_value_heads = kv == nullptr  ? cls.num_key_value_heads.value_or(c.num_attention_heads)
                          : kv->is_null() ? c.num_attention_heads
                                          : as_int(*kv, "num_key_value_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  HLM_CHECK_INPUT(c.num_attention_heads % c.num_key_value_heads == 0, "num_attention_heads (", c.num_attention_heads,
                  ") is not a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  // Granite has no head_dim field; its modeling code takes getattr(config, "head_dim", hidden // heads).
  c.head_dim = bounded(positive(r.int_or("head_dim", cls.head_dim.value_or(c.hidden_size / c.num_attention_heads)),
                                "head_dim"),
                       "head_dim", kMaxWidth);
  if (cls.cohere2_keys) c.head_dim = c.hidden_size / c.num_attention_heads;  // Cohere2Config.__post_init__ forces it
  c.max_position_embeddings =
      bounded(positive(r.int_or("max_position_embeddings", cls.max_position_embeddings), "max_position_embeddings"),
              "max_position_embeddings", kMaxPositions);
  c.rms_norm_eps = r.number_or(cls.cohere2_keys ? "layer_norm_eps" : "rms_norm_eps", cls.rms_norm_eps);
  HLM_CHECK_INPUT(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0.0, "key 'rms_norm_eps' must be >= 0, got ",
                  c.rms_norm_eps);
  if (const json* act = r.get("hidden_act")) c.hidden_act = as_string(*act, "hidden_act");
  HLM_CHECK_INPUT(c.hidden_act == "silu", "hidden_act '", c.hidden_act, "' is not supported (only 'silu')");
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", cls.cohere2_keys);  // Cohere2Config: tied by default
  if (cls.cohere2_keys) {
    c.logit_scale = r.number_or("logit_scale", 0.0625);
    c.nope_full_layers = true;  // Cohere2Attention rotates only when the layer has a window
    HLM_CHECK_INPUT(!r.bool_or("use_qk_norm", false), "use_qk_norm: true is not supported for model_type ",
                    c.model_type);
  }
  c.attention_bias = r.bool_or("attention_bias", false);

  if (cls.granite_scalars) {
    c.mlp_bias = r.bool_or("mlp_bias", false);
    c.embedding_multiplier = r.number_or("embedding_multiplier", 1.0);
    c.residual_multiplier = r.number_or("residual_multiplier", 1.0);
    c.logits_scaling = r.number_or("logits_scaling", 1.0);
    c.attention_multiplier = r.number_or("attention_multiplier", 1.0);  // GraniteConfig default, not head_dim^-1/2
    HLM_CHECK_INPUT(c.logits_scaling != 0.0, "key 'logits_scaling' must be non-zero (logits are divided by it)");
  }
  if (cls.qwen3_sliding) {
    HLM_CHECK_INPUT(!r.bool_or("use_sliding_window", false),
                    "use_sliding_window: true is not supported (sliding-window attention layers)");
    (void)r.get("sliding_window");     // unused while use_sliding_window is false (HF sets it to None)
    (void)r.get("max_window_layers");  // likewise
  }
  parse_layer_types(r, c, cls);
  parse_linear(r, c, cls);
  parse_moe(r, c, cls);
  if (cls.granite_hybrid) parse_granite_hybrid(r, c);
  if (cls.bailing) parse_bailing(r, c);
  if (c.intermediate_size == 0) c.intermediate_size = c.moe->moe_intermediate_size;  // unused: every layer is MoE
  if (cls.qwen35) {  // the gated attention of Qwen3.5 (Qwen3-Next's attn_output_gate; absent in 5.17's class)
    HLM_CHECK_INPUT(r.bool_or("attn_output_gate", true), "attn_output_gate: false is not supported for model_type ",
                    c.model_type);
    HLM_CHECK_INPUT(!c.attention_bias, "attention_bias: true is not supported for model_type ", c.model_type,
                    " (its q_proj bias would hold the gate's too)");
  }
  parse_token_ids(r, c, cls);
  for (const char* key : {"dtype", "torch_dtype"}) {
    const json* v = r.get(key);
    if (c.dtype.empty() && v != nullptr && !v->is_null()) c.dtype = as_string(*v, key);
  }
  parse_rope(r, c);
  if (cls.granite_hybrid) c.use_rope = c.position_embedding_type == "rope";  // NoPE unless "rope"
  if (cls.cohere2_keys) {  // one rope (interleaved) for the sliding layers; full layers have none
    c.rope.interleaved = true;
    c.sliding_rope.reset();
  }
  // Every size is bounded above, so these products cannot overflow; one weight matrix must stay below 2^40 elements.
  for (const TensorSpec& t : expected_tensors(c))
    HLM_CHECK_INPUT(t.shape.numel() <= kMaxTensorElements, "tensor ", t.name, " would hold ", t.shape.numel(),
                    " elements ", t.shape.str(), ", above the limit 2^40 (refused before allocating)");

  std::vector<std::string> unread;
  r.collect_unread(unread);
  for (const std::string& key : unread)
    if (std::find(std::begin(kIgnoredKeys), std::end(kIgnoredKeys), key) == std::end(kIgnoredKeys)) c.unknown_keys.push_back(key);
  std::sort(c.unknown_keys.begin(), c.unknown_keys.end());
  return c;
}

}  // namespace

bool ModelConfig::has_moe_layers() const {
  return std::find(ffn_kinds.begin(), ffn_kinds.end(), FfnKind::Moe) != ffn_kinds.end();
}

float ModelConfig::attention_scale() const {
  // Python's head_dim ** -0.5 (a pow, not 1/sqrt), then the float32 cast where it meets a tensor.
  return attention_multiplier ? static_cast<float>(*attention_multiplier)
                              : static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));
}

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source) {
  try {
    return parse_config_object(json);
  } catch (Error& e) {
    e.add_context(source);
    throw;
  }
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  const std::filesystem::path file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  std::ifstream in(file, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), file.string(), ": cannot open config file");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number overflow
    throw_input_error(file.string(), ": malformed JSON: ", e.what());
  }
  return parse_model_config(j, file.string());
}

nlohmann::json model_config_to_json(const ModelConfig& c) {
  const ConfigClass& cls = config_class(c.architecture);
  json j = {{"architectures", {cls.hf_class}},
            {"model_type", c.model_type},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_act", c.hidden_act},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"attention_bias", c.attention_bias},
            {"layer_types", c.layer_types}};
  const auto rope_json = [&](const RopeParams& p) {
    json rope = {{"rope_type", p.rope_type}, {"rope_theta", p.rope_theta}};
    if (cls.qwen35 || cls.bailing) rope["partial_rotary_factor"] = p.partial_rotary_factor;
    if (p.rope_type != "default") rope["factor"] = p.factor;
    if (p.original_max_position_embeddings)
      rope["original_max_position_embeddings"] = *p.original_max_position_embeddings;
    if (p.rope_type == "yarn") {
      rope["beta_fast"] = p.beta_fast;
      rope["beta_slow"] = p.beta_slow;
      rope["truncate"] = p.truncate;
      if (p.attention_factor) rope["attention_factor"] = *p.attention_factor;
      if (p.mscale) rope["mscale"] = *p.mscale;
      if (p.mscale_all_dim) rope["mscale_all_dim"] = *p.mscale_all_dim;
    } else if (p.rope_type == "llama3") {
      rope["low_freq_factor"] = p.low_freq_factor;
      rope["high_freq_factor"] = p.high_freq_factor;
    }
    return rope;
  };
  const json rope = rope_json(c.rope);
  j["rope_parameters"] = rope;
  if (cls.cohere2_keys) {  // Cohere2Config's names: LayerNorm eps, logit multiplier
    j.erase("rms_norm_eps");
    j["layer_norm_eps"] = c.rms_norm_eps;
    j["logit_scale"] = c.logit_scale;
  }
  if (cls.sliding_layers) {  // Olmo3Config / Cohere2Config: the window and RoPE per layer type
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    if (c.sliding_rope)
      j["rope_parameters"] = {{"full_attention", rope}, {"sliding_attention", rope_json(*c.sliding_rope)}};
  }
  if (cls.granite_scalars) {
    j["mlp_bias"] = c.mlp_bias;
    j["embedding_multiplier"] = c.embedding_multiplier;
    j["residual_multiplier"] = c.residual_multiplier;
    j["logits_scaling"] = c.logits_scaling;
    j["attention_multiplier"] = c.attention_multiplier.value_or(1.0);
  }
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["eos_token_id"] = c.eos_token_ids.size() > 1 ? json(c.eos_token_ids)
                      : c.eos_token_id          ? json(*c.eos_token_id)
                                                : json(nullptr);
  if (!c.dtype.empty()) j["dtype"] = c.dtype;
  if (c.linear) {
    const LinearAttentionConfig& l = *c.linear;
    j["linear_num_key_heads"] = l.num_key_heads;
    j["linear_num_value_heads"] = l.num_value_heads;
    j["linear_key_head_dim"] = l.key_head_dim;
    j["linear_value_head_dim"] = l.value_head_dim;
    j["linear_conv_kernel_dim"] = l.conv_kernel_dim;
    j["linear_allow_neg_eigval"] = l.allow_neg_eigval;
    j["linear_a_log_min"] = l.a_log_min;
    j["linear_a_log_max"] = l.a_log_max;
    j["linear_dt_min"] = l.dt_min;
    j["linear_dt_max"] = l.dt_max;
    j["linear_dt_init_floor"] = l.dt_init_floor;
  }
  if (cls.granite_hybrid) {  // GraniteMoeHybridConfig's names
    const Mamba2Config& m = *c.mamba;
    j["mamba_n_heads"] = m.heads;
    j["mamba_d_head"] = m.head_dim;
    j["mamba_d_state"] = m.state_dim;
    j["mamba_n_groups"] = m.groups;
    j["mamba_d_conv"] = m.conv_kernel;
    j["mamba_expand"] = m.expand;
    j["mamba_chunk_size"] = m.chunk_size;
    j["mamba_conv_bias"] = m.conv_bias;
    j["mamba_proj_bias"] = m.proj_bias;
    if (m.dt_limit_lo != 0.0 || m.dt_limit_hi < 1e300)
      j["time_step_limit"] = {m.dt_limit_lo, m.dt_limit_hi < 1e300 ? json(m.dt_limit_hi) : json(nullptr)};
    j["position_embedding_type"] = c.position_embedding_type.empty() ? json(nullptr) : json(c.position_embedding_type);
    j["shared_intermediate_size"] = c.shared_intermediate_size;
    j["num_local_experts"] = c.moe ? c.moe->num_experts : 0;
    j["num_experts_per_tok"] = c.moe ? c.moe->num_experts_per_tok : 2;
    j.erase("head_dim");
    j.erase("mlp_bias");
  }
  if (cls.bailing) {  // BailingMoeLinearV2Config's names; layer kinds follow from layer_group_size
    const MoeConfig& m = *c.moe;
    const LightningConfig& l = *c.lightning;
    j.erase("layer_types");
    j.erase("attention_bias");
    j["layer_group_size"] = l.layer_group_size;
    j["group_norm_size"] = l.group_norm_size;
    j["first_k_dense_replace"] = l.first_k_dense_replace;
    j["use_qk_norm"] = true;
    j["num_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.num_experts_per_tok;
    j["moe_intermediate_size"] = m.moe_intermediate_size;
    j["num_shared_experts"] = m.shared_expert_intermediate_size / m.moe_intermediate_size;
    j["n_group"] = m.n_group;
    j["topk_group"] = m.topk_group;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["routed_scaling_factor"] = m.routed_scaling_factor;
    j["score_function"] = "sigmoid";
    j["moe_router_enable_expert_bias"] = true;
    j["router_dtype"] = "fp32";
  }
  if (c.moe && !cls.granite_hybrid && !cls.bailing) {
    const MoeConfig& m = *c.moe;
    j["num_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.num_experts_per_tok;
    j["moe_intermediate_size"] = m.moe_intermediate_size;
    if (cls.qwen35) j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
    if (!cls.shared_expert_moe) {
      j["norm_topk_prob"] = m.norm_topk_prob;
      j["decoder_sparse_step"] = m.decoder_sparse_step;
      j["mlp_only_layers"] = m.mlp_only_layers;
    }
  }
  if (!c.use_rope && !cls.granite_hybrid) j["rope_parameters"] = nullptr;
  return j;
}

std::optional<ConfigClassFacts> config_class_facts(Architecture architecture) {
  for (const ConfigClass& c : kConfigClasses)
    if (c.architecture == architecture) return ConfigClassFacts{c.hf_class, c.granite_scalars};
  return std::nullopt;
}

}  // namespace hlm
