// Fuzz target: a sharded checkpoint's model.safetensors.index.json (the input) over two fixed, valid shards, through
// Checkpoint::open (index and shards must agree exactly; shard names must stay inside the directory), then every
// listed tensor.
#include <filesystem>
#include <fstream>

#include "fuzz_target.h"
#include "core/tensor.h"
#include "models/checkpoint.h"

namespace {

// Two shards written once per process with the project's own writer: a.safetensors {x: f32[2,3], y: bf16[4]},
// b.safetensors {z: f32[1]}.
const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = hlm::fuzz::scratch_dir() / "ckpt";
    std::filesystem::create_directories(d);
    hlm::Tensor x = hlm::Tensor::zeros(hlm::Shape({2, 3}), hlm::DType::F32);
    hlm::Tensor y = hlm::Tensor::zeros(hlm::Shape({4}), hlm::DType::BF16);
    hlm::Tensor z = hlm::Tensor::zeros(hlm::Shape({1}), hlm::DType::F32);
    hlm::safetensors_write(d / "a.safetensors", {{"x", x}, {"y", y}});
    hlm::safetensors_write(d / "b.safetensors", {{"z", z}});
    return d;
  }();
  return dir;
}

}  // namespace

HLM_FUZZ_TARGET(checkpoint_index) {
  const std::filesystem::path dir = checkpoint_dir();
  {
    std::ofstream out(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  const hlm::Checkpoint ckpt = hlm::Checkpoint::open(dir);
  uint64_t total = ckpt.total_bytes();
  for (const std::string& name : ckpt.names()) {
    total += ckpt.tensor_f32(name).nbytes();
    total += ckpt.file_of(name).string().size();
  }
  hlm::fuzz::keep(static_cast<uint64_t>(total));
}
