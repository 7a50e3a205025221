// `hybridlm convert --teacher DIR --placement NAME|i,j,k --out DIR [--full F | --full-fraction X] [--neg-eigval]
// [--seed S] [--force]`: the seed's Algorithm 1 initialisation (models/convert.h) with a placement from
// models/placements.h. Writes the student (config.json + model.safetensors, via Model::save) and convert.json (the
// resolved settings) into a temporary directory beside --out, then renames it into place: no partial output on error.
// Everything that can be checked from config.json (placement, layer list, teacher type, --out) is checked before the
// teacher's weights are read.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "models/convert.h"
#include "models/model.h"
#include "models/placements.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

constexpr double kDefaultFullFraction = 0.25;  // the seed's budget (§6.2: 9/36, 10/40)

struct ConvertCliOptions {
  std::string teacher;
  std::string placement;
  std::string out;
  std::optional<int> full;
  std::optional<double> full_fraction;
  bool neg_eigval = false;
  uint64_t seed = 0;
  bool force = false;
};

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

// Removes a temporary directory unless released (so an error leaves nothing behind).
class TempDir {
 public:
  explicit TempDir(fs::path path) : path_(std::move(path)) {}
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const fs::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

int run_convert(const ConvertCliOptions& o) {
  check_model_dir(o.teacher);
  const ModelConfig teacher_config = load_model_config(fs::path(o.teacher) / "config.json");
  const int L = static_cast<int>(teacher_config.num_hidden_layers);

  // F: --full, else --full-fraction, else the seed's 25% for a named placement (a custom list sets its own F).
  std::optional<int> full = o.full;
  std::optional<double> fraction = o.full_fraction;
  if (!full && !fraction && placement_from_name(o.placement)) fraction = kDefaultFullFraction;
  if (!full && fraction) full = placement_full_from_fraction(*fraction, L);
  const ResolvedPlacement placement = placement_resolve(o.placement, L, full);
  const ConvertOptions options{.neg_eigval = o.neg_eigval, .seed = o.seed};
  const ModelConfig student_config = convert_student_config(teacher_config, placement.full_layers, options);
  const std::vector<std::string> dropped = convert_dropped_tensors(teacher_config, placement.full_layers);
  const std::string layout = placement_layout(placement.full_layers, L);

  const fs::path out = fs::absolute(o.out).lexically_normal();
  HLM_CHECK_INPUT(!out.filename().empty(), o.out, ": not a usable output directory name");
  const bool out_exists = fs::exists(out);
  HLM_CHECK_INPUT(!out_exists || !fs::equivalent(out, o.teacher), o.out, ": --out is the teacher directory");
  if (out_exists && !o.force) {
    HLM_CHECK_INPUT(fs::is_directory(out) && fs::is_empty(out), o.out,
                    ": --out exists and is not an empty directory (use --force to replace it)");
  }

  const int F = static_cast<int>(placement.full_layers.size());
  const int64_t H = teacher_config.num_attention_heads, H_kv = teacher_config.num_key_value_heads;
  std::printf("teacher      %s (%s, %d layers, %lld q / %lld kv heads x %lld, %s)\n", o.teacher.c_str(),
              teacher_config.model_type.c_str(), L, static_cast<long long>(H), static_cast<long long>(H_kv),
              static_cast<long long>(teacher_config.head_dim), teacher_config.tie_word_embeddings ? "tied" : "untied");
  std::printf("placement    %s, F = %d of %d", placement.name.c_str(), F, L);
  if (fraction && !o.full) std::printf(" (round(%g x %d), halves up)", *fraction, L);
  std::printf("\nfull layers  %s\n", join(placement.full_layers).c_str());
  std::printf("layout       %s  (A = full attention, R = Gated DeltaNet)\n", layout.c_str());
  std::printf("gdn          %lld heads x %lld (keys and values, k/v cloned from kv head h/%lld), conv %lld, beta %s\n",
              static_cast<long long>(H), static_cast<long long>(teacher_config.head_dim),
              static_cast<long long>(H / H_kv), static_cast<long long>(kConvertConvKernel),
              o.neg_eigval ? "2*sigmoid (negative eigenvalues)" : "sigmoid");
  std::printf("init         seed %llu: A_log %g, dt in [%g, %g], a/b/g_proj ~ U(+-hidden^-1/2), identity conv\n",
              static_cast<unsigned long long>(o.seed), static_cast<double>(kConvertALog), kConvertDtMin,
              kConvertDtMax);
  std::printf("lm head      untied: copy of the teacher's %s\n",
              teacher_config.tie_word_embeddings ? "embedding" : "lm_head");
  if (!dropped.empty()) std::printf("dropped      %zu teacher tensors without a GDN counterpart:\n", dropped.size());
  for (const std::string& name : dropped) std::printf("               %s\n", name.c_str());
  std::printf("out          %s\n", o.out.c_str());
  std::fflush(stdout);

  const Model teacher = Model::load(o.teacher);
  const Model student = convert_to_hybrid(teacher, placement.full_layers, options);
  HLM_CHECK(student.config().layer_types == student_config.layer_types, "convert: layer types changed");

  const fs::path parent = out.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  HLM_CHECK_INPUT(!ec, parent.string(), ": cannot create directory: ", ec.message());
  const std::string tag = std::to_string(getpid());
  TempDir tmp(parent / ("." + out.filename().string() + ".tmp-" + tag));
  fs::remove_all(tmp.path());
  student.save(tmp.path());
  const nlohmann::json settings = {
      {"generator", "hybridlm convert (seed Algorithm 1 initialisation)"},
      {"teacher", o.teacher},
      {"teacher_absolute", fs::absolute(o.teacher).lexically_normal().string()},
      {"teacher_model_type", teacher_config.model_type},
      {"placement", placement.name},
      {"placement_argument", o.placement},
      {"layers", L},
      {"full", F},
      {"full_layers", placement.full_layers},
      {"full_fraction", static_cast<double>(F) / L},
      {"full_fraction_requested", fraction && !o.full ? nlohmann::json(*fraction) : nlohmann::json(nullptr)},
      {"layout", layout},
      {"seed", o.seed},
      {"neg_eigval", o.neg_eigval},
      {"init", {{"A_log", kConvertALog},
                {"dt_min", kConvertDtMin},
                {"dt_max", kConvertDtMax},
                {"abg_proj_uniform_bound", 1.0 / std::sqrt(static_cast<double>(teacher_config.hidden_size))},
                {"conv", "identity (last tap 1)"},
                {"o_norm", 1.0},
                {"lm_head", teacher_config.tie_word_embeddings ? "copy of embed_tokens" : "copy of lm_head"}}},
      {"dropped_tensors", dropped}};
  file_write_atomic(tmp.path() / "convert.json", settings.dump(2) + "\n");

  // Into place: an existing (empty, or --force) --out is moved aside first and removed after the rename.
  TempDir old(out_exists ? parent / ("." + out.filename().string() + ".old-" + tag) : fs::path());
  if (out_exists) {
    fs::remove_all(old.path());
    fs::rename(out, old.path(), ec);
    HLM_CHECK_INPUT(!ec, o.out, ": cannot move the existing output aside: ", ec.message());
  }
  fs::rename(tmp.path(), out, ec);
  if (ec) {
    if (out_exists) fs::rename(old.path(), out);
    throw_input_error(o.out, ": cannot move the student into place: ", ec.message());
  }
  tmp.release();
  std::printf("wrote        %s/{config.json, model.safetensors, convert.json}\n", o.out.c_str());
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<ConvertCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a full-attention teacher into a hybrid GDN student (seed Algorithm 1 initialisation)");
  cmd->footer(
      "The student keeps the teacher's embeddings, norms, MLPs and the full-attention layers listed by the placement\n"
      "(bitwise); every other layer becomes Gated DeltaNet: q/o_proj copied, k/v_proj cloned per query head, identity\n"
      "conv, A_log = -4, a/b/g_proj ~ U(-d^-1/2, d^-1/2), o_norm = 1, dt_bias = softplus^-1(dt), log dt ~\n"
      "U(log 1e-3, log 1e-1). The LM head is untied. Without --full / --full-fraction a named placement uses\n"
      "F = round(0.25 * L). convert.json beside config.json records the resolved settings.\n" +
      placement_rules_text() +
      "Examples:\n"
      "  hybridlm convert --teacher ~/models/Qwen3-4B-Base --placement reverse_periodic --out students/rp\n"
      "  hybridlm convert --teacher tests/golden/qwen3_untied --placement 0,2 --out /tmp/student --neg-eigval\n"
      "  hybridlm convert --teacher tests/golden/granite --placement 0 --out /tmp/granite_student\n"
      "  hybridlm convert --teacher ~/models/Qwen3-4B-Base --placement sandwich --full 9 --seed 1 --out s --force");
  cmd->add_option("--teacher", options->teacher,
                  "Teacher HF model directory (dense qwen3 -> qwen3_hybrid student, or dense granite -> "
                  "granite_hybrid student with the teacher's four Granite multipliers)")
      ->required();
  cmd->add_option("--placement", options->placement,
                  "Placement name (" + placement_names() + ") or a list of 0-based full-attention layers \"i,j,k\"")
      ->required();
  cmd->add_option("--out", options->out, "Output directory for the student (must be absent or empty unless --force)")
      ->required();
  CLI::Option* full = cmd->add_option("--full", options->full, "Number of full-attention layers F")
                          ->check(positive_number());
  CLI::Option* fraction = cmd->add_option("--full-fraction", options->full_fraction,
                                          "Fraction of full-attention layers: F = round(X * L), halves up (default "
                                          "0.25 for a named placement)")
                              ->check(CLI::Range(0.0, 1.0));
  full->excludes(fraction);
  fraction->excludes(full);
  cmd->add_flag("--neg-eigval", options->neg_eigval, "Student GDN uses beta = 2*sigmoid (negative eigenvalues)");
  cmd->add_option("--seed", options->seed, "Init seed of the new GDN parameters")->capture_default_str();
  cmd->add_flag("--force", options->force, "Replace a non-empty --out");
  cmd->callback([options, &action] { action = [options] { return run_convert(*options); }; });
}

}  // namespace hlm
