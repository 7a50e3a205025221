// `hybridlm niah --device cuda` against `--device cpu` (issue #21 item 3): the run mode over the CUDA inference
// engine on one golden (olmo_hybrid_tiny: GDN and attention layers), with the NIAH test corpus (evals/niah_fixture.h).
// Both runs see the same prompts (same seed); greedy decoding of a tiny random model, so the check is that every
// response, verdict and status is the same on both devices (the CUDA engine's greedy ids equal the CPU's on the
// goldens: test_cuda_engine.cpp), not that the model is right.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cuda_models/cuda_model_support.h"
#include "evals/niah_fixture.h"

using namespace hlm;
using namespace hlm::test;

namespace {

std::vector<nlohmann::json> read_items(const std::filesystem::path& file) {
  std::vector<nlohmann::json> items;
  std::istringstream in(read_text(file));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) items.push_back(nlohmann::json::parse(line));
  return items;
}

}  // namespace

TEST(CudaNiahCli, CudaMatchesCpu) {
  HLM_REQUIRE_CUDA_MODEL();
  ScratchDir dir("cuda-niah-cli");
  write_niah_fixture_corpus(dir.path() / "corpus");
  const std::string common = "niah --model '" + cuda_golden_dir("olmo_hybrid_tiny").string() +
                             "' --tokenizer bytes --langs eng_Latn,rus_Cyrl --tasks single,none --lengths 300,600"
                             " --n 3 --held-out-docs 6 --corpus '" + (dir.path() / "corpus").string() + "'";
  const RunResult cpu = run_cli(common + " --device cpu --out '" + (dir.path() / "cpu").string() + "'");
  const RunResult gpu = run_cli(common + " --device cuda --out '" + (dir.path() / "gpu").string() + "'");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const std::vector<nlohmann::json> a = read_items(dir.path() / "cpu" / "niah_items.jsonl");
  const std::vector<nlohmann::json> b = read_items(dir.path() / "gpu" / "niah_items.jsonl");
  ASSERT_EQ(a.size(), 2u * 2u * 2u * 3u);  // languages x tasks x lengths x samples
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].dump());
    EXPECT_EQ(b[i]["response"], a[i]["response"]);
    EXPECT_EQ(b[i]["correct"], a[i]["correct"]);
    EXPECT_EQ(b[i]["prompt_tokens"], a[i]["prompt_tokens"]);
    EXPECT_EQ(b[i]["finish"], a[i]["finish"]);
  }
  const nlohmann::json config = nlohmann::json::parse(read_text(dir.path() / "gpu" / "niah_config.json"));
  EXPECT_EQ(config["device"], "cuda");
}

TEST(CudaNiahCli, TooSmallStateBudgetIsOutOfMemoryNotACrash) {
  HLM_REQUIRE_CUDA_MODEL();
  ScratchDir dir("cuda-niah-oom");
  write_niah_fixture_corpus(dir.path() / "corpus");
  const RunResult r = run_cli("niah --model '" + cuda_golden_dir("olmo_hybrid_tiny").string() +
                              "' --tokenizer bytes --langs eng_Latn --tasks single --lengths 300 --n 2"
                              " --held-out-docs 6 --max-memory 1K --device cuda --corpus '" +
                              (dir.path() / "corpus").string() + "' --out '" + (dir.path() / "out").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = read_text(dir.path() / "out" / "niah.csv");
  EXPECT_NE(csv.find("olmo_hybrid_tiny,eng_Latn,single,300,oom,2,"), std::string::npos) << csv;
}
