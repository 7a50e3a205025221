// Small UTF-8 helpers for the tokenizer pipeline. Inputs are valid UTF-8 (the tokenizer checks text once on entry
// with utf8_first_invalid), except utf8_lossy, which repairs arbitrary bytes the way Rust's from_utf8_lossy does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hlm {

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for continuation or invalid bytes).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at text[pos] (valid UTF-8) and advances pos past it.
inline char32_t utf8_next(std::string_view text, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char lead = b(0);
  char32_t c;
  size_t n = utf8_sequence_length(lead);
  if (n > text.size() - pos) n = 1;  // defensive: truncated sequence read as one byte
  switch (n) {
    case 1: c = lead; break;
    case 2: c = ((lead & 0x1Fu) << 6) | (b(1) & 0x3Fu); break;
    case 3: c = ((lead & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu); break;
    default: c = ((lead & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu); break;
  }
  pos += n;
  return c;
}

// Decodes the code point that ends at text[pos - 1] (valid UTF-8) and moves pos back to its first byte.
inline char32_t utf8_prev(std::string_view text, size_t& pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t p = start;
  const char32_t c = utf8_next(text, p);
  pos = start;
  return c;
}

inline void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// `bytes` with every maximal ill-formed subsequence replaced by one U+FFFD (Unicode's "maximal subpart" practice,
// as Rust's String::from_utf8_lossy and so HF's decoders do).
std::string utf8_lossy(std::string_view bytes);

}  // namespace hlm
