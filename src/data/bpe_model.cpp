#include "data/bpe_model.h"

#include <atomic>
#include <cstdio>
#include <algorithm>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_json_fields.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

// Words at least this long (bytes) are not cached (HF's MAX_LENGTH); the cache is cleared when it holds more than
// kCacheCapacity words (bounds memory on endless streams of distinct words).
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheCapacity = 1 << 18;

using WordCache = std::unordered_map<std::string, std::vector<int32_t>, StringViewHash, std::equal_to<>>;

WordCache& thread_word_cache(uint64_t serial) {
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  thread_local uint64_t last_serial = 0;
  thread_local WordCache* last = nullptr;
  if (last_serial != serial || last == nullptr) {
    last = &caches[serial];
    last_serial = serial;
  }
  return *last;
}

std::atomic<uint64_t> next_cache_serial{1};

// A symbol of the word being merged: a doubly linked list over positions; len == 0 marks a merged-away symbol.
struct Symbol {
  int32_t id;
  int32_t prev, next;
  uint32_t len;  // bytes of the word this symbol covers
};

// A queued merge. Lower rank first; among equal ranks the leftmost position first.
struct QueuedMerge {
  int32_t rank, pos, new_id;
  bool operator<(const QueuedMerge& o) const {  // the heap pops the "largest"
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& where) : where_(where) {
  const auto vocab_it = model.find("vocab");
  HLM_CHECK_INPUT(vocab_it != model.end() && vocab_it->is_object(), where, ".vocab: expected an object token -> id");
  vocab_.reserve(vocab_it->size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab_it->items()) {
    HLM_CHECK_INPUT(id_json.is_number_integer() && id_json.get<int64_t>() >= 0 &&
                        id_json.get<int64_t>() < kTokenizerMaxVocab,
                    where, ".vocab[\"", token, "\"]: expected a non-negative integer id below 2^24 (the vocabulary ",
                    "limit), got ", id_json.dump());
    const auto id = id_json.get<int32_t>();
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = true;
  }

  const std::string unk = json_optional_string(model, "unk_token", where, "");
  if (!unk.empty()) {
    const auto it = vocab_.find(unk);
    HLM_CHECK_INPUT(it != vocab_.end(), where, ".unk_token \"", unk, "\" is not in the vocabulary");
    unk_id_ = it->second;
  }
  continuing_subword_prefix_ = json_optional_string(model, "continuing_subword_prefix", where, "");
  end_of_word_suffix_ = json_optional_string(model, "end_of_word_suffix", where, "");
  byte_fallback_ = json_bool(model, "byte_fallback", where, false);
  fuse_unk_ = json_bool(model, "fuse_unk", where, false);
  ignore_merges_ = json_bool(model, "ignore_merges", where, false);
  const auto dropout = model.find("dropout");
  HLM_CHECK_INPUT(dropout == model.end() || dropout->is_null() || (dropout->is_number() && dropout->get<double>() == 0),
                  where, ".dropout: BPE dropout is not supported (deterministic encoding only), got ", dropout->dump());
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = vocab_.find(std::string_view(name));
    byte_token_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const nlohmann::json& merges = json_array(model, "merges", where);
  const size_t prefix_len = continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {  // legacy "a b"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      HLM_CHECK_INPUT(space != std::string::npos, where, ".merges[", rank, "]: \"", s, "\" is not \"a b\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw_input_error(where, ".merges[", rank, "]: expected \"a b\" or [\"a\", \"b\"], got ", m.dump());
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    HLM_CHECK_INPUT(ia != vocab_.end(), where, ".merges[", rank, "]: \"", a, "\" is not in the vocabulary");
    HLM_CHECK_INPUT(ib != vocab_.end(), where, ".merges[", rank, "]: \"", b, "\" is not in the vocabulary");
    // The merged token drops b's continuing-subword prefix (HF: a + b[prefix_len..]).
    const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    const auto im = vocab_.find(merged);
    HLM_CHECK_INPUT(im != vocab_.end(), where, ".merges[", rank, "]: the merged token \"", merged,
                    "\" is not in the vocabulary");
    // A repeated pair keeps its last rank (HF collects the merges into a map in file order).
    merges_.insert(ia->second, ib->second, PairMerge{static_cast<int32_t>(rank), im->second});
  }
  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    char_ids_.assign(0x10000, -1);
    for (const auto& [token, id] : vocab_) {
      size_t pos = 0;
      const char32_t c = utf8_next(token, pos);
      if (pos == token.size() && c < 0x10000) char_ids_[c] = id;
    }
  }
  cache_serial_ = next_cache_serial.fetch_add(1);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() >= kCacheMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  WordCache& cache = thread_word_cache(cache_serial_);
  const auto hit = cache.find(word);
  if (hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache.size() >= kCacheCapacity) cache.clear();
  cache.emplace(std::string(word), std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // 1. Initial symbols: one per character (HF's BPE::merge_word).
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  const auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, len});
  };
  uint32_t pending_unk_len = 0;  // bytes covered by an unknown not yet added (0: none pending)
  std::string decorated;
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    pos += utf8_sequence_length(static_cast<unsigned char>(word[pos]));
    const auto byte_len = static_cast<uint32_t>(pos - begin);
    std::string_view ch = word.substr(begin, pos - begin);
    const bool first = begin == 0, last = pos >= word.size();
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      decorated.assign(first ? "" : continuing_subword_prefix_);
      decorated.append(ch);
      if (last) decorated += end_of_word_suffix_;
      ch = decorated;
    }
    int32_t id = -1;
    if (!char_ids_.empty() && ch.size() <= 3) {  // one code point below U+10000 (UTF-8: at most 3 bytes)
      size_t p = 0;
      id = char_ids_[utf8_next(ch, p)];
    } else if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      if (pending_unk_len > 0) {
        add(*unk_id_, pending_unk_len);
        pending_unk_len = 0;
      }
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_token_ids_[b] >= 0;
      if (all) {  // as HF: byte tokens go in before a pending unknown is flushed
        for (unsigned char b : ch) add(byte_token_ids_[b], 1);
        continue;
      }
    }
    HLM_CHECK_INPUT(unk_id_.has_value(), where_, ": the character \"", std::string(ch),
                    "\" is not in the vocabulary and the model has no unk_token");
    if (pending_unk_len > 0 && fuse_unk_) {
      pending_unk_len += byte_len;
    } else {
      if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);
      pending_unk_len = byte_len;
    }
  }
  if (pending_unk_len > 0) add(*unk_id_, pending_unk_len);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // 2. Merge loop (HF's Word::merge_all).
  thread_local std::vector<QueuedMerge> queue;  // a binary heap (std::push_heap / pop_heap)
  queue.clear();
  const auto push = [&](int32_t rank, int32_t pos, int32_t new_id) {
    queue.push_back({rank, pos, new_id});
    std::push_heap(queue.begin(), queue.end());
  };
  const auto find_merge = [&](int32_t a, int32_t b) { return merges_.find(a, b); };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i)
    if (const PairMerge* m = find_merge(symbols[i].id, symbols[i + 1].id)) push(m->rank, i, m->new_id);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const QueuedMerge top = queue.back();
    queue.pop_back();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    const PairMerge* m = find_merge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0)
      if (const PairMerge* pm = find_merge(symbols[cur.prev].id, cur.id)) push(pm->rank, cur.prev, pm->new_id);
    if (cur.next >= 0)
      if (const PairMerge* nm = find_merge(cur.id, symbols[cur.next].id)) push(nm->rank, top.pos, nm->new_id);
  }
  for (const Symbol& s : symbols)
    if (s.len != 0) out.push_back(s.id);
}

}  // namespace hlm
