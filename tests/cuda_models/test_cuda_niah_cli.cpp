// `hybridlm niah --device cuda` against `--device cpu` (issue #21 item 3): the run mode over the CUDA inference
// engine on one golden (olmo_hybrid_tiny: GDN and attention layers), with the NIAH test corpus (evals/niah_fixture.h).
// Both runs see the same prompts (same seed); greedy decoding of a tiny random model, so the check is that every
// response, verdict and status is the same on both devices in fp32 (the CUDA engine's greedy ids equal the CPU's on
// the goldens: test_cuda_engine.cpp), not that the model is right.
// bf16 (the CUDA default, evals/niah/cuda/niah_cuda_backend.h): the same cells run, with every plan's KV pool at 2
// bytes per element (exactly half the fp32 plan's KV bytes, GDN state bytes unchanged); its greedy ids may differ from
// fp32 at near-ties (test_cuda_engine_bf16.cpp), so responses are not compared.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "cuda_models/cuda_model_support.h"
#include "evals/niah/cuda/niah_cuda_backend.h"
#include "evals/niah/niah_generate.h"
#include "evals/niah_fixture.h"
#include "infer/memory_plan.h"
#include "models/model.h"

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
  const RunResult gpu = run_cli(common + " --device cuda --precision fp32 --out '" + (dir.path() / "gpu").string() + "'");
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
  EXPECT_EQ(config["precision"], "fp32");
}

// Rows of niah.csv as (key "lang,task,length", plan_bytes, status).
static std::vector<std::tuple<std::string, int64_t, std::string>> plan_rows(const std::filesystem::path& csv) {
  std::vector<std::tuple<std::string, int64_t, std::string>> rows;
  std::istringstream in(read_text(csv));
  std::string line;
  std::getline(in, line);  // header: model,lang,task,length,status,n,correct,accuracy,seconds,prefill_seconds,
                           // decode_seconds,mean_prompt_tokens,max_prompt_tokens,peak_state_bytes,plan_bytes,note
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    if (f.size() < 15) continue;
    rows.emplace_back(f[1] + "," + f[2] + "," + f[3], std::stoll(f[14]), f[4]);
  }
  return rows;
}

TEST(CudaNiahCli, Bf16IsTheDefaultAndHalvesTheKvPlan) {
  HLM_REQUIRE_CUDA_MODEL();
  ScratchDir dir("cuda-niah-bf16");
  write_niah_fixture_corpus(dir.path() / "corpus");
  const std::filesystem::path model_dir = cuda_golden_dir("olmo_hybrid_tiny");
  const std::string common = "niah --model '" + model_dir.string() +
                             "' --tokenizer bytes --langs eng_Latn,rus_Cyrl --tasks single,none --lengths 300,600"
                             " --n 3 --held-out-docs 6 --device cuda --corpus '" + (dir.path() / "corpus").string() + "'";
  const RunResult f32 = run_cli(common + " --precision fp32 --out '" + (dir.path() / "fp32").string() + "'");
  const RunResult b16 = run_cli(common + " --out '" + (dir.path() / "bf16").string() + "'");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  ASSERT_EQ(b16.exit_code, 0) << b16.err;
  EXPECT_EQ(nlohmann::json::parse(read_text(dir.path() / "bf16" / "niah_config.json"))["precision"], "bf16");
  EXPECT_EQ(read_items(dir.path() / "bf16" / "niah_items.jsonl").size(), 2u * 2u * 2u * 3u);
  const auto a = plan_rows(dir.path() / "fp32" / "niah.csv");
  const auto b = plan_rows(dir.path() / "bf16" / "niah.csv");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), a.size());
  // plan = blocks × kv_bytes_per_block + sequences × gdn_bytes_per_sequence; 3 sequences at once (--n 3).
  const Model model = Model::load(model_dir);
  const MemoryPlan s32 = memory_plan_shape(model.config(), kDefaultKvBlockSize, 4);
  const MemoryPlan s16 = memory_plan_shape(model.config(), kDefaultKvBlockSize, 2);
  ASSERT_EQ(2 * s16.kv_bytes_per_block, s32.kv_bytes_per_block);
  ASSERT_EQ(s16.gdn_bytes_per_sequence, s32.gdn_bytes_per_sequence);
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(std::get<0>(a[i]));
    EXPECT_EQ(std::get<0>(b[i]), std::get<0>(a[i]));
    EXPECT_EQ(std::get<2>(a[i]), "ok");
    EXPECT_EQ(std::get<2>(b[i]), "ok");
    const int64_t kv32 = std::get<1>(a[i]) - 3 * s32.gdn_bytes_per_sequence;
    const int64_t kv16 = std::get<1>(b[i]) - 3 * s16.gdn_bytes_per_sequence;
    ASSERT_GT(kv32, 0);
    EXPECT_EQ(kv32 % s32.kv_bytes_per_block, 0);
    EXPECT_EQ(kv32, 2 * kv16) << "the same blocks at half the bytes";
  }
}

TEST(CudaNiahBackend, PrecisionOfTheEvaluationBackend) {
  HLM_REQUIRE_CUDA_MODEL();
  const Model model = Model::load(cuda_golden_dir("olmo_hybrid_tiny"));
  EXPECT_EQ(niah_cuda_eval_backend(model, "fp32").kv_element_bytes, 4);
  const NiahEvalBackend b = niah_cuda_eval_backend(model, "bf16");
  EXPECT_EQ(b.kv_element_bytes, 2);
  ASSERT_TRUE(b.default_budget_bytes.has_value());
  EXPECT_GT(*b.default_budget_bytes, 0);
  // The engine takes the bf16 plan the run settings make with the backend's element size.
  MemoryRequest mr;
  mr.kv_blocks = 4;
  mr.kv_element_bytes = b.kv_element_bytes;
  const std::unique_ptr<InferenceEngine> engine = b.make_engine(memory_plan_build(model.config(), mr));
  EXPECT_EQ(engine->plan().kv_element_bytes, 2);
  EXPECT_EQ(engine->device().rfind("cuda", 0), 0u) << engine->device();
  try {
    niah_cuda_eval_backend(model, "fp16");
    ADD_FAILURE() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
  }
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
