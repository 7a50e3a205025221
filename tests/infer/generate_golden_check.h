// The check of one generate golden (tools/goldens/make_generate_goldens.py): load the case's model, decode all its
// prompts together greedily (EOS disabled, as in the golden) and require every new id to equal the golden's.
#pragma once
#include <gtest/gtest.h>

#include "infer/cpu_engine.h"
#include "infer/generate.h"
#include "models/model.h"
#include "support/golden.h"

namespace hlm::test {


inline void check_generate_golden(const std::string& name) {
  const SafetensorsFile golden = open_golden(name);
  const auto& meta = golden.metadata();
  const std::filesystem::path model_dir = golden_dir(name) / meta.at("model_dir");
  Model model = Model::load(model_dir);
  const int prompts = std::stoi(meta.at("prompts"));
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<int32_t>> expect;
  for (int p = 0; p < prompts; ++p) {
    const auto ids = [&](const std::string& key) {
      const Tensor t = golden.tensor(key + "." + std::to_string(p));
      std::vector<int32_t> out;
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int32_t>(t.data<int64_t>()[i]));
      return out;
    };
    GenerateRequest r;
    r.prompt = ids("prompt");
    expect.push_back(ids("generated"));
    r.max_new_tokens = static_cast<int64_t>(expect.back().size());
    requests.push_back(r);
  }
  MemoryRequest mr;
  mr.max_sequences = prompts;
  mr.kv_blocks = 64;
  auto engine = make_cpu_engine(model, memory_plan_build(model.config(), mr));
  // All prompts decoded together (batched decode over different lengths), EOS disabled as in the golden.
  const std::vector<GenerateResult> got = generate(*engine, requests, {});
  for (int p = 0; p < prompts; ++p) {
    ASSERT_EQ(got[p].ids.size(), expect[p].size()) << name << " prompt " << p;
    for (size_t i = 0; i < expect[p].size(); ++i)
      ASSERT_EQ(got[p].ids[i], expect[p][i]) << name << " prompt " << p << ": first difference at new token " << i;
  }
}

}  // namespace hlm::test
