// Parallel evaluation sets for cross-lingual analysis (SoftCKA, locality): JSONL, optionally zstd-compressed
// (.zst suffix), one aligned unit per line:
//   {"id": "udhr/art01", "eng_Latn": "...", "fra_Latn": "...", ...}
// Every key other than "id" is a language code whose value is that language's text of the unit (NFC UTF-8);
// languages absent from a unit are simply missing. Empty lines are skipped.
// Input errors (naming file and line): unknown file, bad JSON, a line that is not an object, missing or non-string
// or duplicate id, non-string text, invalid UTF-8.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hlm {

struct ParallelUnit {
  std::string id;
  std::map<std::string, std::string> text;  // lang code -> text (NFC UTF-8)
};

struct ParallelSet {
  std::string path;
  std::vector<std::string> langs;   // every language code seen, in first-seen order
  std::vector<ParallelUnit> units;  // file order
  // Units holding both languages, file order (pointers into units; valid while the set lives and is not modified).
  std::vector<const ParallelUnit*> pairs(const std::string& lang_a, const std::string& lang_b) const;
};

ParallelSet parallel_set_load(const std::filesystem::path& path);

}  // namespace hlm
