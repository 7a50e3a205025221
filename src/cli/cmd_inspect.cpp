// `hybridlm inspect MODEL_DIR [--json]`: architecture, layer layout, parameter counts by group and the tensor table
// of an HF model directory, after checking every tensor against config.json. Reads headers only (no weights).
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "models/architecture.h"
#include "models/checkpoint.h"
#include "models/model.h"
#include "models/state_size.h"
#include "models/tensor_check.h"

namespace hlm {
namespace {

struct InspectOptions {
  std::string model_dir;
  bool json = false;
  int64_t context = 4096;
  int64_t bytes_per_element = 2;
};

double mib(int64_t elements, int64_t bytes) { return static_cast<double>(elements * bytes) / (1024.0 * 1024.0); }

char layer_letter(const std::string& kind) {
  return kind == "full_attention" || kind == "attention" ? 'A' : kind == "sliding_attention" ? 'S' : 'R';
}

int run_inspect(const InspectOptions& o) {
  check_model_dir(o.model_dir);
  const ModelConfig c = load_model_config(std::filesystem::path(o.model_dir) / "config.json");
  const Checkpoint checkpoint = Checkpoint::open(o.model_dir);
  for (const std::string& key : c.unknown_keys)
    std::fprintf(stderr, "hybridlm: warning: config.json key '%s' is not used by hybridlm\n", key.c_str());

  std::string layout;
  for (const std::string& kind : c.layer_types) layout += layer_letter(kind);

  const ResolvedCheckpoint resolved = resolve_checkpoint(c, checkpoint);
  std::map<std::string, int64_t> params_by_group;
  int64_t total_params = 0;
  nlohmann::json tensors = nlohmann::json::array();
  for (const ResolvedTensor& t : resolved.tensors) {
    params_by_group[t.spec.group] += t.spec.shape.numel();
    total_params += t.spec.shape.numel();
    nlohmann::json row = {{"name", t.stored_name},
                          {"group", t.spec.group},
                          {"dtype", std::string(dtype_name(t.entry->dtype))},
                          {"shape", std::vector<int64_t>(t.entry->shape.dims().begin(), t.entry->shape.dims().end())}};
    // Stored cut at other boundaries than ours (e.g. transformers' equal-thirds olmo_hybrid conv): re-cut on load.
    if (t.recut()) row["recut_from"] = t.sources;
    tensors.push_back(std::move(row));
  }
  // Routed experts: a token runs only k of the E experts of each MoE layer, so its active parameters leave out the
  // other E - k experts' weights (router, attention, embeddings and dense layers always run).
  int64_t moe_layers = 0, expert_params = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) moe_layers += c.moe_layer(i) ? 1 : 0;
  if (moe_layers > 0) expert_params = 3 * c.hidden_size * c.moe->moe_intermediate_size;
  const int64_t active_params =
      moe_layers > 0 ? total_params - moe_layers * (c.moe->num_experts - c.moe->num_experts_per_tok) * expert_params
                     : total_params;
  const std::vector<std::string>& unused = resolved.unused;

  const StateSizes m = state_sizes(c, o.context, o.bytes_per_element);
  const nlohmann::json memory = {
      {"context", m.context},
      {"bytes_per_element", m.bytes_per_element},
      {"full_attention", {{"layers", m.full_attention_layers},
                          {"kv_elements_per_token", m.kv_elements_per_token},
                          {"kv_elements_at_context", m.kv_elements_at_context},
                          {"kv_bytes_at_context", m.kv_elements_at_context * m.bytes_per_element}}},
      {"sliding_attention", {{"layers", m.sliding_attention_layers},
                             {"window", m.sliding_window},
                             {"kv_elements_at_context", m.kv_elements_at_window},
                             {"kv_bytes_at_context", m.kv_elements_at_window * m.bytes_per_element}}},
      {"linear_attention", {{"layers", m.linear_attention_layers},
                            {"state_elements", m.recurrent_state_elements},
                            {"state_bytes", m.recurrent_state_elements * m.bytes_per_element},
                            {"conv_state_elements", m.conv_state_elements}}},
      {"mamba2", {{"layers", m.mamba_layers},
                  {"ssm_state_elements", m.mamba_ssm_state_elements},
                  {"conv_state_elements", m.mamba_conv_state_elements},
                  {"state_bytes", (m.mamba_ssm_state_elements + m.mamba_conv_state_elements) * m.bytes_per_element}}},
      {"lightning", {{"layers", m.lightning_layers},
                     {"state_elements", m.lightning_state_elements},
                     {"state_bytes", m.lightning_state_elements * m.bytes_per_element}}},
      {"model_bytes_at_context", m.model_elements_at_context * m.bytes_per_element}};

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
                      {"active_parameters_per_token", active_params},
                      {"checkpoint_bytes", checkpoint.total_bytes()},
                      {"unused_tensors", unused},
                      {"memory", memory},
                      {"unknown_config_keys", c.unknown_keys},
                      {"tensors", tensors}};
  std::string ffn_layout;  // D = dense MLP, M = routed experts
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) ffn_layout += c.moe_layer(i) ? 'M' : 'D';
  if (moe_layers > 0)
    j["moe"] = {{"layers", moe_layers},
                {"ffn_layout", ffn_layout},
                {"experts", c.moe->num_experts},
                {"experts_per_token", c.moe->num_experts_per_tok},
                {"expert_intermediate_size", c.moe->moe_intermediate_size},
                {"norm_topk_prob", c.moe->norm_topk_prob},
                {"parameters_per_expert", expert_params}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model        %s\n", o.model_dir.c_str());
  std::printf("architecture %s (%s)\n", c.model_type.c_str(), std::string(arch.description).c_str());
  std::printf("layers       %lld  layout %s  (A = full attention, S = sliding-window attention, R = recurrent)\n",
              static_cast<long long>(c.num_hidden_layers), layout.c_str());
  std::printf("dims         hidden %lld, ffn %lld, heads %lld q / %lld kv x %lld, vocab %lld, %s head\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
              c.tie_word_embeddings ? "tied" : "untied");
  if (c.use_rope && c.sliding_rope) {
    std::printf("rope         full layers %s, theta %g; sliding layers %s, theta %g\n", c.rope.rope_type.c_str(),
                c.rope.rope_theta, c.sliding_rope->rope_type.c_str(), c.sliding_rope->rope_theta);
  } else if (c.use_rope) {
    std::printf("rope         %s, theta %g\n", c.rope.rope_type.c_str(), c.rope.rope_theta);
  } else {
    std::printf("rope         none (rope_parameters is null)\n");
  }
  if (c.linear)
    std::printf("gdn          %lld k-heads x %lld, %lld v-heads x %lld, conv %lld, beta %s\n",
                static_cast<long long>(c.linear->num_key_heads), static_cast<long long>(c.linear->key_head_dim),
                static_cast<long long>(c.linear->num_value_heads), static_cast<long long>(c.linear->value_head_dim),
                static_cast<long long>(c.linear->conv_kernel_dim),
                c.linear->allow_neg_eigval ? "2*sigmoid (negative eigenvalues)" : "sigmoid");
  if (moe_layers > 0)
    std::printf("moe          %lld of %lld layers (ffn %s; D = dense, M = experts): %lld experts x %lld wide, "
                "top-%lld (%s)\n",
                static_cast<long long>(moe_layers), static_cast<long long>(c.num_hidden_layers), ffn_layout.c_str(),
                static_cast<long long>(c.moe->num_experts), static_cast<long long>(c.moe->moe_intermediate_size),
                static_cast<long long>(c.moe->num_experts_per_tok),
                c.moe->norm_topk_prob ? "weights renormalised over the k" : "softmax weights as they are");
  std::printf("parameters   %lld", static_cast<long long>(total_params));
  if (moe_layers > 0) std::printf("  (active per token %lld)", static_cast<long long>(active_params));
  std::printf("\n");
  for (const auto& [group, n] : params_by_group)
    std::printf("  %-17s %12lld  (%.1f%%)\n", group.c_str(), static_cast<long long>(n),
                100.0 * static_cast<double>(n) / static_cast<double>(total_params));
  std::printf("memory at context %lld, %lld bytes/element (Olmo Hybrid Table 1 arithmetic)\n",
              static_cast<long long>(m.context), static_cast<long long>(m.bytes_per_element));
  std::printf("  full attention    %lld layers: KV %lld elements/token, %.3f MiB/layer at context\n",
              static_cast<long long>(m.full_attention_layers), static_cast<long long>(m.kv_elements_per_token),
              mib(m.kv_elements_at_context, m.bytes_per_element));
  if (m.sliding_attention_layers > 0)
    std::printf("  sliding window    %lld layers: KV of the last %lld tokens, %.3f MiB/layer (bounded by the window)\n",
                static_cast<long long>(m.sliding_attention_layers), static_cast<long long>(m.sliding_window),
                mib(m.kv_elements_at_window, m.bytes_per_element));
  if (m.linear_attention_layers > 0)
    std::printf("  linear attention  %lld layers: state %lld elements, %.3f MiB/layer (constant; +%lld conv)\n",
                static_cast<long long>(m.linear_attention_layers), static_cast<long long>(m.recurrent_state_elements),
                mib(m.recurrent_state_elements, m.bytes_per_element), static_cast<long long>(m.conv_state_elements));
  if (m.mamba_layers > 0)
    std::printf("  mamba-2           %lld layers: SSM state %lld + conv state %lld elements, %.3f MiB/layer (constant)\n",
                static_cast<long long>(m.mamba_layers), static_cast<long long>(m.mamba_ssm_state_elements),
                static_cast<long long>(m.mamba_conv_state_elements),
                mib(m.mamba_ssm_state_elements + m.mamba_conv_state_elements, m.bytes_per_element));
  if (m.lightning_layers > 0)
    std::printf("  lightning         %lld layers: state %lld elements, %.3f MiB/layer (constant)\n",
                static_cast<long long>(m.lightning_layers), static_cast<long long>(m.lightning_state_elements),
                mib(m.lightning_state_elements, m.bytes_per_element));
  std::printf("  whole model       %.3f MiB at context\n", mib(m.model_elements_at_context, m.bytes_per_element));
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
      "  hybridlm inspect ~/models/Qwen3-0.6B --json | jq .parameters_by_group\n"
      "  hybridlm inspect tests/golden/olmo_hybrid_tiny --context 32768 --bytes-per-element 4");
  cmd->add_option("model_dir", options->model_dir, "HF model directory (config.json + safetensors)")->required();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of text");
  cmd->add_option("--context", options->context, "Context length for the KV-cache vs recurrent-state figures")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--bytes-per-element", options->bytes_per_element,
                  "Bytes per cached element (2 = fp16/bf16 as in Olmo Hybrid's Table 1, 4 = fp32)")
      ->capture_default_str()
      ->check(positive_number());
  cmd->callback([options, &action] { action = [options] { return run_inspect(*options); }; });
}

}  // namespace hlm
