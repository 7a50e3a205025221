// tokenizer_load: the built-in "bytes" tokenizer (id = UTF-8 byte value 0..255, so encode/decode are exact inverses
// on any byte string and the vocabulary is 256) or an HF tokenizer.json file (data/tokenizer_json.h).
#include "data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "data/tokenizer_json.h"

namespace hlm {
namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      HLM_CHECK_INPUT(ids[i] >= 0 && ids[i] < 256, "bytes tokenizer: id ", ids[i], " at position ", i,
                      " is outside the vocabulary 0..255");
      out[i] = static_cast<char>(ids[i]);
    }
    return out;
  }
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_load(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<BytesTokenizer>();
  HLM_CHECK_INPUT(!spec.empty(), "tokenizer: empty name (use \"bytes\" or a tokenizer file)");
  HLM_CHECK_INPUT(std::filesystem::exists(spec), "tokenizer ", spec,
                  ": no such file (and not a built-in tokenizer; built-in: bytes)");
  std::filesystem::path path = spec;
  if (std::filesystem::is_directory(path)) {  // a model or tokenizer folder: its tokenizer.json
    path /= "tokenizer.json";
    HLM_CHECK_INPUT(std::filesystem::exists(path), "tokenizer ", spec, ": a directory without tokenizer.json");
  }
  HLM_CHECK_INPUT(!spec.ends_with(".gz"), "tokenizer ", spec,
                  ": gzip-compressed files are not read directly (gunzip it first)");
  return tokenizer_json_load(path);
}

}  // namespace hlm
