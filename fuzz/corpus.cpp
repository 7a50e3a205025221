// Fuzz target: the corpus reader (Corpus::open + read_documents). The first input byte picks what the rest is:
//   0: corpus.json, next to a fixed valid fra_Latn.jsonl.zst of 2 documents; every listed language is then read;
//   1: the raw bytes of fra_Latn.jsonl.zst (mostly broken zstd frames), under a fixed corpus.json;
//   2: the JSONL text, zstd-compressed by the target, under a fixed corpus.json (so the line, UTF-8 and JSON checks
//      see the fuzzer's text).
// corpus.json for 1 and 2 lists documents = the number of newline-ended lines, so well-formed inputs read through.
#include <algorithm>
#include <string>

#include "fuzz_target.h"
#include "data/corpus.h"

namespace {

std::string corpus_json(int64_t documents) {
  return R"({"format": "hybridlm-corpus", "version": 1, "languages": [{"code": "fra_Latn", "file": "fra_Latn.jsonl.zst", )"
         R"("tier": "high", "documents": )" +
         std::to_string(documents) + "}]}";
}

}  // namespace

HLM_FUZZ_TARGET(corpus) {
  if (input.empty()) return;
  const unsigned mode = static_cast<unsigned char>(input[0]) % 3;
  const std::string_view rest = input.substr(1);
  const std::filesystem::path dir = hlm::fuzz::scratch_dir() / "corpus";
  std::filesystem::create_directories(dir);
  const auto lines = static_cast<int64_t>(std::count(rest.begin(), rest.end(), '\n'));
  std::string meta, data;
  switch (mode) {
    case 0:
      meta = std::string(rest);
      data = hlm::fuzz::zstd_compress("{\"text\": \"Bonjour.\"}\n{\"text\": \"\"}\n");
      break;
    case 1:
      meta = corpus_json(2);
      data = std::string(rest);
      break;
    default:
      meta = corpus_json(lines);
      data = hlm::fuzz::zstd_compress(rest);
      break;
  }
  hlm::fuzz::write_scratch("corpus/corpus.json", meta);
  hlm::fuzz::write_scratch("corpus/fra_Latn.jsonl.zst", data);
  const hlm::Corpus corpus = hlm::Corpus::open(dir);
  size_t total = 0;
  for (const hlm::CorpusLanguage& lang : corpus.languages()) {
    const hlm::CorpusDocuments docs = corpus.read_documents(lang.code);
    for (const std::string& t : docs.texts) total += t.size();
  }
  hlm::fuzz::keep(static_cast<uint64_t>(total));
}
