// The CUDA engine's fused launches against the separate launches they replace, end to end: two engines over the same
// CudaModel run the same teacher-forced steps (three sequences of different lengths prefilled in chunks of 5, then
// decoded together with CUDA graphs, one sequence closed half-way), one with
//   - the fused q/k norm + RoPE + KV-cache write (CudaEngineOptions::fused_qk_norm_rope, ops/qk_norm_rope),
//   - the fused GDN decode preparation (CudaEngineOptions::fused_gdn_decode_prep, ops/gdn_decode_prep: convs, q/k
//     l2norms and gate in one launch per GDN layer and decode step) and
//   - the flash-decoding split merge folded into the decode kernel (attention_cache_cuda_set_decode_merge),
// the other with all three off (five launches per attention layer, six per GDN layer, then the separate merge
// kernel); a third engine merges
// the splits inside thread-block clusters. Both are meant to be
// bit-identical to what they replace, so every step's logits must have the same bytes. Models: qwen3 (per-head q/k
// norms), granite (no q/k norms), olmo_hybrid (q/k norms over the whole projection), a qwen3_hybrid student (GQA),
// olmo3 with sliding windows; fp32 (fp32 KV cache) and bf16 (bf16 KV cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "cuda_models/cuda_model_support.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/infer_models.h"
#include "layers/cuda/cuda_linear.h"
#include "models/cuda/cuda_model.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

using namespace hlm;
using namespace hlm::test;

namespace {

MemoryPlan plan_for(const Model& model, int64_t sequences, int64_t tokens_each, int64_t kv_element_bytes) {
  MemoryRequest r;
  r.max_sequences = sequences;
  r.block_size = 16;
  r.kv_element_bytes = kv_element_bytes;
  r.kv_blocks = sequences * ((tokens_each + r.block_size - 1) / r.block_size);
  return memory_plan_build(model.config(), r);
}

// Teacher-forced steps over `seqs` (each prefilled up to prompts[i] in chunks of 5, all in the same steps, then one
// token per step) until one sequence is used up; with two or more sequences, sequence 1 is closed after 4 pure decode
// steps (a new decode shape).
// Returns every step's logits, concatenated.
std::vector<float> run_steps(InferenceEngine& e, const std::vector<std::vector<int32_t>>& seqs,
                             const std::vector<int64_t>& prompts) {
  std::vector<int> slots;
  for (const auto& s : seqs) slots.push_back(e.open_sequence(static_cast<int64_t>(s.size())));
  std::vector<size_t> who(seqs.size());
  for (size_t i = 0; i < who.size(); ++i) who[i] = i;
  std::vector<int64_t> at(seqs.size(), 0);
  std::vector<float> all;
  int64_t decode_steps = 0;
  for (bool done = false; !done;) {
    if (decode_steps == 4 && who.size() == seqs.size() && seqs.size() > 1) {  // sequence 1 stops: the batch shrinks
      e.close_sequence(slots[1]);
      slots.erase(slots.begin() + 1);
      who.erase(who.begin() + 1);
    }
    TokenBatch b;
    bool prefill = false;
    for (const size_t i : who) {
      const int64_t end = at[i] < prompts[i] ? std::min(prompts[i], at[i] + 5) : at[i] + 1;
      prefill = prefill || end - at[i] > 1;
      b.add_sequence(std::vector<int32_t>(seqs[i].begin() + at[i], seqs[i].begin() + end));
      at[i] = end;
    }
    const Tensor logits = e.step(slots, b);
    all.insert(all.end(), logits.f32(), logits.f32() + logits.numel());
    if (!prefill) ++decode_steps;
    for (const size_t i : who) done = done || at[i] >= static_cast<int64_t>(seqs[i].size());
  }
  return all;
}

// Sets the flash-decoding split merge for a scope.
struct MergeMode {
  DecodeMerge saved;
  explicit MergeMode(DecodeMerge m) : saved(attention_cache_cuda_decode_merge()) { attention_cache_cuda_set_decode_merge(m); }
  ~MergeMode() { attention_cache_cuda_set_decode_merge(saved); }
};

// A test model: a golden's, or the qwen3_hybrid student with random weights.
Model load_case_model(const char* name, bool golden) {
  return golden ? Model::load(cuda_golden_dir(name))
                : Model::create(parse_model_config(student_config_json(), "test"), 11);
}

// The fusion tests' three sequences (prompts of 17, 9 and 23 tokens, 14 more each), ids from stream `seed0` + i.
std::vector<std::vector<int32_t>> three_sequences(const std::vector<int64_t>& prompts, int64_t vocab, uint32_t seed0) {
  std::vector<std::vector<int32_t>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    seqs.push_back(ids_for(prompts[i] + 14, vocab, seed0 + static_cast<uint32_t>(i)));
  return seqs;
}

}  // namespace

TEST(CudaEngineFusions, FusedLaunchesEqualTheSeparateOnesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  struct Case {
    const char* name;
    bool golden;
  };
  for (const Case& m : {Case{"qwen3_untied", true}, Case{"granite", true}, Case{"olmo_hybrid_tiny", true},
                        Case{"qwen3_hybrid_student", false}, Case{"olmo3_swa", true}}) {
    Model model = load_case_model(m.name, m.golden);
    const std::vector<int64_t> prompts{17, 9, 23};
    const std::vector<std::vector<int32_t>> seqs = three_sequences(prompts, model.config().vocab_size, 90);
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(m.name) + (bf16 ? " bf16" : " fp32"));
      CudaModel gpu = CudaModel::upload(model, ctx);
      if (bf16) gpu.drop_fp32_weights();
      const MemoryPlan plan = plan_for(model, 3, prompts.back() + 14, bf16 ? 2 : 4);
      CudaEngineOptions fused, separate;
      fused.fused_qk_norm_rope = true;
      separate.fused_qk_norm_rope = false;
      fused.fused_gdn_decode_prep = true;
      separate.fused_gdn_decode_prep = false;
      std::vector<float> lf, ls, lc;
      {
        MergeMode mode(DecodeMerge::fused);
        auto e = make_cuda_engine(gpu, plan, fused);
        lf = run_steps(*e, seqs, prompts);
        EXPECT_GT(cuda_engine_graph_stats(*e).replays, 0);
      }
      {
        MergeMode mode(DecodeMerge::kernel);
        auto e = make_cuda_engine(gpu, plan, separate);
        ls = run_steps(*e, seqs, prompts);
      }
      {  // the split merge inside thread-block clusters (the default where it runs), with the separate q/k launches
        MergeMode mode(DecodeMerge::cluster);
        auto e = make_cuda_engine(gpu, plan, separate);
        lc = run_steps(*e, seqs, prompts);
      }
      ASSERT_EQ(lf.size(), ls.size());
      ASSERT_EQ(lc.size(), ls.size());
      size_t differ = 0, differ_cluster = 0;
      for (size_t i = 0; i < lf.size(); ++i) {
        differ += std::memcmp(&lf[i], &ls[i], sizeof(float)) != 0;
        differ_cluster += std::memcmp(&lc[i], &ls[i], sizeof(float)) != 0;
      }
      std::printf("[fusions] %s %s: %zu logits, %zu differ (fused), %zu differ (cluster merge)\n", m.name,
                  bf16 ? "bf16" : "fp32", lf.size(), differ, differ_cluster);
      EXPECT_EQ(differ, 0u);
      EXPECT_EQ(differ_cluster, 0u);
    }
  }
}

// With the warp decode attention kernel (DecodeKernel::warps) and with the tiled one (the default, its fold switched
// on: attention_cache_cuda_set_tiled_qk_fold), the q/k norms, RoPE and KV-cache write folded into it
// (CudaEngineOptions::fold_qk_into_decode_attention, attention_cache_decode_prep_cuda) against the q/k launch + the
// same kernel: every step's logits with the same bytes (fp32 and bf16; three sequences prefilled in chunks of 5, then
// decoded together with graphs, one closed half-way), and the fold taken where it applies: per-head q/k norms or none
// (qwen3, granite, the qwen3_hybrid student in fp32) in both kernels, OLMo's whole-projection norms (olmo_hybrid,
// OLMo 3 SWA) in the tiled kernel only; rows of other than 16-byte multiples keep the q/k launch.
TEST(CudaEngineFusions, QkFoldIntoTheDecodeKernelEqualsTheSeparateLaunchesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  const DecodeKernel saved = attention_cache_cuda_decode_kernel();
  struct Case {
    const char* name;
    bool golden, whole_rows;
  };
  for (const DecodeKernel kernel : {DecodeKernel::warps, DecodeKernel::tiled}) {
    attention_cache_cuda_set_decode_kernel(kernel);
    attention_cache_cuda_set_tiled_qk_fold(kernel == DecodeKernel::tiled ? 1 : -1);
    const char* kname = kernel == DecodeKernel::tiled ? "tiled" : "warp";
    for (const Case& m : {Case{"qwen3_untied", true, false}, Case{"granite", true, false},
                          Case{"olmo_hybrid_tiny", true, true}, Case{"qwen3_hybrid_student", false, false},
                          Case{"olmo3_swa", true, true}}) {
      Model model = load_case_model(m.name, m.golden);
      const std::vector<int64_t> prompts{17, 9, 23};
      const std::vector<std::vector<int32_t>> seqs = three_sequences(prompts, model.config().vocab_size, 120);
      for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(std::string(kname) + " " + m.name + (bf16 ? " bf16" : " fp32"));
        CudaModel gpu = CudaModel::upload(model, ctx);
        if (bf16) gpu.drop_fp32_weights();
        const MemoryPlan plan = plan_for(model, 3, prompts.back() + 14, bf16 ? 2 : 4);
        CudaEngineOptions folded = cuda_engine_default_options(), separate = cuda_engine_default_options();
        folded.fold_qk_into_decode_attention = true;
        separate.fold_qk_into_decode_attention = false;
        std::vector<float> lf, ls;
        int64_t fold_launches = 0;
        {
          auto e = make_cuda_engine(gpu, plan, folded);
          lf = run_steps(*e, seqs, prompts);
          fold_launches = cuda_engine_graph_stats(*e).qk_folded_launches;
        }
        {
          auto e = make_cuda_engine(gpu, plan, separate);
          ls = run_steps(*e, seqs, prompts);
          EXPECT_EQ(cuda_engine_graph_stats(*e).qk_folded_launches, 0);
        }
        ASSERT_EQ(lf.size(), ls.size());
        size_t differ = 0;
        for (size_t i = 0; i < lf.size(); ++i) differ += std::memcmp(&lf[i], &ls[i], sizeof(float)) != 0;
        std::printf("[fusions] %s %s: q/k folded into the %s kernel in %lld layer launches, %zu logits, %zu differ\n",
                    m.name, bf16 ? "bf16" : "fp32", kname, static_cast<long long>(fold_launches), lf.size(), differ);
        EXPECT_EQ(differ, 0u);
        // Both kernels need rows of 16-byte multiples (the student's head_dim 12 in bf16 has 24-byte rows); whole-row
        // norms fold into the tiled kernel only.
        const bool folds = !(m.whole_rows && kernel == DecodeKernel::warps) &&
                           model.config().head_dim * (bf16 ? 2 : 4) % 16 == 0;
        if (folds)
          EXPECT_GT(fold_launches, 0);
        else
          EXPECT_EQ(fold_launches, 0);
      }
    }
  }
  attention_cache_cuda_set_tiled_qk_fold(-1);
  attention_cache_cuda_set_decode_kernel(saved);
}

// At one sequence in bf16 (the rows the small-row GEMV takes) the MLP's gate and up products and SwiGLU can run as
// ONE GEMV launch with SwiGLU in its epilogue (cuda_linear_try_swiglu_gemv, HLM_GATE_UP_SWIGLU): meant to give the
// bits of the group GEMV + SwiGLU kernel it replaces, so every step's logits must have the same bytes with the fold
// on and off; and the fold must have run (its launch count grows). Models with SwiGLU MLPs after attention and after
// GDN layers: qwen3 (untied head), granite, olmo_hybrid, the qwen3_hybrid student; one sequence prefilled in chunks
// of 5, then 14 decode steps with CUDA graphs.
TEST(CudaEngineFusions, GateUpSwigluGemvEqualsTheSeparateLaunchesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  const bool saved = cuda_linear_swiglu_gemv_enabled();
  for (const auto& [name, golden] : {std::pair<const char*, bool>{"qwen3_untied", true}, {"granite", true},
                                     {"olmo_hybrid_tiny", true}, {"qwen3_hybrid_student", false}}) {
    SCOPED_TRACE(name);
    Model model = load_case_model(name, golden);
    const std::vector<std::vector<int32_t>> seqs{ids_for(17 + 14, model.config().vocab_size, 95)};
    const std::vector<int64_t> prompts{17};
    CudaModel gpu = CudaModel::upload(model, ctx);
    gpu.drop_fp32_weights();
    const MemoryPlan plan = plan_for(model, 1, 17 + 14, 2);
    std::vector<float> on, off;
    cuda_linear_set_swiglu_gemv(true);
    const int64_t before = cuda_linear_swiglu_gemv_launches();
    {
      auto e = make_cuda_engine(gpu, plan);
      on = run_steps(*e, seqs, prompts);
    }
    const int64_t folded = cuda_linear_swiglu_gemv_launches() - before;
    cuda_linear_set_swiglu_gemv(false);
    {
      auto e = make_cuda_engine(gpu, plan);
      off = run_steps(*e, seqs, prompts);
    }
    ASSERT_EQ(on.size(), off.size());
    size_t differ = 0;
    for (size_t i = 0; i < on.size(); ++i) differ += std::memcmp(&on[i], &off[i], sizeof(float)) != 0;
    std::printf("[fusions] %s bf16: gate/up SwiGLU GEMV launches %lld, %zu logits, %zu differ\n", name,
                static_cast<long long>(folded), on.size(), differ);
    EXPECT_GT(folded, 0);
    EXPECT_EQ(differ, 0u);
  }
  cuda_linear_set_swiglu_gemv(saved);
}

// At one sequence in bf16 the LM head runs on the small-row GEMV (CudaEngineOptions::head_gemv) instead of cuBLASLt:
// another fp32 summation order over the hidden size H, so the logits agree to rounding, not bit for bit. Bound per
// logit: H·u·Σ|w·x| for each side, taken as 2·H·u·(1 + max |logit| of the step) with u = 2^−24 (the row's Σ|w·x| is
// not at hand; a layout or indexing defect moves logits by O(max |logit|), far past it). Models: qwen3 with an untied
// head, qwen3 with a tied one (the embedding table as the head) and olmo_hybrid (GDN layers); one sequence prefilled
// in chunks of 5, then 12 decode steps.
TEST(CudaEngineFusions, HeadGemvAgreesWithCublasLtToRounding) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const char* name : {"qwen3_untied", "qwen3_tied", "olmo_hybrid_tiny"}) {
    SCOPED_TRACE(name);
    Model model = Model::load(cuda_golden_dir(name));
    const int64_t V = model.config().vocab_size, H = model.config().hidden_size;
    const std::vector<int64_t> prompts{11};
    const std::vector<std::vector<int32_t>> seqs{ids_for(prompts[0] + 12, V, 7)};
    CudaModel gpu = CudaModel::upload(model, ctx);
    gpu.drop_fp32_weights();
    const MemoryPlan plan = plan_for(model, 1, prompts[0] + 12, 2);
    CudaEngineOptions gemv, blaslt;
    gemv.head_gemv = true;
    blaslt.head_gemv = false;
    std::vector<float> lg, lb;
    {
      auto e = make_cuda_engine(gpu, plan, gemv);
      lg = run_steps(*e, seqs, prompts);
    }
    {
      auto e = make_cuda_engine(gpu, plan, blaslt);
      lb = run_steps(*e, seqs, prompts);
    }
    ASSERT_EQ(lg.size(), lb.size());
    const double u = std::ldexp(1.0, -24);
    size_t bad = 0, differ = 0;
    double worst = 0.0;
    for (size_t r = 0; r < lg.size() / static_cast<size_t>(V); ++r) {
      double mx = 0.0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, std::abs(static_cast<double>(lb[r * V + j])));
      const double bound = 2.0 * static_cast<double>(H) * u * (1.0 + mx);
      for (int64_t j = 0; j < V; ++j) {
        const double d = std::abs(static_cast<double>(lg[r * V + j]) - lb[r * V + j]);
        differ += d != 0.0;
        worst = std::max(worst, d / bound);
        bad += !(d <= bound);
      }
    }
    std::printf("[head gemv] %s: %zu logits, %zu differ, worst difference %.3g of the bound\n", name, lg.size(), differ,
                worst);
    EXPECT_EQ(bad, 0u);
  }
}

// A post-norm block's residual add inside its norm's launch (rmsnorm_post_residual_forward_cuda, HLM_POST_NORM_FUSED,
// models/cuda/cuda_model.h) against the norm + residual add launches: meant to give the same bits, so a full forward's
// logits (every token's) and every engine step's logits (three sequences prefilled in chunks of 5, then decoded
// together with CUDA graphs, one closed half-way) must have the same bytes with the switch on and off, and the fused
// form must have been issued (its count grows). Post-norm models: OLMo 3 with sliding windows, olmo_hybrid (post-norm
// attention blocks between pre-norm GDN blocks); fp32 and bf16. (olmo3_rope2's per-layer-type RoPE does not run on
// CUDA yet.)
TEST(CudaEngineFusions, PostNormResidualAddInTheNormLaunchEqualsTheSeparateLaunchesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  for (const char* name : {"olmo3_swa", "olmo_hybrid_tiny"}) {
    Model model = Model::load(cuda_golden_dir(name));
    const std::vector<int64_t> prompts{17, 9, 23};
    const std::vector<std::vector<int32_t>> seqs = three_sequences(prompts, model.config().vocab_size, 140);
    const TokenBatch batch = odd_length_batch(model.config().vocab_size);
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(name) + (bf16 ? " bf16" : " fp32"));
      CudaModel gpu = CudaModel::upload(model, ctx);
      gpu.set_bf16_compute(bf16);
      const MemoryPlan plan = plan_for(model, 3, prompts.back() + 14, bf16 ? 2 : 4);
      ForwardOptions all;
      all.all_logits = true;
      std::vector<float> steps[2];
      Tensor forward[2];
      int64_t fused_launches = 0;
      for (const int on : {1, 0}) {
        cuda_model_set_post_norm_fused(on);
        const int64_t before = cuda_model_post_norm_fused_launches();
        forward[on] = gpu.forward(batch, all, {}, {});
        auto e = make_cuda_engine(gpu, plan);
        steps[on] = run_steps(*e, seqs, prompts);
        if (on) fused_launches = cuda_model_post_norm_fused_launches() - before;
        else EXPECT_EQ(cuda_model_post_norm_fused_launches(), before);
      }
      cuda_model_set_post_norm_fused(-1);
      ASSERT_EQ(steps[1].size(), steps[0].size());
      size_t differ = 0;
      for (size_t i = 0; i < steps[0].size(); ++i)
        differ += std::memcmp(&steps[1][i], &steps[0][i], sizeof(float)) != 0;
      ASSERT_EQ(forward[1].nbytes(), forward[0].nbytes());
      const bool forward_same = std::memcmp(forward[1].raw(), forward[0].raw(), forward[0].nbytes()) == 0;
      std::printf("[fusions] %s %s: post-norm residual add in the norm launch, %lld fused launches issued; forward "
                  "logits %s; %zu step logits, %zu differ\n",
                  name, bf16 ? "bf16" : "fp32", static_cast<long long>(fused_launches),
                  forward_same ? "identical" : "DIFFER", steps[0].size(), differ);
      EXPECT_GT(fused_launches, 0);
      EXPECT_TRUE(forward_same);
      EXPECT_EQ(differ, 0u);
    }
  }
}

// The batch-1 decode's input norms left to each branch's first GEMV, computed in its prologue (models/cuda/
// cuda_model.h: cuda_model_decode_norm_prologue; ops/matmul/gemv_cuda.h: GemvNorm) against the norm launches: meant
// to give the same bits, so every engine step's logits (one sequence prefilled in chunks of 5, then decoded one token
// per step with CUDA graphs) must have the same bytes with the switch on and off, and norms must have been deferred
// (the count grows) with it on and none with it off. The prologue takes rows longer than a warp's norm (hidden >
// 1024), so the models are the test configs with a hidden size of 1,152 (4.5 passes of 256 per row): OLMo 3 with
// sliding windows (post-norm: the branch norm and its add in the prologue), olmo_hybrid (post-norm attention blocks
// between pre-norm GDN blocks: the post-norm add before a GDN block is launched, the GDN input norm deferred),
// granite (pre-norm, residual multiplier 0.3, logits scaling) and a qwen3_hybrid student (pre-norm GDN and GQA
// attention blocks); bf16 compute (the GEMV's mode).
TEST(CudaEngineFusions, DecodeNormPrologueEqualsTheNormLaunchesBitForBit) {
  HLM_REQUIRE_CUDA_MODEL();
  CudaContext ctx;
  const auto widened = [](nlohmann::json j) {
    j["hidden_size"] = 1152;
    if (!j.contains("head_dim")) {  // head_dim = hidden / heads: 18 heads of 64, 6 KV heads
      j["num_attention_heads"] = 18;
      j["num_key_value_heads"] = 6;
    }
    return j;
  };
  const auto golden_json = [](const char* name) {
    std::ifstream in(cuda_golden_dir(name) / "config.json");
    return nlohmann::json::parse(in);
  };
  const struct {
    const char* name;
    nlohmann::json config;
  } cases[] = {{"olmo3_swa", widened(golden_json("olmo3_swa"))},
               {"olmo_hybrid_tiny", widened(golden_json("olmo_hybrid_tiny"))},
               {"granite", widened(golden_json("granite"))},
               {"qwen3_hybrid_student", widened(student_config_json())}};
  uint64_t seed = 40;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " at hidden 1152");
    const Model model = Model::create(parse_model_config(c.config, c.name), ++seed);
    ASSERT_GT(model.config().hidden_size, rmsnorm_cuda_warp_max_dim());
    const std::vector<int64_t> prompts{17};
    const std::vector<std::vector<int32_t>> seqs = three_sequences(prompts, model.config().vocab_size, 150);
    CudaModel gpu = CudaModel::upload(model, ctx);
    gpu.set_bf16_compute(true);
    const MemoryPlan plan = plan_for(model, 1, prompts.back() + 14, 2);
    std::vector<float> steps[2];
    int64_t deferred = 0, in_prologue = 0;
    for (const int on : {1, 0}) {
      cuda_model_set_decode_norm_prologue(on);
      const int64_t before = cuda_model_deferred_norms(), taken = cuda_linear_prologue_norms();
      auto e = make_cuda_engine(gpu, plan);
      steps[on] = run_steps(*e, seqs, prompts);
      if (on) {
        deferred = cuda_model_deferred_norms() - before;
        in_prologue = cuda_linear_prologue_norms() - taken;
      } else {
        EXPECT_EQ(cuda_model_deferred_norms(), before);
        EXPECT_EQ(cuda_linear_prologue_norms(), taken);
      }
    }
    cuda_model_set_decode_norm_prologue(-1);
    ASSERT_EQ(steps[1].size(), steps[0].size());
    size_t differ = 0;
    for (size_t i = 0; i < steps[0].size(); ++i) differ += std::memcmp(&steps[1][i], &steps[0][i], sizeof(float)) != 0;
    std::printf("[fusions] %s (hidden 1152, bf16): decode norms in the GEMV prologue, %lld deferred, %lld in a "
                "prologue; %zu step logits, %zu differ\n",
                c.name, static_cast<long long>(deferred), static_cast<long long>(in_prologue), steps[0].size(),
                differ);
    EXPECT_GT(in_prologue, 0);
    EXPECT_LE(in_prologue, deferred);
    EXPECT_EQ(differ, 0u);
  }
}
