// The CUDA inference engine (contract: infer/inference_engine.h; design: cuda_engine.h). Read beside
// infer/cpu_engine.cpp: the same bookkeeping (slots, KvBlockAllocator, step validation) and the same dataflow, with
// the state in device pools.
#include "infer/cuda/cuda_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_graph.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "infer/sequence_slots.h"
#include "models/architecture.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/attention_cudnn.h"
#include "ops/fused_decode/fused_decode_cuda.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"
#include "ops/gated_delta_rule/gated_delta_rule_decode_cuda.h"
#include "ops/gdn_decode_prep/gdn_decode_prep_cuda.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"
#include "ops/gdn_gate/gdn_gate_cuda.h"
#include "ops/l2norm/l2norm_cuda.h"
#include "ops/matmul/gemv_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/state_rows/state_rows_cuda.h"

namespace hlm {

namespace {

// A step's host metadata packed into one device upload (sections 16-byte aligned).
class MetaPack {
 public:
  template <typename T>
  size_t add(const std::vector<T>& v) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + offset, v.data(), v.size() * sizeof(T));
    return offset;
  }
  CudaTensor upload(CudaContext& ctx) const {
    CudaTensor t = cuda_scratch_bytes(ctx, std::max<size_t>(bytes_.size(), 16));
    cuda_copy_to_device(ctx, t.raw(), bytes_.data(), bytes_.size());
    return t;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Where each array of the step's metadata sits in the upload.
struct MetaOffsets {
  size_t ids = 0, cu = 0, pos = 0, slots = 0, tables = 0, ctx = 0, last = 0, slot_ids = 0, flag = 0;
};

// Decode graphs: contexts are bucketed to multiples of this many tokens (a new graph per bucket), and at most this
// many graphs are kept (least recently used evicted).
constexpr int64_t kDecodeContextBucket = 256;
constexpr size_t kMaxDecodeGraphs = 8;

template <typename T>
T* at(const CudaTensor& t, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(t.raw()) + offset);
}

CudaTensor zeros(CudaContext& ctx, const Shape& shape, DType dtype = DType::F32) {
  CudaTensor t = CudaTensor::empty(ctx, shape, dtype);
  HLM_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), ctx.stream()));
  return t;
}

// The Mamba-2 state pools of one layer: conv [slots, Cd, K−1] (the last K−1 raw xBC inputs) and SSM [slots, nh, P, N].
struct Mamba2Pool {
  CudaTensor conv, ssm;
  std::vector<CudaTensor*> tensors() { return {&conv, &ssm}; }
};

// The GDN state pools of one layer ([slots, ...] each): the unit of gather/scatter.
struct GdnPool {
  CudaTensor q_conv, k_conv, v_conv, recurrent;
  std::vector<CudaTensor*> tensors() { return {&q_conv, &k_conv, &v_conv, &recurrent}; }
  std::vector<const CudaTensor*> tensors() const { return {&q_conv, &k_conv, &v_conv, &recurrent}; }
};

class CudaEngine final : public InferenceEngine {
 public:
  CudaEngine(CudaModel& model, const MemoryPlan& plan, const CudaEngineOptions& options)
      : model_(model),
        ctx_(model.context()),
        plan_(plan),
        options_(options),
        slots_(plan) {
    const ModelConfig& c = model.config();
    const DecoderHyper hyper = architecture_spec(c.architecture).hyper(c);
    adims_ = {c.num_attention_heads, c.num_key_value_heads, c.head_dim, hyper.attention_scale,
              static_cast<float>(c.rms_norm_eps)};
    logits_divisor_ = hyper.logits_divisor;
    ctx_.make_current();
    layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (c.layer_kinds[i] == LayerKind::FullAttention) {
        const Shape shape{plan.num_blocks, plan.block_size, c.num_key_value_heads, c.head_dim};
        const DType kv = plan.kv_element_bytes == 2 ? DType::BF16 : DType::F32;
        layers_[i].attention = true;
        layers_[i].k_cache = zeros(ctx_, shape, kv);
        layers_[i].v_cache = zeros(ctx_, shape, kv);
      } else if (c.layer_kinds[i] == LayerKind::Mamba2) {
        const Mamba2Dims d = mamba2_dims(c);
        layers_[i].mamba.conv = zeros(ctx_, {plan.max_sequences, d.conv_channels(), d.conv_kernel - 1});
        layers_[i].mamba.ssm = zeros(ctx_, {plan.max_sequences, d.heads, d.head_dim, d.state_dim});
      } else if (c.layer_kinds[i] == LayerKind::Lightning) {  // one fp32 D×D state per head (the CPU engine's)
        layers_[i].lightning_dims = lightning_dims(c, static_cast<int64_t>(i));
        layers_[i].lightning = zeros(ctx_, {plan.max_sequences, c.num_attention_heads, c.head_dim, c.head_dim});
      } else {
        gdims_ = gdn_dims(c);
        const int64_t S = plan.max_sequences, K1 = gdims_.conv_kernel - 1;
        GdnPool& g = layers_[i].gdn;
        g.q_conv = zeros(ctx_, {S, gdims_.key_channels(), K1});
        g.k_conv = zeros(ctx_, {S, gdims_.key_channels(), K1});
        g.v_conv = zeros(ctx_, {S, gdims_.value_channels(), K1});
        g.recurrent = zeros(ctx_, {S, gdims_.value_heads, gdims_.value_dim, gdims_.key_dim});
      }
      const Layer& l = layers_[i];
      int64_t bytes = 0;
      if (l.attention)
        bytes = static_cast<int64_t>(l.k_cache.nbytes() + l.v_cache.nbytes());
      else if (l.mamba.ssm.raw() != nullptr)
        bytes = static_cast<int64_t>(l.mamba.conv.nbytes() + l.mamba.ssm.nbytes());
      else if (l.lightning.raw() != nullptr)
        bytes = static_cast<int64_t>(l.lightning.nbytes());
      else
        for (const CudaTensor* t : l.gdn.tensors()) bytes += static_cast<int64_t>(t->nbytes());
      pool_bytes_.push_back(bytes);
    }
    prepare_fused_decode();
    ctx_.synchronize();
  }

  const ModelConfig& config() const override { return model_.config(); }
  const MemoryPlan& plan() const override { return plan_; }
  std::string device() const override { return "cuda:" + std::to_string(ctx_.device()); }

  int open_sequence(int64_t max_tokens) override {
    const int slot = slots_.open(max_tokens);
    if (slot < 0) return -1;
    for (Layer& l : layers_)  // a fresh sequence starts from zero GDN / Mamba-2 / Lightning state
      if (!l.attention)
        for (CudaTensor* t : l.recurrent_pools()) {
          const size_t row = t->nbytes() / static_cast<size_t>(plan_.max_sequences);
          HLM_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(t->raw()) + slot * row, 0, row, ctx_.stream()));
        }
    return slot;
  }

  void close_sequence(int slot) override { slots_.close(slot); }
  int64_t sequence_length(int slot) const override { return slots_.length(slot); }
  void advance_uncomputed(int slot, int64_t n, SkippedRows rows) override;

  Tensor step(std::span<const int> slots, const TokenBatch& tokens) override;

  StateUsage state_usage() const override {
    return slots_.usage(model_.config().layer_kinds, pool_bytes_);
  }
  const CudaEngineGraphStats& graph_stats() const { return graph_stats_; }

 private:
  struct Layer {
    bool attention = false;
    CudaTensor k_cache, v_cache;  // attention: [num_blocks, block_size, Hkv, D]
    GdnPool gdn;                  // GDN: [max_sequences, ...] per tensor
    Mamba2Pool mamba;             // Mamba-2: [max_sequences, ...] per tensor
    CudaTensor lightning;         // Lightning: [max_sequences, Hq, D, D]
    LightningDims lightning_dims;  // Lightning: the layer's dims and decay
    // The state pools of a recurrent layer (GDN, Mamba-2 or Lightning).
    std::vector<CudaTensor*> recurrent_pools() {
      if (mamba.ssm.raw() != nullptr) return mamba.tensors();
      if (lightning.raw() != nullptr) return {&lightning};
      return gdn.tensors();
    }
  };
  // What the mixers of one step read (device pointers into the metadata upload, host sizes).
  struct StepView {
    CudaBatchView batch;
    const RopeCudaTable* rope = nullptr;
    const int64_t* cache_slots = nullptr;  // [T]
    const int32_t* tables = nullptr;       // [N, max_blocks]
    const int64_t* context = nullptr;      // [N]
    const int32_t* slot_ids = nullptr;     // [N]
    int64_t first_slot = 0;                // consecutive slots: the batch's rows start at this pool row
    bool consecutive = false;
    int64_t max_blocks = 0, max_context = 0;
    bool decode = false;  // one token per sequence
    bool fresh = false;   // every sequence's context is its new tokens (a first prefill chunk): nothing cached before
    bool uniform = false;  // every sequence has max_len new tokens and max_context tokens of context
  };
  // The host-side values of a step (StepView without the device pointers).
  struct StepShape {
    int64_t tokens = 0, sequences = 0, max_len = 0;
    const RopeCudaTable* rope = nullptr;
    int64_t first_slot = 0;
    bool consecutive = false;
    int64_t max_blocks = 0, max_context = 0;
    bool decode = false, fresh = false, uniform = false;
  };
  // What a captured decode step depends on besides the metadata's contents.
  struct GraphKey {
    int64_t sequences = 0, first_slot = 0, max_blocks = 0, max_context = 0;  // first_slot −1: slots not consecutive
    const float* rope_cos = nullptr;
    int64_t rope_positions = 0;
    bool operator==(const GraphKey&) const = default;
  };
  struct DecodeGraph {
    GraphKey key;
    uint64_t last_used = 0;
    CudaTensor meta;                    // the metadata buffer the graph reads (general block)
    std::unique_ptr<CudaGraph> graph;   // destroyed after `logits` below (members go in reverse order)
    CudaTensor logits;                  // [N, V], written by each replay (a block of the graph's pool)
  };

  // The device work of a step after its metadata upload `meta`: the decoder with the stateful mixers, then the LM head
  // on each sequence's last new token; returns the logits [N, V] on the device. No host wait (capturable).
  CudaTensor run_step(const CudaTensor& meta, const MetaOffsets& o, const StepShape& sh);
  // The same for a batch-1 decode step through the fused decode kernel (fused_layers_ set).
  CudaTensor run_step_fused(const CudaTensor& meta, const MetaOffsets& o, const StepShape& sh);
  // logits [N, V] (device) of the final hidden states rows [N, hidden] (device).
  CudaTensor head_logits(const CudaTensor& rows);
  // Sets fused_layers_ / fused_ws_ when the options, the plan and the model allow the fused decode, else says why in
  // graph_stats_.fused_decode_refusal.
  void prepare_fused_decode();
  // The decode graph for this step's shape: a cached one, a new capture (the second step of a shape), or nullptr
  // (run eagerly: the first step of a shape, or a shape whose capture failed).
  DecodeGraph* decode_graph(const StepShape& sh, const MetaPack& pack, const MetaOffsets& o);

  // A recurrent layer's state rows for one step, in batch order: the pool rows themselves (consecutive slots) or
  // gathered copies, which scatter_back() writes back into the pools (a no-op for consecutive slots).
  struct StepStates {
    std::vector<CudaTensor*> pools;
    std::vector<CudaTensor> gathered;
    std::vector<float*> rows;  // per pool: [N, row] of this step
  };
  StepStates step_states(std::vector<CudaTensor*> pools, const StepView& s);
  void scatter_back(const StepStates& st, const StepView& s);

  void attention_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s);
  void gdn_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s);
  void mamba2_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s);
  void lightning_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s);

  CudaModel& model_;
  CudaContext& ctx_;
  MemoryPlan plan_;
  CudaEngineOptions options_;
  SequenceSlots slots_;
  std::vector<DecodeGraph> graphs_;
  std::vector<GraphKey> seen_, failed_;
  uint64_t clock_ = 0;
  CudaEngineGraphStats graph_stats_;
  std::vector<int64_t> pool_bytes_;  // per layer: its K+V pool or GDN state pools (fixed at construction)
  AttentionDims adims_;
  GdnDims gdims_;
  float logits_divisor_ = 1.0f;
  // The step's logits land in page-locked host memory (twice the bandwidth of a pageable copy, no zero-fill or fresh
  // pages per step) and are returned as a Tensor sharing this buffer; a buffer a caller still holds is never reused.
  std::shared_ptr<void> host_logits_;
  size_t host_logits_bytes_ = 0;
  Tensor download_logits(const CudaTensor& device);
  std::vector<Layer> layers_;
  // advance_uncomputed's rows under SkippedRows::kRandom (made on first use), fp32 and their bf16 rounding.
  CudaTensor skipped_k_, skipped_v_, skipped_k16_, skipped_v16_;
  // The fused batch-1 decode: the kernel's per-layer table on the device (empty: off), its shape and workspace.
  CudaTensor fused_layers_, fused_ws_;
  FusedDecodeShape fused_shape_;
  CudaTensor fused_timeline_;  // [layers, grid, kFusedDecodeMarks] u64 when profiling (options_.fused_decode_timeline)
  void write_fused_timeline();
};

void CudaEngine::write_fused_timeline() {
  const int64_t grid = fused_decode_cuda_grid(fused_shape_.head_dim), L = fused_shape_.layers;
  std::vector<unsigned long long> t(static_cast<size_t>(L * grid * kFusedDecodeMarks));
  cuda_copy_to_host(ctx_, t.data(), fused_timeline_.raw(), t.size() * sizeof(t[0]));
  // Time 0: the first block's start of layer 0 (mark 0; the attention-unit marks of blocks without a unit stay 0).
  unsigned long long t0 = t[0];
  for (int64_t b = 1; b < grid; ++b) t0 = std::min(t0, t[static_cast<size_t>(b * kFusedDecodeMarks)]);
  std::FILE* f = std::fopen(options_.fused_decode_timeline.c_str(), "w");
  HLM_CHECK_INPUT(f != nullptr, "cannot write the fused decode timeline ", options_.fused_decode_timeline);
  std::fprintf(f, "layer,block");
  for (int k = 0; k < kFusedDecodeMarks; ++k) std::fprintf(f, ",m%d", k);
  std::fprintf(f, "\n");
  for (int64_t l = 0; l < L; ++l)
    for (int64_t b = 0; b < grid; ++b) {
      std::fprintf(f, "%lld,%lld", static_cast<long long>(l), static_cast<long long>(b));
      for (int k = 0; k < kFusedDecodeMarks; ++k) {
        const unsigned long long v = t[static_cast<size_t>((l * grid + b) * kFusedDecodeMarks + k)];
        if (v == 0)
          std::fprintf(f, ",");  // not stamped (an attention-unit mark of a block without a unit)
        else
          std::fprintf(f, ",%lld", static_cast<long long>(v) - static_cast<long long>(t0));
      }
      std::fprintf(f, "\n");
    }
  std::fclose(f);
}

void CudaEngine::prepare_fused_decode() {
  std::string& why = graph_stats_.fused_decode_refusal;
  const ModelConfig& c = model_.config();
  if (!options_.fused_decode) {
    why = "off (CudaEngineOptions::fused_decode, HLM_FUSED_DECODE)";
    return;
  }
  if (plan_.kv_element_bytes != 2) {
    why = "an fp32 KV cache";
    return;
  }
  why = model_.fused_decode_refusal();
  if (!why.empty()) return;
  FusedDecodeShape& s = fused_shape_;
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.q_heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.norm_eps = static_cast<float>(c.rms_norm_eps);
  s.qk_norm_eps = adims_.norm_eps;
  s.residual_multiplier = architecture_spec(c.architecture).hyper(c).residual_multiplier;
  s.attention_scale = adims_.scale;
  s.num_blocks = plan_.num_blocks;
  s.block_size = plan_.block_size;
  // Tuning and diagnosis knobs (fused_decode_cuda.h), read here only: HLM_FUSED_DECODE_SKIP=1,
  // HLM_FUSED_DECODE_DOTS=fma|tc, HLM_FUSED_DECODE_PREFETCH_KB=n (per block).
  if (const char* v = std::getenv("HLM_FUSED_DECODE_SKIP")) s.skip_products = std::strcmp(v, "1") == 0;
  if (const char* v = std::getenv("HLM_FUSED_DECODE_DOTS")) s.fma_dots = std::strcmp(v, "fma") == 0;
  if (const char* v = std::getenv("HLM_FUSED_DECODE_PREFETCH_KB")) s.l2_prefetch_bytes = 1024 * std::max(0, std::atoi(v));
  why = fused_decode_cuda_refusal(s);
  if (!why.empty()) return;
  std::vector<FusedDecodeLayer> table(static_cast<size_t>(s.layers));
  for (int i = 0; i < static_cast<int>(s.layers); ++i) {
    FusedDecodeLayer& f = table[static_cast<size_t>(i)];
    f = model_.fused_decode_layer(i);
    f.k_cache = layers_[static_cast<size_t>(i)].k_cache.data<__nv_bfloat16>();
    f.v_cache = layers_[static_cast<size_t>(i)].v_cache.data<__nv_bfloat16>();
  }
  fused_layers_ = cuda_scratch_bytes(ctx_, table.size() * sizeof(FusedDecodeLayer));
  cuda_copy_to_device(ctx_, fused_layers_.raw(), table.data(), table.size() * sizeof(FusedDecodeLayer));
  fused_ws_ = cuda_scratch_bytes(ctx_, fused_decode_cuda_workspace_bytes(s));
  if (!options_.fused_decode_timeline.empty()) {
    const size_t n = static_cast<size_t>(s.layers * fused_decode_cuda_grid(s.head_dim) * kFusedDecodeMarks);
    fused_timeline_ = cuda_scratch_bytes(ctx_, n * sizeof(unsigned long long));
    HLM_CUDA_CHECK(cudaMemsetAsync(fused_timeline_.raw(), 0, n * sizeof(unsigned long long), ctx_.stream()));
  }
}

void CudaEngine::attention_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s) {
  const CudaAttentionWeights& w = model_.attention_weights(layer);
  AttentionDims d = adims_;
  d.window = model_.config().attention_window(layer);  // sliding_attention layers (0: full)
  const cudaStream_t stream = ctx_.stream();
  const int64_t T = s.batch.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  CudaTensor q_lin = CudaTensor::empty(ctx_, {T, Cq}), k_lin = CudaTensor::empty(ctx_, {T, Ckv});
  CudaTensor v = CudaTensor::empty(ctx_, {T, Ckv});
  // One launch at decode batch sizes (the small-row GEMV), else `in` rounded once for the three products.
  const CudaLinearOut qkv[] = {{q_lin.data<float>(), &w.q_proj}, {k_lin.data<float>(), &w.k_proj},
                               {v.data<float>(), &w.v_proj}};
  cuda_linear_forward_group(ctx_, qkv, in, T);  // computes in's deferred norm, if any
  Layer& l = layers_[static_cast<size_t>(layer)];
  AttentionCacheCudaParams p;
  p.total_tokens = T;
  p.n_seqs = s.batch.n_seqs;
  p.q_heads = d.q_heads;
  p.kv_heads = d.kv_heads;
  p.head_dim = D;
  p.num_blocks = plan_.num_blocks;
  p.block_size = plan_.block_size;
  p.max_blocks = s.max_blocks;
  p.max_query_len = s.batch.max_seqlen;
  p.max_context = s.max_context;
  p.scale = d.scale;
  p.window = d.window;
  const bool bf16_cache = l.k_cache.dtype() == DType::BF16;
  // q = rmsnorm(q̃)·q_norm (or q̃ itself), likewise k; then RoPE at the absolute positions; then k, v into the cache.
  float* q = q_lin.data<float>();
  float* k = k_lin.data<float>();
  // Decode steps: the q/k norms (per head, over the whole row, or none), RoPE and cache write inside the decode
  // kernel where it takes them (attention_cache_decode_prep_supported: the warp kernel with per-head norms, the tiled
  // kernel with its fold on), the same bits as the q/k launch below + the kernel (attention_cache_decode_prep_cuda).
  AttentionDecodePrepCuda prep;
  bool fold = false;
  if (s.decode && options_.fold_qk_into_decode_attention &&
      (w.q_norm_size == 0 || w.q_norm_size == D || w.q_norm_size == Cq) &&
      (w.k_norm_size == 0 || w.k_norm_size == D || w.k_norm_size == Ckv)) {
    prep.q = q;
    prep.k = k;
    prep.v = v.data<float>();
    prep.q_norm = w.q_norm_size > 0 ? w.q_norm.data<float>() : nullptr;
    prep.k_norm = w.k_norm_size > 0 ? w.k_norm.data<float>() : nullptr;
    prep.q_norm_whole = w.q_norm_size > 0 && w.q_norm_size != D;  // == Cq
    prep.k_norm_whole = w.k_norm_size > 0 && w.k_norm_size != D;
    prep.eps = d.norm_eps;
    prep.positions = s.batch.positions;
    prep.rope = s.rope;
    prep.slot_mapping = s.cache_slots;
    prep.cache_slots = plan_.num_blocks * plan_.block_size;
    fold = bf16_cache ? attention_cache_decode_prep_supported(p, prep, l.k_cache.data<__nv_bfloat16>(),
                                                              l.v_cache.data<__nv_bfloat16>())
                      : attention_cache_decode_prep_supported(p, prep, l.k_cache.data<float>(),
                                                              l.v_cache.data<float>());
  }
  QkNormRopeCudaParams fp;
  fp.shape = {T, d.q_heads, d.kv_heads, D, w.q_norm_size, w.k_norm_size, d.norm_eps};
  fp.cache_slots = plan_.num_blocks * plan_.block_size;
  CudaTensor q_n, k_n;
  if (fold) {
    // nothing here: the decode kernel below prepares q and k and writes the cache
  } else if (options_.fused_qk_norm_rope && qk_norm_rope_cuda_supported(fp)) {
    // One launch, q and k normalized and rotated in place (the same bits as the sequence below).
    const float* qn = w.q_norm_size > 0 ? w.q_norm.data<float>() : nullptr;
    const float* kn = w.k_norm_size > 0 ? w.k_norm.data<float>() : nullptr;
    if (bf16_cache)
      qk_norm_rope_cache_write_cuda(q, k, v.data<float>(), qn, kn, s.batch.positions, s.rope,
                                    l.k_cache.data<__nv_bfloat16>(), l.v_cache.data<__nv_bfloat16>(), s.cache_slots,
                                    fp, s.batch.error_flag, stream);
    else
      qk_norm_rope_cache_write_cuda(q, k, v.data<float>(), qn, kn, s.batch.positions, s.rope,
                                    l.k_cache.data<float>(), l.v_cache.data<float>(), s.cache_slots, fp,
                                    s.batch.error_flag, stream);
  } else {
    if (w.q_norm_size > 0) {
      q_n = CudaTensor::empty(ctx_, {T, Cq});
      rmsnorm_forward_cuda(q_n.data<float>(), q, w.q_norm.data<float>(),
                           attention_qk_norm_params(w.q_norm_size, T, d.q_heads, D, d.norm_eps), stream);
      q = q_n.data<float>();
    }
    if (w.k_norm_size > 0) {
      k_n = CudaTensor::empty(ctx_, {T, Ckv});
      rmsnorm_forward_cuda(k_n.data<float>(), k, w.k_norm.data<float>(),
                           attention_qk_norm_params(w.k_norm_size, T, d.kv_heads, D, d.norm_eps), stream);
      k = k_n.data<float>();
    }
    if (s.rope != nullptr) {
      HLM_CHECK(s.rope->head_dim == D, "rope table head_dim ", s.rope->head_dim, " != attention head_dim ", D);
      rope_forward_cuda(q, s.batch.positions, T, d.q_heads, *s.rope, s.batch.error_flag, stream);
      rope_forward_cuda(k, s.batch.positions, T, d.kv_heads, *s.rope, s.batch.error_flag, stream);
    }
    if (bf16_cache)
      attention_cache_write_cuda(l.k_cache.data<__nv_bfloat16>(), l.v_cache.data<__nv_bfloat16>(), k,
                                 v.data<float>(), s.cache_slots, T, p, s.batch.error_flag, stream);
    else
      attention_cache_write_cuda(l.k_cache.data<float>(), l.v_cache.data<float>(), k, v.data<float>(),
                                 s.cache_slots, T, p, s.batch.error_flag, stream);
  }
  if (s.fresh && !s.decode && cuda_linear_is_bf16(w.o_proj)) {
    // bf16 precision, first prefill chunk: nothing is cached before the chunk, so attention over the cache is plain
    // causal attention over the chunk's own rows, which the training forward's tensor-core kernel computes
    // (attention_cuda.h: bf16 q/k/v, fp32 accumulation; the same k/v bits the cache holds). Its bf16 output feeds
    // o_proj's bf16 GEMM directly.
    const CudaTensor q16 = cuda_round_bf16(ctx_, q, T * Cq), k16 = cuda_round_bf16(ctx_, k, T * Ckv);
    const CudaTensor v16 = cuda_round_bf16(ctx_, v);
    CudaTensor o16 = CudaTensor::empty(ctx_, {T, Cq}, DType::BF16);
    CudaTensor lse = CudaTensor::empty(ctx_, {T, d.q_heads});
    const AttentionCudaParams ap{T, d.q_heads, d.kv_heads, D, s.batch.n_seqs, s.batch.max_seqlen, d.scale, d.window};
    attention_forward_cuda(o16.data<__nv_bfloat16>(), lse.data<float>(), q16.data<__nv_bfloat16>(),
                           k16.data<__nv_bfloat16>(), v16.data<__nv_bfloat16>(), s.batch.cu_seqlens, ap,
                           s.batch.error_flag, stream);
    cuda_linear_forward(ctx_, out, CudaLinearInput{nullptr, o16.data<__nv_bfloat16>()}, w.o_proj, T);
    return;
  }
  if (!s.decode && s.uniform && bf16_cache && d.window == 0 && cuda_linear_is_bf16(w.o_proj) &&
      attention_engine() == AttentionEngine::kCudnn) {
    // bf16 precision, a later prefill chunk of sequences with one chunk length and one context length, under the
    // cuDNN attention engine (ops/attention/attention_cudnn.h): the context's K/V gathered contiguous from the paged
    // cache (transient: 2 · N · context · Hkv · D bf16 values), then cuDNN's fused attention with the diagonal at the
    // bottom right. A refusal falls through to the paged tensor-core kernel below.
    const int64_t N = s.batch.n_seqs, context = s.max_context;
    CudaTensor kc = CudaTensor::empty(ctx_, {N * context, d.kv_heads, D}, DType::BF16);
    CudaTensor vc = CudaTensor::empty(ctx_, {N * context, d.kv_heads, D}, DType::BF16);
    attention_cudnn_gather_cache(kc.data<__nv_bfloat16>(), vc.data<__nv_bfloat16>(), l.k_cache.data<__nv_bfloat16>(),
                                 l.v_cache.data<__nv_bfloat16>(), s.tables, s.max_blocks, plan_.block_size, N, context,
                                 d.kv_heads, D, stream);
    const CudaTensor q16 = cuda_round_bf16(ctx_, q, T * Cq);
    CudaTensor o16 = CudaTensor::empty(ctx_, {T, Cq}, DType::BF16);
    CudaTensor lse = CudaTensor::empty(ctx_, {T, d.q_heads});
    const AttentionCudnnContext c{N, s.batch.max_seqlen, context, d.q_heads, d.kv_heads, D, d.scale};
    std::string why;
    if (attention_cudnn_forward_context(o16.data<__nv_bfloat16>(), lse.data<float>(), q16.data<__nv_bfloat16>(),
                                        kc.data<__nv_bfloat16>(), vc.data<__nv_bfloat16>(), c, stream, &why)) {
      cuda_linear_forward(ctx_, out, CudaLinearInput{nullptr, o16.data<__nv_bfloat16>()}, w.o_proj, T);
      return;
    }
    static std::once_flag refused;
    attention_cudnn_note_refusal(refused, "inference", "a prefill chunk", why, "the paged kernel runs it");
  }
  if (!s.decode && bf16_cache && attention_cache_tc_supported(p) && cuda_linear_is_bf16(w.o_proj)) {
    // bf16 precision, a later prefill chunk: the chunk's queries over the paged bf16 cache on tensor cores.
    const CudaTensor q16 = cuda_round_bf16(ctx_, q, T * Cq);
    CudaTensor o16 = CudaTensor::empty(ctx_, {T, Cq}, DType::BF16);
    attention_cache_forward_tc_cuda(o16.data<__nv_bfloat16>(), q16.data<__nv_bfloat16>(),
                                    l.k_cache.data<__nv_bfloat16>(), l.v_cache.data<__nv_bfloat16>(), s.tables,
                                    s.context, s.batch.cu_seqlens, p, s.batch.error_flag, stream);
    cuda_linear_forward(ctx_, out, CudaLinearInput{nullptr, o16.data<__nv_bfloat16>()}, w.o_proj, T);
    return;
  }
  CudaTensor o = CudaTensor::empty(ctx_, {T, Cq});
  const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);
  CudaTensor ws = cuda_scratch_bytes(ctx_, std::max<size_t>(ws_bytes, 16));
  if (fold && bf16_cache)
    attention_cache_decode_prep_cuda(o.data<float>(), prep, l.k_cache.data<__nv_bfloat16>(),
                                     l.v_cache.data<__nv_bfloat16>(), s.tables, s.context, s.batch.cu_seqlens, p,
                                     ws.raw(), ws_bytes, s.batch.error_flag, stream);
  else if (fold)
    attention_cache_decode_prep_cuda(o.data<float>(), prep, l.k_cache.data<float>(), l.v_cache.data<float>(),
                                     s.tables, s.context, s.batch.cu_seqlens, p, ws.raw(), ws_bytes,
                                     s.batch.error_flag, stream);
  else if (bf16_cache)
    attention_cache_forward_cuda(o.data<float>(), q, l.k_cache.data<__nv_bfloat16>(), l.v_cache.data<__nv_bfloat16>(),
                                 s.tables, s.context, s.batch.cu_seqlens, p, ws.raw(), ws_bytes, s.batch.error_flag,
                                 stream);
  else
    attention_cache_forward_cuda(o.data<float>(), q, l.k_cache.data<float>(), l.v_cache.data<float>(), s.tables,
                                 s.context, s.batch.cu_seqlens, p, ws.raw(), ws_bytes, s.batch.error_flag, stream);
  if (fold) ++graph_stats_.qk_folded_launches;
  cuda_linear_forward(ctx_, out, o.data<float>(), w.o_proj, T);
}

void CudaEngine::gdn_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s) {
  const CudaGdnWeights& w = model_.gdn_weights(layer);
  const GdnDims& d = gdims_;
  const cudaStream_t stream = ctx_.stream();
  const int64_t T = s.batch.tokens, N = s.batch.n_seqs, Ck = d.key_channels(), Cv = d.value_channels();
  const int64_t Hv = d.value_heads;
  CudaTensor qp = CudaTensor::empty(ctx_, {T, Ck}), kp = CudaTensor::empty(ctx_, {T, Ck});
  CudaTensor vp = CudaTensor::empty(ctx_, {T, Cv}), z = CudaTensor::empty(ctx_, {T, Cv});
  CudaTensor a = CudaTensor::empty(ctx_, {T, Hv}), b = CudaTensor::empty(ctx_, {T, Hv});
  // One launch at decode batch sizes (the small-row GEMV), else `in` rounded once for the six products.
  const CudaLinearOut projections[] = {{qp.data<float>(), &w.q_proj}, {kp.data<float>(), &w.k_proj},
                                       {vp.data<float>(), &w.v_proj}, {z.data<float>(), &w.g_proj},
                                       {a.data<float>(), &w.a_proj},  {b.data<float>(), &w.b_proj}};
  cuda_linear_forward_group(ctx_, projections, in, T);  // computes in's deferred norm, if any

  const StepStates states = step_states(layers_[static_cast<size_t>(layer)].gdn.tensors(), s);
  float *q_state = states.rows[0], *k_state = states.rows[1], *v_state = states.rows[2], *h_state = states.rows[3];

  CudaTensor vc = CudaTensor::empty(ctx_, {T, Cv});
  CudaTensor g = CudaTensor::empty(ctx_, {T, Hv}), beta = CudaTensor::empty(ctx_, {T, Hv});
  const GdnDecodePrepCudaShape prep{N, d.key_heads, Hv, d.key_dim, d.value_dim, d.conv_kernel, d.neg_eigval};
  // The normalised q, k go to the projections' buffers (qp, kp) on both paths; v' to vc.
  if (s.decode && options_.fused_gdn_decode_prep && gdn_decode_prep_cuda_supported(prep)) {
    // One launch for the convs (states advanced in place), the q/k norms and the gate: the bits of the six below.
    GdnDecodePrepCudaArgs pa;
    pa.q = qp.data<float>();
    pa.k = kp.data<float>();
    pa.v = vp.data<float>();
    pa.a = a.data<float>();
    pa.b = b.data<float>();
    pa.q_conv = w.q_conv.data<float>();
    pa.k_conv = w.k_conv.data<float>();
    pa.v_conv = w.v_conv.data<float>();
    pa.A_log = w.A_log.data<float>();
    pa.dt_bias = w.dt_bias.data<float>();
    pa.q_state = q_state;
    pa.k_state = k_state;
    pa.v_state = v_state;
    pa.q_out = qp.data<float>();  // each element read and written by one thread (the contract allows it)
    pa.k_out = kp.data<float>();
    pa.v_out = vc.data<float>();
    pa.g = g.data<float>();
    pa.beta = beta.data<float>();
    gdn_decode_prep_cuda(pa, prep, stream);
  } else {
    CudaTensor qc = CudaTensor::empty(ctx_, {T, Ck}), kc = CudaTensor::empty(ctx_, {T, Ck});  // the raw conv outputs
    const CausalConv1dCudaParams sk{T, Ck, d.conv_kernel, N, true}, sv{T, Cv, d.conv_kernel, N, true};
    // The conv state advances in place (state_out may alias state_in, causal_conv1d_cuda.h). Decode steps take the
    // one-token-per-sequence kernel (same bits, one launch instead of two, no sequence search).
    if (s.decode) {
      causal_conv1d_decode_cuda(qc.data<float>(), q_state, qp.data<float>(), w.q_conv.data<float>(), sk, stream);
      causal_conv1d_decode_cuda(kc.data<float>(), k_state, kp.data<float>(), w.k_conv.data<float>(), sk, stream);
      causal_conv1d_decode_cuda(vc.data<float>(), v_state, vp.data<float>(), w.v_conv.data<float>(), sv, stream);
    } else {
      causal_conv1d_forward_cuda(qc.data<float>(), q_state, qp.data<float>(), w.q_conv.data<float>(), q_state,
                                 s.batch.cu_seqlens, sk, stream);
      causal_conv1d_forward_cuda(kc.data<float>(), k_state, kp.data<float>(), w.k_conv.data<float>(), k_state,
                                 s.batch.cu_seqlens, sk, stream);
      causal_conv1d_forward_cuda(vc.data<float>(), v_state, vp.data<float>(), w.v_conv.data<float>(), v_state,
                                 s.batch.cu_seqlens, sv, stream);
    }
    // The conv outputs are no longer needed raw: normalise q, k into the projections' buffers.
    const L2normCudaParams l2{T * d.key_heads, d.key_dim};
    l2norm_forward_cuda(qp.data<float>(), qc.data<float>(), l2, stream);
    l2norm_forward_cuda(kp.data<float>(), kc.data<float>(), l2, stream);
    gdn_gate_forward_cuda(g.data<float>(), beta.data<float>(), a.data<float>(), b.data<float>(),
                          w.A_log.data<float>(), w.dt_bias.data<float>(), {T, Hv, d.neg_eigval}, stream);
  }
  CudaTensor o = CudaTensor::empty(ctx_, {T, Cv});
  const float scale = static_cast<float>(d.q_scale());  // as the CPU reference gets it for T = float
  if (s.decode) {
    GdnDecodeInputs<float> din;
    din.q = qp.data<float>();
    din.k = kp.data<float>();
    din.v = vc.data<float>();
    din.g = g.data<float>();
    din.beta = beta.data<float>();
    gated_delta_rule_decode_cuda(o.data<float>(), h_state, din, {N, d.key_heads, Hv, d.key_dim, d.value_dim}, scale,
                                 stream);
  } else {
    GdnInputs<float> rin;
    rin.q = qp.data<float>();
    rin.k = kp.data<float>();
    rin.v = vc.data<float>();
    rin.g = g.data<float>();
    rin.beta = beta.data<float>();
    rin.h0 = h_state;
    rin.cu_seqlens = s.batch.cu_seqlens;
    rin.n_seqs = N;
    CudaTensor hT = CudaTensor::empty(ctx_, {N, Hv, d.value_dim, d.key_dim});  // hT may not alias h0
    GdnOutputs<float> rout;
    rout.o = o.data<float>();
    rout.hT = hT.data<float>();
    gated_delta_rule_forward_cuda(rout, rin, {T, d.key_heads, Hv, d.key_dim, d.value_dim}, scale, stream);
    cuda_copy_device(ctx_, h_state, hT.raw(), hT.nbytes());
  }
  scatter_back(states, s);
  CudaTensor y = CudaTensor::empty(ctx_, {T, Cv});
  gated_rmsnorm_forward_cuda(y.data<float>(), o.data<float>(), z.data<float>(), w.o_norm.data<float>(),
                             {T * Hv, d.value_dim, d.norm_eps}, stream);
  cuda_linear_forward(ctx_, out, y.data<float>(), w.o_proj, T);
}

// Mamba-2 (granitemoehybrid): the CUDA layer (layers/cuda/mamba2_layer_cuda.h) continued from and advancing the
// sequences' conv and SSM states: the chunked scan in prefill chunks, the recurrence in decode steps (one token per
// sequence). States in batch order: the pool rows themselves (consecutive slots) or gathered copies, scattered back.
void CudaEngine::mamba2_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s) {
  const StepStates states = step_states(layers_[static_cast<size_t>(layer)].mamba.tensors(), s);
  cuda_linear_settle(ctx_, in);  // the layer reads in.f32 itself
  mamba2_layer_forward_cuda(ctx_, out, in.f32, model_.mamba2_weights(layer), mamba2_dims(model_.config()), s.batch,
                            {states.rows[0], states.rows[1]});
  scatter_back(states, s);
}

// Lightning Attention-2 (bailing_moe_linear): the CUDA layer (layers/cuda/lightning_layer_cuda.h) continued from and
// advancing the sequences' [Hq, D, D] states: the chunked form in prefill chunks, the recurrence in decode steps; RoPE
// at the absolute positions. States in batch order: the pool rows themselves (consecutive slots) or gathered copies.
void CudaEngine::lightning_mixer(int layer, float* out, const CudaLinearInput& in, const StepView& s) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  const StepStates states = step_states({&l.lightning}, s);
  cuda_linear_settle(ctx_, in);  // the layer reads in.f32 itself
  lightning_layer_forward_cuda(ctx_, out, in.f32, model_.lightning_weights(layer), l.lightning_dims, s.rope, s.batch,
                               states.rows[0]);
  scatter_back(states, s);
}

CudaEngine::StepStates CudaEngine::step_states(std::vector<CudaTensor*> pools, const StepView& s) {
  const int64_t N = s.batch.n_seqs;
  StepStates st;
  st.pools = std::move(pools);
  st.gathered.resize(st.pools.size());
  st.rows.resize(st.pools.size());
  for (size_t i = 0; i < st.pools.size(); ++i) {
    const int64_t row = st.pools[i]->numel() / plan_.max_sequences;
    if (s.consecutive) {
      st.rows[i] = st.pools[i]->data<float>() + s.first_slot * row;
    } else {
      st.gathered[i] = CudaTensor::empty(ctx_, {N, row});
      state_rows_copy_cuda(st.gathered[i].data<float>(), nullptr, st.pools[i]->data<float>(), s.slot_ids, N, row,
                           ctx_.stream());
      st.rows[i] = st.gathered[i].data<float>();
    }
  }
  return st;
}

void CudaEngine::scatter_back(const StepStates& st, const StepView& s) {
  if (s.consecutive) return;
  for (size_t i = 0; i < st.pools.size(); ++i)
    state_rows_copy_cuda(st.pools[i]->data<float>(), s.slot_ids, st.gathered[i].data<float>(), nullptr,
                         s.batch.n_seqs, st.pools[i]->numel() / plan_.max_sequences, ctx_.stream());
}

// The skipped positions' slots, and under kRandom their K/V rows in every attention layer copied from
// skipped_row_values (uploaded once per engine, with a bf16 copy for a bf16 cache), kSkippedRowsBlock positions per
// copy (attention_cache_fill_rows_cuda).
void CudaEngine::advance_uncomputed(int slot, int64_t n, SkippedRows rows) {
  const std::vector<int64_t> cache_slots = slots_.advance(slot, n);
  if (rows != SkippedRows::kRandom) return;
  const ModelConfig& c = model_.config();
  const int64_t row = c.num_key_value_heads * c.head_dim, pool_rows = plan_.num_blocks * plan_.block_size;
  ctx_.make_current();
  if (skipped_k_.raw() == nullptr) {
    for (const auto& [t, stream] : {std::pair{&skipped_k_, 0}, std::pair{&skipped_v_, 1}}) {
      const std::vector<float> host = skipped_row_values(row, static_cast<uint64_t>(stream));
      *t = zeros(ctx_, {kSkippedRowsBlock, row});
      HLM_CUDA_CHECK(cudaMemcpyAsync(t->raw(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                                     ctx_.stream()));
      ctx_.synchronize();  // the pageable source is freed at the end of this iteration
    }
    skipped_k16_ = cuda_round_bf16(ctx_, skipped_k_);
    skipped_v16_ = cuda_round_bf16(ctx_, skipped_v_);
  }
  CudaTensor slots_device = zeros(ctx_, {std::min(n, kSkippedRowsBlock)}, DType::I64);
  for (int64_t at = 0; at < n; at += kSkippedRowsBlock) {
    const int64_t count = std::min(kSkippedRowsBlock, n - at);
    HLM_CUDA_CHECK(cudaMemcpyAsync(slots_device.raw(), cache_slots.data() + at, count * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, ctx_.stream()));
    const int64_t* ids = slots_device.data<int64_t>();
    for (Layer& l : layers_) {
      if (!l.attention) continue;
      if (l.k_cache.dtype() == DType::BF16)
        attention_cache_fill_rows_cuda(l.k_cache.data<__nv_bfloat16>(), l.v_cache.data<__nv_bfloat16>(),
                                       skipped_k16_.data<__nv_bfloat16>(), skipped_v16_.data<__nv_bfloat16>(), ids,
                                       count, row, pool_rows, ctx_.stream());
      else
        attention_cache_fill_rows_cuda(l.k_cache.data<float>(), l.v_cache.data<float>(), skipped_k_.data<float>(),
                                       skipped_v_.data<float>(), ids, count, row, pool_rows, ctx_.stream());
    }
  }  // (the next piece's slot upload is ordered after this piece's copies on the stream)
  ctx_.synchronize();  // done before the caller's next step: a timed chunk must not include the fill
}

Tensor CudaEngine::step(std::span<const int> slots, const TokenBatch& tokens) {
  const ModelConfig& c = model_.config();
  StepPlan p = slots_.plan_step(slots, tokens, c.vocab_size);
  const int64_t T = p.tokens, N = p.sequences;
  const bool decode = p.decode();
  const int64_t longest = p.max_context;  // before bucketing: the rope table needs only the real positions
  if (decode) {
    // Decode steps see a bucketed longest context (a multiple of kDecodeContextBucket) and block-table rows as long
    // as that bucket needs, so that one captured graph serves every step of a bucket; eager decode steps use the same
    // values, so a replay equals them bit for bit (the flash-decoding split lengths follow max_context).
    const int64_t ctx_bucket = (p.max_context + kDecodeContextBucket - 1) / kDecodeContextBucket * kDecodeContextBucket;
    const int64_t blocks = std::max(p.max_blocks, (ctx_bucket + plan_.block_size - 1) / plan_.block_size);
    if (blocks != p.max_blocks) {
      std::vector<int32_t> tables(static_cast<size_t>(N * blocks), -1);
      for (int64_t n = 0; n < N; ++n)
        std::copy_n(p.tables.begin() + n * p.max_blocks, p.max_blocks, tables.begin() + n * blocks);
      p.tables = std::move(tables);
      p.max_blocks = blocks;
    }
    p.max_context = ctx_bucket;
  }
  ctx_.make_current();
  const std::vector<int32_t> slot_ids(slots.begin(), slots.end());
  MetaPack pack;
  MetaOffsets o;
  o.ids = pack.add(tokens.ids);
  o.cu = pack.add(tokens.cu_seqlens);
  o.pos = pack.add(p.positions);
  o.slots = pack.add(p.cache_slots);
  o.tables = pack.add(p.tables);
  o.ctx = pack.add(p.context);
  o.last = pack.add(p.last_rows);
  o.slot_ids = pack.add(slot_ids);
  o.flag = pack.add(std::vector<int>{0});

  StepShape sh;
  sh.tokens = T;
  sh.sequences = N;
  sh.max_len = p.max_len;
  // The rope table covers the step's sequences' whole reservations at once: growing it chunk by chunk would rebuild
  // it (host cos/sin + upload) at every step of a long prefill.
  int64_t rope_positions = longest;
  for (const int slot : slots) rope_positions = std::max(rope_positions, slots_.reserved_tokens(slot));
  if (c.max_position_embeddings > 0) rope_positions = std::min(rope_positions, c.max_position_embeddings);
  sh.rope = model_.rope_for_positions(std::max(rope_positions, longest));
  sh.first_slot = slots[0];
  sh.consecutive = true;
  for (int64_t n = 0; n < N; ++n) sh.consecutive = sh.consecutive && slots[n] == slots[0] + n;
  sh.max_blocks = p.max_blocks;
  sh.max_context = p.max_context;
  sh.decode = decode;
  sh.fresh = true;
  for (int64_t n = 0; n < N; ++n)
    sh.fresh = sh.fresh && p.context[n] == tokens.cu_seqlens[n + 1] - tokens.cu_seqlens[n];
  sh.uniform = !decode && T == N * p.max_len;
  for (int64_t n = 0; n < N; ++n) sh.uniform = sh.uniform && p.context[n] == p.max_context;

  Tensor logits;
  int flag = 0;
  if (decode && N == 1 && fused_layers_.raw() != nullptr) ++graph_stats_.fused_decode_steps;  // run_step's choice
  DecodeGraph* graph = decode && options_.cuda_graphs ? decode_graph(sh, pack, o) : nullptr;
  if (graph != nullptr) {
    // New inputs into the graph's metadata buffer (pageable source: staged before cudaMemcpyAsync returns), replay.
    HLM_CUDA_CHECK(cudaMemcpyAsync(graph->meta.raw(), pack.bytes().data(), pack.bytes().size(),
                                   cudaMemcpyHostToDevice, ctx_.stream()));
    graph->graph->launch();
    ++graph_stats_.replays;
    logits = download_logits(graph->logits);
    cuda_copy_to_host(ctx_, &flag, at<int>(graph->meta, o.flag), sizeof(flag));
  } else {
    if (decode) ++graph_stats_.eager_decode_steps;
    const CudaTensor meta = pack.upload(ctx_);
    const CudaTensor logits_device = run_step(meta, o, sh);
    logits = download_logits(logits_device);
    cuda_copy_to_host(ctx_, &flag, at<int>(meta, o.flag), sizeof(flag));
  }
  if (decode && N == 1 && fused_timeline_.raw() != nullptr) write_fused_timeline();
  // The host checked ids, positions (reservations within the rope table come from generate's limits) and metadata.
  HLM_CHECK(flag == 0, "CUDA inference step: a kernel flagged bad input (token id, position or KV-cache metadata; ",
            "longest context ", longest, ")");
  if (logits_divisor_ != 1.0f) {  // on the host after the download, as the CPU forward does it
    float* l = logits.f32();
    for (int64_t j = 0; j < logits.numel(); ++j) l[j] /= logits_divisor_;
  }
  return logits;
}

Tensor CudaEngine::download_logits(const CudaTensor& device) {
  const size_t bytes = device.nbytes();
  if (host_logits_ == nullptr || host_logits_.use_count() > 1 || host_logits_bytes_ < bytes) {
    void* p = nullptr;
    if (cudaMallocHost(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {  // no pinned memory left: pageable copy
      (void)cudaGetLastError();
      return cuda_download(ctx_, device);
    }
    host_logits_ = std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
    host_logits_bytes_ = bytes;
  }
  HLM_CUDA_CHECK(cudaMemcpyAsync(host_logits_.get(), device.raw(), bytes, cudaMemcpyDeviceToHost, ctx_.stream()));
  ctx_.synchronize();
  return Tensor::wrap(host_logits_, host_logits_.get(), device.shape(), device.dtype());
}

CudaTensor CudaEngine::run_step_fused(const CudaTensor& meta, const MetaOffsets& o, const StepShape& sh) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size;
  const cudaStream_t stream = ctx_.stream();
  const CudaBatchView batch{1, 1, 1, at<int32_t>(meta, o.ids), at<int64_t>(meta, o.cu), at<int32_t>(meta, o.pos),
                            at<int>(meta, o.flag)};
  CudaTensor hidden = CudaTensor::empty(ctx_, {1, H});
  model_.embed(batch, hidden.data<float>());
  FusedDecodeShape shape = fused_shape_;
  shape.max_blocks = sh.max_blocks;
  FusedDecodeStep st;
  st.position = at<int32_t>(meta, o.pos);
  st.cache_slot = at<int64_t>(meta, o.slots);
  st.block_table = at<int32_t>(meta, o.tables);
  st.context = at<int64_t>(meta, o.ctx);
  st.error_flag = at<int>(meta, o.flag);
  st.timeline = static_cast<unsigned long long*>(fused_timeline_.raw());
  if (sh.rope != nullptr) {
    HLM_CHECK(sh.rope->head_dim == c.head_dim, "rope table head_dim ", sh.rope->head_dim, " != ", c.head_dim);
    st.rope_cos = sh.rope->cos;
    st.rope_sin = sh.rope->sin;
    st.rope_positions = sh.rope->num_positions;
    st.rotary_dim = sh.rope->rotary_dim;
  }
  fused_decode_cuda(hidden.data<float>(), static_cast<const FusedDecodeLayer*>(fused_layers_.raw()), shape, st,
                    fused_ws_.raw(), stream);
  CudaTensor normed = CudaTensor::empty(ctx_, {1, H});
  rmsnorm_forward_cuda(normed.data<float>(), hidden.data<float>(), model_.final_norm_weight(),
                       {1, H, static_cast<float>(c.rms_norm_eps)}, stream);
  return head_logits(normed);
}

CudaTensor CudaEngine::head_logits(const CudaTensor& rows) {
  const ModelConfig& c = model_.config();
  const int64_t N = rows.shape()[0], H = c.hidden_size, V = c.vocab_size;
  CudaTensor logits_device = CudaTensor::empty(ctx_, {N, V});
  if (model_.bf16_compute() && N == 1 && options_.head_gemv) {
    // One row (batch-1 decode): the small-row GEMV streams the head's rows at a higher rate than cuBLASLt's GEMV
    // kernel (olmo_hybrid_7b's untied 100,278 × 4,096 head: 263 µs = 3.1 TB/s in session 27's trace) and rounds
    // the row to bf16 itself.
    const GemvOutput head{model_.lm_head_weight_bf16(), nullptr, logits_device.data<float>(), V};
    if (gemv_supported(1, H, &head, 1)) {
      gemv_bf16_cuda(&head, 1, rows.data<float>(), nullptr, 1, H, ctx_.stream());
      return logits_device;
    }
  }
  if (model_.bf16_compute()) {  // bf16 precision: the head on bf16 tensor cores, fp32 logits
    const CudaTensor rows16 = cuda_round_bf16(ctx_, rows);
    matmul_forward_mixed_cuda(ctx_.blaslt(), logits_device.data<float>(), rows16.data<__nv_bfloat16>(),
                              model_.lm_head_weight_bf16(), nullptr, {N, V, H});
  } else {
    matmul_forward_cuda(ctx_.blaslt(), logits_device.data<float>(), rows.data<float>(), model_.lm_head_weight(),
                        nullptr, {N, V, H});
  }
  return logits_device;
}

CudaTensor CudaEngine::run_step(const CudaTensor& meta, const MetaOffsets& o, const StepShape& sh) {
  if (sh.decode && sh.sequences == 1 && fused_layers_.raw() != nullptr) return run_step_fused(meta, o, sh);
  const ModelConfig& c = model_.config();
  const int64_t T = sh.tokens, N = sh.sequences;
  StepView s;
  s.batch = {T, N, sh.max_len, at<int32_t>(meta, o.ids), at<int64_t>(meta, o.cu), at<int32_t>(meta, o.pos),
             at<int>(meta, o.flag)};
  s.rope = sh.rope;
  s.cache_slots = at<int64_t>(meta, o.slots);
  s.tables = at<int32_t>(meta, o.tables);
  s.context = at<int64_t>(meta, o.ctx);
  s.slot_ids = at<int32_t>(meta, o.slot_ids);
  s.first_slot = sh.first_slot;
  s.consecutive = sh.consecutive;
  s.max_blocks = sh.max_blocks;
  s.max_context = sh.max_context;
  s.decode = sh.decode;
  s.fresh = sh.fresh;
  s.uniform = sh.uniform;

  const CudaModel::MixerOverride mixer = [&](int layer, float* out, const CudaLinearInput& in) {
    if (c.layer_kinds[static_cast<size_t>(layer)] == LayerKind::FullAttention)
      attention_mixer(layer, out, in, s);
    else if (c.layer_kinds[static_cast<size_t>(layer)] == LayerKind::Mamba2)
      mamba2_mixer(layer, out, in, s);
    else if (c.layer_kinds[static_cast<size_t>(layer)] == LayerKind::Lightning)
      lightning_mixer(layer, out, in, s);
    else
      gdn_mixer(layer, out, in, s);
  };
  const CudaTensor hidden = model_.final_hidden_with_mixer(s.batch, mixer);
  // The LM head on each sequence's last new token only: in a decode step every row is one (sequence n's token is row
  // n), so the head reads the hidden rows as they are, without the gather launch.
  if (sh.decode && T == N) return head_logits(hidden);
  const int64_t H = c.hidden_size;
  CudaTensor rows = CudaTensor::empty(ctx_, {N, H});
  state_rows_copy_cuda(rows.data<float>(), nullptr, hidden.data<float>(), at<int32_t>(meta, o.last), N, H,
                       ctx_.stream());
  return head_logits(rows);
}

CudaEngine::DecodeGraph* CudaEngine::decode_graph(const StepShape& sh, const MetaPack& pack, const MetaOffsets& o) {
  const GraphKey key{sh.sequences,
                     sh.consecutive ? sh.first_slot : -1,
                     sh.max_blocks,
                     sh.max_context,
                     sh.rope != nullptr ? sh.rope->cos : nullptr,
                     sh.rope != nullptr ? sh.rope->num_positions : 0};
  ++clock_;
  for (DecodeGraph& g : graphs_)
    if (g.key == key) {
      g.last_used = clock_;
      return &g;
    }
  if (std::find(failed_.begin(), failed_.end(), key) != failed_.end()) return nullptr;
  // The first step of a shape runs eagerly (it loads lazily loaded kernels and fills cuBLASLt's algorithm cache);
  // the second captures.
  if (std::find(seen_.begin(), seen_.end(), key) == seen_.end()) {
    if (seen_.size() >= 64) seen_.clear();
    seen_.push_back(key);
    return nullptr;
  }
  if (graphs_.size() >= kMaxDecodeGraphs) {  // evict the least recently used
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const DecodeGraph& a, const DecodeGraph& b) { return a.last_used < b.last_used; });
    graphs_.erase(lru);
  }
  DecodeGraph g;
  g.key = key;
  g.last_used = clock_;
  g.meta = pack.upload(ctx_);  // a general block the graph reads: owned by the entry, refilled before each replay
  std::string why;
  g.graph = CudaGraph::capture(ctx_, [&] { g.logits = run_step(g.meta, o, sh); }, &why);
  if (g.graph == nullptr) {
    failed_.push_back(key);
    ++graph_stats_.failures;
    std::fprintf(stderr, "note: CUDA graph capture of a decode step (batch %lld) failed, running it eagerly: %s\n",
                 static_cast<long long>(sh.sequences), why.c_str());
    return nullptr;
  }
  ++graph_stats_.captures;
  graphs_.push_back(std::move(g));
  return &graphs_.back();
}

}  // namespace

CudaEngineGraphStats cuda_engine_graph_stats(const InferenceEngine& engine) {
  const auto* e = dynamic_cast<const CudaEngine*>(&engine);
  return e != nullptr ? e->graph_stats() : CudaEngineGraphStats{};
}

CudaEngineOptions cuda_engine_default_options() {
  CudaEngineOptions o;
  // Each switch: 0|off → false, 1|on → true, unset → the default (cuda_engine.h says which are on), anything else an
  // input error (core/env_switch.h); A/B in one binary.
  const struct {
    const char* name;
    bool* option;
  } switches[] = {{"HLM_CUDA_GRAPHS", &o.cuda_graphs},
                  {"HLM_QK_FUSE", &o.fused_qk_norm_rope},
                  {"HLM_GDN_DECODE_FUSE", &o.fused_gdn_decode_prep},
                  {"HLM_HEAD_GEMV", &o.head_gemv},
                  {"HLM_DECODE_QK_FOLD", &o.fold_qk_into_decode_attention},
                  {"HLM_FUSED_DECODE", &o.fused_decode}};
  for (const auto& sw : switches) *sw.option = env_switch(sw.name, *sw.option);
  if (const char* t = std::getenv("HLM_FUSED_DECODE_TIMELINE"); t != nullptr && *t != '\0')
    o.fused_decode_timeline = t;
  return o;
}

std::unique_ptr<InferenceEngine> make_cuda_engine(CudaModel& model, const MemoryPlan& plan,
                                                  const CudaEngineOptions& options) {
  HLM_CHECK(plan.max_sequences > 0, "the memory plan has no sequence slots");
  const MemoryPlan shape = memory_plan_shape(model.config(), plan.block_size, plan.kv_element_bytes);
  HLM_CHECK(shape.kv_bytes_per_block == plan.kv_bytes_per_block &&
                shape.gdn_bytes_per_sequence == plan.gdn_bytes_per_sequence,
            "the memory plan was made for another model");
  return std::make_unique<CudaEngine>(model, plan, options);
}

}  // namespace hlm
