// `hybridlm align --model DIR --tokenizer FILE|bytes --parallel SET --langs L1,L2 --points P1,P2 --out DIR`:
// SoftCKA per layer and capture point between English and each language of a parallel set (analysis/align.h),
// plus the mean over languages; writes softcka.csv, settings.json and one SVG line plot per point. --device cuda runs
// the model forward (analysis/cuda/cuda_states_forward.h) and the SoftCKA kernel sums on GPU 0.
#include <cstdio>
#include <memory>

#include "analysis/align.h"
#include "analysis/sentence_states.h"
#include "cli/subcommands.h"
#include "models/model.h"
#ifdef HLM_WITH_CUDA
#include "analysis/cuda/cuda_states_forward.h"
#include "analysis/cuda/softcka_cuda_engine.h"
#endif

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct AlignCliOptions {
  std::string model, tokenizer, parallel, langs, points = "attn_in,attn_out,attn_delta,mlp_delta", kernel = "rbf",
                                                  sigma = "median", anchor = "eng_Latn", device = "cpu", out;
  int64_t max_pairs = 0, sigma_sample = 2048;
  bool keep_special = false;
};

// The engine for the SoftCKA kernel sums.
std::unique_ptr<KernelNormEngine> make_engine(const std::string& device) {
  if (device == "cpu") return make_cpu_kernel_norm_engine();
#ifdef HLM_WITH_CUDA
  return make_cuda_kernel_norm_engine();  // input error when no usable GPU
#else
  throw_input_error("--device cuda: this hybridlm was built without the CUDA backend (make build CUDA=ON)");
#endif
}

// The model forward behind the token states: empty (the CPU's Model::forward) or the GPU's.
StatesForward make_states_forward(const std::string& device, const Model& model) {
  if (device == "cpu") return {};
#ifdef HLM_WITH_CUDA
  return make_cuda_states_forward(model);  // input error when no usable GPU
#else
  (void)model;
  throw_input_error("--device cuda: this hybridlm was built without the CUDA backend (make build CUDA=ON)");
#endif
}

int run_align(const AlignCliOptions& o) {
  check_model_dir(o.model);
  const std::unique_ptr<KernelNormEngine> engine = make_engine(o.device);
  AlignSettings s;
  s.anchor = o.anchor;
  s.langs = split_list(o.langs, "--langs");
  s.points = parse_layer_points(o.points);
  s.kernel = o.kernel == "linear" ? CkaKernel::Linear : CkaKernel::Rbf;
  if (o.sigma != "median") {
    try {
      size_t used = 0;
      s.sigma = std::stod(o.sigma, &used);
      HLM_CHECK_INPUT(used == o.sigma.size(), "");
    } catch (const std::exception&) {
      throw_input_error("--sigma: expected \"median\" or a positive number, got '", o.sigma, "'");
    }
    HLM_CHECK_INPUT(*s.sigma > 0, "--sigma must be positive, got ", o.sigma);
  }
  s.max_pairs = o.max_pairs;
  s.keep_special = o.keep_special;
  s.sigma_sample_tokens = o.sigma_sample;

  const ParallelSet set = parallel_set_load(o.parallel);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  Model model = Model::load(o.model);
  const StatesForward forward = make_states_forward(o.device, model);
  std::printf("align: %s (%lld layers), %zu languages vs %s, %zu points, kernel %s, sigma %s, forward and kernel "
              "sums on %s\n",
              o.model.c_str(), static_cast<long long>(model.config().num_hidden_layers), s.langs.size(),
              s.anchor.c_str(), s.points.size(), o.kernel.c_str(), o.sigma.c_str(), engine->name().c_str());
  std::fflush(stdout);
  const AlignResult r = align_softcka(
      model, *tokenizer, set, s, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); },
      engine.get(), forward, o.device);
  align_write_outputs(o.out, r, model.config(),
                      {{"model", o.model}, {"tokenizer", tokenizer->name()}, {"parallel", o.parallel}});
  for (size_t l = 0; l < s.langs.size(); ++l)
    std::printf("  %-10s %lld pairs (%lld skipped), %lld / %lld tokens (%s / %s)\n", s.langs[l].c_str(),
                static_cast<long long>(r.pairs[l]), static_cast<long long>(r.skipped_pairs[l]),
                static_cast<long long>(r.anchor_tokens[l]), static_cast<long long>(r.lang_tokens[l]),
                s.anchor.c_str(), s.langs[l].c_str());
  std::printf("wrote %s/softcka.csv, settings.json and %zu SVG plots\n", o.out.c_str(), s.points.size());
  return 0;
}

}  // namespace

void add_align_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<AlignCliOptions>();
  CLI::App* cmd = app.add_subcommand("align", "SoftCKA per layer between English and other languages (parallel set)");
  cmd->footer(
      "SoftCKA (seed Eq. 1, App. D): per sentence pair, kernels K11, K22, K12 of the token states with one shared\n"
      "bandwidth, double centring, squared Frobenius norms summed over the pairs before normalising. The parallel\n"
      "set is JSONL (optionally .zst): {\"id\": ..., \"eng_Latn\": ..., \"fra_Latn\": ...} per line.\n"
      "Outputs in --out: softcka.csv (layer,point,lang,softcka; lang \"mean\" = average over languages),\n"
      "settings.json (sigma per point and layer, counts, device, forward_device), softcka_<point>.svg (dotted:\n"
      "full-attention layers). --device cuda runs the model forward on the GPU (fp32, CudaModel; only the wanted\n"
      "points come back) and computes the kernel sums there in fp64; the CSV matches --device cpu within ~1e-5\n"
      "(the forward's summation order, docs/analysis.md).\n"
      "Examples:\n"
      "  hybridlm align --model tests/golden/olmo_hybrid_tiny --tokenizer bytes --parallel flores.jsonl \\\n"
      "      --langs fra_Latn,cmn_Hani --points attn_in,attn_out --out out/align\n"
      "  hybridlm align --model runs/student/model --tokenizer tok/tokenizer.json --parallel flores.jsonl.zst \\\n"
      "      --langs fra_Latn --points attn_delta --kernel linear --max-pairs 200 --out out/align_linear\n"
      "  hybridlm align --model runs/student/model --tokenizer tok/tokenizer.json --parallel flores.jsonl.zst \\\n"
      "      --langs fra_Latn,deu_Latn --points attn_in --device cuda --out out/align_gpu");
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "\"bytes\" or a tokenizer.json file")->required();
  cmd->add_option("--parallel", o->parallel, "Parallel set (JSONL or JSONL.zst)")->required();
  cmd->add_option("--langs", o->langs, "Languages to compare with English, comma-separated")->required();
  cmd->add_option("--points", o->points, "Per-layer capture points, comma-separated")->capture_default_str();
  cmd->add_option("--kernel", o->kernel, "Kernel")->check(CLI::IsMember({"rbf", "linear"}))->capture_default_str();
  cmd->add_option("--sigma", o->sigma, "RBF bandwidth: \"median\" (heuristic per point and layer) or a value")
      ->capture_default_str();
  cmd->add_option("--sigma-sample", o->sigma_sample, "Tokens pooled for the median bandwidth")->capture_default_str();
  cmd->add_option("--max-pairs", o->max_pairs, "Pairs per language (first in file order; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--anchor", o->anchor, "The reference language")->capture_default_str();
  cmd->add_flag("--keep-special", o->keep_special, "Keep special tokens (dropped by default)");
  cmd->add_option("--device", o->device,
                  "Where the model forward and the SoftCKA kernel sums run; cuda needs a CUDA build and a GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Output directory (created)")->required();
  cmd->callback([o, &action] { action = [o] { return run_align(*o); }; });
}

}  // namespace hlm
