// `hybridlm generate` end to end: --json output (generated ids only, timings, peak state), the same greedy ids as the
// library, streaming text with statistics on stderr, EOS from generation_config.json (a list), --stop, a JSONL batch,
// the state report, and every bad input of issue #18 item 6 as a clear error with exit code 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "infer/cpu_engine.h"
#include "infer/generate.h"
#include "infer_models.h"
#include "support/run_binary.h"

using namespace hlm;
using namespace hlm::test;

namespace {

// A qwen3_hybrid student with a 256-id vocabulary (the bytes tokenizer covers it), saved once per test.
struct StudentDir {
  ScratchDir dir{"generate"};
  StudentDir() {
    nlohmann::json c = student_config_json();
    c["vocab_size"] = 256;
    Model::create(parse_model_config(c, "test"), 5).save(dir.path());
  }
  std::string path() const { return dir.path().string(); }
};

nlohmann::json run_json(const std::string& args) {
  const RunResult r = run_hybridlm("generate " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_input_error(const std::string& args, const std::string& message) {
  const RunResult r = run_hybridlm("generate " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
}

}  // namespace

TEST(GenerateCli, JsonIdsMatchTheLibraryAndNeedNoTokenizer) {
  const StudentDir model;
  const nlohmann::json j = run_json(model.path() + " --ids 5,17,200,3 --max-new-tokens 7");
  ASSERT_EQ(j["ids"].size(), 7u);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_TRUE(j["text"].is_null());
  EXPECT_EQ(j["timings"]["prefill_tokens"], 4);
  EXPECT_EQ(j["timings"]["decode_tokens"], 6);
  EXPECT_GT(j["peak_state"]["bytes_in_use"].get<int64_t>(), 0);

  Model m = Model::load(model.path());
  MemoryRequest mr;
  mr.kv_blocks = 1;
  auto engine = make_cpu_engine(m, memory_plan_build(m.config(), mr));
  GenerateRequest r;
  r.prompt = {5, 17, 200, 3};
  r.max_new_tokens = 7;
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), generate(*engine, {r}, {})[0].ids);
}

TEST(GenerateCli, StreamsTextAndReportsSpeedAndState) {
  const StudentDir model;
  const RunResult r = run_hybridlm("generate " + model.path() +
                                   " --tokenizer bytes --prompt 'Hello' --max-new-tokens 6 --state-report");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  for (const char* s : {"prefill: 5 tokens", "decode: 5 tokens", "tok/s", "state at peak", "Table1 fp32 B",
                        "linear_attention", "full_attention"})
    EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.err;
}

TEST(GenerateCli, StateReportMatchesTableOneArithmetic) {
  const StudentDir model;
  // 9 prompt tokens + 4 fed generated ones = 13 tokens held at the peak; block 16 -> 3 tokens of paging slack.
  const nlohmann::json j = run_json(model.path() + " --ids 1,2,3,4,5,6,7,8,9 --max-new-tokens 5");
  const nlohmann::json& s = j["peak_state"];
  EXPECT_EQ(s["tokens_held"], 13);
  const ModelConfig c = Model::load(model.path()).config();
  for (const auto& layer : s["layers"]) {
    if (layer["kind"] == "full_attention") {
      const int64_t per_token = 2 * c.num_key_value_heads * c.head_dim * 4;
      EXPECT_EQ(layer["table1_fp32_bytes"], 13 * per_token);
      EXPECT_EQ(layer["measured_bytes"], 16 * per_token);
    } else {
      EXPECT_EQ(layer["measured_bytes"], layer["table1_fp32_bytes"]);
    }
  }
}

// Granite-4.0-H (the granitemoehybrid_tiny golden: Mamba-2 layers 0, 2, 3 and NoPE attention layers 1, 4): --ids
// --json gives the library's greedy ids; the peak state report's Mamba-2 rows hold exactly the conv + SSM state of the
// one running sequence ((176·3 + 8·16·12)·4 = 8,256 bytes), its pool that of every slot. --device cuda runs where a
// GPU runs this build (Mamba-2 layers on CUDA; its ids against the CPU's: tests/cuda_models/test_cuda_mamba2.cpp), and
// is a refusal with exit code 2 otherwise (no CUDA / no GPU here).
TEST(GenerateCli, GraniteMoeHybridGoldenGeneratesIdsWithItsMamba2State) {
  const std::string m = (std::filesystem::path(HLM_GOLDEN_DIR) / "granitemoehybrid_tiny").string();
  const nlohmann::json j = run_json(m + " --ids 5,17,200,3,44 --max-new-tokens 9 --prefill-chunk 3");
  const auto ids = j["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 9u);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["timings"]["prefill_tokens"], 5);
  Model model = Model::load(m);
  MemoryRequest mr;
  mr.kv_blocks = 1;
  auto engine = make_cpu_engine(model, memory_plan_build(model.config(), mr));
  GenerateRequest r;
  r.prompt = {5, 17, 200, 3, 44};
  r.max_new_tokens = 9;
  EXPECT_EQ(ids, generate(*engine, {r}, {})[0].ids);  // one prefill chunk here, chunks of 3 in the command

  const nlohmann::json& s = j["peak_state"];
  ASSERT_EQ(s["layers"].size(), 5u);
  const int64_t slots = j["memory_plan"]["max_sequences"];
  for (const int layer : {0, 2, 3}) {
    const auto& row = s["layers"][layer];
    EXPECT_EQ(row["kind"], "mamba2");
    EXPECT_EQ(row["measured_bytes"], 8256);
    EXPECT_EQ(row["table1_fp32_bytes"], 8256);
    EXPECT_EQ(row["pool_bytes"], slots * 8256);
  }
  for (const int layer : {1, 4}) EXPECT_EQ(s["layers"][layer]["kind"], "full_attention");

  const RunResult cuda = run_hybridlm("generate " + m + " --ids 1,2 --max-new-tokens 3 --device cuda --json");
  if (cuda.exit_code == 0) {
    EXPECT_EQ(nlohmann::json::parse(cuda.out)["ids"].size(), 3u) << cuda.out;
  } else {
    EXPECT_EQ(cuda.exit_code, 2) << cuda.out << cuda.err;
    EXPECT_NE(cuda.err.find("--device cuda"), std::string::npos) << cuda.err;
  }
}

TEST(GenerateCli, EosFromGenerationConfigAndStopStrings) {
  const StudentDir model;
  const nlohmann::json free_run = run_json(model.path() + " --ids 9,8,7 --max-new-tokens 8 --tokenizer bytes");
  const auto ids = free_run["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 8u);
  std::ofstream(model.dir.path() / "generation_config.json") << "{\"eos_token_id\": [255, " << ids[2] << "]}";
  const nlohmann::json eos = run_json(model.path() + " --ids 9,8,7 --max-new-tokens 8 --tokenizer bytes");
  const auto first = std::find(ids.begin(), ids.end(), ids[2]) - ids.begin();
  EXPECT_EQ(eos["finish_reason"], "eos");
  EXPECT_EQ(eos["ids"].size(), static_cast<size_t>(first + 1));
  std::filesystem::remove(model.dir.path() / "generation_config.json");

  // --stop: the text of the first two generated bytes, as a string, stops the run after the second token.
  if (ids[0] >= 32 && ids[0] < 127 && ids[1] >= 32 && ids[1] < 127 && ids[0] != '\'' && ids[1] != '\'') {
    const std::string stop{static_cast<char>(ids[0]), static_cast<char>(ids[1])};
    const nlohmann::json s =
        run_json(model.path() + " --ids 9,8,7 --max-new-tokens 8 --tokenizer bytes --stop '" + stop + "'");
    EXPECT_EQ(s["finish_reason"], "stop");
    EXPECT_EQ(s["ids"].size(), 2u);
  }
  std::ofstream(model.dir.path() / "generation_config.json") << "{\"eos_token_id\": \"x\"}";
  expect_input_error(model.path() + " --ids 1 --json", "generation_config.json");
}

TEST(GenerateCli, BatchRunsTogetherAndRefusesBadLines) {
  const StudentDir model;
  ScratchDir io("batch");
  const auto path = io.path() / "requests.jsonl";
  std::ofstream(path) << "{\"id\": \"a\", \"ids\": [1, 2, 3]}\n"
                      << "{\"prompt\": \"xyz\", \"max_new_tokens\": 2}\n"
                      << "{\"ids\": []}\n"
                      << "{\"ids\": [1, 300]}\n";
  const RunResult r = run_hybridlm("generate " + model.path() + " --tokenizer bytes --max-new-tokens 4 --batch " +
                                   path.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["id"], "a");
  EXPECT_EQ(rows[0]["ids"].size(), 4u);
  EXPECT_EQ(rows[1]["ids"].size(), 2u);
  EXPECT_EQ(rows[1]["prompt_tokens"], 3);
  EXPECT_EQ(rows[2]["finish_reason"], "refused");
  EXPECT_NE(rows[2]["error"].get<std::string>().find("empty"), std::string::npos);
  EXPECT_NE(rows[3]["error"].get<std::string>().find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(r.err.find("refused"), std::string::npos);
  // The good requests alone give the same ids (batched decode = each decoded alone).
  const nlohmann::json a = run_json(model.path() + " --ids 1,2,3 --max-new-tokens 4");
  EXPECT_EQ(a["ids"], rows[0]["ids"]);
  // The state plan holds the planned requests' worst cases and nothing more: the empty prompt is refused before
  // planning, so 3 of the 4 lines are planned (a plan sized over 4 entries of a 3-entry list once read past it).
  const RunResult j = run_hybridlm("generate " + model.path() + " --tokenizer bytes --max-new-tokens 4 --json --batch " +
                                   path.string());
  const nlohmann::json plan = nlohmann::json::parse(j.out)["memory_plan"];
  const MemoryPlan shape = memory_plan_shape(Model::load(model.path()).config());
  const int64_t worst = shape.blocks_for(3 + 4 - 1) + shape.blocks_for(3 + 2 - 1) + shape.blocks_for(2 + 4 - 1);
  EXPECT_EQ(plan["num_blocks"].get<int64_t>(), worst);
  EXPECT_EQ(plan["max_sequences"].get<int64_t>(), 4);
}

TEST(GenerateCli, BadInputIsAClearErrorWithExitCode2) {
  const StudentDir model;
  const std::string m = model.path();
  expect_input_error(m + " --json", "exactly one of");
  expect_input_error(m + " --ids 1 --prompt x --tokenizer bytes", "exactly one of");
  expect_input_error(m + " --tokenizer bytes --prompt ''", "prompt is empty");
  expect_input_error(m + " --ids '' --json", "prompt is empty");
  expect_input_error(m + " --ids ' , ' --json", "prompt is empty");
  expect_input_error(m + " --ids 1,256 --json", "outside the vocabulary");
  expect_input_error(m + " --ids 1,-4 --json", "outside the vocabulary");
  expect_input_error(m + " --ids 1,x --json", "not a token id");
  expect_input_error(m + " --ids 1,2 --max-memory 1K --json", "not even one sequence");
  expect_input_error(m + " --ids 1,2 --max-memory 12x --json", "--max-memory");
  // "not supported yet" from generate; a build without CUDA refuses --device cuda earlier (cli.cpp): either names it.
  expect_input_error(m + " --ids 1,2 --device cuda --json", "--device cuda");
  expect_input_error(m + " --ids 1,2 --precision bf16 --json", "--precision bf16 needs --device cuda");
  expect_input_error(m + " --ids 1,2 --precision fp16 --json", "--precision must be fp32 or bf16");
  expect_input_error(m + " --ids 1,2 --temperature -1 --json", "--temperature");
  expect_input_error(m + " --ids 1,2 --top-p 1.5 --json", "--top-p");
  expect_input_error(m + " --ids 1,2", "needs a tokenizer");
  // A model directory that does not exist is named as such, not blamed on its missing tokenizer.json.
  expect_input_error("/nonexistent/model --prompt hi", "/nonexistent/model: not a model directory");
  expect_input_error(m + " --file /nonexistent/prompt.txt --tokenizer bytes", "cannot open");
  std::string long_ids = "1";
  for (int i = 1; i < 300; ++i) long_ids += ",1";  // 300 tokens > max_position_embeddings 256
  expect_input_error(m + " --ids " + long_ids + " --json", "max_position_embeddings");
  // A budget that holds one sequence but not this context: refused naming the plan and the budget.
  const MemoryPlan shape = memory_plan_shape(Model::load(m).config());
  const int64_t budget = shape.sequence_bytes(16);  // one block: 16 tokens
  expect_input_error(m + " --ids 1,2,3,4,5,6,7,8,9,10 --max-new-tokens 20 --json --max-memory " +
                         std::to_string(budget),
                     "memory plan");
  const RunResult fits = run_hybridlm("generate " + m + " --ids 1,2,3 --max-new-tokens 4 --json --max-memory " +
                                      std::to_string(budget));
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
}
