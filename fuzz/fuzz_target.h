// One fuzz target per file (fuzz/<name>.cpp), written once and built two ways:
//   -DHLM_FUZZ_LIBFUZZER (the fuzz build, -DHYBRIDLM_FUZZ=ON): the file becomes a libFuzzer program fuzz_<name>;
//   otherwise: the target registers itself in the replay program (fuzz_replay.cpp), which `make test` runs over the
//   committed regression inputs (fuzz/regressions/<name>/) and seeds, with the normal compiler.
// Usage:
//   HLM_FUZZ_TARGET(safetensors) { ...use `input` (std::string_view of the fuzzer's bytes)... }
// Contract checked for every input: the target returns normally or throws hlm::Error of kind Input (the clear
// message a user sees, exit code 2). Anything else -- an Internal error, another exception type, a sanitizer report,
// a crash -- is a finding: the fuzzer stops on it and the replay test fails.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hlm::fuzz {

using TargetFn = void (*)(std::string_view input);

// Runs `fn` on one input. Returns "" when the contract held, else what broke it.
std::string run_one(TargetFn fn, std::string_view input);

// A scratch directory of this process (created on first use, removed at exit); targets that read files write the
// input there first, since the parsers' entry points take paths.
const std::filesystem::path& scratch_dir();
// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::filesystem::path write_scratch(const std::string& name, std::string_view bytes);
// zstd-compresses `bytes` (level 1) so that a target can feed its input through a .zst reader's text path.
std::string zstd_compress(std::string_view bytes);

// Consumes a value computed from the parsed result, so that the reads that compute it are not optimised away.
void keep(uint64_t value);

bool register_target(const char* name, TargetFn fn);  // replay build only

}  // namespace hlm::fuzz

#ifdef HLM_FUZZ_LIBFUZZER
#define HLM_FUZZ_REGISTER_(name)                                                     \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {          \
    ::hlm::fuzz::abort_on_finding(::hlm::fuzz::run_one(                               \
        hlm_fuzz_##name, std::string_view(reinterpret_cast<const char*>(data), size))); \
    return 0;                                                                        \
  }
namespace hlm::fuzz {
void abort_on_finding(const std::string& finding);  // prints it and aborts (libFuzzer saves the input)
}
#else
#define HLM_FUZZ_REGISTER_(name) \
  [[maybe_unused]] static const bool hlm_fuzz_registered_##name = ::hlm::fuzz::register_target(#name, hlm_fuzz_##name);
#endif

#define HLM_FUZZ_TARGET(name)                            \
  static void hlm_fuzz_##name(std::string_view input);   \
  HLM_FUZZ_REGISTER_(name)                               \
  static void hlm_fuzz_##name(std::string_view input)
