// `hybridlm niah gen|score` and the run mode `hybridlm niah --model DIR ...` (issue #21; evals/niah/, docs/niah.md).
//   gen:   NIAH prompts for one language, task and length from the corpus's held-out text, sized with the
//          evaluated model's tokenizer; one JSON object per line with --json.
//   score: OneRULER's scoring of one response: prints "correct" or "wrong".
//   run mode (--model DIR ...): greedy generation of up to 30 tokens per prompt on the CPU or CUDA inference
//          engine (evals/niah/niah_run.h) for every (model, language, task, length); niah.csv, niah.md (Table 2 layout),
//          niah_<lang>.svg (accuracy vs length), niah_items.jsonl and niah_config.json in --out.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/device_option.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

#include <cmath>
#include <map>
#include <set>

#include "analysis/svg_chart.h"
#include "evals/niah/niah_generate.h"
#include "evals/niah/niah_run.h"
#include "evals/niah/niah_score.h"
#include "infer/cpu_engine.h"
#include "infer/eos.h"
#include "models/model.h"
#include "models/safetensors.h"
#ifdef HLM_WITH_CUDA
#include "evals/niah/cuda/niah_cuda_backend.h"
#endif

namespace hlm {

void add_niah_command(CLI::App& app, std::function<int()>& action);  // registered in subcommand_table.cpp
CLI::App* add_niah_experiment_subcommand(CLI::App* niah, std::function<int()>& action);  // cmd_niah_experiment.cpp

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
  std::string tokenizer, out, device = "cpu", corpus = "data/corpus/demo", split = "both", max_memory;
  std::string precision;  // "", fp32 or bf16 ("": bf16 on cuda, fp32 on cpu, as `hybridlm generate`)
  int64_t n = 50, held_out_docs = 1000, max_batch = 4, max_new_tokens = 30, prefill_chunk = 512;
  std::string stop;
  uint64_t seed = 0;
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

// A model's label in the reports: its folder name ("runs/full/" -> "full").
std::string model_label(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// One SVG per language: mean accuracy over tasks (%) against the haystack length, a line per model.
void write_charts(const fs::path& dir, const std::vector<NiahCell>& cells) {
  std::map<std::string, std::map<std::string, std::map<int64_t, std::pair<double, int>>>> acc;  // lang, model, length
  for (const NiahCell& c : cells) {
    if (c.status != "ok") continue;
    auto& a = acc[c.lang][c.model][c.length];
    a.first += 100.0 * c.accuracy();
    a.second += 1;
  }
  for (const auto& [lang, models] : acc) {
    LineChart chart;
    chart.title = "NIAH accuracy, " + lang + " (mean over tasks; cells that ran)";
    chart.x_label = "haystack tokens (thousands)";
    chart.y_label = "accuracy (%)";
    chart.y_min = 0;
    chart.y_max = 100;
    for (const auto& [model, per_length] : models) {
      ChartSeries s;
      s.label = model;
      for (const auto& [length, sum] : per_length) {
        s.x.push_back(static_cast<double>(length) / 1000.0);
        s.y.push_back(sum.first / sum.second);
      }
      chart.series.push_back(std::move(s));
    }
    file_write_atomic(dir / ("niah_" + lang + ".svg"), svg_line_chart(chart));
  }
}

int run_models(const NiahRunOptions& o) {
  HLM_CHECK_INPUT(!o.models.empty(), "hybridlm niah: give a subcommand (gen, score) or --model DIR for the run mode "
                                     "(see hybridlm niah --help)");
  check_device_option(o.device);  // before anything is loaded
  const std::string precision = !o.precision.empty() ? o.precision : (o.device == "cuda" ? "bf16" : "fp32");
  const int64_t kv_element_bytes = niah_kv_element_bytes(precision, "--precision");
  HLM_CHECK_INPUT(precision == "fp32" || o.device == "cuda",
                  "--precision bf16 needs --device cuda (the CPU engine runs fp32 only)");
  HLM_CHECK_INPUT(!o.tokenizer.empty(), "--tokenizer is required in the run mode (the evaluated model's tokenizer)");
  HLM_CHECK_INPUT(!o.langs.empty() && !o.tasks.empty() && !o.lengths.empty(),
                  "the run mode needs --langs, --tasks and --lengths");
  HLM_CHECK_INPUT(o.n >= 1 && o.max_batch >= 1 && o.max_new_tokens >= 1 && o.prefill_chunk >= 1,
                  "--n, --max-batch, --max-new-tokens and --prefill-chunk must be positive");
  HLM_CHECK_INPUT(!o.out.empty(), "--out is required in the run mode");
  std::vector<const NiahLanguage*> langs;
  for (const std::string& l : o.langs) langs.push_back(&niah_language(l));
  std::vector<const NiahTaskSpec*> tasks;
  for (const std::string& t : o.tasks) tasks.push_back(&niah_task_from_name(t));
  std::vector<int64_t> lengths;
  for (const std::string& l : o.lengths) lengths.push_back(niah_parse_length(l, "--lengths"));
  std::set<std::string> labels;
  for (const std::string& m : o.models) {
    HLM_CHECK_INPUT(fs::is_regular_file(fs::path(m) / "config.json"), "--model ", m,
                    ": not a model directory (no config.json)");
    HLM_CHECK_INPUT(labels.insert(model_label(m)).second, "--model ", m, ": two models share the folder name '",
                    model_label(m), "' (their label in the reports)");
  }
  HLM_CHECK_INPUT(fs::is_regular_file(fs::path(o.corpus) / "corpus.json"), "--corpus ", o.corpus,
                  ": not a corpus directory (no corpus.json; `make corpus-demo` builds data/corpus/demo)");
  const Corpus corpus = Corpus::open(o.corpus);
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_load(o.tokenizer);
  NiahRunSettings settings;
  settings.max_batch = o.max_batch;
  settings.max_new_tokens = o.max_new_tokens;
  settings.prefill_chunk = o.prefill_chunk;
  settings.kv_element_bytes = kv_element_bytes;
  settings.stop = o.stop;
  // The state budget: --max-memory, else half the host's memory (CPU) or, on CUDA, 90 % of the device memory left
  // free once the model's weights are uploaded (set per model below).
  if (!o.max_memory.empty()) settings.budget_bytes = niah_parse_size(o.max_memory, "--max-memory");
  else if (o.device == "cpu") settings.budget_bytes = niah_default_cpu_budget();

  const fs::path out(o.out);
  fs::create_directories(out);
  const nlohmann::json config = {{"models", o.models},          {"tokenizer", o.tokenizer},
                                 {"langs", o.langs},            {"tasks", o.tasks},
                                 {"lengths", lengths},          {"n", o.n},
                                 {"seed", o.seed},              {"corpus", o.corpus},
                                 {"held_out_docs", o.held_out_docs}, {"split", o.split},
                                 {"device", o.device},          {"precision", precision},
                                 {"max_batch", o.max_batch},    {"prefill_chunk", o.prefill_chunk},
                                 {"max_new_tokens", settings.max_new_tokens}, {"stop", settings.stop},
                                 {"state_budget_bytes", settings.budget_bytes ? nlohmann::json(*settings.budget_bytes)
                                                                              : nlohmann::json("90% of free device memory")},
                                 {"decoding", "greedy"}};
  std::fprintf(stderr, "niah: %s\n", config.dump().c_str());
  file_write_atomic(out / "niah_config.json", config.dump(2) + "\n");

  // Prompts depend on the language, task, length and seed only, so every model gets the same ones (they are made
  // again per model: cheap next to generation).
  std::map<std::string, std::vector<std::string>> sentences;
  for (const NiahLanguage* l : langs)
    sentences[std::string(l->code)] =
        niah_held_out_sentences(corpus, std::string(l->code), o.held_out_docs, niah_split_from_name(o.split));

  std::vector<NiahCell> cells;
  std::string items_jsonl;
  for (const std::string& model_dir : o.models) {
    Model model = Model::load(model_dir);
    const std::vector<int32_t> eos = eos_token_ids(model.config(), model_dir);
    const std::string label = model_label(model_dir);
    NiahEngineFactory make_engine = [&model](const MemoryPlan& plan) { return make_cpu_engine(model, plan); };
    NiahRunSettings model_settings = settings;
#ifdef HLM_WITH_CUDA
    // --device cuda: the weights uploaded once per model (bf16: held once, in bf16); each cell's engine holds its
    // state in device memory. Declared before the cells, so the device model outlives every engine.
    NiahEvalBackend cuda_backend;
    if (o.device == "cuda") {
      cuda_backend = niah_cuda_eval_backend(model, precision);
      HLM_CHECK(cuda_backend.kv_element_bytes == kv_element_bytes, "NIAH CUDA backend KV element bytes");
      if (!model_settings.budget_bytes) model_settings.budget_bytes = cuda_backend.default_budget_bytes;
      make_engine = cuda_backend.make_engine;
    }
#endif
    for (const NiahLanguage* l : langs) {
      NiahGenerator gen(*l, sentences[std::string(l->code)], *tokenizer);
      for (const NiahTaskSpec* t : tasks)
        for (const int64_t length : lengths) {
          std::vector<NiahSample> samples;
          for (int64_t i = 0; i < o.n; ++i) samples.push_back(gen.generate(*t, length, o.seed, i));
          std::vector<NiahItem> items;
          NiahCell cell = niah_evaluate_cell(make_engine, model.config(), eos, *tokenizer, *l, *t, samples,
                                             model_settings, &items);
          cell.model = label;
          std::fprintf(stderr, "niah: %s %s %s %lld: %s, %lld/%lld correct, %.1f s, peak state %.1f MiB%s%s\n",
                       label.c_str(), cell.lang.c_str(), cell.task.c_str(), static_cast<long long>(length),
                       cell.status.c_str(), static_cast<long long>(cell.correct), static_cast<long long>(cell.n),
                       cell.seconds, static_cast<double>(cell.peak_state_bytes) / 1048576.0,
                       cell.note.empty() ? "" : ": ", cell.note.c_str());
          for (const NiahItem& it : items)
            items_jsonl += nlohmann::json({{"model", label}, {"lang", cell.lang}, {"task", cell.task},
                                           {"length", length}, {"index", it.index}, {"expected", it.expected},
                                           {"response", it.response}, {"correct", it.correct},
                                           {"prompt_tokens", it.prompt_tokens}, {"finish", it.finish}})
                               .dump() +
                           "\n";
          cells.push_back(std::move(cell));
          // Written after every cell, so an interrupted run keeps what it measured.
          file_write_atomic(out / "niah.csv", niah_cells_csv(cells));
          file_write_atomic(out / "niah_items.jsonl", items_jsonl);
        }
    }
  }
  const std::string markdown = niah_cells_markdown(cells);
  file_write_atomic(out / "niah.md", "# NIAH (OneRULER tasks)\n\n" + markdown);
  write_charts(out, cells);
  std::printf("%s\nwrote %s/niah.{csv,md}, niah_items.jsonl, niah_config.json and niah_<lang>.svg\n",
              markdown.c_str(), o.out.c_str());
  return 0;
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
      "Run mode (greedy, up to 30 new tokens, the CPU or CUDA inference engine):\n"
      "  hybridlm niah --model DIR --model DIR2 --tokenizer T --langs eng_Latn,rus_Cyrl --tasks single,none \\\n"
      "      --lengths 1k,4k --n 50 --out out/niah\n"
      "  hybridlm niah --model DIR --tokenizer T --langs eng_Latn --tasks single --lengths 4k,16k,64k \\\n"
      "      --n 20 --max-batch 8 --device cuda --out out/niah-gpu            # bf16 (the CUDA default)\n"
      "  hybridlm niah --model DIR --tokenizer T --langs eng_Latn --tasks single --lengths 4k,16k \\\n"
      "      --n 20 --device cuda --precision fp32 --prefill-chunk 8192 --out out/niah-gpu-fp32\n"
      "Trained retrieval experiment (train full-attention, hybrid and pure-GDN models on NIAH-format examples):\n"
      "  hybridlm niah experiment --config configs/niah/experiment-gpu.json --out runs/niah-gpu --device cuda");

  auto run = std::make_shared<NiahRunOptions>();
  cmd->add_option("--model", run->models, "Run mode: model directory (repeatable)");
  cmd->add_option("--tokenizer", run->tokenizer, "Run mode: tokenizer ('bytes' or a tokenizer.json)");
  cmd->add_option("--langs", run->langs, "Run mode: languages (comma-separated)")->delimiter(',');
  cmd->add_option("--tasks", run->tasks, "Run mode: tasks (comma-separated)")->delimiter(',');
  cmd->add_option("--lengths", run->lengths, "Run mode: haystack lengths, e.g. 1k,4k,16k")->delimiter(',');
  cmd->add_option("--n", run->n, "Run mode: samples per (language, task, length) (default 50)");
  cmd->add_option("--out", run->out, "Run mode: output folder");
  cmd->add_option("--device", run->device, "Run mode: cpu (default) or cuda (the CUDA inference engine)");
  cmd->add_option("--precision", run->precision,
                  "Run mode: fp32 or bf16 (bf16: CUDA only, its default: bf16 weights, GEMMs and KV cache, fp32 GDN "
                  "state, as `hybridlm generate --device cuda`; fp32: the CPU's only precision)");
  cmd->add_option("--prefill-chunk", run->prefill_chunk,
                  "Run mode: prompt tokens per prefill step, over the batch's prompts (default 512)");
  cmd->add_option("--corpus", run->corpus, "Run mode: corpus directory (default data/corpus/demo)");
  cmd->add_option("--held-out-docs", run->held_out_docs, "Run mode: held-out documents per split (default 1000)");
  cmd->add_option("--split", run->split, "Run mode: valid, test or both (default both)");
  cmd->add_option("--seed", run->seed, "Run mode: seed of the prompts (default 0)");
  cmd->add_option("--max-batch", run->max_batch, "Run mode: sequences decoded together (default 4)");
  cmd->add_option("--max-new-tokens", run->max_new_tokens,
                  "Run mode: generated tokens per prompt (default 30, OneRULER's budget)");
  cmd->add_option("--stop", run->stop,
                  "Run mode: stop a response once its text contains this string (default: none; models of "
                  "`niah experiment` answer in <Answer> ... </Answer>: --stop '</Answer>' --max-new-tokens 64)");
  cmd->add_option("--max-memory", run->max_memory,
                  "Run mode: cap on the inference state (KV + GDN), e.g. 8G (default: half the machine's memory on cpu, "
                  "90% of the device memory left after the weights on cuda); "
                  "a cell whose prompt does not fit is recorded as OOM");

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

  CLI::App* experiment_cmd = add_niah_experiment_subcommand(cmd, action);

  cmd->callback([cmd, gen_cmd, score_cmd, experiment_cmd, run, &action] {
    if (gen_cmd->parsed() || score_cmd->parsed() || experiment_cmd->parsed()) return;
    (void)cmd;
    action = [run] { return run_models(*run); };
  });
}

}  // namespace hlm
