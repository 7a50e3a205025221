// NIAH sample generation (see niah_generate.h for the draws and the layout).
#include "evals/niah/niah_generate.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/rng.h"

namespace hlm {
namespace {

constexpr uint64_t kDrawsPerSample = 256;

// Uniform integers from Philox words at (seed, stream, index * 256 + n); bias of the modulo < n / 2^64.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream, int64_t index)
      : seed_(seed), stream_(stream), base_(static_cast<uint64_t>(index) * kDrawsPerSample) {}
  uint64_t uniform(uint64_t n) {
    HLM_CHECK(n > 0 && next_ < kDrawsPerSample, "NIAH draw budget exceeded");
    const std::array<uint32_t, 4> w = philox4x32(seed_, stream_, base_ + next_++);
    return ((static_cast<uint64_t>(w[0]) << 32) | w[1]) % n;
  }

 private:
  uint64_t seed_, stream_, base_, next_ = 0;
};

// The first `m` entries of `items` become a uniform sample without replacement (partial Fisher-Yates).
template <typename T>
void partial_shuffle(std::vector<T>& items, size_t m, Draws& d) {
  for (size_t i = 0; i < m; ++i) std::swap(items[i], items[i + d.uniform(items.size() - i)]);
}

std::string join(const std::vector<std::string>& parts, const std::string& joiner) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? joiner : "") + parts[i];
  return out;
}

}  // namespace

std::array<int, 40> niah_depths() {
  std::array<int, 40> d{};  // 100 i / 39 is never a tie at .5 for 0 < i < 39, so round-half-even = lround
  for (int i = 0; i < 40; ++i) d[static_cast<size_t>(i)] = static_cast<int>(std::lround(100.0 * i / 39.0));
  return d;
}

NiahGenerator::NiahGenerator(const NiahLanguage& lang, const std::vector<std::string>& sentences,
                             const Tokenizer& tokenizer)
    : lang_(lang), tokenizer_(tokenizer), nouns_(niah_nouns(lang)), sizer_(sentences, tokenizer, std::string(lang.joiner)) {}

void NiahGenerator::set_value_digits_min(int n) {
  HLM_CHECK_INPUT(n >= 2 && n <= 7, "NIAH value digits: the minimum must be in [2, 7] (got ", n, ")");
  value_digits_min_ = n;
}

NiahSample NiahGenerator::generate(const NiahTaskSpec& task, int64_t length, uint64_t seed, int64_t index) {
  HLM_CHECK_INPUT(length >= 1, "NIAH length must be positive (got ", length, ")");
  HLM_CHECK_INPUT(index >= 0, "NIAH sample index must be non-negative");
  const std::string stream_name = "niah/" + std::string(lang_.code) + "/" + std::string(task.name);
  Draws d(seed, rng_stream_id(stream_name.c_str()), index);
  NiahSample s;
  s.index = index;
  s.lang = lang_.code;
  s.task = task.name;
  s.length = length;

  // Keys (and, for "none", the absent noun that is queried).
  const size_t drawn = static_cast<size_t>(task.keys) + (task.query_present ? 0 : 1);
  HLM_CHECK(nouns_.size() >= drawn, "language ", lang_.code, " has only ", nouns_.size(), " nouns");
  std::vector<std::string> nouns = nouns_;
  partial_shuffle(nouns, drawn, d);
  s.keys.assign(nouns.begin(), nouns.begin() + task.keys);

  // Values: distinct 7-digit integers (training with value_digits_min_ < 7: 2 to 7 digits).
  std::set<uint64_t> used;
  for (int k = 0; k < task.keys; ++k) {
    s.values.emplace_back();
    for (int v = 0; v < task.values_per_key; ++v) {
      uint64_t x;
      do {
        const int digits =
            value_digits_min_ < 7 ? value_digits_min_ + static_cast<int>(d.uniform(8 - value_digits_min_)) : 7;
        uint64_t low = 1;
        for (int i = 1; i < digits; ++i) low *= 10;
        x = low + d.uniform(9 * low);
      } while (!used.insert(x).second);
      s.values.back().push_back(std::to_string(x));
    }
  }

  // Needles, shuffled, at distinct depths.
  std::vector<NiahNeedle> needles;
  for (int k = 0; k < task.keys; ++k)
    for (const std::string& v : s.values[static_cast<size_t>(k)]) needles.push_back({s.keys[static_cast<size_t>(k)], v});
  for (size_t i = needles.size(); i > 1; --i) std::swap(needles[i - 1], needles[d.uniform(i)]);
  const std::array<int, 40> all_depths = niah_depths();
  std::vector<int> depths(all_depths.begin(), all_depths.end());
  partial_shuffle(depths, needles.size(), d);

  // Haystack.
  const size_t start = static_cast<size_t>(d.uniform(std::numeric_limits<uint32_t>::max()));
  const NiahHaystack hay = sizer_.build(start, length);
  const std::string joiner(lang_.joiner);
  s.haystack = join(hay.pieces, joiner);
  s.haystack_tokens = hay.tokens;

  // Insertion positions sorted; the shuffled needles fill them in order (as OneRULER does).
  const auto n_pieces = static_cast<int64_t>(hay.pieces.size());
  std::vector<std::pair<int64_t, int>> slots;  // (position, depth)
  for (size_t i = 0; i < needles.size(); ++i) slots.push_back({n_pieces * depths[i] / 100, depths[i]});
  std::sort(slots.begin(), slots.end());
  for (size_t i = 0; i < needles.size(); ++i) {
    needles[i].position = slots[i].first;
    needles[i].depth = slots[i].second;
  }
  std::vector<std::string> items;
  size_t next_needle = 0;
  for (int64_t p = 0; p <= n_pieces; ++p) {
    for (; next_needle < needles.size() && needles[next_needle].position == p; ++next_needle)
      items.push_back(niah_needle(lang_, needles[next_needle].key, needles[next_needle].value));
    if (p < n_pieces) items.push_back(hay.pieces[static_cast<size_t>(p)]);
  }
  s.needles = needles;

  // Query and gold answer.
  if (!task.query_present) {
    s.query = {nouns[static_cast<size_t>(task.keys)]};
    s.expected = {std::string(lang_.none_word)};
  } else {
    std::vector<size_t> order(static_cast<size_t>(task.keys));
    std::iota(order.begin(), order.end(), 0);
    partial_shuffle(order, static_cast<size_t>(task.queries), d);
    for (int q = 0; q < task.queries; ++q) {
      const size_t k = order[static_cast<size_t>(q)];
      s.query.push_back(s.keys[k]);
      for (const std::string& v : s.values[k]) s.expected.push_back(v);
    }
  }

  s.prompt = niah_prompt(lang_, join(items, joiner), s.query);
  s.prompt_tokens = static_cast<int64_t>(tokenizer_.encode(s.prompt).size());
  return s;
}

nlohmann::json niah_sample_json(const NiahSample& s) {
  nlohmann::json needles = nlohmann::json::array();
  for (const NiahNeedle& n : s.needles)
    needles.push_back({{"key", n.key}, {"value", n.value}, {"depth", n.depth}, {"position", n.position}});
  return {{"index", s.index},       {"lang", s.lang},
          {"task", s.task},         {"length", s.length},
          {"prompt", s.prompt},     {"keys", s.keys},
          {"values", s.values},     {"query", s.query},
          {"expected", s.expected}, {"needles", needles},
          {"haystack_tokens", s.haystack_tokens}, {"prompt_tokens", s.prompt_tokens}};
}

int64_t niah_parse_length(const std::string& text, const std::string& option) {
  std::string digits = text;
  int64_t scale = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    digits.pop_back();
    scale = 1000;
  }
  const bool ok = !digits.empty() && digits.size() <= 12 &&
                  std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  HLM_CHECK_INPUT(ok && std::stoll(digits) > 0, option, " ", text,
                  ": expected a positive token count such as 8000 or 8k (k = 1000, as OneRULER's 8K)");
  return std::stoll(digits) * scale;
}

}  // namespace hlm
