// Parity of the GDN layer (layers/gdn_layer.h) with HF transformers' Qwen3_5GatedDeltaNet module, forward and
// backward, on the goldens written by tools/goldens/make_gdn_goldens.py (cases qwen3_5_gdn: Hk = Hv = 4, and
// qwen3_5_gdn_grouped: Hk = 2, Hv = 4; D = 64, dk = dv = 16, K = 4, B = 2 sequences of T = 100 tokens, fp32, torch
// chunked path). The Qwen3.5 tensors are mapped onto GdnWeights by slicing rows (in_proj_qkv = [q_all | k_all |
// v_all], conv1d over the same channels) and our gradients are concatenated back the same way (kQwen35Map).
// Compared: output, grad_hidden_states, every grad.<param>, and the final recurrent state (inner.final_state,
// HF [B, Hv, dk, dv] vs our [N, Hv, dv, dk]).
// Tolerance: max |ours − HF| ≤ 1e-4 · max |HF| per tensor (the bound). Both sides are fp32 from the same
// weights; HF runs the chunked WY form (chunk 64, fp32 triangular solve, fp32 GEMMs) while we run the recurrence
// with double accumulation, so the difference is fp32 rounding (mostly HF's), amplified where L2/RMS norms divide by
// short vectors and where gradients such as dA_log, ddt_bias, conv weights are sums over 200 tokens of cancelling
// terms. Measured with goldens from transformers 5.17 / torch 2.11: output ≤ 1.6e-6, final state ≤ 2.7e-7, every
// gradient ≤ 6.3e-6 (conv1d.weight), so 1e-4 leaves ≥ 15x margin while any layout or formula error is ≥ 1e-2.
// A missing golden FAILS this test (the lead generates the files on the GPU machine; see the script's header).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "layers/gdn_layer.h"
#include "support/golden.h"
#include "support/random.h"

using namespace hlm;

namespace {

constexpr double kMaxRelError = 1e-4;

// Qwen3.5 parameter (Qwen3_5GatedDeltaNet.named_parameters()) -> our parameters (gdn_param_tensors names) whose
// row-wise concatenation it is. Used for loading weights and for concatenating gradients back.
const std::vector<std::pair<std::string, std::vector<std::string>>> kQwen35Map = {
    {"in_proj_qkv.weight", {"q_proj.weight", "k_proj.weight", "v_proj.weight"}},
    {"conv1d.weight", {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}},
    {"in_proj_z.weight", {"g_proj.weight"}},
    {"in_proj_a.weight", {"a_proj.weight"}},
    {"in_proj_b.weight", {"b_proj.weight"}},
    {"out_proj.weight", {"o_proj.weight"}},
    {"norm.weight", {"o_norm.weight"}},
    {"A_log", {"A_log"}},
    {"dt_bias", {"dt_bias"}},
};

int64_t meta_int(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) throw std::runtime_error("golden metadata lacks " + key);
  return std::stoll(it->second);
}

std::string meta_str(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) throw std::runtime_error("golden metadata lacks " + key);
  return it->second;
}

template <class S>
Tensor* find_param(S& set, const std::string& name) {
  for (auto& [n, t] : gdn_param_tensors(set))
    if (name == n) return t;
  throw std::runtime_error("no GDN parameter " + name);
}

double compare(const float* got, const Tensor& expect, const std::string& what) {
  const double err = test::max_rel_error(got, expect.f32(), static_cast<size_t>(expect.numel()));
  EXPECT_LE(err, kMaxRelError) << what;
  std::printf("  %-28s max-rel %.2e\n", what.c_str(), err);
  return err;
}

class GdnGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GdnGolden, ForwardBackwardAndStateMatchHF) {
  const std::string case_name = GetParam();
  SafetensorsFile golden = [&] {
    try {
      return test::open_golden(case_name);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << " (generate with: python3 tools/goldens/make_gdn_goldens.py --out tests/golden)";
      throw;
    }
  }();

  GdnDims dims;
  dims.key_heads = meta_int(golden, "linear_num_key_heads");
  dims.value_heads = meta_int(golden, "linear_num_value_heads");
  dims.key_dim = meta_int(golden, "linear_key_head_dim");
  dims.value_dim = meta_int(golden, "linear_value_head_dim");
  dims.conv_kernel = meta_int(golden, "linear_conv_kernel_dim");
  dims.neg_eigval = meta_str(golden, "beta_scaled_by_2") == "true";
  dims.norm_eps = std::stof(meta_str(golden, "norm_eps"));
  ASSERT_EQ(meta_str(golden, "activation"), "silu");
  ASSERT_DOUBLE_EQ(std::stod(meta_str(golden, "l2norm_eps")), 1e-6);
  const int64_t D = meta_int(golden, "hidden_size");

  // Weights: split each Qwen3.5 tensor into our parameters (row-major flat copies, rows in table order).
  GdnWeights w = GdnWeights::zeros(dims, D);
  for (const auto& [hf, ours] : kQwen35Map) {
    const Tensor src = golden.tensor_f32("param." + hf);
    int64_t offset = 0;
    for (const std::string& name : ours) {
      Tensor* dst = find_param(w, name);
      ASSERT_LE(offset + dst->numel(), src.numel()) << hf;
      std::memcpy(dst->f32(), src.f32() + offset, sizeof(float) * static_cast<size_t>(dst->numel()));
      offset += dst->numel();
    }
    ASSERT_EQ(offset, src.numel()) << "param." << hf << " does not split into our shapes";
  }
  ASSERT_NO_THROW(gdn_check_weights(w, dims));

  const Tensor hidden = golden.tensor_f32("hidden_states");  // [B, T, D]
  ASSERT_EQ(hidden.rank(), 3);
  ASSERT_EQ(hidden.dim(2), D);
  const int64_t B = hidden.dim(0), T = hidden.dim(1), n = B * T;
  TokenBatch batch;
  for (int64_t b = 0; b < B; ++b) batch.add_sequence(std::vector<int32_t>(static_cast<size_t>(T), 0));

  // Forward from a zero state (HF: no cache), keeping the final state.
  Arena arena;
  GdnState state = GdnState::zeros(dims, B);
  std::vector<float> out(static_cast<size_t>(n * D)), dx(out.size());
  gdn_layer_forward(out.data(), hidden.f32(), w, dims, batch, &state, arena);
  compare(out.data(), golden.tensor_f32("output"), "output");

  // Final state: HF [B, Hv, dk, dv] -> ours [B, Hv, dv, dk].
  const Tensor hf_state = golden.tensor_f32("inner.final_state");
  ASSERT_EQ(hf_state.numel(), state.recurrent.numel());
  std::vector<float> transposed(static_cast<size_t>(hf_state.numel()));
  const int64_t dk = dims.key_dim, dv = dims.value_dim;
  for (int64_t bh = 0; bh < B * dims.value_heads; ++bh)
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) transposed[(bh * dv + j) * dk + i] = hf_state.f32()[(bh * dk + i) * dv + j];
  EXPECT_LE(test::max_rel_error(state.recurrent.f32(), transposed.data(), transposed.size()), kMaxRelError)
      << "final state";
  std::printf("  %-28s max-rel %.2e\n", "final state",
              test::max_rel_error(state.recurrent.f32(), transposed.data(), transposed.size()));

  // Backward of sum(output * grad_output).
  GdnGrads grads = GdnGrads::zeros_like(w);
  gdn_layer_backward(dx.data(), grads, golden.tensor_f32("grad_output").f32(), hidden.f32(), w, dims, batch, nullptr,
                     arena);
  compare(dx.data(), golden.tensor_f32("grad_hidden_states"), "grad_hidden_states");

  int compared = 0;
  for (const auto& [hf, ours] : kQwen35Map) {
    std::vector<float> cat;
    for (const std::string& name : ours) {
      const Tensor* g = find_param(grads, name);
      cat.insert(cat.end(), g->f32(), g->f32() + g->numel());
    }
    const Tensor expect = golden.tensor_f32("grad." + hf);
    ASSERT_EQ(static_cast<int64_t>(cat.size()), expect.numel()) << hf;
    compare(cat.data(), expect, "grad." + hf);
    ++compared;
  }
  // Every gradient in the golden is covered by the map.
  int in_golden = 0;
  for (const SafetensorsEntry& e : golden.entries()) in_golden += e.name.rfind("grad.", 0) == 0 ? 1 : 0;
  EXPECT_EQ(compared, in_golden);
}

INSTANTIATE_TEST_SUITE_P(HF, GdnGolden, ::testing::Values("qwen3_5_gdn", "qwen3_5_gdn_grouped"));

}  // namespace
