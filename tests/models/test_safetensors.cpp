// safetensors reader/writer and checkpoints: round trips, zero-copy views, atomic writes, and one test per malformed
// input. Bad files are crafted byte by byte; every failure must be an input error naming the file (and tensor).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/safetensors.h"

using namespace hlm;
namespace fs = std::filesystem;

namespace {

// Each test gets a fresh directory under the system temp dir, removed afterwards.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           str_cat("hlm_st_", ::getpid(), "_", counter++, "_", info->test_suite_name(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};
using SafetensorsCheckpoint = Safetensors;

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header string and `data_bytes` zero bytes; `len` overrides the stored header length.
fs::path write_raw(const fs::path& dir, const std::string& header, size_t data_bytes,
                   std::optional<uint64_t> len = std::nullopt) {
  const uint64_t n = len.value_or(header.size());
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(data_bytes, '\0');
  const fs::path path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  return path;
}

void expect_input_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// Opens a crafted file with a single tensor entry `x` (or a whole header) and checks the error.
void expect_open_error(const fs::path& dir, const std::string& header, size_t data_bytes,
                       std::initializer_list<std::string> needles) {
  const fs::path path = write_raw(dir, header, data_bytes);
  expect_input_error([&] { SafetensorsFile::open(path); }, needles);
}

// A tensor of `shape` whose element i holds (float)i * 0.5 - 1 (exact in bf16/f16), or i - 3 for integer dtypes.
Tensor make(DType dtype, Shape shape) {
  Tensor t = Tensor::zeros(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::I32) t.data<int32_t>()[i] = static_cast<int32_t>(i - 3);
    if (dtype == DType::I64) t.data<int64_t>()[i] = (int64_t{1} << 40) + i;
  }
  if (dtype == DType::I32 || dtype == DType::I64) return t;
  Tensor f = Tensor::zeros(shape);
  for (int64_t i = 0; i < f.numel(); ++i) f.f32()[i] = static_cast<float>(i) * 0.5f - 1.0f;
  return f.to(dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

bool inside(const void* p, std::span<const std::byte> span) {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= span.data() && b < span.data() + span.size();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------------
// Round trips and accessors.

TEST_F(Safetensors, RoundTripsAllDtypesAndMetadata) {
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w.f32", make(DType::F32, {2, 3})},  {"w.bf16", make(DType::BF16, {4})},    {"w.f16", make(DType::F16, {3, 1})},
      {"ids.i32", make(DType::I32, {5})},   {"ids.i64", make(DType::I64, {2, 2})}, {"empty", make(DType::F32, {0, 3})},
      {"scalar", make(DType::F32, Shape{})}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "hybridlm test"}};
  const fs::path path = dir_ / "model.safetensors";
  safetensors_write(path, tensors, meta);

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.entries().size(), tensors.size());
  for (size_t i = 1; i < f.entries().size(); ++i) EXPECT_LE(f.entries()[i - 1].begin, f.entries()[i].begin);
  for (const auto& [name, t] : tensors) {
    ASSERT_NE(f.find(name), nullptr) << name;
    EXPECT_EQ(f.find(name)->nbytes(), t.nbytes()) << name;
    EXPECT_TRUE(same_bytes(f.tensor(name), t)) << name;
  }
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.tensor("empty").numel(), 0);
  EXPECT_FLOAT_EQ(f.tensor_f32("w.bf16").f32()[3], 0.5f);
  EXPECT_FLOAT_EQ(f.tensor_f32("w.f16").f32()[2], 0.0f);
}

TEST_F(Safetensors, HeaderIsPaddedSoDataStartsAligned) {
  safetensors_write(dir_ / "a.safetensors", {{"abc", make(DType::F32, {3})}});
  std::ifstream in(dir_ / "a.safetensors", std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ((8 + len) % 8, 0u);
  EXPECT_EQ(fs::file_size(dir_ / "a.safetensors"), 8 + len + 12);
}

TEST_F(Safetensors, F32TensorIsZeroCopyAndOutlivesTheFile) {
  safetensors_write(dir_ / "a.safetensors", {{"h", make(DType::BF16, {2})}, {"w", make(DType::F32, {4, 4})}});
  Tensor w;
  {
    const auto f = SafetensorsFile::open(dir_ / "a.safetensors");
    w = f.tensor_f32("w");
    EXPECT_TRUE(inside(w.raw(), f.data_section()));
    EXPECT_TRUE(inside(f.tensor("h").raw(), f.data_section()));
  }
  EXPECT_FLOAT_EQ(w.f32()[15], 6.5f);  // the mapping is still alive through the tensor
}

TEST_F(Safetensors, MisalignedF32IsCopiedWithCorrectValues) {
  // bf16 x at [0, 2) pushes the f32 tensor to offset 2, which no f32 view may start at.
  const std::string header =
      R"({"x":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(2, '\0');
  const float value = 3.25f;
  bytes.append(reinterpret_cast<const char*>(&value), 4);
  write_bytes(dir_ / "m.safetensors", bytes);
  const auto f = SafetensorsFile::open(dir_ / "m.safetensors");
  const Tensor y = f.tensor_f32("y");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.raw()) % 4, 0u);
  EXPECT_FLOAT_EQ(y.f32()[0], 3.25f);
}

TEST_F(Safetensors, WritesNonContiguousTensorsPacked) {
  const Tensor full = make(DType::F32, {3, 4});
  safetensors_write(dir_ / "a.safetensors", {{"cols", full.slice(1, 1, 3)}});
  const Tensor back = SafetensorsFile::open(dir_ / "a.safetensors").tensor("cols");
  ASSERT_EQ(back.shape(), Shape({3, 2}));
  EXPECT_FLOAT_EQ(back.f32()[2], full.f32()[5]);  // row 1, column 1
}

TEST_F(Safetensors, AbsentTensorNamesFileAndTensor) {
  safetensors_write(dir_ / "a.safetensors", {{"w", make(DType::F32, {1})}});
  const auto f = SafetensorsFile::open(dir_ / "a.safetensors");
  expect_input_error([&] { f.tensor("nope"); }, {"a.safetensors", "'nope'"});
}

TEST_F(Safetensors, IntegerTensorHasNoF32View) {
  safetensors_write(dir_ / "a.safetensors", {{"ids", make(DType::I32, {2})}});
  const auto f = SafetensorsFile::open(dir_ / "a.safetensors");
  expect_input_error([&] { f.tensor_f32("ids"); }, {"a.safetensors", "'ids'", "i32"});
}

// ---------------------------------------------------------------------------------------------------------------------
// Malformed files: one test per defect.

TEST_F(Safetensors, RejectsMissingFile) {
  expect_input_error([&] { SafetensorsFile::open(dir_ / "none.safetensors"); }, {"none.safetensors"});
}
TEST_F(Safetensors, RejectsDirectory) {
  expect_input_error([&] { SafetensorsFile::open(dir_); }, {dir_.string(), "not a regular file"});
}
TEST_F(Safetensors, RejectsFileShorterThan8Bytes) {
  write_bytes(dir_ / "bad.safetensors", "abcde");
  expect_input_error([&] { SafetensorsFile::open(dir_ / "bad.safetensors"); }, {"bad.safetensors", "5 bytes"});
}
TEST_F(Safetensors, RejectsHeaderLengthBeyondFile) {
  const fs::path p = write_raw(dir_, "{}", 0, 1000);
  expect_input_error([&] { SafetensorsFile::open(p); }, {"bad.safetensors", "header length 1000", "beyond"});
}
TEST_F(Safetensors, RejectsAbsurdHeaderLength) {
  const fs::path p = write_raw(dir_, "{}", 0, uint64_t{1} << 40);
  expect_input_error([&] { SafetensorsFile::open(p); }, {"bad.safetensors", "exceeds the limit"});
}
TEST_F(Safetensors, RejectsHeaderThatIsNotJson) {
  expect_open_error(dir_, "{\"x\": nope", 0, {"bad.safetensors", "not valid JSON"});
}
TEST_F(Safetensors, RejectsHeaderThatIsNotAnObject) {
  expect_open_error(dir_, "[1, 2]", 0, {"bad.safetensors", "not a JSON object"});
}
TEST_F(Safetensors, RejectsDuplicateTensorName) {
  expect_open_error(dir_,
                    R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    8, {"bad.safetensors", "duplicate key 'x'"});
}
TEST_F(Safetensors, RejectsEntryThatIsNotAnObject) {
  expect_open_error(dir_, R"({"x": [1]})", 0, {"bad.safetensors", "'x'", "not a JSON object"});
}
TEST_F(Safetensors, RejectsEntryWithoutDtype) {
  expect_open_error(dir_, R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4, {"bad.safetensors", "'x'", "'dtype'"});
}
TEST_F(Safetensors, RejectsEntryWithoutShape) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"bad.safetensors", "'x'", "'shape'"});
}
TEST_F(Safetensors, RejectsEntryWithoutDataOffsets) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1]}})", 4, {"bad.safetensors", "'x'", "'data_offsets'"});
}
TEST_F(Safetensors, RejectsEntryWithUnknownKey) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"scale":2}})", 4,
                    {"bad.safetensors", "'x'", "unknown key 'scale'"});
}
TEST_F(Safetensors, RejectsDtypeThatIsNotAString) {
  expect_open_error(dir_, R"({"x":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "'dtype' must be a string"});
}
TEST_F(Safetensors, RejectsShapeThatIsNotAnArray) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "'shape' must be an array"});
}
TEST_F(Safetensors, RejectsNonIntegerDimension) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "integers"});
}
TEST_F(Safetensors, RejectsNegativeDimension) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "non-negative", "-1"});
}
TEST_F(Safetensors, RejectsRankAboveMaximum) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "rank 7"});
}
TEST_F(Safetensors, RejectsShapeWhoseSizeOverflows) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
                    {"bad.safetensors", "'x'", "overflows"});
}
TEST_F(Safetensors, RejectsF8Dtype) {
  expect_open_error(dir_, R"({"x":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1,
                    {"bad.safetensors", "'x'", "'F8_E4M3'"});
}
TEST_F(Safetensors, RejectsBoolDtype) {
  expect_open_error(dir_, R"({"mask":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", 1,
                    {"bad.safetensors", "'mask'", "'BOOL'"});
}
TEST_F(Safetensors, RejectsDataOffsetsOfWrongLength) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
                    {"bad.safetensors", "'x'", "[begin, end]"});
}
TEST_F(Safetensors, RejectsNegativeDataOffset) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
                    {"bad.safetensors", "'x'", "non-negative"});
}
TEST_F(Safetensors, RejectsDataOffsetsWithBeginAfterEnd) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                    {"bad.safetensors", "'x'", "begin > end"});
}
TEST_F(Safetensors, RejectsEndBeyondDataSection) {
  expect_open_error(dir_, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", 8,
                    {"bad.safetensors: tensor 'x': data_offsets [0, 12] end beyond the data section (8 bytes)"});
}
TEST_F(Safetensors, RejectsByteCountThatDisagreesWithShape) {
  expect_open_error(dir_, R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8,
                    {"bad.safetensors", "'x'", "needs 6"});
}
TEST_F(Safetensors, RejectsOverlappingTensors) {
  expect_open_error(dir_,
                    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    12, {"bad.safetensors", "'a'", "'b'", "overlap"});
}
TEST_F(Safetensors, RejectsMetadataThatIsNotAnObject) {
  expect_open_error(dir_, R"({"__metadata__":"pt"})", 0, {"bad.safetensors", "__metadata__ must be an object"});
}
TEST_F(Safetensors, RejectsMetadataValueThatIsNotAString) {
  expect_open_error(dir_, R"({"__metadata__":{"step":3}})", 0, {"bad.safetensors", "'step'", "must be a string"});
}

// ---------------------------------------------------------------------------------------------------------------------
// Atomic writer.

TEST_F(Safetensors, WriterIntoMissingDirectoryLeavesNothing) {
  const fs::path target = dir_ / "missing" / "a.safetensors";
  expect_input_error([&] { safetensors_write(target, {{"w", make(DType::F32, {2})}}); }, {"a.safetensors"});
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(Safetensors, WriterRejectsDuplicateNamesAndKeepsOldFile) {
  const fs::path target = dir_ / "a.safetensors";
  safetensors_write(target, {{"old", make(DType::F32, {1})}});
  const Tensor w = make(DType::F32, {1});
  expect_input_error([&] { safetensors_write(target, {{"w", w}, {"w", w}}); },
                     {"a.safetensors", "duplicate tensor name 'w'"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temp file left
  EXPECT_NE(SafetensorsFile::open(target).find("old"), nullptr);
}

TEST_F(Safetensors, WriterRejectsReservedName) {
  const Tensor w = make(DType::F32, {1});
  expect_input_error([&] { safetensors_write(dir_ / "a.safetensors", {{"__metadata__", w}}); },
                     {"a.safetensors", "reserved"});
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ---------------------------------------------------------------------------------------------------------------------
// Checkpoints.

std::vector<std::pair<std::string, Tensor>> sample_weights() {
  return {{"model.embed_tokens.weight", make(DType::BF16, {8, 4})},
          {"model.layers.0.mlp.up_proj.weight", make(DType::F32, {4, 4})},
          {"model.layers.0.input_layernorm.weight", make(DType::F32, {4})},
          {"lm_head.weight", make(DType::F16, {8, 4})}};
}

TEST_F(SafetensorsCheckpoint, SingleFileRoundTrip) {
  checkpoint_write(dir_, sample_weights(), {{"format", "pt"}});
  const auto ck = Checkpoint::open(dir_);
  std::vector<std::string> expected;
  uint64_t bytes = 0;
  for (const auto& [name, t] : sample_weights()) expected.push_back(name), bytes += t.nbytes();
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ck.names(), expected);
  EXPECT_EQ(ck.total_bytes(), bytes);
  EXPECT_EQ(ck.file_of("lm_head.weight"), dir_ / "model.safetensors");
  EXPECT_TRUE(same_bytes(ck.tensor("lm_head.weight"), make(DType::F16, {8, 4})));
  EXPECT_EQ(ck.find("nope"), nullptr);
  expect_input_error([&] { ck.tensor_f32("nope"); }, {dir_.string(), "'nope'"});
}

TEST_F(SafetensorsCheckpoint, ShardedRoundTripAndLayoutSwitch) {
  checkpoint_write(dir_, sample_weights(), {}, 80);  // 64 + 64 + 16 + 64 bytes -> 3 shards (64 | 64+16 | 64)
  ASSERT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  const auto index = nlohmann::json::parse(std::ifstream(dir_ / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 208);
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00003-of-00003.safetensors");
  const auto ck = Checkpoint::open(dir_);
  EXPECT_EQ(ck.names().size(), 4u);
  EXPECT_EQ(ck.total_bytes(), 208u);
  EXPECT_EQ(ck.file_of("model.layers.0.input_layernorm.weight"), dir_ / "model-00002-of-00003.safetensors");
  for (const auto& [name, t] : sample_weights()) EXPECT_TRUE(same_bytes(ck.tensor(name), t)) << name;
  EXPECT_FLOAT_EQ(ck.tensor_f32("model.embed_tokens.weight").f32()[5], 1.5f);

  checkpoint_write(dir_, sample_weights(), {}, 0);  // back to one file: index and shards must go
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir_ / "model-00001-of-00003.safetensors"));
  EXPECT_EQ(Checkpoint::open(dir_).names().size(), 4u);
}

TEST_F(SafetensorsCheckpoint, RejectsMissingShard) {
  checkpoint_write(dir_, sample_weights(), {}, 80);
  fs::remove(dir_ / "model-00002-of-00003.safetensors");
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {"model.safetensors.index.json", "model-00002-of-00003.safetensors", "missing"});
}

// Rewrites the index json with `edit` applied, then expects open() to fail naming the index and `needle`.
void expect_index_error(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit,
                        const std::string& needle) {
  checkpoint_write(dir, sample_weights(), {}, 80);
  const fs::path index_path = dir / "model.safetensors.index.json";
  auto index = nlohmann::json::parse(std::ifstream(index_path));
  edit(index);
  write_bytes(index_path, index.dump());
  expect_input_error([&] { Checkpoint::open(dir); }, {"model.safetensors.index.json", needle});
}

TEST_F(SafetensorsCheckpoint, RejectsIndexTensorAbsentFromShard) {
  expect_index_error(
      dir_, [](auto& j) { j["weight_map"]["ghost"] = "model-00001-of-00003.safetensors"; }, "'ghost'");
}
TEST_F(SafetensorsCheckpoint, RejectsShardTensorMissingFromIndex) {
  // input_layernorm shares shard 2 with up_proj, so the shard is still opened and its extra tensor seen.
  const std::string name = "model.layers.0.input_layernorm.weight";
  expect_index_error(
      dir_, [&](auto& j) { j["weight_map"].erase(name); }, "'" + name + "'");
}
TEST_F(SafetensorsCheckpoint, RejectsMalformedWeightMap) {
  expect_index_error(
      dir_, [](auto& j) { j["weight_map"] = nlohmann::json::array({1}); }, "'weight_map'");
}
TEST_F(SafetensorsCheckpoint, RejectsNonStringShardName) {
  expect_index_error(
      dir_, [](auto& j) { j["weight_map"]["lm_head.weight"] = 3; }, "'lm_head.weight'");
}
TEST_F(SafetensorsCheckpoint, RejectsShardPathOutsideDirectory) {
  expect_index_error(
      dir_, [](auto& j) { j["weight_map"]["lm_head.weight"] = "../x.safetensors"; }, "plain file name");
}
TEST_F(SafetensorsCheckpoint, RejectsIndexThatIsNotJson) {
  write_bytes(dir_ / "model.safetensors.index.json", "{oops");
  expect_input_error([&] { Checkpoint::open(dir_); }, {"model.safetensors.index.json", "not valid JSON"});
}
TEST_F(SafetensorsCheckpoint, RejectsDirectoryWithoutWeights) {
  expect_input_error([&] { Checkpoint::open(dir_); },
                     {dir_.string(), "no model.safetensors or model.safetensors.index.json"});
}
TEST_F(SafetensorsCheckpoint, RejectsNonexistentDirectory) {
  expect_input_error([&] { Checkpoint::open(dir_ / "nowhere"); }, {"nowhere", "no such directory"});
}
TEST_F(SafetensorsCheckpoint, WriterRejectsDuplicateNames) {
  expect_input_error(
      [&] {
        checkpoint_write(dir_, {{"w", make(DType::F32, {1})}, {"w", make(DType::F32, {1})}});
      },
      {"duplicate tensor name 'w'"});
  EXPECT_TRUE(fs::is_empty(dir_));
}
