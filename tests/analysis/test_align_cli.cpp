// `hybridlm align` and `hybridlm locality` end to end with the bytes tokenizer on tiny models of every architecture
// (tests/golden/* and a qwen3_hybrid student converted here), on a parallel set written by the test. One language
// ("xxx_Latn") repeats the English text, so its SoftCKA must be 1 at every layer and point.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/align_fixture.h"
#include "support/golden.h"
#include "support/run_binary.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using test::run_hybridlm;

class AlignCli : public ::testing::TestWithParam<std::string> {};

TEST_P(AlignCli, WritesSoftCkaForEveryLayerAndPoint) {
  test::ScratchDir scratch("align");
  const fs::path set = test::write_tiny_parallel_set(scratch.path());
  fs::path model = test::golden_dir(GetParam());
  if (GetParam() == "qwen3_hybrid") {  // the converted student: layer 1 keeps attention, layer 0 becomes GDN
    model = scratch.path() / "student";
    const auto c = run_hybridlm("convert --teacher " + test::golden_dir("qwen3_tied").string() +
                                " --placement 1 --out " + model.string());
    ASSERT_EQ(c.exit_code, 0) << c.err;
  }
  const fs::path out = scratch.path() / "align";
  const auto r = run_hybridlm("align --model " + model.string() + " --tokenizer bytes --parallel " + set.string() +
                              " --langs fra_Latn,deu_Latn,xxx_Latn --points attn_in,attn_out,attn_delta,mlp_delta --out " +
                              out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("align: unit 5/5"), std::string::npos) << r.err;  // progress

  const auto settings = nlohmann::json::parse(test::read_text(out / "settings.json"));
  const int layers = settings["layers"].get<int>();
  EXPECT_EQ(settings["sigma_mode"], "median");
  EXPECT_EQ(settings["counts"]["fra_Latn"]["pairs"], 5);
  EXPECT_EQ(settings["counts"]["deu_Latn"]["pairs"], 4);
  EXPECT_EQ(settings["counts"]["deu_Latn"]["anchor_tokens"], 15 + 15 + 17 + 13);  // English bytes of its 4 units
  for (const char* point : {"attn_in", "attn_out", "attn_delta", "mlp_delta"}) {
    ASSERT_EQ(settings["sigma"][point].size(), size_t(layers)) << point;
    for (const auto& sigma : settings["sigma"][point]) EXPECT_GT(sigma.get<double>(), 0.0) << point;
    EXPECT_TRUE(fs::exists(out / ("softcka_" + std::string(point) + ".svg"))) << point;
  }

  std::string header;
  const auto rows = test::read_softcka_csv(out / "softcka.csv", &header);
  EXPECT_EQ(header, "layer,point,lang,softcka");
  EXPECT_EQ(rows.size(), size_t(layers) * 4 * 4);  // layers × points × (3 languages + mean)
  // Tolerance 1e-7: the same sentence at another place in the packed batch gets states that differ in fp32 rounding
  // (GEMM blocking), and the kernels take fp32 dot products (~1e-7 relative), so SoftCKA ≤ 1 and "identical → 1"
  // hold to that level; the CSV prints 8 decimals.
  constexpr double kFp32Tol = 1e-7;
  for (const auto& [key, value] : rows) {
    ASSERT_TRUE(std::isfinite(value)) << key;
    EXPECT_GE(value, 0.0) << key;
    EXPECT_LE(value, 1.0 + kFp32Tol) << key;
    if (key.ends_with("/xxx_Latn")) {
      EXPECT_NEAR(value, 1.0, kFp32Tol) << key;  // the English text itself
    }
  }
  // The mean row is the mean of the three languages.
  const double mean = (rows.at("0/attn_out/fra_Latn") + rows.at("0/attn_out/deu_Latn") + rows.at("0/attn_out/xxx_Latn")) / 3;
  EXPECT_NEAR(rows.at("0/attn_out/mean"), mean, 1e-8);  // the CSV prints 8 decimals
  // Different languages are not identical to English somewhere.
  EXPECT_LT(rows.at("0/attn_in/fra_Latn"), 0.999);
}

INSTANTIATE_TEST_SUITE_P(Architectures, AlignCli,
                         ::testing::Values("qwen3_tied", "granite", "olmo_hybrid_tiny", "qwen3_hybrid"));

TEST(AlignCli, HybridPlotMarksFullAttentionLayersAndLinearKernelRuns) {
  test::ScratchDir scratch("align");
  const fs::path set = test::write_tiny_parallel_set(scratch.path()), out = scratch.path() / "align";
  const auto r = run_hybridlm("align --model " + test::golden_dir("olmo_hybrid_tiny").string() +
                              " --tokenizer bytes --parallel " + set.string() +
                              " --langs fra_Latn --points attn_delta --kernel linear --max-pairs 3 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto settings = nlohmann::json::parse(test::read_text(out / "settings.json"));
  EXPECT_EQ(settings["layer_kinds"], "RRRA");
  EXPECT_EQ(settings["kernel"], "linear");
  EXPECT_EQ(settings["counts"]["fra_Latn"]["pairs"], 3);
  const std::string svg = test::read_text(out / "softcka_attn_delta.svg");
  size_t markers = 0;
  for (size_t p = svg.find("stroke-dasharray=\"2,3\""); p != std::string::npos; p = svg.find("stroke-dasharray=\"2,3\"", p + 1))
    ++markers;
  EXPECT_EQ(markers, 1u);  // layer 3, the one full-attention layer
}

TEST(AlignCli, BadInputExitsTwo) {
  test::ScratchDir scratch("align");
  const fs::path set = test::write_tiny_parallel_set(scratch.path());
  const std::string base = "align --model " + test::golden_dir("olmo_hybrid_tiny").string() +
                           " --tokenizer bytes --parallel " + set.string() + " --out " + (scratch.path() / "o").string();
  const struct {
    std::string args, message;
  } cases[] = {
      {" --langs fra_Latn --points logits", "not a per-layer capture point"},
      {" --langs bod_Tibt", "no unit holds both eng_Latn and bod_Tibt"},
      {" --langs fra_Latn --sigma wide", "--sigma"},
      {" --langs eng_Latn", "is the anchor language"},
  };
  for (const auto& c : cases) {
    const auto r = run_hybridlm(base + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(LocalityCli, SharesPerFullAttentionLayerForSeveralModels) {
  test::ScratchDir scratch("locality");
  const fs::path set = test::write_tiny_parallel_set(scratch.path()), out = scratch.path() / "loc";
  const std::string hybrid = test::golden_dir("olmo_hybrid_tiny").string(), dense = test::golden_dir("qwen3_tied").string();
  const auto r = run_hybridlm("locality --model " + hybrid + " --model " + dense + " --tokenizer bytes --data " +
                              set.string() + " --langs eng_Latn,fra_Latn --k 1,4,64 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::istringstream csv(test::read_text(out / "locality.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "model,layer,lang,k,share");
  // {model/layer/lang: shares for k = 1, 4, 64}
  std::map<std::string, std::vector<double>> shares;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::istringstream row(line);
    for (std::string x; std::getline(row, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 5u) << line;
    shares[f[0] + "/" + f[1] + "/" + f[2]].push_back(std::stod(f[4]));
  }
  // olmo_hybrid_tiny: layer 3 only; qwen3_tied: layers 0 and 1; two languages each.
  EXPECT_EQ(shares.size(), size_t(1 * 2 + 2 * 2));
  EXPECT_TRUE(shares.count(hybrid + "/3/fra_Latn"));
  for (const auto& [key, s] : shares) {
    ASSERT_EQ(s.size(), 3u) << key;
    EXPECT_GT(s[0], 0.0) << key;
    EXPECT_LE(s[0], s[1] + 1e-12) << key;      // wider windows hold at least as much mass
    EXPECT_LT(s[0], 1.0) << key;               // a query past the first token spreads its mass
    EXPECT_NEAR(s[2], 1.0, 1e-7) << key;       // every sentence is shorter than 64 bytes (8 decimals printed)
  }
  for (int k : {1, 4, 64}) {
    const std::string svg = test::read_text(out / ("locality_k" + std::to_string(k) + ".svg"));
    EXPECT_NE(svg.find(hybrid), std::string::npos) << k;  // one legend entry per model
    EXPECT_NE(svg.find(dense), std::string::npos) << k;
  }
}

}  // namespace
}  // namespace hlm
