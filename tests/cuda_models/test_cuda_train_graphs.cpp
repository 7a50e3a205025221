// The GPU trainer's captured steps (CudaTrainDeviceOptions::cuda_graphs, `hybridlm synth --cuda-graphs`) against its
// eager steps: two CudaTrainDevices on copies of the same model and AdamW, one with graphs and one without, take the
// same 9 steps (synth-like batches: one row of packed sequences, a CE target only at each sequence's last token, pad
// sequences without targets, the learning rate changing every step). Three batch shapes recur, so the graph device
// runs each shape's first step eagerly, captures it the second time and replays it afterwards; one step has another
// longest sequence within the same 64-token round-up (the key), so it replays a graph with a larger attention grid.
// A replay runs the same kernels with the same arguments in the same order as the eager step (it only skips the host),
// so the check is exact: every step's loss and gradient norm, and after the last step every weight and both AdamW
// moments of every parameter, bit for bit; the graph device must really have captured and replayed (and failed no
// capture), the eager one never. Transformer and hybrid (GDN ×3 + attention), fp32 and bf16 compute.
// Then a bad token id inside a replayed shape must still give the input error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "cuda_models/cuda_model_support.h"
#include "evals/synth/synth_models.h"
#include "models/model.h"
#include "models/model_train.h"
#include "train/adamw.h"
#include "train/cuda/cuda_train_device.h"
#include "train/grad_utils.h"
#include "train/lr_schedule.h"

using namespace hlm;

namespace {

// One row of packed sequences with the given lengths (ids from an LCG seeded by `seed`), a CE target at each
// sequence's last token except the last `pads` sequences (all-pad, no target), as the synth GPU path packs a step.
PackedBatch packed_step(const std::vector<int>& lengths, int pads, int64_t vocab, uint32_t seed) {
  PackedBatch out;
  out.rows = 1;
  uint32_t state = 2654435761u * (seed + 1u);
  const auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab));
  };
  for (size_t s = 0; s < lengths.size(); ++s) {
    const bool pad = static_cast<int>(lengths.size() - s) <= pads;
    std::vector<int32_t> seq;
    for (int t = 0; t < lengths[s]; ++t) seq.push_back(pad ? 0 : next());
    out.batch.add_sequence(seq);
    for (int t = 0; t < lengths[s]; ++t) out.targets.push_back(!pad && t + 1 == lengths[s] ? next() : -100);
  }
  out.language.assign(out.targets.size(), 0);
  return out;
}

// The steps: shapes A, B, C recur with new ids each step. A2 has A's tokens and sequences but another longest
// sequence (21 instead of 30): the same graph key (longest rounded up to 64), so it replays A's graph, whose attention
// grid is sized for 64, against the eager step's grid for 21.
std::vector<PackedBatch> steps_of(int64_t vocab) {
  const std::vector<int> a{13, 21, 8, 30, 5}, a2{13, 21, 8, 20, 15}, b{17, 17, 40, 9}, c{64, 3, 11, 26, 7, 6};
  const std::vector<std::pair<const std::vector<int>*, int>> order{{&a, 1}, {&b, 0}, {&a, 1}, {&c, 2}, {&b, 0},
                                                                   {&a2, 1}, {&c, 2}, {&a, 1}, {&c, 2}};
  std::vector<PackedBatch> out;
  for (size_t s = 0; s < order.size(); ++s) out.push_back(packed_step(*order[s].first, order[s].second, vocab, s));
  return out;
}

struct TrainRun {
  std::vector<double> losses, norms;
  std::vector<Tensor> weights, exp_avg, exp_avg_sq;
  StepGraphStats stats;
};

TrainRun train(const ModelConfig& mc, bool bf16, bool graphs, const std::vector<PackedBatch>& steps) {
  Model model = Model::create(mc, 7);
  DecoderWeights grads = zero_grads_like(mc);
  std::vector<AdamWParam> params;
  for (const NamedParameter& p : named_parameters(mc, model.mutable_weights(), grads))
    params.push_back({p.name, p.value, p.grad, default_weight_decay(p.name) ? 0 : 1});
  AdamW optimizer({{"decay", 1e-3, 0.01, 0.0}, {"no_decay", 1e-3, 0.0, 0.0}}, std::move(params));
  LrSchedule schedule;
  schedule.total_steps = static_cast<int64_t>(steps.size());
  schedule.warmup_steps = 2;
  schedule.min_lr = 1e-5;
  CudaTrainDevice device(CudaTrainDeviceOptions{.bf16 = bf16, .recompute = Recompute::Layer, .cuda_graphs = graphs});
  device.attach(model, nullptr, optimizer);
  TrainRun run;
  for (size_t s = 0; s < steps.size(); ++s) {
    lr_schedule_apply(optimizer, schedule, static_cast<int64_t>(s + 1));
    double norm = 0.0;
    run.losses.push_back(device.step(steps[s], 1, 1.0, 1.0, &norm, 1).loss);
    run.norms.push_back(norm);
  }
  device.sync_to_host();
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    run.weights.push_back(optimizer.params()[i].param.clone());
    run.exp_avg.push_back(optimizer.exp_avg(i));
    run.exp_avg_sq.push_back(optimizer.exp_avg_sq(i));
  }
  run.stats = device.graph_stats();
  // A bad id in a shape the device has captured (A): the input error of the eager forward.
  if (graphs) {
    PackedBatch bad = steps[0];
    bad.batch.ids[3] = static_cast<int32_t>(mc.vocab_size + 5);
    double norm = 0.0;
    EXPECT_THROW(device.step(bad, 1, 1.0, 1.0, &norm, 1), Error) << "a bad token id in a replayed step";
  }
  return run;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

TEST(CudaTrainGraphs, ReplayedStepsEqualEagerStepsBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  SynthConfig c;
  c.num_layers = 4;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_heads = 2;
  c.head_dim = 32;
  c.gdn_value_head_dim = 32;
  c.max_address = 64;
  for (SynthArch arch : {SynthArch::Transformer, SynthArch::HybridNeg}) {
    const ModelConfig mc = synth_model_config(c, arch, SynthTask::StateBasedRecall);
    const std::vector<PackedBatch> steps = steps_of(mc.vocab_size);
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(synth_arch_spec(arch).name) + (bf16 ? " bf16" : " fp32"));
      const TrainRun eager = train(mc, bf16, false, steps);
      const TrainRun graph = train(mc, bf16, true, steps);
      for (size_t s = 0; s < steps.size(); ++s) {
        EXPECT_TRUE(std::isfinite(eager.losses[s]));
        EXPECT_TRUE(same_bits(graph.losses[s], eager.losses[s]))
            << "step " << s + 1 << ": loss " << graph.losses[s] << " vs " << eager.losses[s];
        EXPECT_TRUE(same_bits(graph.norms[s], eager.norms[s]))
            << "step " << s + 1 << ": norm " << graph.norms[s] << " vs " << eager.norms[s];
      }
      size_t differing = 0;
      for (size_t i = 0; i < eager.weights.size(); ++i)
        differing += !same_bits(graph.weights[i], eager.weights[i]) + !same_bits(graph.exp_avg[i], eager.exp_avg[i]) +
                     !same_bits(graph.exp_avg_sq[i], eager.exp_avg_sq[i]);
      EXPECT_EQ(differing, 0u) << "tensors (weights, m, v) that differ after " << steps.size() << " steps";
      std::printf("[train graphs] %s %s: %lld captured, %lld replays, %lld eager steps, %lld failures; final loss "
                  "%.9g (eager %.9g), %zu differing tensors\n",
                  synth_arch_spec(arch).name, bf16 ? "bf16" : "fp32",
                  static_cast<long long>(graph.stats.captures), static_cast<long long>(graph.stats.replays),
                  static_cast<long long>(graph.stats.eager_steps), static_cast<long long>(graph.stats.failures),
                  graph.losses.back(), eager.losses.back(), differing);
      EXPECT_EQ(graph.stats.failures, 0);
      EXPECT_EQ(graph.stats.captures, 3);     // A, B, C at their second step
      EXPECT_EQ(graph.stats.eager_steps, 3);  // their first steps
      EXPECT_GE(graph.stats.replays, 6);      // every later step (the bad-id step adds one)
      EXPECT_EQ(eager.stats.captures + eager.stats.replays, 0);
    }
  }
}

}  // namespace
