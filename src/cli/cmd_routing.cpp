// `hybridlm routing --model DIR --tokenizer T --parallel SET --langs L1,L2 --out DIR`: per routed-expert layer, the
// Jensen-Shannon divergence between the mean-pooled router distributions of parallel sentences, English against each
// language (analysis/routing.h; the seed's App. G). Writes routing.csv, settings.json and two SVG line plots.
#include <cstdio>
#include <memory>

#include "analysis/routing.h"
#include "analysis/sentence_states.h"
#include "cli/number_checks.h"
#include "cli/subcommands.h"
#include "models/model.h"

namespace hlm {
namespace {

struct RoutingCliOptions {
  std::string model, tokenizer, parallel, langs, anchor = "eng_Latn", pool = "topk", out;
  int64_t max_pairs = 0;
  bool keep_special = false;
};

int run_routing(const RoutingCliOptions& o) {
  check_model_dir(o.model);
  RoutingSettings s;
  s.anchor = o.anchor;
  s.langs = split_list(o.langs, "--langs");
  s.pool = o.pool == "softmax" ? RoutingPool::Softmax : RoutingPool::TopK;
  s.max_pairs = o.max_pairs;
  s.keep_special = o.keep_special;
  const ParallelSet set = parallel_set_load(o.parallel);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  Model model = Model::load(o.model);
  HLM_CHECK_INPUT(model.config().has_moe_layers(), "--model ", o.model, ": model_type ", model.config().model_type,
                  " has no routed-expert (MoE) layer to analyse");
  std::printf("routing: %s (%lld layers, %lld experts, top-%lld), %zu languages vs %s, pool %s, max pairs %lld\n",
              o.model.c_str(), static_cast<long long>(model.config().num_hidden_layers),
              static_cast<long long>(model.config().moe->num_experts),
              static_cast<long long>(model.config().moe->num_experts_per_tok), s.langs.size(), s.anchor.c_str(),
              o.pool.c_str(), static_cast<long long>(s.max_pairs));
  std::fflush(stdout);
  const RoutingResult r = routing_divergence(model, *tokenizer, set, s,
                                             [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  routing_write_outputs(o.out, r, model.config(),
                        {{"model", o.model}, {"tokenizer", tokenizer->name()}, {"parallel", o.parallel}});
  for (size_t l = 0; l < s.langs.size(); ++l)
    std::printf("  %-10s %lld pairs (%lld skipped)\n", s.langs[l].c_str(), static_cast<long long>(r.pairs[l]),
                static_cast<long long>(r.skipped_pairs[l]));
  std::printf("wrote %s/routing.csv, settings.json, routing_jsd.svg and routing_jsd_normalised.svg\n", o.out.c_str());
  return 0;
}

}  // namespace

void add_routing_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<RoutingCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("routing", "MoE routing divergence (JSD) per layer between English and other languages");
  cmd->footer(
      "For every routed-expert layer: each sentence's expert distribution is the mean over its tokens of the\n"
      "routing weights (--pool topk: the top-k weights as the model applies them; softmax: the full router\n"
      "softmax); the Jensen-Shannon divergence (natural log) between an English sentence's distribution and its\n"
      "translation's, and the entropy-normalised JSD, are averaged over the parallel pairs of each language.\n"
      "Outputs in --out: routing.csv (layer,lang,jsd,jsd_normalised,pairs; lang \"mean\" = average over languages),\n"
      "settings.json, routing_jsd.svg and routing_jsd_normalised.svg.\n"
      "Examples:\n"
      "  hybridlm routing --model tests/golden/qwen3_moe_tiny --tokenizer bytes --parallel flores.jsonl \\\n"
      "      --langs fra_Latn,cmn_Hani --out out/routing\n"
      "  hybridlm routing --model ~/models/Qwen3-30B-A3B --tokenizer ~/models/Qwen3-30B-A3B/tokenizer.json \\\n"
      "      --parallel flores.jsonl.zst --langs deu_Latn --pool softmax --max-pairs 200 --out out/routing_softmax");
  cmd->add_option("--model", o->model, "Model directory (a model with routed-expert layers)")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "\"bytes\" or a tokenizer.json file")->required();
  cmd->add_option("--parallel", o->parallel, "Parallel set (JSONL or JSONL.zst)")->required();
  cmd->add_option("--langs", o->langs, "Languages to compare with the anchor, comma-separated")->required();
  cmd->add_option("--anchor", o->anchor, "The reference language")->capture_default_str();
  cmd->add_option("--pool", o->pool, "Per-token weights averaged over a sentence")
      ->check(CLI::IsMember({"topk", "softmax"}))
      ->capture_default_str();
  cmd->add_option("--max-pairs", o->max_pairs, "Pairs per language (first in file order; 0 = all)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_flag("--keep-special", o->keep_special, "Keep special tokens (dropped by default)");
  cmd->add_option("--out", o->out, "Output directory (created)")->required();
  cmd->callback([o, &action] { action = [o] { return run_routing(*o); }; });
}

}  // namespace hlm
