// The five synthetic-study architectures as qwen3_hybrid configs (contracts in synth_models.h).
#include "evals/synth/synth_models.h"

#include <array>

#include "core/error.h"

namespace hlm {
namespace {

constexpr std::array<SynthArchSpec, 5> kArchs{{
    {SynthArch::Transformer, "transformer", "Transformer"},
    {SynthArch::GdnNeg, "gdn_neg", "GDN [0,2] (neg. eig.)"},
    {SynthArch::GdnPos, "gdn_pos", "GDN [0,1] (pos. eig.)"},
    {SynthArch::HybridNeg, "hybrid_neg", "Hybrid neg. eig."},
    {SynthArch::HybridPos, "hybrid_pos", "Hybrid pos. eig."},
}};

}  // namespace

std::span<const SynthArchSpec> synth_arch_specs() { return kArchs; }

SynthArch synth_arch_from_name(std::string_view name, std::string_view what) {
  for (const SynthArchSpec& s : kArchs)
    if (name == s.name) return s.arch;
  throw_input_error(what, ": unknown architecture '", name,
                    "' (expected transformer, gdn_neg, gdn_pos, hybrid_neg or hybrid_pos)");
}

const SynthArchSpec& synth_arch_spec(SynthArch arch) {
  for (const SynthArchSpec& s : kArchs)
    if (s.arch == arch) return s;
  HLM_CHECK(false, "unknown SynthArch");
  return kArchs[0];
}

nlohmann::json synth_model_config_json(const SynthConfig& c, SynthArch arch, SynthTask task) {
  std::vector<std::string> types;
  switch (arch) {
    case SynthArch::Transformer: types.assign(static_cast<size_t>(c.num_layers), "full_attention"); break;
    case SynthArch::GdnNeg:
    case SynthArch::GdnPos: types.assign(static_cast<size_t>(c.num_layers), "linear_attention"); break;
    case SynthArch::HybridNeg:
    case SynthArch::HybridPos: types = synth_hybrid_layer_types(c); break;
  }
  const bool neg = arch == SynthArch::GdnNeg || arch == SynthArch::HybridNeg;
  return {{"model_type", "qwen3_hybrid"},
          {"vocab_size", SynthVocab{c.max_address}.size()},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.num_heads},
          {"head_dim", c.head_dim},
          {"max_position_embeddings", task == SynthTask::Recall ? c.max_positions_recall : c.max_positions_other},
          {"tie_word_embeddings", false},
          {"layer_types", types},
          {"linear_num_key_heads", c.num_heads},
          {"linear_num_value_heads", c.num_heads},
          {"linear_key_head_dim", c.head_dim},
          {"linear_value_head_dim", c.gdn_value_head_dim},
          {"linear_allow_neg_eigval", neg}};
}

ModelConfig synth_model_config(const SynthConfig& c, SynthArch arch, SynthTask task) {
  return parse_model_config(synth_model_config_json(c, arch, task),
                            std::string("synth model ") + synth_arch_spec(arch).name);
}

}  // namespace hlm
