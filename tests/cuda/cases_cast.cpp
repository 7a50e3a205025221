// Cast f32 → bf16: CUDA (src/ops/cast/cast.cu) vs the CPU reference (cast_ref.cpp), bit-identical (both round to
// nearest even; NaN → quiet NaN, overflow → ±Inf). Cases: odd lengths and offsets that take the scalar path (1, 3,
// 65 from an odd element) and the 4-wide path (1000, 2^20 + 3), every fill, and values that round to ±Inf.
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/cast/cast.h"
#include "ops/cast/cast_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct CastCase {
  int64_t n;
  int64_t offset;  // elements skipped at the start of both buffers (misaligns the 4-wide path)
  Fill fill;
};

const std::vector<CastCase> kCases = {
    {1, 0, Fill::Normal},    {3, 1, Fill::Normal},   {65, 1, Fill::Special},  {1000, 0, Fill::Normal},
    {1000, 0, Fill::Large},  {1000, 2, Fill::Zeros}, {1000, 0, Fill::Denormal}, {(1 << 20) + 3, 0, Fill::Special},
};

}  // namespace

TEST(CastCuda, F32ToBf16) {
  HLM_REQUIRE_CUDA();
  for (const CastCase& c : kCases) {
    const std::string what = "cast.f32_to_bf16 n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset) +
                             " " + fill_name(c.fill);
    const auto total = static_cast<size_t>(c.n + c.offset);
    std::vector<float> src = make_values(total, c.fill, 31);
    if (c.fill == Fill::Large && total > 2) {  // beyond bf16's largest finite value: rounds to ±Inf
      src[0] = 3.4e38f;
      src[1] = -3.39e38f;
    }
    std::vector<uint16_t> cpu(total, 0);
    cast_f32_to_bf16(cpu.data() + c.offset, src.data() + c.offset, c.n);

    DeviceBuffer s = DeviceBuffer::from(src, "src"), d = DeviceBuffer(total * 2, "dst");
    cast_f32_to_bf16_cuda(d.as<__nv_bfloat16>() + c.offset, s.as<float>() + c.offset, c.n, ctx().stream());
    std::vector<uint16_t> gpu = d.download<uint16_t>();
    std::vector<uint16_t> gpu_body(gpu.begin() + c.offset, gpu.end()), cpu_body(cpu.begin() + c.offset, cpu.end());
    EXPECT_EQ(std::memcmp(gpu_body.data(), cpu_body.data(), gpu_body.size() * 2), 0) << what;
    for (int64_t i = 0; i < c.offset; ++i) EXPECT_EQ(gpu[static_cast<size_t>(i)], 0xFFFF) << what << ": wrote before dst";
    EXPECT_TRUE(buffers_ok({&d}, {&s})) << what;
  }
}

TEST(CastCuda, Bf16ToF32IsExact) {
  HLM_REQUIRE_CUDA();
  // Every bf16 bit pattern once (NaNs, infinities, subnormals, both zeros), then an odd length.
  std::vector<uint16_t> src(65536 + 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 40503u);
  for (size_t i = 0; i < 65536; ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<float> cpu(src.size());
  cast_bf16_to_f32(cpu.data(), src.data(), static_cast<int64_t>(src.size()));
  DeviceBuffer s = DeviceBuffer::from(src, "src"), d = DeviceBuffer(src.size() * 4, "dst");
  cast_bf16_to_f32_cuda(d.as<float>(), s.as<__nv_bfloat16>(), static_cast<int64_t>(src.size()), ctx().stream());
  const std::vector<float> gpu = d.download<float>();
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), cpu.size() * 4), 0) << "cast.bf16_to_f32";
  EXPECT_TRUE(buffers_ok({&d}, {&s})) << "cast.bf16_to_f32";
}
