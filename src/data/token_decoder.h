// HF tokenizer.json decoders: turn the token strings of a list of ids back into text. Each decoder maps a list of
// strings to a list of strings (HF's decode_chain); the final text is their concatenation.
// Supported types (field "type"): ByteLevel (byte-level alphabet -> bytes, invalid UTF-8 -> U+FFFD),
// Replace (String or Regex pattern), ByteFallback (<0xNN> runs -> bytes), Fuse, Strip, Sequence.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hlm {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// `where` names the field in errors ("tokenizer.json: decoder"). Returns nullptr for JSON null.
std::unique_ptr<TokenDecoder> token_decoder_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace hlm
