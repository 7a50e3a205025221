// HF tokenizer.json tokenizers (BPE models): byte-level BPE (Qwen3, Llama 3, DeepSeek-V3) and SentencePiece-style
// BPE with byte fallback (Gemma 3). encode(text) gives the ids HF `tokenizers` gives for
// encode(text, add_special_tokens=False): added tokens split out first, the rest normalized, pre-tokenized and
// run through the BPE model; the post-processor (BOS/EOS templates) is never applied. decode(ids) is HF's
// decode(ids, skip_special_tokens=False). Text must be valid UTF-8 (input error otherwise).
// Read fields: added_tokens, normalizer, pre_tokenizer, model (type BPE), decoder; post_processor, truncation and
// padding are ignored. Unknown component types are input errors naming the field (docs/tokenizers.md).
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/added_tokens.h"
#include "data/bpe_model.h"
#include "data/pretokenizer.h"
#include "data/text_normalizer.h"
#include "data/token_decoder.h"
#include "data/tokenizer.h"

namespace hlm {

class JsonTokenizer final : public Tokenizer {
 public:
  // `config` is the parsed tokenizer.json; `name` is used in errors and returned by name().
  JsonTokenizer(const nlohmann::json& config, const std::string& name);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }  // largest id + 1 (model and added tokens)
  std::string name() const override { return name_; }

  // The token string of an id (added token content or vocabulary entry), nullopt when unknown.
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(const std::string& token) const;
  bool is_special(int32_t id) const;

 private:
  void encode_normalized_piece(std::string piece, std::vector<int32_t>& out) const;

  std::string name_;
  std::vector<AddedToken> added_;          // file order
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index into added_
  AddedTokenMatcher raw_matcher_;          // tokens with normalized == false, matched in the raw text
  AddedTokenMatcher normalized_matcher_;   // tokens with normalized == true, matched in normalized pieces
  std::unique_ptr<TextNormalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TokenDecoder> decoder_;
  int64_t vocab_size_ = 0;
};

// Reads and builds a tokenizer.json file (input errors: missing file, invalid JSON, unsupported components).
std::unique_ptr<JsonTokenizer> tokenizer_json_load(const std::filesystem::path& path);

}  // namespace hlm
