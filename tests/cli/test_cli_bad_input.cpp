// Bad input through the CLI: each case gives one clear message naming the file (and tensor), exit code 2, no crash,
// and no partial output file. Cases are built by copying a golden model into a scratch directory and breaking it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/golden.h"
#include "support/run_binary.h"

using namespace hlm;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

// A writable copy of a golden model directory.
struct BrokenModel {
  test::ScratchDir scratch{"bad"};
  fs::path dir;
  BrokenModel() {
    dir = scratch.path() / "model";
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(test::golden_dir("qwen3_tied") / f, dir / f);
  }
  fs::path weights() const { return dir / "model.safetensors"; }
  fs::path config() const { return dir / "config.json"; }
  void write(const fs::path& p, const std::string& bytes) const { std::ofstream(p, std::ios::binary) << bytes; }
};

// Runs `inspect` and `run` with a dump; both must fail with exit 2, mention `needle`, and leave no dump file.
void expect_clean_failure(const BrokenModel& m, const std::string& needle) {
  for (const bool run : {false, true}) {
    const fs::path dump = m.scratch.path() / "dump.safetensors";
    const std::string args = run ? "run " + m.dir.string() + " --ids 1,2,3 --dump " + dump.string()
                                 : "inspect " + m.dir.string();
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr lacks '" << needle << "': " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dump));
    for (const auto& entry : fs::directory_iterator(m.scratch.path()))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "left " << entry.path();
  }
}

std::string header_of(const fs::path& p) {
  const std::string bytes = test::read_text(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return bytes.substr(8, n);
}

}  // namespace

TEST(CliBadInput, NonexistentDirectory) {
  const auto r = run_hybridlm("inspect /nonexistent/model/dir");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/model/dir"), std::string::npos) << r.err;
  const auto r2 = run_hybridlm("run /nonexistent/model/dir --ids 1");
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_NE(r2.err.find("does not exist"), std::string::npos) << r2.err;
}

// A file given where the model folder belongs (e.g. its config.json) is told apart from a missing path.
TEST(CliBadInput, FileWhereTheModelDirectoryBelongs) {
  const test::ScratchDir scratch{"cli-model-file"};
  const std::filesystem::path file = scratch.path() / "config.json";
  std::ofstream(file) << "{}";
  for (const std::string cmd : {"inspect ", "run "}) {
    const auto r = run_hybridlm(cmd + file.string() + (cmd == "run " ? " --ids 1" : ""));
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find("not a directory: give the folder that holds config.json"), std::string::npos)
        << cmd << r.err;
  }
}

// Counts refused with the rule and the value in words (cli/number_checks.h), not CLI11's range print-out.
TEST(CliBadInput, NonPositiveCountsSayTheRule) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"placements --layers 0 --full 1", "--layers: must be positive, got 0"},
           {"placements --layers -3 --full 1", "--layers: must be positive, got -3"},
           {"placements --layers twelve --full 1", "--layers: expected a number, got 'twelve'"},
           {"placements --layers 12 --full 0", "--full: must be positive, got 0"}}) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 2) << args << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("1797693134862315708"), std::string::npos) << args << "\n" << r.err;
  }
}

TEST(CliBadInput, TruncatedWeights) {
  BrokenModel m;
  const std::string bytes = test::read_text(m.weights());
  m.write(m.weights(), bytes.substr(0, bytes.size() / 2));
  expect_clean_failure(m, "model.safetensors");
}

TEST(CliBadInput, HeaderLengthBeyondFile) {
  BrokenModel m;
  std::string bytes = test::read_text(m.weights());
  const uint64_t huge = bytes.size() + 100;
  std::memcpy(bytes.data(), &huge, 8);
  m.write(m.weights(), bytes);
  expect_clean_failure(m, "model.safetensors");
}

TEST(CliBadInput, AbsurdHeaderLength) {
  BrokenModel m;
  std::string bytes = test::read_text(m.weights());
  const uint64_t absurd = uint64_t{1} << 62;
  std::memcpy(bytes.data(), &absurd, 8);
  m.write(m.weights(), bytes);
  expect_clean_failure(m, "model.safetensors");
}

// Rewrites one substring of the header, keeping its length so offsets stay valid.
void patch_header(const BrokenModel& m, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  std::string bytes = test::read_text(m.weights());
  const auto at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  m.write(m.weights(), bytes);
}

TEST(CliBadInput, UnknownDtype) {
  BrokenModel m;
  patch_header(m, "\"dtype\":\"F32\"", "\"dtype\":\"F8X\"");
  expect_clean_failure(m, "F8X");
}

// Moves the data_offsets of the tensor that ends last (by `shift` bytes, keeping its size); returns its name.
std::string shift_last_tensor(const BrokenModel& m, int64_t shift) {
  const std::string header = header_of(m.weights());
  const auto j = nlohmann::json::parse(header);
  std::string last;
  uint64_t last_end = 0;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;
    const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
    if (end >= last_end) last_end = end, last = name;
  }
  const uint64_t begin = j[last]["data_offsets"][0].get<uint64_t>();
  const std::string from = "[" + std::to_string(begin) + "," + std::to_string(last_end) + "]";
  const std::string to = "[" + std::to_string(begin + shift) + "," + std::to_string(last_end + shift) + "]";
  patch_header(m, from, to);
  return last;
}

TEST(CliBadInput, DataOffsetsOutsideFile) {
  BrokenModel m;
  const std::string name = shift_last_tensor(m, 8);
  expect_clean_failure(m, name);
}

TEST(CliBadInput, OverlappingDataOffsets) {
  BrokenModel m;
  shift_last_tensor(m, -4);
  expect_clean_failure(m, "overlap");
}

TEST(CliBadInput, MissingTensor) {
  BrokenModel m;
  patch_header(m, "\"model.norm.weight\"", "\"model.norm.wEight\"");
  expect_clean_failure(m, "model.norm.weight");
}

TEST(CliBadInput, ShapeDisagreesWithConfig) {
  BrokenModel m;
  std::string config = test::read_text(m.config());
  const auto at = config.find("\"intermediate_size\": 128");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 24, "\"intermediate_size\": 96");
  m.write(m.config(), config);
  expect_clean_failure(m, "gate_proj");
}

TEST(CliBadInput, MalformedConfig) {
  BrokenModel m;
  m.write(m.config(), "{\"model_type\": \"qwen3\", \"hidden_size\": ");
  expect_clean_failure(m, "config.json");
}

TEST(CliBadInput, BadFlagsExitTwo) {
  const std::string dir = test::golden_dir("qwen3_tied").string();
  EXPECT_EQ(run_hybridlm("run " + dir + " --ids 1,x,3").exit_code, 2);
  EXPECT_EQ(run_hybridlm("run " + dir + " --ids 1,99999").exit_code, 2);  // beyond the vocabulary
  EXPECT_EQ(run_hybridlm("run " + dir + " --ids 1 --dump /tmp/x.safetensors --points attn_in,nope").exit_code, 2);
  EXPECT_EQ(run_hybridlm("frobnicate").exit_code, 2);
}
