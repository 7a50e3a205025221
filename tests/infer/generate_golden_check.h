// The check of one generate golden (tools/goldens/make_generate_goldens.py): load the case's model, decode all its
// prompts together greedily (EOS disabled, as in the golden) and require every new id to equal the golden's. The
// pieces serve other engines (tests/cuda_models: the CUDA engine on the same goldens).
#pragma once
#include <gtest/gtest.h>

#include "infer/cpu_engine.h"
#include "infer/generate.h"
#include "models/model.h"
#include "support/golden.h"

namespace hlm::test {

// One generate golden read back: its model folder, the prompts as requests (max_new_tokens = the golden's count) and
// the golden's new ids per prompt.
struct GenerateGolden {
  std::filesystem::path model_dir;
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<int32_t>> expect;
};

inline GenerateGolden read_generate_golden(const std::filesystem::path& case_dir) {
  const SafetensorsFile golden = SafetensorsFile::open(case_dir / "golden.safetensors");
  const auto& meta = golden.metadata();
  GenerateGolden g;
  g.model_dir = case_dir / meta.at("model_dir");
  const int prompts = std::stoi(meta.at("prompts"));
  for (int p = 0; p < prompts; ++p) {
    const auto ids = [&](const std::string& key) {
      const Tensor t = golden.tensor(key + "." + std::to_string(p));
      std::vector<int32_t> out;
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int32_t>(t.data<int64_t>()[i]));
      return out;
    };
    GenerateRequest r;
    r.prompt = ids("prompt");
    g.expect.push_back(ids("generated"));
    r.max_new_tokens = static_cast<int64_t>(g.expect.back().size());
    g.requests.push_back(r);
  }
  return g;
}

// The engine's memory request for a golden: every prompt at once.
inline MemoryRequest generate_golden_memory(const GenerateGolden& g) {
  MemoryRequest mr;
  mr.max_sequences = static_cast<int64_t>(g.requests.size());
  mr.kv_blocks = 64;
  return mr;
}

// All prompts decoded together (batched decode over different lengths), EOS disabled as in the golden; every new id
// must equal the golden's.
inline void expect_generate_golden_ids(InferenceEngine& engine, const GenerateGolden& g, const std::string& name) {
  const std::vector<GenerateResult> got = generate(engine, g.requests, {});
  for (size_t p = 0; p < g.expect.size(); ++p) {
    ASSERT_EQ(got[p].ids.size(), g.expect[p].size()) << name << " prompt " << p;
    for (size_t i = 0; i < g.expect[p].size(); ++i)
      ASSERT_EQ(got[p].ids[i], g.expect[p][i]) << name << " prompt " << p << ": first difference at new token " << i;
  }
}

inline void check_generate_golden(const std::string& name) {
  const GenerateGolden g = read_generate_golden(golden_dir(name));
  Model model = Model::load(g.model_dir);
  auto engine = make_cpu_engine(model, memory_plan_build(model.config(), generate_golden_memory(g)));
  expect_generate_golden_ids(*engine, g, name);
}

}  // namespace hlm::test
