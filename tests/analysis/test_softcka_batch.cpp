// Kernel-norm batches (analysis/softcka_batch.h): the CPU engine equals centered_kernel_sq_norm job by job (bits),
// bad batches are input errors, and `hybridlm align --device` picks the engine: cpu gives the same CSV as before,
// cuda without a CUDA build is a clear input error (exit 2); the GPU comparison is in tests/cuda_models.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "analysis/softcka_batch.h"
#include "core/error.h"
#include "core/rng.h"
#include "support/golden.h"
#include "support/run_binary.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct PackedRows {
  int64_t d = 0, n_rows = 0;
  std::vector<float> rows;
};

PackedRows random_rows(int64_t n_rows, int64_t d, uint64_t stream) {
  PackedRows p{d, n_rows, std::vector<float>(size_t(n_rows * d))};
  rng_fill_normal(p.rows.data(), p.rows.size(), 0.0f, 1.0f, 3, stream);
  return p;
}

TEST(SoftCkaBatch, CpuEngineEqualsPerJobCalls) {
  const PackedRows p = random_rows(300, 37, 1);
  const std::vector<KernelNormJob> jobs = {
      {0, 13, 0, 13, 5.0}, {13, 1, 13, 1, 5.0}, {0, 13, 20, 150, 2.0}, {170, 130, 0, 129, 9.0}, {299, 1, 0, 300, 1.0}};
  const auto engine = make_cpu_kernel_norm_engine();
  EXPECT_EQ(engine->name(), "cpu");
  for (const CkaKernel kernel : {CkaKernel::Rbf, CkaKernel::Linear}) {
    std::vector<double> out(jobs.size());
    engine->run(p.rows.data(), p.n_rows, p.d, kernel, jobs, out);
    for (size_t j = 0; j < jobs.size(); ++j) {
      const KernelNormJob& jb = jobs[j];
      const double expect = centered_kernel_sq_norm(p.rows.data() + jb.a_row * p.d, jb.na,
                                                    p.rows.data() + jb.b_row * p.d, jb.nb, p.d, {kernel, jb.sigma});
      EXPECT_EQ(out[j], expect) << "job " << j;  // the same function on the same rows: same bits
    }
  }
}

TEST(SoftCkaBatch, BadBatchesAreInputErrors) {
  const PackedRows p = random_rows(10, 4, 2);
  const auto engine = make_cpu_kernel_norm_engine();
  const auto expect_input_error = [&](std::vector<KernelNormJob> jobs, size_t outputs, CkaKernel kernel) {
    std::vector<double> out(outputs);
    try {
      engine->run(p.rows.data(), p.n_rows, p.d, kernel, jobs, out);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    }
  };
  expect_input_error({{0, 5, 6, 5, 1.0}}, 1, CkaKernel::Rbf);     // rows past the end
  expect_input_error({{0, 0, 0, 5, 1.0}}, 1, CkaKernel::Rbf);     // empty A
  expect_input_error({{0, 5, 0, 5, 0.0}}, 1, CkaKernel::Rbf);     // σ = 0
  expect_input_error({{0, 5, 0, 5, 1.0}}, 2, CkaKernel::Linear);  // outputs ≠ jobs
  std::vector<double> out(1);
  EXPECT_NO_THROW(engine->run(p.rows.data(), p.n_rows, p.d, CkaKernel::Linear, std::vector<KernelNormJob>{{0, 5, 0, 5, 0.0}},
                              out));  // σ is not read by the linear kernel
}

// A three-unit parallel set with French and a copy of English.
fs::path write_set(const fs::path& dir) {
  const char* units[][2] = {{"The cat sleeps.", "Le chat dort."},
                            {"It rains today.", "Il pleut aujourd'hui."},
                            {"We read books.", "Nous lisons des livres."}};
  const fs::path path = dir / "set.jsonl";
  std::ofstream out(path);
  for (size_t u = 0; u < std::size(units); ++u) {
    nlohmann::ordered_json j;
    j["id"] = "u" + std::to_string(u);
    j["eng_Latn"] = units[u][0];
    j["fra_Latn"] = units[u][1];
    j["xxx_Latn"] = units[u][0];
    out << j.dump() << "\n";
  }
  return path;
}

std::map<std::string, double> read_csv(const fs::path& path) {
  std::istringstream in(test::read_text(path));
  std::map<std::string, double> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const size_t cut = line.rfind(',');
    rows[line.substr(0, cut)] = std::stod(line.substr(cut + 1));
  }
  return rows;
}

// The CPU half of `align --device`: the CPU engine writes its CSV, and a build without the CUDA backend refuses
// `--device cuda` with one clear input error. With the CUDA backend, the GPU half (CUDA CSV and sigma against the
// CPU run, and the no-GPU error) is tests/cuda_models/test_cuda_eval_align_cli.cpp, label `cuda`, run on the GPU.
TEST(AlignDevice, CpuWritesCsvAndCudaNeedsTheBackend) {
  test::ScratchDir scratch("align-device");
  const fs::path set = write_set(scratch.path());
  const std::string common = "align --model " + test::golden_dir("olmo_hybrid_tiny").string() +
                             " --tokenizer bytes --parallel " + set.string() +
                             " --langs fra_Latn,xxx_Latn --points attn_in,mlp_delta --out ";
  const auto cpu = test::run_hybridlm(common + (scratch.path() / "cpu").string() + " --device cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(test::read_text(scratch.path() / "cpu" / "settings.json").find("\"device\": \"cpu\""), std::string::npos);
  const auto rows = read_csv(scratch.path() / "cpu" / "softcka.csv");
  EXPECT_FALSE(rows.empty());
  // In [0, 1] up to rounding: the kernel entries are fp32 dot products (softcka.cpp accumulates them in the input's
  // type), so a CKA of two equal representations lands within a few fp32 ulps of 1 (u = 6e-8); the -O1 sanitizer
  // build summed in another order and gave 1 + 4e-8. Bound: 1e-6 (about 16 u).
  for (const auto& [key, value] : rows) EXPECT_TRUE(value >= -1e-6 && value <= 1.0 + 1e-6) << key << " = " << value;
#ifndef HLM_WITH_CUDA
  const auto gpu = test::run_hybridlm(common + (scratch.path() / "cuda").string() + " --device cuda");
  EXPECT_EQ(gpu.exit_code, 2) << gpu.err;
  EXPECT_NE(gpu.err.find("--device cuda"), std::string::npos) << gpu.err;
#endif
}

}  // namespace
}  // namespace hlm
