// The CUDA model tests' forward parity check: a Model uploaded to the GPU (models/cuda/cuda_model.h) against its own
// CPU forward over every capture point and the logits, max |gpu − cpu| / max |cpu| ≤ bounds.rel per tensor; and, when
// asked, the bf16 compute mode's logits against fp32: ≤ bounds.bf16, and ≥ bounds.engaged so the mode is seen to be
// on. The default bounds are those of test_cuda_model_forward.cpp and test_cuda_bf16.cpp (the reasons are in the
// header comments of the files that use this: test_cuda_moe.cpp, test_cuda_mamba2.cpp). Prints one [check] line per
// comparison, naming `family` and `label`.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"

namespace hlm::test {

struct ForwardParityBounds {
  double rel = 1e-4;
  double bf16 = 4e-2;
  double engaged = 1e-5;
};

inline void expect_cuda_forward_match(Model& cpu_model, const TokenBatch& batch, const std::string& family,
                                      const std::string& label, bool check_bf16, const ForwardParityBounds& b = {}) {
  CudaModel gpu = CudaModel::upload(cpu_model, cuda_context());
  CaptureMap cpu_points, gpu_points;
  const Tensor cpu_logits = cpu_model.forward(batch, {.all_logits = true}, collect_into(cpu_points));
  const Tensor gpu_logits = gpu.forward(batch, {.all_logits = true}, collect_into(gpu_points));
  ASSERT_EQ(gpu_points.size(), cpu_points.size()) << label;
  double worst = 0.0;
  std::string worst_name;
  for (const auto& [name, value] : cpu_points) {
    ASSERT_TRUE(gpu_points.count(name)) << label << " " << name;
    const double rel = relative_max_diff(value, gpu_points.at(name));
    if (rel >= worst) worst_name = name;
    worst = std::max(worst, rel);
    EXPECT_LE(rel, b.rel) << label << " " << name;
  }
  const double rel_logits = relative_max_diff(cpu_logits, gpu_logits);
  EXPECT_LE(rel_logits, b.rel) << label << " logits";
  std::printf("[check] cuda %s %s: %zu capture points worst rel=%.3g (%s), logits rel=%.3g (bound %.0e)\n",
              family.c_str(), label.c_str(), cpu_points.size(), worst, worst_name.c_str(), rel_logits, b.rel);
  if (!check_bf16) return;
  gpu.set_bf16_compute(true);
  CaptureMap bf16_points;
  const Tensor bf16 = gpu.forward(batch, {.all_logits = true}, collect_into(bf16_points));
  const double rel_bf16 = relative_max_diff(gpu_logits, bf16);
  EXPECT_LE(rel_bf16, b.bf16) << label << " bf16";
  if (rel_bf16 > b.bf16) {  // where the bf16 mode departs: a flipped expert pick leaves a few rows, a defect most
    const int64_t rows = bf16.shape()[0], vocab = bf16.numel() / std::max<int64_t>(rows, 1);
    double ref = 0.0;
    for (int64_t i = 0; i < gpu_logits.numel(); ++i) ref = std::max(ref, std::abs(double(gpu_logits.f32()[i])));
    int64_t bad_rows = 0;
    std::string first_rows;
    for (int64_t r = 0; r < rows; ++r) {
      double d = 0.0;
      for (int64_t c = 0; c < vocab; ++c)
        d = std::max(d, std::abs(double(bf16.f32()[r * vocab + c]) - double(gpu_logits.f32()[r * vocab + c])));
      if (d > b.bf16 * ref) {
        if (++bad_rows <= 12) first_rows += " " + std::to_string(r) + ":" + std::to_string(d / ref).substr(0, 6);
      }
    }
    std::printf("[check] cuda %s %s: bf16 rows beyond the bound %lld of %lld (row:rel)%s\n", family.c_str(),
                label.c_str(), static_cast<long long>(bad_rows), static_cast<long long>(rows), first_rows.c_str());
    for (const auto& [name, value] : gpu_points)
      if (bf16_points.count(name))
        std::printf("[check] cuda %s %s: bf16 vs fp32 %s rel=%.3g\n", family.c_str(), label.c_str(), name.c_str(),
                    relative_max_diff(value, bf16_points.at(name)));
  }
  EXPECT_GE(rel_bf16, b.engaged) << label << ": the bf16 mode gave fp32 results";
  std::printf("[check] cuda %s %s: bf16 vs fp32 logits rel=%.3g (bound %.0e)\n", family.c_str(), label.c_str(),
              rel_bf16, b.bf16);
}

}  // namespace hlm::test
