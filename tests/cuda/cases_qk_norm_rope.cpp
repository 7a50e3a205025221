// q/k norm + RoPE + KV cache write in one launch (src/ops/qk_norm_rope/qk_norm_rope.cu) against
//   (1) the five launches it replaces in CudaEngine's attention mixer (rmsnorm_forward_cuda on q and k with
//       attention_qk_norm_params' rows, rope_forward_cuda on q and k, attention_cache_write_cuda): BIT-IDENTICAL
//       q, k, k_cache and v_cache (fp32 and bf16 caches, NaN payloads included, compared byte for byte) and the same
//       error flag — the contract of qk_norm_rope_cuda.h;
//   (2) the CPU reference (qk_norm_rope_ref.cpp): exact without norms (RoPE and the copies are exact on both sides);
//       with norms by the fp32 rule (harness.h), tolerance below.
// Cases: head dims 64, 128, 80 and 66 (no 16-byte rows: the scalar norm order and scalar loads); GQA ratios 1, 3, 4, 8;
// odd token counts (1, 3, 5, 7, 9, 11, 17, 33, 65); per-head norms (warp path), whole-projection norms on the warp
// path (Hq·D ≤ 1024) and on the block path (1920, 4096: OLMo-2/3), with and without each norm, with and without RoPE,
// partial RoPE (R = D/2: pass-through dims); positions at the table's last entries; every fill (large, zeros,
// subnormal, NaN/±Inf); q and k one float past a 16-byte boundary (the norms' scalar order); bad positions (−1 and the
// table's size: NaN rotary dims, flag) and bad slots (−1 and the pool's size: not written, flag).
//
// Tolerance against the CPU (fp32 rule, u = 2^-24): the norm output n = w·(x·r) carries k_n = k_r + 2 roundings as in
// cases_rmsnorm.cpp (L = the sum's longest chain for this row length and order, k_r = (L + 2)/2 + 2); RoPE adds two
// products and one sum (3) and the table's cos/sin floats differ from the double reference's by ≤ 1 rounding (1):
// k = k_n + 4 relative to mag = scaling·(|n_i| + |n_pair|) on the rotary dims, k = k_n relative to |n_i| elsewhere.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "harness.h"
#include "ops/attention/attention_cache_cuda.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/qk_norm_rope/qk_norm_rope_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

enum class Norm { None, PerHead, Whole };

struct QkCase {
  int64_t T, Hq, Hkv, D;
  Norm q_norm, k_norm;
  double rope_partial;  // 0: no RoPE
  bool bf16_cache;
  Fill fill;
  bool misaligned = false;  // q and k one float past a 16-byte boundary
};

const std::vector<QkCase> kCases = {
    // Qwen3-4B's decode step and prefill shapes
    {1, 32, 8, 128, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Normal},
    {65, 32, 8, 128, Norm::PerHead, Norm::PerHead, 1.0, false, Fill::Normal},
    {7, 16, 2, 64, Norm::PerHead, Norm::PerHead, 1.0, false, Fill::Normal},
    {9, 12, 4, 80, Norm::PerHead, Norm::PerHead, 0.5, true, Fill::Normal},
    {5, 6, 2, 66, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Normal},
    // whole-projection norms: warp path (8·128 = 1024), block path (OLMo-3 7B: 32·128 = 4096; 24·80 = 1920)
    {33, 8, 8, 128, Norm::Whole, Norm::Whole, 1.0, false, Fill::Normal},
    {3, 32, 32, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
    {5, 24, 8, 80, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
    {3, 12, 4, 66, Norm::Whole, Norm::PerHead, 1.0, false, Fill::Normal},
    // whole-projection norms at ≤ 64 tokens run as a cluster of blocks per token (the largest divisor of Hkv ≤ 8):
    // OLMo's batch-1 decode (8 blocks), 6 KV heads (6 blocks), 5 (5), a per-head k norm in a cluster, one KV head
    // (no cluster); at 70 tokens one block per token again
    {1, 32, 32, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
    {4, 12, 6, 64, Norm::Whole, Norm::Whole, 0.5, false, Fill::Normal},
    {2, 10, 5, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal, true},
    {3, 16, 8, 64, Norm::PerHead, Norm::Whole, 1.0, false, Fill::Normal},
    {2, 8, 1, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
    {70, 16, 16, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
    // one norm only, no norms, no RoPE
    {11, 6, 3, 128, Norm::PerHead, Norm::None, 1.0, true, Fill::Normal},
    {9, 4, 2, 64, Norm::None, Norm::None, 1.0, false, Fill::Normal},
    {11, 6, 3, 128, Norm::PerHead, Norm::PerHead, 0.0, true, Fill::Normal},
    {3, 2, 1, 80, Norm::None, Norm::None, 0.0, false, Fill::Normal},
    // fills
    {17, 8, 2, 128, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Special},
    {17, 8, 2, 128, Norm::Whole, Norm::Whole, 1.0, false, Fill::Special},
    {5, 4, 4, 64, Norm::PerHead, Norm::PerHead, 1.0, false, Fill::Large},
    {5, 16, 16, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Large},
    {3, 4, 2, 64, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Denormal},
    {3, 4, 2, 80, Norm::PerHead, Norm::PerHead, 0.5, false, Fill::Zeros},
    // misaligned q / k: rmsnorm.cu's scalar order (V = 1)
    {5, 4, 2, 128, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Normal, true},
    {3, 32, 32, 128, Norm::Whole, Norm::Whole, 1.0, false, Fill::Normal, true},
    {7, 8, 8, 64, Norm::Whole, Norm::Whole, 1.0, false, Fill::Normal, true},
    // 64 KiB of rows per token: past the 48 KiB default (the kernel's opt-in shared memory)
    {2, 64, 32, 128, Norm::Whole, Norm::Whole, 1.0, true, Fill::Normal},
};
constexpr int64_t kPositions = 4096;
constexpr int64_t kBlockSize = 16;
constexpr float kEps = 1e-6f;

std::string name(const QkCase& c) {
  auto norm = [](Norm n) { return n == Norm::None ? "none" : n == Norm::PerHead ? "head" : "whole"; };
  return "qk_norm_rope T=" + std::to_string(c.T) + " Hq=" + std::to_string(c.Hq) + " Hkv=" + std::to_string(c.Hkv) +
         " D=" + std::to_string(c.D) + " qn=" + norm(c.q_norm) + " kn=" + norm(c.k_norm) +
         " rope=" + std::to_string(c.rope_partial) + (c.bf16_cache ? " bf16" : " f32") + " " + fill_name(c.fill) +
         (c.misaligned ? " misaligned" : "");
}

int64_t norm_size(Norm n, int64_t heads, int64_t D) { return n == Norm::None ? 0 : n == Norm::PerHead ? D : heads * D; }

RopeTable make_table(int64_t D, double partial) {
  RopeParams p;
  p.rope_theta = 1e6;
  p.partial_rotary_factor = partial;
  return rope_table_build(p, D, kPositions);
}

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

// Byte-for-byte equality of two downloads (floats or bf16), NaN payloads included.
::testing::AssertionResult same_bytes(const std::string& what, const std::vector<uint8_t>& a,
                                      const std::vector<uint8_t>& b, size_t elem) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i + elem <= a.size(); i += elem)
    if (std::memcmp(a.data() + i, b.data() + i, elem) != 0 && bad++ == 0) first = i / elem;
  std::printf("[check] %s: n=%zu bit-identical, mismatches=%zu\n", what.c_str(), a.size() / elem, bad);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " elements differ, first at " << first;
}

// The inputs of one case: projections, weights, positions, slots, the caches' prior contents.
struct Inputs {
  std::vector<float> q, k, v, qw, kw;
  std::vector<int32_t> pos;
  std::vector<int64_t> slots;
  int64_t num_blocks = 0;
  std::vector<float> kc0, vc0;  // the caches before the write (fp32 view; bf16 caches hold their rounding)
};

Inputs make_inputs(const QkCase& c, uint64_t seed) {
  Inputs in;
  const int64_t Cq = c.Hq * c.D, Ckv = c.Hkv * c.D;
  in.q = make_values(static_cast<size_t>(c.T * Cq), c.fill, seed);
  in.k = make_values(static_cast<size_t>(c.T * Ckv), c.fill, seed + 1);
  in.v = make_values(static_cast<size_t>(c.T * Ckv), c.fill, seed + 2);
  in.qw = make_values(static_cast<size_t>(std::max<int64_t>(norm_size(c.q_norm, c.Hq, c.D), 1)), Fill::Normal, seed + 3);
  in.kw = make_values(static_cast<size_t>(std::max<int64_t>(norm_size(c.k_norm, c.Hkv, c.D), 1)), Fill::Normal, seed + 4);
  in.pos.resize(static_cast<size_t>(c.T));
  for (int64_t t = 0; t < c.T; ++t)
    in.pos[static_cast<size_t>(t)] = static_cast<int32_t>(philox4x32(seed, 5, static_cast<uint64_t>(t))[0] % kPositions);
  in.pos[0] = static_cast<int32_t>(kPositions - 1);  // the table's last entries
  if (c.T > 2) in.pos[2] = static_cast<int32_t>(kPositions - 2);
  // distinct slots, scattered over a pool of 2T + 3 blocks
  in.num_blocks = 2 * c.T + 3;
  const int64_t pool = in.num_blocks * kBlockSize;
  for (int64_t t = 0; t < c.T; ++t) in.slots.push_back((t * 37 + 5) % pool);
  for (size_t i = 0; i < in.slots.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (in.slots[j] == in.slots[i]) in.slots[i] = (in.slots[i] + 1) % pool;  // keep them distinct
  in.kc0 = make_values(static_cast<size_t>(pool * Ckv), Fill::Normal, seed + 6);
  in.vc0 = make_values(static_cast<size_t>(pool * Ckv), Fill::Normal, seed + 7);
  if (c.bf16_cache) {
    in.kc0 = round_bf16(in.kc0);
    in.vc0 = round_bf16(in.vc0);
  }
  return in;
}

DeviceBuffer upload_rows(const std::vector<float>& v, bool misaligned, const char* what) {
  return DeviceBuffer::from(misaligned ? shifted_by_one(v) : v, what);
}
DeviceBuffer upload_cache(const std::vector<float>& v, bool bf16, const char* what) {
  return bf16 ? DeviceBuffer::from(to_bf16(v), what) : DeviceBuffer::from(v, what);
}

// Device results of one path: q, k (as the attention reads them), both caches (raw bytes), the flag.
struct Result {
  std::vector<uint8_t> q, k, kc, vc;
  int flag = 0;
};

std::vector<uint8_t> rows_bytes(const DeviceBuffer& b, bool misaligned) {
  std::vector<uint8_t> raw = b.download_bytes();
  if (misaligned) raw.erase(raw.begin(), raw.begin() + sizeof(float));
  return raw;
}

// The engine's former sequence: five launches (fresh buffers for the norms' outputs, as CudaEngine allocated them).
Result run_sequence(const QkCase& c, const Inputs& in, const DeviceTable* rope) {
  const int64_t Cq = c.Hq * c.D, Ckv = c.Hkv * c.D, off = c.misaligned ? 1 : 0;
  DeviceBuffer q = upload_rows(in.q, c.misaligned, "q"), k = upload_rows(in.k, c.misaligned, "k"),
               v = DeviceBuffer::from(in.v, "v"), qw = DeviceBuffer::from(in.qw, "q_norm"),
               kw = DeviceBuffer::from(in.kw, "k_norm"), pos = DeviceBuffer::from(in.pos, "positions"),
               slots = DeviceBuffer::from(in.slots, "slots"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag"),
               kc = upload_cache(in.kc0, c.bf16_cache, "k_cache"), vc = upload_cache(in.vc0, c.bf16_cache, "v_cache");
  DeviceBuffer qn(static_cast<size_t>(c.T * Cq) * sizeof(float), "q_n"),
      kn(static_cast<size_t>(c.T * Ckv) * sizeof(float), "k_n");
  const cudaStream_t st = ctx().stream();
  float* qp = q.as<float>() + off;
  float* kp = k.as<float>() + off;
  const DeviceBuffer* q_out = &q;
  const DeviceBuffer* k_out = &k;
  bool q_shift = c.misaligned, k_shift = c.misaligned;
  if (c.q_norm != Norm::None) {
    const QkNormRows r = qk_norm_rows(norm_size(c.q_norm, c.Hq, c.D), c.T, c.Hq, c.D);
    rmsnorm_forward_cuda(qn.as<float>(), qp, qw.as<float>(), RmsnormCudaParams{r.rows, r.width, kEps}, st);
    qp = qn.as<float>();
    q_out = &qn;
    q_shift = false;
  }
  if (c.k_norm != Norm::None) {
    const QkNormRows r = qk_norm_rows(norm_size(c.k_norm, c.Hkv, c.D), c.T, c.Hkv, c.D);
    rmsnorm_forward_cuda(kn.as<float>(), kp, kw.as<float>(), RmsnormCudaParams{r.rows, r.width, kEps}, st);
    kp = kn.as<float>();
    k_out = &kn;
    k_shift = false;
  }
  if (rope != nullptr) {
    rope_forward_cuda(qp, pos.as<int32_t>(), c.T, c.Hq, rope->view, flag.as<int>(), st);
    rope_forward_cuda(kp, pos.as<int32_t>(), c.T, c.Hkv, rope->view, flag.as<int>(), st);
  }
  AttentionCacheCudaParams p;
  p.total_tokens = c.T;
  p.n_seqs = 1;
  p.q_heads = c.Hq;
  p.kv_heads = c.Hkv;
  p.head_dim = c.D;
  p.num_blocks = in.num_blocks;
  p.block_size = kBlockSize;
  if (c.bf16_cache)
    attention_cache_write_cuda(kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>(), kp, v.as<float>(),
                               slots.as<int64_t>(), c.T, p, flag.as<int>(), st);
  else
    attention_cache_write_cuda(kc.as<float>(), vc.as<float>(), kp, v.as<float>(), slots.as<int64_t>(), c.T, p,
                               flag.as<int>(), st);
  Result r{rows_bytes(*q_out, q_shift), rows_bytes(*k_out, k_shift), kc.download_bytes(), vc.download_bytes(),
           read_flag(flag)};
  EXPECT_TRUE(buffers_ok({&q, &k, &qn, &kn, &kc, &vc, &flag}, {&v, &qw, &kw, &pos, &slots})) << name(c) << " sequence";
  return r;
}

Result run_fused(const QkCase& c, const Inputs& in, const DeviceTable* rope) {
  const int64_t off = c.misaligned ? 1 : 0;
  DeviceBuffer q = upload_rows(in.q, c.misaligned, "q"), k = upload_rows(in.k, c.misaligned, "k"),
               v = DeviceBuffer::from(in.v, "v"), qw = DeviceBuffer::from(in.qw, "q_norm"),
               kw = DeviceBuffer::from(in.kw, "k_norm"), pos = DeviceBuffer::from(in.pos, "positions"),
               slots = DeviceBuffer::from(in.slots, "slots"), flag = DeviceBuffer::from(std::vector<int>{0}, "flag"),
               kc = upload_cache(in.kc0, c.bf16_cache, "k_cache"), vc = upload_cache(in.vc0, c.bf16_cache, "v_cache");
  QkNormRopeCudaParams p;
  p.shape = {c.T, c.Hq, c.Hkv, c.D, norm_size(c.q_norm, c.Hq, c.D), norm_size(c.k_norm, c.Hkv, c.D), kEps};
  p.cache_slots = in.num_blocks * kBlockSize;
  EXPECT_TRUE(qk_norm_rope_cuda_supported(p)) << name(c);
  const float* qn = c.q_norm != Norm::None ? qw.as<float>() : nullptr;
  const float* kn = c.k_norm != Norm::None ? kw.as<float>() : nullptr;
  const RopeCudaTable* view = rope != nullptr ? &rope->view : nullptr;
  if (c.bf16_cache)
    qk_norm_rope_cache_write_cuda(q.as<float>() + off, k.as<float>() + off, v.as<float>(), qn, kn, pos.as<int32_t>(),
                                  view, kc.as<__nv_bfloat16>(), vc.as<__nv_bfloat16>(), slots.as<int64_t>(), p,
                                  flag.as<int>(), ctx().stream());
  else
    qk_norm_rope_cache_write_cuda(q.as<float>() + off, k.as<float>() + off, v.as<float>(), qn, kn, pos.as<int32_t>(),
                                  view, kc.as<float>(), vc.as<float>(), slots.as<int64_t>(), p, flag.as<int>(),
                                  ctx().stream());
  Result r{rows_bytes(q, c.misaligned), rows_bytes(k, c.misaligned), kc.download_bytes(), vc.download_bytes(),
           read_flag(flag)};
  if (c.misaligned) {  // the float before q and k (uploaded as +0) is untouched
    EXPECT_EQ(q.download_bytes()[0] | q.download_bytes()[3], 0) << name(c);
    EXPECT_EQ(k.download_bytes()[0] | k.download_bytes()[3], 0) << name(c);
  }
  EXPECT_TRUE(buffers_ok({&q, &k, &kc, &vc, &flag}, {&v, &qw, &kw, &pos, &slots})) << name(c) << " fused";
  return r;
}

void expect_same(const std::string& what, const Result& a, const Result& b, bool bf16_cache) {
  EXPECT_TRUE(same_bytes(what + " q", a.q, b.q, sizeof(float)));
  EXPECT_TRUE(same_bytes(what + " k", a.k, b.k, sizeof(float)));
  EXPECT_TRUE(same_bytes(what + " k_cache", a.kc, b.kc, bf16_cache ? 2 : 4));
  EXPECT_TRUE(same_bytes(what + " v_cache", a.vc, b.vc, bf16_cache ? 2 : 4));
  EXPECT_EQ(a.flag, b.flag) << what;
}

std::vector<float> as_floats(const std::vector<uint8_t>& raw) {
  std::vector<float> f(raw.size() / sizeof(float));
  std::memcpy(f.data(), raw.data(), f.size() * sizeof(float));
  return f;
}
std::vector<float> cache_floats(const std::vector<uint8_t>& raw, bool bf16) {
  if (!bf16) return as_floats(raw);
  std::vector<uint16_t> h(raw.size() / 2);
  std::memcpy(h.data(), raw.data(), h.size() * 2);
  return bf16_to_f32(h);
}

// Longest chain of roundings of the norm's Σx² for rows of n (cases_rmsnorm.cpp's sum_chain, f32 storage).
double norm_k(int64_t n, bool vec) {
  double L;
  if (n <= rmsnorm_cuda_warp_max_dim())
    L = vec && n % 4 == 0 ? static_cast<double>(4 * ((n + 127) / 128)) + 5 : static_cast<double>((n + 31) / 32) + 5;
  else
    L = std::ceil(static_cast<double>(n) / rmsnorm_cuda_threads()) + 5 + rmsnorm_cuda_threads() / 32;
  return (L + 2) / 2 + 2 + 2;  // k_r + 2
}

// The fused kernel against the CPU reference (float, and double for the error bound).
void compare_with_cpu(const QkCase& c, const Inputs& in, const RopeTable* table, const Result& gpu) {
  const int64_t Ckv = c.Hkv * c.D, pool = in.num_blocks * kBlockSize;
  QkNormRopeShape s{c.T, c.Hq, c.Hkv, c.D, norm_size(c.q_norm, c.Hq, c.D), norm_size(c.k_norm, c.Hkv, c.D), kEps};
  const PagedKvShape cache{in.num_blocks, kBlockSize, c.Hkv, c.D};
  // float reference
  std::vector<float> q = in.q, k = in.k, kc = in.kc0, vc = in.vc0;
  qk_norm_rope_cache_write<float>(q.data(), k.data(), in.v.data(), in.qw.data(), in.kw.data(), s, table, in.pos.data(),
                                  kc.data(), vc.data(), in.slots.data(), cache);
  if (c.bf16_cache) {  // the GPU's cache holds the rounding of the fp32 rows
    kc = round_bf16(kc);
    vc = round_bf16(vc);
  }
  const std::vector<float> gq = as_floats(gpu.q), gk = as_floats(gpu.k);
  const std::vector<float> gkc = cache_floats(gpu.kc, c.bf16_cache), gvc = cache_floats(gpu.vc, c.bf16_cache);
  EXPECT_TRUE(check_exact(name(c) + " cpu v_cache", gvc, vc));
  if (c.q_norm == Norm::None && c.k_norm == Norm::None) {  // RoPE and the copies: exact
    EXPECT_TRUE(check_exact(name(c) + " cpu q", gq, q));
    EXPECT_TRUE(check_exact(name(c) + " cpu k", gk, k));
    EXPECT_TRUE(check_exact(name(c) + " cpu k_cache", gkc, kc));
    return;
  }
  // double reference, and the norms' outputs before RoPE for the magnitudes
  auto run64 = [&](const RopeTable* t, std::vector<double>& q64, std::vector<double>& k64) {
    q64 = to_f64(in.q);
    k64 = to_f64(in.k);
    const std::vector<double> v64 = to_f64(in.v), qw64 = to_f64(in.qw), kw64 = to_f64(in.kw);
    std::vector<double> kc64(static_cast<size_t>(pool * Ckv)), vc64(kc64.size());
    qk_norm_rope_cache_write<double>(q64.data(), k64.data(), v64.data(), qw64.data(), kw64.data(), s, t,
                                     in.pos.data(), kc64.data(), vc64.data(), in.slots.data(), cache);
  };
  std::vector<double> q64, k64, qn64, kn64;
  run64(table, q64, k64);
  run64(nullptr, qn64, kn64);
  const double scaling = table != nullptr ? table->attention_scaling : 1.0;
  const int64_t half = table != nullptr ? table->rotary_dim / 2 : 0;
  auto mags = [&](const std::vector<double>& n, int64_t heads) {
    std::vector<double> m(n.size());
    for (int64_t th = 0; th < c.T * heads; ++th)
      for (int64_t d = 0; d < c.D; ++d) {
        const size_t i = static_cast<size_t>(th * c.D + d);
        if (d < 2 * half) {
          const int64_t pair = d < half ? d + half : d - half;
          m[i] = scaling * (std::abs(n[i]) + std::abs(n[static_cast<size_t>(th * c.D + pair)]));
        } else {
          m[i] = std::abs(n[i]);
        }
      }
    return m;
  };
  const int64_t qn = norm_size(c.q_norm, c.Hq, c.D), kn = norm_size(c.k_norm, c.Hkv, c.D);
  F32Tolerance tq, tk;
  tq.k = (qn > 0 ? norm_k(qn, !c.misaligned) : 0) + 4;
  tk.k = (kn > 0 ? norm_k(kn, !c.misaligned) : 0) + 4;
  EXPECT_TRUE(check_f32(name(c) + " cpu q", gq, q, q64, mags(qn64, c.Hq), tq));
  EXPECT_TRUE(check_f32(name(c) + " cpu k", gk, k, k64, mags(kn64, c.Hkv), tk));
  // the cache rows of the written slots hold k (fp32: the same bits as the returned k; bf16: its rounding)
  std::vector<float> expect_kc = in.kc0;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < Ckv; ++j)
      expect_kc[static_cast<size_t>(in.slots[static_cast<size_t>(t)] * Ckv + j)] = gk[static_cast<size_t>(t * Ckv + j)];
  if (c.bf16_cache) expect_kc = round_bf16(expect_kc);
  EXPECT_TRUE(check_exact(name(c) + " k_cache = k", gkc, expect_kc));
}

}  // namespace

TEST(QkNormRopeCuda, BitIdenticalToTheFiveLaunchesAndMatchesCpu) {
  HLM_REQUIRE_CUDA();
  uint64_t seed = 900;
  for (const QkCase& c : kCases) {
    const Inputs in = make_inputs(c, seed += 10);
    std::optional<RopeTable> table;
    std::optional<DeviceTable> dtab;
    if (c.rope_partial > 0) {
      table = make_table(c.D, c.rope_partial);
      dtab = upload_table(*table);
    }
    const DeviceTable* rope = dtab ? &*dtab : nullptr;
    const Result seq = run_sequence(c, in, rope), fused = run_fused(c, in, rope);
    expect_same(name(c), seq, fused, c.bf16_cache);
    EXPECT_EQ(fused.flag, 0) << name(c);
    compare_with_cpu(c, in, table ? &*table : nullptr, fused);
  }
}

TEST(QkNormRopeCuda, BadPositionsAndSlotsAsTheFiveLaunches) {
  HLM_REQUIRE_CUDA();
  const std::vector<QkCase> cases = {
      {7, 8, 2, 128, Norm::PerHead, Norm::PerHead, 1.0, true, Fill::Normal},
      {5, 4, 4, 80, Norm::Whole, Norm::None, 0.5, false, Fill::Normal},
      {5, 4, 2, 64, Norm::None, Norm::PerHead, 0.0, false, Fill::Normal},  // no RoPE: only the slots matter
  };
  uint64_t seed = 2000;
  for (const QkCase& c : cases) {
    for (int what = 0; what < 3; ++what) {  // 0: bad positions, 1: bad slots, 2: both
      Inputs in = make_inputs(c, seed += 10);
      const int64_t pool = in.num_blocks * kBlockSize;
      if (what != 1) {
        in.pos[1] = -1;
        in.pos[3] = static_cast<int32_t>(kPositions);  // one past the table's end
      }
      if (what != 0) {
        in.slots[2] = -1;
        in.slots[4] = pool;
      }
      std::optional<DeviceTable> dtab;
      if (c.rope_partial > 0) dtab = upload_table(make_table(c.D, c.rope_partial));
      const DeviceTable* rope = dtab ? &*dtab : nullptr;
      const std::string n = name(c) + (what == 0 ? " bad positions" : what == 1 ? " bad slots" : " both");
      const Result seq = run_sequence(c, in, rope), fused = run_fused(c, in, rope);
      expect_same(n, seq, fused, c.bf16_cache);
      const bool expect_flag = what != 0 || rope != nullptr;
      EXPECT_EQ(fused.flag, expect_flag ? 1 : 0) << n;
      if (what != 0) {  // the bad slots' rows were not written anywhere: the caches differ from before only at good slots
        std::vector<float> kc = cache_floats(fused.kc, c.bf16_cache);
        const std::vector<float> kc0 = c.bf16_cache ? round_bf16(in.kc0) : in.kc0;
        size_t changed_rows = 0;
        const int64_t Ckv = c.Hkv * c.D;
        for (int64_t slot = 0; slot < pool; ++slot)
          if (std::memcmp(kc.data() + slot * Ckv, kc0.data() + slot * Ckv, static_cast<size_t>(Ckv) * sizeof(float)))
            ++changed_rows;
        EXPECT_LE(changed_rows, static_cast<size_t>(c.T - 2)) << n;
      }
    }
  }
}

TEST(QkNormRopeCuda, SupportedForRealShapes) {
  HLM_REQUIRE_CUDA();
  QkNormRopeCudaParams p;
  p.shape = {1, 32, 8, 128, 128, 128, kEps};  // Qwen3-4B
  EXPECT_TRUE(qk_norm_rope_cuda_supported(p));
  p.shape = {1, 64, 64, 128, 8192, 8192, kEps};  // 64 heads of 128, MHA: 96 KiB of rows
  EXPECT_TRUE(qk_norm_rope_cuda_supported(p));
  p.shape = {1, 1024, 1024, 128, 0, 0, kEps};  // no norms: one KV group per block, 1.5 KiB of rows
  EXPECT_TRUE(qk_norm_rope_cuda_supported(p));
  p.shape = {1, 1024, 1024, 128, 131072, 0, kEps};  // a norm over whole q rows: the token in one block, 1.5 MiB of
  EXPECT_FALSE(qk_norm_rope_cuda_supported(p));     // rows, beyond any GPU's shared memory
}
