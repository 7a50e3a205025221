// `hybridlm eval --model DIR [--teacher DIR] --data CORPUS [--tokenizer bytes] --split valid|test [--out FILE]
//  [--device cpu|cuda]`:
// per-language held-out cross-entropy (and, with a teacher, forward KL at tau = 1 and the teacher's CE), in nats per
// token (train/eval.h). The held-out rows are those of training (data/data_stream.h): pass the run's --seq-len,
// --held-out-docs and --eval-tokens to score the same tokens. --out writes the JSON that `hybridlm compare` reads.
// --device cuda runs the passes on GPU 0 (train/cuda/cuda_eval.h, the path of validation in `--device cuda` runs;
// builds with the CUDA backend only); the JSON records the device in its meta.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/device_option.h"
#include "cli/subcommands.h"
#include "data/data_stream.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "train/eval.h"
#ifdef HLM_WITH_CUDA
#include "backend/cuda/device_query.h"
#include "train/cuda/cuda_eval.h"
#endif

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct EvalOptions {
  std::string model, teacher, data, tokenizer = "bytes", split, out, device = "cpu";
  int64_t seq_len = 1024, held_out_docs = 1000, eval_tokens = 16 * 1024, rows = 8;
};

// The held-out evaluation on the chosen device (the same passes of `rows` rows either way).
EvalResult evaluate_on(const std::string& device, Model& model, Model* teacher, const HeldOutSet& set, int64_t rows) {
  if (device == "cpu") return evaluate(model, teacher, set, rows);
#ifdef HLM_WITH_CUDA
  return cuda_evaluate(model, teacher, set, rows);  // input error when no usable GPU
#else
  (void)model, (void)teacher, (void)set, (void)rows;
  throw_input_error("--device cuda: this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
#endif
}

int run_eval(const EvalOptions& o) {
  check_device_option(o.device);  // before anything is loaded
  HLM_CHECK_INPUT(o.seq_len >= 2, "--seq-len must be at least 2");
  HLM_CHECK_INPUT(o.held_out_docs >= 1 && o.rows >= 1, "--held-out-docs and --rows must be positive");
  HLM_CHECK_INPUT(o.eval_tokens >= o.seq_len, "--eval-tokens must hold at least one row of --seq-len tokens");
  check_model_dir(o.model);
  if (!o.teacher.empty()) check_model_dir(o.teacher);
  HLM_CHECK_INPUT(fs::is_directory(o.data), o.data, ": not a corpus directory (does not exist)");
  if (!o.out.empty()) {
    const fs::path parent = fs::absolute(o.out).parent_path();
    HLM_CHECK_INPUT(fs::is_directory(parent), "--out: directory ", parent.string(), " does not exist");
    HLM_CHECK_INPUT(!fs::is_directory(o.out), "--out ", o.out, " is a directory (expected a file name)");
    HLM_CHECK_INPUT(::access(parent.c_str(), W_OK | X_OK) == 0, "--out: cannot write into ", parent.string());
  }
  const Corpus corpus = Corpus::open(o.data);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  Model model = Model::load(o.model);
  std::optional<Model> teacher;
  if (!o.teacher.empty()) teacher.emplace(Model::load(o.teacher));
  HLM_CHECK_INPUT(!teacher || teacher->config().vocab_size == model.config().vocab_size, "--teacher ", o.teacher,
                  ": its vocabulary (", teacher ? teacher->config().vocab_size : 0, ") differs from the model's (",
                  model.config().vocab_size, ")");
  HLM_CHECK_INPUT(tokenizer->vocab_size() <= model.config().vocab_size, "tokenizer ", tokenizer->name(), " has ",
                  tokenizer->vocab_size(), " tokens but the model's vocabulary is ", model.config().vocab_size);

  DataConfig data;
  data.seq_len = o.seq_len;
  data.held_out_docs = o.held_out_docs;
  data.eval_tokens_per_language = o.eval_tokens;
  const Split split = o.split == "test" ? Split::Test : Split::Valid;
  const HeldOutSet set = held_out_set(corpus, *tokenizer, data, split);
  held_out_check(set, split, data);  // every language needs a full row, before the first pass
  EvalResult result = evaluate_on(o.device, model, teacher ? &*teacher : nullptr, set, o.rows);
  for (LanguageEval& l : result.languages) l.tier = corpus.language(l.code).tier;

  std::printf("model        %s\n", o.model.c_str());
  if (teacher) std::printf("teacher      %s\n", o.teacher.c_str());
  std::printf("data         %s, split %s: %lld held-out documents per language, rows of %lld tokens\n",
              o.data.c_str(), o.split.c_str(), static_cast<long long>(o.held_out_docs),
              static_cast<long long>(o.seq_len));
  std::printf("device       %s\n", o.device.c_str());
  std::printf("unit         nats/token%s\n", teacher ? " (kl: D_KL(teacher || model), tau 1)" : "");
  std::printf("%s", eval_result_table(result).c_str());
  if (!o.out.empty()) {
    const nlohmann::json meta = {{"split", o.split},
                                 {"model", o.model},
                                 {"teacher", teacher ? nlohmann::json(o.teacher) : nlohmann::json(nullptr)},
                                 {"data", o.data},
                                 {"tokenizer", o.tokenizer},
                                 {"seq_len", o.seq_len},
                                 {"held_out_docs", o.held_out_docs},
                                 {"eval_tokens", o.eval_tokens},
                                 {"device", o.device}};
    file_write_atomic(o.out, eval_result_to_json(result, meta).dump(2) + "\n");
    std::printf("wrote        %s\n", o.out.c_str());
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "Per-language held-out cross-entropy and KL to a teacher (nats/token)");
  cmd->footer(
      "CE averages over the tokens that have a next-token target; KL (tau = 1) over every token of the language;\n"
      "the mean line averages the languages. Use the run's --seq-len/--held-out-docs/--eval-tokens to score the\n"
      "same held-out tokens as training did. --device cuda runs the forward and the LM-head losses on GPU 0 (fp32;\n"
      "CE within ~1e-6 and KL within ~1e-5 relative of the CPU's, docs/training.md); same table and JSON form.\n"
      "Examples:\n"
      "  hybridlm eval --model runs/rp/model --teacher runs/teacher/model --data corpus/ --split test --seq-len 256\n"
      "  hybridlm eval --model runs/rp/checkpoint-00000500 --data corpus/ --split valid --seq-len 256 \\\n"
      "      --out valid_500.json\n"
      "  hybridlm eval --model runs/rp/model --teacher runs/teacher/model --data corpus/ --split test --seq-len 256 \\\n"
      "      --rows 32 --device cuda   (builds with the CUDA backend)");
  cmd->add_option("--model", o->model, "Model directory (a run's model/ or checkpoint-*/ work too)")->required();
  cmd->add_option("--teacher", o->teacher, "Teacher model directory: adds KL and the teacher's CE");
  cmd->add_option("--data", o->data, "Corpus directory")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer: \"bytes\"")->capture_default_str();
  cmd->add_option("--split", o->split, "Held-out split")->required()->check(CLI::IsMember({"valid", "test"}));
  cmd->add_option("--seq-len", o->seq_len, "Tokens per packed row")->capture_default_str();
  cmd->add_option("--held-out-docs", o->held_out_docs, "Validation and test documents per language")
      ->capture_default_str();
  cmd->add_option("--eval-tokens", o->eval_tokens, "Validation tokens per language (test: twice)")
      ->capture_default_str();
  cmd->add_option("--rows", o->rows, "Rows per forward pass (memory)")->capture_default_str();
  cmd->add_option("--out", o->out, "Write the results as JSON (the form `hybridlm compare` reads)");
  cmd->add_option("--device", o->device,
                  "Where the evaluation runs: cpu, or cuda (GPU 0, fp32; needs a build with the CUDA backend)")
      ->capture_default_str();
  cmd->callback([o, &action] { action = [o] { return run_eval(*o); }; });
}

}  // namespace hlm
