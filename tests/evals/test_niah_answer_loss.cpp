// The NIAH experiment's answer loss (train.loss, evals/niah/niah_train_data.h niah_answer_targets; docs/niah.md):
// the kept targets of a training row are exactly the tokens of the expected answer after the question, for every task
// and fixture language under the bytes and the Qwen3 tokenizer; "all" leaves the trainer's rows untouched; a tiny CPU
// training run with the answer loss lowers the answer CE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "data/data_pack.h"
#include "evals/niah/niah_experiment.h"
#include "evals/niah/niah_experiment_config.h"
#include "evals/niah/niah_train_data.h"
#include "models/json_file.h"
#include "niah_fixture.h"
#include "support/run_binary.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

fs::path tokenizer_data_dir() {
  if (const char* dir = std::getenv("HLM_TOKENIZER_DIR")) return dir;
  return fs::path(HLM_GOLDEN_DIR) / ".." / ".." / "data" / "tokenizers";
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? ", " : "") + v[i];
  return s;
}

}  // namespace

TEST(NiahAnswerLoss, KeptTargetsAreExactlyTheAnswerForEveryTaskAndLanguage) {
  hlm::test::ScratchDir dir("niah-answer-loss");
  hlm::test::write_niah_fixture_corpus(dir.path());
  const Corpus corpus = Corpus::open(dir.path());
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> tokenizers;
  tokenizers.emplace_back("bytes", tokenizer_load("bytes"));
  const fs::path qwen = tokenizer_data_dir() / "qwen3" / "tokenizer.json";
  if (fs::exists(qwen)) tokenizers.emplace_back("qwen3", tokenizer_load(qwen.string()));
  else ADD_FAILURE() << qwen << " is missing: run `bash scripts/fetch-tokenizers.sh`";
  int checked = 0;
  for (const auto& [tname, tok] : tokenizers) {
    for (const char* code : {"eng_Latn", "cmn_Hani", "rus_Cyrl", "hin_Deva"}) {
      const std::vector<std::string> train =
          niah_training_sentences(corpus, code, hlm::test::kNiahFixtureHeldOut);
      const int64_t seq_len = tname == "bytes" ? 2000 : 1000;
      NiahTrainExampleBuilder builder(niah_language(code), train, *tok, seq_len);
      NiahGenerator gen(niah_language(code), train, *tok);
      for (const NiahTaskSpec& task : kNiahTasks) {
        const std::string what = tname + " " + code + " " + std::string(task.name);
        const NiahTrainExample ex = builder.build(task, 150, 1, 5);
        const NiahSample s = gen.generate(task, 150, 1, 5);
        // Two examples in one row (the second a different draw) and a third piece cut right before its answer (the
        // prompt alone: its instruction holds "<Answer> the numbers </Answer>", which is no answer).
        const NiahTrainExample ex2 = builder.build(task, 100, 1, 6);
        const NiahSample s2 = gen.generate(task, 100, 1, 6);
        const std::vector<int32_t> ids = tok->encode(ex.text), ids2 = tok->encode(ex2.text);
        const std::vector<int32_t> cut = tok->encode(s2.prompt);
        PackedBatch batch;
        packed_append_piece(batch, ids, 0);
        packed_append_piece(batch, ids2, 0);
        packed_append_piece(batch, cut, 0);
        batch.rows = 1;
        const std::vector<int32_t> all = batch.targets;
        niah_answer_targets(batch, *tok);
        ASSERT_EQ(batch.targets.size(), all.size());
        const std::vector<int64_t>& cu = batch.batch.cu_seqlens;
        const std::vector<const NiahSample*> samples{&s, &s2, nullptr};
        for (size_t q = 0; q < 3; ++q) {
          std::vector<int64_t> kept;
          for (int64_t p = cu[q]; p < cu[q + 1]; ++p) {
            const int32_t t = batch.targets[static_cast<size_t>(p)];
            if (t == kIgnoreTarget) continue;
            EXPECT_EQ(t, all[static_cast<size_t>(p)]) << what << ": a kept target is the next token";
            kept.push_back(p);
          }
          if (samples[q] == nullptr) {
            EXPECT_TRUE(kept.empty()) << what << ": a piece cut before its answer keeps no target";
            continue;
          }
          ASSERT_FALSE(kept.empty()) << what;
          EXPECT_EQ(kept.back() - kept.front() + 1, static_cast<int64_t>(kept.size())) << what << ": contiguous";
          std::vector<int32_t> answer;
          for (int64_t p : kept) answer.push_back(batch.targets[static_cast<size_t>(p)]);
          const std::string expected = "\n<Answer> " + joined(samples[q]->expected) + " </Answer>";
          const std::string& prompt = samples[q]->prompt;
          const std::vector<int32_t>& seq = q == 0 ? ids : ids2;
          const std::vector<int32_t> head(seq.begin(), seq.begin() + (kept.front() - cu[q]) + 1);
          const std::string h = tok->decode(head), k = tok->decode(answer);
          if (tname == "bytes") {
            // The predicted tokens are exactly the generator's expected answer in the trained format, and the tokens
            // before them exactly the prompt (the question last).
            EXPECT_EQ(k, expected) << what << " sequence " << q;
            EXPECT_EQ(h, prompt) << what << " sequence " << q;
          } else {
            // BPE: the first and last kept tokens may also hold a neighbouring byte (">\n", ">\n\n").
            const std::string& text = q == 0 ? ex.text : ex2.text;
            EXPECT_EQ(text.substr(0, h.size() + k.size()), h + k) << what;
            ASSERT_LE(h.size(), prompt.size()) << what;
            const size_t lead = prompt.size() - h.size();
            EXPECT_LE(lead, 4u) << what << ": " << k;
            ASSERT_GE(k.size(), lead + expected.size()) << what << ": " << k;
            EXPECT_EQ(k.substr(lead, expected.size()), expected) << what;
            EXPECT_LE(k.size() - lead - expected.size(), 4u) << what << ": " << k;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, static_cast<int>(tokenizers.size()) * 4 * static_cast<int>(std::size(kNiahTasks)) * 2);
}

TEST(NiahAnswerLoss, ConfigKeyDefaultsAndAllLeavesTheRowsAlone) {
  const NiahExperimentConfig d = niah_experiment_defaults();
  EXPECT_EQ(d.train_loss, "answer");
  const nlohmann::json j = niah_experiment_config_to_json(d);
  EXPECT_EQ(j["train"]["loss"], "answer");
  NiahExperimentConfig all = niah_experiment_config_from_json({{"train", {{"loss", "all"}, {"seq_len", 256}}}}, "t");
  EXPECT_EQ(all.train_loss, "all");
  EXPECT_EQ(all.train.seq_len, 256);
  EXPECT_EQ(niah_experiment_config_from_json(niah_experiment_config_to_json(all), "t").train_loss, "all");
  const nlohmann::json bad = {{"train", {{"loss", "prompt"}}}};
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  // "all": no hook, so train_run gets the hooks it got before train.loss existed and the stream's rows unchanged.
  EXPECT_FALSE(static_cast<bool>(niah_train_hooks(all, *bytes).batch_targets));
  // "answer": the hook is niah_answer_targets.
  const TrainHooks hooks = niah_train_hooks(d, *bytes);
  ASSERT_TRUE(static_cast<bool>(hooks.batch_targets));
  NiahSample s;
  s.expected = {"1234567"};
  // The haystack's "<text>" must precede the answer (a piece cut inside a haystack keeps nothing).
  const std::string text = "Read <text>\nhay.\n</text> Question? Answer so:\n<Answer> the numbers </Answer>" +
                           niah_answer_text(s) + "\n\nfiller.";
  PackedBatch a, b;
  packed_append_piece(a, bytes->encode(text), 0);
  b = a;
  hooks.batch_targets(a);
  niah_answer_targets(b, *bytes);
  EXPECT_EQ(a.targets, b.targets);
  const auto kept = std::count_if(a.targets.begin(), a.targets.end(), [](int32_t t) { return t >= 0; });
  EXPECT_EQ(kept, static_cast<int64_t>(niah_answer_text(s).size()));
}

// A tiny CPU pretrain run on NIAH rows with the answer loss: the per-step loss (the mean CE over the answer targets)
// falls. Measured at this seed (commit message / docs/niah.md): first 4 steps' mean vs last 4 steps' mean.
TEST(NiahAnswerLoss, TinyCpuTrainingLowersTheAnswerLoss) {
  hlm::test::ScratchDir dir("niah-answer-train");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  NiahExperimentConfig c = niah_experiment_config_from_json(
      {{"corpus", (dir.path() / "corpus").string()},
       {"langs", {"eng_Latn"}},
       {"held_out_docs", hlm::test::kNiahFixtureHeldOut},
       {"model",
        {{"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
         {"num_key_value_heads", 1}, {"head_dim", 16}, {"max_position_embeddings", 1024},
         {"tie_word_embeddings", true}}},
       {"architectures", {"full_attention"}},
       {"train_data", {{"tasks", {"single", "none"}}, {"lengths", {48, 64}}}},
       {"train",
        {{"tokens", 24 * 4 * 800}, {"seq_len", 800}, {"batch_rows", 4}, {"micro_batch_rows", 4}, {"lr", 1e-2},
         {"held_out_docs", 1}, {"eval_tokens", 800}, {"checkpoint_every_steps", 0}, {"log_every_steps", 8}}},
       {"eval", {{"tasks", {"single"}}, {"lengths", {100}}, {"n", 1}}}},
      "test");
  c = niah_experiment_resolve(c);
  ASSERT_EQ(c.train_loss, "answer");
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  const NiahTrainDataSpec spec = niah_experiment_train_data_spec(c);
  const fs::path data = dir.path() / "data";
  niah_train_data_write(data.string(), spec, [](const std::string&) {});
  const fs::path model_config = dir.path() / "model.json";
  {
    std::ofstream(model_config) << niah_arch_model_config(c, "full_attention", bytes->vocab_size()).dump(2);
  }
  TrainConfig tc = c.train;
  tc.job = TrainJob::Pretrain;
  tc.model_config = model_config.string();
  tc.data = data.string();
  tc.tokenizer = "bytes";
  tc.out = (dir.path() / "run").string();
  tc.device = "cpu";
  const TrainResult res = train_run(tc, niah_train_hooks(c, *bytes));
  ASSERT_EQ(res.status, TrainStatus::Completed) << res.message;
  std::vector<double> losses;
  jsonl_file_for_each(dir.path() / "run" / "metrics.jsonl", [&](const nlohmann::json& v, int64_t) {
    if (v.value("type", "") == "step" && v["loss"].is_number()) losses.push_back(v["loss"].get<double>());
  });
  ASSERT_EQ(losses.size(), 24u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 4; ++i) {
    first += losses[i] / 4;
    last += losses[losses.size() - 1 - i] / 4;
  }
  std::printf("answer CE over %zu steps: first 4 steps %.4f, last 4 steps %.4f, test %.4f\n", losses.size(), first, last,
              json_file_read(dir.path() / "run" / "test.json")["mean"]["ce"].get<double>());
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
}
