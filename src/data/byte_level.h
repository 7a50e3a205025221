// GPT-2's byte-level alphabet, used by byte-level BPE tokenizers (Qwen3, Llama 3, DeepSeek-V3): every byte 0..255
// maps to one printable code point, so any byte string becomes a string of "visible" characters the vocabulary can
// hold. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map, in byte
// order, to U+0100, U+0101, ... (so ' ' -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A).
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace hlm {

struct ByteLevelAlphabet {
  std::array<char32_t, 256> byte_to_char;
  std::array<std::string, 256> byte_to_utf8;  // byte_to_char as UTF-8 (1 or 2 bytes)
};
const ByteLevelAlphabet& byte_level_alphabet();

// The byte-level image of `bytes` (each byte replaced by its code point, UTF-8 encoded).
std::string byte_level_encode(std::string_view bytes);

// The bytes a code point stands for, or nullopt when it is not in the alphabet.
std::optional<unsigned char> byte_level_char_to_byte(char32_t c);

// Inverse of byte_level_encode for one token: its bytes when every character is in the alphabet, else the token's
// own UTF-8 bytes unchanged (HF's ByteLevel decoder does the same for added tokens such as "<｜begin▁of▁sentence｜>").
std::string byte_level_decode_token(std::string_view token);

}  // namespace hlm
