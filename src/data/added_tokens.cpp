#include "data/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "data/unicode_text.h"

namespace hlm {
namespace {

// Rust regex \w (Unicode): Alphabetic, marks, decimal numbers, connector punctuation, join controls.
bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || (U_MASK(u_charType(u)) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

bool is_white_space(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

}  // namespace

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& ch = nodes_[node].children;
  const auto it = std::lower_bound(ch.begin(), ch.end(), byte, [](const auto& p, unsigned char b) { return p.first < b; });
  return it != ch.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  tokens_ = tokens;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (patterns[t].empty()) continue;
    int32_t node = 0;
    for (unsigned char b : patterns[t]) {
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        auto& ch = nodes_[node].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char x) { return p.first < x; }),
                  {b, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    // The same pattern twice: the first token keeps it (aho-corasick reports the lowest pattern index).
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
  for (int b = 0; b < 256; ++b) root_children_[b] = child(0, static_cast<unsigned char>(b));
}

void AddedTokenMatcher::split(std::string_view text, std::vector<AddedTokenSegment>& out) const {
  size_t done = 0;  // end of the last emitted segment
  size_t pos = 0;
  while (pos < text.size() && !empty()) {
    int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
    if (node < 0) {
      ++pos;
      continue;
    }
    // Longest pattern starting at pos.
    int32_t found = nodes_[node].token;
    size_t found_end = pos + 1;
    for (size_t k = pos + 1; k < text.size(); ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        found = nodes_[node].token;
        found_end = k + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[found];
    size_t start = pos, stop = found_end;
    pos = found_end;  // the next search starts after this match, even when single_word discards it
    if (token.single_word) {
      size_t p = start, q = stop;
      const bool space_before = start == 0 || !is_word_char(utf8_prev(text, p));
      const bool space_after = stop == text.size() || !is_word_char(utf8_next(text, q));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t p = start;
      while (p > done) {
        size_t q = p;
        if (!is_white_space(utf8_prev(text, q))) break;
        p = q;
      }
      start = p;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!is_white_space(utf8_next(text, q))) break;
        stop = q;
      }
      pos = std::max(pos, stop);
    }
    if (start > done) out.push_back({-1, done, start});
    out.push_back({token.id, start, stop});
    done = stop;
  }
  if (done < text.size() || text.empty()) out.push_back({-1, done, text.size()});
}

}  // namespace hlm
