// Embedding: CUDA (src/ops/embedding/embedding.cu) vs the CPU reference (embedding_ref.cpp), f32, bit-identical:
// the forward is one fp32 product per element on both sides; the backward sums each id's tokens in position order
// in fp64 on both sides (stable sort on the GPU, counting sort on the CPU), then adds multiplier · sum rounded once.
// Cases: odd T/V/D, multipliers 1, 2.5, 0.5 and 12 (Granite's embedding_multiplier), a tiny vocabulary (long runs of
// equal ids), one id repeated 257 times, special values in the table / d_out, and out-of-range ids (error flag).
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "harness.h"
#include "ops/embedding/embedding.h"
#include "ops/embedding/embedding_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct EmbeddingCase {
  int64_t T, V, D;
  float multiplier;
  Fill fill;             // of the table (forward) and d_out (backward)
  bool one_id = false;   // every token has the same id
};

const std::vector<EmbeddingCase> kCases = {
    {1, 1, 1, 1.0f, Fill::Normal},         {65, 7, 127, 2.5f, Fill::Normal},   {127, 1000, 65, 1.0f, Fill::Normal},
    {1000, 50, 1000, 0.5f, Fill::Normal},  {4096, 3, 64, 1.0f, Fill::Normal},  {300, 151, 4096, 12.0f, Fill::Normal},
    {257, 5000, 33, 1.0f, Fill::Normal, true}, {127, 11, 65, 1.0f, Fill::Large}, {65, 9, 127, 1.0f, Fill::Denormal},
    {127, 13, 65, 2.5f, Fill::Special},    {65, 7, 33, 1.0f, Fill::Zeros},
};

std::string name(const EmbeddingCase& c, const char* what) {
  return std::string("embedding.") + what + " T=" + std::to_string(c.T) + " V=" + std::to_string(c.V) +
         " D=" + std::to_string(c.D) + " m=" + std::to_string(c.multiplier) + " " + fill_name(c.fill) +
         (c.one_id ? " one-id" : "");
}

std::vector<int32_t> make_ids(const EmbeddingCase& c) {
  std::vector<int32_t> ids(static_cast<size_t>(c.T));
  for (size_t t = 0; t < ids.size(); ++t)
    ids[t] = c.one_id ? static_cast<int32_t>(c.V / 2)
                      : static_cast<int32_t>(philox4x32(99, 31, t)[0] % static_cast<uint32_t>(c.V));
  return ids;
}

}  // namespace

TEST(EmbeddingCuda, Forward) {
  HLM_REQUIRE_CUDA();
  for (const EmbeddingCase& c : kCases) {
    const auto table = make_values(static_cast<size_t>(c.V * c.D), c.fill, 41);
    const auto ids = make_ids(c);
    std::vector<float> cpu(static_cast<size_t>(c.T * c.D));
    embedding_forward(cpu.data(), table.data(), ids.data(), c.T, c.V, c.D, c.multiplier);

    DeviceBuffer tb = DeviceBuffer::from(table, "table"), id = DeviceBuffer::from(ids, "ids"),
                 out(cpu.size() * 4, "out"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
    embedding_forward_cuda(out.as<float>(), tb.as<float>(), id.as<int32_t>(), {c.T, c.V, c.D, c.multiplier},
                           flag.as<int>(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "fwd"), out.download<float>(), cpu));
    EXPECT_EQ(read_flag(flag), 0) << name(c, "fwd");
    EXPECT_TRUE(buffers_ok({&out, &flag}, {&tb, &id})) << name(c, "fwd");
  }
}

TEST(EmbeddingCuda, BackwardDeterministicAndExact) {
  HLM_REQUIRE_CUDA();
  for (const EmbeddingCase& c : kCases) {
    const auto d_out = make_values(static_cast<size_t>(c.T * c.D), c.fill, 42);
    const auto init = make_values(static_cast<size_t>(c.V * c.D), Fill::Normal, 43);
    const auto ids = make_ids(c);
    std::vector<float> cpu = init;
    embedding_backward<float>(cpu.data(), d_out.data(), ids.data(), c.T, c.V, c.D, c.multiplier);

    const EmbeddingCudaParams p{c.T, c.V, c.D, c.multiplier};
    DeviceBuffer dt = DeviceBuffer::from(init, "d_table"), g = DeviceBuffer::from(d_out, "d_out"),
                 id = DeviceBuffer::from(ids, "ids"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag"),
                 ws(embedding_backward_cuda_workspace_bytes(p), "workspace");
    embedding_backward_cuda(dt.as<float>(), g.as<float>(), id.as<int32_t>(), p, ws.as<void>(), ws.bytes(),
                            flag.as<int>(), ctx().stream());
    const auto first = dt.download<float>();
    EXPECT_TRUE(check_exact(name(c, "bwd"), first, cpu));
    EXPECT_EQ(read_flag(flag), 0) << name(c, "bwd");
    EXPECT_TRUE(buffers_ok({&dt, &ws, &flag}, {&g, &id})) << name(c, "bwd");

    // Run-to-run determinism: the same call again from the same start gives the same bits.
    dt.upload(init.data(), init.size() * 4);
    embedding_backward_cuda(dt.as<float>(), g.as<float>(), id.as<int32_t>(), p, ws.as<void>(), ws.bytes(),
                            flag.as<int>(), ctx().stream());
    EXPECT_TRUE(check_exact(name(c, "bwd repeat"), dt.download<float>(), first));
  }
}

TEST(EmbeddingCuda, OutOfRangeIdsSetTheFlag) {
  HLM_REQUIRE_CUDA();
  const int64_t T = 9, V = 5, D = 7;
  std::vector<int32_t> ids{0, 4, -1, 2, 5, 2, 3, 1000, 1};
  const std::vector<size_t> bad{2, 4, 7};
  const auto table = make_values(static_cast<size_t>(V * D), Fill::Normal, 51);
  const auto d_out = make_values(static_cast<size_t>(T * D), Fill::Normal, 52);
  const auto init = make_values(static_cast<size_t>(V * D), Fill::Normal, 53);

  // The CPU contract: an input error naming the position.
  std::vector<float> scratch(static_cast<size_t>(T * D));
  EXPECT_THROW(embedding_forward(scratch.data(), table.data(), ids.data(), T, V, D), Error);

  // Expected GPU behaviour: forward rows of bad tokens are NaN, the rest as the CPU with valid ids; backward skips
  // the bad tokens (as the CPU on the valid tokens only).
  std::vector<int32_t> valid_ids = ids;
  for (size_t t : bad) valid_ids[t] = 0;
  std::vector<float> fwd(static_cast<size_t>(T * D));
  embedding_forward(fwd.data(), table.data(), valid_ids.data(), T, V, D, 1.0f);
  for (size_t t : bad)
    for (int64_t d = 0; d < D; ++d) fwd[t * D + static_cast<size_t>(d)] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> kept_ids;
  std::vector<float> kept_rows;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (std::find(bad.begin(), bad.end(), t) != bad.end()) continue;
    kept_ids.push_back(ids[t]);
    kept_rows.insert(kept_rows.end(), d_out.begin() + static_cast<int64_t>(t) * D,
                     d_out.begin() + static_cast<int64_t>(t + 1) * D);
  }
  std::vector<float> bwd = init;
  embedding_backward<float>(bwd.data(), kept_rows.data(), kept_ids.data(), static_cast<int64_t>(kept_ids.size()), V, D);

  const EmbeddingCudaParams p{T, V, D, 1.0f};
  DeviceBuffer tb = DeviceBuffer::from(table, "table"), id = DeviceBuffer::from(ids, "ids"), out(fwd.size() * 4, "out"),
               flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
  embedding_forward_cuda(out.as<float>(), tb.as<float>(), id.as<int32_t>(), p, flag.as<int>(), ctx().stream());
  EXPECT_EQ(read_flag(flag), 1);
  EXPECT_TRUE(check_exact("embedding.fwd bad ids", out.download<float>(), fwd));

  DeviceBuffer dt = DeviceBuffer::from(init, "d_table"), g = DeviceBuffer::from(d_out, "d_out"),
               flag2 = DeviceBuffer::from(std::vector<int>{0}, "flag"),
               ws(embedding_backward_cuda_workspace_bytes(p), "workspace");
  embedding_backward_cuda(dt.as<float>(), g.as<float>(), id.as<int32_t>(), p, ws.as<void>(), ws.bytes(),
                          flag2.as<int>(), ctx().stream());
  EXPECT_EQ(read_flag(flag2), 1);
  EXPECT_TRUE(check_exact("embedding.bwd bad ids", dt.download<float>(), bwd));
  EXPECT_TRUE(buffers_ok({&out, &flag, &dt, &ws, &flag2}, {&tb, &id, &g}));
}
