// TrainStream and held-out sets: packing invariants over a whole stream (no document token lost or duplicated),
// splits fixed across data seeds and disjoint from training, quotas, resume equality, thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include "data/data_mixture.h"
#include "data_stream_util.h"

using namespace hlm;
using test::shared_corpus;
using test::small_config;

namespace {

const Tokenizer& bytes_tokenizer() {
  static const auto tok = tokenizer_load("bytes");
  return *tok;
}

// Document id "<code>:<index>" of a synthetic document.
std::string doc_id(const std::string& doc) { return doc.substr(0, doc.find('|')); }

}  // namespace

TEST(TrainStream, PackingKeepsEveryTrainingTokenOnce) {
  const Corpus& corpus = shared_corpus();
  const DataConfig config = small_config();
  TrainStream stream(corpus, bytes_tokenizer(), config);
  EXPECT_TRUE(stream.quotas().empty());
  const std::vector<PackedBatch> batches = test::drain(stream, 3);
  for (const PackedBatch& b : batches) test::check_packing(b, config.seq_len);
  EXPECT_TRUE(stream.cursor().exhausted);
  EXPECT_EQ(stream.next(4).rows, 0);

  const PackedBatch all = test::concat(batches);
  const test::StreamDocuments docs = test::stream_documents(all, config.seq_len);
  // Expected training documents: everything outside the fixed validation/test splits.
  std::map<std::string, std::string> train;  // id -> text
  int64_t train_bytes = 0;
  for (const CorpusLanguage& lang : corpus.languages()) {
    const std::vector<std::string> texts = corpus.read_documents(lang.code).texts;
    const DocumentSplit split = split_documents(lang.code, static_cast<int64_t>(texts.size()), config.held_out_docs);
    EXPECT_EQ(split.valid.size(), 20u);
    EXPECT_EQ(split.test.size(), 20u);
    for (int64_t d : split.train) {
      train[doc_id(texts[d])] = texts[d];
      train_bytes += static_cast<int64_t>(texts[d].size());
    }
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < docs.full.size(); ++i) {
    const std::string id = doc_id(docs.full[i]);
    ASSERT_TRUE(train.count(id)) << "not a training document: " << id;
    EXPECT_EQ(docs.full[i], train[id]);
    EXPECT_TRUE(seen.insert(id).second) << "duplicated " << id;
    EXPECT_EQ(corpus.languages()[docs.language[i]].code + ":", id.substr(0, id.find(':') + 1));
  }
  // Only the last partial row is dropped: fewer than seq_len tokens, and the tail is the start of an unseen document.
  const int64_t lost = train_bytes - all.batch.total_tokens();
  EXPECT_GE(lost, 0);
  EXPECT_LT(lost, config.seq_len);
  if (!docs.tail.empty()) {
    const std::string id = doc_id(docs.tail);
    ASSERT_TRUE(train.count(id));
    EXPECT_FALSE(seen.count(id));
    EXPECT_EQ(train[id].substr(0, docs.tail.size()), docs.tail);
  }
  EXPECT_GT(seen.size(), train.size() - 3);
}

TEST(TrainStream, DataSeedChangesTrainingButNotSplits) {
  const Corpus& corpus = shared_corpus();
  DataConfig a = small_config(), b = small_config();
  b.data_seed = 1;
  b.token_budget = 5000;  // mixture settings do not touch the splits either
  for (const Split split : {Split::Valid, Split::Test}) {
    const HeldOutSet ha = held_out_set(corpus, bytes_tokenizer(), a, split);
    const HeldOutSet hb = held_out_set(corpus, bytes_tokenizer(), b, split);
    ASSERT_EQ(ha.per_language.size(), hb.per_language.size());
    for (size_t l = 0; l < ha.per_language.size(); ++l) test::expect_same(ha.per_language[l], hb.per_language[l]);
  }
  TrainStream sa(corpus, bytes_tokenizer(), a);
  b.token_budget = 0;
  TrainStream sb(corpus, bytes_tokenizer(), b);
  EXPECT_NE(sa.next(4).batch.ids, sb.next(4).batch.ids);
  // The same seed gives the same stream.
  TrainStream sa2(corpus, bytes_tokenizer(), a);
  sa.restore(StreamCursor{sa2.cursor()});
  test::expect_same(sa.next(4), sa2.next(4));
}

TEST(TrainStream, HeldOutSetsUseTheirSplitInCanonicalOrder) {
  const Corpus& corpus = shared_corpus();
  const DataConfig config = small_config();
  for (const Split split : {Split::Valid, Split::Test}) {
    const HeldOutSet set = held_out_set(corpus, bytes_tokenizer(), config, split);
    ASSERT_EQ(set.languages.size(), corpus.languages().size());
    const int64_t rows = config.eval_tokens_per_language * (split == Split::Test ? 2 : 1) / config.seq_len;
    for (size_t l = 0; l < set.languages.size(); ++l) {
      const PackedBatch& b = set.per_language[l];
      EXPECT_EQ(set.languages[l], corpus.languages()[l].code);
      EXPECT_EQ(b.rows, rows) << set.languages[l];
      test::check_packing(b, config.seq_len);
      for (int16_t id : b.language) ASSERT_EQ(id, static_cast<int16_t>(l));
      const std::vector<std::string> texts = corpus.read_documents(set.languages[l]).texts;
      const DocumentSplit s = split_documents(set.languages[l], static_cast<int64_t>(texts.size()), 20);
      const std::vector<int64_t>& chosen = split == Split::Test ? s.test : s.valid;
      const test::StreamDocuments docs = test::stream_documents(b, config.seq_len);
      ASSERT_LE(docs.full.size(), chosen.size());
      for (size_t i = 0; i < docs.full.size(); ++i) EXPECT_EQ(docs.full[i], texts[chosen[i]]);
      // Held-out documents never reach training.
      std::set<int64_t> train(s.train.begin(), s.train.end());
      for (int64_t d : chosen) EXPECT_FALSE(train.count(d));
    }
  }
}

TEST(TrainStream, QuotasCapEachLanguage) {
  const Corpus& corpus = shared_corpus();
  DataConfig config = small_config();
  config.token_budget = 40000;
  TrainStream stream(corpus, bytes_tokenizer(), config);
  EXPECT_EQ(stream.quotas(), mixture_quotas(corpus.languages(), config));
  const std::vector<PackedBatch> batches = test::drain(stream, 8);
  for (const PackedBatch& b : batches) test::check_packing(b, config.seq_len);
  const StreamCursor& c = stream.cursor();
  int ran_out = 0, capped = 0;
  int64_t taken = 0;
  for (const CorpusLanguage& lang : corpus.languages()) {
    const std::vector<std::string> texts = corpus.read_documents(lang.code).texts;
    const DocumentSplit s = split_documents(lang.code, static_cast<int64_t>(texts.size()), config.held_out_docs);
    int64_t train_bytes = 0;
    for (int64_t d : s.train) train_bytes += static_cast<int64_t>(texts[d].size());
    const int64_t quota = stream.quotas().at(lang.code);
    if (train_bytes < quota) {  // too little text: the language just runs out
      ++ran_out;
      EXPECT_EQ(c.next_document.at(lang.code), static_cast<int64_t>(s.train.size()));
      EXPECT_EQ(c.tokens_taken.at(lang.code), train_bytes);
    } else {  // whole documents: over the quota by less than one document (synthetic ones are < 400 bytes)
      ++capped;
      EXPECT_GE(c.tokens_taken.at(lang.code), quota) << lang.code;
      EXPECT_LT(c.tokens_taken.at(lang.code), quota + 400) << lang.code;
    }
    taken += c.tokens_taken.at(lang.code);
  }
  EXPECT_EQ(ran_out, 1);
  EXPECT_EQ(capped, 3);
  const int64_t streamed = test::concat(batches).batch.total_tokens();
  EXPECT_GE(taken - streamed, 0);
  EXPECT_LT(taken - streamed, config.seq_len);
}

TEST(TrainStream, RestoredCursorContinuesExactly) {
  const Corpus& corpus = shared_corpus();
  for (const int64_t budget : {int64_t{0}, int64_t{20000}}) {
    DataConfig config = small_config();
    config.token_budget = budget;
    config.data_seed = 3;
    TrainStream reference(corpus, bytes_tokenizer(), config);
    const PackedBatch expected = reference.next(14);
    TrainStream first(corpus, bytes_tokenizer(), config);
    const PackedBatch head = first.next(5);
    // Through the checkpoint form: JSON text and back.
    const std::string saved = stream_cursor_to_json(first.cursor()).dump();
    const StreamCursor cursor = stream_cursor_from_json(nlohmann::json::parse(saved));
    EXPECT_EQ(cursor.carry_tokens, first.cursor().carry_tokens);
    TrainStream resumed(corpus, bytes_tokenizer(), config);
    resumed.restore(cursor);
    const PackedBatch tail = resumed.next(9);
    test::expect_same(test::concat({head, tail}), expected);
    test::expect_same(first.next(9), tail);
  }
}

TEST(TrainStream, CursorErrors) {
  const Corpus& corpus = shared_corpus();
  TrainStream stream(corpus, bytes_tokenizer(), small_config());
  StreamCursor c = stream.cursor();
  c.next_document.erase("hin_Deva");
  c.next_document["deu_Latn"] = 0;
  test::expect_input_error([&] { stream.restore(c); }, {"does not fit this corpus", "hin_Deva"});
  c = stream.cursor();
  c.next_document["hin_Deva"] = 100000;
  test::expect_input_error([&] { stream.restore(c); }, {"hin_Deva next document 100000"});
  c = stream.cursor();
  c.carry_tokens = {1, 2};
  test::expect_input_error([&] { stream.restore(c); }, {"carry"});
  test::expect_input_error([] { stream_cursor_from_json(nlohmann::json::object()); }, {"missing \"next_document\""});
  nlohmann::json j = stream_cursor_to_json(stream.cursor());
  j["carry_tokens"] = "x";
  test::expect_input_error([&] { stream_cursor_from_json(j); }, {"stream cursor"});
  DataConfig bad = small_config();
  bad.seq_len = 0;
  test::expect_input_error([&] { TrainStream(corpus, bytes_tokenizer(), bad); }, {"seq_len"});
  test::expect_input_error([&] { stream.next(-1); }, {"rows"});
}

TEST(TrainStream, IndependentOfThreadCount) {
  const Corpus& corpus = shared_corpus();
  DataConfig config = small_config();
  config.token_budget = 30000;
  const int saved = omp_get_max_threads();
  std::vector<PackedBatch> runs;
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    TrainStream stream(corpus, bytes_tokenizer(), config);
    std::vector<PackedBatch> parts = test::drain(stream, 5);
    for (const Split split : {Split::Valid, Split::Test})
      for (const PackedBatch& b : held_out_set(corpus, bytes_tokenizer(), config, split).per_language)
        parts.push_back(b);
    runs.push_back(test::concat(parts));
  }
  omp_set_num_threads(saved);
  test::expect_same(runs[0], runs[1]);
}

// Packing "continuous" (HF-style): the same tokens in the same rows as "reset", one sequence per row, and every
// token but a row's last predicts the next token of the row, across document boundaries; held-out rows alike.
TEST(TrainStream, ContinuousPackingJoinsDocumentsWithinRows) {
  const Corpus& corpus = shared_corpus();
  DataConfig reset_config = small_config();
  DataConfig continuous_config = reset_config;
  continuous_config.packing = DataPacking::Continuous;
  TrainStream reset(corpus, bytes_tokenizer(), reset_config);
  TrainStream continuous(corpus, bytes_tokenizer(), continuous_config);
  const int64_t n = reset_config.seq_len;
  int64_t boundaries_inside_rows = 0;
  for (int call = 0; call < 4; ++call) {
    const PackedBatch a = reset.next(3), b = continuous.next(3);
    ASSERT_EQ(a.rows, 3);
    ASSERT_EQ(b.rows, a.rows);
    EXPECT_EQ(b.batch.ids, a.batch.ids);
    EXPECT_EQ(b.language, a.language);
    ASSERT_EQ(b.batch.cu_seqlens, (std::vector<int64_t>{0, n, 2 * n, 3 * n}));
    for (int64_t t = 0; t < b.batch.total_tokens(); ++t) {
      const bool row_end = (t + 1) % n == 0;
      EXPECT_EQ(b.targets[t], row_end ? kIgnoreTarget : b.batch.ids[t + 1]) << t;
      if (!row_end && a.targets[t] == kIgnoreTarget) ++boundaries_inside_rows;  // a document ended inside the row
      if (a.targets[t] != kIgnoreTarget) EXPECT_EQ(b.targets[t], a.targets[t]) << t;
    }
  }
  EXPECT_GT(boundaries_inside_rows, 0);  // the synthetic documents are shorter than a row: the test saw joins

  const HeldOutSet held_reset = held_out_set(corpus, bytes_tokenizer(), reset_config, Split::Valid);
  const HeldOutSet held_cont = held_out_set(corpus, bytes_tokenizer(), continuous_config, Split::Valid);
  ASSERT_EQ(held_cont.per_language.size(), held_reset.per_language.size());
  for (size_t l = 0; l < held_cont.per_language.size(); ++l) {
    const PackedBatch& h = held_cont.per_language[l];
    EXPECT_EQ(h.batch.ids, held_reset.per_language[l].batch.ids);
    EXPECT_EQ(h.batch.num_sequences(), h.rows);
  }
  EXPECT_EQ(data_packing_from_name("continuous", "x"), DataPacking::Continuous);
  EXPECT_THROW(data_packing_from_name("hf", "--packing"), Error);
}
