// `hybridlm tokstats --tokenizer FILE|bytes [--tokenizer ...] --parallel SET [--langs a,b] [--out DIR]`: tokens per
// language relative to English on a parallel set (analysis/tokstats.h; the seed's §4). Prints the Markdown table;
// with --out also writes tokstats.csv, tokstats.md and tokstats.svg (grouped bars, dashed line at 1 = English).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "analysis/tokstats.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "models/safetensors.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct TokStatsOptions {
  std::vector<std::string> tokenizers;
  std::string parallel;
  std::vector<std::string> langs;
  std::string out;
};

int run_tokstats(const TokStatsOptions& o) {
  const ParallelSet set = parallel_set_load(o.parallel);
  std::vector<std::unique_ptr<Tokenizer>> owned;
  std::vector<TokStatsTokenizer> toks;
  for (const std::string& spec : o.tokenizers) {
    const std::string label = tokstats_label(spec);
    for (const TokStatsTokenizer& t : toks)
      HLM_CHECK_INPUT(t.label != label, "--tokenizer ", spec, ": label '", label,
                      "' is already used by another --tokenizer (put the files in differently named folders)");
    owned.push_back(tokenizer_load(spec));
    toks.push_back({label, owned.back().get()});
  }
  std::fprintf(stderr, "tokstats: %s, %zu units, %zu languages, %zu tokenizers\n", o.parallel.c_str(),
               set.units.size(), set.langs.size(), toks.size());
  const auto rows = tokstats_compute(set, toks, o.langs, [](const std::string& label) {
    std::fprintf(stderr, "tokstats: %s done\n", label.c_str());
  });
  const std::string markdown = tokstats_markdown(rows);
  std::printf("tokens(X) / tokens(eng_Latn) on %s (units shared with English, text NFC)\n\n%s", o.parallel.c_str(),
              markdown.c_str());
  if (!o.out.empty()) {
    const fs::path dir(o.out);
    fs::create_directories(dir);
    const std::string set_name = fs::path(o.parallel).stem().string();
    file_write_atomic(dir / "tokstats.csv", tokstats_csv(rows));
    file_write_atomic(dir / "tokstats.md", "# Tokens relative to English: " + set_name + "\n\nSet: `" + o.parallel +
                                               "`; ratio = tokens(X) / tokens(eng_Latn) summed over the units " +
                                               "holding both; text NFC.\n\n" + markdown);
    file_write_atomic(dir / "tokstats.svg", svg_bar_chart(tokstats_chart(rows, set_name)));
    std::printf("\nwrote %s/tokstats.{csv,md,svg}\n", o.out.c_str());
  }
  return 0;
}

}  // namespace

void add_tokstats_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<TokStatsOptions>();
  CLI::App* cmd = app.add_subcommand("tokstats", "Tokenization inflation: tokens per language relative to English");
  cmd->footer(
      "For each tokenizer and language X of the parallel set: tokens(X) / tokens(eng_Latn), both summed over the\n"
      "units that hold X and English (the seed's §4). Text is NFC-normalised before encoding; no special tokens.\n"
      "Examples:\n"
      "  hybridlm tokstats --tokenizer bytes --parallel data/parallel/udhr.jsonl\n"
      "  hybridlm tokstats --tokenizer data/tokenizers/qwen3/tokenizer.json \\\n"
      "      --tokenizer data/tokenizers/gemma3/tokenizer.json --parallel data/parallel/chromium_nway.jsonl \\\n"
      "      --out out/tokstats-chromium\n"
      "  hybridlm tokstats --tokenizer bytes --parallel data/parallel/udhr.jsonl --langs hin_Deva,mya_Mymr");
  cmd->add_option("--tokenizer", o->tokenizers, "Tokenizer: 'bytes' or a tokenizer.json (repeatable)")->required();
  cmd->add_option("--parallel", o->parallel, "Parallel set (JSONL, optionally .zst)")->required();
  cmd->add_option("--langs", o->langs, "Languages to report (default: every non-English language of the set)")
      ->delimiter(',');
  cmd->add_option("--out", o->out, "Folder for tokstats.csv, tokstats.md and tokstats.svg");
  cmd->callback([o, &action] { action = [o] { return run_tokstats(*o); }; });
}

}  // namespace hlm
