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

// --- Several passes (DataConfig::passes) ---

namespace {

// The training documents of every language (id -> text) and their held-out ids.
struct SplitDocs {
  std::map<std::string, std::string> train;
  std::set<std::string> held_out;
  int64_t train_bytes = 0;
};

SplitDocs split_docs(const Corpus& corpus, const DataConfig& config) {
  SplitDocs out;
  for (const CorpusLanguage& lang : corpus.languages()) {
    const std::vector<std::string> texts = corpus.read_documents(lang.code).texts;
    const DocumentSplit split = split_documents(lang.code, static_cast<int64_t>(texts.size()), config.held_out_docs);
    for (int64_t d : split.train) {
      out.train[doc_id(texts[d])] = texts[d];
      out.train_bytes += static_cast<int64_t>(texts[d].size());
    }
    for (const auto* part : {&split.valid, &split.test})
      for (int64_t d : *part) out.held_out.insert(doc_id(texts[d]));
  }
  return out;
}

// The ids of one language's documents, in stream order, within [begin, end) of `ids`.
std::vector<std::string> ids_of(const std::vector<std::string>& ids, size_t begin, size_t end, const std::string& code) {
  std::vector<std::string> out;
  for (size_t i = begin; i < end; ++i)
    if (ids[i].rfind(code + ":", 0) == 0) out.push_back(ids[i]);
  return out;
}

}  // namespace

// passes = 2 without quotas: pass 1 is the single-pass stream token for token (its rows are the start of the two-pass
// stream), then every training document comes once more, in a new per-language order (a reshuffle keyed by the data
// seed and the pass, by design: a repeat in the same order would show the model the same row sequence twice); no
// held-out document enters either pass; the stream ends after the second pass.
TEST(TrainStream, SecondPassReshufflesTheTrainingDocumentsOnly) {
  const Corpus& corpus = shared_corpus();
  DataConfig one = small_config();
  one.data_seed = 5;
  DataConfig two = one;
  two.passes = 2;
  TrainStream single(corpus, bytes_tokenizer(), one);
  const PackedBatch first = test::concat(test::drain(single, 3));
  EXPECT_EQ(single.cursor().pass, 0);
  TrainStream stream(corpus, bytes_tokenizer(), two);
  const std::vector<PackedBatch> batches = test::drain(stream, 3);
  for (const PackedBatch& b : batches) test::check_packing(b, two.seq_len);
  EXPECT_TRUE(stream.cursor().exhausted);
  EXPECT_EQ(stream.cursor().pass, 1);
  EXPECT_EQ(stream.pass(), 1);
  const PackedBatch all = test::concat(batches);
  ASSERT_GT(all.rows, first.rows);
  EXPECT_TRUE(std::equal(first.batch.ids.begin(), first.batch.ids.end(), all.batch.ids.begin()));
  EXPECT_TRUE(std::equal(first.language.begin(), first.language.end(), all.language.begin()));
  EXPECT_TRUE(std::equal(first.targets.begin(), first.targets.end(), all.targets.begin()));  // reset: row-local

  const SplitDocs split = split_docs(corpus, two);
  const test::StreamDocuments docs = test::stream_documents(all, two.seq_len);
  std::vector<std::string> ids;
  for (const std::string& d : docs.full) ids.push_back(doc_id(d));
  std::map<std::string, int> count;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(split.train.count(ids[i])) << "not a training document: " << ids[i];
    EXPECT_FALSE(split.held_out.count(ids[i])) << "held-out document trained on: " << ids[i];
    EXPECT_EQ(docs.full[i], split.train.at(ids[i]));
    ++count[ids[i]];
  }
  if (!docs.tail.empty()) {
    EXPECT_FALSE(split.held_out.count(doc_id(docs.tail)));
  }
  // Pass 1 holds every training document once; pass 2 again (up to the dropped partial row and its document).
  const size_t n = split.train.size();
  ASSERT_GE(ids.size(), 2 * n - 1);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)).size(), n);
  int twice = 0;
  for (const auto& [id, c] : count) {
    EXPECT_LE(c, 2) << id;
    twice += c == 2;
  }
  EXPECT_GE(twice, static_cast<int>(n) - 1);
  const int64_t lost = 2 * split.train_bytes - all.batch.total_tokens();
  EXPECT_GE(lost, 0);
  EXPECT_LT(lost, two.seq_len);
  // Each language's second pass is a different order of the same documents.
  for (const CorpusLanguage& lang : corpus.languages()) {
    const std::vector<std::string> p1 = ids_of(ids, 0, n, lang.code), p2 = ids_of(ids, n, ids.size(), lang.code);
    ASSERT_GE(p2.size() + 1, p1.size()) << lang.code;
    const std::vector<std::string> p1_head(p1.begin(), p1.begin() + static_cast<std::ptrdiff_t>(p2.size()));
    EXPECT_NE(p2, p1_head) << lang.code << ": the second pass repeats the first's order";
  }
}

// passes = 3 reads the training text three times, then ends; every pass's order differs from the others.
TEST(TrainStream, StreamEndsAfterThePassesItHas) {
  const Corpus& corpus = shared_corpus();
  DataConfig config = small_config();
  config.passes = 3;
  TrainStream stream(corpus, bytes_tokenizer(), config);
  const PackedBatch all = test::concat(test::drain(stream, 16));
  EXPECT_TRUE(stream.cursor().exhausted);
  EXPECT_EQ(stream.pass(), 2);
  const int64_t lost = 3 * split_docs(corpus, config).train_bytes - all.batch.total_tokens();
  EXPECT_GE(lost, 0);
  EXPECT_LT(lost, config.seq_len);
  for (const int64_t p : {1, 2, 3}) EXPECT_NE(pass_order("eng_Latn", 50, 0, p), pass_order("eng_Latn", 50, 0, p % 3 + 1));
  EXPECT_EQ(pass_order("eng_Latn", 50, 7, 2), pass_order("eng_Latn", 50, 7, 2));
  EXPECT_NE(pass_order("eng_Latn", 50, 7, 2), pass_order("eng_Latn", 50, 8, 2));
}

// Quotas count over the whole run: a language with less text than its quota goes round again, a language at its quota
// stays out of the later passes.
TEST(TrainStream, QuotasSpanThePasses) {
  const Corpus& corpus = shared_corpus();
  DataConfig config = small_config();
  config.token_budget = 40000;  // QuotasCapEachLanguage: one language runs out of text below its quota, three cap
  config.passes = 4;
  TrainStream stream(corpus, bytes_tokenizer(), config);
  test::drain(stream, 8);
  const StreamCursor& c = stream.cursor();
  EXPECT_GE(c.pass, 1);
  for (const CorpusLanguage& lang : corpus.languages()) {
    const int64_t quota = stream.quotas().at(lang.code);
    EXPECT_GE(c.tokens_taken.at(lang.code), quota) << lang.code << ": more passes should fill its quota";
    EXPECT_LT(c.tokens_taken.at(lang.code), quota + 400) << lang.code;  // synthetic documents are < 400 bytes
  }
}

// A cursor taken in the second pass resumes the stream exactly (through its JSON form, which carries the pass); a
// cursor from a later pass than the run allows, and a mistyped pass, are refused; a cursor without "pass" (written
// before passes existed) is pass 0.
TEST(TrainStream, RestoredCursorInTheSecondPassContinuesExactly) {
  const Corpus& corpus = shared_corpus();
  for (const int64_t budget : {int64_t{0}, int64_t{40000}}) {
    DataConfig config = small_config();
    config.token_budget = budget;
    config.data_seed = 3;
    config.passes = 3;
    TrainStream reference(corpus, bytes_tokenizer(), config);
    const PackedBatch expected = test::concat(test::drain(reference, 7));
    TrainStream first(corpus, bytes_tokenizer(), config);
    PackedBatch head;
    for (int calls = 0; first.pass() == 0; ++calls) {
      ASSERT_LT(calls, 1000) << "the stream never reached its second pass";
      head = test::concat({head, first.next(7)});
    }
    head = test::concat({head, first.next(7)});  // a little into the second pass
    const nlohmann::json saved = stream_cursor_to_json(first.cursor());
    EXPECT_EQ(saved.at("pass"), 1);
    TrainStream resumed(corpus, bytes_tokenizer(), config);
    resumed.restore(stream_cursor_from_json(nlohmann::json::parse(saved.dump())));
    EXPECT_EQ(resumed.pass(), 1);
    const PackedBatch tail = test::concat(test::drain(resumed, 7));
    test::expect_same(test::concat({head, tail}), expected);

    DataConfig fewer = config;
    fewer.passes = 1;
    TrainStream one_pass(corpus, bytes_tokenizer(), fewer);
    test::expect_input_error([&] { one_pass.restore(stream_cursor_from_json(saved)); }, {"pass 2", "passes = 1"});
  }
  nlohmann::json j = stream_cursor_to_json(StreamCursor{});
  j.erase("pass");
  EXPECT_EQ(stream_cursor_from_json(j).pass, 0);
  j["pass"] = -1;
  test::expect_input_error([&] { stream_cursor_from_json(j); }, {"pass"});
  DataConfig bad = small_config();
  bad.passes = 0;
  test::expect_input_error([&] { TrainStream s(shared_corpus(), bytes_tokenizer(), bad); }, {"passes"});
}
