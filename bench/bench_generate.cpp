// Serving benchmark of the CUDA inference engine (infer/cuda/cuda_engine.h) on GPU 0 with random weights: for each
// model shape, context length L and batch B, B sequences of L random prompt tokens are prefilled together (chunks of
// --prefill-chunk tokens of every sequence per step), then decoded together for --decode-steps steps (one token each,
// greedy feeding of fixed random ids; the figures do not depend on the values). Reported per (model, L, B):
//   prefill seconds and tokens/s; decode seconds per step and tokens/s (B tokens per step);
//   device memory: the caching allocator's peak bytes in use so far for this model (it cannot be reset: configs run
//     in increasing L, then B, and the allocator's cache is emptied between them) and cudaMemGetInfo's used bytes;
//   state bytes per layer measured from the engine's buffers (StateUsage after the last decode step, per sequence:
//     KV blocks held by one attention layer, conv + recurrent state of one GDN layer) beside models/state_size.h's
//     arithmetic at fp32 (4 bytes per element; the KV figure has no block rounding);
//   the largest B that fits at L: (free device memory after the weights − the activation peak of the smallest-B run
//     at this L, i.e. the allocator's peak after its prefill − weights − its state) / the plan's bytes per sequence
//     (an estimate from measured figures, not a run; the running peak can only overstate the activations, so the
//     estimate errs low).
// Configurations that do not fit in free memory are recorded as skipped, not run.
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
// Output: --out DIR/bench_generate.json and .md (the Markdown table is printed too).
// Usage: bench_generate [--models LIST] [--contexts 1024,4096,...] [--batches 1,4,...] [--decode-steps N]
//                       [--prefill-chunk N] [--layers N] [--max-prefill-tokens N] [--out DIR] [--configs-only]
// --max-prefill-tokens N skips (and records as skipped) the configurations whose B·L exceeds N. The JSON and
// Markdown files are rewritten after every configuration, so a run cut short keeps what it measured.
// --configs-only prints each shape's parsed config, parameter count and the plan's state bytes per sequence at each
// context, without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_context.h"
#include "infer/cuda/cuda_engine.h"
#include "infer/memory_plan.h"
#include "models/cuda/cuda_model.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/state_size.h"
#include "models/tensor_table.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

struct Options {
  std::vector<std::string> models{"olmo3_7b", "olmo_hybrid_7b", "qwen3_4b", "qwen3_4b_hybrid"};
  std::vector<int64_t> contexts{1024, 4096, 16384, 32768};
  std::vector<int64_t> batches{1, 4};
  int64_t decode_steps = 16, prefill_chunk = 4096, layers = 0;
  int64_t max_prefill_tokens = 0;  // > 0: skip configurations with B·L above it (GPU time)
  std::string out = "bench_generate_out";
  bool configs_only = false;  // print the parsed shapes and the plan's bytes, no GPU
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');)
    if (!p.empty()) parts.push_back(p);
  return parts;
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
      for (const std::string& p : split(v)) r.push_back(std::atoll(p.c_str()));
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
    else {
      std::fprintf(stderr, "unknown option %s (see the header of bench/bench_generate.cpp)\n", a.c_str());
      std::exit(2);
    }
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

json model_json(const std::string& name, int64_t layers_override) {
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
  j["max_position_embeddings"] = 65536;
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

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::filesystem::create_directories(o.out);
  json results = json::array();
  std::ostringstream md;
  const auto write_outputs = [&] {
    const json doc = {{"bench", "bench_generate"},
                      {"options",
                       {{"models", o.models},
                        {"contexts", o.contexts},
                        {"batches", o.batches},
                        {"decode_steps", o.decode_steps},
                        {"prefill_chunk", o.prefill_chunk},
                        {"max_prefill_tokens", o.max_prefill_tokens},
                        {"layers_override", o.layers}}},
                      {"results", results}};
    std::ofstream(std::filesystem::path(o.out) / "bench_generate.json") << doc.dump(2) << "\n";
    std::ofstream(std::filesystem::path(o.out) / "bench_generate.md") << md.str();
  };
  md << "| model | layers | L | B | prefill s | prefill tok/s | decode ms/step | decode tok/s | peak alloc GiB | "
        "device used GiB | KV/attn layer/seq MiB (plan arith.) | GDN/layer/seq MiB (arith.) | largest B (est.) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& name : o.models) {
    const json cj = model_json(name, o.layers);
    const ModelConfig config = parse_model_config(cj, name);
    if (o.configs_only) {
      int64_t params = 0;
      for (const TensorSpec& spec : expected_tensors(config)) params += spec.shape.numel();
      const MemoryPlan shape = memory_plan_shape(config);
      std::printf("%s: %s, %lld layers (%lld attention, %lld GDN), %.3f B parameters (untied head counted)\n",
                  name.c_str(), config.model_type.c_str(), static_cast<long long>(config.num_hidden_layers),
                  static_cast<long long>(shape.attention_layers), static_cast<long long>(shape.gdn_layers),
                  double(params) / 1e9);
      for (const int64_t L : o.contexts)
        std::printf("  L=%lld: state per sequence %.3f GiB (KV %.3f MiB/token/all layers, GDN %.3f MiB)\n",
                    static_cast<long long>(L), gib(double(shape.sequence_bytes(L))),
                    double(shape.kv_bytes_per_block) / double(shape.block_size) / 1048576.0,
                    double(shape.gdn_bytes_per_sequence) / 1048576.0);
      continue;
    }
    std::printf("== %s (%lld layers): building random weights\n", name.c_str(),
                static_cast<long long>(config.num_hidden_layers));
    std::fflush(stdout);
    CudaContext ctx;
    std::unique_ptr<CudaModel> gpu;
    {
      const auto t0 = std::chrono::steady_clock::now();
      const Model host = random_model(config);
      const double fill_s = seconds_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      gpu = std::make_unique<CudaModel>(CudaModel::upload(host, ctx));
      ctx.synchronize();
      std::printf("   weights: %.2f GiB fp32, host fill %.1f s, upload %.1f s\n", gib(double(gpu->weight_bytes())),
                  fill_s, seconds_since(t1));
    }
    const size_t weights_used = device_used_bytes();
    size_t free_after_weights = 0, total = 0;
    cudaMemGetInfo(&free_after_weights, &total);
    const MemoryPlan shape = memory_plan_shape(config);
    for (const int64_t L : o.contexts) {
      double activation_peak_b1 = -1;
      for (const int64_t B : o.batches) {
        const int64_t tokens_each = L + o.decode_steps;
        MemoryRequest req;
        req.max_sequences = B;
        req.kv_blocks = B * shape.blocks_for(tokens_each);
        const MemoryPlan plan = memory_plan_build(config, req);
        json row = {{"model", name},        {"layers", config.num_hidden_layers},
                    {"context", L},         {"batch", B},
                    {"decode_steps", o.decode_steps}, {"prefill_chunk", o.prefill_chunk},
                    {"plan_state_bytes", plan.total_bytes()}};
        if (o.max_prefill_tokens > 0 && B * L > o.max_prefill_tokens) {
          row["skipped"] = "B·L over --max-prefill-tokens " + std::to_string(o.max_prefill_tokens);
          results.push_back(row);
          continue;
        }
        size_t free_now = 0;
        cudaMemGetInfo(&free_now, &total);
        // Room for the state plus the prefill activations (~24 floats per token of hidden and MLP width, a
        // generous guess); otherwise skipped, not run.
        const double act_guess = 24.0 * 4.0 * double(B * std::min(L, o.prefill_chunk)) *
                                 double(std::max(config.hidden_size, config.intermediate_size));
        if (double(plan.total_bytes()) + act_guess > double(free_now)) {
          row["skipped"] = "does not fit: state " + std::to_string(plan.total_bytes()) + " B + activations ~" +
                           std::to_string(static_cast<int64_t>(act_guess)) + " B > free " + std::to_string(free_now);
          std::printf("   L=%lld B=%lld: skipped (%s)\n", static_cast<long long>(L), static_cast<long long>(B),
                      row["skipped"].get<std::string>().c_str());
          results.push_back(row);
          continue;
        }
        try {  // an out-of-memory (or any) failure is recorded and the next configuration runs
          auto engine = make_cuda_engine(*gpu, plan);
          std::vector<int> slots;
          std::vector<std::vector<int32_t>> prompts;
          for (int64_t b = 0; b < B; ++b) {
            slots.push_back(engine->open_sequence(tokens_each));
            prompts.push_back(random_ids(L + o.decode_steps, config.vocab_size, static_cast<uint64_t>(b + 1)));
          }
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t begin = 0; begin < L; begin += o.prefill_chunk) {
            const int64_t end = std::min(L, begin + o.prefill_chunk);
            TokenBatch batch;
            for (int64_t b = 0; b < B; ++b)
              batch.add_sequence(std::vector<int32_t>(prompts[b].begin() + begin, prompts[b].begin() + end));
            engine->step(slots, batch);  // returns after the logits download: the step is done
          }
          const double prefill_s = seconds_since(t0);
          const size_t peak_after_prefill = ctx.allocator().stats().peak_bytes_in_use;
          std::vector<double> step_s;
          for (int64_t s = 0; s < o.decode_steps; ++s) {
            TokenBatch batch;
            for (int64_t b = 0; b < B; ++b) batch.add_sequence({prompts[b][static_cast<size_t>(L + s)]});
            const auto ts = std::chrono::steady_clock::now();
            engine->step(slots, batch);
            step_s.push_back(seconds_since(ts));
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
          const StateSizes arith = state_sizes(config, tokens_each, 4);
          const double kv_arith = double(arith.kv_elements_at_context) * 4.0;
          const double gdn_arith = double(arith.recurrent_state_elements + arith.conv_state_elements) * 4.0;
          if (B == o.batches.front())
            activation_peak_b1 = double(peak_after_prefill) - double(gpu->weight_bytes()) - double(plan.total_bytes());
          const double seq_bytes = double(plan.sequence_bytes(tokens_each));
          const int64_t largest_b =
              activation_peak_b1 >= 0
                  ? static_cast<int64_t>(std::floor((double(free_after_weights) - activation_peak_b1) / seq_bytes))
                  : -1;
          row.update({{"prefill_seconds", prefill_s},
                      {"prefill_tokens_per_second", double(B * L) / prefill_s},
                      {"decode_seconds", decode_s},
                      {"decode_median_step_seconds", median_step},
                      {"decode_tokens_per_second", double(B * o.decode_steps) / decode_s},
                      {"allocator_peak_bytes_in_use_so_far", st.peak_bytes_in_use},
                      {"allocator_peak_after_prefill", peak_after_prefill},
                      {"device_used_bytes", used},
                      {"weights_device_used_bytes", weights_used},
                      {"weight_bytes", gpu->weight_bytes()},
                      {"state_bytes_in_use", u.bytes_in_use()},
                      {"state_bytes_reserved", u.bytes_reserved()},
                      {"kv_bytes_per_attention_layer_per_sequence_measured", kv_layer},
                      {"kv_bytes_per_attention_layer_per_sequence_arithmetic", kv_arith},
                      {"gdn_bytes_per_layer_per_sequence_measured", gdn_layer},
                      {"gdn_bytes_per_layer_per_sequence_arithmetic", gdn_arith},
                      {"sequence_bytes_plan", seq_bytes},
                      {"largest_batch_estimate", largest_b}});
          results.push_back(row);
          char line[1024];
          std::snprintf(line, sizeof line,
                        "| %s | %lld | %lld | %lld | %.3f | %.0f | %.2f | %.1f | %.2f | %.2f | %s | %s | %lld |\n",
                        name.c_str(), static_cast<long long>(config.num_hidden_layers), static_cast<long long>(L),
                        static_cast<long long>(B), prefill_s, double(B * L) / prefill_s, 1e3 * median_step,
                        double(B * o.decode_steps) / decode_s, gib(double(st.peak_bytes_in_use)), gib(double(used)),
                        kv_layer < 0 ? "-"
                                     : (std::to_string(kv_layer / 1048576.0).substr(0, 7) + " (" +
                                        std::to_string(kv_arith / 1048576.0).substr(0, 7) + ")")
                                           .c_str(),
                        gdn_layer < 0 ? "-"
                                      : (std::to_string(gdn_layer / 1048576.0).substr(0, 7) + " (" +
                                         std::to_string(gdn_arith / 1048576.0).substr(0, 7) + ")")
                                            .c_str(),
                        static_cast<long long>(largest_b));
          md << line;
          std::printf("   %s", line);
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
