// HF tokenizer.json normalizers: the text transform applied to every piece of input between added tokens, before
// pre-tokenization. Supported types (the field "type"): NFC, NFD, NFKC, NFKD (ICU), Replace (String or Regex pattern),
// Prepend, Sequence. A null normalizer is represented by nullptr. Unknown types are input errors naming the field.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace hlm {

class TextNormalizer {
 public:
  virtual ~TextNormalizer() = default;
  virtual void apply(std::string& text) const = 0;  // text: valid UTF-8 in and out
};

// `where` is the JSON path used in errors, e.g. "tokenizer.json: normalizer". Returns nullptr for JSON null.
std::unique_ptr<TextNormalizer> text_normalizer_from_json(const nlohmann::json& j, const std::string& where);

// NFC via ICU (also used by tests and tools that compare decode(encode(x)) with NFC(x)).
std::string unicode_nfc(const std::string& text);

}  // namespace hlm
