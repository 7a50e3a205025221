// Host driver of decode_attention_emu.sh: the decode attention kernels — the warp kernel
// (src/ops/attention/attention_decode_warps.cuh), the tiled kernel (attention_decode_tiled.cuh: the default; its
// non-cluster form) — and the split merge kernel (or the fused merge) run on the CPU (tools/cuda_emu/emu.h), each case
// and kernel against a double-precision model of the same step:
//   attention: softmax(q·kᵀ·scale)·v over each sequence's visible keys (a window's, or all), read through the
//     shuffled block table from the same cache values the kernel reads (bf16 caches widened);
//   with the q/k preparation (kPrep; both kernels, whole-row norms the tiled kernel's only): q and the new k
//     normalized per head or over the token's whole q (k) row (RMSNorm with weights, eps 1e-6; the tiled kernel sums a
//     whole row in rmsnorm.cu's warp order up to 1,024 and its 256-thread block order beyond) and rotated (RoPE pairs
//     (i, i + R/2) by the float cos/sin table), in double; the kernel's cache write checked at the new slots (within
//     one rounding of the cache type) and everywhere else unchanged, byte for byte.
// Tolerances: the kernel's fp32 sums against double: |out − ref| ≤ 5e-5·(1 + max|ref|) (scores of ≤ 128 products of
// N(0,1) values, ≤ 1,200 keys, each weight one expf); the prepared keys: ≤ 2⁻⁸ relative (bf16) or 1e-5 (fp32). A
// wrong key, head, group, batch or split is an O(1) error.
#include "cuda_bf16.h"  // the emulation's stand-in (decode_attention_emu.sh)
#include "ops/attention/attention_decode_tiled.cuh"
#include "ops/attention/attention_decode_warps.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace hlm;

namespace {

struct Case {
  std::string name;
  bool bf16;
  int D;
  int Hq, Hkv;
  std::vector<int64_t> ctx;  // context of each sequence (its query is at ctx − 1)
  int64_t splits;
  int64_t window = 0;
  bool fused_merge = false;
  bool prep = false;
  bool norms = true;
  int rotary = 0;  // RoPE dims (0: none)
  int64_t block_size = 16;
  bool bad_block = false;  // sequence 0's first block id past the pool
  bool whole_rows = false;  // prep: the norms span the token's whole q and k rows (the tiled kernel only)
  bool scalar_order = false;  // prep: the norms' V = 1 order (as for rows whose size or pointers rule out V = 4)
};

int failures = 0, checks = 0;

void report(const std::string& what, bool ok, double err, double bound) {
  ++checks;
  if (!ok) ++failures;
  std::printf("[%s] %s: error %.3g, bound %.3g\n", ok ? "pass" : "FAIL", what.c_str(), err, bound);
}

template <typename C>
C to_cache(float x) {
  if constexpr (sizeof(C) == 4)
    return x;
  else
    return __float2bfloat16_rn(x);
}
template <typename C>
double widen_host(C x) {
  return static_cast<double>(static_cast<float>(x));
}

template <int DMAX, int HPB, typename C, bool kPrep, bool kTiled>
void run(const Case& c) {
  const std::string name = (kTiled ? "tiled: " : "warps: ") + c.name;
  const int64_t N = static_cast<int64_t>(c.ctx.size()), D = c.D, bs = c.block_size;
  const int64_t group = c.Hq / c.Hkv;
  std::mt19937_64 rng(static_cast<uint64_t>(std::hash<std::string>{}(c.name)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t max_ctx = 0, max_blocks = 0, total = 0;
  for (const int64_t x : c.ctx) {
    max_ctx = std::max(max_ctx, x);
    max_blocks = std::max(max_blocks, (x + bs - 1) / bs);
    total += (x + bs - 1) / bs;
  }
  const int64_t num_blocks = total + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(N * max_blocks), -1);
  size_t next = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < (c.ctx[n] + bs - 1) / bs; ++b) tables[n * max_blocks + b] = ids[next++];
  if (c.bad_block) tables[0] = static_cast<int32_t>(num_blocks);
  const int64_t slots = num_blocks * bs, row = c.Hkv * D;
  std::vector<C> kc(static_cast<size_t>(slots * row)), vc(kc.size());
  for (auto& x : kc) x = to_cache<C>(normal(rng));
  for (auto& x : vc) x = to_cache<C>(normal(rng));
  const std::vector<C> kc0 = kc, vc0 = vc;
  std::vector<float> q(static_cast<size_t>(N * c.Hq * D));
  for (auto& x : q) x = normal(rng);
  std::vector<int64_t> context(c.ctx), cu(static_cast<size_t>(N + 1));
  for (int64_t n = 0; n <= N; ++n) cu[n] = n;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  CacheDims dm{N, N, c.Hq, c.Hkv, group, num_blocks, bs, max_blocks, 1, max_ctx, 1, static_cast<int>(D), scale,
               c.window};
  dm.block_shift = block_shift_of(bs);  // as make_dims: key rows by shift and mask for a power-of-two block size
  // split_len as the launcher computes it (attention_cache.cu, split_len): a multiple of kStreams keys.
  int64_t len = (max_ctx + c.splits - 1) / c.splits;
  len = (len + kStreams - 1) / kStreams * kStreams;

  // The q/k preparation's inputs: raw k, v of the new tokens, norms, RoPE table, positions, slots.
  const int64_t q_norm_n = c.whole_rows ? c.Hq * D : D, k_norm_n = c.whole_rows ? row : D;  // the norms' rows
  std::vector<float> k_new(static_cast<size_t>(N * row)), v_new(k_new.size()), qw(static_cast<size_t>(q_norm_n)),
      kw(static_cast<size_t>(k_norm_n));
  for (auto& x : k_new) x = normal(rng);
  for (auto& x : v_new) x = normal(rng);
  for (auto& x : qw) x = 1.0f + 0.2f * normal(rng);
  for (auto& x : kw) x = 1.0f + 0.2f * normal(rng);
  const int64_t half = c.rotary / 2, positions_n = max_ctx + 1;
  std::vector<float> cos_t(static_cast<size_t>(std::max<int64_t>(positions_n * half, 1))), sin_t(cos_t.size());
  for (int64_t p = 0; p < positions_n; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c.rotary);
      cos_t[p * half + i] = static_cast<float>(std::cos(angle));
      sin_t[p * half + i] = static_cast<float>(std::sin(angle));
    }
  std::vector<int32_t> positions(static_cast<size_t>(N));
  std::vector<int64_t> new_slots(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t p = c.ctx[n] - 1;
    positions[n] = static_cast<int32_t>(p);
    new_slots[n] = static_cast<int64_t>(tables[n * max_blocks + p / bs]) * bs + p % bs;
  }
  DecodePrep pr{};
  if (kPrep) {
    pr.q = q.data();
    pr.k = k_new.data();
    pr.v = v_new.data();
    pr.q_norm = c.norms ? qw.data() : nullptr;
    pr.k_norm = c.norms ? kw.data() : nullptr;
    pr.eps = 1e-6f;
    pr.q_vec = c.norms && !c.scalar_order && q_norm_n % 4 == 0;
    pr.k_vec = c.norms && !c.scalar_order && k_norm_n % 4 == 0;
    pr.q_whole = pr.k_whole = c.whole_rows;
    pr.positions = positions.data();
    pr.cos = half > 0 ? cos_t.data() : nullptr;
    pr.sin = half > 0 ? sin_t.data() : nullptr;
    pr.half = half;
    pr.num_positions = positions_n;
    pr.slots = new_slots.data();
    pr.cache_slots = slots;
  }

  std::vector<float> part(static_cast<size_t>(N * c.Hq * c.splits * (D + 2)), NAN);
  std::vector<float> out(static_cast<size_t>(N * c.Hq * D), NAN);
  std::vector<unsigned> counters(static_cast<size_t>(N * (c.Hq / HPB)), 0u);
  int flag = 0;
  const bool direct = !kTiled && c.splits == 1;  // the warp kernel writes a single split's rows itself
  const FusedMerge fm{out.data(), c.fused_merge && !direct ? counters.data() : nullptr};
  const Dim grid{static_cast<unsigned>(N), static_cast<unsigned>(c.Hq / HPB), static_cast<unsigned>(c.splits)};
  if constexpr (kTiled)
    emu_launch(grid, kDecodeThreads, TiledDecodeSmem<DMAX, C>::bytes(), [&] {
      cache_decode_tiled_kernel<DMAX, HPB, C, false, kPrep>(part.data(), q.data(), kc.data(), vc.data(),
                                                            tables.data(), context.data(), cu.data(), dm, c.splits,
                                                            len, &flag, fm, pr);
    });
  else
    emu_launch(grid, kDecodeThreads, 0, [&] {
      cache_decode_warps_kernel<DMAX, HPB, C, kPrep>(part.data(), out.data(), q.data(), kc.data(), vc.data(),
                                                     tables.data(), context.data(), cu.data(), dm, c.splits, len,
                                                     &flag, fm, pr);
    });
  if (!direct && fm.counters == nullptr)
    emu_launch(Dim{static_cast<unsigned>(N), static_cast<unsigned>(c.Hq), 1}, 128, 0, [&] {
      cache_decode_merge_kernel(out.data(), part.data(), tables.data(), context.data(), cu.data(), dm, c.splits);
    });
  report(name + ": error flag " + std::to_string(flag), flag == (c.bad_block ? 1 : 0), flag, 0);
  if (fm.counters != nullptr)
    report(name + ": merge counters back to zero",
           std::all_of(counters.begin(), counters.end(), [](unsigned x) { return x == 0; }), 0, 0);

  // The prepared q (double) and, with kPrep, the cache rows the kernel was to write.
  std::vector<double> qd(q.begin(), q.end());
  if (kPrep) {
    // Head h of a token's row x_row (heads × D values): its norm per head, or over the whole row.
    const auto prepare = [&](const float* x_row, int64_t heads, int64_t h, const std::vector<float>& w, int64_t pos,
                             double* y) {
      const float* x = x_row + h * D;
      const float* x_ss = c.whole_rows ? x_row : x;
      const int64_t n = c.whole_rows ? heads * D : D, w0 = c.whole_rows ? h * D : 0;
      double ss = 0;
      for (int64_t d = 0; d < n; ++d) ss += static_cast<double>(x_ss[d]) * x_ss[d];
      const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
      for (int64_t d = 0; d < D; ++d) y[d] = c.norms ? w[w0 + d] * (x[d] * r) : x[d];
      for (int64_t i = 0; i < half; ++i) {
        const double co = cos_t[pos * half + i], si = sin_t[pos * half + i], a = y[i], b = y[i + half];
        y[i] = a * co - b * si;
        y[i + half] = b * co + a * si;
      }
    };
    double worst_k = 0;
    bool others_unchanged = true;
    std::vector<char> is_new(static_cast<size_t>(slots), 0);
    for (int64_t n = 0; n < N; ++n) {
      is_new[new_slots[n]] = 1;
      for (int64_t h = 0; h < c.Hq; ++h) prepare(&q[n * c.Hq * D], c.Hq, h, qw, positions[n], &qd[(n * c.Hq + h) * D]);
      for (int64_t kvh = 0; kvh < c.Hkv; ++kvh) {
        std::vector<double> kn(static_cast<size_t>(D));
        prepare(&k_new[n * row], c.Hkv, kvh, kw, positions[n], kn.data());
        for (int64_t d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>((new_slots[n] * c.Hkv + kvh) * D + d);
          const double rel = sizeof(C) == 4 ? 1e-5 : std::ldexp(1.0, -8);
          worst_k = std::max(worst_k, std::abs(widen_host(kc[at]) - kn[d]) / (rel * (1.0 + std::abs(kn[d]))));
          worst_k = std::max(worst_k, std::abs(widen_host(vc[at]) - v_new[(n * c.Hkv + kvh) * D + d]) /
                                          (rel * (1.0 + std::abs(v_new[(n * c.Hkv + kvh) * D + d]))));
        }
      }
    }
    for (int64_t s = 0; s < slots; ++s)
      if (!is_new[s])
        others_unchanged = others_unchanged &&
                           std::memcmp(&kc[s * row], &kc0[s * row], static_cast<size_t>(row) * sizeof(C)) == 0 &&
                           std::memcmp(&vc[s * row], &vc0[s * row], static_cast<size_t>(row) * sizeof(C)) == 0;
    report(name + ": new k/v rows in their slots (error / allowed)", worst_k <= 1.0, worst_k, 1.0);
    report(name + ": every other cache row unchanged", others_unchanged, 0, 0);
  }

  // Reference attention over the cache as the kernel left it.
  double worst = 0, mag = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (c.bad_block && n == 0) continue;  // its output is meaningless by contract (a key skipped)
    const int64_t ctx = c.ctx[n], lo = c.window > 0 ? std::max<int64_t>(0, ctx - c.window) : 0;
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> s;
      for (int64_t p = lo; p < ctx; ++p) {
        const int64_t slot = static_cast<int64_t>(tables[n * max_blocks + p / bs]) * bs + p % bs;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qd[(n * c.Hq + h) * D + d] * widen_host(kc[(slot * c.Hkv + kvh) * D + d]);
        s.push_back(dot * scale);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t p = lo; p < ctx; ++p) {
          const int64_t slot = static_cast<int64_t>(tables[n * max_blocks + p / bs]) * bs + p % bs;
          o += s[p - lo] * widen_host(vc[(slot * c.Hkv + kvh) * D + d]);
        }
        o /= z;
        const double got = out[(n * c.Hq + h) * D + d];
        worst = std::max(worst, std::isfinite(got) ? std::abs(got - o) : INFINITY);
        mag = std::max(mag, std::abs(o));
      }
    }
  }
  const double bound = 5e-5 * (1.0 + mag);
  report(name + ": attention output", worst <= bound, worst, bound);
}

template <int DMAX, typename C, bool kPrep, bool kTiled>
void dispatch_hpb(const Case& c) {
  const int group = c.Hq / c.Hkv;
  const int hpb = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;  // heads_per_block
  if (hpb == 4) run<DMAX, 4, C, kPrep, kTiled>(c);
  else if (hpb == 2) run<DMAX, 2, C, kPrep, kTiled>(c);
  else run<DMAX, 1, C, kPrep, kTiled>(c);
}

template <typename C, bool kPrep, bool kTiled>
void dispatch_dmax(const Case& c) {
  if (c.D <= 64) dispatch_hpb<64, C, kPrep, kTiled>(c);
  else dispatch_hpb<128, C, kPrep, kTiled>(c);
}

// Every case through the tiled kernel, and through the warp kernel unless its norms span whole rows.
template <typename C>
void run_case_as(const Case& c) {
  if (c.prep) {
    if (!c.whole_rows) dispatch_dmax<C, true, false>(c);
    dispatch_dmax<C, true, true>(c);
  } else {
    dispatch_dmax<C, false, false>(c);
    dispatch_dmax<C, false, true>(c);
  }
}
void run_case(const Case& c) { c.bf16 ? run_case_as<__nv_bfloat16>(c) : run_case_as<float>(c); }

}  // namespace

int main() {
  const std::vector<int64_t> mixed{1, 77, 300};
  const std::vector<Case> cases = {
      // bf16 D 128, 4 heads per block: several splits, one split (direct output), splits of 3 batches of 64 keys
      {"bf16 D128 g4, 5 splits", true, 128, 8, 2, mixed, 5},
      {"bf16 D128 g4, 1 split", true, 128, 8, 2, mixed, 1},
      {"bf16 D128 g4, 2 splits of 160 keys", true, 128, 8, 2, mixed, 2},
      {"bf16 D128 g4, fused merge", true, 128, 8, 2, mixed, 5, 0, true},
      // fp32 D 64, 2 heads per block, a window; D 40 in bf16 (lanes past the row), 1 head per block
      {"f32 D64 g2, window 50", false, 64, 4, 2, {3, 130, 260}, 4, 50},
      {"bf16 D40 g1, block size 5", true, 40, 3, 3, {2, 41, 123}, 3, 0, false, false, true, 0, 5},
      {"f32 D128 g1 (32 lanes per key)", false, 128, 2, 2, {70, 190}, 3},
      {"bf16 D64 g4, bad block id", true, 64, 4, 1, {40, 90}, 2, 0, false, false, true, 0, 16, true},
      // the q/k preparation folded in
      {"prep bf16 D128 g4, norms, rope", true, 128, 8, 2, mixed, 5, 0, false, true, true, 128},
      {"prep bf16 D128 g8 (two head groups per KV head)", true, 128, 16, 2, {33, 200}, 3, 0, false, true, true, 128},
      {"prep f32 D64 g2, partial rope, 1 split", false, 64, 4, 2, {5, 66}, 1, 0, false, true, true, 32},
      {"prep bf16 D64 g1, no norms, no rope, fused merge", true, 64, 2, 2, {17, 150}, 4, 0, true, true, false, 0},
      {"prep f32 D128 g4, window 40", false, 128, 4, 1, {10, 180}, 3, 40, false, true, true, 128},
      // norms over the whole q and k rows (OLMo's): the block order (rows > 1,024), the warp order, both in one step
      {"prep bf16 D128 g1, whole rows of 2048 (block order)", true, 128, 16, 16, {40, 150}, 3, 0, false, true, true,
       128, 16, false, true},
      {"prep f32 D64 g2, whole rows of 512/256 (warp order), fused merge", false, 64, 8, 4, {9, 200}, 4, 0, true, true,
       true, 64, 16, false, true},
      {"prep bf16 D128 g4, whole q row of 2048 (block), k of 512 (warp)", true, 128, 16, 4, {70, 130}, 2, 0, false,
       true, true, 128, 16, false, true},
      {"prep bf16 D64 g1, whole rows of 192, V = 1 order, partial rope", true, 64, 3, 3, {5, 77}, 2, 0, false, true,
       true, 32, 16, false, true, true},
  };
  for (const Case& c : cases) run_case(c);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
