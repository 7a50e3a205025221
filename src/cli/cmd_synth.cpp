// `hybridlm synth --config synth.json --out DIR [--device cpu]`: Olmo Hybrid's synthetic expressivity suite (state
// tracking, recall, state-based recall x five architectures; evals/synth/). `hybridlm synth gen ...`: print items.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "core/error.h"
#include "evals/synth/synth_run.h"
#include "models/json_file.h"

#ifdef HLM_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_context.h"
#include "models/cuda/cuda_model.h"
#endif

namespace hlm {
namespace {

struct SynthCliOptions {
  std::string config, out, device = "cpu", precision = "fp32", profile_steps;
  std::string cuda_graphs = "on";  // --device cuda: training steps as replayed CUDA graphs (HLM_CUDA_GRAPHS=off too)
  int64_t bucket_tokens = 128;     // --device cuda: pad each step's batch to a multiple of this many tokens (0: off)
  std::vector<std::string> tasks;  // replaces the config's `tasks` when given
};

struct SynthGenCliOptions {
  std::string task, split = "train";
  int64_t n = 0, m = 0, count = 1, max_address = SynthConfig{}.max_address;
  uint64_t seed = 0;
  int variables = kSynthVariables;
  bool no_undo = false, swap_delimiter = false;
};

#ifdef HLM_WITH_CUDA
// A TrainDevice that brackets steps [first, last] (1-based, of each pair) with cudaProfilerStart/Stop, the range the
// kernel tracer (docs/profiling.md) and ncu can be limited to; otherwise it forwards every call. It also prints the
// range's wall time (device synchronized at both ends, the trainer's host work between the steps included): run once
// without the tracer for the step's true wall time and once with it for the GPU's busy time over the same steps (the
// items are the same for a given seed), and the busy share is their ratio, unaffected by the tracer's own cost.
class ProfiledTrainDevice final : public TrainDevice {
 public:
  ProfiledTrainDevice(std::unique_ptr<TrainDevice> inner, int64_t first, int64_t last)
      : inner_(std::move(inner)), first_(first), last_(last) {}
  std::string describe() const override { return inner_->describe(); }
  size_t free_memory_bytes() const override { return inner_->free_memory_bytes(); }
  void attach(Model& student, Model* teacher, AdamW& optimizer) override { inner_->attach(student, teacher, optimizer); }
  BatchLoss step(const PackedBatch& batch, int64_t micro_rows, double tau, double clip, double* grad_norm,
                 size_t num_languages) override {
    ++steps_;
    if (steps_ == first_) {
      cudaDeviceSynchronize();
      cudaProfilerStart();
      range_start_ = std::chrono::steady_clock::now();
    }
    BatchLoss loss = inner_->step(batch, micro_rows, tau, clip, grad_norm, num_languages);
    if (steps_ == last_) {
      cudaDeviceSynchronize();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - range_start_).count();
      cudaProfilerStop();
      std::fprintf(stderr, "profiled steps %lld:%lld: %.3f ms wall, %.4f ms per step\n", static_cast<long long>(first_),
                   static_cast<long long>(last_), ms, ms / static_cast<double>(last_ - first_ + 1));
    }
    return loss;
  }
  void evaluate_pass(const PackedBatch& batch, EvalSums& sums) override { inner_->evaluate_pass(batch, sums); }
  void sync_to_host() override { inner_->sync_to_host(); }

 private:
  std::unique_ptr<TrainDevice> inner_;
  int64_t first_, last_, steps_ = 0;
  std::chrono::steady_clock::time_point range_start_;
};
#endif

// --device: the CPU loops, or the GPU trainer for the steps and the GPU forward for evaluation.
SynthDevice synth_device_for(const SynthCliOptions& o) {
  HLM_CHECK_INPUT(o.device == "cpu" || o.device == "cuda", "--device: '", o.device, "' is not a device (cpu or cuda)");
  HLM_CHECK_INPUT(o.precision == "fp32" || o.precision == "bf16", "--precision: expected fp32 or bf16, got '",
                  o.precision, "'");
  HLM_CHECK_INPUT(o.device == "cuda" || (o.precision == "fp32" && o.profile_steps.empty()),
                  "--precision bf16 and --profile-steps need --device cuda");
  HLM_CHECK_INPUT(o.bucket_tokens >= 0, "--bucket-tokens: must be >= 0, got ", o.bucket_tokens);
  HLM_CHECK_INPUT(o.cuda_graphs == "on" || o.cuda_graphs == "off", "--cuda-graphs must be on or off, got '",
                  o.cuda_graphs, "'");
  SynthDevice device;
  if (o.device == "cpu") return device;
  device.bucket_tokens = o.bucket_tokens;
  int64_t first = 0, last = -1;
  if (!o.profile_steps.empty()) {
    long long a = 0, b = 0;
    char tail = 0;
    HLM_CHECK_INPUT(std::sscanf(o.profile_steps.c_str(), "%lld:%lld%c", &a, &b, &tail) == 2 && 1 <= a && a <= b,
                    "--profile-steps: expected FIRST:LAST with 1 <= FIRST <= LAST, got '", o.profile_steps, "'");
    first = a;
    last = b;
  }
#ifdef HLM_WITH_CUDA
  device.name = "cuda (" + o.precision + ")";
  const std::string precision = o.precision;
  const bool graphs = o.cuda_graphs == "on";
  device.make_trainer = [precision, graphs, first, last]() -> std::unique_ptr<TrainDevice> {
    std::unique_ptr<TrainDevice> inner = train_device_for("cuda", precision, "layer", graphs);
    if (last < first) return inner;
    return std::make_unique<ProfiledTrainDevice>(std::move(inner), first, last);
  };
  device.make_forward = [](const Model& model) -> std::function<Tensor(const TokenBatch&)> {
    auto gpu = std::make_shared<CudaModel>(CudaModel::upload(model, cuda_context()));
    return [gpu](const TokenBatch& batch) { return gpu->forward(batch); };
  };
#else
  (void)first;
  (void)last;
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
  return device;
}

int run_synth(const SynthCliOptions& o) {
  HLM_CHECK_INPUT(!o.config.empty(), "synth: --config is required (or use `hybridlm synth gen`)");
  HLM_CHECK_INPUT(!o.out.empty(), "synth: --out is required");
  nlohmann::json config_json = json_file_read(o.config);
  if (!o.tasks.empty() && config_json.is_object()) config_json["tasks"] = o.tasks;
  const SynthConfig config = synth_config_parse(config_json, o.tasks.empty() ? o.config : o.config + " (with --tasks)");
  SynthRunOptions run_options{o.out, synth_device_for(o)};
  std::printf("synth: resolved config (saved as %s/config.json):\n%s\n", o.out.c_str(),
              synth_config_to_json(config).dump(2).c_str());
  std::fflush(stdout);
  const std::vector<SynthPairResult> results =
      synth_run(config, run_options, [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      });
  std::printf("synth: %zu pairs; wrote %s/results.md and <task>.{csv,md,svg}\n", results.size(), o.out.c_str());
  return 0;
}

int run_synth_gen(const SynthGenCliOptions& o) {
  const SynthTask task = synth_task_from_name(o.task, "--task");
  HLM_CHECK_INPUT(o.count >= 0, "--count: must be ≥ 0, got ", o.count);
  HLM_CHECK_INPUT(o.split == "train" || o.split == "eval", "--split: expected train or eval, got '", o.split, "'");
  const SynthVocab vocab{o.max_address};
  const SynthSplit split = o.split == "train" ? SynthSplit::Train : SynthSplit::Eval;
  for (int64_t i = 0; i < o.count; ++i) {
    const SynthItem item = synth_generate(task, o.n, o.m, {o.seed, split, static_cast<uint64_t>(i)}, vocab,
                                          {o.no_undo, o.variables, o.swap_delimiter});
    std::printf("%s\n", synth_item_json(item).c_str());
  }
  return 0;
}

}  // namespace

void add_synth_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand("synth", "Olmo Hybrid's synthetic expressivity suite (train + evaluate)");
  cmd->footer(
      "Trains every (task, architecture) of the config from scratch and evaluates accuracy at the answer position\n"
      "on fresh held-out items per difficulty (in and beyond the training range). Tasks: state_tracking (n swaps of\n"
      "5 pointers), recall (m bits, literal index), state_based_recall (n swaps over m bits). Architectures:\n"
      "transformer, gdn_neg (beta in [0,2]), gdn_pos (beta in [0,1]), hybrid_neg, hybrid_pos. Resumable: pairs with\n"
      "<out>/<task>/<arch>/result.json are skipped. Outputs: config.json (resolved), <task>.csv/.md/.svg,\n"
      "results.md. Config: one JSON object; fields (all optional):\n" +
      synth_config_fields_text() +
      "Examples:\n"
      "  hybridlm synth --config configs/synth/table14.json --out runs/synth\n"
      "  echo '{\"tasks\":[\"recall\"],\"architectures\":[\"transformer\",\"gdn_neg\"],\"steps\":300}' > s.json\n"
      "  hybridlm synth --config s.json --out runs/synth_small\n"
      "  hybridlm synth --config configs/synth/table14.json --out runs/synth_gpu --device cuda\n"
      "  hybridlm synth --config configs/synth/table14-long.json --out runs/synth_long --device cuda --precision bf16\n"
      "  hybridlm synth --config configs/synth/table14.json --out runs/synth_eager --device cuda --cuda-graphs off\n"
      "  hybridlm synth gen --task state_based_recall --n 8 --m 16 --count 3 --seed 1");
  cmd->add_option("--config", o->config, "Sweep config (JSON)");
  cmd->add_option("--out", o->out, "Output directory (created; reused to resume)");
  cmd->add_option("--tasks", o->tasks,
                  "Comma-separated tasks replacing the config's `tasks` (e.g. one process per task, each with its own "
                  "--out)")
      ->delimiter(',');
  cmd->add_option("--device", o->device,
                  "cpu, or cuda (GPU 0: the GPU trainer's steps and the GPU forward for evaluation; needs a build "
                  "with the CUDA backend)")
      ->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32, or bf16 (--device cuda: bf16 products, fp32 master weights)")
      ->capture_default_str();
  cmd->add_option("--bucket-tokens", o->bucket_tokens,
                  "--device cuda: pad each training step's packed items with short pad sequences (no loss) to a "
                  "multiple of N tokens, so steps repeat a few shapes (0: no padding; docs/synth.md)")
      ->capture_default_str();
  cmd->add_option("--cuda-graphs", o->cuda_graphs,
                  "on|off (--device cuda): capture each training step once per batch shape as a CUDA graph and "
                  "replay it (same results bit for bit; a shape's first step runs eagerly). HLM_CUDA_GRAPHS=off in "
                  "the environment also turns it off (docs/synth.md)")
      ->capture_default_str();
  cmd->add_option("--profile-steps", o->profile_steps,
                  "FIRST:LAST (--device cuda): bracket these steps of each pair with cudaProfilerStart/Stop for the "
                  "kernel tracer (docs/profiling.md)");
  cmd->callback([o, cmd, &action] {
    if (cmd->get_subcommands().empty()) action = [o] { return run_synth(*o); };
  });

  auto g = std::make_shared<SynthGenCliOptions>();
  CLI::App* gen = cmd->add_subcommand("gen", "Print synthetic items as JSON lines");
  gen->footer(
      "One JSON object per line: task, n, m, bits (not for state_tracking), init (a..e start values), swaps ([x,y]\n"
      "variable indices, 0 = a), query (variable; recall: the literal index), answer, answer_token, moved (pointer\n"
      "tasks), tokens (the encoded input; the model predicts answer_token after the last one). Items are a pure\n"
      "function of (seed, split, task, n, m, item index).\n"
      "Examples:\n"
      "  hybridlm synth gen --task state_tracking --n 4 --count 2 --seed 7\n"
      "  hybridlm synth gen --task recall --m 16 --count 5\n"
      "  hybridlm synth gen --task state_based_recall --n 8 --m 8 --count 3 --split eval\n"
      "  hybridlm synth gen --task state_tracking --n 3 --count 1 --swap-delimiter");
  gen->add_option("--task", g->task, "state_tracking | recall | state_based_recall")->required();
  gen->add_option("--n", g->n, "Swaps (state_tracking, state_based_recall)")->capture_default_str();
  gen->add_option("--m", g->m, "Bit-array size (recall, state_based_recall)")->capture_default_str();
  gen->add_option("--count", g->count, "Items")->capture_default_str();
  gen->add_option("--seed", g->seed, "Seed")->capture_default_str();
  gen->add_option("--split", g->split, "train | eval (independent RNG streams)")->capture_default_str();
  gen->add_option("--max-address", g->max_address, "Address tokens 0..max_address-1")->capture_default_str();
  gen->add_flag("--no-undo", g->no_undo, "Forbid a swap repeating the previous swap's pair");
  gen->add_flag("--swap-delimiter", g->swap_delimiter, "OPS before every swap pair, not only the first");
  gen->add_option("--variables", g->variables, "Pointer variables V in 2..5 (2: state tracking = parity)")
      ->capture_default_str();
  gen->callback([g, &action] { action = [g] { return run_synth_gen(*g); }; });
}

}  // namespace hlm
