// RoPE: CUDA (src/ops/rope/rope.cu) vs the CPU reference (rope_ref.cpp), forward and backward, f32, bit-identical:
// the device table holds exactly the CPU's per-token cos/sin floats (rope_cuda_table_host replays rope_cos_sin) and
// the kernel does the CPU's two products and one sum per output with separate roundings.
// Cases: rope types default (Qwen3 theta 1e6, and 1e4), partial rotary (R = D/4, pass-through dims), linear, yarn
// (attention_scaling != 1), llama3; odd T and H (1, 3, 7, 65, 127); positions in order, shuffled and repeated;
// every fill; out-of-range positions (error flag). The bf16-output forward (rope_forward_bf16_cuda) against the
// fp32 forward's result cast by core/dtype.h's rounding, bit for bit, on the same cases.
#include <cuda_bf16.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "harness.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct RopeCase {
  std::string type;
  double theta;
  double partial;
  int64_t D, T, H;
  Fill fill;
  bool random_positions;
};

const std::vector<RopeCase> kCases = {
    {"default", 1e6, 1.0, 128, 127, 7, Fill::Normal, true},  {"default", 1e4, 1.0, 64, 65, 3, Fill::Normal, false},
    {"default", 1e4, 0.25, 64, 1, 1, Fill::Normal, true},    {"linear", 1e4, 1.0, 64, 33, 2, Fill::Normal, true},
    {"yarn", 1e6, 1.0, 128, 65, 3, Fill::Normal, true},      {"llama3", 5e5, 1.0, 64, 127, 1, Fill::Normal, true},
    {"default", 1e6, 0.5, 128, 65, 3, Fill::Large, true},    {"default", 1e6, 1.0, 128, 7, 3, Fill::Zeros, true},
    {"default", 1e6, 1.0, 64, 33, 3, Fill::Denormal, true},  {"yarn", 1e6, 1.0, 64, 65, 3, Fill::Special, true},
};
constexpr int64_t kPositions = 8192;

RopeTable make_table(const RopeCase& c) {
  RopeParams p;
  p.rope_type = c.type;
  p.rope_theta = c.theta;
  p.partial_rotary_factor = c.partial;
  if (c.type == "linear") p.factor = 2.0;
  if (c.type == "yarn") {
    p.factor = 4.0;
    p.original_max_position_embeddings = 2048;
  }
  if (c.type == "llama3") {
    p.factor = 8.0;
    p.original_max_position_embeddings = 1024;
  }
  return rope_table_build(p, c.D, kPositions);
}

std::string name(const RopeCase& c, const char* what) {
  return std::string("rope.") + what + " " + c.type + " D=" + std::to_string(c.D) + " partial=" +
         std::to_string(c.partial) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " " + fill_name(c.fill);
}

std::vector<int32_t> make_positions(const RopeCase& c) {
  std::vector<int32_t> pos(static_cast<size_t>(c.T));
  for (size_t t = 0; t < pos.size(); ++t)
    pos[t] = c.random_positions ? static_cast<int32_t>(philox4x32(7, 61, t)[0] % kPositions)
                                : static_cast<int32_t>(100 + t);
  if (pos.size() > 3) pos[3] = pos[1];  // a repeated position
  return pos;
}

// The device table for `table`, kept alive by the returned buffers.
struct DeviceTable {
  DeviceBuffer cos, sin;
  RopeCudaTable view;
};
DeviceTable upload_table(const RopeTable& table) {
  std::vector<float> cos, sin;
  rope_cuda_table_host(cos, sin, table, kPositions);
  DeviceTable d{DeviceBuffer::from(cos, "cos"), DeviceBuffer::from(sin, "sin"), {}};
  d.view = {d.cos.as<float>(), d.sin.as<float>(), kPositions, table.head_dim, table.rotary_dim};
  return d;
}

}  // namespace

TEST(RopeCuda, ForwardAndBackwardExact) {
  HLM_REQUIRE_CUDA();
  for (const RopeCase& c : kCases) {
    const RopeTable table = make_table(c);
    const DeviceTable dtab = upload_table(table);
    const auto pos = make_positions(c);
    const auto x0 = make_values(static_cast<size_t>(c.T * c.H * c.D), c.fill, 71);

    std::vector<float> fwd = x0, bwd = x0;
    rope_forward(fwd.data(), pos.data(), c.T, c.H, table);
    rope_backward<float>(bwd.data(), pos.data(), c.T, c.H, table);

    DeviceBuffer p = DeviceBuffer::from(pos, "positions"), x = DeviceBuffer::from(x0, "x"),
                 d = DeviceBuffer::from(x0, "d"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
    rope_forward_cuda(x.as<float>(), p.as<int32_t>(), c.T, c.H, dtab.view, flag.as<int>(), ctx().stream());
    rope_backward_cuda(d.as<float>(), p.as<int32_t>(), c.T, c.H, dtab.view, flag.as<int>(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd"), x.download<float>(), fwd));
    EXPECT_TRUE(check_exact(name(c, "bwd"), d.download<float>(), bwd));
    EXPECT_EQ(read_flag(flag), 0) << name(c, "");
    EXPECT_TRUE(buffers_ok({&x, &d, &flag}, {&p, &dtab.cos, &dtab.sin})) << name(c, "");
  }
}

TEST(RopeCuda, OutOfRangePositionsSetTheFlag) {
  HLM_REQUIRE_CUDA();
  const RopeCase c{"default", 1e6, 0.5, 64, 6, 2, Fill::Normal, true};
  const RopeTable table = make_table(c);
  const DeviceTable dtab = upload_table(table);
  std::vector<int32_t> pos{5, -1, 7, static_cast<int32_t>(kPositions), 0, 3};
  const auto x0 = make_values(static_cast<size_t>(c.T * c.H * c.D), c.fill, 72);

  std::vector<int32_t> valid = pos;
  valid[1] = valid[3] = 0;
  std::vector<float> expect = x0;
  rope_forward(expect.data(), valid.data(), c.T, c.H, table);
  for (int64_t t : {1, 3})
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < table.rotary_dim; ++i)
        expect[static_cast<size_t>((t * c.H + h) * c.D + i)] = std::numeric_limits<float>::quiet_NaN();

  DeviceBuffer p = DeviceBuffer::from(pos, "positions"), x = DeviceBuffer::from(x0, "x"),
               flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
  rope_forward_cuda(x.as<float>(), p.as<int32_t>(), c.T, c.H, dtab.view, flag.as<int>(), ctx().stream());
  EXPECT_EQ(read_flag(flag), 1);
  EXPECT_TRUE(check_exact("rope.fwd bad positions", x.download<float>(), expect));
  EXPECT_TRUE(buffers_ok({&x, &flag}, {&p}));
}

TEST(RopeCuda, TableRefusesPositionsBeyondDynamicLimit) {
  // Host-only: runs without a GPU.
  RopeParams p;
  p.rope_type = "dynamic";
  p.factor = 2.0;
  const RopeTable table = rope_table_build(p, 64, 128);
  std::vector<float> cos, sin;
  EXPECT_NO_THROW(rope_cuda_table_host(cos, sin, table, 128));
  EXPECT_EQ(cos.size(), size_t(128 * 32));
  EXPECT_THROW(rope_cuda_table_host(cos, sin, table, 129), Error);
}

// The bf16-output forward: every case above and the bad positions: each element (pass-through dims included) the
// rounding of the in-place fp32 forward's, x left as it was, the flag as the fp32 forward sets it.
TEST(RopeCuda, Bf16ForwardIsTheCastOfTheF32One) {
  HLM_REQUIRE_CUDA();
  std::vector<RopeCase> cases = kCases;
  // An odd half rotary dim (R = 6: the one-item kernel; every case above takes the two-item one), then the case that
  // gets bad positions (the two-item kernel).
  cases.push_back({"default", 1e4, 0.09375, 64, 5, 3, Fill::Normal, true});
  cases.push_back({"default", 1e6, 0.5, 64, 6, 2, Fill::Normal, true});  // gets the bad positions below
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const RopeCase& c = cases[ci];
    const bool bad = ci + 1 == cases.size();
    const RopeTable table = make_table(c);
    const DeviceTable dtab = upload_table(table);
    std::vector<int32_t> pos = make_positions(c);
    if (bad) pos = {5, -1, 7, static_cast<int32_t>(kPositions), 0, 3};
    const size_t n = static_cast<size_t>(c.T * c.H * c.D);
    const auto x0 = make_values(n, c.fill, 73);
    DeviceBuffer p = DeviceBuffer::from(pos, "positions"), x32 = DeviceBuffer::from(x0, "x (fp32, in place)"),
                 x = DeviceBuffer::from(x0, "x"), out(n * 2, "out bf16"),
                 flag32 = DeviceBuffer::from(std::vector<int>{0}, "flag fp32"),
                 flag16 = DeviceBuffer::from(std::vector<int>{0}, "flag bf16");
    rope_forward_cuda(x32.as<float>(), p.as<int32_t>(), c.T, c.H, dtab.view, flag32.as<int>(), ctx().stream());
    rope_forward_bf16_cuda(out.as<__nv_bfloat16>(), x.as<float>(), p.as<int32_t>(), c.T, c.H, dtab.view,
                           flag16.as<int>(), ctx().stream());
    const std::vector<float> f32 = x32.download<float>();
    const std::vector<uint16_t> bits = out.download<uint16_t>();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += bits[i] != f32_to_bf16(f32[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << name(c, "fwd bf16 vs cast of the fp32 fwd") << (bad ? " (bad positions)" : "");
    EXPECT_EQ(read_flag(flag16), read_flag(flag32)) << name(c, "fwd bf16 flag");
    EXPECT_EQ(read_flag(flag16), bad ? 1 : 0) << name(c, "fwd bf16 flag");
    EXPECT_TRUE(buffers_ok({&x32, &out, &flag32, &flag16}, {&p, &x, &dtab.cos, &dtab.sin})) << name(c, "fwd bf16");
  }
}
