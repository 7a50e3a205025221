// Tokenization inflation on parallel text (seed §4): for each tokenizer and language X, the tokens of X's side
// summed over the units that hold both X and English, divided by the tokens of the English side of the same units.
// Both sides are NFC-normalised before encoding (UDHR stores some languages decomposed, and tokenizers without an
// NFC normalizer would otherwise count combining marks separately). No special tokens are added.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "analysis/svg_chart.h"
#include "data/parallel_set.h"
#include "data/tokenizer.h"

namespace hlm {

struct TokStatsRow {
  std::string tokenizer;   // label (see tokstats_label)
  std::string lang;        // language code of the set
  int64_t units = 0;       // units holding both lang and eng_Latn
  int64_t tokens = 0;      // tokens of lang over those units
  int64_t eng_tokens = 0;  // tokens of eng_Latn over the same units
  double ratio = 0.0;      // tokens / eng_tokens
};

struct TokStatsTokenizer {
  std::string label;
  const Tokenizer* tokenizer;
};

// langs empty: every language of the set except English, in first-seen order. Input errors: no eng_Latn in the set, a
// requested language the set lacks or that shares no unit with English, English text that encodes to no tokens.
// Rows: tokenizer-major, then language in `langs` order. on_progress (optional) is called after each tokenizer.
std::vector<TokStatsRow> tokstats_compute(const ParallelSet& set, const std::vector<TokStatsTokenizer>& tokenizers,
                                          std::vector<std::string> langs,
                                          const std::function<void(const std::string&)>& on_progress = {});

// A short label for a tokenizer spec: "bytes"; ".../qwen3/tokenizer.json" -> "qwen3"; "x/my.json" -> "my".
std::string tokstats_label(const std::string& spec);

std::string tokstats_csv(const std::vector<TokStatsRow>& rows);       // header + one line per row
std::string tokstats_markdown(const std::vector<TokStatsRow>& rows);  // languages x tokenizers table of ratios
BarChart tokstats_chart(const std::vector<TokStatsRow>& rows, const std::string& set_name);

}  // namespace hlm
