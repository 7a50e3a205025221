// The synth config schema: one table of fields (contracts in synth_config.h).
#include "evals/synth/synth_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "evals/synth/synth_models.h"
#include "models/json_file.h"

namespace hlm {
namespace {

using json = nlohmann::json;

struct Field {
  const char* key;
  const char* type;
  const char* meaning;
  std::function<void(const json&, SynthConfig&, const std::string& where)> read;
  std::function<json(const SynthConfig&)> write;
};

template <typename T>
T get_as(const json& v, const std::string& where, const char* type) {
  try {
    if constexpr (std::is_same_v<T, bool>) {
      HLM_CHECK_INPUT(v.is_boolean(), "");
    } else if constexpr (std::is_integral_v<T>) {
      HLM_CHECK_INPUT(v.is_number_integer(), "");
    } else if constexpr (std::is_floating_point_v<T>) {
      HLM_CHECK_INPUT(v.is_number(), "");
    } else if constexpr (std::is_same_v<T, std::string>) {
      HLM_CHECK_INPUT(v.is_string(), "");
    } else {
      HLM_CHECK_INPUT(v.is_array(), "");
    }
    return v.get<T>();
  } catch (const std::exception&) {
    throw_input_error(where, ": expected ", type, ", got ", v.dump());
  }
}

template <typename T>
Field field(const char* key, const char* type, T SynthConfig::*member, const char* meaning) {
  return {key, type, meaning,
          [member, type](const json& v, SynthConfig& c, const std::string& where) {
            c.*member = get_as<T>(v, where, type);
          },
          [member](const SynthConfig& c) { return json(c.*member); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      field("tasks", "list of strings", &SynthConfig::tasks,
            "tasks to run: state_tracking, recall, state_based_recall"),
      field("architectures", "list of strings", &SynthConfig::architectures,
            "architectures to train: transformer, gdn_neg, gdn_pos, hybrid_neg, hybrid_pos"),
      field("num_layers", "int", &SynthConfig::num_layers, "decoder layers (Table 14: 4)"),
      field("hidden_size", "int", &SynthConfig::hidden_size, "d_model (Table 14: 256)"),
      field("intermediate_size", "int", &SynthConfig::intermediate_size, "d_ff of the SwiGLU MLP (Table 14: 1024)"),
      field("num_heads", "int", &SynthConfig::num_heads, "attention heads = GDN heads (Table 14: 4)"),
      field("head_dim", "int", &SynthConfig::head_dim, "attention head dim = GDN key head dim (Table 14: 64)"),
      field("gdn_value_head_dim", "int", &SynthConfig::gdn_value_head_dim, "GDN value head dim (OLMo-core: 2x key)"),
      field("hybrid_layer_types", "list of strings", &SynthConfig::hybrid_layer_types,
            "hybrid layout, full_attention|linear_attention per layer; [] = every 4th layer attention (GDN,GDN,GDN,attn)"),
      field("max_positions_recall", "int", &SynthConfig::max_positions_recall,
            "max_position_embeddings for recall (Table 14: 1024)"),
      field("max_positions_other", "int", &SynthConfig::max_positions_other,
            "max_position_embeddings for the other tasks (Table 14: 4096)"),
      field("max_address", "int", &SynthConfig::max_address,
            "address tokens 0..max_address-1; vocabulary = 11 + max_address"),
      field("train_min", "int", &SynthConfig::train_min, "smallest training difficulty (n, or m for recall)"),
      field("train_max", "int", &SynthConfig::train_max, "largest training difficulty; each item draws one uniformly"),
      field("eval_difficulties", "list of ints", &SynthConfig::eval_difficulties,
            "difficulties evaluated (table rows), in and beyond the training range"),
      field("state_based_recall_m", "int", &SynthConfig::state_based_recall_m,
            "state-based recall array size: 0 = max(n, variables) (the main sweep's m = n), else fixed"),
      field("no_undo", "bool", &SynthConfig::no_undo, "forbid a swap that repeats the previous swap's pair"),
      field("variables", "int", &SynthConfig::variables,
            "pointer variables V in 2..5 (paper: 5; 2 turns state tracking into parity of n)"),
      field("swap_delimiter", "bool", &SynthConfig::swap_delimiter,
            "OPS before every swap pair, not only the first (one swap per 'line', as the paper's program); "
            "without it a model must count pair positions to read the swaps"),
      field("curriculum", "number", &SynthConfig::curriculum,
            "share of the steps over which the largest training difficulty grows linearly from train_min to "
            "train_max (items uniform up to it); 0 = off"),
      field("steps", "int", &SynthConfig::steps, "optimizer steps per (task, architecture)"),
      field("batch_size", "int", &SynthConfig::batch_size, "items per step"),
      field("lr", "number", &SynthConfig::lr, "peak learning rate (AdamW)"),
      field("min_lr", "number", &SynthConfig::min_lr, "cosine floor"),
      field("warmup_fraction", "number", &SynthConfig::warmup_fraction, "linear warmup share of the steps"),
      field("weight_decay", "number", &SynthConfig::weight_decay, "AdamW decoupled weight decay"),
      field("clip", "number", &SynthConfig::clip, "global gradient-norm clip"),
      field("seed", "int", &SynthConfig::seed, "seed of weights and data (train/eval items use separate streams)"),
      field("eval_items", "int", &SynthConfig::eval_items, "fresh held-out items per difficulty"),
      field("eval_batch", "int", &SynthConfig::eval_batch, "items per evaluation forward"),
      field("log_every", "int", &SynthConfig::log_every, "progress line every this many steps"),
  };
  return table;
}

void validate(const SynthConfig& c, const std::string& source) {
  auto at = [&](const char* key) { return source + ": " + key; };
  HLM_CHECK_INPUT(!c.tasks.empty(), at("tasks"), ": empty");
  for (const std::string& t : c.tasks) synth_task_from_name(t, at("tasks"));
  HLM_CHECK_INPUT(!c.architectures.empty(), at("architectures"), ": empty");
  for (const std::string& a : c.architectures) synth_arch_from_name(a, at("architectures"));
  auto positive = [&](int64_t v, const char* key) { HLM_CHECK_INPUT(v > 0, at(key), ": must be > 0, got ", v); };
  positive(c.num_layers, "num_layers");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_heads, "num_heads");
  positive(c.head_dim, "head_dim");
  positive(c.gdn_value_head_dim, "gdn_value_head_dim");
  positive(c.max_positions_recall, "max_positions_recall");
  positive(c.max_positions_other, "max_positions_other");
  HLM_CHECK_INPUT(2 <= c.variables && c.variables <= kSynthVariables, at("variables"), ": must be in 2..5, got ",
                  c.variables);
  HLM_CHECK_INPUT(c.max_address >= kSynthVariables, at("max_address"), ": must be ≥ 5, got ", c.max_address);
  if (!c.hybrid_layer_types.empty()) {
    HLM_CHECK_INPUT(static_cast<int64_t>(c.hybrid_layer_types.size()) == c.num_layers, at("hybrid_layer_types"),
                    ": has ", c.hybrid_layer_types.size(), " entries but num_layers is ", c.num_layers);
    for (const std::string& k : c.hybrid_layer_types)
      HLM_CHECK_INPUT(k == "full_attention" || k == "linear_attention", at("hybrid_layer_types"), ": '", k,
                      "' (expected full_attention or linear_attention)");
  }
  HLM_CHECK_INPUT(c.train_min >= 0 && c.train_min <= c.train_max, at("train_min"), "/train_max: need 0 ≤ train_min ≤ ",
                  "train_max, got ", c.train_min, " and ", c.train_max);
  HLM_CHECK_INPUT(!c.eval_difficulties.empty(), at("eval_difficulties"), ": empty");
  for (int64_t d : c.eval_difficulties) HLM_CHECK_INPUT(d >= 0, at("eval_difficulties"), ": negative value ", d);
  HLM_CHECK_INPUT(c.state_based_recall_m == 0 || c.state_based_recall_m >= c.variables, at("state_based_recall_m"),
                  ": must be 0 or ≥ variables (", c.variables, "), got ", c.state_based_recall_m);
  positive(c.steps, "steps");
  positive(c.batch_size, "batch_size");
  HLM_CHECK_INPUT(c.lr > 0, at("lr"), ": must be > 0");
  HLM_CHECK_INPUT(c.min_lr >= 0 && c.min_lr <= c.lr, at("min_lr"), ": must be in [0, lr]");
  HLM_CHECK_INPUT(c.warmup_fraction >= 0 && c.warmup_fraction <= 1, at("warmup_fraction"), ": must be in [0, 1]");
  HLM_CHECK_INPUT(c.curriculum >= 0 && c.curriculum <= 1, at("curriculum"), ": must be in [0, 1], got ", c.curriculum);
  HLM_CHECK_INPUT(c.weight_decay >= 0, at("weight_decay"), ": must be ≥ 0");
  HLM_CHECK_INPUT(c.clip > 0, at("clip"), ": must be > 0");
  positive(c.eval_items, "eval_items");
  positive(c.eval_batch, "eval_batch");
  positive(c.log_every, "log_every");
  // Every task's difficulties must fit the vocabulary and the position table.
  for (const std::string& name : c.tasks) {
    const SynthTask task = synth_task_from_name(name);
    if (task == SynthTask::Recall) {
      const int64_t m = std::max(c.train_max, *std::max_element(c.eval_difficulties.begin(), c.eval_difficulties.end()));
      HLM_CHECK_INPUT(m <= c.max_address, source, ": recall needs m up to ", m, " but max_address is ", c.max_address);
      HLM_CHECK_INPUT(c.train_min >= 1, at("train_min"), ": recall needs m ≥ 1");
      for (int64_t d : c.eval_difficulties) HLM_CHECK_INPUT(d >= 1, at("eval_difficulties"), ": recall needs m ≥ 1");
    }
    if (task == SynthTask::StateBasedRecall) {
      int64_t m = synth_state_based_recall_m(c, c.train_max);
      for (int64_t d : c.eval_difficulties) m = std::max(m, synth_state_based_recall_m(c, d));
      HLM_CHECK_INPUT(m <= c.max_address, source, ": state_based_recall needs m up to ", m, " but max_address is ",
                      c.max_address);
    }
    const int64_t len = synth_max_sequence_length(c, task);
    const int64_t limit = task == SynthTask::Recall ? c.max_positions_recall : c.max_positions_other;
    HLM_CHECK_INPUT(len <= limit, source, ": ", name, " items reach ", len, " tokens but max positions is ", limit,
                    " (", task == SynthTask::Recall ? "max_positions_recall" : "max_positions_other", ")");
  }
}

}  // namespace

SynthConfig synth_config_parse(const json& j, const std::string& source) {
  HLM_CHECK_INPUT(j.is_object(), source, ": expected a JSON object");
  SynthConfig c;
  std::set<std::string> known;
  for (const Field& f : fields()) {
    known.insert(f.key);
    if (const auto it = j.find(f.key); it != j.end()) f.read(*it, c, source + ": " + f.key);
  }
  for (const auto& [key, value] : j.items())
    HLM_CHECK_INPUT(known.count(key) != 0, source, ": unknown key '", key, "' (see `hybridlm synth --help`)");
  validate(c, source);
  return c;
}

SynthConfig synth_config_load(const std::string& path) { return synth_config_parse(json_file_read(path), path); }

nlohmann::ordered_json synth_config_to_json(const SynthConfig& config) {
  nlohmann::ordered_json j;
  for (const Field& f : fields()) j[f.key] = f.write(config);
  return j;
}

std::string synth_config_fields_text() {
  const SynthConfig defaults;
  std::ostringstream os;
  for (const Field& f : fields())
    os << "  " << f.key << " (" << f.type << ", default " << f.write(defaults).dump() << "): " << f.meaning << "\n";
  return os.str();
}

std::vector<std::string> synth_hybrid_layer_types(const SynthConfig& c) {
  if (!c.hybrid_layer_types.empty()) return c.hybrid_layer_types;
  std::vector<std::string> types(static_cast<size_t>(c.num_layers), "linear_attention");
  for (int64_t i = 0; i < c.num_layers; ++i)
    if (i % 4 == 3) types[static_cast<size_t>(i)] = "full_attention";
  if (c.num_layers < 4) types.back() = "full_attention";
  return types;
}

int64_t synth_state_based_recall_m(const SynthConfig& c, int64_t n) {
  return c.state_based_recall_m > 0 ? c.state_based_recall_m : std::max<int64_t>(n, c.variables);
}

int64_t synth_train_difficulty_max(const SynthConfig& c, int64_t step) {
  const int64_t ramp = static_cast<int64_t>(std::ceil(c.curriculum * static_cast<double>(c.steps)));
  if (ramp <= 0 || step >= ramp) return c.train_max;
  const int64_t span = c.train_max - c.train_min;
  return std::min(c.train_max, c.train_min + (span * std::max<int64_t>(step, 1) + ramp - 1) / ramp);
}

int64_t synth_max_sequence_length(const SynthConfig& c, SynthTask task) {
  int64_t longest = 0;
  std::vector<int64_t> ds = c.eval_difficulties;
  ds.push_back(c.train_max);
  for (int64_t d : ds) {
    const int64_t n = task == SynthTask::Recall ? 0 : d;
    const int64_t m = task == SynthTask::Recall ? d
                      : task == SynthTask::StateBasedRecall ? synth_state_based_recall_m(c, d)
                                                            : 0;
    longest = std::max(longest, synth_sequence_length(task, n, m, static_cast<int>(c.variables), c.swap_delimiter));
  }
  return longest;
}

}  // namespace hlm
