// `hybridlm inspect` and `hybridlm run` end to end on the committed golden models.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "support/golden.h"
#include "support/help_examples.h"
#include "support/random.h"
#include "support/run_binary.h"

using namespace hlm;
using test::run_hybridlm;

TEST(CliInspect, TextAndJsonOnEveryGoldenModel) {
  for (const char* name : {"qwen3_tied", "qwen3_untied", "qwen3_yarn", "granite"}) {
    const std::string dir = test::golden_dir(name).string();
    auto text = run_hybridlm("inspect " + dir);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("layout"), std::string::npos);
    auto json = run_hybridlm("inspect --json " + dir);
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const auto j = nlohmann::json::parse(json.out);
    EXPECT_EQ(j["layout"].get<std::string>(), std::string(static_cast<size_t>(j["layers"].get<int>()), 'A'));
    int64_t sum = 0;
    for (const auto& [group, n] : j["parameters_by_group"].items()) sum += n.get<int64_t>();
    EXPECT_EQ(sum, j["parameters"].get<int64_t>());
    EXPECT_EQ(j["layer_types"].size(), j["layers"].get<size_t>());
    EXPECT_EQ(j["tensors"].empty(), false);
  }
}

TEST(CliInspect, TiedModelHasNoLmHeadGroup) {
  auto r = run_hybridlm("inspect --json " + test::golden_dir("qwen3_tied").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["parameters_by_group"].contains("lm_head"));
}

TEST(CliRun, PrintsTopKAndDumpsCapturePointsMatchingHF) {
  const std::string name = "qwen3_untied";
  const SafetensorsFile golden = test::open_golden(name);
  const TokenBatch batch = test::golden_batch(golden);
  std::string ids_args;
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    std::string ids;
    for (int64_t t = batch.cu_seqlens[s]; t < batch.cu_seqlens[s + 1]; ++t)
      ids += (ids.empty() ? "" : ",") + std::to_string(batch.ids[t]);
    ids_args += " --ids " + ids;
  }
  test::ScratchDir scratch("run");
  const auto dump = scratch.path() / "dump.safetensors";
  auto r = run_hybridlm("run " + test::golden_dir(name).string() + ids_args + " --top-k 3 --dump " + dump.string() +
                        " --points attn_in,attn_out,logits");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sequence 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("logprob"), std::string::npos);
  const SafetensorsFile dumped = SafetensorsFile::open(dump);
  for (const char* tensor : {"attn_in.0", "attn_out.2", "logits"}) {
    ASSERT_NE(dumped.find(tensor), nullptr) << tensor;
    const Tensor got = dumped.tensor_f32(tensor), expect = golden.tensor_f32(tensor);
    ASSERT_EQ(got.numel(), expect.numel());
    EXPECT_LE(test::max_rel_error(got.f32(), expect.f32(), static_cast<size_t>(got.numel())), 1e-5) << tensor;
  }
  EXPECT_EQ(dumped.find("mlp_delta.0"), nullptr);  // only the points asked for
  EXPECT_EQ(dumped.tensor("logits").dim(0), batch.total_tokens());
}

// Each help lists an option, and its first runnable example (tests/golden/ paths pointed at the goldens) runs.
TEST(CliRun, HelpExamplesRun) {
  const std::string goldens = std::string(HLM_GOLDEN_DIR) + "/";
  struct Case {
    const char* command;
    const char* option;
    size_t example;
    const char* expect_out;  // in the example's output
  };
  for (const Case& c : {Case{"run", "--top-k", 0, "top-5"}, Case{"inspect", "--context", 2, "32768"}}) {
    const auto help = run_hybridlm(std::string(c.command) + " --help");
    EXPECT_EQ(help.exit_code, 0) << c.command;
    EXPECT_NE(help.out.find(c.option), std::string::npos) << c.command << ": " << help.out;
    const std::vector<std::string> examples = test::help_examples(help.out);
    ASSERT_GT(examples.size(), c.example) << c.command << ": " << help.out;
    const std::string example = test::replace_all(examples[c.example], "tests/golden/", goldens);
    ASSERT_EQ(example.rfind(c.command, 0), 0u) << example;
    const auto r = run_hybridlm(example);
    EXPECT_EQ(r.exit_code, 0) << example << "\n" << r.err;
    EXPECT_NE(r.out.find(c.expect_out), std::string::npos) << example << "\n" << r.out;
  }
}
