// SoftCKA CPU timing at the scale of the seed's study: a 36-layer model with hidden size 1024, English against 13
// languages, 1000 parallel pairs each, sentences of ~30 tokens (24..36), one capture point. Activations are random
// (the cost does not depend on the values). Per layer the work is what `hybridlm align` does: the English h11 once
// per pair, then h22 and h12 per language, pairs in parallel (OpenMP), sums in pair order.
// To bound memory, the sentences are drawn from a pool of random token-state matrices (same shapes and cost).
// Usage: bench_softcka [--layers 36] [--hidden 1024] [--langs 13] [--pairs 1000] [--kernel rbf|linear]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "analysis/softcka.h"
#include "core/rng.h"

namespace {

struct BenchShape {
  int64_t layers = 36, hidden = 1024, langs = 13, pairs = 1000, min_tokens = 24, max_tokens = 36, pool = 512;
  hlm::CkaKernel kernel = hlm::CkaKernel::Rbf;
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
    else {
      std::fprintf(stderr, "bench_softcka: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
