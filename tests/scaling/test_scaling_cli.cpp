// `hybridlm scaling fit` end to end: outputs and their keys, and bad input as exit code 2 with a clear message.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "scaling/scaling_fixture.h"
#include "support/run_binary.h"

namespace hlm {
namespace {

void write_points(const std::filesystem::path& path, const std::vector<ScalingPoint>& points) {
  std::ofstream f(path);
  f << "arch,N,D,loss\n";
  for (const ScalingPoint& p : points) f << p.arch << ',' << p.N << ',' << p.D << ',' << p.loss << '\n';
}

TEST(ScalingCli, FitWritesEveryOutput) {
  test::ScratchDir dir("scaling-cli");
  auto points = test::synthetic_points("transformer", {1.8, 400.0, 0.34, 900.0, 0.30}, {1e6, 3e6, 1e7, 3e7},
                                       {1e8, 1e9, 1e10}, 0.005);
  const auto hybrid = test::synthetic_points("hybrid", {1.8, 380.0, 0.33, 600.0, 0.30}, {1e6, 3e6, 1e7, 3e7},
                                             {1e8, 1e9, 1e10}, 0.005);
  points.insert(points.end(), hybrid.begin(), hybrid.end());
  write_points(dir.path() / "runs.csv", points);
  const auto out = dir.path() / "fit";
  const test::RunResult r = test::run_hybridlm(
      "scaling fit --points " + (dir.path() / "runs.csv").string() + " --out " + out.string() +
      " --grid olmo:2 --bootstrap 6 --seed 1 --fixed-exponents 0.3 --flops 1e16,1e18 --savings-n 1e7,1e8"
      " --target-loss 2.3 --weights sqrt_flops");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("bootstrap hybrid: 12/12"), std::string::npos) << r.err;  // progress (free + fixed)
  for (const char* f : {"fit.json", "parameters.csv", "parameters.md", "compute_optimal.csv", "compute_optimal.md",
                        "token_savings.csv", "token_savings.md", "frontier.svg", "fits_transformer.svg",
                        "fits_hybrid.svg", "options.json"})
    EXPECT_TRUE(std::filesystem::exists(out / f)) << f;
  const nlohmann::json fit = nlohmann::json::parse(test::read_text(out / "fit.json"));
  EXPECT_EQ(fit["reference"], "transformer");
  EXPECT_EQ(fit["options"]["weights"], "sqrt_flops");
  for (const char* arch : {"transformer", "hybrid"}) {
    const nlohmann::json& a = fit["architectures"][arch];
    for (const char* key : {"E", "A", "alpha", "B", "beta", "a_opt", "b_opt", "r2"}) {
      ASSERT_TRUE(a[key].is_number()) << arch << " " << key;
      ASSERT_TRUE(a["ci"][key].is_array()) << arch << " " << key;
      EXPECT_EQ(a["ci"][key].size(), 2u);
      EXPECT_LE(a["ci"][key][0].get<double>(), a["ci"][key][1].get<double>()) << arch << " " << key;
    }
    EXPECT_EQ(a["fixed_exponent"]["alpha"], 0.3);
    EXPECT_NEAR(a["a_opt"].get<double>() + a["b_opt"].get<double>(), 1.0, 1e-12);
  }
  EXPECT_EQ(fit["compute_optimal"].size(), 4u);
  EXPECT_EQ(fit["token_savings"].size(), 4u);
  const std::string md = test::read_text(out / "token_savings.md");
  EXPECT_NE(md.find("| N | transformer D | hybrid D | Savings |"), std::string::npos) << md;
  const nlohmann::json options = nlohmann::json::parse(test::read_text(out / "options.json"));
  EXPECT_EQ(options["bootstrap"], 6);
  EXPECT_EQ(options["target_loss"], 2.3);
}

TEST(ScalingCli, BadInputExitsWithTwo) {
  test::ScratchDir dir("scaling-cli-bad");
  const auto csv = dir.path() / "runs.csv";
  const auto run = [&](const std::string& text, const std::string& extra = "") {
    std::ofstream(csv) << text;
    return test::run_hybridlm("scaling fit --points " + csv.string() + " --out " + (dir.path() / "o").string() + " " +
                              extra);
  };
  test::RunResult r = run("arch,N,loss\nt,1e6,3\n");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing column \"D\""), std::string::npos) << r.err;
  r = run("arch,N,D,loss\nt,1e6,1e9,-3\n");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("column loss must be a finite positive number"), std::string::npos) << r.err;
  r = run("arch,N,D,loss\nt,1e6,1e9,3\nt,2e6,1e9,2.9\nt,4e6,1e9,2.8\nt,4e6,2e9,2.7\n");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("architecture \"t\" has 4 points, fewer than the 5 parameters"), std::string::npos) << r.err;
  r = run("arch,N,D,loss\nt,1e6,1e9,3\n", "--weights cubic");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--weights"), std::string::npos) << r.err;
  r = run("arch,N,D,loss\nt,1e6,1e9,3\n", "--flops 1e18,abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--flops: 'abc' is not a number"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "o")) << "nothing is written on bad input";
}

TEST(ScalingCli, LadderPlanAndBadConfig) {
  test::ScratchDir dir("scaling-ladder-cli");
  const auto config = dir.path() / "ladder.json";
  std::ofstream(config) << R"({"format": "hybridlm-scaling-ladder", "data": "corpus", "tokenizer": "bytes",
    "sizes": [{"name": "a", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
               "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32}],
    "tokens_per_param": [1, 2, 4], "train": {"seq_len": 32, "batch_rows": 2, "micro_batch_rows": 2}})";
  test::RunResult r = test::run_hybridlm("scaling ladder --config " + config.string() + " --plan");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* run : {"transformer-a-tpp1", "hybrid-a-tpp2", "gdn-a-tpp4"})
    EXPECT_NE(r.out.find(run), std::string::npos) << run << "\n" << r.out;
  EXPECT_NE(r.out.find("not found; its coverage of the runs is not checked"), std::string::npos) << r.out;
  // --architectures: a subset of the config's, checked like the config's own list.
  r = test::run_hybridlm("scaling ladder --config " + config.string() + " --plan --architectures gdn,hybrid");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("transformer-a-tpp1"), std::string::npos) << r.out;
  for (const char* run : {"hybrid-a-tpp1", "gdn-a-tpp4"}) EXPECT_NE(r.out.find(run), std::string::npos) << run;
  EXPECT_NE(r.out.find("6 runs,"), std::string::npos) << r.out;
  // A fit reference outside the subset is dropped (else the subset's fit would stop with an input error).
  std::ofstream(config) << R"({"format": "hybridlm-scaling-ladder", "data": "corpus", "tokenizer": "bytes",
    "sizes": [{"name": "a", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
               "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32}],
    "tokens_per_param": [1, 2, 4], "train": {"seq_len": 32, "batch_rows": 2, "micro_batch_rows": 2},
    "fit": {"reference": "transformer"}})";
  r = test::run_hybridlm("scaling ladder --config " + config.string() + " --plan --architectures gdn");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fit.reference 'transformer' is not among --architectures"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("\"reference\""), std::string::npos) << r.out;
  r = test::run_hybridlm("scaling ladder --config " + config.string() + " --plan --architectures mamba");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("with --architectures"), std::string::npos) << r.err;
  std::ofstream(config) << R"({"format": "hybridlm-scaling-ladder", "data": "corpus", "sizes": [],
    "tokens_per_param": [1]})";
  r = test::run_hybridlm("scaling ladder --config " + config.string() + " --out " + (dir.path() / "o").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sizes must be a non-empty array"), std::string::npos) << r.err;
  r = test::run_hybridlm("scaling ladder --config " + (dir.path() / "missing.json").string() + " --out x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--config: cannot open"), std::string::npos) << r.err;
}

TEST(ScalingCli, HelpHasExamples) {
  const test::RunResult fit = test::run_hybridlm("scaling fit --help");
  EXPECT_EQ(fit.exit_code, 0);
  EXPECT_NE(fit.out.find("Examples:"), std::string::npos);
  const test::RunResult ladder = test::run_hybridlm("scaling ladder --help");
  EXPECT_EQ(ladder.exit_code, 0);
  EXPECT_NE(ladder.out.find("--device"), std::string::npos);
}

}  // namespace
}  // namespace hlm
