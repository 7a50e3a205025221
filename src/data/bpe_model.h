// HF's BPE model (tokenizer.json "model": {"type": "BPE", ...}): turns one pre-tokenized word into ids.
// Initial symbols are the word's characters (continuing_subword_prefix / end_of_word_suffix added when set); a
// character missing from the vocabulary becomes its <0xNN> byte tokens when byte_fallback is on, else unk_token
// (consecutive unknowns fused when fuse_unk). Merges then apply lowest rank first, leftmost first among equal ranks,
// exactly as HF's Word::merge_all. With ignore_merges (Llama 3), a word that is itself in the vocabulary is taken
// whole. Merges may be given as ["a", "b"] pairs or "a b" strings.
// Speed: ranks live in a flat hash table keyed by the id pair (pair_rank_table.h); the merge loop is a binary heap over a linked list of
// symbols; each thread keeps a cache word -> ids per model (words under 256 bytes, as HF caches).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/pair_rank_table.h"

namespace hlm {

// Hash for unordered maps keyed by std::string that also accept std::string_view lookups.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is the tokenizer.json "model" object; `where` names it in errors.
  BpeModel(const nlohmann::json& model, const std::string& where);

  // Appends the ids of `word` (non-empty, valid UTF-8) to `out`. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr when the model has no such id.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids the vocabulary skips
  std::vector<bool> has_id_;
  PairRankTable merges_;
  // Id of each single-code-point token below U+10000 (-1: not in the vocabulary): the initial symbols of a word
  // without a hash lookup. Used only when no continuing_subword_prefix / end_of_word_suffix decorates characters.
  std::vector<int32_t> char_ids_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t byte_token_ids_[256];  // id of "<0xNN>" per byte, -1 when absent (byte_fallback)
  uint64_t cache_serial_;        // identifies this model's entry in the per-thread caches
  std::string where_;
};

}  // namespace hlm
