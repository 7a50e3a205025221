// Shared pieces of the align tests (tests/analysis/test_align_cli.cpp, tests/cuda_models/test_cuda_eval_align_cli.cpp):
// a tiny parallel set and the softcka.csv reader.
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"

namespace hlm::test {

// Writes dir/set.jsonl: 5 units of English, French and German sentences shorter than 64 bytes (so window 64 covers
// every visible token in the locality test); German is missing from unit 2 (4 German pairs), and "xxx_Latn" repeats
// the English text (its SoftCKA must be 1 at every layer and point).
inline std::filesystem::path write_tiny_parallel_set(const std::filesystem::path& dir) {
  static const char* kUnits[][3] = {
      {"The cat sleeps.", "Le chat dort.", "Die Katze schläft."},
      {"It rains today.", "Il pleut aujourd'hui.", "Heute regnet es."},
      {"We read books.", "Nous lisons des livres.", "Wir lesen Bücher."},
      {"Where is the sea?", "Où est la mer ?", "Wo ist das Meer?"},
      {"Music is joy.", "La musique est une joie.", "Musik ist Freude."},
  };
  const std::filesystem::path path = dir / "set.jsonl";
  std::ofstream out(path);
  for (size_t u = 0; u < std::size(kUnits); ++u) {
    nlohmann::ordered_json j;
    j["id"] = "u" + std::to_string(u);
    j["eng_Latn"] = kUnits[u][0];
    j["fra_Latn"] = kUnits[u][1];
    if (u != 2) j["deu_Latn"] = kUnits[u][2];
    j["xxx_Latn"] = kUnits[u][0];
    out << j.dump() << "\n";
  }
  return path;
}

// softcka.csv -> {"layer/point/lang": value} ("nan" read as NaN); *header receives the first line.
inline std::map<std::string, double> read_softcka_csv(const std::filesystem::path& path, std::string* header) {
  std::istringstream in(read_text(path));
  std::string first;
  std::getline(in, first);
  if (header != nullptr) *header = first;
  std::map<std::string, double> rows;
  for (std::string line; std::getline(in, line);) {
    std::string layer, point, lang, value;
    std::istringstream row(line);
    std::getline(row, layer, ',');
    std::getline(row, point, ',');
    std::getline(row, lang, ',');
    std::getline(row, value, ',');
    rows[layer + "/" + point + "/" + lang] = value == "nan" ? NAN : std::stod(value);
  }
  return rows;
}

}  // namespace hlm::test
