// Tokenizers behind one interface: the built-in "bytes" tokenizer (each UTF-8 byte is one id, 0..255; the
// vocabulary is 256) and HF tokenizer.json files (byte-level BPE, SentencePiece-style BPE; data/tokenizer_json.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hlm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // encode/decode must be safe to call from several threads at once (held_out_set tokenizes languages in parallel).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string name() const = 0;  // "bytes" or the file path
};

// The largest vocabulary a tokenizer.json may declare (ids 0 .. 2^24 - 1; the largest real ones are ~262k ids):
// a larger id is an input error before the id tables are sized from it (an id of 10^9 would ask for 32 GB).
inline constexpr int64_t kTokenizerMaxVocab = int64_t{1} << 24;

// "bytes" or a path to a tokenizer.json file (input error when missing, malformed or unsupported).
std::unique_ptr<Tokenizer> tokenizer_load(const std::string& spec);

}  // namespace hlm
