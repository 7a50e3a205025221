// The "Examples:" of a command's --help, as argument strings a test can run: each example line that starts with
// "hybridlm " (backslash continuations joined), with the leading "hybridlm ", trailing "# ..." comments,
// "(...)" notes and "| ..." pipes removed. Tests substitute fixture paths into them with replace_all and run them,
// so a help text whose example the command no longer accepts fails a test.
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace hlm::test {

inline std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

inline std::vector<std::string> help_examples(const std::string& help) {
  std::vector<std::string> out;
  const size_t start = help.find("Examples:");
  if (start == std::string::npos) return out;
  std::istringstream in(help.substr(start));
  std::string line, current;
  bool in_example = false;
  const auto finish = [&] {
    for (const char* cut : {" #", " (", " | "})
      if (const size_t at = current.find(cut); at != std::string::npos) current.erase(at);
    while (!current.empty() && current.back() == ' ') current.pop_back();
    if (!current.empty()) out.push_back(current);
    current.clear();
  };
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    std::string text = line.substr(first);
    if (!in_example) {
      if (text.rfind("hybridlm ", 0) != 0) continue;
      text = text.substr(9);
    }
    const bool continued = !text.empty() && text.back() == '\\';
    if (continued) text.pop_back();
    current += (current.empty() ? "" : " ") + text;
    in_example = continued;
    if (!continued) finish();
  }
  return out;
}

}  // namespace hlm::test
