// `hybridlm convert` and `hybridlm placements` end to end: the student written from tests/golden/qwen3_tied is checked
// with `hybridlm inspect --json`; bad input exits 2 with one clear message and leaves no output behind.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/help_examples.h"
#include "support/run_binary.h"

using namespace hlm;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

std::string tied() { return test::golden_dir("qwen3_tied").string(); }

// Nothing but `keep` in dir (no temporary directories left by a failed or successful run).
void expect_only(const fs::path& dir, const std::set<std::string>& keep) {
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_TRUE(keep.count(entry.path().filename().string())) << "left " << entry.path();
}

}  // namespace

TEST(CliConvert, WritesStudentThatInspectReads) {
  test::ScratchDir scratch("convert");
  const fs::path out = scratch.path() / "student";
  const auto r = run_hybridlm("convert --teacher " + tied() + " --placement reverse_periodic --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layout       AR"), std::string::npos) << r.out;  // F = round(0.25 * 2) = 1, layer 0
  EXPECT_NE(r.out.find("round(0.25 x 2)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.1.self_attn.q_norm.weight"), std::string::npos) << r.out;  // dropped, listed
  expect_only(scratch.path(), {"student"});
  expect_only(out, {"config.json", "model.safetensors", "convert.json"});

  const auto inspect = run_hybridlm("inspect --json " + out.string());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const auto j = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(j["model_type"], "qwen3_hybrid");
  EXPECT_EQ(j["layout"], "AR");
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_TRUE(j["parameters_by_group"].contains("lm_head"));
  EXPECT_TRUE(j["parameters_by_group"].contains("linear_attention"));
  EXPECT_TRUE(j["unused_tensors"].empty());
  EXPECT_TRUE(j["unknown_config_keys"].empty());
  // GDN layer 1: 4 heads of 16 for keys and values (H x d_h of the teacher), conv 4.
  EXPECT_EQ(j["memory"]["linear_attention"]["state_elements"], 4 * 16 * 16);

  const auto settings = nlohmann::json::parse(test::read_text(out / "convert.json"));
  EXPECT_EQ(settings["teacher"], tied());
  EXPECT_EQ(settings["placement"], "reverse_periodic");
  EXPECT_EQ(settings["full_layers"], nlohmann::json::array({0}));
  EXPECT_EQ(settings["full_fraction_requested"], 0.25);
  EXPECT_EQ(settings["full_fraction"], 0.5);
  EXPECT_EQ(settings["seed"], 0);
  EXPECT_EQ(settings["neg_eigval"], false);
  EXPECT_EQ(settings["layout"], "AR");
}

TEST(CliConvert, CustomListSeedAndNegEigval) {
  test::ScratchDir scratch("convert");
  const fs::path out = scratch.path() / "s";
  const auto r = run_hybridlm("convert --teacher " + tied() + " --placement 1 --out " + out.string() +
                              " --neg-eigval --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto config = nlohmann::json::parse(test::read_text(out / "config.json"));
  EXPECT_EQ(config["layer_types"], nlohmann::json::array({"linear_attention", "full_attention"}));
  EXPECT_EQ(config["linear_allow_neg_eigval"], true);
  const auto settings = nlohmann::json::parse(test::read_text(out / "convert.json"));
  EXPECT_EQ(settings["placement"], "custom");
  EXPECT_EQ(settings["seed"], 7);
  EXPECT_EQ(settings["full_fraction_requested"], nullptr);
}

TEST(CliConvert, RefusesNonEmptyOutUnlessForced) {
  test::ScratchDir scratch("convert");
  const fs::path out = scratch.path() / "s";
  fs::create_directories(out);
  std::ofstream(out / "keep.txt") << "mine";
  const std::string args = "convert --teacher " + tied() + " --placement sandwich --full 1 --out " + out.string();
  const auto refused = run_hybridlm(args);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_TRUE(fs::exists(out / "keep.txt"));
  const auto forced = run_hybridlm(args + " --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  expect_only(out, {"config.json", "model.safetensors", "convert.json"});
  expect_only(scratch.path(), {"s"});
  // An existing empty directory is fine without --force.
  const fs::path empty = scratch.path() / "empty";
  fs::create_directories(empty);
  EXPECT_EQ(run_hybridlm("convert --teacher " + tied() + " --placement 0 --out " + empty.string()).exit_code, 0);
}

TEST(CliConvert, BadInputExitsTwoWithoutOutput) {
  test::ScratchDir scratch("convert");
  const fs::path out = scratch.path() / "s";
  const std::string base = "convert --out " + out.string() + " ";
  const std::pair<std::string, std::string> cases[] = {
      {"--teacher " + tied() + " --placement middle", "unknown placement 'middle'"},
      {"--teacher " + tied() + " --placement 0,2", "out of range [0, 2)"},
      {"--teacher " + tied() + " --placement 1,1", "listed twice"},
      {"--teacher " + tied() + " --placement 0,1 --full 1", "has 2 layers but 1"},
      {"--teacher " + tied() + " --placement sandwich --full 3", "[1, 2]"},
      {"--teacher /nonexistent/teacher --placement sandwich", "/nonexistent/teacher"},
      {"--teacher " + test::golden_dir("olmo_hybrid_tiny").string() + " --placement sandwich", "olmo_hybrid"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_hybridlm(base + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": stderr lacks '" << needle << "': " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    expect_only(scratch.path(), {});
  }
  // --full and --full-fraction exclude each other (a CLI11 parse error, also exit 2).
  EXPECT_EQ(run_hybridlm(base + "--teacher " + tied() + " --placement sandwich --full 1 --full-fraction 0.5").exit_code,
            2);
}

TEST(CliPlacements, JsonHasTheFivePlacements) {
  const auto r = run_hybridlm("placements --layers 36 --full 9 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.size(), 5u);
  EXPECT_EQ(j["standard_periodic"], nlohmann::json::array({3, 7, 11, 15, 19, 23, 27, 31, 35}));
  EXPECT_EQ(j["reverse_periodic"], nlohmann::json::array({0, 4, 8, 12, 16, 20, 24, 28, 32}));
  EXPECT_EQ(j["sandwich"], nlohmann::json::array({0, 1, 2, 3, 4, 32, 33, 34, 35}));
  EXPECT_EQ(j["interleaved_sandwich"], nlohmann::json::array({0, 1, 2, 10, 18, 25, 33, 34, 35}));
  EXPECT_EQ(j["endpoint_spread"], nlohmann::json::array({0, 4, 9, 13, 18, 22, 26, 31, 35}));
  const auto fraction = run_hybridlm("placements --layers 36 --full-fraction 0.25 --json");
  ASSERT_EQ(fraction.exit_code, 0) << fraction.err;
  EXPECT_EQ(nlohmann::json::parse(fraction.out), j);
}

TEST(CliPlacements, TextTableAndHelp) {
  const auto r = run_hybridlm("placements --layers 12 --full-fraction 0.25");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("F = 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RRRARRRARRRA  3,7,11"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ARRRARRRARRR  0,4,8"), std::string::npos) << r.out;
  const auto help = run_hybridlm("placements --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* name : {"standard_periodic", "reverse_periodic", "sandwich", "interleaved_sandwich",
                           "endpoint_spread", "halves up", "Examples", "--full-fraction"})
    EXPECT_NE(help.out.find(name), std::string::npos) << name;
  // Its second example (40 layers at a quarter) runs: F = round(0.25 * 40) = 10.
  const std::vector<std::string> examples = test::help_examples(help.out);
  ASSERT_GE(examples.size(), 2u) << help.out;
  EXPECT_EQ(examples[1], "placements --layers 40 --full-fraction 0.25");
  const auto example = run_hybridlm(examples[1]);
  EXPECT_EQ(example.exit_code, 0) << example.err;
  EXPECT_NE(example.out.find("F = 10"), std::string::npos) << example.out;
}

TEST(CliPlacements, BadInputExitsTwo) {
  for (const char* args : {"placements --layers 12", "placements --layers 12 --full 13",
                           "placements --layers 12 --full-fraction 0.01", "placements --full 3",
                           "placements --layers 12 --full 3 --full-fraction 0.25"}) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
}
