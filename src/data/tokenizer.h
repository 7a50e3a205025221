// Tokenizers behind one interface. Today: the built-in "bytes" tokenizer (each UTF-8 byte is one id, 0..255; the
// vocabulary is 256). HF tokenizer.json (byte-level BPE, SentencePiece BPE) joins in the [data] issue.
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

// "bytes" or a path to a tokenizer file (input error when unknown or unsupported).
std::unique_ptr<Tokenizer> tokenizer_load(const std::string& spec);

}  // namespace hlm
