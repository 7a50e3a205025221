// A scaling ladder (`hybridlm scaling ladder`): every architecture × model size × tokens-per-parameter ratio is
// pretrained from scratch with one recipe (train/trainer.h), each run's final validation loss is appended to
// runs.csv (the `scaling fit` input), then the fits run (scaling_analysis.h, scaling_report.h).
//
// Architectures (Olmo Hybrid's three; the GDN layers take the attention's head count and head dim, as `convert`):
//   transformer   qwen3, every layer softmax attention
//   hybrid        qwen3_hybrid, GDN 3:1: layer i is full attention when i % 4 == 3, Gated DeltaNet otherwise
//   gdn           qwen3_hybrid, every layer Gated DeltaNet
// All untied (separate LM head), so the three differ only in their token mixers. N = non-embedding parameters
// (every tensor but model.embed_tokens and lm_head), D = tokens trained: ⌈ratio·N / (B·n)⌉ steps × B·n planned; runs.csv
// records the tokens of the final validation record (fewer when the corpus ran out, with a warning).
//
// Config (JSON; keys other than these are errors):
//   {"format": "hybridlm-scaling-ladder", "data": CORPUS_DIR, "tokenizer": "bytes" | tokenizer.json,
//    "architectures": ["transformer", "hybrid", "gdn"],
//    "sizes": [{"name": "s1", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
//               "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 192}, ...],     (≥ 1)
//    "tokens_per_param": [5, 10, 20],                                                          (≥ 1, > 0)
//    "neg_eigval": true, "rope_theta": 10000,
//    "train": {TrainConfig keys of train_config_to_json, plus "lr" for both groups; not data, tokenizer,
//              model_config, out, tokens, resume, job},
//    "fit": {"weights", "grid", "bounds", "bootstrap", "seed", "flops", "savings_n", "target_loss", "reference",
//            "fixed_exponents"}}                                                                  (optional)
// Layout under --out: ladder.json (the resolved config), models/<arch>-<size>.json, runs/<run>/ (the trainer's
// run directory), runs.csv (arch,N,D,loss,run,size,tokens_per_param,steps,seconds), fit/ (scaling_report.h).
// Resumable: a ladder directory's ladder.json must describe the same recipe (data, tokenizer, GDN/RoPE settings,
// trainer settings other than logging/checkpoint/validation cadence, and the shape of every size name already
// there; an input error lists the differences); architectures, sizes and ratios may be added. A run already in
// runs.csv is skipped; a run directory with a checkpoint resumes from it; a run directory
// without one (a crash before the first checkpoint) is started again; a finished run (test.json) missing from
// runs.csv is appended from its metrics.jsonl.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "models/hf_config.h"
#include "scaling/scaling_analysis.h"
#include "train/trainer.h"

namespace hlm {

class TrainDevice;

struct LadderSize {
  std::string name;
  int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0,
          intermediate_size = 0;
};

struct LadderConfig {
  std::string data, tokenizer = "bytes";
  std::vector<std::string> architectures = {"transformer", "hybrid", "gdn"};
  std::vector<LadderSize> sizes;
  std::vector<double> tokens_per_param;
  bool neg_eigval = true;
  double rope_theta = 10000.0;
  TrainConfig train;      // the recipe (job pretrain); data, tokenizer, out, tokens, model_config set per run
  ScalingOptions fit;
  nlohmann::json source;  // the config as read (saved beside the outputs with the resolved train recipe)
};

// Parses and validates (input errors naming `source` and the key).
LadderConfig ladder_config_from_json(const nlohmann::json& json, const std::string& source);
LadderConfig ladder_config_load(const std::filesystem::path& path);
nlohmann::json ladder_config_to_json(const LadderConfig& config);

// The model config of one architecture at one size (vocab from the tokenizer; max positions = the recipe's seq_len).
ModelConfig ladder_model_config(const LadderConfig& config, const std::string& arch, const LadderSize& size,
                                int64_t vocab_size);
int64_t non_embedding_parameters(const ModelConfig& config);

struct LadderRun {
  std::string id;  // "<arch>-<size>-tpp<ratio>"
  std::string arch;
  LadderSize size;
  double tokens_per_param = 0;
  int64_t N = 0;       // non-embedding parameters
  int64_t tokens = 0;  // D, a whole number of steps
  int64_t steps = 0;
};
// Every run of the ladder in order (architecture, then size, then ratio).
std::vector<LadderRun> ladder_plan(const LadderConfig& config, int64_t vocab_size);

// What the corpus holds for the ladder's recipe, without training: per language, the tokens of its training
// documents (those outside the held-out split of train.held_out_docs, under the ladder's tokenizer) and its mixture
// share (train.anchor_share, data_mixture.h). A run of D tokens draws quota_l(D) ≈ share_l·D from each language
// and never repeats a document; it gets all D tokens when every quota fits the language's training tokens, and
// stops early (the warning of ladder_run) otherwise.
struct LadderCorpusLanguage {
  std::string code;
  double share = 0;
  int64_t train_tokens = 0;
};
struct LadderCorpusCoverage {
  std::vector<CorpusLanguage> corpus_languages;   // as corpus.json lists them (for the quotas)
  std::vector<LadderCorpusLanguage> languages;    // same order
  int64_t train_tokens = 0;   // all languages
  int64_t max_tokens = 0;     // floor of min over languages of train_tokens / share: every D up to it is covered
                              // (the quotas' rounding may let a D a token or two larger fit too)
  std::string limiting;       // the language that sets max_tokens
};
// Reads and tokenizes the whole corpus once (input errors as Corpus::open).
LadderCorpusCoverage ladder_corpus_coverage(const LadderConfig& config);
// Tokens of a D-token run that its languages cannot supply: Σ_l max(0, quota_l(D) − train_tokens_l); 0 = covered.
// (A language may overshoot its quota by less than one document, so a run short by this much may still get a few
// more tokens; it does not get D.)
int64_t ladder_corpus_shortfall(const LadderCorpusCoverage& coverage, const LadderConfig& config, int64_t tokens);

struct LadderSummary {
  int trained = 0, skipped = 0, total = 0;
  std::filesystem::path runs_csv, fit_dir;
};

// Trains what is missing, then fits. `device` is the TrainDevice for train.device "cuda" (nullptr for cpu).
// `log` receives progress lines.
LadderSummary ladder_run(const LadderConfig& config, const std::filesystem::path& out, TrainDevice* device,
                         const std::function<void(const std::string&)>& log);

}  // namespace hlm
