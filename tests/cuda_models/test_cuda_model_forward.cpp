// CudaModel (models/cuda/cuda_model.h) against Model::forward on the CPU: for every golden model (qwen3 tied,
// untied and yarn; granite; olmo_hybrid) and a qwen3_hybrid student converted here, one packed batch of three
// sequences of odd lengths: logits (all tokens and last tokens) and every capture point agree within kRelBound.
// The GPU forward is bit-reproducible run to run. Plus bad token ids (input error like the CPU, the model still usable afterwards) and the capture filter.
//
// Bound: max |gpu − cpu| / max |cpu| ≤ kRelBound = 1e-4 per tensor. Both sides are fp32, but the sums run in a
// different order: cuBLASLt vs OpenBLAS GEMM blocking (relative error ~√K·u ≈ 1e-6 per product at K ≤ 256,
// u = 2^-24), fp32 block sums in the norms where the CPU uses double, online (flash) softmax vs the CPU's full max,
// and the fp32 gated delta recurrence where the CPU keeps double. Through a few layers with RMSNorms (which rescale
// absolute errors by up to max/rms of a row) this gives the expected ~1e-6..1e-5; 1e-4 keeps a 10× margin, and any
// dataflow mistake (a missing multiplier, a wrong norm, a mixed-up head or sequence) moves values by O(1e-2..1).
// Each comparison prints its ratio, so a passing log shows the margin.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "cuda_models/cuda_model_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kRelBound = 1e-4;  // derivation in the header comment

// Runs both forwards on `batch` and compares the logits (all tokens, then last tokens) and every capture point.
void expect_forward_match(Model& cpu_model, const std::string& label) {
  CudaModel gpu_model = CudaModel::upload(cpu_model, cuda_context());
  const TokenBatch batch = odd_length_batch(cpu_model.config().vocab_size);

  CaptureMap cpu_points, gpu_points;
  const Tensor cpu_logits = cpu_model.forward(batch, {.all_logits = true}, collect_into(cpu_points));
  const Tensor gpu_logits = gpu_model.forward(batch, {.all_logits = true}, collect_into(gpu_points));
  ASSERT_EQ(cpu_points.size(), 4 * static_cast<size_t>(cpu_model.config().num_hidden_layers) + 2) << label;
  ASSERT_EQ(gpu_points.size(), cpu_points.size()) << label;
  double worst = 0.0;
  for (const auto& [name, cpu_value] : cpu_points) {
    ASSERT_TRUE(gpu_points.count(name)) << label << ": the GPU forward did not emit " << name;
    const double rel = relative_max_diff(cpu_value, gpu_points.at(name));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelBound) << label << " " << name;
  }
  const double rel_logits = relative_max_diff(cpu_logits, gpu_logits);
  EXPECT_LE(rel_logits, kRelBound) << label << " logits (returned)";

  // Deterministic run to run (no float atomics; cuBLASLt reproducible on one GPU): the same bits again.
  const Tensor gpu_again = gpu_model.forward(batch, {.all_logits = true});
  EXPECT_EQ(std::memcmp(gpu_again.raw(), gpu_logits.raw(), gpu_logits.nbytes()), 0) << label << " not deterministic";

  const Tensor cpu_last = cpu_model.forward(batch);
  const Tensor gpu_last = gpu_model.forward(batch);
  ASSERT_EQ(gpu_last.shape(), Shape({batch.num_sequences(), cpu_model.config().vocab_size})) << label;
  const double rel_last = relative_max_diff(cpu_last, gpu_last);
  EXPECT_LE(rel_last, kRelBound) << label << " last-token logits";
  std::printf("[check] cuda_model %s: %zu capture points worst rel=%.3g, logits rel=%.3g, last-token rel=%.3g "
              "(bound %.0e)\n",
              label.c_str(), cpu_points.size(), worst, rel_logits, rel_last, kRelBound);
}

void expect_golden_match(const std::string& case_name) {
  Model model = Model::load(cuda_golden_dir(case_name));
  expect_forward_match(model, case_name);
}

}  // namespace

TEST(CudaModelForward, Qwen3Tied) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("qwen3_tied");
}

TEST(CudaModelForward, Qwen3Untied) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("qwen3_untied");
}

TEST(CudaModelForward, Qwen3Yarn) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("qwen3_yarn");
}

TEST(CudaModelForward, GraniteMultipliers) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("granite");
}

TEST(CudaModelForward, OlmoHybridPostNormAndGdn) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("olmo_hybrid_tiny");
}

TEST(CudaModelForward, Olmo3SlidingWindowLayers) {
  HLM_REQUIRE_CUDA_MODEL();
  expect_golden_match("olmo3_swa");  // window 5 < the batch's sequences: the scalar windowed kernels
}

TEST(CudaModelForward, Olmo3PerLayerTypeRopeIsRefused) {
  HLM_REQUIRE_CUDA_MODEL();
  // YaRN on the full layers, default RoPE on the sliding ones: one RoPE table on CUDA, so upload refuses it.
  const Model model = Model::load(cuda_golden_dir("olmo3_rope2"));
  try {
    (void)CudaModel::upload(model, cuda_context());
    FAIL() << "olmo3_rope2 uploaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("per-layer-type RoPE"), std::string::npos) << e.what();
  }
}

TEST(CudaModelForward, ConvertedQwen3HybridStudent) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  // Layer 1 keeps attention, layers 0 and 2 become GDN; neg_eigval exercises β = 2σ(b).
  Model student = convert_to_hybrid(teacher, {1}, {.neg_eigval = true, .seed = 3});
  expect_forward_match(student, "qwen3_hybrid student of qwen3_untied");
}

TEST(CudaModelForward, BadTokenIdIsAnInputErrorLikeTheCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  Model cpu_model = Model::load(cuda_golden_dir("qwen3_tied"));
  CudaModel gpu_model = CudaModel::upload(cpu_model, cuda_context());
  const int64_t V = cpu_model.config().vocab_size;
  for (const int32_t bad : {static_cast<int32_t>(V), int32_t{-1}}) {
    TokenBatch batch;
    batch.add_sequence({1, 2, 3});
    batch.add_sequence({4, bad, 6, 7});
    std::string cpu_message, gpu_message;
    try {
      cpu_model.forward(batch);
      ADD_FAILURE() << "the CPU forward accepted id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      cpu_message = e.what();
    }
    int captures = 0;
    try {
      gpu_model.forward(batch, {.all_logits = true}, [&](CapturePoint, int, const Tensor&) { ++captures; });
      ADD_FAILURE() << "the CUDA forward accepted id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      gpu_message = e.what();
    }
    EXPECT_EQ(captures, 0) << "no capture may see values computed from a bad id";
    EXPECT_EQ(gpu_message, cpu_message);
    EXPECT_NE(gpu_message.find("outside the vocabulary"), std::string::npos) << gpu_message;
  }
  // The error flag belongs to one batch: the next forward runs normally.
  const TokenBatch good = odd_length_batch(V);
  EXPECT_LE(relative_max_diff(cpu_model.forward(good), gpu_model.forward(good)), kRelBound);
}

TEST(CudaModelForward, CaptureFilterDownloadsOnlyWantedPoints) {
  HLM_REQUIRE_CUDA_MODEL();
  Model cpu_model = Model::load(cuda_golden_dir("olmo_hybrid_tiny"));
  CudaModel gpu_model = CudaModel::upload(cpu_model, cuda_context());
  CaptureMap points;
  const CaptureWanted wanted = [](CapturePoint p, int layer) {
    return p == CapturePoint::Logits || (p == CapturePoint::AttnOut && layer == 3);
  };
  gpu_model.forward(odd_length_batch(cpu_model.config().vocab_size), {.all_logits = true}, collect_into(points),
                    wanted);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_TRUE(points.count("attn_out.3"));
  EXPECT_TRUE(points.count("logits"));
}
