// `hybridlm inspect MODEL_DIR [--json]`: architecture, layer layout, parameter counts by group and the tensor table
// of an HF model directory, after checking every tensor against config.json. Reads headers only (no weights).
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/subcommands.h"
#include "models/architecture.h"
#include "models/checkpoint.h"
#include "models/tensor_table.h"

namespace hlm {
namespace {

struct InspectOptions {
  std::string model_dir;
  bool json = false;
};

char layer_letter(const std::string& kind) { return kind == "full_attention" ? 'A' : 'R'; }

int run_inspect(const InspectOptions& o) {
  HLM_CHECK_INPUT(std::filesystem::is_directory(o.model_dir), o.model_dir, ": not a model directory (does not exist)");
  const ModelConfig c = load_model_config(std::filesystem::path(o.model_dir) / "config.json");
  const Checkpoint checkpoint = Checkpoint::open(o.model_dir);
  for (const std::string& key : c.unknown_keys)
    std::fprintf(stderr, "hybridlm: warning: config.json key '%s' is not used by hybridlm\n", key.c_str());

  std::string layout;
  for (const std::string& kind : c.layer_types) layout += layer_letter(kind);

  std::map<std::string, int64_t> params_by_group;
  int64_t total_params = 0;
  nlohmann::json tensors = nlohmann::json::array();
  std::set<std::string> expected_names;
  for (const TensorSpec& spec : expected_tensors(c)) {
    const SafetensorsEntry* entry = checkpoint.find(spec.name);
    HLM_CHECK_INPUT(entry != nullptr, o.model_dir, ": tensor '", spec.name, "' is missing (config.json implies shape ",
                    spec.shape.str(), ")");
    HLM_CHECK_INPUT(entry->shape == spec.shape, checkpoint.file_of(spec.name).string(), ": tensor '", spec.name,
                    "' has shape ", entry->shape.str(), " but config.json implies ", spec.shape.str());
    params_by_group[spec.group] += spec.shape.numel();
    total_params += spec.shape.numel();
    expected_names.insert(spec.name);
    tensors.push_back({{"name", spec.name},
                       {"group", spec.group},
                       {"dtype", std::string(dtype_name(entry->dtype))},
                       {"shape", std::vector<int64_t>(entry->shape.dims().begin(), entry->shape.dims().end())}});
  }
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint.names())
    if (!expected_names.count(name)) unused.push_back(name);

  const ArchitectureSpec& arch = architecture_spec(c.architecture);
  nlohmann::json j = {{"model_dir", o.model_dir},
                      {"model_type", c.model_type},
                      {"architecture", std::string(arch.description)},
                      {"layers", c.num_hidden_layers},
                      {"layout", layout},
                      {"layer_types", c.layer_types},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"attention_heads", c.num_attention_heads},
                      {"kv_heads", c.num_key_value_heads},
                      {"head_dim", c.head_dim},
                      {"vocab_size", c.vocab_size},
                      {"tie_word_embeddings", c.tie_word_embeddings},
                      {"rope_type", c.rope.rope_type},
                      {"rope_theta", c.rope.rope_theta},
                      {"parameters", total_params},
                      {"parameters_by_group", params_by_group},
                      {"checkpoint_bytes", checkpoint.total_bytes()},
                      {"unused_tensors", unused},
                      {"unknown_config_keys", c.unknown_keys},
                      {"tensors", tensors}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model        %s\n", o.model_dir.c_str());
  std::printf("architecture %s (%s)\n", c.model_type.c_str(), std::string(arch.description).c_str());
  std::printf("layers       %lld  layout %s  (A = full attention, R = recurrent)\n",
              static_cast<long long>(c.num_hidden_layers), layout.c_str());
  std::printf("dims         hidden %lld, ffn %lld, heads %lld q / %lld kv x %lld, vocab %lld, %s head\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
              c.tie_word_embeddings ? "tied" : "untied");
  std::printf("rope         %s, theta %g\n", c.rope.rope_type.c_str(), c.rope.rope_theta);
  std::printf("parameters   %lld\n", static_cast<long long>(total_params));
  for (const auto& [group, n] : params_by_group)
    std::printf("  %-10s %12lld  (%.1f%%)\n", group.c_str(), static_cast<long long>(n),
                100.0 * static_cast<double>(n) / static_cast<double>(total_params));
  std::printf("tensors (%zu)\n", tensors.size());
  for (const auto& t : tensors) {
    std::string shape;
    for (const auto& d : t["shape"]) shape += (shape.empty() ? "" : ", ") + std::to_string(d.get<int64_t>());
    std::printf("  %-52s %-5s [%s]\n", t["name"].get<std::string>().c_str(), t["dtype"].get<std::string>().c_str(),
                shape.c_str());
  }
  for (const std::string& name : unused) std::printf("  (unused by hybridlm) %s\n", name.c_str());
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show architecture, layer layout, parameter counts and tensors");
  cmd->footer(
      "Examples:\n"
      "  hybridlm inspect tests/golden/qwen3_tied\n"
      "  hybridlm inspect ~/models/Qwen3-0.6B --json | jq .parameters_by_group");
  cmd->add_option("model_dir", options->model_dir, "HF model directory (config.json + safetensors)")->required();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of text");
  cmd->callback([options, &action] { action = [options] { return run_inspect(*options); }; });
}

}  // namespace hlm
