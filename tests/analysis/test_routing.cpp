// MoE routing divergence (analysis/routing.h): the JSD and its entropy normalisation against hand values, the
// per-sentence pooling of router weights, and `hybridlm routing` end to end on a tiny random qwen3_moe model (a
// language whose text equals the anchor's diverges by exactly 0; other text by more; a dense model is refused).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/routing.h"
#include "models/model.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(RoutingJsd, HandValuesAndBounds) {
  // Reference values from the formula in double (Python): ln E = ln 3 in the normaliser.
  const std::vector<double> p{0.5, 0.5, 0.0}, q{0.9, 0.05, 0.05};
  EXPECT_NEAR(js_divergence(p, q), 0.153142660968, 1e-12);
  EXPECT_NEAR(entropy_normalised_jsd(p, q), 0.276012366746, 1e-9);  // 1e-10 inside the logs: ~1e-10 effects
  EXPECT_DOUBLE_EQ(js_divergence(p, q), js_divergence(q, p));       // symmetric
  EXPECT_EQ(js_divergence(p, p), 0.0);
  // Disjoint supports reach the upper bound ln 2; both entropies ~0, so the normalised value is ln 2 / ln 2 = 1.
  const std::vector<double> a{1.0, 0.0}, b{0.0, 1.0};
  EXPECT_NEAR(js_divergence(a, b), std::log(2.0), 1e-12);
  EXPECT_NEAR(entropy_normalised_jsd(a, b), 1.0, 1e-8);
  EXPECT_THROW(js_divergence(a, p), Error);  // different expert counts
}

TEST(RoutingJsd, PoolingAveragesTopKWeightsOrTheFullSoftmax) {
  const float probs[3 * 4] = {0.4f, 0.3f, 0.2f, 0.1f,   // top-2: experts 0, 1
                              0.1f, 0.2f, 0.3f, 0.4f,   // top-2: experts 3, 2
                              0.7f, 0.1f, 0.1f, 0.1f};  // not pooled
  const std::vector<int64_t> rows{0, 1};
  const std::vector<double> raw = pooled_routing(probs, rows, {4, 2, false}, RoutingPool::TopK);
  EXPECT_NEAR(raw[0], 0.2, 1e-7);
  EXPECT_NEAR(raw[1], 0.15, 1e-7);
  EXPECT_NEAR(raw[2], 0.15, 1e-7);
  EXPECT_NEAR(raw[3], 0.2, 1e-7);
  const std::vector<double> norm = pooled_routing(probs, rows, {4, 2, true}, RoutingPool::TopK);
  EXPECT_NEAR(norm[0], 0.4 / 0.7 / 2, 1e-7);
  EXPECT_NEAR(norm[0] + norm[1] + norm[2] + norm[3], 1.0, 1e-6);  // renormalised weights pool to a distribution
  const std::vector<double> soft = pooled_routing(probs, rows, {4, 2, true}, RoutingPool::Softmax);
  EXPECT_NEAR(soft[0], 0.25, 1e-7);
  EXPECT_NEAR(soft[2], 0.25, 1e-7);
}

TEST(RoutingCli, IdenticalTextDivergesByZeroOthersByMore) {
  test::ScratchDir scratch("routing");
  const nlohmann::json config = {{"model_type", "qwen3_moe"},  {"vocab_size", 260},         {"hidden_size", 32},
                                 {"intermediate_size", 48},    {"num_hidden_layers", 3},    {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2},   {"head_dim", 8},             {"num_experts", 6},
                                 {"num_experts_per_tok", 2},   {"moe_intermediate_size", 16},
                                 {"norm_topk_prob", true},     {"mlp_only_layers", {1}}};
  Model model = Model::create(parse_model_config(config, "test"), 4);
  for (int i : {0, 2})  // a router far from uniform, so different text routes differently
    for (int64_t j = 0; j < model.weights().layers[i].moe.router.weight.numel(); ++j)
      model.mutable_weights().layers[i].moe.router.weight.f32()[j] *= 50.0f;
  model.save(scratch.path() / "model");
  {
    std::ofstream set(scratch.path() / "set.jsonl");
    set << R"({"id": "a", "eng_Latn": "The cat sat on the mat.", "same_Latn": "The cat sat on the mat.", )"
        << R"("fra_Latn": "Le chat s'est assis sur le tapis."})" << "\n"
        << R"({"id": "b", "eng_Latn": "It rains today.", "same_Latn": "It rains today.", )"
        << R"("fra_Latn": "Il pleut aujourd'hui."})" << "\n";
  }
  const std::string base = "routing --model " + (scratch.path() / "model").string() +
                           " --tokenizer bytes --parallel " + (scratch.path() / "set.jsonl").string();
  const auto r = test::run_hybridlm(base + " --langs same_Latn,fra_Latn --out " + (scratch.path() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = read_file(scratch.path() / "out" / "routing.csv");
  EXPECT_NE(csv.find("layer,lang,jsd,jsd_normalised,pairs\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("0,same_Latn,0.00000000,0.00000000,2\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("2,same_Latn,0.00000000,0.00000000,2\n"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("\n1,"), std::string::npos) << "layer 1 is dense: no row\n" << csv;
  // fra_Latn: a strictly positive divergence on both MoE layers.
  for (const char* prefix : {"\n0,fra_Latn,", "\n2,fra_Latn,"}) {
    const size_t at = csv.find(prefix);
    ASSERT_NE(at, std::string::npos) << csv;
    EXPECT_GT(std::stod(csv.substr(at + std::string(prefix).size())), 1e-4) << csv;
  }
  const auto settings = nlohmann::json::parse(read_file(scratch.path() / "out" / "settings.json"));
  EXPECT_EQ(settings["moe_layers"], nlohmann::json({0, 2}));
  EXPECT_EQ(settings["pool"], "topk");
  EXPECT_TRUE(std::filesystem::exists(scratch.path() / "out" / "routing_jsd.svg"));
  EXPECT_TRUE(std::filesystem::exists(scratch.path() / "out" / "routing_jsd_normalised.svg"));

  // A dense model has nothing to route: an input error (exit code 2) naming the model.
  Model::create(parse_model_config({{"model_type", "qwen3"}, {"vocab_size", 260}, {"hidden_size", 32},
                                    {"intermediate_size", 48}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                                    {"num_key_value_heads", 2}, {"head_dim", 8}},
                                   "test"),
                1)
      .save(scratch.path() / "dense");
  const auto dense = test::run_hybridlm("routing --model " + (scratch.path() / "dense").string() +
                                        " --tokenizer bytes --parallel " + (scratch.path() / "set.jsonl").string() +
                                        " --langs fra_Latn --out " + (scratch.path() / "out2").string());
  EXPECT_EQ(dense.exit_code, 2) << dense.err;
  EXPECT_NE(dense.err.find("MoE"), std::string::npos) << dense.err;
}
