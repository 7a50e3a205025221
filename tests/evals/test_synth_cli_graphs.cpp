// `hybridlm synth --cuda-graphs on|off` (docs/synth.md): the option is listed in --help and any other value is an
// input error (exit 2) before anything is trained or written, as the other device options are.
#include <gtest/gtest.h>

#include <fstream>

#include "support/run_binary.h"

using namespace hlm::test;

namespace {

TEST(SynthCliGraphs, HelpListsTheOption) {
  const RunResult r = run_hybridlm("synth --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--cuda-graphs"), std::string::npos);
  EXPECT_NE(r.out.find("HLM_CUDA_GRAPHS=off"), std::string::npos);
}

TEST(SynthCliGraphs, AValueOtherThanOnOrOffIsAnInputError) {
  ScratchDir dir("synth-graphs");
  const auto config = dir.path() / "s.json";
  std::ofstream(config) << "{\"tasks\":[\"recall\"],\"architectures\":[\"transformer\"],\"steps\":1}\n";
  const auto out = dir.path() / "run";
  const RunResult r =
      run_hybridlm("synth --config " + config.string() + " --out " + out.string() + " --cuda-graphs maybe");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--cuda-graphs must be on or off, got 'maybe'"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out / "config.json"));
}

}  // namespace
