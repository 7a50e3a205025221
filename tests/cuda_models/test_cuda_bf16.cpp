// The bf16 compute mode of CudaModel (models/cuda/cuda_model.h, layers/cuda/cuda_linear.h): the linears and the LM
// head multiply bf16-rounded operands on tensor cores with fp32 results; everything else stays fp32.
//
// Bounds. Rounding both operands of a product to bf16 perturbs it by ≤ 2·2^-9 relative, so one linear's output moves
// by ≤ 2^-8·Σ|x||w| per element, and by ~2^-8·|y|/√(terms) typically (the roundings are independent). The tiny models
// have 2-3 layers of ~4 linears each, whose errors add through the residual stream, and RMSNorm rescales them by up
// to max/rms of a row. The bound kForwardBound = 4e-2 on max |bf16 − fp32| / max |fp32| over the logits admits ~10
// such linears at their worst-case 2^-8 each (10·2^-8 ≈ 4e-2); an fp32 result (the mode not engaged) is caught by the
// lower bound kEngagedBound = 1e-5, ten times the fp32-vs-fp32 noise of test_cuda_model_forward.cpp, and a dataflow
// error (wrong weight copy, stale copy, transposed operand) moves the logits by O(1).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kForwardBound = 4e-2;  // derivation in the header comment
constexpr double kEngagedBound = 1e-5;

void expect_bf16_tracks_fp32(Model& cpu_model, const std::string& label) {
  CudaModel gpu = CudaModel::upload(cpu_model, cuda_context());
  const TokenBatch batch = odd_length_batch(cpu_model.config().vocab_size);
  const Tensor fp32 = gpu.forward(batch, {.all_logits = true});

  gpu.set_bf16_compute(true);
  EXPECT_TRUE(gpu.bf16_compute());
  EXPECT_GT(gpu.bf16_copy_bytes(), 0u);
  const Tensor bf16 = gpu.forward(batch, {.all_logits = true});
  const double rel = relative_max_diff(fp32, bf16);
  std::printf("[bf16] %s: max |bf16 - fp32| / max |fp32| = %.3e (bound %.0e)\n", label.c_str(), rel, kForwardBound);
  EXPECT_LE(rel, kForwardBound) << label;
  EXPECT_GE(rel, kEngagedBound) << label << ": the bf16 mode gave fp32 results";

  // Deterministic, and switching the mode off gives back the fp32 bits.
  const Tensor again = gpu.forward(batch, {.all_logits = true});
  EXPECT_EQ(std::memcmp(again.raw(), bf16.raw(), bf16.nbytes()), 0) << label;
  gpu.set_bf16_compute(false);
  EXPECT_EQ(gpu.bf16_copy_bytes(), 0u);
  const Tensor back = gpu.forward(batch, {.all_logits = true});
  EXPECT_EQ(std::memcmp(back.raw(), fp32.raw(), fp32.nbytes()), 0) << label << ": fp32 mode after bf16 differs";
}

}  // namespace

TEST(CudaBf16, ForwardTracksFp32Qwen3Tied) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("qwen3_tied"));
  expect_bf16_tracks_fp32(m, "qwen3_tied");
}

TEST(CudaBf16, ForwardTracksFp32Granite) {
  HLM_REQUIRE_CUDA_MODEL();
  Model m = Model::load(cuda_golden_dir("granite"));
  expect_bf16_tracks_fp32(m, "granite");
}

TEST(CudaBf16, ForwardTracksFp32HybridStudent) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model teacher = Model::load(cuda_golden_dir("qwen3_untied"));
  Model student = convert_to_hybrid(teacher, {1}, {.seed = 3});
  expect_bf16_tracks_fp32(student, "qwen3_hybrid student");
}

TEST(CudaBf16, RefreshFollowsTheMasterWeights) {
  // The bf16 copies are made from the fp32 weights: after the fp32 weights change, refresh_bf16() must make the
  // bf16 forward follow them (a stale copy would keep the old logits).
  HLM_REQUIRE_CUDA_MODEL();
  Model a = Model::load(cuda_golden_dir("qwen3_tied"));
  CudaModel gpu = CudaModel::upload(a, cuda_context());
  gpu.set_bf16_compute(true);
  const TokenBatch batch = odd_length_batch(a.config().vocab_size);
  const Tensor before = gpu.forward(batch, {.all_logits = true});
  // Zero the fp32 weight of every projection (not the embedding/head or the norms): with fresh copies every mixer and
  // MLP gives 0 and the logits become those of the embeddings alone.
  int zeroed = 0;
  for (const CudaModel::NamedTensor& t : gpu.named_tensors()) {
    if (t.name.size() < 11 || t.name.compare(t.name.size() - 11, 11, "proj.weight") != 0) continue;
    ASSERT_EQ(cudaMemsetAsync(t.tensor->raw(), 0, t.tensor->nbytes(), cuda_context().stream()), cudaSuccess);
    ++zeroed;
  }
  ASSERT_GT(zeroed, 0);
  const Tensor stale = gpu.forward(batch, {.all_logits = true});
  EXPECT_EQ(std::memcmp(stale.raw(), before.raw(), before.nbytes()), 0)
      << "the bf16 forward read the fp32 weights directly (expected the unrefreshed copies)";
  gpu.refresh_bf16();
  const Tensor fresh = gpu.forward(batch, {.all_logits = true});
  EXPECT_GT(relative_max_diff(before, fresh), 0.5) << "refresh_bf16 did not re-round the copies";
}
