// Shared by the fuzz programs and the replay program: the input contract check and the scratch files.
#include <unistd.h>
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "fuzz_target.h"

namespace hlm::fuzz {

std::string run_one(TargetFn fn, std::string_view input) {
  try {
    fn(input);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Input) return "";
    return std::string("internal error (a broken invariant, not an input error): ") + e.what();
  } catch (const std::exception& e) {
    return std::string("exception other than hlm::Error escaped the parser: ") + e.what();
  } catch (...) {
    return "unknown exception escaped the parser";
  }
  return "";
}

volatile uint64_t g_kept = 0;  // read by nothing; a volatile store the compiler must keep

void keep(uint64_t value) { g_kept = g_kept + value; }

void abort_on_finding(const std::string& finding) {
  if (finding.empty()) return;
  std::fprintf(stderr, "== hybridlm fuzz finding: %s\n", finding.c_str());
  std::abort();
}

namespace {

std::filesystem::path make_scratch() {
  const char* base = std::getenv("HLM_FUZZ_TMP");
  const std::filesystem::path dir = std::filesystem::path(base != nullptr ? base : "/tmp") /
                                    ("hlm-fuzz-" + std::to_string(static_cast<long>(getpid())));
  std::filesystem::create_directories(dir);
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir(), ec);
  });
  return dir;
}

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = make_scratch();
  return dir;
}

std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();  // a harness failure, not a finding in the parser
  }
  return path;
}

std::string zstd_compress(std::string_view bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 1);
  if (ZSTD_isError(n)) std::abort();
  out.resize(n);
  return out;
}

}  // namespace hlm::fuzz
