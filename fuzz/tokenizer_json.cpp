// Fuzz target: a tokenizer.json file (the input) through tokenizer_load; when it loads, encoding and decoding a few
// fixed texts (ASCII, accents, CJK, an emoji, spaces and newlines) and decoding every id of the vocabulary's ends.
#include <memory>
#include <vector>

#include "fuzz_target.h"
#include "data/tokenizer.h"

HLM_FUZZ_TARGET(tokenizer_json) {
  const std::unique_ptr<hlm::Tokenizer> tok =
      hlm::tokenizer_load(hlm::fuzz::write_scratch("tokenizer.json", input).string());
  size_t total = 0;
  for (const char* text : {"hello world", "caf\xC3\xA9 na\xC3\xAFve", "\xE6\x95\xB0\xE6\x8D\xAE \xF0\x9F\x99\x82",
                           "  a\tb\n\nc  ", ""}) {
    const std::vector<int32_t> ids = tok->encode(text);
    total += tok->decode(ids).size();
  }
  const int64_t v = tok->vocab_size();
  if (v > 0) total += tok->decode({0, static_cast<int32_t>(v - 1)}).size();
  hlm::fuzz::keep(static_cast<uint64_t>(total));
}
