// The start-up memory plan (contract: memory_plan.h): the plan table, the byte arithmetic, the choice and its print.
#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "layers/mlp_bf16_gate_up.h"
#include "models/architecture.h"
#include "models/model.h"
#include "models/tensor_table.h"

namespace hlm {

namespace {

double gib(uint64_t bytes) { return static_cast<double>(bytes) / 1073741824.0; }

std::string gib_str(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", gib(bytes));
  return buf;
}

// Parameter counts of a config: all, the linears' weights (those with a bf16 copy in the bf16 mode), and the head's.
struct ParamSplit {
  uint64_t all = 0, linear = 0, head = 0;
};

ParamSplit split_params(const ModelConfig& c) {
  ParamSplit s;
  for (const TensorSpec& spec : expected_tensors(c)) {
    const auto n = static_cast<uint64_t>(spec.shape.numel());
    s.all += n;
    const bool weight2d = spec.shape.rank() == 2 && spec.name.size() > 7 &&
                          spec.name.compare(spec.name.size() - 7, 7, ".weight") == 0;
    if (weight2d && spec.layer >= 0 && spec.name.find("_proj.") != std::string::npos) s.linear += n;
  }
  s.head = static_cast<uint64_t>(c.vocab_size) * static_cast<uint64_t>(c.hidden_size);  // the embedding when tied
  return s;
}

}  // namespace

const std::vector<MemoryPlanOption>& memory_plan_options() {
  static const std::vector<MemoryPlanOption> plans = {
      {"fp32", AdamWStateFormat::F32, MasterFormat::F32, false,
       "fp32 master weights, gradients and AdamW moments; teacher fp32 (+ bf16 copies)"},
      {"teacher-bf16", AdamWStateFormat::F32, MasterFormat::F32, true,
       "as fp32, the frozen teacher held once in bf16 (linears, head, embedding)"},
      {"adam8", AdamWStateFormat::Q8, MasterFormat::F32, true,
       "teacher-bf16 + 8-bit block-wise AdamW moments"},
      {"lean", AdamWStateFormat::Q8, MasterFormat::Bf16Sr, true,
       "adam8 + bf16 master weights with stochastic rounding"},
  };
  return plans;
}

const MemoryPlanOption& memory_plan_named(const std::string& name) {
  std::string names;
  for (const MemoryPlanOption& p : memory_plan_options()) {
    if (p.name == name) return p;
    names += str_cat(names.empty() ? "" : ", ", p.name);
  }
  throw_input_error("--memory-plan: unknown plan '", name, "' (auto, ", names, ")");
}

bool zero1_masters_sharded_from_env() {
  const char* v = std::getenv(kZero1MastersEnv);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "sharded") == 0) return true;
  if (std::strcmp(v, "whole") == 0) return false;
  throw_input_error("environment variable ", kZero1MastersEnv, "='", v, "' is not sharded or whole");
}

namespace {

// gated_delta_rule_chunked_kept_bytes's arithmetic (ops/gated_delta_rule/gdn_chunked_tiles.cuh, carve_forward with
// the backward's pieces): 256-byte aligned pieces of the chunk table, sequence starts, γ, W, Kd, U, per-chunk
// states, R, Ũ, Qd. Mirrored here because the plan is CPU arithmetic; CudaKeptActivations compares the two.
uint64_t chunked_rule_kept_bytes(const GdnDims& g, int64_t tokens, int64_t sequences) {
  const auto T = static_cast<uint64_t>(tokens), N = static_cast<uint64_t>(sequences);
  const auto Hv = static_cast<uint64_t>(g.value_heads), dk = static_cast<uint64_t>(g.key_dim);
  const auto dv = static_cast<uint64_t>(g.value_dim);
  const uint64_t chunks = T / 64 + N + 1, chunk_info = 16;  // gdn_chunked::ChunkInfo: an int64 and two int32
  uint64_t used = 0;
  for (const uint64_t piece : {chunks * chunk_info, 8 * (N + 1), 4 * T * Hv, 2 * T * Hv * dk, 2 * T * Hv * dk,
                               4 * T * Hv * dv, 2 * chunks * Hv * dv * dk, 2 * chunks * Hv * 64 * 64, 2 * T * Hv * dv,
                               2 * T * Hv * dk})
    used = (used + 255) / 256 * 256 + piece;
  return (used + 3) / 4 * 4;  // held in whole 4-byte words (layers/cuda/cuda_linear.h, cuda_scratch_bytes)
}

}  // namespace

uint64_t kept_intermediate_bytes(const ModelConfig& c, int64_t tokens, int64_t sequences, bool bf16) {
  const auto T = static_cast<uint64_t>(std::max<int64_t>(0, tokens));
  const auto H = static_cast<uint64_t>(c.hidden_size), F = static_cast<uint64_t>(c.intermediate_size);
  const bool attention_post_norm = architecture_spec(c.architecture).attention_post_norm;
  const bool bf16_gate_up = bf16 && mlp_bf16_gate_up() && T > 1 && !c.mlp_bias;  // mlp_takes_bf16_gate_up
  uint64_t bytes = 0;
  for (const LayerKind kind : c.layer_kinds) {
    const bool attention = kind == LayerKind::FullAttention;
    // The block's kept tensors: a pre-norm block's two normed branch inputs (bf16 roundings in the bf16 mode), a
    // post-norm block's two branch outputs (fp32).
    uint64_t per_token = attention && attention_post_norm ? 8 * H : (bf16 ? 4 * H : 8 * H);
    // The MLP: gate, up (fp32; bf16 in the bf16 gate/up form, layers/mlp_bf16_gate_up.h, which takes every batch
    // beyond the small-row GEMV's one row unless HLM_GEMV raises that) and h (fp32, or its bf16 rounding).
    per_token += (bf16_gate_up ? 4 : 8) * F + (bf16 ? 2 : 4) * F;
    if (attention) {
      const auto D = static_cast<uint64_t>(c.head_dim), Hq = static_cast<uint64_t>(c.num_attention_heads);
      const uint64_t Cq = Hq * D, Ckv = static_cast<uint64_t>(c.num_key_value_heads) * D;
      // q̃, k̃ and lse in fp32; then q16, k16, v16, o16 (bf16 mode) or q, k, v, o (fp32).
      per_token += 4 * (Cq + Ckv + Hq) + (bf16 ? 2 : 4) * (2 * Cq + 2 * Ckv);
    } else if (kind == LayerKind::LinearAttention) {
      const GdnDims g = gdn_dims(c);
      const auto Ck = static_cast<uint64_t>(g.key_channels()), Cv = static_cast<uint64_t>(g.value_channels());
      const auto Hv = static_cast<uint64_t>(g.value_heads);
      // q̃ k̃ ṽ z, a b, the conv outputs, the L2-normed q k, g β, o (fp32), and y (fp32, or its bf16 rounding).
      per_token += 4 * (6 * Ck + 4 * Cv + 4 * Hv) + (bf16 ? 2 : 4) * Cv;
      if (bf16 && T > 0) bytes += chunked_rule_kept_bytes(g, tokens, sequences);
    }
    // Mamba-2, Lightning: no CUDA training (refused there); the CPU keeps an fp32 set of the same order: counted as the
    // block and MLP alone (an approximation).
    bytes += per_token * T;
  }
  return bytes;
}

MemoryEstimate memory_plan_estimate(const MemoryPlanOption& plan, const MemoryPlanInputs& in) {
  MemoryEstimate e;
  const ParamSplit s = split_params(in.student);
  const uint64_t copied = s.linear + s.head;  // tensors with a bf16 copy in the bf16 mode
  if (plan.master == MasterFormat::Bf16Sr) {
    // The GPU's layout (train/cuda/cuda_bf16_masters.h): the linears' weights and gradients
    // in bf16 only; the embedding, norms and small tensors in fp32 storage (holding bf16 values), fp32 gradients
    // (the head's too). (On the CPU every tensor stays f32; its estimate is not checked.)
    // An untied head is a bf16 master like the linears (its copy); a tied one stays the fp32 embedding + copy.
    const uint64_t untied_head = in.student.tie_word_embeddings ? 0 : s.head;
    e.student_weights = 2 * s.linear + 4 * (s.all - s.linear - untied_head);
    e.student_copies = 2 * s.head;
    e.gradients = 2 * s.linear + 4 * (s.all - s.linear);
  } else {
    e.student_weights = 4 * s.all;
    e.student_copies = in.bf16 ? 2 * copied : 0;
    e.gradients = 4 * s.all;
  }
  if (plan.state == AdamWStateFormat::Q8) {
    e.optimizer = 2 * s.all;
    for (const TensorSpec& spec : expected_tensors(in.student))
      e.optimizer += 8 * static_cast<uint64_t>(q8_blocks(spec.shape.numel()));
  } else {
    e.optimizer = 8 * s.all;
  }
  // ZeRO-1 on W ranks (see the header): this rank's shards.
  if (in.ranks > 1 && in.zero_stage == 1) {
    const auto W = static_cast<uint64_t>(in.ranks);
    const auto shard = [W](uint64_t bytes) { return (bytes + W - 1) / W; };
    e.optimizer = shard(e.optimizer);
    if (plan.master != MasterFormat::Bf16Sr) e.gradient_shard = 4 * shard(s.all);
    if (plan.master == MasterFormat::F32 && in.gpu && in.bf16 && in.shard_masters) {
      const uint64_t untied_head = in.student.tie_word_embeddings ? 0 : s.head;
      e.master_shard = 4 * shard(s.linear + untied_head);
      e.student_weights = 4 * (s.all - s.linear - untied_head);
    }
  }
  if (in.teacher != nullptr) {
    const ParamSplit t = split_params(*in.teacher);
    if (plan.teacher_bf16_only && in.bf16) {
      // CudaModel::drop_fp32_weights: the linears, the head and the embedding in bf16 only (tied: one table for the
      // lookup and the head), the norms and other small tensors fp32.
      const uint64_t tables = (in.teacher->tie_word_embeddings ? 1 : 2) * t.head;
      e.teacher = 2 * (t.linear + tables) + 4 * (t.all - t.linear - tables);
    } else {
      e.teacher = 4 * t.all + (in.bf16 ? 2 * (t.linear + t.head) : 0);  // fp32 + the linears' and head's bf16 copies
    }
  }
  const ModelConfig& c = in.student;
  const auto tokens = static_cast<uint64_t>(std::max<int64_t>(0, in.micro_batch_tokens));
  const auto H = static_cast<uint64_t>(c.hidden_size), F = static_cast<uint64_t>(c.intermediate_size);
  const auto L = static_cast<uint64_t>(c.num_hidden_layers);
  // Kept: the stream entering each layer and the final norm (fp32), plus the teacher's final hidden states.
  const uint64_t kept = 4 * (L + 1 + (in.teacher ? 1 : 0)) * H * tokens;
  // Allowance: one layer recomputed in the backward, its fp32 intermediates per token twice (for their gradients):
  // an attention layer's ~10 H-wide ones, or a GDN layer's (q, k, v, z, a, b projections, the three conv outputs,
  // the L2-normed q and k, o and the gated norm's output: 6·Ck + 5·Cv + 2·Hv) with the chunked rule's per-chunk
  // states and their gradients (2 · Hv·dv·dk per 64 tokens), whichever is larger; the MLP's 3 F-wide ones; and the
  // LM-head loss's chunk workspace (~1 GiB). The GDN term was added in session 21: with only the 10 H the estimate was
  // ~1 GiB low for the 4B student at 4,096 tokens per micro-batch (H200: 43.61 GiB measured, 42.6 estimated; at
  // 2,048 tokens 41.12 measured, 41.04 estimated; now 43.47 and 41.47).
  uint64_t layer_floats = 10 * H, chunk_state_floats = 0;
  if (std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::LinearAttention) != c.layer_kinds.end()) {
    const GdnDims g = gdn_dims(c);
    const auto Ck = static_cast<uint64_t>(g.key_channels()), Cv = static_cast<uint64_t>(g.value_channels());
    const auto Hv = static_cast<uint64_t>(g.value_heads);
    layer_floats = std::max(layer_floats, 6 * Ck + 5 * Cv + 2 * Hv);
    chunk_state_floats = 2 * Hv * static_cast<uint64_t>(g.value_dim) * static_cast<uint64_t>(g.key_dim) / 64;
  }
  const uint64_t working =
      2 * 4 * tokens * (layer_floats + 3 * F) + 4 * tokens * chunk_state_floats + (uint64_t{1} << 30);
  e.activations = kept + working;
  if (in.recompute == Recompute::None)
    e.kept_intermediates = kept_intermediate_bytes(c, in.micro_batch_tokens,
                                                   std::max<int64_t>(1, in.micro_batch_sequences), in.bf16);
  e.activations += e.kept_intermediates;
  return e;
}

std::string memory_plan_unusable(const MemoryPlanOption& plan, const MemoryPlanInputs& in, bool on_device) {
  if (plan.teacher_bf16_only && on_device && !in.bf16 && in.teacher != nullptr)
    return "the teacher is held in bf16 only with --precision bf16";
  if (plan.master == MasterFormat::Bf16Sr && on_device && !in.bf16)
    return "bf16 master weights on the GPU need --precision bf16 (the linears' bf16 copies are the masters)";
  if (in.ranks > 1 && on_device && plan.master == MasterFormat::Bf16Sr && in.zero_stage == 0)
    return "--zero-stage 0 on several ranks would round the summed gradients back into the linears' bf16 "
           "gradients (use --zero-stage 1)";
  if (in.ranks > 1 && !on_device && in.zero_stage == 1 &&
      (plan.master != MasterFormat::F32 || plan.state != AdamWStateFormat::F32))
    return "ZeRO-1 of the CPU trainer on several ranks shards fp32 masters and moments only (--zero-stage 0 keeps "
           "the whole state on every rank)";
  return "";
}

MemoryPlanChoice memory_plan_choose(const std::string& requested, const MemoryPlanInputs& in, bool on_device,
                                    uint64_t free_bytes) {
  MemoryPlanChoice choice;
  choice.ranks = in.ranks;
  choice.zero_stage = in.zero_stage;
  if (requested != "auto") {
    const MemoryPlanOption& p = memory_plan_named(requested);
    const std::string why = memory_plan_unusable(p, in, on_device);
    HLM_CHECK_INPUT(why.empty(), "--memory-plan ", requested, ": ", why);
    choice.plan = &p;
    choice.estimate = memory_plan_estimate(p, in);
    choice.reason = "named by --memory-plan";
    return choice;
  }
  const uint64_t headroom = std::max<uint64_t>(free_bytes / 20, uint64_t{512} << 20);
  const uint64_t budget = free_bytes > headroom ? free_bytes - headroom : 0;
  std::string tried;
  for (const MemoryPlanOption& p : memory_plan_options()) {
    const std::string why = memory_plan_unusable(p, in, on_device);
    const MemoryEstimate e = memory_plan_estimate(p, in);
    if (why.empty() && (choice.least_bytes == 0 || e.total() < choice.least_bytes)) choice.least_bytes = e.total();
    tried += str_cat("\n  ", p.name, ": ", why.empty() ? gib_str(e.total()) + " GiB" : "not usable (" + why + ")");
    if (!why.empty()) continue;
    if (free_bytes == 0 || e.total() <= budget) {
      choice.plan = &p;
      choice.estimate = e;
      choice.reason = free_bytes == 0 ? "auto: the first plan (device memory unknown or not limiting)"
                                      : str_cat("auto: the first plan whose estimate fits ", gib_str(budget),
                                                " GiB (the device's ", gib_str(free_bytes),
                                                " GiB free less 5% headroom)");
      return choice;
    }
  }
  // Nothing fits: no plan; the caller words the refusal (it knows the device and the batch options).
  choice.reason = str_cat("no plan fits the device's ", gib_str(free_bytes), " GiB free (", gib_str(budget),
                          " GiB after headroom); estimates:", tried);
  return choice;
}

std::string memory_plan_describe(const MemoryPlanChoice& c) {
  const MemoryEstimate& e = c.estimate;
  const bool ranks = c.ranks > 1;
  return str_cat("memory plan  ", c.plan->name, " (", c.plan->what, "; ", c.reason, "): estimate ",
                 ranks ? str_cat("per rank of ", c.ranks, c.zero_stage == 1 ? " (ZeRO-1) " : " (ZeRO-0) ") : "",
                 gib_str(e.total()), " GiB = student weights ", gib_str(e.student_weights),
                 e.master_shard > 0 ? " + fp32 master shard " + gib_str(e.master_shard) : "", " + bf16 copies ",
                 gib_str(e.student_copies), " + gradients ", gib_str(e.gradients),
                 ranks && c.zero_stage == 1 ? " + gradient shard " + gib_str(e.gradient_shard) : "", " + AdamW ",
                 adamw_state_format_name(c.plan->state), ranks && c.zero_stage == 1 ? " shard " : " ",
                 gib_str(e.optimizer), " + teacher ", gib_str(e.teacher), " + activations ~", gib_str(e.activations),
                 e.kept_intermediates > 0
                     ? str_cat(" (", gib_str(e.kept_intermediates), " of them every layer's kept intermediates, ",
                               "--recompute none)")
                     : "");
}

}  // namespace hlm
