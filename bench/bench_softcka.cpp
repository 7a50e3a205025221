// SoftCKA CPU timing at the scale of the seed's study: a 36-layer model with hidden size 1024, English against 13
// languages, 1000 parallel pairs each, sentences of ~30 tokens (24..36), one capture point. Activations are random
// (the cost does not depend on the values). Per layer the work is what `hybridlm align` does: the English h11 once
// per pair, then h22 and h12 per language, pairs in parallel (OpenMP), sums in pair order.
// To bound memory, the sentences are drawn from a pool of random token-state matrices (same shapes and cost).
//
// --device cuda (CUDA builds): the same workload through the kernel-norm engines of `hybridlm align`
// (analysis/softcka_batch.h): per layer, one batch of every pair's rows (English once per pair, then the 13 other
// sentences; 14,000 sentences, ~1.7 GB of f32 states at hidden 1024) and its 27,000 jobs (h11 per pair, h22 and h12
// per language). The GPU time of each layer is measured with CUDA events (upload of the batch, kernels, download)
// plus wall time; the CPU engine runs the same batch on the first --cpu-layers layers, for the speed ratio and a
// check that both give the same SoftCKA values.
// Usage: bench_softcka [--layers 36] [--hidden 1024] [--langs 13] [--pairs 1000] [--kernel rbf|linear]
//                      [--device cpu|cuda] [--cpu-layers 1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "analysis/softcka.h"
#include "analysis/softcka_batch.h"
#include "core/rng.h"
#if HLM_WITH_CUDA
#include "analysis/cuda/softcka_cuda_engine.h"
#endif

namespace {

struct BenchShape {
  int64_t layers = 36, hidden = 1024, langs = 13, pairs = 1000, min_tokens = 24, max_tokens = 36, pool = 512;
  hlm::CkaKernel kernel = hlm::CkaKernel::Rbf;
  std::string device = "cpu";
  int64_t cpu_layers = 1;  // --device cuda: layers also run on the CPU engine (ratio and agreement)
};

BenchShape parse_args(int argc, char** argv) {
  BenchShape s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--layers") s.layers = std::atoll(value.c_str());
    else if (flag == "--hidden") s.hidden = std::atoll(value.c_str());
    else if (flag == "--langs") s.langs = std::atoll(value.c_str());
    else if (flag == "--pairs") s.pairs = std::atoll(value.c_str());
    else if (flag == "--kernel") s.kernel = value == "linear" ? hlm::CkaKernel::Linear : hlm::CkaKernel::Rbf;
    else if (flag == "--device") s.device = value;
    else if (flag == "--cpu-layers") s.cpu_layers = std::atoll(value.c_str());
    else {
      std::fprintf(stderr, "bench_softcka: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  if (s.device != "cpu" && s.device != "cuda") {
    std::fprintf(stderr, "bench_softcka: --device must be cpu or cuda, got %s\n", s.device.c_str());
    std::exit(2);
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if HLM_WITH_CUDA
// --device cuda: one layer's batch as `hybridlm align` builds it (English rows once per pair, then each language's).
struct EngineBatch {
  std::vector<float> rows;  // [n_rows, hidden]
  int64_t n_rows = 0;
  std::vector<hlm::KernelNormJob> jobs;  // per pair: h11, then h22 and h12 per language
};

EngineBatch pack_batch(const BenchShape& s, const std::vector<std::vector<float>>& pool,
                       const std::vector<int64_t>& lengths, double sigma) {
  const auto sentence = [&](int64_t pair, int64_t lang) { return size_t((pair * (s.langs + 1) + lang) % s.pool); };
  EngineBatch b;
  for (int64_t p = 0; p < s.pairs; ++p)
    for (int64_t l = 0; l <= s.langs; ++l) b.n_rows += lengths[sentence(p, l)];
  b.rows.resize(size_t(b.n_rows * s.hidden));
  int64_t row = 0;
  const auto put = [&](size_t i) {
    std::copy(pool[i].begin(), pool[i].end(), b.rows.begin() + row * s.hidden);
    row += lengths[i];
    return row - lengths[i];
  };
  for (int64_t p = 0; p < s.pairs; ++p) {
    const int64_t n1 = lengths[sentence(p, 0)], eng = put(sentence(p, 0));
    b.jobs.push_back({eng, n1, eng, n1, sigma});
    for (int64_t l = 1; l <= s.langs; ++l) {
      const int64_t n2 = lengths[sentence(p, l)], x = put(sentence(p, l));
      b.jobs.push_back({x, n2, x, n2, sigma});
      b.jobs.push_back({eng, n1, x, n2, sigma});
    }
  }
  return b;
}

// SoftCKA per language from one layer's job results (pack_batch's order; sums in pair order).
std::vector<double> softcka_per_lang(const BenchShape& s, const std::vector<double>& out) {
  std::vector<hlm::SoftCkaTerms> sums(size_t(s.langs));
  size_t k = 0;
  for (int64_t p = 0; p < s.pairs; ++p) {
    const double h11 = out[k++];
    for (int64_t l = 0; l < s.langs; ++l) {
      hlm::SoftCkaTerms t;
      t.h11 = h11;
      t.h22 = out[k++];
      t.h12 = out[k++];
      sums[size_t(l)] += t;
    }
  }
  std::vector<double> values;
  for (const hlm::SoftCkaTerms& t : sums) values.push_back(t.value());
  return values;
}
#endif

int bench_cuda(const BenchShape& s, const std::vector<std::vector<float>>& pool, const std::vector<int64_t>& lengths,
               const hlm::KernelSpec& kernel) {
#if !HLM_WITH_CUDA
  (void)pool, (void)lengths, (void)kernel;
  std::fprintf(stderr, "bench_softcka: --device %s needs a build with the CUDA backend\n", s.device.c_str());
  return 2;
#else
  const EngineBatch b = pack_batch(s, pool, lengths, kernel.sigma);
  std::printf("per layer: one batch of %lld rows (%.2f GB f32), %zu jobs\n", (long long)b.n_rows,
              double(b.rows.size()) * 4e-9, b.jobs.size());
  std::unique_ptr<hlm::CudaKernelNormEngine> gpu;
  try {
    gpu = hlm::make_cuda_kernel_norm_engine();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_softcka: %s\n", e.what());
    return 2;
  }
  const std::unique_ptr<hlm::KernelNormEngine> cpu = hlm::make_cpu_kernel_norm_engine();
  std::vector<double> out(b.jobs.size()), out_cpu(b.jobs.size());
  gpu->run(b.rows.data(), b.n_rows, s.hidden, kernel.kind, b.jobs, out);  // warm-up: context, allocator, first launch

  hlm::CudaKernelNormTiming total;
  double gpu_wall = 0, cpu_wall = 0, max_diff = 0, checksum = 0;
  int64_t cpu_layers = 0;
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    const auto t_gpu = std::chrono::steady_clock::now();
    gpu->run(b.rows.data(), b.n_rows, s.hidden, kernel.kind, b.jobs, out);
    const double wall = seconds_since(t_gpu);
    const hlm::CudaKernelNormTiming t = gpu->last_timing();
    gpu_wall += wall, total.upload_ms += t.upload_ms, total.kernel_ms += t.kernel_ms, total.download_ms += t.download_ms;
    const std::vector<double> values = softcka_per_lang(s, out);
    for (double v : values) checksum += v;
    if (layer < s.cpu_layers) {
      const auto t_cpu = std::chrono::steady_clock::now();
      cpu->run(b.rows.data(), b.n_rows, s.hidden, kernel.kind, b.jobs, out_cpu);
      cpu_wall += seconds_since(t_cpu), ++cpu_layers;
      const std::vector<double> cpu_values = softcka_per_lang(s, out_cpu);
      for (size_t l = 0; l < values.size(); ++l) max_diff = std::max(max_diff, std::abs(values[l] - cpu_values[l]));
    }
    if (layer == 0 || layer + 1 == s.layers)
      std::printf("  layer %lld: GPU %.3f s wall (upload %.1f ms, kernels %.1f ms, download %.2f ms)\n",
                  (long long)layer, wall, t.upload_ms, t.kernel_ms, t.download_ms);
  }
  const double layers = double(s.layers), pair_layers = layers * double(s.langs * s.pairs);
  std::printf("GPU total %.2f s wall for %lld layers (%.3f s per layer, %.2f us per pair-layer); kernels %.2f s, "
              "uploads %.2f s, downloads %.3f s; checksum %.6f\n",
              gpu_wall, (long long)s.layers, gpu_wall / layers, 1e6 * gpu_wall / pair_layers, total.kernel_ms / 1e3,
              total.upload_ms / 1e3, total.download_ms / 1e3, checksum / (layers * double(s.langs)));
  if (cpu_layers > 0) {
    const double cpu_total = cpu_wall / double(cpu_layers) * layers;
    std::printf("CPU engine %.2f s wall for %lld layer(s) -> %.1f s for %lld layers (extrapolated); GPU speed-up "
                "%.1fx wall, %.1fx kernels only; max |SoftCKA gpu - cpu| %.3g\n",
                cpu_wall, (long long)cpu_layers, cpu_total, (long long)s.layers, cpu_total / gpu_wall,
                cpu_total / (total.kernel_ms / 1e3), max_diff);
  }
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const BenchShape s = parse_args(argc, argv);
  // Pool of sentence matrices [n_i, hidden] ~ N(0, 1); sentence lengths cycle through 24..36.
  std::vector<std::vector<float>> pool(static_cast<size_t>(s.pool));
  std::vector<int64_t> lengths(static_cast<size_t>(s.pool));
  for (int64_t i = 0; i < s.pool; ++i) {
    lengths[size_t(i)] = s.min_tokens + (i * 7) % (s.max_tokens - s.min_tokens + 1);
    pool[size_t(i)].resize(size_t(lengths[size_t(i)] * s.hidden));
    hlm::rng_fill_normal(pool[size_t(i)].data(), pool[size_t(i)].size(), 0.0f, 1.0f, 7, uint64_t(i));
  }
  const auto sentence = [&](int64_t pair, int64_t lang) { return size_t((pair * (s.langs + 1) + lang) % s.pool); };
  // The median bandwidth of random N(0,1) rows in d dims is about sqrt(2d); its estimate is not part of the timing.
  const hlm::KernelSpec kernel{s.kernel, std::sqrt(2.0 * double(s.hidden))};

  std::printf("bench_softcka: %lld layers, hidden %lld, %lld languages x %lld pairs, %lld-%lld tokens, kernel %s\n",
              (long long)s.layers, (long long)s.hidden, (long long)s.langs, (long long)s.pairs,
              (long long)s.min_tokens, (long long)s.max_tokens, s.kernel == hlm::CkaKernel::Rbf ? "rbf" : "linear");
  if (s.device == "cuda") return bench_cuda(s, pool, lengths, kernel);
  const auto t_all = std::chrono::steady_clock::now();
  double checksum = 0.0;
  std::vector<hlm::SoftCkaTerms> per_pair(size_t(s.pairs * s.langs));
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    const auto t_layer = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t p = 0; p < s.pairs; ++p) {
      const size_t e = sentence(p, 0);
      const float* eng = pool[e].data();
      const double h11 = hlm::centered_kernel_sq_norm(eng, lengths[e], eng, lengths[e], s.hidden, kernel);
      for (int64_t l = 1; l <= s.langs; ++l) {
        const size_t x = sentence(p, l);
        hlm::SoftCkaTerms& t = per_pair[size_t(p * s.langs + l - 1)];
        t.h11 = h11;
        t.h22 = hlm::centered_kernel_sq_norm(pool[x].data(), lengths[x], pool[x].data(), lengths[x], s.hidden, kernel);
        t.h12 = hlm::centered_kernel_sq_norm(eng, lengths[e], pool[x].data(), lengths[x], s.hidden, kernel);
      }
    }
    for (int64_t l = 0; l < s.langs; ++l) {
      hlm::SoftCkaTerms sum;
      for (int64_t p = 0; p < s.pairs; ++p) sum += per_pair[size_t(p * s.langs + l)];
      checksum += sum.value();
    }
    if (layer == 0 || layer + 1 == s.layers)
      std::printf("  layer %lld: %.3f s\n", (long long)layer, seconds_since(t_layer));
  }
  const double total = seconds_since(t_all);
  std::printf("total %.2f s for %lld layers (%.3f s per layer, %.1f us per pair), checksum %.6f\n", total,
              (long long)s.layers, total / double(s.layers), 1e6 * total / double(s.layers * s.langs * s.pairs),
              checksum / double(s.layers * s.langs));
  return 0;
}
