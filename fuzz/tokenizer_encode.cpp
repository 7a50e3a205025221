// Fuzz target: encoding arbitrary bytes with real tokenizers. The first input byte picks the tokenizer (kChoices):
// the built-in "bytes", the two fixtures of tests/golden/tokenizer/fixtures (byte-level BPE, SentencePiece-style BPE
// with byte fallback), and the four real tokenizer.json files of data/tokenizers when present (make tokenizers); the
// rest of the input is the text. Invalid UTF-8 must be an input error; valid text must encode to ids inside the
// vocabulary and decode again; for "bytes", decode(encode(x)) must give x back.
// The files are looked up under $HLM_FUZZ_SOURCE_DIR when set (a packed copy on another machine,
// tools/device/fuzz_background.sh), else under the repository this program was built from.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "core/error.h"
#include "data/tokenizer.h"

#ifndef HLM_SOURCE_DIR
#error "HLM_SOURCE_DIR must name the repository root"
#endif

namespace {

// The selector byte maps onto this fixed list (byte % 7), so a saved input picks the same tokenizer on every
// machine; a real file that is absent (tokenizers not fetched) makes the input a no-op there.
struct Choice {
  const char* name;
  const char* path;  // relative to the repository root; nullptr: the built-in "bytes"
  bool round_trips;  // decode(encode(x)) == x for every valid UTF-8 x
};
constexpr Choice kChoices[] = {
    {"bytes", nullptr, true},
    {"tiny_byte_level", "tests/golden/tokenizer/fixtures/tiny_byte_level.json", false},
    {"tiny_sentencepiece", "tests/golden/tokenizer/fixtures/tiny_sentencepiece.json", false},
    {"qwen3", "data/tokenizers/qwen3/tokenizer.json", false},
    {"llama3", "data/tokenizers/llama3/tokenizer.json", false},
    {"deepseek_v3", "data/tokenizers/deepseek_v3/tokenizer.json", false},
    {"gemma3", "data/tokenizers/gemma3/tokenizer.json", false},
};
constexpr size_t kNumChoices = sizeof(kChoices) / sizeof(kChoices[0]);

// Loaded on first use (the real files take seconds each under the sanitizers); nullptr when the file is absent.
const hlm::Tokenizer* tokenizer(size_t index) {
  static std::unique_ptr<hlm::Tokenizer> loaded[kNumChoices];
  static bool tried[kNumChoices] = {};
  if (!tried[index]) {
    tried[index] = true;
    const Choice& c = kChoices[index];
    if (c.path == nullptr) {
      loaded[index] = hlm::tokenizer_load("bytes");
    } else {
      const char* root = std::getenv("HLM_FUZZ_SOURCE_DIR");
      const std::filesystem::path file = std::filesystem::path(root != nullptr ? root : HLM_SOURCE_DIR) / c.path;
      if (std::filesystem::exists(file)) loaded[index] = hlm::tokenizer_load(file.string());
    }
  }
  return loaded[index].get();
}

}  // namespace

#ifdef HLM_FUZZ_LIBFUZZER
// Loads every tokenizer before the first input: the real files take seconds each under the sanitizers (Gemma 3's
// 33 MB one over 25 s on a loaded machine), which libFuzzer would otherwise charge to the input that first selects
// one and report as a timeout.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  for (size_t i = 0; i < kNumChoices; ++i) tokenizer(i);
  return 0;
}
#endif

HLM_FUZZ_TARGET(tokenizer_encode) {
  if (input.empty()) return;
  const size_t index = static_cast<unsigned char>(input[0]) % kNumChoices;
  const hlm::Tokenizer* tok = tokenizer(index);
  if (tok == nullptr) return;
  const char* name = kChoices[index].name;
  const std::string_view text = input.substr(1);
  const std::vector<int32_t> ids = tok->encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size())
      hlm::throw_internal_error(name, ": encode gave id ", id, " outside the vocabulary of ", tok->vocab_size());
  const std::string back = tok->decode(ids);
  if (kChoices[index].round_trips && back != text) hlm::throw_internal_error(name, ": decode(encode(x)) != x");
}
