// Helpers for the stream tests: a shared synthetic corpus, draining a TrainStream, comparing and concatenating
// PackedBatches, and turning a stream back into its documents ('#' ends every synthetic document).
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/data_split.h"
#include "data/data_stream.h"
#include "data_test_util.h"

namespace hlm::test {

// One synthetic corpus for the whole test program (written once; read-only afterwards).
inline const Corpus& shared_corpus() {
  static ScratchDir scratch("stream");
  static const Corpus corpus = [] {
    write_synthetic_corpus(scratch.path() / "c");
    return Corpus::open(scratch.path() / "c");
  }();
  return corpus;
}

inline DataConfig small_config() {
  DataConfig c;
  c.seq_len = 64;
  c.held_out_docs = 20;
  c.eval_tokens_per_language = 512;
  return c;
}

inline std::vector<PackedBatch> drain(TrainStream& s, int64_t rows_per_call) {
  std::vector<PackedBatch> out;
  for (;;) {
    PackedBatch b = s.next(rows_per_call);
    if (b.rows == 0) break;
    out.push_back(std::move(b));
  }
  return out;
}

inline PackedBatch concat(const std::vector<PackedBatch>& parts) {
  PackedBatch all;
  for (const PackedBatch& p : parts) {
    const int64_t off = all.batch.total_tokens();
    all.batch.ids.insert(all.batch.ids.end(), p.batch.ids.begin(), p.batch.ids.end());
    for (size_t i = 1; i < p.batch.cu_seqlens.size(); ++i) all.batch.cu_seqlens.push_back(off + p.batch.cu_seqlens[i]);
    all.targets.insert(all.targets.end(), p.targets.begin(), p.targets.end());
    all.language.insert(all.language.end(), p.language.begin(), p.language.end());
    all.rows += p.rows;
  }
  return all;
}

inline void expect_same(const PackedBatch& a, const PackedBatch& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.batch.ids, b.batch.ids);
  EXPECT_EQ(a.batch.cu_seqlens, b.batch.cu_seqlens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.language, b.language);
}

// Row and sequence invariants of one batch: exact row length, cu_seqlens consistent and containing every row
// boundary, targets = next token inside a sequence and kIgnoreTarget at its end, one language per sequence.
inline void check_packing(const PackedBatch& b, int64_t seq_len) {
  ASSERT_EQ(b.batch.total_tokens(), b.rows * seq_len);
  ASSERT_EQ(b.targets.size(), b.batch.ids.size());
  ASSERT_EQ(b.language.size(), b.batch.ids.size());
  b.batch.validate();
  const std::set<int64_t> cu(b.batch.cu_seqlens.begin(), b.batch.cu_seqlens.end());
  EXPECT_EQ(cu.size(), b.batch.cu_seqlens.size()) << "empty sequence";
  for (int64_t r = 0; r <= b.rows; ++r) EXPECT_TRUE(cu.count(r * seq_len)) << "row boundary " << r;
  for (int64_t s = 0; s < b.batch.num_sequences(); ++s) {
    const int64_t begin = b.batch.cu_seqlens[s], end = b.batch.cu_seqlens[s + 1];
    for (int64_t t = begin; t < end; ++t) {
      EXPECT_EQ(b.targets[t], t + 1 < end ? b.batch.ids[t + 1] : kIgnoreTarget) << "token " << t;
      EXPECT_EQ(b.language[t], b.language[begin]);
    }
  }
}

struct StreamDocuments {
  std::vector<std::string> full;  // '#'-terminated documents in stream order
  std::vector<int16_t> language;  // language id of each full document
  std::string tail;               // text after the last '#'
};

// Decodes the bytes-tokenized stream, splits it into documents, and checks that sequence starts are exactly the
// row starts and the document starts.
inline StreamDocuments stream_documents(const PackedBatch& all, int64_t seq_len) {
  StreamDocuments out;
  std::string text(all.batch.ids.size(), '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(all.batch.ids[i]);
  std::set<int64_t> expected_starts;
  for (int64_t p = 0; p < all.batch.total_tokens(); p += seq_len) expected_starts.insert(p);
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '#') continue;
    out.full.push_back(text.substr(start, i + 1 - start));
    out.language.push_back(all.language[start]);
    for (size_t k = start; k <= i; ++k) EXPECT_EQ(all.language[k], all.language[start]);
    start = i + 1;
    if (start < text.size()) expected_starts.insert(static_cast<int64_t>(start));
  }
  out.tail = text.substr(start);
  const std::set<int64_t> starts(all.batch.cu_seqlens.begin(), all.batch.cu_seqlens.end() - 1);
  EXPECT_EQ(starts, expected_starts);
  return out;
}

}  // namespace hlm::test
