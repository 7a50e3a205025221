// The replay program of the fuzz targets (built with the normal compiler, part of `make test`): runs committed inputs
// (fuzz/regressions/<target>/: every crash the fuzzers found; plus the seed files named on the command line) through
// the same target functions as the libFuzzer programs, and fails if any breaks the contract of fuzz_target.h.
// Usage: fuzz_replay <target> <file or directory>...   (fuzz_replay --list prints the targets)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "fuzz_target.h"

namespace hlm::fuzz {

namespace {
std::map<std::string, TargetFn>& targets() {
  static std::map<std::string, TargetFn> t;
  return t;
}
}  // namespace

bool register_target(const char* name, TargetFn fn) {
  targets()[name] = fn;
  return true;
}

}  // namespace hlm::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  auto& targets = hlm::fuzz::targets();
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const auto& [name, fn] : targets) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc < 3 || !targets.count(argv[1])) {
    std::fprintf(stderr, "usage: fuzz_replay <target> <file or directory>...  (targets: fuzz_replay --list)\n");
    return 2;
  }
  const hlm::fuzz::TargetFn fn = targets.at(argv[1]);
  int inputs = 0, failures = 0;
  const auto replay = [&](const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++inputs;
    const std::string finding = hlm::fuzz::run_one(fn, bytes);
    if (!finding.empty()) {
      ++failures;
      std::printf("FAIL %s: %s\n", file.c_str(), finding.c_str());
    }
  };
  for (int i = 2; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file() && entry.path().filename() != "README.md") replay(entry.path());
    } else if (fs::is_regular_file(arg)) {
      replay(arg);
    } else {
      std::fprintf(stderr, "fuzz_replay: %s: no such file or directory\n", arg.c_str());
      return 2;
    }
  }
  std::printf("fuzz_replay %s: %d inputs, %d failures\n", argv[1], inputs, failures);
  if (inputs == 0) {
    std::printf("fuzz_replay %s: no inputs given (a replay of nothing proves nothing)\n", argv[1]);
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
