// Forward parity with HF transformers on the committed goldens (tests/golden/, written by
// tools/goldens/make_goldens.py): logits and the four capture points of every layer plus final_hidden.
// Tolerance: max |ours − HF| ≤ 1e-5 · max |HF| per tensor. Both sides compute in fp32 from the same weights; the
// remaining differences are summation order (OpenBLAS vs MKL/ATen GEMMs, our blocked softmax), which for these
// sizes (K ≤ 128) stays around 1e-7–1e-6 relative.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "models/model.h"
#include "support/golden.h"
#include "support/random.h"

using namespace hlm;

namespace {

constexpr double kMaxRelError = 1e-5;
// Hybrid models (GDN layers): HF runs its chunked torch GDN (chunk 64, fp32 throughout) where we run the token
// recurrence with a double-precision state; the two orders of summation over 100 tokens, propagated through the
// following layers and the final RMSNorm, measured 9.6e-6 on olmo_hybrid_tiny. The [gdn] issue's bound is 1e-4.
constexpr double kMaxRelErrorHybrid = 1e-4;

// Cases whose golden script exists but whose files the coordinator has not generated and committed yet (GPU machine):
// skipped, with the command, while their directory is absent. Once committed, delete the name here: from then on a
// missing file fails like every other case.
// qwen3_5_moe_tiny: the first device run refused all six seeds for a router near tie (router_std 0.5: absolute gaps
// of ~1e-6 between tiny 3rd and 4th probabilities); the case now draws its router with router_std 0.15.
// granitemoehybrid_*: Granite-4.0-H (Mamba-2 + NoPE attention), script written 2026-12-02 without transformers at hand.
const std::set<std::string> kAwaitingGeneration = {};  // cases listed here skip until their golden exists

class GoldenParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenParity, LogitsAndCapturePointsMatchHF) {
  const std::string case_name = GetParam();
  if (kAwaitingGeneration.count(case_name) && !std::filesystem::exists(test::golden_dir(case_name)))
    GTEST_SKIP() << case_name << " not generated yet: python3 tools/goldens/"
                 << (case_name == "olmo_hybrid_dv2" ? "make_gdn_goldens.py" : "make_goldens.py")
                 << " --out tests/golden --only " << case_name << " (GPU machine), then commit it";
  const SafetensorsFile golden = test::open_golden(case_name);
  Model model = Model::load(test::golden_dir(case_name));
  const TokenBatch batch = test::golden_batch(golden);

  std::map<std::string, Tensor> captured;
  const Capture capture = [&](CapturePoint point, int layer, const Tensor& value) {
    const auto& info = capture_point_info(point);
    const std::string name =
        info.per_layer ? std::string(info.name) + "." + std::to_string(layer) : std::string(info.name);
    captured[name] = value.clone();
  };
  model.forward(batch, {.all_logits = true}, capture);

  int compared = 0;
  double worst = 0.0;
  std::string worst_name;
  for (const SafetensorsEntry& entry : golden.entries()) {
    // input_ids is the input; other names that are not capture points (e.g. OLMo's mixer_out.i) are extras.
    const std::string point = entry.name.substr(0, entry.name.find('.'));
    if (entry.name == "input_ids" || capture_point_by_name(point) == nullptr) continue;
    ASSERT_TRUE(captured.count(entry.name)) << case_name << ": we produce no '" << entry.name << "'";
    const Tensor expect = golden.tensor_f32(entry.name);
    const Tensor& got = captured[entry.name];
    ASSERT_EQ(got.numel(), expect.numel()) << entry.name;
    const double err = test::max_rel_error(got.f32(), expect.f32(), static_cast<size_t>(expect.numel()));
    EXPECT_LE(err, model.config().linear ? kMaxRelErrorHybrid : kMaxRelError) << case_name << " " << entry.name;
    if (err >= worst) worst = err, worst_name = entry.name;
    ++compared;
  }
  std::printf("%s: worst max-relative error %.3g (%s)\n", case_name.c_str(), worst, worst_name.c_str());
  // Every layer's four points + final_hidden + logits.
  EXPECT_EQ(compared, 4 * model.config().num_hidden_layers + 2) << case_name;
}

INSTANTIATE_TEST_SUITE_P(HF, GoldenParity,
                         ::testing::Values("qwen3_tied", "qwen3_untied", "qwen3_yarn", "granite",
                                           "olmo_hybrid_tiny", "olmo_hybrid_dv2", "qwen3_moe_tiny",
                                           "qwen3_moe_step2", "olmo3_swa", "olmo3_rope2", "cohere2_swa",
                                           "qwen3_5_tiny", "qwen3_5_moe_tiny", "qwen3_next_tiny",
                                           "granitemoehybrid_tiny", "granitemoehybrid_moe_tiny",
                                           // not HF: tools/goldens/make_bailing_goldens.py's torch statement
                                           "bailing_moe_linear_tiny"));

}  // namespace
