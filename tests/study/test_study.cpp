// `hybridlm study` end to end on a tiny generated corpus (tests/train/test_trainer_fixture.h) with two placements
// and a few steps: outputs, R of the baseline, stage skipping on rerun, rerun of one student after its marker is
// deleted, resuming an interrupted distillation, and config errors (exit 2). Plus the Figure 6 crossing on
// hand-made curves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/study_config.h"
#include "study/study_curves.h"
#include "study/study_replicates.h"
#include "study/study_report.h"
#include "train/checkpoint_io.h"
#include "train/test_trainer_fixture.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// compare.csv (train/compare.h, Table C.4): the D_KL row of each language not excluded, and the R row.
struct CompareCsv {
  std::vector<std::string> labels;
  std::vector<std::pair<std::string, std::vector<double>>> kl;
  std::vector<double> r;
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) out.push_back(cell);
  return out;
}

CompareCsv read_compare_csv(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  CompareCsv t;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv(line);  // language,tier,metric,<labels...>
  t.labels.assign(header.begin() + std::min<size_t>(3, header.size()), header.end());
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split_csv(line);
    if (cells.size() != 3 + t.labels.size()) continue;
    std::vector<double> values;
    for (size_t i = 3; i < cells.size(); ++i) values.push_back(std::stod(cells[i]));
    if (cells[2] == "D_KL" && cells[0].find("(excluded)") == std::string::npos) t.kl.emplace_back(cells[0], values);
    if (cells[0] == "mean" && cells[2] == "R") t.r = values;
  }
  return t;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CommandResult {
  int code = -1;
  std::string output;
};

CommandResult run_study(const fs::path& config, const fs::path& out, const fs::path& log,
                        const std::string& extra = "") {
  const std::string cmd = std::string(HLM_BINARY) + " study --config " + config.string() + " --out " + out.string() +
                          extra + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

class StudyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    test::use_one_thread();
    dir_ = fs::temp_directory_path() / ("hlm_study_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    test::write_tiny_corpus(dir_ / "corpus", 300);
    // A parallel set whose French side is French text: enough for SoftCKA and locality to run.
    std::ofstream par(dir_ / "parallel.jsonl");
    for (int i = 0; i < 6; ++i)
      par << json{{"id", "u" + std::to_string(i)},
                  {"eng_Latn", "the cat sat on the mat number " + std::to_string(i) + "."},
                  {"fra_Latn", "le chat dort sur le tapis numero " + std::to_string(i) + "."}}
                 .dump()
          << "\n";
    par.close();
    base_config_ = {
        {"data", (dir_ / "corpus").string()},
        {"parallel", (dir_ / "parallel.jsonl").string()},
        {"teacher", {{"model_config", json::parse(test::tiny_teacher_config_json(4))}}},
        {"pretrain",
         {{"tokens", 8 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 2}, {"lr", 3e-3},
          {"held_out_docs", 20}, {"eval_tokens", 256}, {"eval_every_tokens", 0}, {"log_every_steps", 1000}}},
        {"distill",
         {{"tokens", 8 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 2}, {"lr_rec", 3e-3},
          {"lr_rest", 1e-3}, {"min_lr", 1e-4}, {"warmup_steps", 1}, {"held_out_docs", 20}, {"eval_tokens", 256},
          {"eval_every_tokens", 2 * 4 * 64}, {"checkpoint_every_steps", 3}, {"log_every_steps", 1000}}},
        {"placements", {{"names", {"standard_periodic", "reverse_periodic"}}, {"full", 1}}},
        {"analysis", {{"max_pairs", 4}, {"locality_max_units", 3}, {"locality_k", {1, 4}}}}};
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path write_config(const std::string& name, const json& j) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << j.dump(2);
    return p;
  }

  static fs::path dir_;
  static json base_config_;
};

fs::path StudyTest::dir_;
json StudyTest::base_config_;

TEST_F(StudyTest, RunsEndToEndSkipsFinishedStagesAndRerunsOneStudent) {
  const fs::path config = write_config("study.json", base_config_);
  const fs::path out = dir_ / "out";
  const CommandResult first = run_study(config, out, dir_ / "first.log");
  ASSERT_EQ(first.code, 0) << first.output;
  for (const char* f : {"report/report.html", "report/summary.csv", "report/summary.json", "report/compare.csv",
                        "report/curves.csv", "report/softcka.csv", "report/locality.csv", "study_config.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const std::string html = read_file(out / "report/report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);  // self-contained
  const json summary = json::parse(read_file(out / "report/summary.json"));
  ASSERT_EQ(summary["placements"].size(), 2u);
  EXPECT_EQ(summary["placements"][0]["label"], "standard_periodic");
  // R of the baseline against itself: exp(mean log 1), exactly 1.
  EXPECT_EQ(summary["placements"][0]["R"].get<double>(), 1.0);
  EXPECT_TRUE(std::isfinite(summary["placements"][1]["R"].get<double>()));
  EXPECT_TRUE(std::isfinite(summary["placements"][1]["delta_bar"].get<double>()));
  // R of the other placement, recomputed from compare.csv's per-language D_KL rows (Eq. 5: the geometric mean of the
  // per-language ratios to the baseline, excluded languages left out). compare.csv prints 9 significant digits
  // (relative rounding <= 5e-9 per value), so the recomputation agrees within 1e-7 relative, not bit for bit.
  const CompareCsv table = read_compare_csv(out / "report/compare.csv");
  ASSERT_EQ(table.labels, (std::vector<std::string>{"standard_periodic", "reverse_periodic"}));
  ASSERT_FALSE(table.kl.empty());
  double log_sum = 0.0;
  for (const auto& [lang, kl] : table.kl) {
    ASSERT_EQ(kl.size(), 2u) << lang;
    log_sum += std::log(kl[1] / kl[0]);
  }
  const double r_recomputed = std::exp(log_sum / static_cast<double>(table.kl.size()));
  const double r_reported = summary["placements"][1]["R"].get<double>();
  EXPECT_NEAR(r_reported, r_recomputed, 1e-7 * r_recomputed) << table.kl.size() << " languages";
  EXPECT_NEAR(table.r[1], r_recomputed, 1e-7 * r_recomputed);
  EXPECT_NE(r_reported, 1.0);  // a different placement distils to a different student
  // The baseline reaches its own final gap at the latest at its last validation.
  EXPECT_FALSE(summary["placements"][0]["reach_share"].is_null());

  // The data budget: the teacher's pretraining and the baseline's distillation, each 8 steps of 4 x 64 tokens in one
  // pass (the corpus holds more than that), split by language.
  ASSERT_EQ(summary["data_budget"].size(), 2u) << summary.dump(2);
  EXPECT_EQ(summary["data_budget"][0]["stage"], "teacher (pretrain)");
  EXPECT_EQ(summary["data_budget"][1]["stage"], "distill (standard_periodic)");
  for (const json& b : summary["data_budget"]) {
    EXPECT_EQ(b["tokens_planned"], 8 * 4 * 64);
    EXPECT_EQ(b["tokens_trained"], 8 * 4 * 64);
    EXPECT_EQ(b["passes"], 1);
    EXPECT_EQ(b["passes_used"], 1);
    EXPECT_EQ(b["data_exhausted"], false);
    int64_t sum = 0;
    for (const auto& item : b["tokens_by_language"].items()) sum += item.value().get<int64_t>();
    EXPECT_EQ(sum, 8 * 4 * 64);
  }
  EXPECT_NE(html.find("<h2>Data budget</h2>"), std::string::npos);
  {  // as saved before passes existed: the rerun below must still match it
    json saved = json::parse(read_file(out / "study_config.json"));
    EXPECT_EQ(saved["distill"]["passes"], 1);
    saved["pretrain"].erase("passes");
    saved["distill"].erase("passes");
    std::ofstream(out / "study_config.json") << saved.dump(2);
  }

  // 1 teacher + 2 converts + 2 distills + 3 align + 3 locality + report = 12 stages, all skipped on rerun.
  const CommandResult second = run_study(config, out, dir_ / "second.log");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(count(second.output, "skipped (done)"), 12) << second.output;
  EXPECT_NE(second.output.find("0 stages run"), std::string::npos) << second.output;

  // Without its marker, one student's distillation runs again; so do its analyses and the report, nothing else.
  fs::remove(out / "runs/reverse_periodic/done.json");
  const CommandResult third = run_study(config, out, dir_ / "third.log");
  ASSERT_EQ(third.code, 0) << third.output;
  EXPECT_NE(third.output.find("study [distill] reverse_periodic: "), std::string::npos) << third.output;
  EXPECT_NE(third.output.find("study [distill] skipped (done): standard_periodic"), std::string::npos);
  EXPECT_NE(third.output.find("study [teacher] skipped"), std::string::npos);
  EXPECT_EQ(count(third.output, "study [distill] skipped"), 1);
  EXPECT_EQ(count(third.output, "study [convert] skipped"), 2);
  EXPECT_NE(third.output.find("4 stages run"), std::string::npos) << third.output;  // distill, align, locality, report
  EXPECT_TRUE(fs::exists(out / "runs/reverse_periodic/done.json"));

  // A distillation interrupted after its last step (no marker, no final model, only the final checkpoint at step 8,
  // which the trainer writes before model/) resumes from that checkpoint, writes the model and evaluates it: the same
  // test.json as before. Interruptions mid-run: tests/study/test_study_crash.cpp kills real study processes.
  const fs::path run = out / "runs/reverse_periodic";
  const json finished = json::parse(read_file(run / "test.json"));
  ASSERT_EQ(checkpoint_list(run), std::vector<fs::path>{run / "checkpoint-00000008"});
  for (const char* f : {"done.json", "test.json", "model"}) fs::remove_all(run / f);
  const CommandResult fourth = run_study(config, out, dir_ / "fourth.log");
  ASSERT_EQ(fourth.code, 0) << fourth.output;
  EXPECT_NE(fourth.output.find("study [distill] reverse_periodic: resuming from its newest checkpoint"),
            std::string::npos)
      << fourth.output;
  EXPECT_EQ(json::parse(read_file(run / "test.json")), finished);
}

// --jobs 3: the stages run side by side in child processes (study_tasks.h), each with its log in <out>/logs/, and
// the study is the one-job study: the same models byte for byte and the same tables (the CPU trainer and analyses are
// deterministic at one thread, test::use_one_thread). Replicates are on so that a replicate distillation can start
// before its placement's main run ends. A GPU config is refused with --jobs 2 before anything runs.
TEST_F(StudyTest, JobsRunStagesSideBySideWithTheResultsOfOneJob) {
  json j = base_config_;
  j["replicates"] = {{"data_seeds", {0, 1}}, {"placements", {"standard_periodic", "reverse_periodic"}}};
  const fs::path config = write_config("jobs.json", j);
  const fs::path one = dir_ / "out_jobs1", three = dir_ / "out_jobs3";
  const CommandResult a = run_study(config, one, dir_ / "jobs1.log");
  ASSERT_EQ(a.code, 0) << a.output;
  const CommandResult b = run_study(config, three, dir_ / "jobs3.log", " --jobs 3");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_FALSE(fs::exists(one / "logs"));  // one job writes no logs: its output is the study's own
  for (const char* f : {"teacher/model/model.safetensors", "runs/standard_periodic/model/model.safetensors",
                        "runs/reverse_periodic/model/model.safetensors",
                        "runs/reverse_periodic.seed1/model/model.safetensors",
                        "report/compare.csv", "report/curves.csv", "report/replicates.csv", "report/softcka.csv",
                        "report/locality.csv", "report/summary.csv"}) {
    ASSERT_TRUE(fs::exists(three / f)) << f;
    EXPECT_EQ(read_file(three / f), read_file(one / f)) << f << " differs between --jobs 3 and one job";
  }
  // 1 teacher + 2 converts + 2 distills + 2 replicate distills + 3 align + 3 locality + report.
  EXPECT_NE(b.output.find("14 stages run"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("study [distill] reverse_periodic seed 1 done"), std::string::npos) << b.output;
  // The trainer's own lines went to the stage's log, not to the study's output.
  const std::string log = read_file(three / "logs/distill.reverse_periodic_seed_1.log");
  EXPECT_NE(log.find("starting at step 0 of 8"), std::string::npos) << log;
  EXPECT_EQ(b.output.find("starting at step 0 of 8"), std::string::npos) << b.output;
  for (const char* f : {"teacher.teacher.log", "convert.standard_periodic.log", "align.teacher.log",
                        "locality.reverse_periodic.log"})
    EXPECT_TRUE(fs::exists(three / "logs" / f)) << f;
  // A rerun skips every stage, side by side or not.
  const CommandResult again = run_study(config, three, dir_ / "jobs3b.log", " --jobs 3");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(count(again.output, "skipped (done)"), 14) << again.output;

  json gpu = base_config_;
  gpu["distill"]["device"] = "cuda";
  const CommandResult refused =
      run_study(write_config("jobs_gpu.json", gpu), dir_ / "out_jobs_gpu", dir_ / "jobs_gpu.log", " --jobs 2");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("runs stages side by side on the CPU only"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(dir_ / "out_jobs_gpu"));
  const CommandResult zero = run_study(config, dir_ / "out_jobs0", dir_ / "jobs0.log", " --jobs 0");
  EXPECT_EQ(zero.code, 2) << zero.output;
}

// Replicates over two data seeds on a corpus with Mon (mnw_Mymr): every replicated placement runs once more with
// seed 1 (sandwich has reverse periodic's layers at L 4, F 1 and shares its runs), the report gives per-seed values,
// mean and range, Mon is left out of the aggregates by default, and a rerun skips every stage.
TEST_F(StudyTest, ReplicatesOverDataSeedsAndLeavesOutMonByDefault) {
  const fs::path corpus = dir_ / "corpus_mnw";
  {
    const std::vector<CorpusLanguage> languages = {
        {"eng_Latn", "", "anchor", 0}, {"rus_Cyrl", "", "high", 0}, {"mnw_Mymr", "", "low", 0}};
    const std::vector<std::string> words = {"the cat sat on the mat. ", "кошка спит на ковре. ",
                                            "\u1019\u1014\u103a \u1018\u102c\u101e\u102c. "};
    std::vector<std::vector<std::string>> docs(languages.size());
    for (size_t l = 0; l < languages.size(); ++l)
      for (int d = 0; d < 200; ++d) docs[l].push_back(std::string(static_cast<size_t>(2 + d % 3), ' ') + words[l] +
                                                      words[l] + std::to_string(d));
    corpus_write(corpus, languages, docs);
  }
  json j = base_config_;
  j["data"] = corpus.string();
  j["parallel"] = "";
  j["placements"]["names"] = {"standard_periodic", "reverse_periodic", "sandwich"};
  j["replicates"] = {{"data_seeds", {0, 1}}, {"placements", {"standard_periodic", "sandwich", "reverse_periodic"}}};
  const fs::path config = write_config("replicates.json", j);
  const fs::path out = dir_ / "out_replicates";
  const CommandResult first = run_study(config, out, dir_ / "rep1.log");
  ASSERT_EQ(first.code, 0) << first.output;
  for (const char* run : {"runs/standard_periodic.seed1", "runs/reverse_periodic.seed1"})
    EXPECT_TRUE(fs::exists(out / run / "test.json")) << run;
  EXPECT_FALSE(fs::exists(out / "runs/sandwich.seed1"));  // shares reverse periodic's run
  const json train_config = json::parse(read_file(out / "runs/standard_periodic.seed1/config.json"));
  EXPECT_EQ(train_config["data_seed"], 1);

  const json summary = json::parse(read_file(out / "report/summary.json"));
  const json& rep = summary["replicates"];
  EXPECT_EQ(rep["data_seeds"], json::array({0, 1}));
  ASSERT_EQ(rep["placements"].size(), 3u);  // baseline first, then the config's order among the placements
  EXPECT_EQ(rep["placements"][0]["label"], "standard_periodic");
  EXPECT_EQ(rep["placements"][2]["label"], "sandwich");
  EXPECT_EQ(rep["placements"][2]["same_as"], "reverse_periodic");
  const auto languages = rep["languages"].get<std::vector<std::string>>();
  const auto mon = std::find(languages.begin(), languages.end(), "mnw_Mymr");
  ASSERT_NE(mon, languages.end());
  EXPECT_TRUE(rep["excluded"][mon - languages.begin()].get<bool>());
  for (const json& p : rep["placements"]) {
    ASSERT_EQ(p["seeds"].size(), 2u) << p["label"];
    EXPECT_EQ(p["seeds"][1]["seed"], 1);
    EXPECT_EQ(p["R"]["n"], 2);
    // The range holds both seeds' values and the mean lies between them.
    const double a = p["seeds"][0]["R"], b = p["seeds"][1]["R"];
    EXPECT_EQ(p["R"]["min"].get<double>(), std::min(a, b));
    EXPECT_EQ(p["R"]["max"].get<double>(), std::max(a, b));
  }
  // The baseline's R is 1 in every seed (each seed's ratio is to its own baseline run); seed 0 is the main table.
  for (const json& seed : rep["placements"][0]["seeds"]) EXPECT_EQ(seed["R"].get<double>(), 1.0);
  EXPECT_EQ(rep["placements"][1]["seeds"][0]["R"], summary["placements"][1]["R"]);
  // Sharing a run means sharing its numbers, seed by seed.
  EXPECT_EQ(rep["placements"][2]["seeds"][1]["kl"], rep["placements"][1]["seeds"][1]["kl"]);
  // The two seeds trained on different data orders: different students.
  EXPECT_NE(rep["placements"][1]["seeds"][0]["kl"], rep["placements"][1]["seeds"][1]["kl"]);
  // R leaves Mon out: recompute it from the per-language D_KL of seed 1.
  double log_sum = 0.0;
  int n = 0;
  for (size_t l = 0; l < languages.size(); ++l) {
    if (languages[l] == "mnw_Mymr") continue;
    log_sum += std::log(rep["placements"][1]["seeds"][1]["kl"][l].get<double>() /
                        rep["placements"][0]["seeds"][1]["kl"][l].get<double>());
    ++n;
  }
  const double r1 = rep["placements"][1]["seeds"][1]["R"];
  EXPECT_NEAR(r1, std::exp(log_sum / n), 1e-12 * r1);
  EXPECT_EQ(n, 2);
  // Findings: one per aggregate metric of each non-baseline placement.
  int aggregate_findings = 0;
  for (const json& f : rep["findings"]) aggregate_findings += f["metric"].get<std::string>().rfind("kl:", 0) != 0;
  EXPECT_EQ(aggregate_findings, 2 * 4);
  const std::string html = read_file(out / "report/report.html");
  EXPECT_NE(html.find("Replicates over data seeds"), std::string::npos);
  EXPECT_NE(html.find("<th>seed 1</th>"), std::string::npos);
  EXPECT_NE(html.find("range [min, max]"), std::string::npos);
  EXPECT_NE(html.find("stroke-dasharray=\"6,4\""), std::string::npos);  // sandwich drawn dashed over its twin
  EXPECT_NE(html.find("sandwich (= reverse_periodic)"), std::string::npos);
  EXPECT_NE(html.find("mnw_Mymr<sup>†</sup>"), std::string::npos);
  const std::string csv = read_file(out / "report/replicates.csv");
  EXPECT_NE(csv.find("reverse_periodic,1,kl,mnw_Mymr,"), std::string::npos);
  EXPECT_NE(read_file(out / "report/curves.csv").find("standard_periodic,1,"), std::string::npos);

  // 1 teacher + 2 converts + 2 distills + 2 replicate distills + report: all skipped on rerun.
  const CommandResult second = run_study(config, out, dir_ / "rep2.log");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(count(second.output, "skipped (done)"), 8) << second.output;
  EXPECT_NE(second.output.find("0 stages run"), std::string::npos) << second.output;

  // Without its marker, one replicate run trains again; nothing else does but the report.
  fs::remove(out / "runs/reverse_periodic.seed1/done.json");
  fs::remove_all(out / "runs/reverse_periodic.seed1/model");
  fs::remove(out / "runs/reverse_periodic.seed1/test.json");
  const CommandResult third = run_study(config, out, dir_ / "rep3.log");
  ASSERT_EQ(third.code, 0) << third.output;
  EXPECT_NE(third.output.find("study [distill] reverse_periodic seed 1: resuming"), std::string::npos)
      << third.output;
  EXPECT_NE(third.output.find("2 stages run"), std::string::npos) << third.output;
  EXPECT_EQ(json::parse(read_file(out / "report/summary.json"))["replicates"], rep);

  // compare.exclude_mnw_Mymr false keeps Mon in the aggregates; without Mon in the corpus nothing is added.
  StudyConfig keep = study_config_from_json(j, "test");
  EXPECT_EQ(study_excluded_languages(keep), std::set<std::string>{"mnw_Mymr"});
  keep.exclude_mnw_Mymr = false;
  EXPECT_TRUE(study_excluded_languages(keep).empty());
  StudyConfig other = study_config_from_json(base_config_, "test");
  EXPECT_TRUE(study_excluded_languages(other).empty());
}

// The data budget of a run directory (config.json + test.json meta): passes and per-language tokens when the trainer
// wrote them, 1 of 1 and no split for runs made before passes existed. A study config takes "passes" in both trainer
// sections, and a study_config.json saved before passes existed still matches (passes 1).
TEST(StudyDataBudget, ReadsTheRunsMetaOldAndNew) {
  const fs::path dir = fs::temp_directory_path() / ("hlm_study_budget_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << json{{"tokens", 4096}}.dump();
  std::ofstream(dir / "test.json") << json{{"meta", {{"tokens_trained", 3072}}}}.dump();
  StudyDataBudget old = study_data_budget_read(dir, "old");
  EXPECT_EQ(old.tokens_planned, 4096);
  EXPECT_EQ(old.tokens_trained, 3072);
  EXPECT_EQ(old.passes, 1);
  EXPECT_EQ(old.passes_used, 1);
  EXPECT_TRUE(old.tokens_by_language.empty());
  std::ofstream(dir / "test.json") << json{{"meta",
                                            {{"tokens_trained", 4096},
                                             {"passes", 3},
                                             {"passes_used", 2},
                                             {"data_exhausted", false},
                                             {"tokens_by_language", {{"eng_Latn", 4000}, {"fra_Latn", 96}}}}}}
                                          .dump();
  const StudyDataBudget now = study_data_budget_read(dir, "new");
  EXPECT_EQ(now.stage, "new");
  EXPECT_EQ(now.passes, 3);
  EXPECT_EQ(now.passes_used, 2);
  EXPECT_EQ(now.tokens_by_language.at("fra_Latn"), 96);
  fs::remove_all(dir);

  json j = study_config_to_json(study_config_defaults());
  EXPECT_EQ(j["pretrain"]["passes"], 1);
  j["pretrain"]["passes"] = 4;
  j["distill"]["passes"] = 2;
  const StudyConfig c = study_config_from_json(j, "test");
  EXPECT_EQ(c.pretrain.passes, 4);
  EXPECT_EQ(c.distill.passes, 2);
  EXPECT_EQ(study_config_to_json(c)["distill"]["passes"], 2);
}

TEST_F(StudyTest, ConfigErrorsExitTwo) {
  const fs::path out = dir_ / "bad_out";
  const auto expect_input_error = [&](const json& j, const std::string& message) {
    const fs::path config = write_config("bad.json", j);
    const CommandResult r = run_study(config, out, dir_ / "bad.log");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out / "study_config.json"));  // nothing written
  };
  json unknown = base_config_;
  unknown["distill"]["bogus_key"] = 1;
  expect_input_error(unknown, "unknown setting 'bogus_key'");
  json top = base_config_;
  top["teachr"] = 1;
  expect_input_error(top, "unknown key 'teachr'");
  json placement = base_config_;
  placement["placements"]["names"] = {"standard_periodic", "middle_out"};
  expect_input_error(placement, "middle_out");
  json no_baseline = base_config_;
  no_baseline["placements"]["names"] = {"reverse_periodic"};
  expect_input_error(no_baseline, "must include standard_periodic");
  json bad_list = base_config_;
  bad_list["placements"]["names"] = {"standard_periodic", "0,9"};
  expect_input_error(bad_list, "9");
  json corpus = base_config_;
  corpus["data"] = (dir_ / "no_such_corpus").string();
  expect_input_error(corpus, "not a corpus directory");
  json owned = base_config_;
  owned["distill"]["out"] = "x";
  expect_input_error(owned, "set by the study itself");
  json exclude = base_config_;
  exclude["compare"] = {{"exclude", {"mnw_Mymr"}}};
  expect_input_error(exclude, "mnw_Mymr is not a language of the corpus");
  json wrong_type = base_config_;
  wrong_type["analysis"]["max_pairs"] = "many";
  expect_input_error(wrong_type, "max_pairs: wrong type");
  json analysis_device = base_config_;
  analysis_device["analysis"]["device"] = "tpu";
  expect_input_error(analysis_device, "analysis.device: 'tpu' is not a device");
  json first_seed = base_config_;
  first_seed["replicates"] = {{"data_seeds", {1, 0}}, {"placements", {"standard_periodic"}}};
  expect_input_error(first_seed, "must equal distill.data_seed");
  json no_base = base_config_;
  no_base["replicates"] = {{"data_seeds", {0, 1}}, {"placements", {"reverse_periodic"}}};
  expect_input_error(no_base, "replicates.placements must include standard_periodic");
  json not_listed = base_config_;
  not_listed["replicates"] = {{"data_seeds", {0, 1}}, {"placements", {"standard_periodic", "sandwich"}}};
  expect_input_error(not_listed, "'sandwich' is not an entry of placements.names");
  json one_seed = base_config_;
  one_seed["replicates"] = {{"data_seeds", {0}}, {"placements", {"standard_periodic"}}};
  expect_input_error(one_seed, "needs at least two data_seeds");
  json packing = base_config_;
  packing["distill"]["packing"] = "hf";
  expect_input_error(packing, "'hf' is not a packing");
  json precision = base_config_;
  precision["distill"]["precision"] = "bf16";  // with the CPU trainer
  expect_input_error(precision, "--precision bf16 needs --device cuda");
}

TEST(StudyCurves, CrossingInterpolatesBetweenValidationPoints) {
  const std::vector<ValidationPoint> curve = {{0, 1.0, 2.0}, {100, 0.5, 1.0}, {200, 0.3, 0.5}, {300, 0.2, 0.4}};
  // 0.75 lies halfway between 1.0 (100 tokens) and 0.5 (200 tokens): the crossing is interpolated, the reach is the
  // first validation point from which the curve stays at or below the target.
  EXPECT_DOUBLE_EQ(*study_reach(curve, 0.75).crossing, 150.0);
  EXPECT_DOUBLE_EQ(*study_reach(curve, 0.75).reach, 200.0);
  EXPECT_DOUBLE_EQ(*study_reach(curve, 1.0).crossing, 100.0);  // reached exactly at a point
  EXPECT_DOUBLE_EQ(*study_reach(curve, 1.0).reach, 100.0);
  EXPECT_DOUBLE_EQ(*study_reach(curve, 5.0).crossing, 0.0);    // already below at the first point
  EXPECT_DOUBLE_EQ(*study_reach(curve, 5.0).reach, 0.0);
  EXPECT_FALSE(study_reach(curve, 0.1).crossing.has_value());  // never reached
  EXPECT_FALSE(study_reach(curve, 0.1).reach.has_value());
}

TEST(StudyCurves, ReachIsWhereTheCurveStaysBelowNotItsFirstDip) {
  // Dips under 0.6 at 200 tokens, back above at 300, below again from 400 on.
  const std::vector<ValidationPoint> curve = {{0, 1, 2.0}, {100, 1, 1.0}, {200, 1, 0.5}, {300, 1, 0.8},
                                              {400, 1, 0.55}, {500, 1, 0.5}};
  const StudyReach r = study_reach(curve, 0.6);
  EXPECT_DOUBLE_EQ(*r.crossing, 180.0);  // 1.0 -> 0.5 between 100 and 200 meets 0.6 at 4/5 of the way
  EXPECT_DOUBLE_EQ(*r.reach, 400.0);
  // Ending above the target: crossed once, never stays.
  const std::vector<ValidationPoint> up = {{0, 1, 1.0}, {100, 1, 0.5}, {200, 1, 0.9}};
  EXPECT_DOUBLE_EQ(*study_reach(up, 0.6).crossing, 80.0);
  EXPECT_FALSE(study_reach(up, 0.6).reach.has_value());
  // A NaN gap counts as above the target.
  const std::vector<ValidationPoint> nan_mid = {{0, 1, 0.1}, {100, 1, NAN}, {200, 1, 0.1}};
  EXPECT_DOUBLE_EQ(*study_reach(nan_mid, 0.5).reach, 200.0);
}

// Two placements over three seeds with hand-made numbers: spreads, and which differences exceed them.
TEST(StudyReplicates, SpreadsAndFindings) {
  const SeedSpread s = seed_spread({0.5, NAN, 0.7, 0.6});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.min, 0.5);
  EXPECT_DOUBLE_EQ(s.max, 0.7);
  EXPECT_NEAR(s.mean, 0.6, 1e-15);
  EXPECT_EQ(seed_spread({NAN}).n, 0);
  EXPECT_TRUE(spreads_disjoint(seed_spread({1, 2}), seed_spread({2.5, 3})));
  EXPECT_FALSE(spreads_disjoint(seed_spread({1, 2}), seed_spread({2, 3})));  // touching ranges overlap
  EXPECT_FALSE(spreads_disjoint(seed_spread({1, 2}), seed_spread({NAN})));

  StudyReplicates r;
  r.data_seeds = {0, 1, 2};
  r.languages = {"eng_Latn", "rus_Cyrl", "mnw_Mymr"};
  r.excluded = {false, false, true};
  const auto seed = [](uint64_t k, double rel, double dbar, double kl0, double kl1, std::optional<double> reach) {
    StudySeedResult x;
    x.seed = k;
    x.relative_kl = rel;
    x.delta_bar = dbar;
    x.kl = {kl0, kl1, 9.0};
    x.ce_gap = {0.1, 0.2, 0.3};
    x.mean_kl = (kl0 + kl1) / 2;
    x.reach_tokens = reach;
    x.total_tokens = 1000;
    return x;
  };
  StudyReplicated base{"standard_periodic", "", {}}, rp{"reverse_periodic", "", {}};
  base.seeds = {seed(0, 1, 0.30, 1.0, 2.0, 1000), seed(1, 1, 0.32, 1.1, 2.1, 900), seed(2, 1, 0.31, 0.9, 2.2, 1000)};
  // R below 1 in every seed; δ̄ ranges overlap; eng D_KL lower beyond the spread, rus within; reach missing once.
  rp.seeds = {seed(0, 0.7, 0.29, 0.5, 2.0, 300), seed(1, 0.8, 0.31, 0.6, 2.15, std::nullopt),
              seed(2, 0.75, 0.28, 0.55, 1.9, 400)};
  r.placements = {base, rp};
  const std::vector<ReplicateFinding> f = replicate_findings(r);
  const auto find = [&](const std::string& metric) -> const ReplicateFinding* {
    for (const ReplicateFinding& x : f)
      if (x.metric == metric) return &x;
    return nullptr;
  };
  ASSERT_NE(find("R"), nullptr);
  EXPECT_TRUE(find("R")->exceeds) << find("R")->text;
  EXPECT_DOUBLE_EQ(find("R")->spread.min, 0.7);
  EXPECT_FALSE(find("delta_bar")->exceeds) << find("delta_bar")->text;
  EXPECT_FALSE(find("reach_share")->exceeds);  // one seed never reached: no claim
  EXPECT_NE(find("reach_share")->text.find("no claim"), std::string::npos);
  ASSERT_NE(find("kl:eng_Latn"), nullptr);
  EXPECT_TRUE(find("kl:eng_Latn")->exceeds);
  EXPECT_EQ(find("kl:rus_Cyrl"), nullptr);  // overlapping ranges are not listed
  EXPECT_EQ(find("kl:mnw_Mymr"), nullptr);  // excluded languages are not compared
  // mean D_KL: rp [1.225, 1.375] vs base [1.5, 1.6]: disjoint, lower.
  EXPECT_TRUE(find("mean_kl")->exceeds) << find("mean_kl")->text;
  const nlohmann::json j = replicates_to_json(r);
  EXPECT_EQ(j["placements"][1]["R"]["n"], 3);
  EXPECT_EQ(j["placements"][1]["reach_share"]["n"], 2);
  EXPECT_NE(replicates_csv(r).find("reverse_periodic,1,reach_tokens,,\n"), std::string::npos);
}

}  // namespace
}  // namespace hlm
