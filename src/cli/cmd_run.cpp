// `hybridlm run MODEL_DIR --ids 1,2,3 [--ids ...] [--top-k 5] [--dump OUT.safetensors --points a,b,...]
//  [--device cpu|cuda]`:
// one forward pass over one or more token sequences, printing the top-k next tokens of each with log-probs, and
// optionally dumping capture points as f32 tensors named "<point>.<layer>" ([T, hidden]) and "logits" ([T, vocab]).
// With several sequences T is the total (sequences packed in order); the dump's metadata records cu_seqlens.
// --device cuda runs the forward on the GPU (models/cuda/cuda_model.h; only in builds with the CUDA backend) and
// downloads only the capture points being dumped.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/device_option.h"
#include "cli/subcommands.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "ops/log_softmax/log_softmax.h"
#ifdef HLM_WITH_CUDA
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_query.h"
#include "models/cuda/cuda_model.h"
#endif

namespace hlm {
namespace {

struct RunOptions {
  std::string model_dir;
  std::vector<std::string> ids;  // one comma-separated list per sequence
  int top_k = 5;
  std::string dump;
  std::string points = "attn_in,attn_delta,attn_out,mlp_delta,logits";
  std::string device = "cpu";
};

// The forward on the chosen device; `wanted` limits what the GPU downloads (the CPU computes everything anyway).
Tensor forward_on(const std::string& device, Model& model, const TokenBatch& batch, const ForwardOptions& options,
                  const Capture& capture, const std::function<bool(CapturePoint)>& wanted) {
  if (device == "cpu") return model.forward(batch, options, capture);
#ifdef HLM_WITH_CUDA
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
  CudaModel gpu = CudaModel::upload(model, cuda_context());
  return gpu.forward(batch, options, capture, [&](CapturePoint p, int) { return wanted(p); });
#else
  (void)wanted;
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    HLM_CHECK_INPUT(!item.empty() && end && *end == '\0' && value >= 0 && value <= INT32_MAX, "--ids: '", item,
                    "' is not a token id (expected non-negative integers separated by commas)");
    ids.push_back(static_cast<int32_t>(value));
    start = comma + 1;
  }
  return ids;
}

std::vector<const CapturePointInfo*> parse_points(const std::string& text) {
  std::vector<const CapturePointInfo*> points;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    const CapturePointInfo* info = capture_point_by_name(name);
    if (info == nullptr) {
      std::string known;
      for (const auto& row : kCapturePointTable) known += (known.empty() ? "" : ", ") + std::string(row.name);
      throw_input_error("--points: unknown capture point '", name, "' (known: ", known, ")");
    }
    points.push_back(info);
    start = comma + 1;
  }
  return points;
}

int run_run(const RunOptions& o) {
  HLM_CHECK_INPUT(!o.ids.empty(), "--ids is required");
  HLM_CHECK_INPUT(o.top_k >= 1, "--top-k must be at least 1");
  check_device_option(o.device);  // before the model is loaded
  TokenBatch batch;
  for (const std::string& seq : o.ids) batch.add_sequence(parse_ids(seq));
  const std::vector<const CapturePointInfo*> points = o.dump.empty() ? std::vector<const CapturePointInfo*>{}
                                                                     : parse_points(o.points);
  if (!o.dump.empty()) {
    const auto parent = std::filesystem::absolute(o.dump).parent_path();
    HLM_CHECK_INPUT(std::filesystem::is_directory(parent), "--dump: directory ", parent.string(), " does not exist");
  }

  Model model = Model::load(o.model_dir);
  for (const std::string& key : model.config().unknown_keys)
    std::fprintf(stderr, "hybridlm: warning: config.json key '%s' is not used by hybridlm\n", key.c_str());
  for (const std::string& name : model.unused_tensors())
    std::fprintf(stderr, "hybridlm: warning: tensor '%s' is not used by hybridlm\n", name.c_str());

  std::vector<std::pair<std::string, Tensor>> dumped;
  const auto wanted = [&](CapturePoint p) {
    return std::any_of(points.begin(), points.end(), [p](const CapturePointInfo* i) { return i->point == p; });
  };
  const Capture capture = [&](CapturePoint point, int layer, const Tensor& value) {
    if (!wanted(point)) return;
    const auto& info = capture_point_info(point);
    const std::string name = info.per_layer ? std::string(info.name) + "." + std::to_string(layer) : std::string(info.name);
    dumped.emplace_back(name, value.clone());
  };
  const bool all_logits = wanted(CapturePoint::Logits);
  const Tensor logits = forward_on(o.device, model, batch, {.all_logits = all_logits}, capture, wanted);

  // Next-token distribution of each sequence: the row of its last token.
  const int64_t V = model.config().vocab_size;
  std::vector<float> logprobs(static_cast<size_t>(V));
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    const int64_t row = all_logits ? batch.cu_seqlens[s + 1] - 1 : s;
    log_softmax_forward(logprobs.data(), logits.f32() + row * V, 1, V);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    const int k = static_cast<int>(std::min<int64_t>(o.top_k, V));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return logprobs[a] > logprobs[b]; });
    std::printf("sequence %lld (%lld tokens): top-%d next tokens\n", static_cast<long long>(s),
                static_cast<long long>(batch.cu_seqlens[s + 1] - batch.cu_seqlens[s]), k);
    for (int i = 0; i < k; ++i) std::printf("  id %-8d logprob %.6f\n", order[i], logprobs[order[i]]);
  }

  if (!o.dump.empty()) {
    const nlohmann::json settings = {{"model_dir", o.model_dir}, {"cu_seqlens", batch.cu_seqlens}, {"points", o.points}};
    safetensors_write(o.dump, dumped,
                      {{"generator", "hybridlm run"}, {"settings", settings.dump()}});
    std::printf("dumped %zu tensors to %s\n", dumped.size(), o.dump.c_str());
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, std::function<int()>& action) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Forward pass: top-k next tokens, optional dump of capture points");
  cmd->footer(
      "Capture points: attn_in, attn_delta, attn_out, mlp_delta (per layer, [T, hidden]), final_hidden, logits.\n"
      "Examples:\n"
      "  hybridlm run tests/golden/qwen3_tied --ids 1,2,3 --top-k 5\n"
      "  hybridlm run MODEL --ids 5,6,7 --ids 8,9 --dump out.safetensors --points attn_in,attn_out,logits\n"
      "  hybridlm run tests/golden/olmo_hybrid_tiny --ids 1,2,3 --device cuda   (builds with the CUDA backend)");
  cmd->add_option("model_dir", options->model_dir, "HF model directory (config.json + safetensors)")->required();
  cmd->add_option("--ids", options->ids, "Comma-separated token ids of one sequence; repeat for more sequences")
      ->required();
  cmd->add_option("--top-k", options->top_k, "How many next-token candidates to print per sequence")
      ->capture_default_str();
  cmd->add_option("--dump", options->dump, "Write capture points to this .safetensors file (atomic)");
  cmd->add_option("--points", options->points, "Comma-separated capture points to dump")->capture_default_str();
  cmd->add_option("--device", options->device,
                  "Where the forward runs: cpu, or cuda (GPU 0, fp32; needs a build with the CUDA backend)")
      ->capture_default_str();
  cmd->callback([options, &action] { action = [options] { return run_run(*options); }; });
}

}  // namespace hlm
