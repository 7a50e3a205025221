// The trained retrieval experiment (evals/niah/niah_experiment.h, issue #21 item 4): training examples come from
// training text only and fill a trainer row exactly; the config round-trips and refuses bad input; a tiny config runs
// end to end through the CLI (data, four trainings, evaluation, reports) and a rerun skips every finished stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "evals/niah/niah_experiment.h"
#include "evals/niah/niah_experiment_config.h"
#include "evals/niah/niah_experiment_report.h"
#include "evals/niah/niah_train_data.h"
#include "models/json_file.h"
#include "niah_fixture.h"
#include "support/run_binary.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

int count_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

TEST(NiahExperiment, TrainingExamplesComeFromTrainingTextAndFillOneRow) {
  hlm::test::ScratchDir dir("niah-exp-data");
  hlm::test::write_niah_fixture_corpus(dir.path());
  const Corpus corpus = Corpus::open(dir.path());
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  for (const char* code : {"eng_Latn", "cmn_Hani", "rus_Cyrl", "hin_Deva"}) {
    const std::vector<std::string> train = niah_training_sentences(corpus, code, hlm::test::kNiahFixtureHeldOut);
    ASSERT_FALSE(train.empty()) << code;
    for (const std::string& s : train) EXPECT_NE(s.find(hlm::test::kTrainMarker), std::string::npos) << s;
    for (const std::string& s :
         niah_held_out_sentences(corpus, code, hlm::test::kNiahFixtureHeldOut, NiahSplit::Both))
      EXPECT_EQ(s.find(hlm::test::kTrainMarker), std::string::npos) << s;

    NiahTrainExampleBuilder builder(niah_language(code), train, *bytes, 2000);  // Hindi: ~1,200 bytes of template
    NiahGenerator gen(niah_language(code), train, *bytes);
    for (const NiahTaskSpec& task : kNiahTasks) {
      const NiahTrainExample ex = builder.build(task, 200, 1, 3);
      EXPECT_TRUE(ex.exact) << code << " " << task.name;
      EXPECT_EQ(ex.tokens, 2000);
      EXPECT_EQ(static_cast<int64_t>(bytes->encode(ex.text).size()), 2000);
      // The prompt is the generator's (same seed and index) and the answer follows it.
      const NiahSample s = gen.generate(task, 200, 1, 3);
      const std::string head = s.prompt + niah_answer_text(s);
      ASSERT_EQ(ex.text.substr(0, head.size()), head) << code << " " << task.name;
      EXPECT_EQ(ex.prompt_tokens, static_cast<int64_t>(head.size()));
      EXPECT_NE(s.haystack.find(hlm::test::kTrainMarker), std::string::npos);
      for (const std::string& v : s.expected) EXPECT_NE(niah_answer_text(s).find(v), std::string::npos);
      // The filler after the answer is training prose too (or spaces).
      const std::string filler = ex.text.substr(head.size());
      EXPECT_EQ(filler.substr(0, 2), "\n\n");
    }
    // A haystack that cannot fit the row is an input error naming the fix.
    try {
      builder.build(niah_task_from_name("single"), 1990, 1, 0);
      ADD_FAILURE() << "expected an input error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find("lower train_data.lengths or raise train.seq_len"), std::string::npos);
    }
  }
  NiahSample two;
  two.expected = {"1234567", "7654321"};
  EXPECT_EQ(niah_answer_text(two), "\n<Answer> 1234567, 7654321 </Answer>");
}

// The per-task table and tasks.csv: the Table 2 mean of a model that answers only `none` equals the none-word floor,
// and the per-task counts say so (sums over languages; cells that did not run are left out).
TEST(NiahExperiment, PerTaskCountsShowWhatTheMeanHides) {
  NiahExperimentResult r;
  r.config.langs = {"eng_Latn", "rus_Cyrl"};
  r.config.eval_tasks = {"single", "multikey", "none"};
  r.config.eval_lengths = {256, 64};
  NiahArchResult a;
  a.arch = "full_attention";
  a.layout = "AA";
  auto cell = [](const std::string& lang, const std::string& task, int64_t length, int64_t correct,
                 const std::string& status = "ok") {
    NiahCell c;
    c.model = "full_attention";
    c.lang = lang;
    c.task = task;
    c.length = length;
    c.n = 8;
    c.correct = correct;
    c.status = status;
    return c;
  };
  for (const char* lang : {"eng_Latn", "rus_Cyrl"}) {
    a.cells.push_back(cell(lang, "single", 64, std::string(lang) == "eng_Latn" ? 3 : 5));
    a.cells.push_back(cell(lang, "multikey", 64, 0));
    a.cells.push_back(cell(lang, "none", 64, 8));
  }
  a.cells.push_back(cell("eng_Latn", "single", 256, 0, "oom"));  // did not run: not counted
  a.cells.push_back(cell("eng_Latn", "none", 256, 8));
  r.archs.push_back(a);

  EXPECT_EQ(niah_experiment_tasks_csv(r),
            "arch,task,length,correct,n,accuracy\n"
            "full_attention,single,64,8,16,50.00\n"
            "full_attention,multikey,64,0,16,0.00\n"
            "full_attention,none,64,16,16,100.00\n"
            "full_attention,none,256,8,8,100.00\n");
  const std::string md = niah_experiment_report_markdown(r);
  EXPECT_NE(md.find("## Per task: correct answers / samples, all languages"), std::string::npos) << md;
  EXPECT_NE(md.find("nothing else: 33.3 % in the tables above"), std::string::npos) << md;
  EXPECT_NE(md.find("| full_attention | single | 8/16 | n/a |"), std::string::npos) << md;
  EXPECT_NE(md.find("| full_attention | none | 16/16 | 8/8 |"), std::string::npos) << md;
  EXPECT_LT(md.find("## Per task"), md.find("## Per language")) << md;
}

TEST(NiahExperiment, ConfigRoundTripsAndRefusesBadInput) {
  hlm::test::ScratchDir dir("niah-exp-config");
  hlm::test::write_niah_fixture_corpus(dir.path());
  NiahExperimentConfig c = niah_experiment_defaults();
  c.corpus = dir.path().string();
  c.held_out_docs = hlm::test::kNiahFixtureHeldOut;
  const NiahExperimentConfig r = niah_experiment_resolve(c);
  EXPECT_EQ(r.langs, (std::vector<std::string>{"eng_Latn", "cmn_Hani", "rus_Cyrl", "hin_Deva"}))
      << "every corpus language with a template, in corpus order";
  const nlohmann::json j = niah_experiment_config_to_json(r);
  EXPECT_EQ(niah_experiment_config_to_json(niah_experiment_config_from_json(j, "rt")), j);
  // 4 layers, F = round(0.25 * 4) = 1.
  EXPECT_EQ(niah_arch_layout(r, "full_attention"), "AAAA");
  EXPECT_EQ(niah_arch_layout(r, "standard_periodic"), "RRRA");
  EXPECT_EQ(niah_arch_layout(r, "reverse_periodic"), "ARRR");
  EXPECT_EQ(niah_arch_layout(r, "gdn"), "RRRR");
  const nlohmann::json mc = niah_arch_model_config(r, "reverse_periodic", 256);
  EXPECT_EQ(mc["model_type"], "qwen3_hybrid");
  EXPECT_EQ(mc["vocab_size"], 256);
  EXPECT_EQ(mc["layer_types"][0], "full_attention");
  EXPECT_EQ(mc["layer_types"][1], "linear_attention");

  auto expect_input_error = [&](nlohmann::json patch, const std::string& needle) {
    nlohmann::json bad = j;
    bad.merge_patch(patch);
    try {
      niah_experiment_resolve(niah_experiment_config_from_json(bad, "bad.json"));
      ADD_FAILURE() << "expected an input error for " << patch.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_input_error({{"colour", 1}}, "unknown key 'colour'");
  expect_input_error({{"eval", {{"seed", 1}}}}, "must differ from eval.seed");
  expect_input_error({{"architectures", {"gdn", "full_attention"}}}, "the first must be full_attention");
  expect_input_error({{"architectures", {"full_attention", "zigzag"}}}, "unknown architecture 'zigzag'");
  expect_input_error({{"langs", {"eng_Latn", "tam_Taml"}}}, "tam_Taml");
  expect_input_error({{"train", {{"data", "x"}}}}, "set by the experiment itself");
  expect_input_error({{"model", {{"layer_types", {"full_attention"}}}}}, "model.layer_types");
  expect_input_error({{"train_data", {{"lengths", {"0"}}}}}, "positive token count");
  expect_input_error({{"model", {{"max_position_embeddings", 256}}}}, "< train.seq_len");
  EXPECT_EQ(r.train_value_digits_min, 7) << "OneRULER's 7-digit values unless asked";
  EXPECT_EQ(j["train_data"]["value_digits_min"], 7);
  expect_input_error({{"train_data", {{"value_digits_min", 1}}}}, "train_data.value_digits_min must be in [2, 7]");
  // Evaluation precision: fp32 (default) or bf16, which only the CUDA engine runs.
  EXPECT_EQ(r.eval_precision, "fp32");
  EXPECT_EQ(r.prefill_chunk, 512);
  EXPECT_EQ(j["eval"]["precision"], "fp32");
  expect_input_error({{"eval", {{"precision", "fp16"}}}}, "eval.precision must be fp32 or bf16, got 'fp16'");
  expect_input_error({{"eval", {{"precision", "bf16"}}}}, "eval.precision bf16 needs device cuda");
  expect_input_error({{"eval", {{"prefill_chunk", 0}}}}, "eval.prefill_chunk must be positive");
  nlohmann::json gpu = j;
  gpu.merge_patch({{"device", "cuda"}, {"eval", {{"precision", "bf16"}, {"prefill_chunk", 8192}}}});
  const NiahExperimentConfig g = niah_experiment_resolve(niah_experiment_config_from_json(gpu, "gpu.json"));
  EXPECT_EQ(g.eval_precision, "bf16");
  EXPECT_EQ(g.prefill_chunk, 8192);
  EXPECT_EQ(niah_experiment_config_to_json(g)["eval"]["precision"], "bf16");
}

namespace {

// A two-architecture experiment over the fixture corpus in `dir`, small enough to train in seconds.
nlohmann::json subset_fixture_config(const fs::path& dir) {
  hlm::test::write_niah_fixture_corpus(dir / "corpus");
  return {
      {"format", "hybridlm-niah-experiment"},
      {"corpus", (dir / "corpus").string()},
      {"langs", {"eng_Latn"}},
      {"held_out_docs", hlm::test::kNiahFixtureHeldOut},
      {"architectures", {"full_attention", "gdn"}},
      {"model",
       {{"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
        {"num_key_value_heads", 1}, {"head_dim", 16}, {"max_position_embeddings", 2048}, {"tie_word_embeddings", true}}},
      {"train_data", {{"tasks", {"single", "none"}}, {"lengths", {64}}}},
      {"train",
       {{"tokens", 3200}, {"seq_len", 800}, {"batch_rows", 2}, {"micro_batch_rows", 2}, {"lr", 3e-3},
        {"held_out_docs", 1}, {"eval_tokens", 800}, {"checkpoint_every_steps", 2}, {"log_every_steps", 1}}},
      {"eval", {{"tasks", {"single", "none"}}, {"lengths", {100, 200}}, {"n", 2}, {"max_batch", 2}}}};
}

}  // namespace

TEST(NiahExperiment, SeedOptionSetsTheTrainingSeedsAndNeedsItsOwnFolder) {
  // --seed N: train.init_seed and train.data_seed become N in the resolved config and the trainer's run; an --out
  // that holds another seed is refused before any stage runs.
  hlm::test::ScratchDir dir("niah-exp-seed");
  const fs::path cfg = dir.path() / "exp.json";
  {
    std::ofstream(cfg) << subset_fixture_config(dir.path()).dump(2);
  }
  const fs::path out = dir.path() / "out-s7";
  const std::string cmd = "niah experiment --config " + cfg.string() + " --out " + out.string() + " --architectures gdn";
  const auto r = hlm::test::run_hybridlm(cmd + " --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json resolved = nlohmann::json::parse(hlm::test::read_text(out / "config.json"));
  EXPECT_EQ(resolved["train"]["init_seed"], 7);
  EXPECT_EQ(resolved["train"]["data_seed"], 7);
  const auto other = hlm::test::run_hybridlm(cmd + " --seed 8");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("holds an experiment with another config (differs in: train)"), std::string::npos)
      << other.err;
  const auto negative = hlm::test::run_hybridlm(cmd + " --seed -1");
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.err.find("--seed"), std::string::npos) << negative.err;
}

TEST(NiahExperiment, ArchitectureSubsetsShareAnOutputFolder) {
  // One process per architecture on one --out (as on the GPU, where they run side by side), then --report-only;
  // an evaluation cut short continues after its last finished cell.
  hlm::test::ScratchDir dir("niah-exp-subset");
  const nlohmann::json config = subset_fixture_config(dir.path());
  const fs::path cfg = dir.path() / "exp.json";
  {
    std::ofstream(cfg) << config.dump(2);
  }
  const fs::path out = dir.path() / "out";
  const std::string cmd = "niah experiment --config " + cfg.string() + " --out " + out.string();

  const auto bad = hlm::test::run_hybridlm(cmd + " --architectures gdn,zigzag");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--architectures: 'zigzag' is not one of the config's architectures (full_attention, gdn)"),
            std::string::npos)
      << bad.err;
  const auto none_yet = hlm::test::run_hybridlm(cmd + " --report-only");
  EXPECT_EQ(none_yet.exit_code, 2);
  EXPECT_NE(none_yet.err.find("no experiment here"), std::string::npos) << none_yet.err;

  // gdn alone: only its folders; the report holds it and no deficit (no baseline yet).
  const auto g = hlm::test::run_hybridlm(cmd + " --architectures gdn");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.err.find("training full_attention"), std::string::npos) << g.err;
  EXPECT_FALSE(fs::exists(out / "runs" / "full_attention"));
  EXPECT_TRUE(fs::exists(out / "eval" / "gdn" / "cells.json"));
  EXPECT_FALSE(fs::exists(out / "eval" / "gdn" / "cells_partial.json")) << "removed once the evaluation finished";
  EXPECT_EQ(count_lines(hlm::test::read_text(out / "training.csv")), 2);
  EXPECT_EQ(count_lines(hlm::test::read_text(out / "deficit.csv")), 1);
  // Cells in evaluation order: every length's languages and tasks before the next length.
  const std::string gdn_csv = hlm::test::read_text(out / "eval" / "gdn" / "niah.csv");
  EXPECT_LT(gdn_csv.find("gdn,eng_Latn,none,100,"), gdn_csv.find("gdn,eng_Latn,single,200,")) << gdn_csv;

  // full_attention in a second process on the same folder: the data stage is not run again; the report has both.
  const auto f = hlm::test::run_hybridlm(cmd + " --architectures full_attention");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.err.find("training data written"), std::string::npos) << f.err;
  EXPECT_EQ(f.err.find("training gdn"), std::string::npos) << f.err;
  EXPECT_EQ(count_lines(hlm::test::read_text(out / "training.csv")), 3);
  EXPECT_EQ(count_lines(hlm::test::read_text(out / "deficit.csv")), 1 + 2) << "gdn against full attention, 2 lengths";
  const std::string niah_csv = hlm::test::read_text(out / "niah.csv");
  EXPECT_EQ(count_lines(niah_csv), 1 + 2 * 2 * 2);

  // --report-only runs no stage and writes the same reports.
  fs::remove(out / "report.md");
  const auto rep = hlm::test::run_hybridlm(cmd + " --report-only");
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.err.find("eval "), std::string::npos) << rep.err;
  EXPECT_EQ(hlm::test::read_text(out / "niah.csv"), niah_csv);
  EXPECT_NE(hlm::test::read_text(out / "report.md").find("| gdn | RR |"), std::string::npos);

  // An evaluation cut short after its first cell: the report marks it partial, and a rerun runs only the other
  // cells, giving the same verdicts (greedy decoding on the CPU is deterministic).
  const fs::path eval_gdn = out / "eval" / "gdn";
  nlohmann::json record = json_file_read(eval_gdn / "cells.json");
  const nlohmann::json all_cells = record["cells"];
  record["cells"] = nlohmann::json::array({all_cells[0]});
  {
    std::ofstream(eval_gdn / "cells_partial.json") << record.dump(1);
  }
  fs::remove(eval_gdn / "cells.json");
  const auto partial = hlm::test::run_hybridlm(cmd + " --report-only");
  ASSERT_EQ(partial.exit_code, 0) << partial.err;
  EXPECT_NE(hlm::test::read_text(out / "report.md").find("**gdn: partial evaluation** (1 of 4 cells"),
            std::string::npos)
      << hlm::test::read_text(out / "report.md");
  const auto resumed = hlm::test::run_hybridlm(cmd + " --architectures gdn");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("continuing after 1 finished cells"), std::string::npos) << resumed.err;
  EXPECT_EQ(resumed.err.find("eval gdn 1/4"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("eval gdn 2/4"), std::string::npos) << resumed.err;
  EXPECT_EQ(resumed.err.find("training gdn"), std::string::npos) << resumed.err;
  const nlohmann::json again = json_file_read(eval_gdn / "cells.json");
  ASSERT_EQ(again["cells"].size(), all_cells.size());
  for (size_t i = 0; i < all_cells.size(); ++i)
    for (const char* key : {"lang", "task", "length", "status", "correct", "n"})
      EXPECT_EQ(again["cells"][i][key], all_cells[i][key]) << i << " " << key;
  int items = 0;
  {
    std::istringstream in(hlm::test::read_text(eval_gdn / "niah_items.jsonl"));
    for (std::string line; std::getline(in, line);) items += line.empty() ? 0 : 1;
  }
  EXPECT_EQ(items, 4 * 2) << "4 cells x 2 samples, none twice";
  EXPECT_EQ(hlm::test::read_text(out / "report.md").find("partial evaluation"), std::string::npos);
}

TEST(NiahExperiment, TinyRunEndToEndThroughTheCli) {
  hlm::test::ScratchDir dir("niah-exp-run");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  const nlohmann::json config = {
      {"format", "hybridlm-niah-experiment"},
      {"corpus", (dir.path() / "corpus").string()},
      {"langs", {"eng_Latn", "rus_Cyrl"}},
      {"held_out_docs", hlm::test::kNiahFixtureHeldOut},
      {"model",
       {{"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 2},
        {"num_key_value_heads", 1}, {"head_dim", 16}, {"max_position_embeddings", 2048}, {"tie_word_embeddings", true}}},
      // Russian prompts carry ~830 bytes of template and needles besides the haystack: rows of 1200 bytes.
      {"train_data", {{"tasks", {"single", "none"}}, {"lengths", {64, 96}}}},
      {"train",
       {{"tokens", 9600}, {"seq_len", 1200}, {"batch_rows", 2}, {"micro_batch_rows", 2}, {"lr", 3e-3},
        {"held_out_docs", 1}, {"eval_tokens", 1200}, {"checkpoint_every_steps", 2}, {"log_every_steps", 1}}},
      {"eval", {{"tasks", {"single", "none"}}, {"lengths", {100, 200}}, {"n", 2}, {"max_batch", 2}}}};
  const fs::path cfg = dir.path() / "exp.json";
  {
    std::ofstream(cfg) << config.dump(2);
  }
  const fs::path out = dir.path() / "out";
  const std::string cmd = "niah experiment --config " + cfg.string() + " --out " + out.string();
  const auto r = hlm::test::run_hybridlm(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << "the trainer's progress lines";
  EXPECT_NE(r.err.find("eta"), std::string::npos);

  const std::vector<std::string> archs{"full_attention", "standard_periodic", "reverse_periodic", "gdn"};
  const std::vector<std::string> layouts{"AAAA", "RRRA", "ARRR", "RRRR"};
  for (const char* f : {"config.json", "config_given.json", "report.md", "accuracy.csv", "deficit.csv", "cost.csv",
                        "training.csv", "niah.csv", "niah.md", "accuracy_eng_Latn.svg", "accuracy_rus_Cyrl.svg",
                        "deficit.svg", "time.svg", "memory.svg", "data/corpus.json", "data/niah_train_data.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  // Training data: every example exactly one row, from training text.
  const nlohmann::json data = json_file_read(out / "data" / "niah_train_data.json");
  EXPECT_EQ(data["exact"], data["documents"]);
  EXPECT_EQ(data["tokens"].get<int64_t>(), data["documents"].get<int64_t>() * 1200);
  const Corpus derived = Corpus::open(out / "data");
  for (const std::string& doc : derived.read_documents("rus_Cyrl").texts) {
    EXPECT_NE(doc.find(hlm::test::kTrainMarker), std::string::npos);
    EXPECT_NE(doc.find("</Answer>"), std::string::npos);
  }
  for (size_t a = 0; a < archs.size(); ++a) {
    const nlohmann::json mc = json_file_read(out / "runs" / archs[a] / "model" / "config.json");
    std::string layout;
    for (const auto& t : mc["layer_types"]) layout += t == "full_attention" ? 'A' : 'R';
    EXPECT_EQ(layout, layouts[a]) << archs[a];
    EXPECT_TRUE(fs::exists(out / "runs" / archs[a] / "test.json"));
    EXPECT_TRUE(fs::exists(out / "eval" / archs[a] / "cells.json"));
  }
  // Rows: 4 archs x 2 languages x 2 lengths; deficits for the 3 others; cost per arch and length.
  const std::string accuracy = hlm::test::read_text(out / "accuracy.csv");
  EXPECT_EQ(count_lines(accuracy), 1 + 4 * 2 * 2) << accuracy;
  EXPECT_NE(accuracy.find("standard_periodic,RRRA,rus_Cyrl,200,2,"), std::string::npos) << accuracy;
  const std::string deficit = hlm::test::read_text(out / "deficit.csv");
  EXPECT_EQ(count_lines(deficit), 1 + 3 * 2 * 2) << deficit;
  EXPECT_EQ(deficit.find("full_attention,eng"), std::string::npos) << "no deficit of the baseline against itself";
  const std::string cost = hlm::test::read_text(out / "cost.csv");
  EXPECT_EQ(count_lines(cost), 1 + 4 * 2) << cost;
  EXPECT_NE(cost.find("gdn,RRRR,100,4,"), std::string::npos) << cost;
  EXPECT_EQ(count_lines(hlm::test::read_text(out / "training.csv")), 5);
  const std::string niah_csv = hlm::test::read_text(out / "niah.csv");
  EXPECT_EQ(count_lines(niah_csv), 1 + 4 * 2 * 2 * 2) << niah_csv;
  const std::string report = hlm::test::read_text(out / "report.md");
  for (const char* s : {"the seed's Table 2 layout", "Deficit against full attention", "| reverse_periodic | ARRR |",
                        "rus_Cyrl (Russian)", "peak MiB", "## Training"})
    EXPECT_NE(report.find(s), std::string::npos) << s << "\n" << report;
  // Every cell ran and its memory was measured: attention models hold KV blocks, the pure GDN model a fixed state.
  std::istringstream rows(niah_csv);
  std::string line;
  std::getline(rows, line);
  while (std::getline(rows, line)) {
    EXPECT_NE(line.find(",ok,2,"), std::string::npos) << line;
  }

  // A rerun skips every stage (no training, no evaluation) and writes the same reports.
  const std::string before = hlm::test::read_text(out / "niah.csv");
  const auto again = hlm::test::run_hybridlm(cmd);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("training "), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("eval full_attention"), std::string::npos) << again.err;
  EXPECT_EQ(hlm::test::read_text(out / "niah.csv"), before);

  // The same --out with another config is refused (exit 2), naming what differs.
  nlohmann::json changed = config;
  changed["eval"]["n"] = 3;
  {
    std::ofstream(cfg) << changed.dump(2);
  }
  const auto refused = hlm::test::run_hybridlm(cmd);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("differs in: eval"), std::string::npos) << refused.err;
}
