// NIAH haystacks: sentence rule, held-out sentences, sizing by exact token counts (see niah_haystack.h).
#include "evals/niah/niah_haystack.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "data/data_split.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

constexpr size_t kMinSentenceCodePoints = 8;

bool is_full_stop(char32_t c) {
  switch (c) {
    case U'.': case U'?': case U'!':
    case U'\u0964': case U'\u0965':                  // Devanagari danda, double danda
    case U'\u06D4': case U'\u061F':                  // Arabic full stop, question mark
    case U'\u1362': case U'\u1367':                  // Ethiopic full stop, question mark
    case U'\u17D4': case U'\u104B': case U'\u0F0D':  // Khmer khan, Myanmar section, Tibetan shad
    case U'\u0589':                                  // Armenian full stop
      return true;
    default:
      return false;
  }
}

bool is_cjk_stop(char32_t c) { return c == U'\u3002' || c == U'\uFF01' || c == U'\uFF1F'; }

bool is_closer(char32_t c) {
  switch (c) {
    case U'"': case U'\'': case U')': case U']': case U'\u201D': case U'\u2019': case U'\u00BB':
    case U'\u300D': case U'\u300F': case U'\uFF09': case U'\u300B': case U'\u3009':
      return true;
    default:
      return false;
  }
}

// One line, whitespace runs collapsed to one space, ends trimmed.
std::u32string collapse(std::string_view line) {
  std::u32string out;
  bool pending_space = false;
  for (size_t pos = 0; pos < line.size();) {
    const char32_t c = utf8_next(line, pos);
    if (u_isUWhiteSpace(static_cast<UChar32>(c))) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += U' ';
    pending_space = false;
    out += c;
  }
  return out;
}

bool keep_sentence(const std::u32string& s) {
  if (s.size() < kMinSentenceCodePoints) return false;
  size_t e = s.size();
  while (e > 0 && is_closer(s[e - 1])) --e;
  return e > 0 && (is_full_stop(s[e - 1]) || is_cjk_stop(s[e - 1]));
}

void add_sentence(const std::u32string& s, std::vector<std::string>& out) {
  if (!keep_sentence(s)) return;
  std::string utf8;
  for (char32_t c : s) utf8_append(utf8, c);
  out.push_back(std::move(utf8));
}

}  // namespace

std::vector<std::string> niah_split_sentences(std::string_view document) {
  std::vector<std::string> out;
  std::string_view rest = document;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::u32string line = collapse(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    size_t begin = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const bool cjk = is_cjk_stop(line[i]);
      if (!cjk && !is_full_stop(line[i])) continue;
      size_t j = i + 1;
      while (j < line.size() && is_closer(line[j])) ++j;
      if (j < line.size() && line[j] == U' ') {
        add_sentence(line.substr(begin, j - begin), out);
        begin = j + 1;
      } else if (cjk) {
        add_sentence(line.substr(begin, j - begin), out);
        begin = j;
      }
      i = j - 1;
    }
    if (begin < line.size()) add_sentence(line.substr(begin), out);
  }
  return out;
}

NiahSplit niah_split_from_name(const std::string& name) {
  if (name == "valid") return NiahSplit::Valid;
  if (name == "test") return NiahSplit::Test;
  if (name == "both") return NiahSplit::Both;
  throw_input_error("--split ", name, ": expected valid, test or both");
}

std::vector<std::string> niah_held_out_sentences(const Corpus& corpus, const std::string& code, int64_t held_out_docs,
                                                 NiahSplit split) {
  HLM_CHECK_INPUT(held_out_docs >= 1, "--held-out-docs must be positive (got ", held_out_docs, ")");
  const CorpusDocuments docs = corpus.read_documents(code);
  const DocumentSplit s = split_documents(code, static_cast<int64_t>(docs.texts.size()), held_out_docs);
  std::vector<int64_t> order;
  if (split != NiahSplit::Test) order.insert(order.end(), s.valid.begin(), s.valid.end());
  if (split != NiahSplit::Valid) order.insert(order.end(), s.test.begin(), s.test.end());
  HLM_CHECK_INPUT(!order.empty(), "corpus ", corpus.dir().string(), ": language ", code,
                  " has no held-out document in the chosen split (", docs.texts.size(),
                  " documents, --held-out-docs ", held_out_docs, ")");
  std::vector<std::string> out;
  for (int64_t d : order) {
    std::vector<std::string> part = niah_split_sentences(docs.texts[static_cast<size_t>(d)]);
    for (std::string& p : part) out.push_back(std::move(p));
  }
  HLM_CHECK_INPUT(!out.empty(), "corpus ", corpus.dir().string(), ": the held-out documents of ", code,
                  " hold no sentence (a line piece of >= 8 characters ending with a full stop)");
  return out;
}

NiahHaystackSizer::NiahHaystackSizer(const std::vector<std::string>& sentences, const Tokenizer& tokenizer,
                                     std::string joiner)
    : sentences_(sentences), tokenizer_(tokenizer), joiner_(std::move(joiner)),
      sentence_tokens_(sentences.size(), -1) {
  HLM_CHECK(!sentences_.empty(), "NIAH haystack sizer without sentences");
}

int64_t NiahHaystackSizer::count_tokens(std::string_view text) const {
  ++encodes_;
  return static_cast<int64_t>(tokenizer_.encode(text).size());
}

const std::string& NiahHaystackSizer::sentence(size_t start, int64_t i) const {
  return sentences_[(start + static_cast<size_t>(i)) % sentences_.size()];
}

int64_t NiahHaystackSizer::sentence_tokens(size_t index) {
  int32_t& n = sentence_tokens_[index];
  if (n < 0) n = static_cast<int32_t>(tokenizer_.encode(joiner_ + sentences_[index]).size());
  return n;
}

std::string NiahHaystackSizer::joined(size_t start, int64_t k) const {
  std::string out;
  for (int64_t i = 0; i < k; ++i) {
    if (i > 0) out += joiner_;
    out += sentence(start, i);
  }
  return out;
}

NiahHaystack NiahHaystackSizer::build(size_t start, int64_t target_tokens) {
  HLM_CHECK_INPUT(target_tokens >= 1, "NIAH haystack target must be positive (got ", target_tokens, ")");
  start %= sentences_.size();
  std::map<int64_t, int64_t> memo{{0, 0}};
  auto f = [&](int64_t k) {
    auto it = memo.find(k);
    if (it == memo.end()) it = memo.emplace(k, count_tokens(joined(start, k))).first;
    return it->second;
  };
  // Estimate from per-sentence counts (cached), then exact: gallop to a bracket f(lo) <= target < f(hi), bisect.
  int64_t k_est = 0;
  for (int64_t sum = 0;; ++k_est) {
    sum += sentence_tokens((start + static_cast<size_t>(k_est)) % sentences_.size());
    if (sum > target_tokens) break;
  }
  int64_t lo = 0, hi = 0;
  if (f(k_est) <= target_tokens) {
    lo = k_est;
    for (int64_t step = 1;; step *= 2) {
      hi = lo + step;
      if (f(hi) > target_tokens) break;
      lo = hi;
    }
  } else {
    hi = k_est;
    for (int64_t step = 1;; step *= 2) {
      lo = std::max<int64_t>(0, hi - step);
      if (f(lo) <= target_tokens) break;
      hi = lo;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (f(mid) <= target_tokens ? lo : hi) = mid;
  }

  NiahHaystack out;
  for (int64_t i = 0; i < lo; ++i) out.pieces.push_back(sentence(start, i));
  out.tokens = f(lo);
  if ((target_tokens - out.tokens) * 200 <= target_tokens) return out;

  // Cut the next sentence to its longest prefix that still fits: at a space first; if the gap is still over 0.5 %
  // (a long word at a small target), at a code point inside the following word. Chinese (joiner "") cuts at code
  // points from the start.
  const std::string& next = sentence(start, lo);
  const std::string base = joined(start, lo) + (lo > 0 ? joiner_ : "");
  size_t cut = 0;  // bytes of `next` kept
  int64_t cut_tokens = out.tokens;
  // Largest candidate prefix length (increasing list) whose haystack fits; updates cut / cut_tokens.
  auto fit = [&](const std::vector<size_t>& candidates) {
    int64_t a = 0, b = static_cast<int64_t>(candidates.size()) - 1;
    while (a <= b) {
      const int64_t mid = a + (b - a) / 2;
      const size_t len = candidates[static_cast<size_t>(mid)];
      const int64_t t = count_tokens(base + next.substr(0, len));
      if (t <= target_tokens) {
        cut = len;
        cut_tokens = t;
        a = mid + 1;
      } else {
        b = mid - 1;
      }
    }
  };
  auto code_point_ends = [&](size_t from, size_t to) {  // prefix lengths ending at a code point in (from, to)
    std::vector<size_t> ends;
    for (size_t pos = from; pos < to;) {
      utf8_next(next, pos);
      if (pos < to) ends.push_back(pos);
    }
    return ends;
  };
  if (joiner_.empty()) {
    fit(code_point_ends(0, next.size()));
  } else {
    std::vector<size_t> spaces;
    for (size_t pos = next.find(' '); pos != std::string::npos; pos = next.find(' ', pos + 1)) spaces.push_back(pos);
    fit(spaces);
    if ((target_tokens - cut_tokens) * 200 > target_tokens) {
      const size_t word_begin = cut == 0 ? 0 : cut + 1;  // after the space that ends the kept prefix
      const size_t word_end = std::min(next.find(' ', word_begin), next.size());
      fit(code_point_ends(word_begin, word_end));
    }
  }
  if (cut > 0) {
    out.pieces.push_back(next.substr(0, cut));
    out.tokens = cut_tokens;
    out.last_cut = true;
  }
  return out;
}

}  // namespace hlm
