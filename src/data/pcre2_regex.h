// A compiled PCRE2 pattern in UTF + UCP mode (JIT-compiled when the platform allows) and its non-overlapping matches.
// HF `tokenizers` runs its patterns with Oniguruma, whose Unicode \s is [\t-\r\x{85}\p{Z}]; PCRE2's UCP \s lacks
// U+0085, so patterns are translated first (hf_regex_to_pcre2) to match Oniguruma exactly.
// Thread-safe: the compiled code is shared read-only; match data and the JIT stack are per thread.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hlm {

// Rewrites \s and \S (outside and inside character classes) to Oniguruma's Unicode whitespace set.
std::string hf_regex_to_pcre2(std::string_view pattern);

struct RegexMatch {
  size_t begin, end;  // byte offsets, [begin, end)
};

class Pcre2Regex {
 public:
  // `pattern` in HF/Oniguruma syntax; `what` names it in errors (e.g. "tokenizer.json: pre_tokenizer.pattern").
  Pcre2Regex(std::string_view pattern, const std::string& what);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Appends the non-overlapping matches in `text` (valid UTF-8), left to right, to `out`. An empty match is not
  // reported; the scan then moves on by one character (as Oniguruma's find_iter does).
  void find_all(std::string_view text, std::vector<RegexMatch>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string what_;
};

}  // namespace hlm
