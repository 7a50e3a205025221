// NIAH sample generation (../shared/docs/evals.md §2; docs/niah.md): keys, values, needles at depths, the prompt.
//
// Sample i of (language, task, seed) draws from counter-based Philox (core/rng.h): key = seed, stream =
// rng_stream_id("niah/<code>/<task>"), index = i * 256 + draw number. The target length is NOT part of the counter, so
// sample i has the same keys, values, needle depths and haystack start at every length (a paired length sweep).
// Per sample:
//   - keys: task.keys distinct nouns of the language's list (plus one more, the query, for "none"), by a partial
//     Fisher-Yates shuffle;
//   - values: uniform 7-digit integers in [10^6, 10^7 - 1], task.values_per_key per key, all distinct within the
//     sample (a repeated value would be merged by the scorer's de-duplication);
//   - needles (one sentence per value) are shuffled, each gets a distinct depth drawn without replacement from the 40
//     evenly spaced percentages round(linspace(0, 100, 40)), insertion index floor(n_pieces * depth / 100); needles go
//     between haystack pieces in order of insertion index, everything joined by the language's joiner;
//   - the haystack starts at a uniformly drawn held-out sentence (OneRULER always starts at its book's beginning; a
//     drawn start gives different text per sample) and is sized by NiahHaystackSizer;
//   - query: for single / multikey / multivalue one key drawn among the keys; multiquery: both keys in drawn order;
//     none: the extra noun; expected = the queried keys' values in query order, or the none word.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "evals/niah/niah_haystack.h"
#include "evals/niah/niah_language.h"
#include "evals/niah/niah_task.h"

namespace hlm {

// round(linspace(0, 100, 40)): the needle depths in percent.
std::array<int, 40> niah_depths();

struct NiahNeedle {
  std::string key, value;
  int depth = 0;         // percent, one of niah_depths()
  int64_t position = 0;  // number of haystack pieces before the needle
};

struct NiahSample {
  int64_t index = 0;
  std::string lang, task;
  int64_t length = 0;                        // the haystack token target
  std::string prompt;
  std::vector<std::string> keys;             // the needle keys, in draw order
  std::vector<std::vector<std::string>> values;  // values[k]: the values of keys[k]
  std::vector<std::string> query;            // 1 or 2 queried keys
  std::vector<std::string> expected;         // gold values in query order, or {none word}
  std::vector<NiahNeedle> needles;           // in haystack order
  std::string haystack;                      // the haystack without needles (pieces joined)
  int64_t haystack_tokens = 0;
  int64_t prompt_tokens = 0;
};

class NiahGenerator {
 public:
  // `sentences`: the language's held-out sentences (niah_held_out_sentences); they and `tokenizer` must outlive
  // the generator.
  NiahGenerator(const NiahLanguage& lang, const std::vector<std::string>& sentences, const Tokenizer& tokenizer);

  NiahSample generate(const NiahTaskSpec& task, int64_t length, uint64_t seed, int64_t index);

  // Training only (train_data.value_digits_min, niah_experiment_config.h): with n < 7 each value has a digit count
  // drawn uniformly from [n, 7] (one extra draw per value), then a uniform integer of that many digits; 7 (the
  // default, OneRULER's and every evaluation's) draws exactly as before. Input error unless 2 <= n <= 7 (the
  // scorer drops 1-digit runs).
  void set_value_digits_min(int n);

  const NiahHaystackSizer& sizer() const { return sizer_; }

 private:
  const NiahLanguage& lang_;
  const Tokenizer& tokenizer_;
  std::vector<std::string> nouns_;
  NiahHaystackSizer sizer_;
  int value_digits_min_ = 7;
};

// {"index", "lang", "task", "length", "prompt", "keys", "values", "query", "expected", "needles": [{"key", "value",
// "depth", "position"}], "haystack_tokens", "prompt_tokens"} (the haystack text itself is left out).
nlohmann::json niah_sample_json(const NiahSample& s);

// "8000", "8k" (= 8000, as OneRULER's 8K), "128K": a positive token count; input error naming `option` otherwise.
int64_t niah_parse_length(const std::string& text, const std::string& option);

}  // namespace hlm
