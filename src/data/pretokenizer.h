// HF tokenizer.json pre-tokenizers: split each normalized piece of text into "words" the model encodes one by one.
// Supported types (field "type"): Split (String or Regex pattern; behavior Removed, Isolated, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex with GPT-2's pattern; maps bytes to
// the byte-level alphabet), Digits (individual_digits), Sequence. Empty pieces are dropped, as HF does.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hlm {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` (valid UTF-8 each) with their splits, in order.
  virtual void apply(std::vector<std::string>& pieces) const = 0;
};

// `where` names the field in errors, e.g. "tokenizer.json: pre_tokenizer". Returns nullptr for JSON null.
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace hlm
