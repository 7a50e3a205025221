// `hybridlm eval --device cuda` and `hybridlm align --device cuda` against `--device cpu`, through the binary
// ($HLM_BINARY on the GPU machine), plus their device input errors.
//
// eval: the tiny distillation pair of tests/train/test_trainer_fixture.h (a dense qwen3 teacher and its converted
// student) on the fixture corpus, split valid and test, passes of 2 rows. The JSON files must agree per language
// within the bounds of test_cuda_eval.cpp (CE and teacher CE 2e-5 relative; KL 2e-4 relative + 1e-7 nats; reasons
// there: the per-token values differ by the forward's and the LM head's summation order only), with equal token
// counts and "device" in the meta.
//
// align: olmo_hybrid_tiny (GDN and attention layers) and the converted qwen3_hybrid student, the parallel set of
// tests/analysis/test_align_cli.cpp (bytes tokenizer), every per-layer point, the median bandwidth. Bounds:
// - σ per (point, layer) (settings.json): kSigmaBound = 1e-4 relative. σ = sqrt(median ‖x_i − x_j‖²) over a token
//   sample; the states differ by ≤ ~5e-6 relative (test_cuda_model_forward.cpp; the worst golden measured 4.3e-6),
//   so the squared distances by about twice that and σ by about that; 1e-4 leaves 20×.
// - SoftCKA (softcka.csv, printed with 8 decimals): kSoftCkaBound = 1e-4 absolute (values in [0, 1]). Each kernel
//   entry is a smooth function of the states and σ (RBF: exp(−d²/2σ²) with d²/σ² of order one at the median), so it
//   moves by a small multiple of the states' 5e-6; the centred norms and their ratio add a modest factor. The test
//   also checks that the CPU values differ by much more than the bound between neighbouring layers somewhere, so a
//   wrong layer or point would fail it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "backend/cuda/device_query.h"
#include "cuda_models/cuda_model_support.h"
#include "support/align_fixture.h"
#include "support/run_binary.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kCeBound = 2e-5;  // as test_cuda_eval.cpp
constexpr double kKlBound = 2e-4;
constexpr double kKlFloor = 1e-7;
constexpr double kSigmaBound = 1e-4;  // reasons in the header comment
constexpr double kSoftCkaBound = 1e-4;


double rel(double gpu, double cpu) { return std::abs(gpu - cpu) / std::max(std::abs(cpu), 1e-30); }

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

class CudaEvalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    test::write_tiny_corpus(scratch.path() / "corpus", 200);
    test::write_tiny_teacher_and_student(scratch.path());
  }
  std::string eval_args(const std::string& split, const fs::path& out, const std::string& device) const {
    return "eval --model " + quoted(scratch.path() / "student") + " --teacher " + quoted(scratch.path() / "teacher") +
           " --data " + quoted(scratch.path() / "corpus") + " --split " + split +
           " --seq-len 64 --held-out-docs 20 --eval-tokens 256 --rows 2 --out " + quoted(out) + " --device " + device;
  }
  test::ScratchDir scratch{"cuda-eval-cli"};
};

}  // namespace

TEST_F(CudaEvalCli, CudaMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  for (const std::string split : {"valid", "test"}) {
    const fs::path cpu_json = scratch.path() / (split + "_cpu.json"), gpu_json = scratch.path() / (split + "_gpu.json");
    const test::RunResult cpu = test::run_cli(eval_args(split, cpu_json, "cpu"));
    const test::RunResult gpu = test::run_cli(eval_args(split, gpu_json, "cuda"));
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    EXPECT_NE(gpu.out.find("device       cuda"), std::string::npos) << gpu.out;
    const nlohmann::json c = nlohmann::json::parse(test::read_text(cpu_json));
    const nlohmann::json g = nlohmann::json::parse(test::read_text(gpu_json));
    EXPECT_EQ(c["meta"]["device"], "cpu");
    EXPECT_EQ(g["meta"]["device"], "cuda");
    ASSERT_EQ(g["languages"].size(), c["languages"].size());
    ASSERT_EQ(c["languages"].size(), 4u);
    double worst_ce = 0.0, worst_kl = 0.0;
    for (size_t l = 0; l < c["languages"].size(); ++l) {
      const nlohmann::json &a = c["languages"][l], &b = g["languages"][l];
      const std::string code = a["code"].get<std::string>();
      EXPECT_EQ(b["code"], a["code"]);
      EXPECT_EQ(b["tier"], a["tier"]) << code;
      EXPECT_EQ(b["tokens"], a["tokens"]) << code;
      EXPECT_EQ(b["ce_tokens"], a["ce_tokens"]) << code;
      const double ce = rel(b["ce"].get<double>(), a["ce"].get<double>());
      const double tce = rel(b["teacher_ce"].get<double>(), a["teacher_ce"].get<double>());
      const double kl_c = a["kl"].get<double>(), kl_g = b["kl"].get<double>();
      EXPECT_LE(ce, kCeBound) << split << " " << code;
      EXPECT_LE(tce, kCeBound) << split << " " << code;
      EXPECT_LE(std::abs(kl_g - kl_c), kKlBound * std::abs(kl_c) + kKlFloor)
          << split << " " << code << ": gpu " << kl_g << " cpu " << kl_c;
      worst_ce = std::max({worst_ce, ce, tce});
      worst_kl = std::max(worst_kl, rel(kl_g, kl_c));
    }
    std::printf("[check] cuda_eval_cli %s: 4 languages, ce worst rel=%.3g (bound %.0e), kl worst rel=%.3g (bound "
                "%.0e)\n",
                split.c_str(), worst_ce, kCeBound, worst_kl, kKlBound);
  }
}

// Input errors (exit 2), with or without a GPU: an unknown device; `--device cuda` where no GPU is usable.
TEST_F(CudaEvalCli, DeviceErrorsAreInputErrors) {
  const fs::path out = scratch.path() / "bad.json";
  const test::RunResult bad = test::run_cli(eval_args("valid", out, "tpu"));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(out));
  if (cuda_available()) return;
  const test::RunResult none = test::run_cli(eval_args("valid", out, "cuda"));
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("no usable GPU"), std::string::npos) << none.err;
}

namespace {

// Runs align on cpu and cuda for `model` and compares σ and the CSV (bounds in the header comment).
void expect_align_match(const fs::path& model, const std::string& label, const fs::path& dir) {
  const fs::path set = test::write_tiny_parallel_set(dir);
  const std::string common = "align --model " + quoted(model) + " --tokenizer bytes --parallel " + quoted(set) +
                             " --langs fra_Latn,deu_Latn,xxx_Latn --points attn_in,attn_out,attn_delta,mlp_delta";
  const fs::path cpu_out = dir / "cpu", gpu_out = dir / "gpu";
  const test::RunResult cpu = test::run_cli(common + " --device cpu --out " + quoted(cpu_out));
  const test::RunResult gpu = test::run_cli(common + " --device cuda --out " + quoted(gpu_out));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err << cpu.out;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err << gpu.out;

  const nlohmann::json sc = nlohmann::json::parse(test::read_text(cpu_out / "settings.json"));
  const nlohmann::json sg = nlohmann::json::parse(test::read_text(gpu_out / "settings.json"));
  EXPECT_EQ(sc["forward_device"], "cpu");
  EXPECT_EQ(sg["forward_device"], "cuda");
  EXPECT_EQ(sg["device"], "cuda");
  EXPECT_EQ(sg["counts"], sc["counts"]);
  EXPECT_EQ(sg["sigma_sample_tokens"], sc["sigma_sample_tokens"]);
  double worst_sigma = 0.0;
  for (const auto& [point, values] : sc["sigma"].items()) {
    ASSERT_TRUE(sg["sigma"].contains(point)) << point;
    ASSERT_EQ(sg["sigma"][point].size(), values.size()) << point;
    for (size_t layer = 0; layer < values.size(); ++layer) {
      const double r = rel(sg["sigma"][point][layer].get<double>(), values[layer].get<double>());
      EXPECT_LE(r, kSigmaBound) << label << " sigma " << point << " layer " << layer;
      worst_sigma = std::max(worst_sigma, r);
    }
  }

  std::string cpu_header, gpu_header;
  const std::map<std::string, double> c = test::read_softcka_csv(cpu_out / "softcka.csv", &cpu_header);
  const std::map<std::string, double> g = test::read_softcka_csv(gpu_out / "softcka.csv", &gpu_header);
  EXPECT_EQ(cpu_header, "layer,point,lang,softcka");
  EXPECT_EQ(gpu_header, cpu_header);
  ASSERT_EQ(g.size(), c.size());
  const int layers = sc["layers"].get<int>();
  ASSERT_EQ(c.size(), static_cast<size_t>(layers) * 4u * 4u);  // 4 points × (3 languages + mean) per layer
  double worst = 0.0, largest_layer_step = 0.0;
  for (const auto& [key, value] : c) {
    ASSERT_TRUE(g.count(key)) << key;
    ASSERT_TRUE(std::isfinite(value) && std::isfinite(g.at(key))) << label << " " << key;
    const double diff = std::abs(g.at(key) - value);
    EXPECT_LE(diff, kSoftCkaBound) << label << " " << key << ": gpu " << g.at(key) << " cpu " << value;
    worst = std::max(worst, diff);
    // The same point and language one layer up (keys "layer/point/lang").
    const size_t slash = key.find('/');
    const std::string next = std::to_string(std::stoi(key.substr(0, slash)) + 1) + key.substr(slash);
    if (const auto it = c.find(next); it != c.end())
      largest_layer_step = std::max(largest_layer_step, std::abs(it->second - value));
  }
  EXPECT_GT(largest_layer_step, 10 * kSoftCkaBound) << label << ": layers too alike for the bound to tell them apart";
  std::printf("[check] cuda_align_cli %s: %zu SoftCKA values worst abs diff=%.3g (bound %.0e), sigma worst rel=%.3g "
              "(bound %.0e); largest CPU step between layers %.3g\n",
              label.c_str(), c.size(), worst, kSoftCkaBound, worst_sigma, kSigmaBound, largest_layer_step);
}

}  // namespace

TEST(CudaAlignCli, CudaMatchesCpuOnOlmoHybrid) {
  HLM_REQUIRE_CUDA_MODEL();
  test::ScratchDir scratch("cuda-align");
  expect_align_match(test::cuda_golden_dir("olmo_hybrid_tiny"), "olmo_hybrid_tiny", scratch.path());
}

TEST(CudaAlignCli, CudaMatchesCpuOnConvertedStudent) {
  HLM_REQUIRE_CUDA_MODEL();
  test::ScratchDir scratch("cuda-align");
  const fs::path student = scratch.path() / "student";
  const test::RunResult c = test::run_cli("convert --teacher " + quoted(test::cuda_golden_dir("qwen3_tied")) +
                                    " --placement 1 --out " + quoted(student));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  expect_align_match(student, "qwen3_tied -> qwen3_hybrid", scratch.path());
}

// Input errors (exit 2), with or without a GPU: an unknown device; `--device cuda` where no GPU is usable.
TEST(CudaAlignCli, DeviceErrorsAreInputErrors) {
  test::ScratchDir scratch("cuda-align");
  const fs::path set = test::write_tiny_parallel_set(scratch.path());
  const std::string common = "align --model " + quoted(test::cuda_golden_dir("olmo_hybrid_tiny")) +
                             " --tokenizer bytes --parallel " + quoted(set) + " --langs fra_Latn --out " +
                             quoted(scratch.path() / "out");
  const test::RunResult bad = test::run_cli(common + " --device tpu");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
  if (cuda_available()) return;
  const test::RunResult none = test::run_cli(common + " --device cuda");
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("no usable GPU"), std::string::npos) << none.err;
}
