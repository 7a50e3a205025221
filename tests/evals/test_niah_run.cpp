// NIAH run mode (evals/niah/niah_run.h): a scripted engine (every sequence answers a fixed text, then EOS) checks the
// decode + scoring path and the counts; the CPU engine on committed golden models checks a real run, the
// out-of-memory record (a budget that holds the GDN model's state but not the attention model's KV cache) and a
// prompt past max_position_embeddings; the reports; the CLI end to end.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/unicode_text.h"
#include "evals/niah/niah_run.h"
#include "evals/niah/niah_score.h"
#include "infer/cpu_engine.h"
#include "infer/memory_plan.h"
#include "models/model.h"
#include "niah_fixture.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

const std::vector<std::string>& fixture_sentences() {
  static hlm::test::ScratchDir dir("niah-run-corpus");
  static const std::vector<std::string> s = [] {
    hlm::test::write_niah_fixture_corpus(dir.path());
    return niah_held_out_sentences(Corpus::open(dir.path()), "eng_Latn", hlm::test::kNiahFixtureHeldOut,
                                   NiahSplit::Both);
  }();
  return s;
}

const Tokenizer& bytes_tok() {
  static const std::unique_ptr<Tokenizer> t = tokenizer_load("bytes");
  return *t;
}

std::vector<NiahSample> samples(const std::string& task, int64_t length, int64_t n) {
  NiahGenerator gen(niah_language("eng_Latn"), fixture_sentences(), bytes_tok());
  std::vector<NiahSample> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(gen.generate(niah_task_from_name(task), length, 0, i));
  return out;
}

// Every sequence generates the bytes of `answer`, then kEos.
constexpr int32_t kEos = 300;
class ScriptedEngine final : public InferenceEngine {
 public:
  ScriptedEngine(const ModelConfig& config, const MemoryPlan& plan, std::string answer)
      : config_(config), plan_(plan), answer_(std::move(answer)) {}
  const ModelConfig& config() const override { return config_; }
  const MemoryPlan& plan() const override { return plan_; }
  std::string device() const override { return "scripted"; }
  int open_sequence(int64_t) override {
    const int slot = next_slot_++;
    length_[slot] = 0;
    generated_[slot] = 0;
    return slot;
  }
  void close_sequence(int slot) override { length_.erase(slot); }
  int64_t sequence_length(int slot) const override { return length_.at(slot); }
  void advance_uncomputed(int slot, int64_t n, SkippedRows) override { length_.at(slot) += n; }
  Tensor step(std::span<const int> slots, const TokenBatch& tokens) override {
    Tensor logits = Tensor::zeros(Shape{static_cast<int64_t>(slots.size()), config_.vocab_size});
    for (size_t i = 0; i < slots.size(); ++i) {
      const int slot = slots[i];
      const int64_t fed = tokens.cu_seqlens[i + 1] - tokens.cu_seqlens[i];
      if (length_[slot] > 0) ++generated_[slot];  // after the one prefill step, each step feeds back an answer token
      length_[slot] += fed;
      const int64_t k = generated_[slot];
      const int32_t next = k < static_cast<int64_t>(answer_.size()) ? static_cast<unsigned char>(answer_[k]) : kEos;
      logits.f32()[static_cast<int64_t>(i) * config_.vocab_size + next] = 1.0f;
    }
    return logits;
  }
  StateUsage state_usage() const override { return {}; }

 private:
  ModelConfig config_;
  MemoryPlan plan_;
  std::string answer_;
  int next_slot_ = 0;
  std::map<int, int64_t> length_, generated_;
};

Model golden(const std::string& name) { return Model::load(std::filesystem::path(HLM_GOLDEN_DIR) / name); }

}  // namespace

TEST(NiahRun, ScriptedAnswersAreDecodedAndScored) {
  Model model = golden("qwen3_untied");  // its config (vocab 320 >= 256 byte ids) and plan shapes only
  const NiahLanguage& en = niah_language("eng_Latn");
  const std::vector<NiahSample> none = samples("none", 400, 3);
  std::string script = "none";
  NiahRunSettings one_step;  // the whole prompt in one prefill step, so every later step feeds back one answer token
  one_step.prefill_chunk = 1 << 20;
  const NiahEngineFactory scripted = [&](const MemoryPlan& plan) {
    return std::make_unique<ScriptedEngine>(model.config(), plan, script);
  };
  std::vector<NiahItem> items;
  const NiahCell cell = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en,
                                           niah_task_from_name("none"), none, one_step, &items);
  EXPECT_EQ(cell.status, "ok") << cell.note;
  EXPECT_EQ(cell.n, 3);
  EXPECT_EQ(cell.correct, 3);
  EXPECT_DOUBLE_EQ(cell.accuracy(), 1.0);
  EXPECT_EQ(cell.length, 400);
  ASSERT_EQ(items.size(), 3u);
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].response, "none") << "EOS is not part of the response";
    EXPECT_EQ(items[i].finish, "eos");
    EXPECT_EQ(items[i].prompt_tokens, static_cast<int64_t>(none[i].prompt.size()));
  }

  // A number task answered with sample 0's value: only that sample is right.
  const std::vector<NiahSample> single = samples("single", 400, 3);
  script = "<Answer> " + single[0].expected[0] + " </Answer>";
  items.clear();
  const NiahCell c2 = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en,
                                         niah_task_from_name("single"), single, one_step, &items);
  EXPECT_EQ(c2.correct, 1);
  EXPECT_TRUE(items[0].correct);
  EXPECT_FALSE(items[1].correct);

  // The 30-token budget cuts a long answer: "length" finish, 30 bytes.
  script = std::string(100, 'x');
  items.clear();
  niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en, niah_task_from_name("none"), none, one_step,
                     &items);
  EXPECT_EQ(items[0].response, std::string(30, 'x'));
  EXPECT_EQ(items[0].finish, "length");
}

TEST(NiahRun, StopStringEndsTheResponse) {
  Model model = golden("qwen3_untied");
  const NiahLanguage& en = niah_language("eng_Latn");
  const std::vector<NiahSample> single = samples("single", 400, 2);
  // The model answers, then keeps going with another number and never emits EOS.
  const std::string script = "\n<Answer> " + single[0].expected[0] + " </Answer> 7654321 and more text";
  NiahRunSettings settings;
  settings.prefill_chunk = 1 << 20;
  settings.max_new_tokens = 64;
  const NiahEngineFactory scripted = [&](const MemoryPlan& plan) {
    return std::make_unique<ScriptedEngine>(model.config(), plan, script);
  };
  std::vector<NiahItem> items;
  NiahCell cell = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en, niah_task_from_name("single"),
                                     single, settings, &items);
  EXPECT_EQ(cell.correct, 0) << "without a stop string the extra number makes the answer wrong";
  EXPECT_EQ(items[0].response, script.substr(0, 64));
  settings.stop = "</Answer>";
  items.clear();
  cell = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en, niah_task_from_name("single"), single,
                            settings, &items);
  EXPECT_EQ(cell.correct, 1);
  EXPECT_TRUE(items[0].correct);
  EXPECT_EQ(items[0].response, "\n<Answer> " + single[0].expected[0] + " </Answer>");
  EXPECT_EQ(items[0].finish, "stop");
  EXPECT_FALSE(items[1].correct);
}

TEST(NiahRun, KvElementBytesSizeThePlan) {
  // The bf16 evaluation (niah_kv_element_bytes("bf16") = 2) plans its KV cache at 2 bytes per element: the engine
  // gets a plan of kv_element_bytes 2 with half the fp32 bytes per block, and a budget that holds the bf16 plan but not
  // the fp32 one runs in bf16 and is out of memory in fp32.
  EXPECT_EQ(niah_kv_element_bytes("fp32"), 4);
  EXPECT_EQ(niah_kv_element_bytes("bf16"), 2);
  try {
    niah_kv_element_bytes("fp16", "eval.precision");
    ADD_FAILURE() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("eval.precision must be fp32 or bf16, got 'fp16'"), std::string::npos)
        << e.what();
  }
  Model model = golden("qwen3_untied");  // attention only: the plan is all KV blocks
  const NiahLanguage& en = niah_language("eng_Latn");
  const std::vector<NiahSample> s = samples("single", 400, 3);
  std::vector<MemoryPlan> plans;
  const NiahEngineFactory scripted = [&](const MemoryPlan& plan) {
    plans.push_back(plan);
    return std::make_unique<ScriptedEngine>(model.config(), plan, "none");
  };
  NiahRunSettings fp32, bf16;
  fp32.max_batch = bf16.max_batch = 2;
  bf16.kv_element_bytes = 2;
  const NiahCell a = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en, niah_task_from_name("single"),
                                        s, fp32);
  const NiahCell b = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en, niah_task_from_name("single"),
                                        s, bf16);
  ASSERT_EQ(a.status, "ok") << a.note;
  ASSERT_EQ(b.status, "ok") << b.note;
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].kv_element_bytes, 4);
  EXPECT_EQ(plans[1].kv_element_bytes, 2);
  EXPECT_EQ(plans[1].num_blocks, plans[0].num_blocks) << "the same blocks for the same prompts";
  EXPECT_EQ(plans[1].max_sequences, 2);
  EXPECT_EQ(2 * plans[1].kv_bytes_per_block, plans[0].kv_bytes_per_block);
  EXPECT_EQ(plans[1].kv_bytes_per_block, memory_plan_shape(model.config(), 16, 2).kv_bytes_per_block);
  EXPECT_EQ(a.plan_bytes, plans[0].total_bytes());
  EXPECT_EQ(b.plan_bytes, plans[1].total_bytes());
  EXPECT_EQ(2 * b.plan_bytes, a.plan_bytes);

  // The budget check uses the element size too: the bf16 plan's own bytes are enough for the bf16 cell, and a budget
  // one byte short of the longest prompt's fp32 state (prompt + 30 tokens) is out of memory in fp32 and still holds
  // that sequence in bf16.
  NiahRunSettings tight_fp32 = fp32, tight_bf16 = bf16;
  tight_bf16.budget_bytes = b.plan_bytes;
  const NiahCell c = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en,
                                        niah_task_from_name("single"), s, tight_bf16);
  EXPECT_EQ(c.status, "ok") << c.note;
  EXPECT_EQ(c.plan_bytes, b.plan_bytes);
  int64_t longest = 0;
  for (const NiahSample& x : s) longest = std::max(longest, x.prompt_tokens);
  tight_fp32.budget_bytes = plans[0].sequence_bytes(longest + 30) - 1;
  tight_bf16.budget_bytes = tight_fp32.budget_bytes;
  const NiahCell d = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en,
                                        niah_task_from_name("single"), s, tight_fp32);
  EXPECT_EQ(d.status, "oom") << d.note;
  const NiahCell e = niah_evaluate_cell(scripted, model.config(), {kEos}, bytes_tok(), en,
                                        niah_task_from_name("single"), s, tight_bf16);
  EXPECT_EQ(e.status, "ok") << "one bf16 sequence fits where one fp32 sequence does not: " << e.note;
}

TEST(NiahRun, CpuEngineRunsRecordsOomAndTooLong) {
  const NiahLanguage& en = niah_language("eng_Latn");
  const std::vector<NiahSample> s = samples("multivalue", 300, 2);
  Model hybrid = golden("olmo_hybrid_tiny");  // GDN + attention
  Model attention = golden("qwen3_untied");   // attention only
  auto cpu = [](Model& m) { return NiahEngineFactory([&m](const MemoryPlan& p) { return make_cpu_engine(m, p); }); };

  std::vector<NiahItem> items;
  const NiahCell ok = niah_evaluate_cell(cpu(hybrid), hybrid.config(), {}, bytes_tok(), en,
                                         niah_task_from_name("multivalue"), s, NiahRunSettings{}, &items);
  EXPECT_EQ(ok.status, "ok") << ok.note;
  EXPECT_EQ(ok.n, 2);
  EXPECT_GT(ok.seconds, 0);
  EXPECT_GT(ok.peak_state_bytes, 0);
  EXPECT_GE(ok.plan_bytes, ok.peak_state_bytes);
  ASSERT_EQ(items.size(), 2u);
  for (const NiahItem& it : items) {
    EXPECT_EQ(utf8_lossy(it.response), it.response) << "responses are valid UTF-8";
    EXPECT_EQ(it.correct, niah_score(NiahTask::Multivalue, it.expected, it.response, niah_none_words(en)));
  }

  // A state budget that holds the hybrid's run but not the attention model's KV cache for these prompts.
  NiahRunSettings tight;
  tight.budget_bytes = ok.plan_bytes;
  const NiahCell oom = niah_evaluate_cell(cpu(attention), attention.config(), {}, bytes_tok(), en,
                                          niah_task_from_name("multivalue"), s, tight);
  EXPECT_EQ(oom.status, "oom");
  EXPECT_NE(oom.note.find("KV blocks"), std::string::npos) << oom.note;
  EXPECT_EQ(oom.correct, 0);

  Model short_model = golden("qwen3_yarn");  // max_position_embeddings 64
  const NiahCell too_long = niah_evaluate_cell(cpu(short_model), short_model.config(), {}, bytes_tok(), en,
                                               niah_task_from_name("multivalue"), s, NiahRunSettings{});
  EXPECT_EQ(too_long.status, "too_long");
  EXPECT_NE(too_long.note.find("max_position_embeddings 64"), std::string::npos);
}

TEST(NiahRun, Reports) {
  std::vector<NiahCell> cells;
  auto add = [&](const std::string& model, const std::string& lang, const std::string& task, int64_t length,
                 const std::string& status, int64_t correct) {
    NiahCell c;
    c.model = model, c.lang = lang, c.task = task, c.length = length, c.status = status, c.n = 4, c.correct = correct;
    cells.push_back(c);
  };
  add("full", "eng_Latn", "single", 1000, "ok", 4);
  add("full", "eng_Latn", "none", 1000, "ok", 2);
  add("full", "rus_Cyrl", "single", 1000, "ok", 1);
  add("full", "cmn_Hani", "single", 1000, "ok", 3);
  add("full", "eng_Latn", "single", 8000, "oom", 0);
  add("full", "rus_Cyrl", "single", 8000, "oom", 0);
  add("hybrid", "eng_Latn", "single", 8000, "ok", 3);
  add("hybrid", "rus_Cyrl", "single", 8000, "too_long", 0);
  add("hybrid", "cmn_Hani", "single", 8000, "ok", 2);
  const std::string md = niah_cells_markdown(cells);
  EXPECT_NE(md.find("| model | English 1K | English 8K | Non-Eng (2 langs) 1K | Non-Eng (2 langs) 8K |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| full | 75.0 | OOM | 50.0 | OOM |"), std::string::npos) << md;  // (1 + .5) / 2; (.25 + .75) / 2
  EXPECT_NE(md.find("| hybrid | – | 75.0 | – | 50.0 (1 not run) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| hybrid | rus_Cyrl | – | too long |"), std::string::npos) << md;
  const std::string csv = niah_cells_csv(cells);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 10);
  EXPECT_NE(csv.find("full,eng_Latn,none,1000,ok,4,2,0.500000,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("full,eng_Latn,single,8000,oom,4,0,,"), std::string::npos) << csv;
}

TEST(NiahRun, CliWritesTheReports) {
  hlm::test::ScratchDir dir("niah-run-cli");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  const std::string golden_dir(HLM_GOLDEN_DIR);
  const auto r = hlm::test::run_hybridlm(
      "niah --model " + golden_dir + "/olmo_hybrid_tiny --model " + golden_dir + "/qwen3_yarn --tokenizer bytes" +
      " --langs eng_Latn,rus_Cyrl --tasks single --lengths 300 --n 2 --held-out-docs 6 --corpus " +
      (dir.path() / "corpus").string() + " --out " + (dir.path() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"niah.csv", "niah.md", "niah_items.jsonl", "niah_config.json", "niah_eng_Latn.svg",
                        "niah_rus_Cyrl.svg"})
    EXPECT_TRUE(std::filesystem::exists(dir.path() / "out" / f)) << f;
  const std::string csv = hlm::test::read_text(dir.path() / "out" / "niah.csv");
  EXPECT_NE(csv.find("olmo_hybrid_tiny,eng_Latn,single,300,ok,2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("qwen3_yarn,rus_Cyrl,single,300,too_long,2,"), std::string::npos) << csv;
  std::istringstream items(hlm::test::read_text(dir.path() / "out" / "niah_items.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(items, line); ++lines) EXPECT_TRUE(nlohmann::json::parse(line).contains("response"));
  EXPECT_EQ(lines, 4) << "2 samples x 2 languages of the model that ran";
  const nlohmann::json config = nlohmann::json::parse(hlm::test::read_text(dir.path() / "out" / "niah_config.json"));
  EXPECT_EQ(config["precision"], "fp32") << "the CPU default";
  EXPECT_EQ(config["prefill_chunk"], 512);
  // A device name that is neither cpu nor cuda is refused before anything is loaded.
  const auto bad = hlm::test::run_hybridlm("niah --model " + golden_dir + "/olmo_hybrid_tiny --tokenizer bytes "
                                           "--langs eng_Latn --tasks single --lengths 300 --out " +
                                           (dir.path() / "bad").string() + " --device tpu");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--device: 'tpu' is not a device (cpu or cuda)"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "bad"));
}
