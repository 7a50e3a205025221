#include "data/byte_level.h"

#include "data/unicode_text.h"

namespace hlm {

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet table = [] {
    ByteLevelAlphabet t{};
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t.byte_to_char[b] = printable ? static_cast<char32_t>(b) : next_extra++;
      utf8_append(t.byte_to_utf8[b], t.byte_to_char[b]);
    }
    return t;
  }();
  return table;
}

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelAlphabet& t = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t.byte_to_utf8[b];
  return out;
}

std::optional<unsigned char> byte_level_char_to_byte(char32_t c) {
  // Inverse table over the code points U+0000..U+0143 the alphabet uses.
  static const std::array<int, 0x144> inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    const ByteLevelAlphabet& t = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) inv[t.byte_to_char[b]] = b;
    return inv;
  }();
  if (c >= inverse.size() || inverse[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(inverse[c]);
}

std::string byte_level_decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const std::optional<unsigned char> b = byte_level_char_to_byte(utf8_next(token, pos));
    if (!b) return std::string(token);
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace hlm
