// `hybridlm locality --model DIR [--model DIR2 ...] --tokenizer FILE|bytes --data SET [--k 1,4,16,64] --out DIR`:
// for each full-attention layer, the share of attention probability on the most recent k tokens, per language
// (analysis/locality.h); locality.csv and one SVG per k with every model in it.
#include <cstdio>
#include <memory>

#include "analysis/locality.h"
#include "analysis/sentence_states.h"
#include "cli/subcommands.h"
#include "models/model.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct LocalityCliOptions {
  std::vector<std::string> models;
  std::string tokenizer, data, windows = "1,4,16,64", langs, out;
  int64_t max_units = 0;
};

int run_locality(const LocalityCliOptions& o) {
  for (const std::string& m : o.models) check_model_dir(m);
  LocalitySettings s;
  s.windows.clear();
  for (const std::string& k : split_list(o.windows, "--k")) {
    try {
      size_t used = 0;
      s.windows.push_back(std::stoll(k, &used));
      HLM_CHECK_INPUT(used == k.size(), "");
    } catch (const std::exception&) {
      throw_input_error("--k: expected positive integers, got '", k, "'");
    }
  }
  if (!o.langs.empty()) s.langs = split_list(o.langs, "--langs");
  s.max_units = o.max_units;
  const ParallelSet set = parallel_set_load(o.data);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  std::vector<LocalityResult> results;
  for (const std::string& dir : o.models) {
    Model model = Model::load(dir);
    std::printf("locality: %s (%lld layers)\n", dir.c_str(), static_cast<long long>(model.config().num_hidden_layers));
    std::fflush(stdout);
    results.push_back(attention_locality(model, dir, *tokenizer, set, s, [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }));
  }
  locality_write_outputs(o.out, results);
  for (const LocalityResult& r : results)
    for (size_t li = 0; li < r.layers.size(); ++li) {
      std::printf("  %s layer %d:", r.model.c_str(), r.layers[li]);
      for (size_t w = 0; w < r.windows.size(); ++w) {
        double mean = 0.0;
        for (size_t l = 0; l < r.langs.size(); ++l) mean += r.share[li][l][w] / static_cast<double>(r.langs.size());
        std::printf("  k=%lld %.3f", static_cast<long long>(r.windows[w]), mean);
      }
      std::printf("\n");
    }
  std::printf("wrote %s/locality.csv and %zu SVG plots\n", o.out.c_str(), s.windows.size());
  return 0;
}

}  // namespace

void add_locality_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<LocalityCliOptions>();
  CLI::App* cmd = app.add_subcommand("locality", "Share of attention mass on the most recent k tokens, per layer");
  cmd->footer(
      "For every full-attention layer and language: the attention probability on the last k tokens (the token\n"
      "itself included), averaged over query heads and query positions (queries with fewer than k visible tokens\n"
      "count as 1). --data is a parallel set (JSONL, optionally .zst); each sentence is one sequence.\n"
      "Outputs in --out: locality.csv (model,layer,lang,k,share), locality_k<k>.svg (share vs relative depth, one\n"
      "line per model, mean over languages).\n"
      "Examples:\n"
      "  hybridlm locality --model tests/golden/olmo_hybrid_tiny --tokenizer bytes --data flores.jsonl --out out/loc\n"
      "  hybridlm locality --model runs/teacher/model --model runs/student/model --tokenizer tok/tokenizer.json \\\n"
      "      --data flores.jsonl.zst --k 1,8,32 --max-units 200 --out out/loc");
  cmd->add_option("--model", o->models, "Model directory (repeat for several models in one plot)")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "\"bytes\" or a tokenizer.json file")->required();
  cmd->add_option("--data", o->data, "Parallel set (JSONL or JSONL.zst)")->required();
  cmd->add_option("--k", o->windows, "Windows (most recent tokens), comma-separated")->capture_default_str();
  cmd->add_option("--langs", o->langs, "Languages, comma-separated (default: every language of the set)");
  cmd->add_option("--max-units", o->max_units, "Sentences per language (first in file order; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Output directory (created)")->required();
  cmd->callback([o, &action] { action = [o] { return run_locality(*o); }; });
}

}  // namespace hlm
