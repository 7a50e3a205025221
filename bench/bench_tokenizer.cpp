// Tokenizer encode throughput on ONE thread, per tokenizer.json file: MB/s of UTF-8 input and tokens/s.
// Input: the multilingual text set tests/golden/tokenizer/texts.jsonl (35 languages + edge cases) repeated to at
// least --mb megabytes, or the lines of --file. Each text (or line) is one encode call, as a corpus document is.
// Two figures per file:
//   warm: the whole stream on one thread; the per-thread word cache fills during the first pass over the set
//         (the set repeats, so later passes mostly hit the cache: an upper bound for real corpora);
//   cold: each pass over the distinct texts on a fresh thread, so every word goes through the BPE merge loop.
// Usage: bench_tokenizer [--tokenizers data/tokenizers] [--names qwen3,llama3,gemma3,deepseek_v3] [--mb 20]
//                        [--file TEXT_FILE] [--cold-passes 5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"

namespace {

struct BenchOptions {
  std::string tokenizers = "data/tokenizers";
  std::string names = "qwen3,llama3,gemma3,deepseek_v3";
  std::string texts = std::string(HLM_SOURCE_DIR) + "/tests/golden/tokenizer/texts.jsonl";
  std::string file;
  double mb = 20;
  int cold_passes = 5;
};

BenchOptions parse_args(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tokenizers") o.tokenizers = value;
    else if (flag == "--names") o.names = value;
    else if (flag == "--file") o.file = value;
    else if (flag == "--mb") o.mb = std::atof(value.c_str());
    else if (flag == "--cold-passes") o.cold_passes = std::atoi(value.c_str());
    else hlm::throw_input_error("bench_tokenizer: unknown flag ", flag);
  }
  return o;
}

std::vector<std::string> read_documents(const BenchOptions& o) {
  std::vector<std::string> docs;
  std::ifstream in(o.file.empty() ? o.texts : o.file, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), "bench_tokenizer: cannot open ", o.file.empty() ? o.texts : o.file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    docs.push_back(o.file.empty() ? nlohmann::json::parse(line).at("text").get<std::string>() : line);
  }
  return docs;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct PassResult {
  size_t bytes = 0, tokens = 0;
};

PassResult encode_all(const hlm::Tokenizer& tok, const std::vector<std::string>& docs) {
  PassResult r;
  for (const std::string& d : docs) {
    r.bytes += d.size();
    r.tokens += tok.encode(d).size();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const BenchOptions o = parse_args(argc, argv);
  const std::vector<std::string> docs = read_documents(o);
  size_t set_bytes = 0;
  for (const auto& d : docs) set_bytes += d.size();
  const auto repeats = static_cast<size_t>(std::max(1.0, o.mb * 1e6 / static_cast<double>(set_bytes) + 0.999));
  std::printf("input: %zu documents, %.3f MB per pass; warm: %zu passes (%.1f MB) on one thread; cold: %d passes\n",
              docs.size(), set_bytes / 1e6, repeats, repeats * set_bytes / 1e6, o.cold_passes);
  std::printf("%-12s %8s %10s %12s %10s %12s %10s\n", "tokenizer", "load s", "warm MB/s", "warm tok/s", "cold MB/s",
              "cold tok/s", "bytes/tok");
  std::stringstream names(o.names);
  for (std::string name; std::getline(names, name, ',');) {
    const std::string path = o.tokenizers + "/" + name + "/tokenizer.json";
    auto t0 = std::chrono::steady_clock::now();
    const std::unique_ptr<hlm::Tokenizer> tok = hlm::tokenizer_load(path);
    const double load_s = seconds_since(t0);

    PassResult cold;
    double cold_s = 0;
    for (int p = 0; p < o.cold_passes; ++p) {
      std::thread fresh([&] {  // a new thread starts with an empty word cache
        const auto t = std::chrono::steady_clock::now();
        const PassResult r = encode_all(*tok, docs);
        cold_s += seconds_since(t);
        cold.bytes += r.bytes;
        cold.tokens += r.tokens;
      });
      fresh.join();
    }

    PassResult warm;
    double warm_s = 0;
    std::thread one([&] {
      const auto t = std::chrono::steady_clock::now();
      for (size_t rep = 0; rep < repeats; ++rep) {
        const PassResult r = encode_all(*tok, docs);
        warm.bytes += r.bytes;
        warm.tokens += r.tokens;
      }
      warm_s = seconds_since(t);
    });
    one.join();
    std::printf("%-12s %8.2f %10.2f %12.0f %10.2f %12.0f %10.2f\n", name.c_str(), load_s, warm.bytes / 1e6 / warm_s,
                warm.tokens / warm_s, cold.bytes / 1e6 / cold_s, cold.tokens / cold_s,
                static_cast<double>(warm.bytes) / static_cast<double>(warm.tokens));
    std::fflush(stdout);
  }
  return 0;
} catch (const hlm::Error& e) {
  std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
  return e.exit_code();
}
