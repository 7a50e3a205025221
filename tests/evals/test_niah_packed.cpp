// The NIAH experiment's packed training rows and curriculum stages (train_data.packed, train_data.stages;
// evals/niah/niah_train_data.h, niah_experiment.h; docs/niah.md): packed rows decode back into the generator's
// examples in order, every example is its own sequence after the hook and every answer span (only those) keeps its
// targets, the rows are a function of the seed, and the stages parse, derive, order and chain (stage 2 starts from
// stage 1's model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "data/corpus.h"
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

const std::vector<std::string> kAllTasks{"single", "multikey", "multivalue", "multiquery", "none"};

NiahTrainDataSpec packed_spec(const fs::path& corpus, uint64_t seed = 1) {
  NiahTrainDataSpec spec;
  spec.corpus = corpus.string();
  spec.tokenizer = "bytes";
  spec.langs = {"eng_Latn", "rus_Cyrl"};
  spec.tasks = kAllTasks;
  spec.lengths = {16, 32};
  spec.held_out_docs = hlm::test::kNiahFixtureHeldOut;
  spec.seq_len = 2048;
  spec.docs_per_language = 5;
  spec.seed = seed;
  spec.packed = true;
  return spec;
}

// One packed row taken apart: the byte offset where each example starts, where the filler starts (npos: none), and
// the examples' samples.
struct DecodedRow {
  std::vector<size_t> starts;
  size_t filler = std::string::npos;
  std::vector<NiahSample> samples;
};

// Matches `row` against the generator's examples first, first + 1, ... (prompt + answer, separated by "\n\n") and
// returns the decomposition; fails the test when the row does not start with example `first`.
DecodedRow decode_row(const std::string& row, NiahGenerator& gen, const NiahTrainDataSpec& spec, int64_t first) {
  DecodedRow out;
  size_t pos = 0;
  bool after_separator = false;
  for (int64_t j = first;; ++j) {
    const NiahTaskSpec task = niah_train_task(spec.tasks[static_cast<size_t>(j) % spec.tasks.size()], spec.keys);
    const int64_t length = spec.lengths[static_cast<size_t>(j / static_cast<int64_t>(spec.tasks.size())) %
                                        spec.lengths.size()];
    NiahSample s = gen.generate(task, length, spec.seed, spec.first_index + j);
    const std::string example = s.prompt + niah_answer_text(s);
    if (row.compare(pos, example.size(), example) != 0) break;
    out.starts.push_back(pos);
    out.samples.push_back(std::move(s));
    pos += example.size();
    after_separator = row.compare(pos, kNiahPackSeparator.size(), kNiahPackSeparator) == 0;
    if (!after_separator) break;
    pos += kNiahPackSeparator.size();
  }
  // Filler after "\n\n" is a sequence of its own; a few padding spaces without a separator stay with the last example.
  if (after_separator && pos < row.size()) out.filler = pos;
  return out;
}

std::vector<std::string> row_texts(const fs::path& data, const std::string& code) {
  return Corpus::open(data).read_documents(code).texts;
}

}  // namespace

TEST(NiahPacked, RowsDecodeBackIntoTheExamplesInOrder) {
  hlm::test::ScratchDir dir("niah-packed-rows");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  const NiahTrainDataSpec spec = packed_spec(dir.path() / "corpus");
  const nlohmann::json summary = niah_train_data_write((dir.path() / "data").string(), spec, [](const std::string&) {});
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  const Corpus corpus = Corpus::open(dir.path() / "corpus");
  for (const std::string& code : spec.langs) {
    const std::vector<std::string> train = niah_training_sentences(corpus, code, spec.held_out_docs);
    NiahGenerator gen(niah_language(code), train, *bytes);
    const std::vector<std::string> rows = row_texts(dir.path() / "data", code);
    ASSERT_EQ(static_cast<int64_t>(rows.size()), spec.docs_per_language) << code;
    int64_t next = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(static_cast<int64_t>(bytes->encode(rows[r]).size()), spec.seq_len) << code << " row " << r;
      const DecodedRow d = decode_row(rows[r], gen, spec, next);
      ASSERT_FALSE(d.starts.empty()) << code << " row " << r << " does not start with example " << next;
      EXPECT_EQ(d.starts.front(), 0u);
      // Haystacks of 16 / 32 tokens make English and Russian examples of ~450-1,000 bytes: 2-4 per 2048-byte row.
      EXPECT_GE(d.samples.size(), 2u) << code << " row " << r;
      // The filler after the last example is "\n\n" + training prose (no tag, no needle), shorter than the next
      // example (else that example would have been packed).
      if (d.filler != std::string::npos) {
        const std::string filler = rows[r].substr(d.filler);
        EXPECT_EQ(filler.find("<Answer>"), std::string::npos) << code << " row " << r;
        EXPECT_EQ(filler.find("<text>"), std::string::npos) << code << " row " << r;
      }
      next += static_cast<int64_t>(d.samples.size());
    }
    EXPECT_EQ(summary["languages"][code]["examples"].get<int64_t>(), next) << code;
    EXPECT_EQ(summary["languages"][code]["exact"].get<int64_t>(), spec.docs_per_language) << code;
  }
  EXPECT_TRUE(summary["packed"].get<bool>());
}

TEST(NiahPacked, EveryAnswerSpanKeepsItsTargetsAndNothingElse) {
  hlm::test::ScratchDir dir("niah-packed-targets");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  const NiahTrainDataSpec spec = packed_spec(dir.path() / "corpus");
  niah_train_data_write((dir.path() / "data").string(), spec, [](const std::string&) {});
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  const Corpus corpus = Corpus::open(dir.path() / "corpus");
  NiahExperimentConfig c = niah_experiment_defaults();
  c.train_packed = true;  // train.loss answer (the default): the hook splits, then keeps the answers
  const TrainHooks hooks = niah_train_hooks(c, *bytes);
  ASSERT_TRUE(static_cast<bool>(hooks.batch_targets));
  int64_t answers = 0;
  for (const std::string& code : spec.langs) {
    const std::vector<std::string> train = niah_training_sentences(corpus, code, spec.held_out_docs);
    NiahGenerator gen(niah_language(code), train, *bytes);
    const std::vector<std::string> rows = row_texts(dir.path() / "data", code);
    // Two rows in one batch, as the trainer's stream gives them (one sequence per row).
    PackedBatch batch;
    for (size_t r = 0; r < 2; ++r) packed_append_piece(batch, bytes->encode(rows[r]), 0);
    batch.rows = 2;
    const PackedBatch before = batch;
    hooks.batch_targets(batch);
    EXPECT_EQ(batch.batch.ids, before.batch.ids);
    EXPECT_EQ(batch.rows, 2);
    batch.batch.validate();
    // Expected sequences: one per example, one for the filler; under bytes a byte offset is a token offset.
    std::vector<int64_t> cu{0};
    std::vector<const NiahSample*> of_sequence;
    std::vector<DecodedRow> decoded;
    int64_t next = 0;
    for (size_t r = 0; r < 2; ++r) {
      decoded.push_back(decode_row(rows[r], gen, spec, next));
      next += static_cast<int64_t>(decoded.back().samples.size());
    }
    for (size_t r = 0; r < 2; ++r) {
      const int64_t base = static_cast<int64_t>(r) * spec.seq_len;
      const DecodedRow& d = decoded[r];
      for (size_t e = 0; e < d.starts.size(); ++e) {
        if (d.starts[e] > 0) cu.push_back(base + static_cast<int64_t>(d.starts[e]));
        of_sequence.push_back(&d.samples[e]);
      }
      if (d.filler != std::string::npos) {
        cu.push_back(base + static_cast<int64_t>(d.filler));
        of_sequence.push_back(nullptr);
      }
      cu.push_back(base + spec.seq_len);
    }
    ASSERT_EQ(batch.batch.cu_seqlens, cu) << code;
    for (size_t q = 0; q + 1 < cu.size(); ++q) {
      const std::string what = code + " sequence " + std::to_string(q);
      EXPECT_EQ(batch.targets[static_cast<size_t>(cu[q + 1] - 1)], kIgnoreTarget) << what << ": its last token";
      std::vector<int64_t> kept;
      for (int64_t p = cu[q]; p < cu[q + 1]; ++p)
        if (batch.targets[static_cast<size_t>(p)] != kIgnoreTarget) {
          EXPECT_EQ(batch.targets[static_cast<size_t>(p)], before.targets[static_cast<size_t>(p)]) << what;
          kept.push_back(p);
        }
      if (of_sequence[q] == nullptr) {
        EXPECT_TRUE(kept.empty()) << what << ": filler keeps no target";
        continue;
      }
      // Exactly the answer: the kept targets predict "\n<Answer> ... </Answer>", and they follow the prompt.
      ASSERT_FALSE(kept.empty()) << what;
      EXPECT_EQ(kept.back() - kept.front() + 1, static_cast<int64_t>(kept.size())) << what << ": contiguous";
      std::vector<int32_t> answer, head;
      for (int64_t p : kept) answer.push_back(batch.targets[static_cast<size_t>(p)]);
      for (int64_t p = cu[q]; p <= kept.front(); ++p) head.push_back(batch.batch.ids[static_cast<size_t>(p)]);
      EXPECT_EQ(bytes->decode(answer), niah_answer_text(*of_sequence[q])) << what;
      EXPECT_EQ(bytes->decode(head), of_sequence[q]->prompt) << what;
      ++answers;
    }
  }
  EXPECT_GE(answers, 8);  // >= 2 examples per row, 2 rows, 2 languages
  // Without the split (one sequence per row) every answer of the row keeps its targets too, none of the instruction's
  // example tags does.
  const std::vector<std::string> rows = row_texts(dir.path() / "data", "eng_Latn");
  PackedBatch whole;
  packed_append_piece(whole, bytes->encode(rows[0]), 0);
  whole.rows = 1;
  niah_answer_targets(whole, *bytes);
  std::vector<int32_t> kept;
  for (int32_t t : whole.targets)
    if (t != kIgnoreTarget) kept.push_back(t);
  const std::vector<std::string> train = niah_training_sentences(corpus, "eng_Latn", spec.held_out_docs);
  NiahGenerator gen(niah_language("eng_Latn"), train, *bytes);
  std::string expected;
  for (const NiahSample& s : decode_row(rows[0], gen, spec, 0).samples) expected += niah_answer_text(s);
  EXPECT_EQ(bytes->decode(kept), expected);
  // A piece that starts inside a haystack (no "<text>" before its answer) keeps nothing.
  const std::string row = rows[0];
  const size_t cut = row.find("<text>") + 20;
  PackedBatch piece;
  const std::string tail = row.substr(cut, row.find("</Answer>\n\n") - cut + 9);
  packed_append_piece(piece, bytes->encode(tail), 0);
  piece.rows = 1;
  niah_answer_targets(piece, *bytes);
  EXPECT_TRUE(std::all_of(piece.targets.begin(), piece.targets.end(), [](int32_t t) { return t == kIgnoreTarget; }));
}

TEST(NiahPacked, RowsAreAFunctionOfTheSeedAndTheFirstIndex) {
  hlm::test::ScratchDir dir("niah-packed-seed");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  auto write = [&](const std::string& name, const NiahTrainDataSpec& spec) {
    niah_train_data_write((dir.path() / name).string(), spec, [](const std::string&) {});
    return row_texts(dir.path() / name, "eng_Latn");
  };
  NiahTrainDataSpec spec = packed_spec(dir.path() / "corpus");
  const std::vector<std::string> a = write("a", spec), b = write("b", spec);
  EXPECT_EQ(a, b);
  const std::vector<std::string> other_seed = write("c", packed_spec(dir.path() / "corpus", 7));
  spec.first_index = int64_t{1} << 40;
  const std::vector<std::string> other_stage = write("d", spec);
  ASSERT_EQ(a.size(), other_seed.size());
  for (size_t r = 0; r < a.size(); ++r) {
    EXPECT_NE(a[r], other_seed[r]) << "row " << r;
    EXPECT_NE(a[r], other_stage[r]) << "row " << r;
  }
}

TEST(NiahPacked, StagesParseInOrderAndDeriveLengthsAndTokens) {
  const nlohmann::json j = {
      {"train_data",
       {{"packed", true},
        {"stages", {{{"lengths", {16, 32}}, {"tokens", 8192}}, {{"lengths", {64, 32}}, {"tokens", 16384}}}}}},
      {"train", {{"seq_len", 512}, {"batch_rows", 8}, {"micro_batch_rows", 8}}}};
  const NiahExperimentConfig c = niah_experiment_config_from_json(j, "t");
  EXPECT_TRUE(c.train_packed);
  ASSERT_EQ(c.train_stages.size(), 2u);
  EXPECT_EQ(c.train_lengths, (std::vector<int64_t>{16, 32, 64}));  // in order of first use
  EXPECT_EQ(c.train.tokens, 8192 + 16384);
  const std::vector<NiahTrainStage> stages = niah_experiment_stages(c);
  EXPECT_EQ(stages[0].lengths, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(stages[1].lengths, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(stages[1].tokens, 16384);
  // The resolved form reads back to the same config.
  const nlohmann::json round = niah_experiment_config_to_json(c);
  EXPECT_EQ(niah_experiment_config_to_json(niah_experiment_config_from_json(round, "round")), round);
  // Without stages: one stage of lengths and train.tokens, the old folders' data spec.
  const NiahExperimentConfig d = niah_experiment_defaults();
  ASSERT_EQ(niah_experiment_stages(d).size(), 1u);
  EXPECT_EQ(niah_experiment_stages(d)[0].lengths, d.train_lengths);
  EXPECT_EQ(niah_experiment_stages(d)[0].tokens, d.train.tokens);
  EXPECT_FALSE(d.train_packed);
  const nlohmann::json dj = niah_experiment_config_to_json(d);  // "stages": [] with lengths given reads back
  EXPECT_EQ(niah_experiment_config_to_json(niah_experiment_config_from_json(dj, "round")), dj);
  EXPECT_TRUE(niah_experiment_config_from_json(dj, "round").train_stages.empty());
  // Per stage: its lengths, its token quota, disjoint sample indices.
  NiahExperimentConfig r = c;
  r.langs = {"eng_Latn", "rus_Cyrl"};
  const NiahTrainDataSpec s0 = niah_experiment_train_data_spec(r, 0), s1 = niah_experiment_train_data_spec(r, 1);
  EXPECT_EQ(s0.lengths, stages[0].lengths);
  EXPECT_EQ(s1.lengths, stages[1].lengths);
  EXPECT_TRUE(s0.packed && s1.packed);
  EXPECT_EQ(s0.first_index, 0);
  EXPECT_EQ(s1.first_index, int64_t{1} << 40);
  // ceil(1.05 × tokens / (2 languages × 512)) + 2 × held_out_docs (2) + 1
  EXPECT_EQ(s0.docs_per_language, 9 + 5);
  EXPECT_EQ(s1.docs_per_language, 17 + 5);
  // Input errors: lengths or train.tokens that contradict the stages, a stage without tokens, a stage below a step.
  nlohmann::json bad = j;
  bad["train_data"]["lengths"] = {16, 64};
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
  bad = j;
  bad["train"]["tokens"] = 1000000;
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
  bad = j;
  bad["train_data"]["stages"][1].erase("tokens");
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
  bad = j;
  bad["train_data"]["stages"][0]["shuffle"] = true;
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
  bad = j;
  bad["train_data"]["packed"] = "yes";
  EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error);
}

// A stage's own tasks and needle keys (train_data.stages[k].tasks / keys): parsed, refused when bad, read back, passed
// to that stage's data only; the data's multikey and none prompts then hold `keys` needles (one distractor at 2),
// the other tasks theirs, and the rows still decode into the generator's examples.
TEST(NiahPacked, StageTasksAndKeysShapeOnlyThatStagesData) {
  const nlohmann::json j = {
      {"train_data",
       {{"packed", true},
        {"tasks", {"single", "multikey", "none"}},
        {"stages",
         {{{"lengths", {16}}, {"tokens", 8192}, {"tasks", {"multikey", "single"}}, {"keys", 2}},
          {{"lengths", {32}}, {"tokens", 8192}}}}}},
      {"train", {{"seq_len", 512}, {"batch_rows", 8}, {"micro_batch_rows", 8}}}};
  NiahExperimentConfig c = niah_experiment_config_from_json(j, "t");
  ASSERT_EQ(c.train_stages.size(), 2u);
  EXPECT_EQ(c.train_stages[0].tasks, (std::vector<std::string>{"multikey", "single"}));
  EXPECT_EQ(c.train_stages[0].keys, 2);
  EXPECT_TRUE(c.train_stages[1].tasks.empty());
  EXPECT_EQ(c.train_stages[1].keys, 0);
  const nlohmann::json round = niah_experiment_config_to_json(c);
  EXPECT_EQ(niah_experiment_config_from_json(round, "round").train_stages, c.train_stages);
  c.langs = {"eng_Latn"};
  const NiahTrainDataSpec s0 = niah_experiment_train_data_spec(c, 0), s1 = niah_experiment_train_data_spec(c, 1);
  EXPECT_EQ(s0.tasks, (std::vector<std::string>{"multikey", "single"}));
  EXPECT_EQ(s0.keys, 2);
  EXPECT_EQ(s1.tasks, (std::vector<std::string>{"single", "multikey", "none"}));  // train_data.tasks
  EXPECT_EQ(s1.keys, 0);
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"keys", 1}, {"keys", 5}, {"keys", "two"}, {"tasks", {"multikey", "multikey"}}, {"tasks", {"lookup"}},
           {"tasks", "multikey"}}) {
    nlohmann::json bad = j;
    bad["train_data"]["stages"][0][key] = value;
    EXPECT_THROW(niah_experiment_config_from_json(bad, "t"), Error) << key << " " << value.dump();
  }
  // The task specs: multikey and none take the keys, the others keep OneRULER's; 0 keeps every task's own.
  EXPECT_EQ(niah_train_task("multikey", 2).keys, 2);
  EXPECT_EQ(niah_train_task("none", 3).keys, 3);
  EXPECT_EQ(niah_train_task("multiquery", 2).keys, 2);
  EXPECT_EQ(niah_train_task("single", 2).keys, 1);
  EXPECT_EQ(niah_train_task("multivalue", 2).keys, 1);
  EXPECT_EQ(niah_train_task("multikey", 0).keys, 4);
  EXPECT_THROW(niah_train_task("multikey", 1), Error);
  EXPECT_THROW(niah_train_task("multikey", 5), Error);

  // The data of a 2-key stage.
  hlm::test::ScratchDir dir("niah-stage-keys");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  NiahTrainDataSpec spec = packed_spec(dir.path() / "corpus");
  spec.tasks = {"multikey", "none", "single"};
  spec.keys = 2;
  const nlohmann::json summary = niah_train_data_write((dir.path() / "data").string(), spec, [](const std::string&) {});
  EXPECT_EQ(summary["keys"].get<int>(), 2);
  const std::unique_ptr<Tokenizer> bytes = tokenizer_load("bytes");
  const Corpus corpus = Corpus::open(dir.path() / "corpus");
  for (const std::string& code : spec.langs) {
    const std::vector<std::string> train = niah_training_sentences(corpus, code, spec.held_out_docs);
    NiahGenerator gen(niah_language(code), train, *bytes);  // holds a reference to `train`
    int64_t next = 0, multikey = 0;
    for (const std::string& row : row_texts(dir.path() / "data", code)) {
      const DecodedRow d = decode_row(row, gen, spec, next);
      ASSERT_FALSE(d.samples.empty()) << code << ": a row does not start with example " << next;
      for (size_t k = 0; k < d.samples.size(); ++k) {
        const std::string task = spec.tasks[static_cast<size_t>(next + static_cast<int64_t>(k)) % spec.tasks.size()];
        EXPECT_EQ(d.samples[k].keys.size(), task == "single" ? 1u : 2u) << code << " " << task;
        multikey += task == "multikey" ? 1 : 0;
      }
      next += static_cast<int64_t>(d.samples.size());
    }
    EXPECT_EQ(summary["languages"][code]["examples"].get<int64_t>(), next) << code;
    EXPECT_GT(multikey, 0) << code;
  }
}

// Every config shipped in configs/niah parses (the GPU configs are run only on the device machine, so a key the
// parser no longer knows would otherwise surface there first).
TEST(NiahPacked, ShippedConfigsParse) {
  const fs::path dir = fs::path(HLM_GOLDEN_DIR) / ".." / ".." / "configs" / "niah";
  int parsed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW(niah_experiment_config_from_json(json_file_read(entry.path()), entry.path().string()))
        << entry.path();
    ++parsed;
  }
  EXPECT_GE(parsed, 8);
}

// Two stages end to end on the CPU: each stage's data and run folder, in order; stage 2 starts from stage 1's model
// (its first validation, before any step, is stage 1's trained level, not the random model's ~5.5 nats), and the
// final model evaluated is stage 2's. A rerun skips every stage.
TEST(NiahPacked, CurriculumTrainsTheStagesInOrderFromThePreviousModel) {
  hlm::test::ScratchDir dir("niah-packed-stages");
  hlm::test::write_niah_fixture_corpus(dir.path() / "corpus");
  const nlohmann::json j = {
      {"corpus", (dir.path() / "corpus").string()},
      {"langs", {"eng_Latn"}},
      {"held_out_docs", hlm::test::kNiahFixtureHeldOut},
      {"model",
       {{"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
        {"num_key_value_heads", 1}, {"head_dim", 16}, {"max_position_embeddings", 2048},
        {"tie_word_embeddings", true}}},
      {"architectures", {"full_attention"}},
      {"train_data",
       {{"tasks", {"single", "none"}},
        {"packed", true},
        {"stages", {{{"lengths", {16}}, {"tokens", 16 * 4 * 1024}}, {{"lengths", {32}}, {"tokens", 2 * 4 * 1024}}}}}},
      {"train",
       {{"seq_len", 1024}, {"batch_rows", 4}, {"micro_batch_rows", 4}, {"lr", 1e-2}, {"held_out_docs", 1},
        {"eval_tokens", 1024}, {"checkpoint_every_steps", 0}, {"log_every_steps", 8}}},
      {"eval", {{"tasks", {"single"}}, {"lengths", {32}}, {"n", 1}}}};
  const NiahExperimentConfig c = niah_experiment_config_from_json(j, "test");
  const fs::path out = dir.path() / "out";
  std::vector<std::string> lines;
  const NiahLog log = [&](const std::string& line) { lines.push_back(line); };
  const NiahExperimentResult res = niah_experiment_run(c, out, {}, log);
  for (const char* stage : {"stage-0", "stage-1"}) {
    EXPECT_TRUE(fs::exists(out / "data" / stage / "niah_train_data.json")) << stage;
    EXPECT_TRUE(fs::exists(out / "runs" / "full_attention" / stage / "model" / "config.json")) << stage;
  }
  EXPECT_FALSE(fs::exists(out / "data" / "niah_train_data.json"));
  // Stage 1's haystacks are 16 tokens, stage 2's 32: the data of each stage holds its own examples.
  const nlohmann::json d0 = json_file_read(out / "data" / "stage-0" / "niah_train_data.json");
  const nlohmann::json d1 = json_file_read(out / "data" / "stage-1" / "niah_train_data.json");
  EXPECT_EQ(d1["first_index"].get<int64_t>(), int64_t{1} << 40);
  EXPECT_GT(d0["examples"].get<int64_t>(), d0["documents"].get<int64_t>());  // packed: > 1 example per row
  // The order: stage 1 was logged (trained) before stage 2.
  auto logged = [&](const std::string& what) {
    for (size_t i = 0; i < lines.size(); ++i)
      if (lines[i].find(what) != std::string::npos) return static_cast<int64_t>(i);
    return int64_t{-1};
  };
  const int64_t first = logged("stage 1 of 2"), second = logged("stage 2 of 2");
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  EXPECT_LT(first, second);
  EXPECT_NE(lines[static_cast<size_t>(second)].find("from the previous stage's model"), std::string::npos);
  // Stage 2's validation at step 0 (answer CE on its own held-out rows) is at stage 1's trained level.
  auto first_valid = [&](const char* stage) {
    double ce = -1;
    jsonl_file_for_each(out / "runs" / "full_attention" / stage / "metrics.jsonl",
                        [&](const nlohmann::json& v, int64_t) {
                          if (ce < 0 && v.value("type", "") == "valid") ce = v["mean"]["ce"].get<double>();
                        });
    return ce;
  };
  const double v0 = first_valid("stage-0"), v1 = first_valid("stage-1");
  std::printf("answer CE at step 0: stage 1 %.3f, stage 2 %.3f\n", v0, v1);
  EXPECT_GT(v0, 4.0);       // random init: ~ln 256 = 5.5 nats per answer byte
  EXPECT_LT(v1, v0 - 1.5);  // stage 1's 16 steps bring the answer CE to ~2 (the format): far below the random level
  ASSERT_EQ(res.archs.size(), 1u);
  EXPECT_EQ(res.archs[0].train_tokens, 18 * 4 * 1024);  // both stages
  EXPECT_EQ(res.archs[0].cells.size(), 1u);
  // A rerun finds every stage done.
  lines.clear();
  niah_experiment_run(c, out, {}, log);
  EXPECT_EQ(logged("niah experiment: training full_attention"), -1);
}
