// The paper's values (evals/synth/synth_paper_values.h) and the sweep reports that print them beside ours
// (synth_report.h): a few cells checked against the seed's Tables 15–17, and the CSV, Markdown and SVG of a sweep
// built from fixed results carry both numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "evals/synth/synth_report.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

// A finished pair whose accuracy at difficulty d is 0.5 + d / 1000 (distinct from every paper value below).
SynthPairResult fake_pair(const SynthConfig& c, SynthTask task, SynthArch arch) {
  SynthPairResult r;
  r.task = synth_task_name(task);
  r.arch = synth_arch_spec(arch).name;
  for (int64_t d : c.eval_difficulties) {
    SynthDifficultyResult e;
    e.difficulty = d;
    e.m = task == SynthTask::Recall ? d : task == SynthTask::StateBasedRecall ? synth_state_based_recall_m(c, d) : 0;
    e.items = c.eval_items;
    e.accuracy = 0.5 + static_cast<double>(d) / 1000.0;
    e.moved_accuracy = task == SynthTask::Recall ? NAN : 0.25;
    e.moved_items = task == SynthTask::Recall ? 0 : 10;
    e.in_training_range = c.train_min <= d && d <= c.train_max;
    r.eval.push_back(e);
  }
  return r;
}

}  // namespace

TEST(SynthPaperValues, CellsMatchTheSeedTables) {
  // Values as printed in ../shared/seeds/001_67ba11cd3345c395.txt (Tables 15, 16, 17).
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateTracking, SynthArch::Transformer, 4), 0.51172);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateTracking, SynthArch::GdnPos, 32), 0.64453);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateTracking, SynthArch::HybridPos, 128), 0.36328);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::Recall, SynthArch::GdnNeg, 64), 0.83203);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::Recall, SynthArch::Transformer, 128), 0.96484);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateBasedRecall, SynthArch::GdnPos, 8), 0.99219);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateBasedRecall, SynthArch::HybridNeg, 128), 1.0);
  EXPECT_EQ(synth_paper_accuracy(SynthTask::StateBasedRecall, SynthArch::Transformer, 64), 0.62891);
  EXPECT_FALSE(synth_paper_accuracy(SynthTask::Recall, SynthArch::GdnNeg, 5).has_value());
  EXPECT_FALSE(synth_paper_accuracy(SynthTask::StateTracking, SynthArch::GdnNeg, 256).has_value());
  // Each table has the six rows 4..128 once, every value a probability and a multiple of 1/256 (the paper's
  // evaluation size as we read it): a mistyped digit would almost surely break this.
  std::set<std::pair<int, int64_t>> seen;
  for (const SynthPaperRow& row : synth_paper_rows()) {
    EXPECT_TRUE(seen.insert({static_cast<int>(row.task), row.difficulty}).second);
    for (double v : row.accuracy) {
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
      // Printed to 5 decimals: k/256 is within half a unit of the 5th decimal (5e-6, reached exactly by
      // 0.171875 -> 0.17188) of the printed value; 1e-9 covers the binary representation of the decimals.
      EXPECT_NEAR(v * 256.0, std::round(v * 256.0), 256.0 * (5e-6 + 1e-9)) << v;
    }
  }
  EXPECT_EQ(seen.size(), 18u);
}

TEST(SynthReport, PrintsThePapersValueBesideOurs) {
  const SynthConfig c = synth_config_parse(nlohmann::json::parse(R"({"train_min": 2, "train_max": 16})"), "cfg");
  std::vector<SynthPairResult> results;
  for (SynthTask task : {SynthTask::StateTracking, SynthTask::Recall, SynthTask::StateBasedRecall})
    for (const SynthArchSpec& a : synth_arch_specs()) results.push_back(fake_pair(c, task, a.arch));
  test::ScratchDir dir("synth-report");
  synth_write_reports(dir.path(), c, results);

  // CSV: the paper_accuracy column holds the paper's cell.
  const std::string st_csv = test::read_text(dir.path() / "state_tracking.csv");
  EXPECT_NE(st_csv.find("state_tracking,transformer,4,0,1,1000,0.504000,10,0.250000,0.511720\n"), std::string::npos)
      << st_csv;
  const std::string rc_csv = test::read_text(dir.path() / "recall.csv");
  EXPECT_NE(rc_csv.find("recall,gdn_neg,64,64,0,1000,0.564000,0,,0.832030\n"), std::string::npos) << rc_csv;
  // Markdown: "ours / paper" cells, in the main table only (the paper has no moved-items table).
  const std::string sbr_md = test::read_text(dir.path() / "state_based_recall.md");
  EXPECT_NE(sbr_md.find("| 8 (8) * | 0.508 / 0.750 | 0.508 / 1.000 | 0.508 / 0.992 | 0.508 / 1.000 | 0.508 / 0.992 |"),
            std::string::npos)
      << sbr_md;
  EXPECT_NE(sbr_md.find("| 8 (8) * | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 |"), std::string::npos) << sbr_md;
  EXPECT_NE(sbr_md.find("Olmo Hybrid Table 17"), std::string::npos);
  EXPECT_NE(test::read_text(dir.path() / "results.md").find("| 128 | 0.628 / 0.965 |"), std::string::npos);
  // SVG: one dashed paper line per architecture, in the colour of ours.
  const std::string svg = test::read_text(dir.path() / "recall.svg");
  EXPECT_NE(svg.find("Transformer (paper)"), std::string::npos);
  EXPECT_NE(svg.find("Hybrid pos. eig. (paper)"), std::string::npos);
  EXPECT_NE(svg.find("stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6,4\""), std::string::npos) << svg;

  // A config whose task is not the paper's (parity: 2 variables) shows no paper value for it.
  SynthConfig parity = c;
  parity.variables = 2;
  EXPECT_FALSE(synth_paper_cell(parity, SynthTask::StateTracking, SynthArch::Transformer, 4).has_value());
  EXPECT_TRUE(synth_paper_cell(parity, SynthTask::Recall, SynthArch::Transformer, 4).has_value());
  SynthConfig fixed_m = c;
  fixed_m.state_based_recall_m = 64;
  EXPECT_FALSE(synth_paper_cell(fixed_m, SynthTask::StateBasedRecall, SynthArch::HybridNeg, 8).has_value());
  test::ScratchDir dir2("synth-report-parity");
  synth_write_reports(dir2.path(), parity, {fake_pair(parity, SynthTask::StateTracking, SynthArch::GdnNeg)});
  const std::string parity_md = test::read_text(dir2.path() / "state_tracking.md");
  EXPECT_EQ(parity_md.find(" / "), std::string::npos) << parity_md;
  EXPECT_NE(parity_md.find("Paper's values: none"), std::string::npos);
}
