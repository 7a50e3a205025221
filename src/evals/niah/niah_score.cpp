// NIAH scoring (see niah_score.h for the rules, which follow OneRULER's evaluate.py step by step).
#include "evals/niah/niah_score.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <set>

#include "core/error.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

std::u32string code_points(std::string_view text) {
  const std::string valid = utf8_lossy(text);  // model output may hold broken UTF-8: U+FFFD, as Python's "replace"
  std::u32string out;
  for (size_t pos = 0; pos < valid.size();) out += utf8_next(valid, pos);
  return out;
}

std::string utf8_of(const std::u32string& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

bool is_decimal_digit(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER; }

// Python's \w on str patterns: alphanumerics in str.isalnum()'s sense (letters, anything with a numeric type) or '_'.
bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  return c == U'_' || u_isalpha(u) || u_getIntPropertyValue(u, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

// Python's str.isspace(): White_Space characters.
bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

std::string lower_root(const std::string& text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Digit string (any script's Nd digits) -> ASCII decimal without leading zeros.
std::string integer_of(const std::u32string& digits) {
  std::string out;
  for (char32_t c : digits) {
    const int32_t v = u_charDigitValue(static_cast<UChar32>(c));
    if (out.empty() && v == 0) continue;
    out += static_cast<char>('0' + v);
  }
  return out.empty() ? "0" : out;
}

std::string gold_integer(const std::string& value) {
  size_t b = value.find_first_not_of(" \t\n");
  size_t e = value.find_last_not_of(" \t\n");
  HLM_CHECK_INPUT(b != std::string::npos, "NIAH expected value '", value, "' is not a decimal number");
  std::u32string digits;
  for (size_t i = b; i <= e; ++i) {
    HLM_CHECK_INPUT(value[i] >= '0' && value[i] <= '9', "NIAH expected value '", value, "' is not a decimal number");
    digits += static_cast<char32_t>(value[i]);
  }
  return integer_of(digits);
}

}  // namespace

std::string unicode_nfkc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFKCInstance(status);
  HLM_CHECK(U_SUCCESS(status) && n != nullptr, "ICU NFKC normalizer unavailable: ", u_errorName(status));
  const std::string valid = utf8_lossy(text);
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(valid.data(), static_cast<int32_t>(valid.size())));
  icu::UnicodeString out = n->normalize(u, status);
  HLM_CHECK(U_SUCCESS(status), "ICU NFKC failed: ", u_errorName(status));
  std::string s;
  out.toUTF8String(s);
  return s;
}

std::string niah_clean(std::string_view text) {
  std::u32string cps = code_points(text);
  size_t b = 0, e = cps.size();
  while (b < e && is_space(cps[b])) ++b;
  while (e > b && is_space(cps[e - 1])) --e;
  const std::string lowered = lower_root(utf8_of(cps.substr(b, e - b)));
  std::u32string kept;
  for (char32_t c : code_points(lowered))
    if (c != U'\u200C' && c != U' ') kept += c;
  return utf8_of(kept);
}

std::vector<std::string> niah_response_numbers(std::string_view response) {
  const std::u32string cps = code_points(unicode_nfkc(response));
  std::vector<std::u32string> runs;
  for (size_t i = 0; i < cps.size();) {
    if (!is_decimal_digit(cps[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && is_decimal_digit(cps[j])) ++j;
    if (j - i > 1) {  // one-digit runs are dropped
      const std::u32string run = cps.substr(i, j - i);
      bool seen = false;
      for (const std::u32string& r : runs) seen = seen || r == run;
      if (!seen) runs.push_back(run);  // de-duplication on the digit strings, first occurrence kept
    }
    i = j;
  }
  std::vector<std::string> out;
  for (const std::u32string& r : runs) out.push_back(integer_of(r));
  return out;
}

bool niah_score_numbers(const std::vector<std::string>& expected, std::string_view response,
                        const std::vector<std::string>& none_words) {
  HLM_CHECK_INPUT(!expected.empty(), "NIAH number task scored without expected values");
  std::set<std::string> gold;
  for (const std::string& v : expected) gold.insert(gold_integer(v));
  if (response.empty()) return false;
  const std::string text = unicode_nfkc(response);
  for (const std::string& word : none_words)
    if (text.find(word) != std::string::npos || text.find(niah_clean(word)) != std::string::npos) return false;
  const std::vector<std::string> numbers = niah_response_numbers(response);
  if (numbers.size() != expected.size()) return false;
  return std::set<std::string>(numbers.begin(), numbers.end()) == gold;
}

bool niah_score_none(std::string_view response, const std::vector<std::string>& none_words) {
  const std::u32string cleaned = code_points(niah_clean(unicode_nfkc(response)));
  std::u32string kept;  // isolated single digits (\b\d\b) deleted, boundaries judged on the cleaned text
  for (size_t i = 0; i < cleaned.size(); ++i) {
    const bool isolated = is_decimal_digit(cleaned[i]) && (i == 0 || !is_word_char(cleaned[i - 1])) &&
                          (i + 1 == cleaned.size() || !is_word_char(cleaned[i + 1]));
    if (!isolated) kept += cleaned[i];
  }
  const std::string text = utf8_of(kept);
  for (const std::string& word : none_words)
    if (text.find(niah_clean(word)) != std::string::npos) return true;
  return false;
}

bool niah_score(NiahTask task, const std::vector<std::string>& expected, std::string_view response,
                const std::vector<std::string>& none_words) {
  if (task == NiahTask::None) return niah_score_none(response, none_words);
  return niah_score_numbers(expected, response, none_words);
}

}  // namespace hlm
