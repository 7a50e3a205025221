// Serving benchmark of the CUDA inference engine (infer/cuda/cuda_engine.h) on GPU 0 with random weights, in the
// engine's bf16 precision (default: weights held once in bf16, bf16 tensor-core GEMMs, bf16 KV cache, fp32 GDN state)
// or fp32 (--precision fp32). For each model shape, context length L and batch B, B sequences of L random prompt
// tokens are prefilled together (chunks of --prefill-chunk tokens of every sequence per step), then decoded together
// for --decode-steps steps (one token each, greedy feeding of fixed random ids; the figures do not depend on the
// values). Reported per (model, L, B):
//   prefill seconds and tokens/s; decode seconds per step and tokens/s (B tokens per step);
//   device memory: the caching allocator's peak bytes in use during this configuration (peaks reset after the
//     weights and before each configuration, the allocator's cache emptied between them; the weights stay in use, so
//     the peak includes them) and cudaMemGetInfo's used bytes;
//   state bytes per layer measured from the engine's buffers (StateUsage after the last decode step, per sequence:
//     KV blocks held by one attention layer, conv + recurrent state of one GDN layer) beside models/state_size.h's
//     arithmetic (KV at the precision's element bytes, GDN state at 4; the KV figure has no block rounding);
//   the largest B that fits at L on this GPU ("max concurrent sequences"): the largest B whose state pools, as the
//     caching allocator sizes them (CudaAllocator::size_class of each layer's K, V and GDN pool for B sequences of
//     L + decode-steps tokens), plus the activation peak of the smallest-B run at this L (its allocator peak −
//     weights − its state pools) fit in the free device memory after the weights. Computed from measured memory;
//     `--batches ...,max` then runs that B for real: its prompts prefilled in groups of the smallest B (the
//     activation peak the estimate assumed), then decoded all together;
//   Table 8's column, GPUs for 1,024 concurrent rollouts = ceil(1024 / largest B), from the same measured figures.
// Configurations that do not fit in free memory are recorded as skipped, not run. An SVG (bench_generate.svg) draws,
// per model, decode tokens/s (at the largest B measured at each L) and the largest B vs the context.
//
// --search-context: instead of the grid, for each model and each cap of --memory-caps (e.g. 48G,device), the longest
// context one sequence can prefill (chunks of --prefill-chunk) with the device's total use within the cap:
//   1. the activation peak of a prefill chunk is measured (a 2-chunk prefill: allocator peak − weights − state);
//   2. the predicted use at L is weights + non-allocator device use (CUDA context, cuBLAS; measured once) + the
//      state pools for L tokens as the allocator sizes them + that activation peak + the rope table (2 · L ·
//      head_dim/2 floats); the
//      largest L (a multiple of 1024) under the cap is found by bisection on this prediction;
//   3. that L is then prefilled for real and its measured peak (allocator peak + non-allocator use) checked against
//      the cap; if it is over, L is lowered by the overshoot's tokens and run again (at most 4 runs). Recorded: L,
//      the measured peak, the prefill time, the runs tried.
//   A prefill whose time, extrapolated from the measured prefills of --search-probe L (quadratic through 3 points:
//   L/4, L/2, L), would exceed --search-time-limit seconds is not run whole: its memory is measured on the last chunk
//   alone (the sequence advanced to L − chunk positions without computing them, InferenceEngine::advance_uncomputed,
//   then one chunk prefilled: the same pools and the largest transients of any chunk), lowering L as in 3. while it
//   measures over the cap; its time is then measured on --search-chunk-samples (16) chunks spread over the prefill
//   plus its first two and last two, each run at its real position and context (the sequence advanced uncomputed
//   between them), summed over every chunk with the times between samples interpolated (infer/prefill_sampling.h;
//   the extrapolation is recorded beside it). Where the whole prefill runs, the same sampled run at the same L is
//   recorded beside it (sampled_check), so the method's peak and time can be compared with a real run (session 46:
//   the last chunk's peak equalled two whole runs' to the byte; the two chunk ends alone gave a time 15 % under),
//   with the whole run's own chunk times (runs[].chunk_seconds), so each sampled chunk can be set beside the same
//   chunk of the real prefill. Every measured prefill starts without cached cuDNN attention plans, as a new process
//   does (session 47 measured the plan builds at ~1 % of a prefill).
// Built-in shapes (--models, comma-separated):
//   olmo3_7b:        32 layers, hidden 4096, 32 q / 32 kv heads of 128, MLP 11008, vocab 100278, untied head, all
//                    full attention; run as model type qwen3 (olmo_hybrid requires both layer kinds): pre-norm blocks
//                    and per-head q/k norms instead of OLMo's post-norms, the same GEMM shapes and KV bytes;
//   olmo_hybrid_7b:  the same widths as olmo_hybrid with 3 GDN : 1 attention (layers 3, 7, ... attention), GDN 32
//                    heads, dk = dv = 128, conv 4;
//   qwen3_4b:        36 layers, hidden 2560, 32 q / 8 kv heads of 128, MLP 9728, vocab 151936, tied embedding;
//   qwen3_4b_hybrid: the same shape as qwen3_hybrid with 25% attention (every 4th layer), GDN 16 key / 32 value heads,
//                    dk = dv = 128, conv 4.
// --layers N keeps a shape's widths and its attention/GDN pattern but runs N layers (smoke runs; recorded in the
// output). Weights: a fast counter-hash uniform fill (±0.02·√3) on the host, norms 1, valid A_log/dt_bias.
// Output: --out DIR/bench_generate.json and .md (the Markdown table is printed too). HLM_PROFILE_DECODE=1 brackets
// each configuration's decode steps with cudaProfilerStart/Stop (the kernel tracer's profiler range).
// Usage: bench_generate [--models LIST] [--contexts 1024,4096,...] [--batches 1,4,...] [--decode-steps N]
//                       [--prefill-chunk N] [--layers N] [--max-prefill-tokens N] [--precision bf16|fp32]
//                       [--decode-variants LIST] (decode-path kernel choices, each run on the same weights in
//                       this order for every (L, B): a variant is `default` or '+'-joined items of tiled, streams,
//                       warps (the decode attention kernel, attention_cache_cuda.h), swiglu (the gate/up GEMV with
//                       SwiGLU in its epilogue, cuda_linear.h), fused-merge (the split merge in the split kernel),
//                       qkfold (the q/k norms, RoPE and cache write inside the decode kernel: the warp kernel, or
//                       the tiled one with its fold switched on, HLM_DECODE_TILED_QK_FOLD; not with streams),
//                       no-swiglu and no-qkfold (those two off: both are on by default, the tiled kernel's fold
//                       too since session 45; no-qkfold switches it off as well),
//                       postnorm-add / no-postnorm-add (a post-norm block's residual add inside its norm's launch,
//                       models/cuda/cuda_model.h: on by default), norm-prologue / no-norm-prologue (batch-1 decode
//                       norms computed in the next GEMV's prologue, cuda_model_decode_norm_prologue: off by default);
//                       unnamed choices stay as the environment set them; e.g. tiled,warps,tiled+no-swiglu,tiled)
//                       [--cuda-graphs on|off|off,on] (decode steps as CUDA graphs, default on; a list runs
//                       each (L, B) once per mode, on the same weights)
//                       (--batches may end with `max`: the largest B that fits, after the smaller ones)
//                       [--out DIR] [--configs-only]
//        bench_generate --search-context [--models LIST] [--memory-caps 48G,device] [--prefill-chunk N]
//                       [--search-probe N] [--search-time-limit S] [--search-chunk-samples N]
//                       [--precision bf16|fp32] [--out DIR]
// --max-prefill-tokens N skips (and records as skipped) the configurations whose B·L exceeds N. The JSON and
// Markdown files are rewritten after every configuration, so a run cut short keeps what it measured.
// --configs-only prints each shape's parsed config, parameter count and the plan's state bytes per sequence at each
// context, without a GPU.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/svg_chart.h"
#include "backend/cuda/cuda_context.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/memory_plan.h"
#include "infer/prefill_sampling.h"
#include "models/cuda/cuda_model.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/state_size.h"
#include "models/tensor_table.h"
#include "layers/cuda/cuda_linear.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/attention/attention_cudnn.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

constexpr int64_t kMaxBatch = INT64_MAX;  // `--batches ...,max`: the largest B that fits (sorts last)

struct Options {
  std::vector<std::string> models{"olmo3_7b", "olmo_hybrid_7b", "qwen3_4b", "qwen3_4b_hybrid"};
  std::vector<int64_t> contexts{1024, 4096, 16384, 32768};
  std::vector<int64_t> batches{1, 4};
  int64_t decode_steps = 16, prefill_chunk = 4096, layers = 0;
  int64_t max_prefill_tokens = 0;  // > 0: skip configurations with B·L above it (GPU time)
  std::string out = "bench_generate_out";
  bool configs_only = false;  // print the parsed shapes and the plan's bytes, no GPU
  std::string precision = "bf16";
  // --cuda-graphs on|off|off,on: decode steps as CUDA graphs (infer/cuda/cuda_engine.h); with both, each (L, B) runs
  // once per mode on the same weights (before/after in one process).
  std::vector<bool> graph_modes{true};
  // --decode-variants: decode-path kernel choices run one after another on the same weights (header comment).
  std::vector<std::string> decode_variants{"default"};
  bool search_context = false;
  std::vector<std::string> memory_caps{"48G", "device"};
  // The longest of the three timed probe prefills (L/4, L/2, L). 131072: probes of 4K-16K extrapolated the hybrid's
  // 1M-token prefill to 1,029 s where it took 180 s; probes of 32K-128K gave 138.3 / 173.8 s for the runs measured
  // at 138.1 / 180.2 s (H200, session 13).
  int64_t search_probe = 131072;
  double search_time_limit = 480.0;   // seconds: longer predicted prefills are not run
  // Chunks timed between the first two and the last two of a prefill too long to run whole (prefill_sampling.h).
  int search_chunk_samples = 16;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');)
    if (!p.empty()) parts.push_back(p);
  return parts;
}

// The '+'-joined items of a --decode-variants entry.
std::vector<std::string> variant_items(const std::string& v) {
  std::vector<std::string> items;
  std::stringstream ss(v);
  for (std::string p; std::getline(ss, p, '+');) items.push_back(p);
  return items;
}

// At most one kernel; qkfold not with streams (the engine folds the q/k preparation into the warp and tiled kernels
// only, and would otherwise run the variant unfolded without a word); an item and its no- form not both.
bool decode_variant_valid(const std::string& v) {
  if (v == "default") return true;
  static const std::set<std::string> known{"tiled",        "streams",         "warps",         "swiglu",
                                           "no-swiglu",    "qkfold",          "no-qkfold",     "fused-merge",
                                           "postnorm-add", "no-postnorm-add", "norm-prologue", "no-norm-prologue"};
  const std::vector<std::string> list = variant_items(v);
  const std::set<std::string> items(list.begin(), list.end());
  if (items.empty() || !std::includes(known.begin(), known.end(), items.begin(), items.end())) return false;
  const auto has = [&](const char* i) { return items.count(i) > 0; };
  return has("tiled") + has("streams") + has("warps") <= 1 && (!has("qkfold") || !has("streams")) &&
         !(has("qkfold") && has("no-qkfold")) && !(has("swiglu") && has("no-swiglu")) &&
         !(has("postnorm-add") && has("no-postnorm-add")) && !(has("norm-prologue") && has("no-norm-prologue"));
}

// The decode-path choices as the process started (the environment's), restored before each variant sets its own.
struct DecodeChoices {
  DecodeKernel kernel;
  DecodeMerge merge;
  bool swiglu;
  bool qk_fold;  // an engine option (CudaEngineOptions::fold_qk_into_decode_attention), not a process setting
  bool tiled_qk_fold;  // the tiled kernel takes the fold (attention_cache_cuda_tiled_qk_fold)
  bool post_norm_add;  // a post-norm block's residual add inside its norm's launch (cuda_model_post_norm_fused)
  bool norm_prologue;  // batch-1 decode norms in the next GEMV's prologue (cuda_model_decode_norm_prologue)
};

// Sets the process-wide choices of variant `v`; returns whether its engine folds the q/k preparation.
bool apply_decode_variant(const std::string& v, const DecodeChoices& base) {
  DecodeChoices c = base;
  if (v != "default")
    for (const std::string& i : variant_items(v)) {
      if (i == "tiled") c.kernel = DecodeKernel::tiled;
      if (i == "streams") c.kernel = DecodeKernel::streams;
      if (i == "warps") c.kernel = DecodeKernel::warps;
      if (i == "swiglu") c.swiglu = true;
      if (i == "no-swiglu") c.swiglu = false;
      if (i == "no-qkfold") c.qk_fold = c.tiled_qk_fold = false;
      if (i == "fused-merge") c.merge = DecodeMerge::fused;
      if (i == "qkfold") c.qk_fold = c.tiled_qk_fold = true;
      if (i == "postnorm-add") c.post_norm_add = true;
      if (i == "no-postnorm-add") c.post_norm_add = false;
      if (i == "norm-prologue") c.norm_prologue = true;
      if (i == "no-norm-prologue") c.norm_prologue = false;
    }
  attention_cache_cuda_set_decode_kernel(c.kernel);
  attention_cache_cuda_set_decode_merge(c.merge);
  cuda_linear_set_swiglu_gemv(c.swiglu);
  attention_cache_cuda_set_tiled_qk_fold(c.tiled_qk_fold ? 1 : 0);
  cuda_model_set_post_norm_fused(c.post_norm_add ? 1 : 0);
  cuda_model_set_decode_norm_prologue(c.norm_prologue ? 1 : 0);
  return c.qk_fold;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    const auto ints = [&](const std::string& v) {
      std::vector<int64_t> r;
      for (const std::string& p : split(v)) r.push_back(p == "max" ? kMaxBatch : std::atoll(p.c_str()));
      return r;
    };
    if (a == "--models") o.models = split(next());
    else if (a == "--contexts") o.contexts = ints(next());
    else if (a == "--batches") o.batches = ints(next());
    else if (a == "--decode-steps") o.decode_steps = std::atoll(next().c_str());
    else if (a == "--prefill-chunk") o.prefill_chunk = std::atoll(next().c_str());
    else if (a == "--layers") o.layers = std::atoll(next().c_str());
    else if (a == "--out") o.out = next();
    else if (a == "--configs-only") o.configs_only = true;
    else if (a == "--max-prefill-tokens") o.max_prefill_tokens = std::atoll(next().c_str());
    else if (a == "--precision") o.precision = next();
    else if (a == "--cuda-graphs") {
      o.graph_modes.clear();
      for (const std::string& v : split(next())) {
        if (v != "on" && v != "off") {
          std::fprintf(stderr, "--cuda-graphs takes on, off or a list of them, got '%s'\n", v.c_str());
          std::exit(2);
        }
        o.graph_modes.push_back(v == "on");
      }
      if (o.graph_modes.empty()) o.graph_modes.push_back(true);
    }
    else if (a == "--decode-variants") {
      o.decode_variants = split(next());
      if (o.decode_variants.empty()) o.decode_variants.push_back("default");
    }
    else if (a == "--search-context") o.search_context = true;
    else if (a == "--memory-caps") o.memory_caps = split(next());
    else if (a == "--search-probe") o.search_probe = std::atoll(next().c_str());
    else if (a == "--search-time-limit") o.search_time_limit = std::atof(next().c_str());
    else if (a == "--search-chunk-samples") o.search_chunk_samples = std::atoi(next().c_str());
    else {
      std::fprintf(stderr, "unknown option %s (see the header of bench/bench_generate.cpp)\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.precision != "bf16" && o.precision != "fp32") {
    std::fprintf(stderr, "--precision must be bf16 or fp32, got '%s'\n", o.precision.c_str());
    std::exit(2);
  }
  if (o.prefill_chunk <= 0 || o.decode_steps < 0 || o.search_probe < 1024 || o.search_chunk_samples < 1) {
    std::fprintf(stderr, "--prefill-chunk must be > 0, --decode-steps >= 0, --search-probe >= 1024, "
                         "--search-chunk-samples >= 1\n");
    std::exit(2);
  }
  for (const std::string& v : o.decode_variants)
    if (!decode_variant_valid(v)) {
      std::fprintf(stderr, "--decode-variants: '%s' is not default or a '+'-joined list of tiled, streams, warps, "
                           "swiglu, no-swiglu, fused-merge, qkfold, no-qkfold, postnorm-add, no-postnorm-add, "
                           "norm-prologue, no-norm-prologue (at "
                           "most one kernel; qkfold not with streams; not an item and its no- form)\n", v.c_str());
      std::exit(2);
    }
  std::sort(o.contexts.begin(), o.contexts.end());
  std::sort(o.batches.begin(), o.batches.end());
  return o;
}

// layer_types with every `period`-th layer (1-based) full attention; period 1: all attention.
json layer_types(int64_t layers, int64_t period) {
  json t = json::array();
  for (int64_t i = 0; i < layers; ++i) t.push_back((i + 1) % period == 0 ? "full_attention" : "linear_attention");
  return t;
}

json model_json(const std::string& name, int64_t layers_override, int64_t max_positions = 65536) {
  const bool olmo = name.rfind("olmo", 0) == 0;
  const bool hybrid = name.find("hybrid") != std::string::npos;
  const int64_t layers = layers_override > 0 ? layers_override : (olmo ? 32 : 36);
  json j;
  if (olmo) {
    j = {{"model_type", hybrid ? "olmo_hybrid" : "qwen3"},
         {"hidden_size", 4096},
         {"intermediate_size", 11008},
         {"num_attention_heads", 32},
         {"num_key_value_heads", 32},
         {"vocab_size", 100278},
         {"tie_word_embeddings", false},
         {"linear_num_key_heads", 32},
         {"linear_num_value_heads", 32},
         {"linear_allow_neg_eigval", true}};
  } else {
    j = {{"model_type", hybrid ? "qwen3_hybrid" : "qwen3"},
         {"hidden_size", 2560},
         {"intermediate_size", 9728},
         {"num_attention_heads", 32},
         {"num_key_value_heads", 8},
         {"vocab_size", 151936},
         {"tie_word_embeddings", true},
         {"linear_num_key_heads", 16},
         {"linear_num_value_heads", 32}};
  }
  j["head_dim"] = 128;
  j["num_hidden_layers"] = layers;
  j["max_position_embeddings"] = max_positions;
  j["rms_norm_eps"] = 1e-6;
  j["linear_key_head_dim"] = 128;
  j["linear_value_head_dim"] = 128;
  j["linear_conv_kernel_dim"] = 4;
  j["layer_types"] = layer_types(layers, hybrid ? 4 : 1);
  if (!hybrid) {  // plain qwen3: no linear_* keys
    for (const char* k : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "linear_conv_kernel_dim", "linear_allow_neg_eigval"})
      j.erase(k);
  }
  return j;
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random weights, filled on all host threads (Model::create's per-element RNG is too slow for 7B parameters).
Model random_model(const ModelConfig& config) {
  DecoderWeights w;
  w.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  uint64_t tensor_id = 0;
  for (const TensorSpec& spec : expected_tensors(config)) {
    Tensor t = Tensor::zeros(spec.shape);
    float* p = t.f32();
    const int64_t n = t.numel();
    const std::string& name = spec.name;
    const auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    const uint64_t id = ++tensor_id;
    const bool norm = spec.group == "norm", a_log = ends_with(".A_log"), dt = ends_with(".dt_bias");
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < threads; ++k)
      pool.emplace_back([=] {
        for (int64_t i = n * k / threads; i < n * (k + 1) / threads; ++i) {
          const double u = static_cast<double>(mix(id << 40 ^ static_cast<uint64_t>(i)) >> 11) * 0x1p-53;
          if (norm) p[i] = 1.0f;
          else if (a_log) p[i] = static_cast<float>(std::log(1.0 + 15.0 * u));  // A in [1, 16]
          else if (dt) p[i] = static_cast<float>(std::log(std::expm1(0.01)));     // softplus⁻¹(0.01)
          else p[i] = static_cast<float>((2.0 * u - 1.0) * 0.02 * std::sqrt(3.0));
        }
      });
    for (std::thread& th : pool) th.join();
    if (spec.row->runtime_shape != nullptr) t = t.reshape(spec.row->runtime_shape(config));
    spec.row->slot(w, spec.layer) = t;
  }
  return Model::from_weights(config, std::move(w));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t device_used_bytes() {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return total_b - free_b;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t stream) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(mix(stream << 32 ^ static_cast<uint64_t>(i)) % vocab);
  return ids;
}

double gib(double bytes) { return bytes / double(1ull << 30); }

json batches_json(const std::vector<int64_t>& batches) {
  json j = json::array();
  for (const int64_t b : batches) j.push_back(b == kMaxBatch ? json("max") : json(b));
  return j;
}

int64_t kv_element_bytes(const Options& o) { return o.precision == "bf16" ? 2 : 4; }

CudaEngineOptions engine_options(bool graphs) {
  CudaEngineOptions e = cuda_engine_default_options();  // HLM_QK_FUSE=off in the environment: A/B of the fusion
  e.cuda_graphs = graphs;
  return e;
}

// Device bytes the engine's state pools take for `plan`, as the caching allocator sizes them (one K and one V pool
// per attention layer, four GDN pools per GDN layer: cuda_engine.cpp).
double pool_device_bytes(const ModelConfig& c, const MemoryPlan& plan) {
  double bytes = 0;
  const size_t kv = static_cast<size_t>(plan.num_blocks * plan.block_size * c.num_key_value_heads * c.head_dim *
                                        plan.kv_element_bytes);
  for (const LayerKind kind : c.layer_kinds) {
    if (kind == LayerKind::FullAttention) {
      bytes += 2.0 * double(CudaAllocator::size_class(kv));
    } else {
      const LinearAttentionConfig& l = *c.linear;
      const int64_t S = plan.max_sequences, K1 = l.conv_kernel_dim - 1, f = 4;
      const int64_t ck = l.num_key_heads * l.key_head_dim, cv = l.num_value_heads * l.value_head_dim;
      for (const int64_t n : {S * ck * K1, S * ck * K1, S * cv * K1, S * l.num_value_heads * l.value_head_dim *
                                                                          l.key_head_dim})
        bytes += double(CudaAllocator::size_class(static_cast<size_t>(n * f)));
    }
  }
  return bytes;
}

// Random weights on the device in the chosen precision; the allocator's cache emptied and its peaks reset, so later
// peaks measure what runs on top of the weights. weights_held: the weights' device bytes.
std::unique_ptr<CudaModel> load_model(const ModelConfig& config, CudaContext& ctx, const Options& o,
                                      size_t& weights_held) {
  const auto t0 = std::chrono::steady_clock::now();
  const Model host = random_model(config);
  const double fill_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  auto gpu = std::make_unique<CudaModel>(CudaModel::upload(host, ctx));
  if (o.precision == "bf16") gpu->drop_fp32_weights();
  ctx.synchronize();
  ctx.allocator().release_cached();
  ctx.allocator().reset_peaks();
  weights_held = gpu->weight_bytes() + gpu->bf16_copy_bytes();
  std::printf("   weights: %.2f GiB on the device (%s), host fill %.1f s, upload %.1f s\n", gib(double(weights_held)),
              o.precision.c_str(), fill_s, seconds_since(t1));
  return gpu;
}

MemoryPlan plan_for(const ModelConfig& config, const Options& o, int64_t sequences, int64_t tokens_each) {
  const MemoryPlan shape = memory_plan_shape(config, kDefaultKvBlockSize, kv_element_bytes(o));
  MemoryRequest req;
  req.max_sequences = sequences;
  req.kv_blocks = sequences * shape.blocks_for(tokens_each);
  req.kv_element_bytes = kv_element_bytes(o);
  return memory_plan_build(config, req);
}

// Prefills the engine's sequences `slots` with L tokens each (chunks of `chunk` tokens of every sequence per step).
double prefill(InferenceEngine& engine, const std::vector<int>& slots, const std::vector<std::vector<int32_t>>& prompts,
               int64_t L, int64_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t begin = 0; begin < L; begin += chunk) {
    const int64_t end = std::min(L, begin + chunk);
    TokenBatch batch;
    for (size_t b = 0; b < slots.size(); ++b)
      batch.add_sequence(std::vector<int32_t>(prompts[b].begin() + begin, prompts[b].begin() + end));
    engine.step(slots, batch);  // returns after the logits download: the step is done
  }
  return seconds_since(t0);
}

// Chunks of one sequence's L-token prefill run at the indices prefill_sample_chunks(chunks, samples) chooses: the
// sequence opened on the plan for L and advanced past the chunks not sampled without computing them
// (InferenceEngine::advance_uncomputed: their KV blocks taken, their K/V rows written with values of a real cache's
// order, SkippedRows::kRandom — over a fresh pool's zeros the sampled chunks summed 7-14 % under whole prefills in
// session 47, likely the tensor cores' data-dependent power), each sampled chunk timed at its real position and
// context length. The peak is the whole prefill's: the same pools, and the last chunk (always sampled)
// has the largest transients of any chunk (its attention over the whole context, the cuDNN engine's gathered K/V of
// the whole context). samples = 0: the last chunk alone (a memory measurement; no prefill estimate); samples ≥ chunks:
// every chunk, i.e. the whole prefill (nothing skipped, the sum exact).
// Every run starts without cached cuDNN attention plans and without the model's rope table, as a new process would:
// each chunk's context length is a new shape whose plan is built on first use (attention_cudnn.h; ~1 % of a prefill,
// session 47), and the first chunk builds the table for the whole reservation (host cos/sin + upload; in session 48
// the whole runs' first chunk took 1.85 s against 0.30 s for the sampled runs after them, which reused the table).
struct SampledRun {
  std::vector<int64_t> index;    // sampled chunk indices, ascending
  std::vector<double> seconds;   // each one's time
  double prefill_seconds = -1;   // prefill_seconds_from_samples (samples > 0)
  size_t peak = 0;
  double last_chunk_seconds() const { return seconds.back(); }
};
SampledRun sampled_chunks_one(CudaModel& gpu, CudaContext& ctx, const Options& o, int64_t L, int samples) {
  attention_cudnn_reset_plans();
  gpu.release_rope_table();
  ctx.allocator().release_cached();
  ctx.allocator().reset_peaks();
  const ModelConfig& config = gpu.config();
  auto engine = make_cuda_engine(gpu, plan_for(config, o, 1, L), engine_options(o.graph_modes.back()));
  const std::vector<int> slots{engine->open_sequence(L)};
  const int64_t chunks = (L + o.prefill_chunk - 1) / o.prefill_chunk;
  const std::vector<int32_t> ids = random_ids(std::min(L, o.prefill_chunk), config.vocab_size, 1);
  SampledRun r;
  r.index = prefill_sample_chunks(chunks, samples);
  int64_t at = 0;  // positions the sequence holds
  for (const int64_t c : r.index) {
    const int64_t begin = c * o.prefill_chunk, end = std::min(L, begin + o.prefill_chunk);
    // Values matter for time only: the memory run (no samples) leaves the rows as they are.
    if (begin > at)
      engine->advance_uncomputed(slots[0], begin - at, samples > 0 ? SkippedRows::kRandom : SkippedRows::kAsTheyAre);
    TokenBatch batch;
    batch.add_sequence(std::vector<int32_t>(ids.begin(), ids.begin() + (end - begin)));
    const auto t0 = std::chrono::steady_clock::now();
    engine->step(slots, batch);  // returns after the logits download: the step is done
    r.seconds.push_back(seconds_since(t0));
    at = end;
  }
  r.peak = ctx.allocator().stats().peak_bytes_in_use;
  if (r.index.front() == 0) r.prefill_seconds = prefill_seconds_from_samples(chunks, r.index, r.seconds);
  engine.reset();
  ctx.allocator().release_cached();
  return r;
}

// One sequence of L tokens prefilled whole (every chunk sampled: seconds is the prefill's, chunk_seconds each chunk's),
// or its last chunk alone (seconds is that chunk's), and the allocator's peak during it (peaks reset first).
struct SingleRun {
  double seconds = 0;
  size_t peak = 0;
  std::vector<double> chunk_seconds;
};
SingleRun prefill_one(CudaModel& gpu, CudaContext& ctx, const Options& o, int64_t L) {
  SampledRun r = sampled_chunks_one(gpu, ctx, o, L, static_cast<int>((L + o.prefill_chunk - 1) / o.prefill_chunk));
  return {r.prefill_seconds, r.peak, std::move(r.seconds)};
}
SingleRun last_chunk_one(CudaModel& gpu, CudaContext& ctx, const Options& o, int64_t L) {
  const SampledRun r = sampled_chunks_one(gpu, ctx, o, L, 0);
  return {r.last_chunk_seconds(), r.peak, {}};
}

json sampled_json(const SampledRun& r, double outside) {
  return {{"measured_peak_bytes", double(r.peak) + outside},
          {"last_chunk_seconds", r.last_chunk_seconds()},
          {"prefill_seconds_from_sampled_chunks", r.prefill_seconds},
          {"sampled_chunks", r.index},
          {"sampled_chunk_seconds", r.seconds}};
}

// --search-context (header comment).
void search_contexts(const Options& o) {
  json rows = json::array();
  std::ostringstream md;
  md << "| model | precision | cap | longest prefill L | peak GiB (measured) | prefill s (run, or from sampled"
        " chunks) | prefill s from sampled chunks | prefill s extrapolated from the probes | runs | how |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  const auto write = [&] {
    const json doc = {{"bench", "bench_generate --search-context"},
                      {"options",
                       {{"models", o.models},
                        {"memory_caps", o.memory_caps},
                        {"prefill_chunk", o.prefill_chunk},
                        {"precision", o.precision},
                        {"search_probe", o.search_probe},
                        {"search_time_limit", o.search_time_limit},
                        {"search_chunk_samples", o.search_chunk_samples},
                        {"layers_override", o.layers}}},
                      {"results", rows}};
    std::ofstream(std::filesystem::path(o.out) / "bench_generate_context.json") << doc.dump(2) << "\n";
    std::ofstream(std::filesystem::path(o.out) / "bench_generate_context.md") << md.str();
  };
  for (const std::string& name : o.models) {
    const ModelConfig config = parse_model_config(model_json(name, o.layers, int64_t{1} << 24), name);
    std::printf("== %s (%lld layers): context search\n", name.c_str(), static_cast<long long>(config.num_hidden_layers));
    std::fflush(stdout);
    CudaContext ctx;
    size_t weights = 0;
    auto gpu = load_model(config, ctx, o, weights);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    // Device use outside the allocator (CUDA context, cuBLAS handles and workspace): counted against the cap.
    const double outside = double(total_b - free_b) - double(ctx.allocator().stats().bytes_reserved);
    // 1. activation peak of a chunk: a 2-chunk prefill.
    const int64_t L2 = 2 * o.prefill_chunk;
    const SingleRun two = prefill_one(*gpu, ctx, o, L2);
    const double act = double(two.peak) - double(weights) - pool_device_bytes(config, plan_for(config, o, 1, L2));
    // Timed probes for the extrapolation: L/4, L/2, L of --search-probe.
    std::vector<double> px, py;
    for (const int64_t L : {o.search_probe / 4, o.search_probe / 2, o.search_probe}) {
      const SingleRun r = prefill_one(*gpu, ctx, o, L);
      px.push_back(double(L));
      py.push_back(r.seconds);
      std::printf("   probe L=%lld: prefill %.3f s\n", static_cast<long long>(L), r.seconds);
    }
    // t(L) = a + b L + c L² through the three probes (Lagrange form).
    const auto predict_time = [&](double L) {
      double t = 0;
      for (int i = 0; i < 3; ++i) {
        double w = py[i];
        for (int j = 0; j < 3; ++j)
          if (j != i) w *= (L - px[j]) / (px[i] - px[j]);
        t += w;
      }
      return t;
    };
    const int64_t rope_bytes_per_token = config.head_dim * int64_t{4};  // cos and sin, head_dim/2 floats each
    for (const std::string& cap_text : o.memory_caps) {
      double cap = 0;
      if (cap_text == "device") cap = double(total_b);
      else cap = std::atof(cap_text.c_str()) * (cap_text.back() == 'G' ? double(1ull << 30) : 1.0);
      json row = {{"model", name},
                  {"precision", o.precision},
                  {"cap", cap_text},
                  {"cap_bytes", cap},
                  {"device_total_bytes", total_b},
                  {"weights_bytes", weights},
                  {"outside_allocator_bytes", outside},
                  {"chunk_activation_peak_bytes", act},
                  {"prefill_chunk", o.prefill_chunk},
                  {"probe_contexts", px},
                  {"probe_seconds", py}};
      // Under the cuDNN attention engine each later bf16 chunk gathers its whole context's K and V contiguous
      // (cuda_engine.cpp: two transient [L, Hkv, D] bf16 buffers, one attention layer at a time), which the
      // 2-chunk activation probe does not see at length L (session 13: the 1,048,576-token hybrid prefill peaked
      // 4 GiB above the prediction without this term).
      const bool gathers = attention_engine() == AttentionEngine::kCudnn && o.precision == "bf16";
      const auto gather_bytes = [&](int64_t L) {
        if (!gathers) return 0.0;
        const size_t one = static_cast<size_t>(L * config.num_key_value_heads * config.head_dim * 2);
        return 2.0 * double(CudaAllocator::size_class(one));
      };
      const auto predicted_use = [&](int64_t L) {
        return double(weights) + outside + pool_device_bytes(config, plan_for(config, o, 1, L)) + act +
               double(rope_bytes_per_token * L) + gather_bytes(L);
      };
      if (cap <= 0 || predicted_use(1024) > cap) {
        row["error"] = "not even 1024 tokens fit under the cap";
        rows.push_back(row);
        write();
        continue;
      }
      int64_t lo = 1, hi = int64_t{1} << 14;  // in units of 1024 tokens: lo fits, hi does not
      while (predicted_use(hi * 1024) <= cap) hi *= 2;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        (predicted_use(mid * 1024) <= cap ? lo : hi) = mid;
      }
      int64_t L = lo * 1024;
      row["predicted_longest"] = L;
      row["predicted_use_bytes"] = predicted_use(L);
      const double t_pred = predict_time(double(L));
      row["predicted_prefill_seconds"] = t_pred;
      std::string how;
      json runs = json::array();
      // A prefill within the time limit runs whole; a longer one is measured on its last chunk alone for memory
      // (sampled_chunks_one with no samples), lowering L while the measured use is over the cap, and then its time
      // from --search-chunk-samples chunks run at their real positions (the sum over all chunks, interpolated
      // between the samples: prefill_sampling.h). Beside a whole run the same sampled run at the same L is recorded
      // (sampled_check), so the method's peak and time can be compared with a real prefill.
      const bool whole = t_pred <= o.search_time_limit;
      for (int attempt = 0; attempt < 4 && L > 0; ++attempt) {
        try {
          const SingleRun r = whole ? prefill_one(*gpu, ctx, o, L) : last_chunk_one(*gpu, ctx, o, L);
          const double use = double(r.peak) + outside;
          runs.push_back({{"context", L},
                          {whole ? "seconds" : "last_chunk_seconds", r.seconds},
                          {"measured_peak_bytes", use}});
          if (whole) runs.back()["chunk_seconds"] = r.chunk_seconds;
          std::printf("   cap %s: L=%lld %s %.2f s, peak %.2f GiB\n", cap_text.c_str(), static_cast<long long>(L),
                      whole ? "prefill" : "last chunk", r.seconds, gib(use));
          std::fflush(stdout);
          if (use <= cap) {
            row["longest_context"] = L;
            row["measured_peak_bytes"] = use;
            SampledRun sampled;
            try {
              sampled = sampled_chunks_one(*gpu, ctx, o, L, o.search_chunk_samples);
            } catch (const std::exception& e) {  // the L found stands; only its sampled time is missing
              row["sampled_error"] = e.what();
              ctx.allocator().release_cached();
              how = whole ? "run" : "memory measured on the last chunk; the sampled run failed (sampled_error)";
              if (whole) row["prefill_seconds"] = r.seconds;
              break;
            }
            std::printf("   %zu sampled chunks at L=%lld: peak %.2f GiB, last chunk %.2f s, prefill from them %.1f s\n",
                        sampled.index.size(), static_cast<long long>(L), gib(double(sampled.peak) + outside),
                        sampled.last_chunk_seconds(), sampled.prefill_seconds);
            if (whole) {
              how = "run";
              row["prefill_seconds"] = r.seconds;
              row["sampled_check"] = sampled_json(sampled, outside);
              // Each sampled chunk beside the same chunk of the whole run: where the two times part.
              double sampled_sum = 0, whole_sum = 0;
              for (size_t i = 0; i < sampled.index.size(); ++i) {
                sampled_sum += sampled.seconds[i];
                whole_sum += r.chunk_seconds.at(static_cast<size_t>(sampled.index[i]));
              }
              row["sampled_check"]["same_chunks_in_the_whole_run_seconds"] = whole_sum;
              std::printf("   the sampled chunks took %.2f s; the same chunks of the whole run %.2f s (%+.1f %%)\n",
                          sampled_sum, whole_sum, 100.0 * (sampled_sum / whole_sum - 1.0));
            } else {
              how = "memory measured on the last chunk, time from sampled chunks (the rest advanced uncomputed)";
              row["last_chunk_seconds"] = r.seconds;
              row["prefill_seconds"] = sampled.prefill_seconds;
              row["sampled"] = sampled_json(sampled, outside);
            }
            break;
          }
          // Lower L until the prediction has dropped by the overshoot: the pools are sized in the allocator's
          // size classes (quarter powers of two), so the use falls in steps, not per token.
          const double target = predicted_use(L) - (use - cap);
          const int64_t before = L;
          while (L > 1024 && predicted_use(L) > target) L -= 1024;
          if (L == before) L -= 1024;
        } catch (const std::exception& e) {
          runs.push_back({{"context", L}, {"error", e.what()}});
          ctx.allocator().release_cached();
          L -= std::max<int64_t>(1024, L / 20 / 1024 * 1024);
        }
      }
      if (how.empty()) how = whole ? "failed: no run fit under the cap" : "failed: no last-chunk run fit under the cap";
      row["how"] = how;
      row["runs"] = runs;
      rows.push_back(row);
      char line[512];
      const char* sampled_key = row.contains("sampled") ? "sampled" : "sampled_check";
      const double from_samples =
          row.contains(sampled_key) ? row[sampled_key]["prefill_seconds_from_sampled_chunks"].get<double>() : -1.0;
      std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %zu | %s |\n", name.c_str(),
                    o.precision.c_str(), cap_text.c_str(),
                    row.contains("longest_context") ? std::to_string(row["longest_context"].get<int64_t>()).c_str()
                                                    : "-",
                    row.contains("measured_peak_bytes")
                        ? std::to_string(gib(row["measured_peak_bytes"].get<double>())).substr(0, 6).c_str()
                        : "-",
                    row.contains("prefill_seconds") ? row["prefill_seconds"].get<double>() : -1.0, from_samples,
                    t_pred, runs.size(), how.c_str());
      md << line;
      std::printf("   %s", line);
      write();
    }
  }
  write();
  std::printf("\n%s", md.str().c_str());
}

// The SVG: decode tokens/s (at the largest B measured at each L) and the largest B that fits, vs the context.
std::string serving_svg(const json& results, const std::vector<std::string>& models, const std::string& precision) {
  LineChart speed, capacity;
  speed.title = "Decode tokens/s at the largest measured batch (" + precision + ")";
  speed.x_label = "context (K tokens)";
  speed.y_label = "decode tokens/s";
  capacity.title = "Max concurrent sequences on this GPU (from measured memory)";
  capacity.x_label = "context (K tokens)";
  capacity.y_label = "sequences";
  for (const std::string& m : models) {
    ChartSeries s;
    s.label = m;
    s.dash = m.find("hybrid") != std::string::npos ? "" : "6,4";  // full attention dashed
    ChartSeries c = s;
    std::map<int64_t, std::pair<int64_t, double>> best;  // L -> (B, tok/s) at the largest measured B
    std::map<int64_t, int64_t> largest;
    for (const json& r : results) {
      if (r["model"] != m || !r.contains("decode_tokens_per_second")) continue;
      const int64_t L = r["context"], B = r["batch"];
      if (!best.count(L) || best[L].first < B) best[L] = {B, r["decode_tokens_per_second"].get<double>()};
      if (r["largest_batch_estimate"].get<int64_t>() >= 0) largest[L] = r["largest_batch_estimate"];
    }
    for (const auto& [L, bt] : best) {
      s.x.push_back(double(L) / 1024.0);
      s.y.push_back(bt.second);
    }
    for (const auto& [L, b] : largest) {
      c.x.push_back(double(L) / 1024.0);
      c.y.push_back(double(b));
    }
    if (!s.x.empty()) speed.series.push_back(s);
    if (!c.x.empty()) capacity.series.push_back(c);
  }
  if (speed.series.empty() || capacity.series.empty()) return "";
  // Two charts stacked in one SVG (the second's clip-path id renamed so the two stay distinct).
  std::string top = svg_line_chart(speed), bottom = svg_line_chart(capacity);
  for (size_t at = bottom.find("\"plot\""); at != std::string::npos; at = bottom.find("\"plot\"", at))
    bottom.replace(at, 6, "\"plot2\"");
  for (size_t at = bottom.find("url(#plot)"); at != std::string::npos; at = bottom.find("url(#plot)", at))
    bottom.replace(at, 10, "url(#plot2)");
  const size_t h = top.find("height=\"");
  const double height = std::atof(top.c_str() + h + 8);
  const size_t w = top.find("width=\"");
  const double width = std::atof(top.c_str() + w + 7);
  bottom.insert(bottom.find("<svg ") + 5, "y=\"" + std::to_string(static_cast<int>(height)) + "\" ");
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << 2 * height << "\">\n"
     << top << bottom << "</svg>\n";
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line into a pipe too: the device script time-stamps each line
  const Options o = parse(argc, argv);
  std::filesystem::create_directories(o.out);
  if (o.search_context) {
    search_contexts(o);
    return 0;
  }
  DecodeChoices base_choices{};
  try {  // the environment's choices (HLM_DECODE_KERNEL, HLM_DECODE_MERGE, HLM_GATE_UP_SWIGLU): a typo is refused here
    base_choices = {attention_cache_cuda_decode_kernel(), attention_cache_cuda_decode_merge(),
                    cuda_linear_swiglu_gemv_enabled(), cuda_engine_default_options().fold_qk_into_decode_attention,
                    attention_cache_cuda_tiled_qk_fold(), cuda_model_post_norm_fused(), cuda_model_decode_norm_prologue()};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 2;
  }
  json results = json::array();
  std::ostringstream md;
  const auto write_outputs = [&] {
    const json doc = {{"bench", "bench_generate"},
                      {"options",
                       {{"models", o.models},
                        {"contexts", o.contexts},
                        {"batches", batches_json(o.batches)},
                        {"decode_steps", o.decode_steps},
                        {"prefill_chunk", o.prefill_chunk},
                        {"precision", o.precision},
                        {"max_prefill_tokens", o.max_prefill_tokens},
                        {"decode_variants", o.decode_variants},
                        {"layers_override", o.layers}}},
                      {"results", results}};
    std::ofstream(std::filesystem::path(o.out) / "bench_generate.json") << doc.dump(2) << "\n";
    std::ofstream(std::filesystem::path(o.out) / "bench_generate.md") << md.str();
    const std::string svg = serving_svg(results, o.models, o.precision);
    if (!svg.empty()) std::ofstream(std::filesystem::path(o.out) / "bench_generate.svg") << svg;
  };
  md << "| model | precision | layers | L | B | prefill s | prefill tok/s | decode ms/step | decode tok/s | peak alloc GiB "
        "| device used GiB | KV/attn layer/seq MiB (arith.) | GDN/layer/seq MiB (arith.) | largest B (measured mem.) "
        "| GPUs for 1,024 rollouts |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& name : o.models) {
    const json cj = model_json(name, o.layers);
    const ModelConfig config = parse_model_config(cj, name);
    const MemoryPlan shape = memory_plan_shape(config, kDefaultKvBlockSize, kv_element_bytes(o));
    if (o.configs_only) {
      int64_t params = 0;
      for (const TensorSpec& spec : expected_tensors(config)) params += spec.shape.numel();
      std::printf("%s: %s, %lld layers (%lld attention, %lld GDN), %.3f B parameters (untied head counted)\n",
                  name.c_str(), config.model_type.c_str(), static_cast<long long>(config.num_hidden_layers),
                  static_cast<long long>(shape.attention_layers), static_cast<long long>(shape.gdn_layers),
                  double(params) / 1e9);
      for (const int64_t L : o.contexts)
        std::printf("  L=%lld: state per sequence %.3f GiB (%s KV %.3f MiB/token/all layers, GDN %.3f MiB)\n",
                    static_cast<long long>(L), gib(double(shape.sequence_bytes(L))), o.precision.c_str(),
                    double(shape.kv_bytes_per_block) / double(shape.block_size) / 1048576.0,
                    double(shape.gdn_bytes_per_sequence) / 1048576.0);
      continue;
    }
    std::printf("== %s (%lld layers): building random weights\n", name.c_str(),
                static_cast<long long>(config.num_hidden_layers));
    std::fflush(stdout);
    CudaContext ctx;
    size_t weights = 0;
    std::unique_ptr<CudaModel> gpu = load_model(config, ctx, o, weights);
    const size_t weights_used = device_used_bytes();
    size_t free_after_weights = 0, total = 0;
    cudaMemGetInfo(&free_after_weights, &total);
    for (const int64_t L : o.contexts) {
      double activation_peak_b1 = -1;
      int64_t largest_b = -1;  // from the smallest-B run at this L
      const int64_t tokens_each = L + o.decode_steps;
      struct Run {
        int64_t batch;
        bool graphs;
        std::string variant;
      };
      std::vector<Run> runs;
      for (const int64_t b : o.batches)
        for (const bool g : o.graph_modes)
          for (const std::string& v : o.decode_variants) runs.push_back({b, g, v});
      for (const Run& run : runs) {
        const int64_t B_opt = run.batch;
        const bool graphs = run.graphs;
        const bool qk_fold = apply_decode_variant(run.variant, base_choices);
        const bool max_batch = B_opt == kMaxBatch;
        const int64_t B = max_batch ? largest_b : B_opt;
        if (B < 1) {
          results.push_back({{"model", name}, {"context", L}, {"batch", "max"},
                             {"skipped", "max: no largest-B estimate at this L (a smaller B must run first)"}});
          continue;
        }
        // Prefill group: all B at once, or (max) groups of the smallest B, the activation peak the estimate assumed.
        const int64_t group = max_batch ? std::max<int64_t>(1, o.batches.front() == kMaxBatch ? 1 : o.batches.front())
                                        : B;
        const MemoryPlan plan = plan_for(config, o, B, tokens_each);
        json row = {{"model", name},        {"layers", config.num_hidden_layers},
                    {"context", L},         {"batch", B},
                    {"max_batch_run", max_batch}, {"prefill_group", group},
                    {"precision", o.precision}, {"cuda_graphs", graphs}, {"decode_variant", run.variant},
                    {"decode_steps", o.decode_steps}, {"prefill_chunk", o.prefill_chunk},
                    {"plan_state_bytes", plan.total_bytes()}};
        if (o.max_prefill_tokens > 0 && B * L > o.max_prefill_tokens) {
          row["skipped"] = "B·L over --max-prefill-tokens " + std::to_string(o.max_prefill_tokens);
          results.push_back(row);
          continue;
        }
        size_t free_now = 0;
        cudaMemGetInfo(&free_now, &total);
        // Room for the state plus the prefill activations (a guess: 16 elements of the precision per token in flight
        // and of the hidden/MLP width; measured on the H200: ~4.9 GiB of activations for 16 × 1K tokens of
        // olmo_hybrid_7b in bf16, peak 22.11 GiB less 14.36 of weights and ~2.9 of state, the guess 5.4 GiB);
        // otherwise skipped, not run. A configuration that passes the guess and still does not fit is caught as
        // out-of-memory below and recorded. (Until 2026-12-01 the guess was 24 floats per token, which skipped
        // 16 × 8K prompts of that model with a guess of 129 GiB of activations.)
        const double element_bytes = o.precision == "bf16" ? 2.0 : 4.0;
        const double act_guess = 16.0 * element_bytes * double(group * std::min(L, o.prefill_chunk)) *
                                 double(std::max(config.hidden_size, config.intermediate_size));
        if (!max_batch && double(plan.total_bytes()) + act_guess > double(free_now)) {
          row["skipped"] = "does not fit: state " + std::to_string(plan.total_bytes()) + " B + activations ~" +
                           std::to_string(static_cast<int64_t>(act_guess)) + " B > free " + std::to_string(free_now);
          std::printf("   L=%lld B=%lld: skipped (%s)\n", static_cast<long long>(L), static_cast<long long>(B),
                      row["skipped"].get<std::string>().c_str());
          results.push_back(row);
          continue;
        }
        try {  // an out-of-memory (or any) failure is recorded and the next configuration runs
          ctx.allocator().release_cached();
          ctx.allocator().reset_peaks();
          CudaEngineOptions options = engine_options(graphs);
          options.fold_qk_into_decode_attention = qk_fold;
          auto engine = make_cuda_engine(*gpu, plan, options);
          std::vector<int> slots;
          std::vector<std::vector<int32_t>> prompts;
          for (int64_t b = 0; b < B; ++b) {
            slots.push_back(engine->open_sequence(tokens_each));
            prompts.push_back(random_ids(L + o.decode_steps, config.vocab_size, static_cast<uint64_t>(b + 1)));
          }
          double prefill_s = 0;
          for (int64_t g0 = 0; g0 < B; g0 += group) {
            const int64_t g1 = std::min(B, g0 + group);
            const std::vector<int> gs(slots.begin() + g0, slots.begin() + g1);
            const std::vector<std::vector<int32_t>> gp(prompts.begin() + g0, prompts.begin() + g1);
            prefill_s += prefill(*engine, gs, gp, L, o.prefill_chunk);
          }
          const size_t peak_after_prefill = ctx.allocator().stats().peak_bytes_in_use;
          std::vector<double> step_s;
          // HLM_PROFILE_DECODE=1: the decode steps between cudaProfilerStart/Stop, the range the kernel tracer's
          // profiler mode (docs/profiling.md) reports (GPU busy share and kernels of decode alone).
          static const bool profile_decode = std::getenv("HLM_PROFILE_DECODE") != nullptr;
          if (profile_decode) {
            cudaDeviceSynchronize();
            cudaProfilerStart();
          }
          for (int64_t s = 0; s < o.decode_steps; ++s) {
            TokenBatch batch;
            for (int64_t b = 0; b < B; ++b) batch.add_sequence({prompts[b][static_cast<size_t>(L + s)]});
            const auto ts = std::chrono::steady_clock::now();
            engine->step(slots, batch);
            step_s.push_back(seconds_since(ts));
          }
          if (profile_decode) {
            cudaDeviceSynchronize();
            cudaProfilerStop();
          }
          double decode_s = 0;
          for (double s : step_s) decode_s += s;
          std::vector<double> sorted = step_s;
          std::sort(sorted.begin(), sorted.end());
          const double median_step = sorted.empty() ? 0 : sorted[sorted.size() / 2];
          const CudaAllocatorStats st = ctx.allocator().stats();
          const size_t used = device_used_bytes();
          // Measured state per layer and sequence, beside the arithmetic.
          const StateUsage u = engine->state_usage();
          double kv_layer = -1, gdn_layer = -1;
          for (const LayerStateBytes& l : u.layers) {
            if (l.kind == LayerKind::FullAttention && kv_layer < 0) kv_layer = double(l.bytes_in_use) / double(B);
            if (l.kind != LayerKind::FullAttention && gdn_layer < 0) gdn_layer = double(l.bytes_in_use) / double(B);
          }
          const StateSizes kv_arith_sizes = state_sizes(config, tokens_each, kv_element_bytes(o));
          const double kv_arith = double(kv_arith_sizes.kv_elements_at_context) * double(kv_element_bytes(o));
          const double gdn_arith =
              double(kv_arith_sizes.recurrent_state_elements + kv_arith_sizes.conv_state_elements) * 4.0;
          if (B_opt == o.batches.front()) {
            activation_peak_b1 = double(peak_after_prefill) - double(weights) - pool_device_bytes(config, plan);
            // The largest B whose pools and that activation peak fit in the free memory after the weights.
            const auto fits = [&](int64_t b) {
              return pool_device_bytes(config, plan_for(config, o, b, tokens_each)) + activation_peak_b1 <=
                     double(free_after_weights);
            };
            int64_t lo = 0, hi = 1;
            while (fits(hi)) {
              lo = hi;
              hi *= 2;
            }
            while (hi - lo > 1) {
              const int64_t mid = (lo + hi) / 2;
              (fits(mid) ? lo : hi) = mid;
            }
            largest_b = lo;
          }
          const double seq_bytes = double(plan.sequence_bytes(tokens_each));
          const int64_t gpus_1024 = largest_b > 0 ? (1024 + largest_b - 1) / largest_b : -1;
          const CudaEngineGraphStats gstats = cuda_engine_graph_stats(*engine);
          row.update({{"graph_captures", gstats.captures},
                      {"graph_replays", gstats.replays},
                      {"graph_failures", gstats.failures},
                      {"fused_decode_steps", gstats.fused_decode_steps},
                      {"fused_decode", gstats.fused_decode_refusal.empty() ? "on" : gstats.fused_decode_refusal},
                      {"qk_folded_launches", gstats.qk_folded_launches}});
          row.update({{"prefill_seconds", prefill_s},
                      {"prefill_tokens_per_second", double(B * L) / prefill_s},
                      {"decode_seconds", decode_s},
                      {"decode_median_step_seconds", median_step},
                      {"decode_tokens_per_second", o.decode_steps > 0 ? double(B * o.decode_steps) / decode_s : 0.0},
                      {"allocator_peak_bytes_in_use", st.peak_bytes_in_use},
                      {"allocator_peak_after_prefill", peak_after_prefill},
                      {"device_used_bytes", used},
                      {"weights_device_used_bytes", weights_used},
                      {"weight_bytes", weights},
                      {"free_after_weights_bytes", free_after_weights},
                      {"state_pool_device_bytes", pool_device_bytes(config, plan)},
                      {"activation_peak_smallest_batch_bytes", activation_peak_b1},
                      {"state_bytes_in_use", u.bytes_in_use()},
                      {"state_bytes_reserved", u.bytes_reserved()},
                      {"kv_bytes_per_attention_layer_per_sequence_measured", kv_layer},
                      {"kv_bytes_per_attention_layer_per_sequence_arithmetic", kv_arith},
                      {"gdn_bytes_per_layer_per_sequence_measured", gdn_layer},
                      {"gdn_bytes_per_layer_per_sequence_arithmetic", gdn_arith},
                      {"sequence_bytes_plan", seq_bytes},
                      {"largest_batch_estimate", largest_b},
                      {"gpus_for_1024_rollouts", gpus_1024}});
          // Norms this configuration left to a GEMV's prologue (host calls: captures and eager steps, not replays).
          static int64_t deferred_before = 0;
          const int64_t deferred_norms = cuda_linear_prologue_norms() - deferred_before;
          deferred_before = cuda_linear_prologue_norms();
          row["deferred_norm_launches"] = deferred_norms;
          results.push_back(row);
          const auto mib_pair = [](double measured, double arith) {
            if (measured < 0) return std::string("-");
            char b[64];
            std::snprintf(b, sizeof b, "%.3f (%.3f)", measured / 1048576.0, arith / 1048576.0);
            return std::string(b);
          };
          char line[1024];
          std::snprintf(line, sizeof line,
                        "| %s | %s | %lld | %lld | %lld | %.3f | %.0f | %.2f | %.1f | %.2f | %.2f | %s | %s | %lld | "
                        "%lld |\n",
                        name.c_str(),
                        (o.precision + (graphs ? "" : ", no graphs") +
                         (run.variant == "default" ? "" : ", " + run.variant)).c_str(),
                        static_cast<long long>(config.num_hidden_layers),
                        static_cast<long long>(L), static_cast<long long>(B), prefill_s, double(B * L) / prefill_s,
                        1e3 * median_step, o.decode_steps > 0 ? double(B * o.decode_steps) / decode_s : 0.0,
                        gib(double(st.peak_bytes_in_use)), gib(double(used)), mib_pair(kv_layer, kv_arith).c_str(),
                        mib_pair(gdn_layer, gdn_arith).c_str(), static_cast<long long>(largest_b),
                        static_cast<long long>(gpus_1024));
          md << line;
          std::printf("   %s", line);
          if (B == 1)
            std::printf("   (fused decode: %s, %lld fused steps; %lld norms issued in GEMV prologues, graph captures "
                        "and eager steps)\n",
                        gstats.fused_decode_refusal.empty() ? "on" : gstats.fused_decode_refusal.c_str(),
                        static_cast<long long>(gstats.fused_decode_steps), static_cast<long long>(deferred_norms));
          std::fflush(stdout);
          engine.reset();
          ctx.allocator().release_cached();
          write_outputs();
        } catch (const std::exception& e) {
          row["error"] = e.what();
          results.push_back(row);
          std::printf("   L=%lld B=%lld: error: %s\n", static_cast<long long>(L), static_cast<long long>(B), e.what());
          ctx.allocator().release_cached();
          write_outputs();
        }
      }
    }
  }
  write_outputs();
  std::printf("\n%s", md.str().c_str());
  return 0;
}
