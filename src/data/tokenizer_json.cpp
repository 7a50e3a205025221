#include "data/tokenizer_json.h"

#include <algorithm>

#include "core/error.h"
#include "data/text_io.h"
#include "data/tokenizer_json_fields.h"
#include "models/json_file.h"

namespace hlm {
namespace {

std::vector<AddedToken> read_added_tokens(const nlohmann::json& config, const std::string& where) {
  std::vector<AddedToken> tokens;
  const auto it = config.find("added_tokens");
  if (it == config.end() || it->is_null()) return tokens;
  HLM_CHECK_INPUT(it->is_array(), where, ".added_tokens: expected an array, got ", it->type_name());
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& t = (*it)[i];
    const std::string at = str_cat(where, ".added_tokens[", i, "]");
    HLM_CHECK_INPUT(t.is_object(), at, ": expected an object");
    AddedToken a;
    const auto id = t.find("id");
    HLM_CHECK_INPUT(id != t.end() && id->is_number_integer() && id->get<int64_t>() >= 0 &&
                        id->get<int64_t>() < kTokenizerMaxVocab,
                    at, ".id: expected a non-negative integer below 2^24 (the vocabulary limit)");
    a.id = id->get<int32_t>();
    a.content = json_string(t, "content", at);
    a.special = json_bool(t, "special", at, false);
    a.single_word = json_bool(t, "single_word", at, false);
    a.lstrip = json_bool(t, "lstrip", at, false);
    a.rstrip = json_bool(t, "rstrip", at, false);
    a.normalized = json_bool(t, "normalized", at, !a.special);
    HLM_CHECK_INPUT(!a.content.empty(), at, ".content: empty");
    HLM_CHECK_INPUT(utf8_first_invalid(a.content) == std::string::npos, at, ".content: invalid UTF-8");
    tokens.push_back(std::move(a));
  }
  return tokens;
}

}  // namespace

JsonTokenizer::JsonTokenizer(const nlohmann::json& config, const std::string& name) : name_(name) {
  const std::string& where = name;
  HLM_CHECK_INPUT(config.is_object(), where, ": expected a JSON object at the top level");
  const auto model = config.find("model");
  HLM_CHECK_INPUT(model != config.end() && model->is_object(), where, ": missing field \"model\" (an object)");
  const std::string model_type = model->contains("type") ? json_type(*model, where + ".model") : "BPE";
  HLM_CHECK_INPUT(model_type == "BPE", where, ".model.type \"", model_type,
                  "\" is not supported (supported models: BPE; WordPiece, Unigram and WordLevel are not)");
  model_ = std::make_unique<BpeModel>(*model, where + ".model");

  const auto component = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    const auto it = config.find(key);
    return it == config.end() ? kNull : *it;
  };
  normalizer_ = text_normalizer_from_json(component("normalizer"), where + ": normalizer");
  pre_tokenizer_ = pre_tokenizer_from_json(component("pre_tokenizer"), where + ": pre_tokenizer");
  decoder_ = token_decoder_from_json(component("decoder"), where + ": decoder");

  added_ = read_added_tokens(config, where);
  for (size_t i = 0; i < added_.size(); ++i) added_by_id_.emplace(added_[i].id, i);  // first entry of an id wins
  // HF matches special tokens first, then the others; within each group file order (the first of two equal
  // patterns wins).
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (int pass = 0; pass < 2; ++pass) {
    for (const AddedToken& a : added_) {
      if (a.special != (pass == 0)) continue;
      if (a.normalized) {
        std::string pattern = a.content;
        if (normalizer_) normalizer_->apply(pattern);
        normalized.push_back(a);
        normalized_patterns.push_back(std::move(pattern));
      } else {
        raw.push_back(a);
        raw_patterns.push_back(a.content);
      }
    }
  }
  raw_matcher_.build(raw, raw_patterns);
  normalized_matcher_.build(normalized, normalized_patterns);

  int64_t max_id = model_->max_id();
  for (const AddedToken& a : added_) max_id = std::max<int64_t>(max_id, a.id);
  vocab_size_ = max_id + 1;
}

std::vector<int32_t> JsonTokenizer::encode(std::string_view text) const {
  const size_t bad = utf8_first_invalid(text);
  HLM_CHECK_INPUT(bad == std::string::npos, name_, ": cannot encode text with invalid UTF-8 at byte ", bad);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<AddedTokenSegment> segments;
  raw_matcher_.split(text, segments);
  for (const AddedTokenSegment& s : segments) {
    if (s.id >= 0) ids.push_back(s.id);
    else if (s.end > s.begin) encode_normalized_piece(std::string(text.substr(s.begin, s.end - s.begin)), ids);
  }
  return ids;
}

void JsonTokenizer::encode_normalized_piece(std::string piece, std::vector<int32_t>& out) const {
  if (normalizer_) normalizer_->apply(piece);
  if (piece.empty()) return;
  std::vector<AddedTokenSegment> segments;
  normalized_matcher_.split(piece, segments);
  std::vector<std::string> words;
  for (const AddedTokenSegment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    if (s.end == s.begin) continue;
    words.assign(1, piece.substr(s.begin, s.end - s.begin));
    if (pre_tokenizer_) pre_tokenizer_->apply(words);
    for (const std::string& w : words) model_->tokenize(w, out);
  }
}

std::optional<std::string> JsonTokenizer::id_to_token(int32_t id) const {
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

std::optional<int32_t> JsonTokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& a : added_)  // rare (CLI, tests): a scan is enough
    if (a.content == token) return a.id;
  return model_->token_to_id(token);
}

bool JsonTokenizer::is_special(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

std::string JsonTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::optional<std::string> t = id_to_token(ids[i]);
    HLM_CHECK_INPUT(t.has_value(), name_, ": id ", ids[i], " at position ", i, " is not in the vocabulary (0..",
                    vocab_size_ - 1, ")");
    tokens.push_back(std::move(*t));
  }
  if (!decoder_) {  // HF joins the tokens with spaces when the file has no decoder
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->apply(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::unique_ptr<JsonTokenizer> tokenizer_json_load(const std::filesystem::path& path) {
  const nlohmann::json config = json_file_read(path);
  return std::make_unique<JsonTokenizer>(config, path.string());
}

}  // namespace hlm
