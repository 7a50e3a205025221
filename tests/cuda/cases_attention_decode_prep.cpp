// The decode attention with the q/k preparation folded into the decode kernel (attention_cache_decode_prep_cuda,
// src/ops/attention/attention_cache.cu) against the two launches it replaces at a decode step:
// qk_norm_rope_cache_write_cuda (per-head norms, norms over the whole q and k rows, or none; RoPE; the new k/v rows
// into their cache slots) followed by attention_cache_forward_cuda with the same kernel — the warp kernel
// (DecodeKernel::warps, per-head norms or none) and the tiled kernel (DecodeKernel::tiled with its fold switched on:
// every case, whole rows included). BIT-IDENTICAL, compared byte for byte (NaN payloads included): the attention
// output, both caches, and the error flag — the contract of attention_cache_cuda.h; the folded launch leaves the raw q
// and k projections unchanged (checked). Each folded run with the separate split merge and with the merge in the last
// split block (the same bits).
// Cases: GQA groups 4 (one head group per KV head), 1 (MHA) and 8 (two head groups per KV head: one of them writes k);
// head dims 128 and 64; fp32 and bf16 caches (the new key enters the scores as the cache holds it, narrowed); both
// norms, one, none; full and partial RoPE (R = D/2), no RoPE; contexts 1..5000 in one batch, so the new key falls in
// the first, a middle or the last split (and a split longer than the kernel's batch of keys); max_context as given and
// bucketed to 256 as the engine's decode graphs do (more splits, empty ones); a sliding window of 100; NaN/±Inf in the
// projections; a position outside the RoPE table (NaN rotary dims, the flag). Whole-row norms (OLMo's, the tiled
// kernel only): the 7B shape (q and k rows of 4,096: the q/k kernel's 256-thread block order, summed by each split
// block), a GQA shape whose k row (512) takes the warp order and q row (2,048) the block order, rows of ≤ 1,024 in
// the warp order, an fp32 cache, NaN/±Inf, a bad position.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>

#include "harness.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

constexpr int64_t kPositions = 8192;
constexpr int64_t kBlock = 16;
constexpr float kEps = 1e-6f;

struct PrepCase {
  std::string name;
  std::vector<int64_t> cached;  // tokens each sequence holds before the step (its new token is at this position)
  int64_t Hq, Hkv, D;
  bool q_norm, k_norm;
  double rope_partial;  // 0: no RoPE
  bool bf16;
  int64_t window = 0;
  Fill fill = Fill::Normal;
  bool bad_position = false;  // sequence 1's position past the table
  int64_t bucket = 0;         // > 0: max_context rounded up to a multiple of it
  bool whole = false;         // the norms span the token's whole q and k rows (the tiled kernel only)
};

// RAII: the decode kernel and split merge for a scope, the tiled kernel's fold on.
struct Modes {
  DecodeKernel kernel;
  DecodeMerge merge;
  Modes(DecodeKernel k, DecodeMerge m)
      : kernel(attention_cache_cuda_decode_kernel()), merge(attention_cache_cuda_decode_merge()) {
    attention_cache_cuda_set_decode_kernel(k);
    attention_cache_cuda_set_decode_merge(m);
    attention_cache_cuda_set_tiled_qk_fold(1);
  }
  ~Modes() {
    attention_cache_cuda_set_decode_kernel(kernel);
    attention_cache_cuda_set_decode_merge(merge);
    attention_cache_cuda_set_tiled_qk_fold(-1);
  }
};

struct Outputs {
  std::vector<uint8_t> out, kc, vc;
  int flag = 0;
};

void expect_same(const std::string& what, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i += 4)
    bad += std::memcmp(a.data() + i, b.data() + i, std::min<size_t>(4, a.size() - i)) != 0;
  std::printf("[check] %s: %zu words, %zu differ\n", what.c_str(), a.size() / 4, bad);
  EXPECT_EQ(bad, 0u) << what;
}

void run_case(const PrepCase& c, DecodeKernel kernel, uint64_t seed) {
  const std::string kname = kernel == DecodeKernel::tiled ? "tiled: " : "warps: ";
  SCOPED_TRACE(kname + c.name);
  const int64_t N = static_cast<int64_t>(c.cached.size()), T = N, D = c.D;
  const int64_t Cq = c.Hq * D, Ckv = c.Hkv * D;
  const int64_t q_norm_n = c.whole ? Cq : D, k_norm_n = c.whole ? Ckv : D;  // the norms' rows
  // Layout: each sequence's blocks at shuffled ids of a pool with a few spare blocks.
  std::vector<int64_t> context(static_cast<size_t>(N)), cu(static_cast<size_t>(N + 1));
  int64_t max_blocks = 0, total = 0, max_ctx = 0;
  for (int64_t n = 0; n < N; ++n) {
    context[n] = c.cached[n] + 1;
    cu[n + 1] = n + 1;
    max_ctx = std::max(max_ctx, context[n]);
    max_blocks = std::max(max_blocks, (context[n] + kBlock - 1) / kBlock);
    total += (context[n] + kBlock - 1) / kBlock;
  }
  if (c.bucket > 0) max_ctx = (max_ctx + c.bucket - 1) / c.bucket * c.bucket;
  max_blocks = std::max(max_blocks, (max_ctx + kBlock - 1) / kBlock);
  const int64_t num_blocks = total + 3;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  std::vector<int32_t> tables(static_cast<size_t>(N * max_blocks), -1);
  size_t next = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < (context[n] + kBlock - 1) / kBlock; ++b) tables[n * max_blocks + b] = ids[next++];
  std::vector<int64_t> slots(static_cast<size_t>(T));
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t p = context[n] - 1;
    slots[n] = tables[n * max_blocks + p / kBlock] * kBlock + p % kBlock;
    positions[n] = static_cast<int32_t>(p);
  }
  if (c.bad_position && N > 1) positions[1] = static_cast<int32_t>(kPositions);

  const int64_t cache_n = num_blocks * kBlock * Ckv;
  std::vector<float> kc0 = make_values(static_cast<size_t>(cache_n), Fill::Normal, seed + 1);
  std::vector<float> vc0 = make_values(static_cast<size_t>(cache_n), Fill::Normal, seed + 2);
  const std::vector<float> q = make_values(static_cast<size_t>(T * Cq), c.fill, seed + 3);
  const std::vector<float> k = make_values(static_cast<size_t>(T * Ckv), c.fill, seed + 4);
  const std::vector<float> v = make_values(static_cast<size_t>(T * Ckv), c.fill, seed + 5);
  const std::vector<float> qw = make_values(static_cast<size_t>(q_norm_n), Fill::Normal, seed + 6);
  const std::vector<float> kw = make_values(static_cast<size_t>(k_norm_n), Fill::Normal, seed + 7);
  const auto cache_buffer = [&](const std::vector<float>& values, const char* what) {
    return c.bf16 ? DeviceBuffer::from(to_bf16(values), what) : DeviceBuffer::from(values, what);
  };

  RopeParams rp;
  rp.rope_theta = 1e6;
  rp.partial_rotary_factor = c.rope_partial > 0 ? c.rope_partial : 1.0;
  const RopeTable table = rope_table_build(rp, D, kPositions);
  std::vector<float> cos_h, sin_h;
  rope_cuda_table_host(cos_h, sin_h, table, kPositions);
  const DeviceBuffer cos_d = DeviceBuffer::from(cos_h, "cos"), sin_d = DeviceBuffer::from(sin_h, "sin");
  const RopeCudaTable rope{cos_d.as<float>(), sin_d.as<float>(), kPositions, table.head_dim, table.rotary_dim};
  const RopeCudaTable* rope_ptr = c.rope_partial > 0 ? &rope : nullptr;

  AttentionCacheCudaParams p;
  p.total_tokens = T;
  p.n_seqs = N;
  p.q_heads = c.Hq;
  p.kv_heads = c.Hkv;
  p.head_dim = D;
  p.num_blocks = num_blocks;
  p.block_size = kBlock;
  p.max_blocks = max_blocks;
  p.max_query_len = 1;
  p.max_context = max_ctx;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  p.window = c.window;
  QkNormRopeCudaParams qp;
  qp.shape = {T, c.Hq, c.Hkv, D, c.q_norm ? q_norm_n : 0, c.k_norm ? k_norm_n : 0, kEps};
  qp.cache_slots = num_blocks * kBlock;

  const DeviceBuffer v_d = DeviceBuffer::from(v, "v"), qw_d = DeviceBuffer::from(qw, "q_norm"),
                     kw_d = DeviceBuffer::from(kw, "k_norm"), pos_d = DeviceBuffer::from(positions, "positions"),
                     slots_d = DeviceBuffer::from(slots, "slots"), tables_d = DeviceBuffer::from(tables, "tables"),
                     ctx_d = DeviceBuffer::from(context, "context"), cu_d = DeviceBuffer::from(cu, "cu");
  const float* qn = c.q_norm ? qw_d.as<float>() : nullptr;
  const float* kn = c.k_norm ? kw_d.as<float>() : nullptr;
  const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);

  // One path: the two launches (folded = false) or the folded one.
  const auto run = [&](bool folded, DecodeMerge merge) {
    Modes modes(kernel, merge);
    DeviceBuffer q_d = DeviceBuffer::from(q, "q"), k_d = DeviceBuffer::from(k, "k");
    DeviceBuffer kc = cache_buffer(kc0, "k_cache"), vc = cache_buffer(vc0, "v_cache");
    DeviceBuffer out(static_cast<size_t>(T * Cq) * sizeof(float), "out"), ws(std::max<size_t>(ws_bytes, 4), "ws");
    DeviceBuffer flag = DeviceBuffer::from(std::vector<int>{0}, "flag");
    if (!folded) {
      if (c.bf16) {
        qk_norm_rope_cache_write_cuda(q_d.as<float>(), k_d.as<float>(), v_d.as<float>(), qn, kn, pos_d.as<int32_t>(),
                                      rope_ptr, kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>(), slots_d.as<int64_t>(),
                                      qp, flag.as<int>(), ctx().stream());
        attention_cache_forward_cuda(out.as<float>(), q_d.as<float>(), kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>(),
                                     tables_d.as<int32_t>(), ctx_d.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(),
                                     ws_bytes, flag.as<int>(), ctx().stream());
      } else {
        qk_norm_rope_cache_write_cuda(q_d.as<float>(), k_d.as<float>(), v_d.as<float>(), qn, kn, pos_d.as<int32_t>(),
                                      rope_ptr, kc.as<float>(), vc.as<float>(), slots_d.as<int64_t>(), qp,
                                      flag.as<int>(), ctx().stream());
        attention_cache_forward_cuda(out.as<float>(), q_d.as<float>(), kc.as<float>(), vc.as<float>(),
                                     tables_d.as<int32_t>(), ctx_d.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(),
                                     ws_bytes, flag.as<int>(), ctx().stream());
      }
    } else {
      AttentionDecodePrepCuda prep;
      prep.q = q_d.as<float>();
      prep.k = k_d.as<float>();  // read only (checked below)
      prep.v = v_d.as<float>();
      prep.q_norm = qn;
      prep.k_norm = kn;
      prep.q_norm_whole = prep.k_norm_whole = c.whole;
      prep.eps = kEps;
      prep.positions = pos_d.as<int32_t>();
      prep.rope = rope_ptr;
      prep.slot_mapping = slots_d.as<int64_t>();
      prep.cache_slots = num_blocks * kBlock;
      if (c.bf16) {
        EXPECT_TRUE(attention_cache_decode_prep_supported(p, prep, kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>()));
        attention_cache_decode_prep_cuda(out.as<float>(), prep, kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>(),
                                         tables_d.as<int32_t>(), ctx_d.as<int64_t>(), cu_d.as<int64_t>(), p,
                                         ws.as<void>(), ws_bytes, flag.as<int>(), ctx().stream());
      } else {
        EXPECT_TRUE(attention_cache_decode_prep_supported(p, prep, kc.as<float>(), vc.as<float>()));
        attention_cache_decode_prep_cuda(out.as<float>(), prep, kc.as<float>(), vc.as<float>(), tables_d.as<int32_t>(),
                                         ctx_d.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(), ws_bytes,
                                         flag.as<int>(), ctx().stream());
      }
    }
    ctx().synchronize();
    EXPECT_TRUE(buffers_ok({&out, &ws, &q_d, &k_d, &kc, &vc, &flag}, {&v_d, &qw_d, &kw_d, &pos_d, &slots_d, &tables_d,
                                                                       &ctx_d, &cu_d}));
    if (folded) {
      EXPECT_TRUE(buffers_ok({}, {&q_d, &k_d})) << "the raw projections are read, not written";
    }
    Outputs o;
    o.out = out.download_bytes();
    o.kc = kc.download_bytes();
    o.vc = vc.download_bytes();
    o.flag = flag.download<int>()[0];
    return o;
  };
  const Outputs two = run(false, DecodeMerge::kernel);
  EXPECT_EQ(two.flag, c.bad_position ? 1 : 0);
  for (const DecodeMerge merge : {DecodeMerge::kernel, DecodeMerge::fused}) {
    const std::string tag = kname + c.name + (merge == DecodeMerge::fused ? " (fused merge)" : " (merge kernel)") + " ";
    const Outputs one = run(true, merge);
    expect_same(tag + "out", one.out, two.out);
    expect_same(tag + "k_cache", one.kc, two.kc);
    expect_same(tag + "v_cache", one.vc, two.vc);
    EXPECT_EQ(one.flag, two.flag) << tag;
  }
  std::printf("[prep] %s%s: %lld splits\n", kname.c_str(), c.name.c_str(),
              static_cast<long long>(attention_cache_cuda_decode_splits(p)));
}

}  // namespace

TEST(AttentionDecodePrepCuda, EqualsTheQkLaunchAndTheDecodeKernelBitForBit) {
  HLM_REQUIRE_CUDA();
  const Fill s = Fill::Special;
  const std::vector<PrepCase> cases = {
      {"g4 D128 bf16, norms, rope", {0, 16, 299, 999, 2047}, 8, 2, 128, true, true, 1.0, true},
      {"g4 D128 bf16, bucketed context", {0, 16, 299, 999, 2047}, 8, 2, 128, true, true, 1.0, true, 0, Fill::Normal,
       false, 256},
      {"g1 D128 f32 (MHA)", {5, 700, 64}, 4, 4, 128, true, true, 1.0, false},
      {"g8 D128 bf16 (two head groups per KV head)", {100, 1500}, 16, 2, 128, true, true, 1.0, true},
      {"g2 D64 f32, no norms, partial rope", {33, 2000, 0}, 4, 2, 64, false, false, 0.5, false},
      {"g4 D128 bf16, q norm only, no rope", {10, 300}, 4, 1, 128, true, false, 0.0, true},
      {"g4 D128 bf16, window 100", {0, 1000, 4999}, 8, 2, 128, true, true, 1.0, true, 100},
      {"g2 D64 bf16, NaN/Inf projections", {40, 130}, 4, 2, 64, true, true, 1.0, true, 0, s},
      {"g2 D64 f32, a bad position", {20, 50}, 4, 2, 64, true, true, 1.0, false, 0, Fill::Normal, true},
      // norms over the whole q and k rows (OLMo's)
      {"whole rows: 7B MHA (32 heads of 128), bf16", {0, 1087, 300}, 32, 32, 128, true, true, 1.0, true, 0,
       Fill::Normal, false, 0, true},
      {"whole rows: 7B MHA, bucketed context, window 100", {1023, 77}, 32, 32, 128, true, true, 1.0, true, 100,
       Fill::Normal, false, 256, true},
      {"whole rows: g4 q 2048 (block order), k 512 (warp order)", {16, 999}, 16, 4, 128, true, true, 1.0, true, 0,
       Fill::Normal, false, 0, true},
      {"whole rows: g2 D64 of 256 / 128 (warp order), f32, partial rope", {33, 700}, 4, 2, 64, true, true, 0.5, false,
       0, Fill::Normal, false, 0, true},
      {"whole rows: k norm only, rows of 1152 (block order)", {5, 260}, 9, 9, 128, false, true, 1.0, true, 0,
       Fill::Normal, false, 0, true},
      {"whole rows: NaN/Inf projections", {40, 130}, 16, 16, 64, true, true, 1.0, true, 0, s, false, 0, true},
      {"whole rows: a bad position", {20, 50}, 8, 8, 128, true, true, 1.0, true, 0, Fill::Normal, true, 0, true},
  };
  uint64_t seed = 700;
  for (const PrepCase& c : cases) {
    seed += 10;
    if (!c.whole) run_case(c, DecodeKernel::warps, seed);
    run_case(c, DecodeKernel::tiled, seed);
  }
}

// What the fold takes: the tiled kernel only with its switch on, whole rows not through the warp kernel.
TEST(AttentionDecodePrepCuda, SupportedFollowsTheKernelAndTheSwitch) {
  HLM_REQUIRE_CUDA();
  AttentionCacheCudaParams p;
  p.total_tokens = p.n_seqs = 1;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 128;
  p.num_blocks = 4;
  p.block_size = kBlock;
  p.max_blocks = 4;
  p.max_query_len = 1;
  p.max_context = 64;
  DeviceBuffer buf(1 << 16, "buf");
  const float* f = buf.as<float>();
  const int64_t* slots = reinterpret_cast<const int64_t*>(f);
  AttentionDecodePrepCuda prep;
  prep.q = prep.k = prep.v = f;
  prep.slot_mapping = slots;
  const auto* cache = reinterpret_cast<const __nv_bfloat16*>(f);
  const auto supported = [&] { return attention_cache_decode_prep_supported(p, prep, cache, cache); };
  {
    Modes m(DecodeKernel::tiled, DecodeMerge::kernel);
    EXPECT_TRUE(supported());
    attention_cache_cuda_set_tiled_qk_fold(0);
    EXPECT_FALSE(supported());
    attention_cache_cuda_set_tiled_qk_fold(1);
    prep.q_norm_whole = true;
    EXPECT_TRUE(supported());
  }
  {
    Modes m(DecodeKernel::warps, DecodeMerge::kernel);
    EXPECT_FALSE(supported()) << "whole rows through the warp kernel";
    prep.q_norm_whole = false;
    EXPECT_TRUE(supported());
  }
  {
    Modes m(DecodeKernel::streams, DecodeMerge::kernel);
    EXPECT_FALSE(supported());
  }
}
