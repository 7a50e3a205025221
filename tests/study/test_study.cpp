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

#include "study/study_curves.h"
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

CommandResult run_study(const fs::path& config, const fs::path& out, const fs::path& log) {
  const std::string cmd = std::string(HLM_BINARY) + " study --config " + config.string() + " --out " + out.string() +
                          " > " + log.string() + " 2>&1";
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
  json precision = base_config_;
  precision["distill"]["precision"] = "bf16";  // with the CPU trainer
  expect_input_error(precision, "--precision bf16 needs --device cuda");
}

TEST(StudyCurves, ReachInterpolatesBetweenValidationPoints) {
  const std::vector<ValidationPoint> curve = {{0, 1.0, 2.0}, {100, 0.5, 1.0}, {200, 0.3, 0.5}, {300, 0.2, 0.4}};
  // 0.75 lies halfway between 1.0 (100 tokens) and 0.5 (200 tokens).
  EXPECT_DOUBLE_EQ(*study_tokens_to_reach(curve, 0.75), 150.0);
  EXPECT_DOUBLE_EQ(*study_tokens_to_reach(curve, 1.0), 100.0);  // reached exactly at a point
  EXPECT_DOUBLE_EQ(*study_tokens_to_reach(curve, 5.0), 0.0);    // already below at the first point
  EXPECT_FALSE(study_tokens_to_reach(curve, 0.1).has_value());  // never reached
}

}  // namespace
}  // namespace hlm
