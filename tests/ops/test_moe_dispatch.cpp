// Routed-expert dispatch, CPU reference (src/ops/moe_dispatch/moe_dispatch.h) against the CPU MoE layer
// (layers/moe_layer.h), which the HF goldens check: the op's pieces composed as the CUDA layer composes them
// (route -> stable sort by expert -> each expert's SwiGLU MLP over its contiguous rows -> combine) must give the layer's
// output BIT FOR BIT (same per-expert rows in the same token order, same float sums in the same order), with and
// without renormalisation and the gated shared expert; routing must equal moe_route exactly (experts, weights, probs).
// Plus the dispatch invariants (counts, offsets, stability, slot = perm⁻¹) and its rejection of a bad expert id.
// No backward: the op is the forward's dispatch; the layer's backward has its own finite-difference checks
// (tests/models/test_qwen3_moe.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/rng.h"
#include "layers/moe_layer.h"
#include "ops/moe_dispatch/moe_dispatch.h"

using namespace hlm;

namespace {

Linear random_linear(int64_t out, int64_t in, float scale, uint64_t stream) {
  Linear l;
  l.weight = Tensor::zeros({out, in});
  rng_fill_normal(l.weight.f32(), static_cast<uint64_t>(out * in), 0.0f, scale, 17, stream);
  return l;
}

MlpWeights random_mlp(int64_t H, int64_t F, uint64_t stream) {
  return {random_linear(F, H, 0.3f, stream), random_linear(F, H, 0.3f, stream + 1),
          random_linear(H, F, 0.3f, stream + 2)};
}

struct Layer {
  MoeWeights w;
  MoeDims d;
};

Layer random_layer(int64_t H, int64_t F, int64_t E, int64_t k, bool norm, bool shared) {
  Layer l;
  l.d = {E, k, norm};
  l.w.router = random_linear(E, H, 0.5f, 100);
  for (int64_t e = 0; e < E; ++e) l.w.experts.push_back(random_mlp(H, F, 200 + 3 * static_cast<uint64_t>(e)));
  if (shared) {
    l.w.shared_expert = random_mlp(H, F + 3, 900);
    l.w.shared_expert_gate = random_linear(1, H, 0.5f, 950);
  }
  return l;
}

}  // namespace

TEST(MoeDispatchRef, ComposedPiecesEqualTheCpuLayerBitForBit) {
  const int64_t H = 24, F = 10, T = 29;
  for (const auto& [E, k, norm, shared] : std::vector<std::tuple<int64_t, int64_t, bool, bool>>{
           {6, 2, true, false}, {6, 3, false, true}, {16, 8, true, true}, {5, 1, true, false}}) {
    SCOPED_TRACE(testing::Message() << "E=" << E << " k=" << k << " norm=" << norm << " shared=" << shared);
    const Layer l = random_layer(H, F, E, k, norm, shared);
    std::vector<float> x(static_cast<size_t>(T * H));
    rng_fill_normal(x.data(), x.size(), 0.0f, 1.0f, 5, 1);
    Arena arena;
    std::vector<float> layer_out(x.size()), layer_probs(static_cast<size_t>(T * E));
    moe_layer_forward(layer_out.data(), x.data(), l.w, l.d, T, arena, layer_probs.data());

    // Routing: the op's reference against the layer's moe_route on the same logits.
    std::vector<float> logits(static_cast<size_t>(T * E));
    linear_forward(logits.data(), x.data(), l.w.router, T);
    const auto n = static_cast<size_t>(T * k);
    std::vector<int32_t> expert(n);
    std::vector<float> weight(n), probs(static_cast<size_t>(T * E));
    moe_route_ref(expert.data(), weight.data(), probs.data(), logits.data(), T, E, k, norm);
    const MoeRoute route = moe_route(logits.data(), l.d, T);
    EXPECT_EQ(expert, route.expert);
    EXPECT_EQ(std::memcmp(weight.data(), route.weight.data(), n * sizeof(float)), 0) << "route weights";
    EXPECT_EQ(std::memcmp(probs.data(), layer_probs.data(), probs.size() * sizeof(float)), 0) << "router probs";

    // Dispatch, gather, each expert over its contiguous rows, combine.
    std::vector<int32_t> counts(static_cast<size_t>(E)), offsets(static_cast<size_t>(E + 1)), perm(n), slot(n);
    moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), expert.data(), T, k, E);
    std::vector<float> rows(n * H), y(n * H);
    for (size_t r = 0; r < n; ++r)
      std::memcpy(rows.data() + r * H, x.data() + (perm[r] / k) * H, sizeof(float) * H);
    for (int64_t e = 0; e < E; ++e)
      if (counts[e] > 0)
        mlp_layer_forward(y.data() + offsets[e] * H, rows.data() + offsets[e] * H,
                          l.w.experts[static_cast<size_t>(e)], counts[e], arena);
    std::vector<float> shared_out, gate;
    if (shared) {
      shared_out.resize(x.size());
      gate.resize(static_cast<size_t>(T));
      mlp_layer_forward(shared_out.data(), x.data(), l.w.shared_expert, T, arena);
      linear_forward(gate.data(), x.data(), l.w.shared_expert_gate, T);
    }
    std::vector<float> out(x.size());
    moe_combine_ref(out.data(), y.data(), weight.data(), expert.data(), slot.data(),
                    shared ? shared_out.data() : nullptr, gate.data(), T, k, H);
    EXPECT_EQ(std::memcmp(out.data(), layer_out.data(), out.size() * sizeof(float)), 0) << "combined output";
  }
}

// The bailing router and ungated shared expert (Ring-mini-linear-2.0): the layer's router is this reference
// (layers/moe_layer.cpp calls it; its values are checked by hand in tests/models/test_bailing.cpp), the composed
// pieces (reference route, dispatch, the experts' MLPs, the shared expert added without a gate) = the layer's output
// bit for bit; a NaN logit gives its token NaN weights and in-range experts.
TEST(MoeDispatchRef, SigmoidGroupedRouterAndUngatedSharedExpertEqualTheCpuLayer) {
  const int64_t H = 24, F = 10, T = 29;
  for (const auto& [E, k, G, kept, norm] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>>{
           {16, 3, 4, 2, true}, {16, 4, 8, 3, false}, {12, 2, 3, 1, true}}) {
    SCOPED_TRACE(testing::Message() << "E=" << E << " k=" << k << " G=" << G << " kept=" << kept);
    Layer l = random_layer(H, F, E, k, norm, false);
    l.d.sigmoid_grouped = true;
    l.d.n_group = G;
    l.d.topk_group = kept;
    l.d.routed_scaling = 2.5f;
    l.w.expert_bias = Tensor::zeros({E});
    rng_fill_normal(l.w.expert_bias.f32(), static_cast<uint64_t>(E), 0.0f, 0.3f, 17, 960);
    l.w.shared_expert = random_mlp(H, F + 3, 900);  // no shared_expert_gate: the ungated one
    ASSERT_TRUE(l.w.has_ungated_shared_expert());
    std::vector<float> x(static_cast<size_t>(T * H));
    rng_fill_normal(x.data(), x.size(), 0.0f, 1.0f, 5, 1);
    Arena arena;
    std::vector<float> layer_out(x.size()), layer_scores(static_cast<size_t>(T * E));
    moe_layer_forward(layer_out.data(), x.data(), l.w, l.d, T, arena, layer_scores.data());

    std::vector<float> logits(static_cast<size_t>(T * E));
    linear_forward(logits.data(), x.data(), l.w.router, T);
    const auto n = static_cast<size_t>(T * k);
    std::vector<int32_t> expert(n);
    std::vector<float> weight(n), scores(static_cast<size_t>(T * E));
    moe_route_sigmoid_grouped_ref(expert.data(), weight.data(), scores.data(), logits.data(), l.w.expert_bias.f32(),
                                  T, E, k, G, kept, norm, 2.5f);

    std::vector<int32_t> counts(static_cast<size_t>(E)), offsets(static_cast<size_t>(E + 1)), perm(n), slot(n);
    moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), expert.data(), T, k, E);
    std::vector<float> rows(n * H), y(n * H);
    for (size_t r = 0; r < n; ++r)
      std::memcpy(rows.data() + r * H, x.data() + (perm[r] / k) * H, sizeof(float) * H);
    for (int64_t e = 0; e < E; ++e)
      if (counts[e] > 0)
        mlp_layer_forward(y.data() + offsets[e] * H, rows.data() + offsets[e] * H,
                          l.w.experts[static_cast<size_t>(e)], counts[e], arena);
    std::vector<float> shared_out(x.size());
    mlp_layer_forward(shared_out.data(), x.data(), l.w.shared_expert, T, arena);
    std::vector<float> out(x.size());
    moe_combine_ref(out.data(), y.data(), weight.data(), expert.data(), slot.data(), shared_out.data(), nullptr, T, k,
                    H);
    EXPECT_EQ(std::memcmp(out.data(), layer_out.data(), out.size() * sizeof(float)), 0) << "combined output";

    logits[static_cast<size_t>(3 * E + 1)] = std::nanf("");  // token 3
    moe_route_sigmoid_grouped_ref(expert.data(), weight.data(), nullptr, logits.data(), l.w.expert_bias.f32(), T, E,
                                  k, G, kept, norm, 2.5f);
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_TRUE(std::isnan(weight[static_cast<size_t>(3 * k + j)]));
      EXPECT_TRUE(expert[static_cast<size_t>(3 * k + j)] >= 0 && expert[static_cast<size_t>(3 * k + j)] < E);
      EXPECT_FALSE(std::isnan(weight[static_cast<size_t>(2 * k + j)]));
    }
  }
}

TEST(MoeDispatchRef, DispatchIsAStableSortWithItsInverse) {
  const int64_t T = 11, k = 3, E = 7;
  std::vector<int32_t> expert;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) expert.push_back(static_cast<int32_t>((t * 5 + j * 2) % (E - 1)));  // E-1 unused
  const auto n = static_cast<size_t>(T * k);
  std::vector<int32_t> counts(E), offsets(E + 1), perm(n), slot(n);
  moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), expert.data(), T, k, E);
  EXPECT_EQ(counts[E - 1], 0);
  EXPECT_EQ(offsets[E], static_cast<int32_t>(n));
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(offsets[e + 1] - offsets[e], counts[e]);
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      EXPECT_EQ(expert[perm[r]], e);
      if (r > offsets[e]) {
        EXPECT_LT(perm[r - 1], perm[r]) << "stable: increasing pick index within an expert";
      }
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(perm[slot[i]], static_cast<int32_t>(i));
  expert[4] = static_cast<int32_t>(E);
  EXPECT_THROW(moe_dispatch_ref(counts.data(), offsets.data(), perm.data(), slot.data(), expert.data(), T, k, E),
               Error);
}
