// Synthetic expressivity tasks (evals/synth/synth_task.h): every generator's answer against an independent
// recomputation from the encoded tokens (decoded here with the documented ids, not with synth_decode), structural
// invariants, determinism by key, the encoding round trip, and answer balance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "evals/synth/synth_task.h"

using namespace hlm;

namespace {

// The encoding as documented in synth_task.h, spelled out independently of SynthVocab.
constexpr int32_t kPad = 0, kInit = 1, kOps = 2, kQuery = 3, kBit0 = 4, kBit1 = 5, kVarA = 6, kAddr0 = 11;

struct Program {
  std::vector<int> bits;
  std::vector<int64_t> init;
  std::vector<std::pair<int, int>> swaps;
  int64_t query = -1;
};

// Reads the token ids back by hand; fails the test on any malformed token.
Program read_tokens(SynthTask task, const std::vector<int32_t>& t) {
  Program p;
  size_t i = 0;
  if (task != SynthTask::StateTracking)
    while (i < t.size() && (t[i] == kBit0 || t[i] == kBit1)) p.bits.push_back(t[i++] - kBit0);
  if (task == SynthTask::Recall) {
    EXPECT_EQ(t.size(), i + 2);
    EXPECT_EQ(t[i], kQuery);
    p.query = t[i + 1] - kAddr0;
    return p;
  }
  EXPECT_EQ(t[i++], kInit);
  for (int v = 0; v < 5; ++v) {
    EXPECT_EQ(t[i++], kVarA + v);
    EXPECT_GE(t[i], kAddr0);
    p.init.push_back(t[i++] - kAddr0);
  }
  EXPECT_EQ(t[i++], kOps);
  while (i + 2 < t.size()) {
    const int x = t[i] - kVarA, y = t[i + 1] - kVarA;
    EXPECT_TRUE(0 <= x && x < 5 && 0 <= y && y < 5) << "swap tokens " << t[i] << " " << t[i + 1];
    p.swaps.emplace_back(x, y);
    i += 2;
  }
  EXPECT_EQ(t[i++], kQuery);
  p.query = t[i] - kVarA;
  return p;
}

// The answer recomputed from the program alone: run the swaps on a copy of init.
int64_t recompute_answer(SynthTask task, const Program& p, bool* moved) {
  if (task == SynthTask::Recall) return p.bits.at(static_cast<size_t>(p.query));
  std::vector<int64_t> value = p.init;
  for (const auto& [x, y] : p.swaps) std::swap(value.at(static_cast<size_t>(x)), value.at(static_cast<size_t>(y)));
  const int64_t final_value = value.at(static_cast<size_t>(p.query));
  *moved = final_value != p.init.at(static_cast<size_t>(p.query));
  return task == SynthTask::StateTracking ? final_value : p.bits.at(static_cast<size_t>(final_value));
}

const SynthVocab kVocab{256};

void check_item(SynthTask task, int64_t n, int64_t m, const SynthItem& item) {
  SCOPED_TRACE(synth_item_json(item));
  EXPECT_EQ(static_cast<int64_t>(item.tokens.size()), synth_sequence_length(task, n, m));
  for (int32_t id : item.tokens) {
    EXPECT_NE(id, kPad);
    EXPECT_LT(id, kVocab.size());
  }
  const Program p = read_tokens(task, item.tokens);
  EXPECT_EQ(p.bits, item.bits);
  bool moved = false;
  const int64_t answer = recompute_answer(task, p, &moved);
  EXPECT_EQ(answer, item.answer);
  if (task != SynthTask::Recall) {
    EXPECT_EQ(moved, item.moved);
    EXPECT_EQ(static_cast<int64_t>(p.swaps.size()), n);
    EXPECT_EQ(p.swaps, item.swaps);
    EXPECT_EQ(p.query, item.query);
    for (const auto& [x, y] : p.swaps) EXPECT_NE(x, y);
    std::set<int64_t> distinct(p.init.begin(), p.init.end());
    EXPECT_EQ(distinct.size(), 5u) << "start values must be distinct";
    const int64_t pool = task == SynthTask::StateTracking ? 5 : m;
    for (int64_t v : p.init) EXPECT_TRUE(0 <= v && v < pool);
  } else {
    EXPECT_TRUE(0 <= p.query && p.query < m);
    EXPECT_EQ(static_cast<int64_t>(p.bits.size()), m);
  }
  // Answer token: the bit token, or the address token of the pointer value.
  EXPECT_EQ(item.answer_token, task == SynthTask::StateTracking ? kAddr0 + answer : kBit0 + answer);
}

}  // namespace

TEST(SynthTasks, AnswersMatchAnIndependentRecomputation) {
  for (uint64_t i = 0; i < 300; ++i) {
    const int64_t n = static_cast<int64_t>(i % 40), m = 5 + static_cast<int64_t>(i % 60);
    check_item(SynthTask::StateTracking, n, 0,
               synth_generate(SynthTask::StateTracking, n, 0, {3, SynthSplit::Train, i}, kVocab));
    check_item(SynthTask::Recall, 0, m, synth_generate(SynthTask::Recall, 0, m, {3, SynthSplit::Train, i}, kVocab));
    check_item(SynthTask::StateBasedRecall, n, m,
               synth_generate(SynthTask::StateBasedRecall, n, m, {3, SynthSplit::Eval, i}, kVocab));
  }
}

TEST(SynthTasks, DeterministicByKeyAndIndependentAcrossSplitsAndSeeds) {
  const SynthItem a = synth_generate(SynthTask::StateBasedRecall, 16, 32, {9, SynthSplit::Train, 5}, kVocab);
  const SynthItem b = synth_generate(SynthTask::StateBasedRecall, 16, 32, {9, SynthSplit::Train, 5}, kVocab);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.answer_token, b.answer_token);
  EXPECT_NE(a.tokens, synth_generate(SynthTask::StateBasedRecall, 16, 32, {9, SynthSplit::Eval, 5}, kVocab).tokens);
  EXPECT_NE(a.tokens, synth_generate(SynthTask::StateBasedRecall, 16, 32, {10, SynthSplit::Train, 5}, kVocab).tokens);
  EXPECT_NE(a.tokens, synth_generate(SynthTask::StateBasedRecall, 16, 32, {9, SynthSplit::Train, 6}, kVocab).tokens);
  // Train and eval samples of 500 items share (almost) no item at a difficulty with a huge item space.
  std::set<std::vector<int32_t>> train;
  for (uint64_t i = 0; i < 500; ++i)
    train.insert(synth_generate(SynthTask::Recall, 0, 64, {1, SynthSplit::Train, i}, kVocab).tokens);
  int shared = 0;
  for (uint64_t i = 0; i < 500; ++i)
    shared += static_cast<int>(train.count(synth_generate(SynthTask::Recall, 0, 64, {1, SynthSplit::Eval, i}, kVocab).tokens));
  EXPECT_EQ(shared, 0);
}

TEST(SynthTasks, EncodingRoundTripsThroughDecode) {
  for (SynthTask task : {SynthTask::StateTracking, SynthTask::Recall, SynthTask::StateBasedRecall}) {
    for (uint64_t i = 0; i < 50; ++i) {
      const SynthItem item = synth_generate(task, 7, 20, {2, SynthSplit::Train, i}, kVocab);
      const SynthItem back = synth_decode(task, item.tokens, kVocab);
      EXPECT_EQ(back.bits, item.bits);
      EXPECT_EQ(back.swaps, item.swaps);
      EXPECT_EQ(back.query, item.query);
      if (task != SynthTask::Recall) {
        EXPECT_EQ(back.init, item.init);
      }
    }
  }
  EXPECT_THROW(synth_decode(SynthTask::Recall, {kBit0, kBit1, kQuery}, kVocab), Error);
  EXPECT_THROW(synth_decode(SynthTask::StateTracking, {kInit, kVarA, kAddr0}, kVocab), Error);
}

TEST(SynthTasks, JsonLineCarriesTheIssueFields) {
  const auto j = nlohmann::json::parse(
      synth_item_json(synth_generate(SynthTask::StateBasedRecall, 3, 8, {0, SynthSplit::Train, 0}, kVocab)));
  for (const char* key : {"bits", "init", "swaps", "query", "answer", "tokens", "moved", "answer_token"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["swaps"].size(), 3u);
  EXPECT_EQ(j["swaps"][0].size(), 2u);
  const auto st = nlohmann::json::parse(
      synth_item_json(synth_generate(SynthTask::StateTracking, 3, 0, {0, SynthSplit::Train, 0}, kVocab)));
  EXPECT_FALSE(st.contains("bits"));
  EXPECT_EQ(st["init"].size(), 5u);
}

TEST(SynthTasks, AnswersAreBalancedAndNoUndoHolds) {
  // Over 4000 items a fair answer distribution stays within 5 standard deviations of uniform (false alarm ~1e-6).
  const int items = 4000;
  std::map<int64_t, int> recall, st;
  int moved = 0;
  for (uint64_t i = 0; i < static_cast<uint64_t>(items); ++i) {
    ++recall[synth_generate(SynthTask::Recall, 0, 32, {4, SynthSplit::Train, i}, kVocab).answer];
    const SynthItem s = synth_generate(SynthTask::StateTracking, 12, 0, {4, SynthSplit::Train, i}, kVocab, {true});
    ++st[s.answer];
    moved += s.moved;
    for (size_t k = 1; k < s.swaps.size(); ++k) {
      const auto [px, py] = s.swaps[k - 1];
      const auto [x, y] = s.swaps[k];
      EXPECT_FALSE((px == x && py == y) || (px == y && py == x)) << "no_undo violated";
    }
  }
  const double sd2 = 5 * std::sqrt(items * 0.25);
  EXPECT_NEAR(recall[1], items / 2.0, sd2);
  const double sd5 = 5 * std::sqrt(items * 0.2 * 0.8);
  ASSERT_EQ(st.size(), 5u);
  for (const auto& [value, count] : st) EXPECT_NEAR(count, items / 5.0, sd5) << "value " << value;
  EXPECT_GT(moved, items / 2);  // after 12 random swaps most queried pointers have moved
}

TEST(SynthTasks, BadSizesAreInputErrors) {
  EXPECT_THROW(synth_generate(SynthTask::StateBasedRecall, 3, 4, {}, kVocab), Error);   // m < 5 pointers
  EXPECT_THROW(synth_generate(SynthTask::Recall, 0, 0, {}, kVocab), Error);             // empty array
  EXPECT_THROW(synth_generate(SynthTask::Recall, 0, 300, {}, kVocab), Error);           // beyond max_address
  EXPECT_THROW(synth_generate(SynthTask::StateTracking, -1, 0, {}, kVocab), Error);
  EXPECT_THROW(synth_task_from_name("parity"), Error);
}

// V = 2: state tracking is parity. The answer is the queried pointer's start value after an even number of swaps and
// the other pointer's after an odd number.
TEST(SynthTasks, TwoVariablesMakeStateTrackingParity) {
  for (uint64_t i = 0; i < 200; ++i) {
    const int64_t n = static_cast<int64_t>(i % 13);
    const SynthItem s = synth_generate(SynthTask::StateTracking, n, 0, {5, SynthSplit::Train, i}, kVocab, {false, 2});
    ASSERT_EQ(s.init.size(), 2u);
    EXPECT_EQ(static_cast<int64_t>(s.tokens.size()), synth_sequence_length(SynthTask::StateTracking, n, 0, 2));
    const int64_t q = s.query;
    EXPECT_TRUE(q == 0 || q == 1);
    EXPECT_EQ(s.answer, s.init[static_cast<size_t>(n % 2 == 0 ? q : 1 - q)]);
    EXPECT_EQ(s.moved, n % 2 == 1);
    const SynthItem back = synth_decode(SynthTask::StateTracking, s.tokens, kVocab, 2);
    EXPECT_EQ(back.swaps, s.swaps);
    for (const auto& [x, y] : s.swaps) EXPECT_TRUE((x == 0 && y == 1) || (x == 1 && y == 0));
  }
  EXPECT_THROW(synth_generate(SynthTask::StateTracking, 3, 0, {}, kVocab, {false, 1}), Error);
  EXPECT_THROW(synth_generate(SynthTask::StateTracking, 3, 0, {}, kVocab, {false, 6}), Error);
}

// swap_delimiter: OPS before every pair, read back by hand (INIT (var addr)×5 (OPS x y)×n QUERY q), answers as the
// plain encoding's (same RNG draws: only the tokens differ), and synth_decode reads both encodings.
TEST(SynthTasks, SwapDelimiterPutsOpsBeforeEveryPair) {
  const SynthGenOptions delimited{.swap_delimiter = true};
  for (SynthTask task : {SynthTask::StateTracking, SynthTask::StateBasedRecall})
    for (int64_t n : {0, 1, 2, 7}) {
      const int64_t m = task == SynthTask::StateBasedRecall ? 9 : 0;
      for (uint64_t i = 0; i < 20; ++i) {
        const SynthItem plain = synth_generate(task, n, m, {3, SynthSplit::Train, i}, kVocab);
        const SynthItem item = synth_generate(task, n, m, {3, SynthSplit::Train, i}, kVocab, delimited);
        SCOPED_TRACE(synth_item_json(item));
        ASSERT_EQ(static_cast<int64_t>(item.tokens.size()), synth_sequence_length(task, n, m, 5, true));
        EXPECT_EQ(item.tokens.size(), plain.tokens.size() + static_cast<size_t>(std::max<int64_t>(n - 1, 0)));
        size_t p = static_cast<size_t>(m) + 1 + 10;  // bits, INIT, 5 (var addr) pairs
        for (int64_t s = 0; s < n; ++s) {
          EXPECT_EQ(item.tokens[p], kOps);
          EXPECT_EQ(item.tokens[p + 1], kVarA + item.swaps[static_cast<size_t>(s)].first);
          EXPECT_EQ(item.tokens[p + 2], kVarA + item.swaps[static_cast<size_t>(s)].second);
          p += 3;
        }
        if (n == 0) EXPECT_EQ(item.tokens[p++], kOps);
        EXPECT_EQ(item.tokens[p], kQuery);
        EXPECT_EQ(item.answer, plain.answer);
        EXPECT_EQ(item.swaps, plain.swaps);
        const SynthItem back = synth_decode(task, item.tokens, kVocab);
        EXPECT_EQ(back.swaps, item.swaps);
        EXPECT_EQ(back.init, item.init);
        EXPECT_EQ(back.query, item.query);
      }
    }
}
