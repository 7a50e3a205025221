// Shared pieces of the CUDA model tests: where the goldens and the binary are (overridable by environment, because
// the GPU machine runs binaries built elsewhere, from another checkout path), a packed batch of odd-length sequences,
// capture collection, and the relative comparison max |gpu − cpu| / max |cpu|.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_query.h"
#include "layers/capture.h"
#include "layers/token_batch.h"
#include "models/model_train.h"
#include "support/random.h"
#include "support/run_binary.h"

namespace hlm::test {

#define HLM_REQUIRE_CUDA_MODEL()                                                                     \
  do {                                                                                               \
    if (!::hlm::cuda_available()) GTEST_SKIP() << "CUDA unavailable: " << ::hlm::cuda_unavailable_reason(); \
  } while (0)

// $HLM_GOLDEN_DIR when set (GPU machine), else the source tree's tests/golden.
inline std::filesystem::path cuda_golden_dir(const std::string& case_name) {
  const char* env = std::getenv("HLM_GOLDEN_DIR");
  return std::filesystem::path(env != nullptr && *env != '\0' ? env : HLM_GOLDEN_DIR) / case_name;
}

// $HLM_BINARY when set; else the hybridlm this build made, where it is; else a hybridlm beside this test program (the
// GPU machine's unpacked binaries, tools/device/pack_binaries.sh, sit together in one bin/ folder away from the build
// path). None of them: the build path, whose "not found" then names what is missing.
inline std::string cuda_test_binary() {
  const char* env = std::getenv("HLM_BINARY");
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (std::filesystem::exists(HLM_BINARY, ec)) return HLM_BINARY;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = self.parent_path() / std::filesystem::path(HLM_BINARY).filename();
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return HLM_BINARY;
}

// As test::run_hybridlm (support/run_binary.h), but with the binary of cuda_test_binary(): `args` after the
// binary name, stdout and stderr captured.
inline RunResult run_cli(const std::string& args) { return run_shell(cuda_test_binary() + " " + args); }

// Three sequences of odd lengths (7, 13, 5) with ids spread over [0, vocab): packed cu_seqlens {0, 7, 20, 25}.
// n token ids in [0, vocab) from a 32-bit LCG seeded `seed` (the engine tests' teacher-forced sequences).
inline std::vector<int32_t> ids_for(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids;
  uint32_t state = seed;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab)));
  }
  return ids;
}

inline TokenBatch odd_length_batch(int64_t vocab) {
  TokenBatch batch;
  uint32_t state = 12345u;
  for (int length : {7, 13, 5}) {
    std::vector<int32_t> seq;
    for (int t = 0; t < length; ++t) {
      state = state * 1664525u + 1013904223u;  // LCG: deterministic ids without a dependency
      seq.push_back(static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab)));
    }
    batch.add_sequence(seq);
  }
  return batch;
}

// Every capture point by name ("attn_in.0", ..., "final_hidden", "logits"), deep copies.
using CaptureMap = std::map<std::string, Tensor>;

inline Capture collect_into(CaptureMap& out) {
  return [&out](CapturePoint point, int layer, const Tensor& value) {
    const auto& info = capture_point_info(point);
    const std::string name =
        info.per_layer ? std::string(info.name) + "." + std::to_string(layer) : std::string(info.name);
    out[name] = value.clone();
  };
}

// max |gpu − cpu| / max |cpu| over all elements; +inf on a shape mismatch or a non-finite value on either side.
inline double relative_max_diff(const Tensor& cpu, const Tensor& gpu) {
  if (cpu.shape() != gpu.shape()) return INFINITY;
  const float* a = cpu.f32();
  const float* b = gpu.f32();
  double max_diff = 0.0, max_ref = 0.0;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(double(b[i]) - double(a[i])));
    max_ref = std::max(max_ref, std::abs(double(a[i])));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

// An engine's logits row `a` against a reference row `b` of V values: max |a − b| / (1 + max |b|), +inf when `a` has a
// non-finite value (the engine tests' row measure).
inline double row_error(const float* a, const float* b, int64_t V) {
  double diff = 0.0, scale = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    diff = std::max(diff, std::abs(double(a[v]) - double(b[v])));
    if (!std::isfinite(a[v])) diff = INFINITY;
    scale = std::max(scale, std::abs(double(b[v])));
  }
  return diff / (1.0 + scale);
}

// Whether a reference row's top-2 margin exceeds twice `bound` in row_error's measure (then an engine row within the
// bound must have the same argmax).
inline bool clear_winner(const float* row, int64_t V, double bound) {
  std::vector<float> r(row, row + V);
  std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
  double scale = 0.0;
  for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::abs(double(row[v])));
  return double(r[0]) - double(r[1]) > 2.0 * bound * (1.0 + scale);
}

// The backward tests' gradient of the final hidden states, on the device: [T, H] normal values · 0.05 drawn from
// random_vector's `stream`.
inline CudaTensor random_final_gradient(CudaContext& ctx, int64_t T, int64_t H, uint64_t stream) {
  Tensor host = Tensor::zeros({T, H});
  const std::vector<float> d = random_vector(static_cast<size_t>(T * H), stream, 0.05f);
  std::memcpy(host.f32(), d.data(), d.size() * sizeof(float));
  return cuda_upload(ctx, host);
}

// Two gradient holders of `config` compared byte for byte, parameter by parameter (`weights` names them:
// named_parameters): one failed expectation per differing tensor, labelled with `what` and the parameter's name;
// returns how many differ and sets *count to the number compared.
inline size_t count_differing_gradients(const ModelConfig& config, DecoderWeights& weights, DecoderWeights& expected,
                                        DecoderWeights& actual, const std::string& what, size_t* count) {
  const std::vector<NamedParameter> a = named_parameters(config, weights, expected);
  const std::vector<NamedParameter> b = named_parameters(config, weights, actual);
  EXPECT_EQ(a.size(), b.size()) << what;
  size_t differing = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const bool same = a[i].grad.nbytes() == b[i].grad.nbytes() &&
                      std::memcmp(a[i].grad.raw(), b[i].grad.raw(), a[i].grad.nbytes()) == 0;
    EXPECT_TRUE(same) << what << " " << a[i].name << ": gradient differs";
    differing += same ? 0 : 1;
  }
  *count = a.size();
  return differing;
}

}  // namespace hlm::test
