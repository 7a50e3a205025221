#include "data/pretokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "core/error.h"
#include "data/byte_level.h"
#include "data/pcre2_regex.h"
#include "data/tokenizer_json_fields.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct BehaviorName {
  std::string_view name;
  SplitBehavior behavior;
};
constexpr BehaviorName kBehaviors[] = {{"Removed", SplitBehavior::Removed},
                                       {"Isolated", SplitBehavior::Isolated},
                                       {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
                                       {"MergedWithNext", SplitBehavior::MergedWithNext},
                                       {"Contiguous", SplitBehavior::Contiguous}};

SplitBehavior parse_behavior(const std::string& name, const std::string& where) {
  for (const BehaviorName& b : kBehaviors)
    if (b.name == name) return b.behavior;
  throw_input_error(where, ".behavior \"", name,
                    "\" is not supported (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// A span of a piece and whether it is a match of the split pattern.
struct Span {
  size_t begin, end;
  bool is_match;
};

// Spans covering all of `text` from the matches (HF's Pattern::find_matches), flags flipped when `invert`.
void spans_from_matches(size_t size, const std::vector<RegexMatch>& matches, bool invert, std::vector<Span>& spans) {
  spans.clear();
  size_t prev = 0;
  for (const RegexMatch& m : matches) {
    if (m.begin > prev) spans.push_back({prev, m.begin, invert});
    spans.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < size || spans.empty()) spans.push_back({prev, size, invert});
}

// HF's NormalizedString::split: which spans become pieces under `behavior`, appended to `out` (empty ones dropped).
void split_by_behavior(const std::string& text, const std::vector<Span>& spans, SplitBehavior behavior,
                       std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) kept.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) kept.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) kept.back().second = s.end;
        else kept.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) kept.back().second = s.end;
        else kept.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().first = it->begin;
        else kept.emplace_back(it->begin, it->end);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [b, e] : kept)
    if (e > b) out.emplace_back(text, b, e - b);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const nlohmann::json& j, const std::string& where) {
    const JsonPattern p = json_pattern(j, where);
    if (p.is_regex) regex_ = std::make_unique<Pcre2Regex>(p.text, where + ".pattern");
    else literal_ = p.text;
    behavior_ = parse_behavior(json_string(j, "behavior", where), where);
    invert_ = json_bool(j, "invert", where, false);
  }
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 4);
    std::vector<RegexMatch> matches;
    std::vector<Span> spans;
    for (const std::string& piece : pieces) {
      matches.clear();
      if (regex_) {
        regex_->find_all(piece, matches);
      } else if (!literal_.empty()) {
        for (size_t pos = piece.find(literal_); pos != std::string::npos;
             pos = piece.find(literal_, pos + literal_.size()))
          matches.push_back({pos, pos + literal_.size()});
      }
      spans_from_matches(piece.size(), matches, invert_, spans);
      split_by_behavior(piece, spans, behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  std::unique_ptr<Pcre2Regex> regex_;
  std::string literal_;
  SplitBehavior behavior_ = SplitBehavior::Isolated;
  bool invert_ = false;
};

// GPT-2's word pattern, which ByteLevel applies when use_regex is true (HF's ByteLevel pre-tokenizer).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const nlohmann::json& j, const std::string& where) {
    add_prefix_space_ = json_bool(j, "add_prefix_space", where, true);
    if (json_bool(j, "use_regex", where, true)) regex_ = std::make_unique<Pcre2Regex>(kGpt2Pattern, where);
  }
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    std::vector<RegexMatch> matches;
    std::vector<Span> spans;
    for (std::string& piece : pieces) {
      if (add_prefix_space_ && piece.rfind(' ', 0) != 0) piece = " " + piece;
      if (regex_) {
        matches.clear();
        regex_->find_all(piece, matches);
        spans_from_matches(piece.size(), matches, false, spans);
        const size_t first = out.size();
        split_by_behavior(piece, spans, SplitBehavior::Isolated, out);
        for (size_t i = first; i < out.size(); ++i) out[i] = byte_level_encode(out[i]);
      } else if (!piece.empty()) {
        out.push_back(byte_level_encode(piece));
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_ = true;
  std::unique_ptr<Pcre2Regex> regex_;
};

// Splits out numeric characters (Unicode N: Rust's char::is_numeric): each on its own, or runs of them.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    std::vector<RegexMatch> matches;
    std::vector<Span> spans;
    for (const std::string& piece : pieces) {
      matches.clear();
      for (size_t pos = 0; pos < piece.size();) {
        const size_t begin = pos;
        const char32_t c = utf8_next(piece, pos);
        if (U_MASK(u_charType(static_cast<UChar32>(c))) & U_GC_N_MASK) matches.push_back({begin, pos});
      }
      spans_from_matches(piece.size(), matches, false, spans);
      split_by_behavior(piece, spans, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& pieces) const override {
    for (const auto& s : steps_) s->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = json_type(j, where);
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, where);
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(json_bool(j, "individual_digits", where, false));
  if (type == "Sequence") {
    const nlohmann::json& list = json_array(j, "pretokenizers", where);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = pre_tokenizer_from_json(list[i], str_cat(where, ".pretokenizers[", i, "]"));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  throw_input_error(where, ".type \"", type,
                    "\" is not supported (supported pre-tokenizers: Split, ByteLevel, Digits, Sequence)");
}

}  // namespace hlm
