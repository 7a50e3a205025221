// `hybridlm run --device cuda` against `--device cpu` on one golden (olmo_hybrid_tiny: GDN and post-norm attention
// layers): same exit code, same printed shape of the output, and dumps whose tensors agree within the bound of
// test_cuda_model_forward.cpp (1e-4 relative; reasons there). Also a bad --device value (exit 2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cuda_models/cuda_model_support.h"
#include "models/safetensors.h"

using namespace hlm;
using namespace hlm::test;

namespace {

constexpr double kRelBound = 1e-4;  // as test_cuda_model_forward.cpp

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch folder removed at the end of the test.
struct Scratch {
  std::filesystem::path path;
  Scratch() {
    path = std::filesystem::temp_directory_path() / ("hybridlm-cuda-run-" + std::to_string(getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Scratch() { std::filesystem::remove_all(path); }
};

CliResult run_cli(const std::string& args, const std::filesystem::path& dir, const std::string& tag) {
  const auto out = dir / (tag + ".out"), err = dir / (tag + ".err");
  const std::string cmd = cuda_test_binary() + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
}

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST(CudaRunCli, CudaMatchesCpuOnOlmoHybrid) {
  HLM_REQUIRE_CUDA_MODEL();
  Scratch scratch;
  const std::string model = "'" + cuda_golden_dir("olmo_hybrid_tiny").string() + "'";
  const std::string common = "run " + model +
                             " --ids 5,17,250,3,99,42,7 --ids 1,2,3,4,5,6,7,8,9,10,11 --top-k 3"
                             " --points attn_in,attn_delta,attn_out,mlp_delta,final_hidden,logits --dump ";
  const auto cpu_dump = scratch.path / "cpu.safetensors", gpu_dump = scratch.path / "gpu.safetensors";
  const CliResult cpu = run_cli(common + "'" + cpu_dump.string() + "' --device cpu", scratch.path, "cpu");
  const CliResult gpu = run_cli(common + "'" + gpu_dump.string() + "' --device cuda", scratch.path, "gpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_EQ(count_lines(gpu.out), count_lines(cpu.out)) << gpu.out;

  const SafetensorsFile a = SafetensorsFile::open(cpu_dump), b = SafetensorsFile::open(gpu_dump);
  const auto names_of = [](const SafetensorsFile& f) {
    std::vector<std::string> names;
    for (const SafetensorsEntry& e : f.entries()) names.push_back(e.name);
    return names;
  };
  const std::vector<std::string> names = names_of(a);
  ASSERT_EQ(names.size(), 4u * 4u + 2u);  // 4 per-layer points × 4 layers, final_hidden, logits
  ASSERT_EQ(names_of(b), names);
  double worst = 0.0;
  for (const std::string& name : names) {
    const double rel = relative_max_diff(a.tensor(name), b.tensor(name));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelBound) << name;
  }
  std::printf("[check] cuda_run_cli olmo_hybrid_tiny: %zu dumped tensors worst rel=%.3g (bound %.0e)\n", names.size(),
              worst, kRelBound);
}

TEST(CudaRunCli, UnknownDeviceIsAnInputError) {
  Scratch scratch;  // needs no GPU: the option is checked before anything runs
  const CliResult r = run_cli("run '" + cuda_golden_dir("qwen3_tied").string() + "' --ids 1,2,3 --device tpu",
                              scratch.path, "bad");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--device"), std::string::npos) << r.err;
}
