// The start-up memory plan (src/train/memory_plan.h) and training under each plan on the CPU:
// - the fp32 plan's arithmetic reproduces the memory the issue measured for the Qwen3-4B-shaped distillation
//   (fp32 weights 19.1, bf16 copies 8.8, gradients 19.1, AdamW 38.2, teacher 22.5 GiB), and the estimates of every plan
//   for that shape and for the Qwen3-1.7B shape are printed (the figures docs/training.md quotes);
// - auto takes the first plan that fits, a named plan that cannot run and an auto with nothing that fits are input
//   errors that list why;
// - a run under adam8 and under lean stops and resumes bit for bit; a checkpoint of one plan resumes under another
//   (converted) and the run completes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "layers/mlp_bf16_gate_up.h"
#include "models/convert.h"
#include "models/hf_config.h"
#include "models/placements.h"
#include "support/run_binary.h"
#include "train/memory_plan.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1073741824.0;

ModelConfig qwen3_shape(int layers, int hidden, int heads, int kv, int mlp) {
  const nlohmann::json j = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"},
                            {"num_hidden_layers", layers},           {"hidden_size", hidden},
                            {"num_attention_heads", heads},          {"num_key_value_heads", kv},
                            {"head_dim", 128},                       {"intermediate_size", mlp},
                            {"vocab_size", 151936},                  {"max_position_embeddings", 4096},
                            {"rms_norm_eps", 1e-6},                  {"rope_theta", 1000000.0},
                            {"tie_word_embeddings", true}};
  return parse_model_config(j, "test shape");
}

struct TargetShape {
  const char* name;
  ModelConfig teacher, student;
};

TargetShape shape(const char* name, int layers, int hidden, int heads, int kv, int mlp) {
  TargetShape s{name, qwen3_shape(layers, hidden, heads, kv, mlp), {}};
  s.student = convert_student_config(
      s.teacher, placement_layers(Placement::StandardPeriodic, layers, std::max(1, layers / 4)), ConvertOptions{});
  return s;
}

MemoryPlanInputs inputs(const TargetShape& s, int64_t micro_tokens) {
  MemoryPlanInputs in;
  in.student = s.student;
  in.teacher = &s.teacher;
  in.bf16 = true;
  in.micro_batch_tokens = micro_tokens;
  return in;
}

}  // namespace

TEST(MemoryPlan, Fp32PlanReproducesTheMeasuredQwen3_4BFigures) {
  const TargetShape s = shape("qwen3-4b", 36, 2560, 32, 8, 9728);
  const MemoryEstimate e = memory_plan_estimate(memory_plan_named("fp32"), inputs(s, 2 * 1024));
  // The memory-plan line (CudaTrainDevice::print_static_plan on the H200), to 0.05 GiB (its 1 decimal).
  EXPECT_NEAR(e.student_weights / kGiB, 19.1, 0.05);
  EXPECT_NEAR(e.student_copies / kGiB, 8.8, 0.05);
  EXPECT_NEAR(e.gradients / kGiB, 19.1, 0.05);
  EXPECT_NEAR(e.optimizer / kGiB, 38.2, 0.05);
  EXPECT_NEAR(e.teacher / kGiB, 22.5, 0.05);
}

TEST(MemoryPlan, EstimatesOfTheTwoTargets) {
  // Printed for docs/training.md; the assertions are the savings each plan must bring, in bytes.
  for (const TargetShape& s : {shape("qwen3-4b", 36, 2560, 32, 8, 9728), shape("qwen3-1.7b", 28, 2048, 16, 8, 6144)}) {
    const MemoryPlanInputs in = inputs(s, 2 * 1024);  // micro-batch 2 x 1024 (the seed's)
    uint64_t previous = 0;
    for (const MemoryPlanOption& p : memory_plan_options()) {
      MemoryPlanChoice c{&p, memory_plan_estimate(p, in), std::string("target ") + s.name};
      std::printf("%s\n", memory_plan_describe(c).c_str());
      if (previous != 0) {
        EXPECT_LT(c.estimate.total(), previous) << p.name;
      }
      previous = c.estimate.total();
    }
    const MemoryEstimate f = memory_plan_estimate(memory_plan_named("fp32"), in);
    const MemoryEstimate q = memory_plan_estimate(memory_plan_named("adam8"), in);
    const MemoryEstimate l = memory_plan_estimate(memory_plan_named("lean"), in);
    // 8-bit moments: 2 bytes + 8/256 per parameter instead of 8.
    EXPECT_NEAR(static_cast<double>(q.optimizer) / f.optimizer, (2.0 + 8.0 / 256) / 8.0, 1e-3);
    // Teacher in bf16 only: half of the fp32 bytes, none of the copies.
    EXPECT_LT(q.teacher, f.teacher / 2);
    // bf16 masters on the GPU: the linears (their bf16 copies are the masters) and their gradients 2 bytes per
    // parameter instead of 4 (+ 2 for the copy); an untied head is a bf16 master too (its gradient stays fp32); the
    // embedding and the small tensors keep 4 bytes; the head's bf16 copy (V·H·2 bytes) is listed as the copies.
    const uint64_t head = static_cast<uint64_t>(s.student.vocab_size) * static_cast<uint64_t>(s.student.hidden_size);
    const uint64_t untied = s.student.tie_word_embeddings ? 0 : head;
    EXPECT_EQ(l.student_copies, 2 * head);
    EXPECT_EQ(l.gradients - l.student_weights, 4 * untied);  // the untied head: fp32 gradient, bf16 weight
    const uint64_t linears = (f.gradients - l.gradients) / 2;  // bf16 gradients: 2 bytes saved per linear weight
    EXPECT_EQ((f.student_weights + f.student_copies) - (l.student_weights + l.student_copies), 4 * (linears + untied))
        << "the linears' (and an untied head's) bytes move from fp32 weights + bf16 copies to bf16 masters";
    EXPECT_LT(l.gradients, f.gradients);  // by 2 bytes per linear weight (exact above); the embedding's share varies
  }
  // The two targets of the issue, by the arithmetic (the measured peaks: docs/benchmarks.md).
  EXPECT_LT(memory_plan_estimate(memory_plan_named("lean"), inputs(shape("qwen3-4b", 36, 2560, 32, 8, 9728), 2048))
                .total(),
            uint64_t{46} << 30);
  EXPECT_LT(memory_plan_estimate(memory_plan_named("lean"), inputs(shape("qwen3-1.7b", 28, 2048, 16, 8, 6144), 2048))
                .total(),
            uint64_t{24} << 30);
}

// The lean plan's estimate for the 4B student against the peaks measured on the H200 (session 20, call B: the
// allocator's peak in use over attach and the steps, docs/benchmarks.md): 41.12 GiB at 2,048 tokens per micro-batch
// and 43.61 GiB at 4,096. The estimate must stay within 0.5 GiB of each (a plan chooser that is 1 GiB optimistic
// picks a micro-batch that does not fit a 46-GiB card's margin; one that is far pessimistic refuses ones that do).
// Before the GDN layer's own intermediates were counted it was 41.04 and 42.60 (1.0 GiB low at 4,096).
TEST(MemoryPlan, LeanEstimateOfThe4BStudentIsWithinHalfAGibOfTheMeasuredPeaks) {
  const TargetShape s = shape("qwen3-4b", 36, 2560, 32, 8, 9728);
  const struct {
    int64_t tokens;
    double measured_gib;
  } points[] = {{2048, 41.12}, {4096, 43.61}};
  for (const auto& p : points) {
    const double est = double(memory_plan_estimate(memory_plan_named("lean"), inputs(s, p.tokens)).total()) / kGiB;
    std::printf("[memory plan] lean, 4B student, %lld tokens per micro-batch: estimate %.2f GiB, measured %.2f\n",
                static_cast<long long>(p.tokens), est, p.measured_gib);
    EXPECT_NEAR(est, p.measured_gib, 0.5) << p.tokens << " tokens";
  }
}

TEST(MemoryPlan, AutoTakesTheFirstThatFitsAndRefusesClearly) {
  const TargetShape s = shape("qwen3-1.7b", 28, 2048, 16, 8, 6144);
  const MemoryPlanInputs in = inputs(s, 2 * 1024);
  // Unknown free memory (or the CPU): the first plan.
  EXPECT_STREQ(memory_plan_choose("auto", in, false, 0).plan->name, "fp32");
  // Room for adam8 but not for teacher-bf16: adam8.
  const uint64_t adam8 = memory_plan_estimate(memory_plan_named("adam8"), in).total();
  const MemoryPlanChoice c = memory_plan_choose("auto", in, true, adam8 + adam8 / 10);
  EXPECT_STREQ(c.plan->name, "adam8");
  EXPECT_NE(memory_plan_describe(c).find("adam8"), std::string::npos);
  // Room for lean only (bf16 masters on the GPU with --precision bf16): lean.
  const uint64_t lean = memory_plan_estimate(memory_plan_named("lean"), in).total();
  ASSERT_LT(lean + lean / 10, adam8);
  EXPECT_STREQ(memory_plan_choose("auto", in, true, lean + lean / 10).plan->name, "lean");
  // Nothing fits: no plan, and the reason lists every plan's estimate (the trainer refuses with it).
  const MemoryPlanChoice none = memory_plan_choose("auto", in, true, uint64_t{4} << 30);
  EXPECT_EQ(none.plan, nullptr);
  EXPECT_EQ(none.least_bytes, lean);
  EXPECT_NE(none.reason.find("no plan fits"), std::string::npos) << none.reason;
  EXPECT_NE(none.reason.find("teacher-bf16:"), std::string::npos) << none.reason;
  EXPECT_NE(none.reason.find("lean:"), std::string::npos) << none.reason;
  // A named plan that cannot run, and an unknown name.
  MemoryPlanInputs fp32_products = in;
  fp32_products.bf16 = false;
  EXPECT_THROW(memory_plan_choose("teacher-bf16", fp32_products, true, 0), Error);
  EXPECT_THROW(memory_plan_choose("lean", fp32_products, true, 0), Error);  // the GPU's bf16 masters need bf16
  EXPECT_NE(memory_plan_unusable(memory_plan_named("lean"), fp32_products, true), "");
  EXPECT_EQ(memory_plan_unusable(memory_plan_named("lean"), fp32_products, false), "");  // the CPU optimizer
  EXPECT_THROW(memory_plan_named("tiny"), Error);
}

TEST(MemoryPlan, PerRankEstimatesReproduceTheDistributedTables) {
  // docs/distributed.md, "Memory per GPU of the seed-scale student": the Qwen3-4B-shaped distillation, --precision
  // bf16, the GPU trainer with ZeRO-1 on W ranks (fp32 masters of the linears sharded, the default). The tables give
  // each item to 2 decimals (GiB) and the totals before activations to 1 decimal; the estimate must reproduce them.
  const TargetShape s = shape("qwen3-4b", 36, 2560, 32, 8, 9728);
  struct Row {
    int64_t ranks;
    // Totals before activations (GiB). fp32: the table of session 16; teacher-bf16, adam8 and lean: this test's
    // output, written into the tables (the teacher in bf16 only, 7.49 GiB: linears, head and the tied embedding's one
    // table in bf16, as CudaModel::drop_fp32_weights holds it; sessions 17-18 kept its embedding fp32, 8.94).
    double fp32, teacher_bf16, adam8, lean;
  };
  const Row rows[] = {{2, 89.3, 74.3, 60.1, 33.6}, {4, 70.6, 55.6, 48.5, 31.2}, {8, 61.2, 46.2, 42.7, 30.0}};
  const MemoryPlanInputs one = inputs(s, 2 * 1024);
  const MemoryEstimate f1 = memory_plan_estimate(memory_plan_named("fp32"), one);
  const MemoryEstimate q1 = memory_plan_estimate(memory_plan_named("adam8"), one);
  const MemoryEstimate l1 = memory_plan_estimate(memory_plan_named("lean"), one);
  EXPECT_EQ(f1.master_shard + f1.gradient_shard + q1.master_shard + q1.gradient_shard, 0u);  // one rank: no shard
  for (const Row& row : rows) {
    MemoryPlanInputs in = one;
    in.ranks = row.ranks;
    in.gpu = true;
    const double W = static_cast<double>(row.ranks);
    for (const MemoryPlanOption& p : memory_plan_options()) {
      const MemoryEstimate e = memory_plan_estimate(p, in);
      MemoryPlanChoice c{&p, e, "docs/distributed.md", 0, row.ranks, 1};
      std::printf("%s\n", memory_plan_describe(c).c_str());
      std::printf("  W %lld %-12s whole %.2f | master shard %.2f | copies %.2f | gradients %.2f + shard %.2f | "
                  "moments %.2f | teacher %.2f | before activations %.2f GiB\n",
                  static_cast<long long>(row.ranks), p.name, e.student_weights / kGiB, e.master_shard / kGiB,
                  e.student_copies / kGiB, e.gradients / kGiB, e.gradient_shard / kGiB, e.optimizer / kGiB,
                  e.teacher / kGiB, e.before_activations() / kGiB);
      const std::string name = p.name;
      const double expected = name == "fp32" ? row.fp32 : name == "teacher-bf16" ? row.teacher_bf16
                              : name == "adam8" ? row.adam8 : row.lean;
      EXPECT_NEAR(e.before_activations() / kGiB, expected, 0.06) << p.name << " at " << row.ranks << " ranks";
      EXPECT_EQ(e.activations, f1.activations);  // the same micro-batch on every rank
      if (p.master == MasterFormat::Bf16Sr) {
        // lean: the bf16 masters and the gradients whole (the forward reads them; the reduced chunks go back into
        // the gradients), the 8-bit moments divided by W, no master or gradient shard.
        EXPECT_EQ(e.student_weights, l1.student_weights);
        EXPECT_EQ(e.gradients, l1.gradients);
        EXPECT_EQ(e.master_shard + e.gradient_shard, 0u);
        EXPECT_NEAR(e.optimizer / kGiB, l1.optimizer / kGiB / W, 1e-6);
        continue;
      }
      // The table's columns: fp32 whole 1.45, masters 17.64/W, gradients 19.1 + shard 19.09/W, moments /W.
      EXPECT_NEAR(e.student_weights / kGiB, 1.45, 0.005) << p.name;
      EXPECT_NEAR(e.master_shard / kGiB, 17.64 / W, 0.005) << p.name;
      EXPECT_NEAR((e.student_weights + e.master_shard * W) / kGiB, f1.student_weights / kGiB, 1e-6);
      EXPECT_EQ(e.gradients, f1.gradients);
      EXPECT_NEAR(e.gradient_shard / kGiB, f1.gradients / kGiB / W, 1e-6);
      const MemoryEstimate& whole = p.state == AdamWStateFormat::Q8 ? q1 : f1;
      EXPECT_NEAR(e.optimizer / kGiB, whole.optimizer / kGiB / W, 1e-6);
    }
    // --zero-stage 0: nothing sharded, the one-process figures on every rank.
    in.zero_stage = 0;
    EXPECT_EQ(memory_plan_estimate(memory_plan_named("adam8"), in).total(), q1.total());
    EXPECT_NE(memory_plan_unusable(memory_plan_named("lean"), in, true), "");  // zero 0: refused by the trainer
  }
  // auto per rank, 50 GiB free (47.5 after headroom): one process takes lean (adam8 needs 68.2 GiB), 8 ranks take
  // adam8 (46.7 GiB per rank; teacher-bf16 50.3).
  MemoryPlanInputs eight = one;
  eight.ranks = 8;
  eight.gpu = true;
  const uint64_t free = uint64_t{50} << 30;
  EXPECT_STREQ(memory_plan_choose("auto", one, true, free).plan->name, "lean");
  const MemoryPlanChoice c8 = memory_plan_choose("auto", eight, true, free);
  EXPECT_STREQ(c8.plan->name, "adam8");
  EXPECT_NE(memory_plan_describe(c8).find("per rank of 8 (ZeRO-1)"), std::string::npos) << memory_plan_describe(c8);
  // The CPU trainer on several ranks: ZeRO-1 shards fp32 masters and moments only; zero 0 runs every plan.
  MemoryPlanInputs cpu = one;
  cpu.ranks = 2;
  EXPECT_NE(memory_plan_unusable(memory_plan_named("adam8"), cpu, false), "");
  EXPECT_THROW(memory_plan_choose("lean", cpu, false, 0), Error);
  EXPECT_STREQ(memory_plan_choose("auto", cpu, false, 0).plan->name, "fp32");
  cpu.zero_stage = 0;
  EXPECT_EQ(memory_plan_unusable(memory_plan_named("adam8"), cpu, false), "");
  EXPECT_EQ(memory_plan_unusable(memory_plan_named("lean"), cpu, false), "");
}

namespace {

class TrainerMemoryPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    test::use_one_thread();
    test::write_tiny_corpus(scratch.path() / "corpus", 200);
    test::write_tiny_teacher_and_student(scratch.path());
  }
  TrainConfig config(const std::string& out, int64_t steps, const std::string& plan) const {
    TrainConfig c = test::tiny_train_config(TrainJob::Distill, scratch.path() / "corpus", scratch.path() / out);
    c.teacher = (scratch.path() / "teacher").string();
    c.student = (scratch.path() / "student").string();
    c.tokens = steps * c.batch_rows * c.seq_len;
    c.eval_every_tokens = 0;
    c.memory_plan = plan;
    return c;
  }
  static std::string file_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  test::ScratchDir scratch{"trainer-memory-plan"};
};

}  // namespace

TEST_F(TrainerMemoryPlan, StopAndResumeIsBitIdenticalUnderEachPlan) {
  for (const std::string plan : {"adam8", "lean"}) {
    SCOPED_TRACE(plan);
    const TrainResult straight = train_run(config(plan + "-straight", 6, plan));
    ASSERT_EQ(straight.status, TrainStatus::Completed) << straight.message;
    TrainConfig first = config(plan + "-split", 6, plan);
    first.stop_after_steps = 3;
    const TrainResult half = train_run(first);
    ASSERT_EQ(half.status, TrainStatus::Stopped);
    TrainConfig second = config(plan + "-split", 6, plan);
    second.resume = (scratch.path() / (plan + "-split")).string();
    const TrainResult rest = train_run(second);
    ASSERT_EQ(rest.status, TrainStatus::Completed) << rest.message;
    std::vector<double> joined = half.losses;
    joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
    ASSERT_EQ(joined.size(), straight.losses.size());
    for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], straight.losses[i]) << "step " << i + 1;
    EXPECT_EQ(file_bytes(scratch.path() / (plan + "-split") / "model" / "model.safetensors"),
              file_bytes(scratch.path() / (plan + "-straight") / "model" / "model.safetensors"));
  }
}

TEST_F(TrainerMemoryPlan, LowMemoryPlansTrackFp32) {
  // 30 steps of the tiny distillation: the adam8 and lean losses stay within 5% of the fp32 plan's at every step
  // (the same bound as the ops-level test's, for the same reasons; a broken quantizer or a biased rounding leaves it).
  const TrainResult base = train_run(config("fp32", 30, "fp32"));
  ASSERT_EQ(base.status, TrainStatus::Completed) << base.message;
  ASSERT_LT(base.losses.back(), base.losses.front());
  for (const std::string plan : {"adam8", "lean"}) {
    const TrainResult r = train_run(config(plan, 30, plan));
    ASSERT_EQ(r.status, TrainStatus::Completed) << r.message;
    ASSERT_EQ(r.losses.size(), base.losses.size());
    for (size_t i = 0; i < r.losses.size(); ++i)
      EXPECT_NEAR(r.losses[i], base.losses[i], 0.05 * base.losses[i]) << plan << " step " << i + 1;
  }
}

TEST_F(TrainerMemoryPlan, ACheckpointResumesUnderAnotherPlan) {
  // fp32 → adam8 (moments quantized) and adam8 → fp32 (dequantized): both resume and complete; the fp32 → adam8
  // checkpoint's moments, saved again as q8, hold the quantization of the fp32 ones.
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"fp32", "adam8"}, {"adam8", "fp32"},
                                 {"fp32", "lean"}}) {
    SCOPED_TRACE(from + " -> " + to);
    const std::string out = from + "-to-" + to;
    TrainConfig first = config(out, 4, from);
    first.stop_after_steps = 2;
    ASSERT_EQ(train_run(first).status, TrainStatus::Stopped);
    TrainConfig second = config(out, 4, to);
    second.resume = (scratch.path() / out).string();
    const TrainResult rest = train_run(second);
    ASSERT_EQ(rest.status, TrainStatus::Completed) << rest.message;
    for (double l : rest.losses) EXPECT_TRUE(std::isfinite(l));
  }
}

// --recompute none keeps every layer's intermediates for the whole micro-batch: the estimate adds exactly
// kept_intermediate_bytes (the activations term only), and that term, for the 4B student in the bf16 mode, is the
// tensors CudaKeptLayer holds, listed here one by one from the layer headers (the GPU test CudaKeptActivations checks
// the function against a real trace's bytes; this one pins the per-token arithmetic of the seed-scale shape).
TEST(MemoryPlan, RecomputeNoneCountsEveryLayersKeptIntermediates) {
  const TargetShape s = shape("qwen3-4b", 36, 2560, 32, 8, 9728);
  const ModelConfig& c = s.student;
  const int64_t tokens = 4 * 1024, sequences = 4;
  mlp_set_bf16_gate_up(1);  // the default form (gate and up kept in bf16), whatever the environment says
  MemoryPlanInputs layer = inputs(s, tokens), none = layer;
  none.recompute = Recompute::None;
  none.micro_batch_sequences = sequences;
  for (const MemoryPlanOption& p : memory_plan_options()) {
    const MemoryEstimate a = memory_plan_estimate(p, layer), b = memory_plan_estimate(p, none);
    EXPECT_EQ(a.before_activations(), b.before_activations()) << p.name;
    EXPECT_EQ(a.kept_intermediates, 0u) << p.name;
    EXPECT_EQ(b.kept_intermediates, kept_intermediate_bytes(c, tokens, sequences, true)) << p.name;
    EXPECT_EQ(b.activations - a.activations, b.kept_intermediates) << p.name;
    const std::string line = memory_plan_describe({&p, b, "test"});
    EXPECT_NE(line.find("--recompute none"), std::string::npos) << line;
    EXPECT_EQ(memory_plan_describe({&p, a, "test"}).find("--recompute none"), std::string::npos);
  }
  // By hand: hidden 2560, MLP 9728, 32 q / 8 kv heads of 128; the GDN layers 32 k / 32 v heads of 128 (the student's
  // conversion keeps the attention's q-heads count and head size for the GDN heads, checked here).
  const GdnDims g = gdn_dims(c);
  ASSERT_EQ(g.key_heads, 32);
  ASSERT_EQ(g.value_heads, 32);
  ASSERT_EQ(g.key_dim, 128);
  ASSERT_EQ(g.value_dim, 128);
  const uint64_t T = tokens, H = 2560, F = 9728, Cq = 4096, Ckv = 1024, Hq = 32, Ck = 4096, Cv = 4096, Hv = 32;
  const uint64_t block = 2 * 2 * H;                 // mixer_in16, mlp_in16
  const uint64_t mlp = 2 * F + 2 * F + 2 * F;       // gate16, up16, h16 (the bf16 gate/up form, the default)
  const uint64_t attention = 4 * Cq + 4 * Ckv + 4 * Hq + 2 * Cq + 2 * Ckv + 2 * Ckv + 2 * Cq;  // q̃ k̃ lse q16 k16 v16 o16
  const uint64_t gdn = 4 * (3 * Ck + 3 * Ck + Cv + Cv + Cv + Cv) + 4 * 4 * Hv + 2 * Cv;  // q̃k̃ qc kc qn kn, ṽ z vc o,
                                                                                       // a b g β, y16
  // The chunked rule's kept forward: pieces aligned to 256 bytes; chunks = T/64 + N + 1 = 69.
  const uint64_t chunks = T / 64 + sequences + 1;
  uint64_t rule = 0;
  for (const uint64_t piece : {chunks * 16, uint64_t{8} * (sequences + 1), 4 * T * Hv, 2 * T * Ck, 2 * T * Ck,
                               4 * T * Cv, 2 * chunks * Hv * 128 * 128, 2 * chunks * Hv * 64 * 64, 2 * T * Cv,
                               2 * T * Ck})
    rule = (rule + 255) / 256 * 256 + piece;
  const uint64_t attention_layers = 9, gdn_layers = 27;
  ASSERT_EQ(static_cast<uint64_t>(std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::FullAttention)),
            attention_layers);
  const uint64_t expected = attention_layers * T * (block + mlp + attention) + gdn_layers * (T * (block + mlp + gdn) + rule);
  EXPECT_EQ(kept_intermediate_bytes(c, tokens, sequences, true), expected);
  std::printf("[memory plan] --recompute none, 4B student, bf16, 4 x 1024 tokens: %.2f GiB kept intermediates "
              "(%.1f MiB per attention layer, %.1f MiB per GDN layer of which %.1f MiB the chunked rule's forward); "
              "lean estimate %.2f GiB (recompute layer: %.2f GiB)\n",
              expected / kGiB, T * (block + mlp + attention) / 1048576.0,
              (T * (block + mlp + gdn) + rule) / 1048576.0, rule / 1048576.0,
              memory_plan_estimate(memory_plan_named("lean"), none).total() / kGiB,
              memory_plan_estimate(memory_plan_named("lean"), layer).total() / kGiB);
  // The fp32 mode keeps fp32 operands and no chunked-rule forward (the recurrence runs there).
  EXPECT_GT(kept_intermediate_bytes(c, tokens, sequences, false), 0u);
  EXPECT_EQ(kept_intermediate_bytes(c, 0, 1, true), 0u);
  mlp_set_bf16_gate_up(-1);
}

// The bf16 gate/up form (HLM_MLP_BF16_GATE_UP, layers/mlp_bf16_gate_up.h) keeps an MLP's gate and up in bf16: exactly
// 4·F bytes per token and layer fewer in the bf16 mode, nothing else changes; the fp32 mode, a one-row batch (the
// small-row GEMV's, which keeps its fp32 form) and an MLP with biases are not affected.
TEST(MemoryPlan, Bf16GateUpKeepsHalfTheGateAndUpBytes) {
  const TargetShape s = shape("qwen3-4b", 36, 2560, 32, 8, 9728);
  const ModelConfig& c = s.student;
  const int64_t tokens = 2 * 1024, sequences = 2;
  const uint64_t F = 9728, layers = 36;
  mlp_set_bf16_gate_up(0);
  const uint64_t off = kept_intermediate_bytes(c, tokens, sequences, true);
  const uint64_t off_f32 = kept_intermediate_bytes(c, tokens, sequences, false);
  const uint64_t off_row = kept_intermediate_bytes(c, 1, 1, true);
  ModelConfig biased = c;
  biased.mlp_bias = true;
  const uint64_t off_biased = kept_intermediate_bytes(biased, tokens, sequences, true);
  mlp_set_bf16_gate_up(1);
  const uint64_t on = kept_intermediate_bytes(c, tokens, sequences, true);
  const uint64_t on_f32 = kept_intermediate_bytes(c, tokens, sequences, false);
  const uint64_t on_row = kept_intermediate_bytes(c, 1, 1, true);
  const uint64_t on_biased = kept_intermediate_bytes(biased, tokens, sequences, true);
  mlp_set_bf16_gate_up(-1);
  EXPECT_EQ(off - on, layers * static_cast<uint64_t>(tokens) * 4 * F);
  EXPECT_EQ(on_f32, off_f32);
  EXPECT_EQ(on_row, off_row);
  EXPECT_EQ(on_biased, off_biased);
  std::printf("[memory plan] bf16 gate/up, 4B student, 2 x 1024 tokens: %.2f -> %.2f GiB kept intermediates\n",
              off / kGiB, on / kGiB);
}
