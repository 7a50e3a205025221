// `hybridlm niah gen|score` and the run mode `hybridlm niah --model DIR ...` (issue #21; evals/niah/, docs/niah.md).
//   gen:   NIAH prompts for one language, task and length from the corpus's held-out text, sized with the
//          evaluated model's tokenizer; one JSON object per line with --json.
//   score: OneRULER's scoring of one response: prints "correct" or "wrong".
//   run mode (--model ...): greedy generation needs the inference engine (src/infer); until it is wired this mode
//          stops with an input error saying so.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/subcommands.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "evals/niah/niah_generate.h"
#include "evals/niah/niah_score.h"

namespace hlm {

void add_niah_command(CLI::App& app, std::function<int()>& action);  // registered in subcommand_table.cpp

namespace {

namespace fs = std::filesystem;

struct NiahGenOptions {
  std::string tokenizer, lang, task, length, corpus = "data/corpus/demo", split = "both";
  int64_t count = 1, first = 0, held_out_docs = 1000;
  uint64_t seed = 0;
  bool json = false;
};

struct NiahScoreOptions {
  std::string task, lang, response, response_file;
  std::vector<std::string> expected;
};

struct NiahRunOptions {
  std::vector<std::string> models, langs, tasks, lengths;
  std::string tokenizer, out, device = "cpu";
  int64_t n = 0;
};

int run_gen(const NiahGenOptions& o) {
  const NiahLanguage& lang = niah_language(o.lang);
  const NiahTaskSpec& task = niah_task_from_name(o.task);
  const int64_t length = niah_parse_length(o.length, "--length");
  HLM_CHECK_INPUT(o.count >= 1, "--count must be positive (got ", o.count, ")");
  HLM_CHECK_INPUT(o.first >= 0, "--first must be non-negative (got ", o.first, ")");
  HLM_CHECK_INPUT(fs::is_regular_file(fs::path(o.corpus) / "corpus.json"), "--corpus ", o.corpus,
                  ": not a corpus directory (no corpus.json; `make corpus-demo` builds data/corpus/demo)");
  const Corpus corpus = Corpus::open(o.corpus);
  const std::vector<std::string> sentences =
      niah_held_out_sentences(corpus, o.lang, o.held_out_docs, niah_split_from_name(o.split));
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  std::fprintf(stderr,
               "niah gen: corpus %s, %s (%s): %zu held-out sentences (split %s, --held-out-docs %lld); tokenizer %s; "
               "task %s; haystack target %lld tokens; samples %lld..%lld; seed %llu\n",
               o.corpus.c_str(), o.lang.c_str(), std::string(lang.name).c_str(), sentences.size(), o.split.c_str(),
               static_cast<long long>(o.held_out_docs), tokenizer->name().c_str(), std::string(task.name).c_str(),
               static_cast<long long>(length), static_cast<long long>(o.first),
               static_cast<long long>(o.first + o.count - 1), static_cast<unsigned long long>(o.seed));
  NiahGenerator gen(lang, sentences, *tokenizer);
  for (int64_t i = o.first; i < o.first + o.count; ++i) {
    const NiahSample s = gen.generate(task, length, o.seed, i);
    if (o.json) {
      std::cout << niah_sample_json(s).dump() << "\n";
      continue;
    }
    const nlohmann::json j = niah_sample_json(s);
    std::cout << "### sample " << s.index << ": " << s.lang << " " << s.task << ", haystack " << s.haystack_tokens
              << " tokens (target " << s.length << "), prompt " << s.prompt_tokens << " tokens\n"
              << "### keys " << j["keys"].dump() << ", values " << j["values"].dump() << ", query "
              << j["query"].dump() << ", expected " << j["expected"].dump() << "\n"
              << s.prompt << "\n";
  }
  std::cout.flush();
  return 0;
}

int run_score(const NiahScoreOptions& o) {
  const NiahLanguage& lang = niah_language(o.lang);
  const NiahTaskSpec& task = niah_task_from_name(o.task);
  HLM_CHECK_INPUT(o.response.empty() || o.response_file.empty(), "give --response or --response-file, not both");
  std::string response = o.response;
  if (!o.response_file.empty()) {
    std::ifstream in(o.response_file, std::ios::binary);
    HLM_CHECK_INPUT(in.good(), "--response-file ", o.response_file, ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    response = ss.str();
  }
  if (task.task != NiahTask::None)
    HLM_CHECK_INPUT(!o.expected.empty(), "--expected: the ", task.name,
                    " task needs the gold values (comma-separated, e.g. --expected 1234567,7654321)");
  std::printf("%s\n", niah_score(task.task, o.expected, response, niah_none_words(lang)) ? "correct" : "wrong");
  return 0;
}

int run_models(const NiahRunOptions& o) {
  HLM_CHECK_INPUT(!o.models.empty(), "hybridlm niah: give a subcommand (gen, score) or --model DIR for the run mode "
                                     "(see hybridlm niah --help)");
  throw_input_error("hybridlm niah --model: running models needs hybridlm generate (src/infer), not yet wired; "
                    "meanwhile `hybridlm niah gen` writes the prompts and `hybridlm niah score` scores responses");
}

}  // namespace

void add_niah_command(CLI::App& app, std::function<int()>& action) {
  CLI::App* cmd = app.add_subcommand("niah", "Multilingual needle-in-a-haystack (OneRULER's five tasks)");
  cmd->require_subcommand(0, 1);
  cmd->footer(
      "Tasks: single, multikey, multivalue, multiquery, none (../shared/docs/evals.md §2; docs/niah.md).\n"
      "Languages with templates: " + niah_language_codes() + ".\n"
      "Examples:\n"
      "  hybridlm niah gen --tokenizer bytes --lang eng_Latn --task single --length 1k --count 3 --seed 0 --json\n"
      "  hybridlm niah gen --tokenizer data/tokenizers/qwen3/tokenizer.json --lang cmn_Hani --task multiquery \\\n"
      "      --length 8k --count 50 --corpus data/corpus/full --json > niah_cmn_multiquery_8k.jsonl\n"
      "  hybridlm niah score --task multivalue --lang eng_Latn --expected 1234567,2345678,3456789,4567890 \\\n"
      "      --response '<Answer> 1234567, 2345678, 3456789, 4567890 </Answer>'\n"
      "Run mode (needs the inference engine, not yet wired):\n"
      "  hybridlm niah --model DIR --tokenizer T --langs eng_Latn,rus_Cyrl --tasks single,none --lengths 1k,4k \\\n"
      "      --n 50 --out out/niah");

  auto run = std::make_shared<NiahRunOptions>();
  cmd->add_option("--model", run->models, "Run mode: model directory (repeatable)");
  cmd->add_option("--tokenizer", run->tokenizer, "Run mode: tokenizer ('bytes' or a tokenizer.json)");
  cmd->add_option("--langs", run->langs, "Run mode: languages (comma-separated)")->delimiter(',');
  cmd->add_option("--tasks", run->tasks, "Run mode: tasks (comma-separated)")->delimiter(',');
  cmd->add_option("--lengths", run->lengths, "Run mode: haystack lengths, e.g. 1k,4k,16k")->delimiter(',');
  cmd->add_option("--n", run->n, "Run mode: samples per (language, task, length)");
  cmd->add_option("--out", run->out, "Run mode: output folder");
  cmd->add_option("--device", run->device, "Run mode: cpu or cuda");

  auto gen = std::make_shared<NiahGenOptions>();
  CLI::App* gen_cmd = cmd->add_subcommand("gen", "Write NIAH prompts from a corpus language's held-out text");
  gen_cmd->footer(
      "The haystack is the language's held-out sentences (validation and/or test documents of the fixed split,\n"
      "never training text), sized to --length tokens of the given tokenizer (the haystack alone, as OneRULER;\n"
      "the prompt adds template, needles and question: see prompt_tokens). k = 1000. Sample i is the same at every\n"
      "length for a given seed (keys, values, depths, start sentence).\n"
      "Examples:\n"
      "  hybridlm niah gen --tokenizer bytes --lang eng_Latn --task single --length 1k --count 3 --json\n"
      "  hybridlm niah gen --tokenizer data/tokenizers/gemma3/tokenizer.json --lang hin_Deva --task none \\\n"
      "      --length 4000 --count 10 --seed 7 --corpus data/corpus/full --json");
  gen_cmd->add_option("--tokenizer", gen->tokenizer, "The evaluated model's tokenizer: 'bytes' or a tokenizer.json")
      ->required();
  gen_cmd->add_option("--lang", gen->lang, "Corpus language with templates, e.g. eng_Latn")->required();
  gen_cmd->add_option("--task", gen->task, "single, multikey, multivalue, multiquery or none")->required();
  gen_cmd->add_option("--length", gen->length, "Haystack tokens, e.g. 4000 or 4k")->required();
  gen_cmd->add_option("--count", gen->count, "Samples to write (default 1)");
  gen_cmd->add_option("--first", gen->first, "Index of the first sample (default 0)");
  gen_cmd->add_option("--seed", gen->seed, "Seed of the draws (default 0)");
  gen_cmd->add_option("--corpus", gen->corpus, "Corpus directory (default data/corpus/demo)");
  gen_cmd->add_option("--held-out-docs", gen->held_out_docs,
                      "Validation (and test) documents per language, as in training (default 1000)");
  gen_cmd->add_option("--split", gen->split, "Held-out documents to use: valid, test or both (default both)");
  gen_cmd->add_flag("--json", gen->json, "One JSON object per line instead of readable prompts");
  gen_cmd->callback([gen, &action] { action = [gen] { return run_gen(*gen); }; });

  auto score = std::make_shared<NiahScoreOptions>();
  CLI::App* score_cmd = cmd->add_subcommand("score", "Score one response as OneRULER does: prints correct or wrong");
  score_cmd->footer(
      "Number tasks: NFKC; any none word in the response -> wrong; digit runs of 2+ digits, de-duplicated; correct\n"
      "iff as many as the gold values and the same set. none: correct iff the cleaned response holds a none word.\n"
      "Examples:\n"
      "  hybridlm niah score --task single --lang eng_Latn --expected 1234567 --response 'It is 1234567.'\n"
      "  hybridlm niah score --task none --lang rus_Cyrl --response-file reply.txt");
  score_cmd->add_option("--task", score->task, "single, multikey, multivalue, multiquery or none")->required();
  score_cmd->add_option("--lang", score->lang, "Language of the prompt (its none words), e.g. eng_Latn")->required();
  score_cmd->add_option("--expected", score->expected, "Gold values, comma-separated (number tasks)")->delimiter(',');
  score_cmd->add_option("--response", score->response, "The model's response text");
  score_cmd->add_option("--response-file", score->response_file, "File holding the response (raw bytes)");
  score_cmd->callback([score, &action] { action = [score] { return run_score(*score); }; });

  cmd->callback([cmd, gen_cmd, score_cmd, run, &action] {
    if (gen_cmd->parsed() || score_cmd->parsed()) return;
    (void)cmd;
    action = [run] { return run_models(*run); };
  });
}

}  // namespace hlm
