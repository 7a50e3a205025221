// Attention over a paged KV cache: CUDA (src/ops/attention/attention_cache.cu) vs the CPU reference
// (attention_cache_ref.cpp) and a double reference computed here. Caches are filled with random values in every
// block (unused blocks too), block tables are shuffled block ids (sequences interleave in the pool), block sizes 16,
// 7 and 5 do not divide the lengths. Cases:
//   write: a chunk's k/v rows scattered to their slots, bit-identical to the CPU;
//   chunk path: several sequences with cached tokens before the chunk (0, 50, 129) and chunks of 1..129 queries
//     mixed with one-query sequences, GQA groups 1, 2, 3, head dims 64, 128 and the padded 40;
//   decode path (one query per sequence): contexts 1..5000 in one batch (split-K merges, empty splits for short
//     sequences), groups 1, 2, 3, 4 (4, 2 and 1 query heads per block), head dims 40, 64, 128;
//   non-finite: NaN/±Inf in the cache's k or v (NaN/Inf parity with the CPU), scale 1 (scores spread wider);
//   bad metadata: a context shorter than its queries, a block id outside the pool, a write slot outside the pool
//     raise the error flag (and the bad sequence's rows stay unwritten);
//   every run is repeated: same bits (determinism); guards and unchanged inputs after each call; decode runs (and the
//     bad-metadata decodes) also run twice with each other split merge (attention_cache_cuda_set_decode_merge: inside
//     a thread-block cluster, the separate merge kernel, or the decode kernel's last split block): the same bytes;
//   every decode run with each decode kernel (attention_cache_cuda_set_decode_kernel: tiled, streams, warps), each
//     checked against the references on its own (their sums run in different orders) and its merges against its
//     first run byte for byte; the bad-metadata decodes raise the flag and leave the bad rows unwritten with each;
//   bf16 cache (the CUDA engine's bf16 precision): the write rounds k/v to bf16 (bit-identical to the host rounding
//     of the CPU-written fp32 cache); the fp32 kernels over the bf16 cache are checked like the fp32 ones on the
//     rounded cache values (they widen exactly); the tensor-core chunk kernel (bf16 q and out, D 64 and 128) with the
//     flash-attention rule check_bf16 against the CPU on the same bf16 q and cache, the bound above as its fp32
//     allowance (attention_tc.cu's mma: exact bf16 products, fp32 sums, P as hi + lo bf16 ~ 2^-17 relative, far below
//     the (D + 3)·u·Amax score term).
//
// Tolerance (fp32 rule, harness.h, k = 1 with an absolute per-element bound passed as mag): for query row i with
// visible keys j (n_i of them), A_ij = |scale|·Σ_d |q_id k_jd|, Amax_i = max_j A_ij, P the exact softmax and
// M_id = Σ_j P_ij |v_jd|:
//   scores: an fp32 FMA dot of D terms (any grouping: in order, or 8 lane sums and a 3-level tree) and ×scale:
//     (D + 1)·u·A_ij; the subtractions of running maxima telescope to at most 2u·Amax_i over a row;
//   each key's weight: expf (2 ulp = 4u) and at most one rescale per key in the decode streams (expf + product, 5u);
//     O and l are FMA chains over the keys plus the stream and split merges (a weighted sum of ≤ 16 + 64 terms, each
//     weight one expf): 2 more per key at most; 1/l and O·(1/l) round once each.
//   The score errors enter out = Σ e v / Σ e twice (numerator and denominator):
//     bound = u · M_id · (2(D + 3)·Amax_i + 2(11·n_i + 96) + 2).
// A wrong key, head, block or position is an O(1) relative error; at n = 5000 this bound is ~7e-3 relative, at the
// typical n ≤ 300 ~5e-4, and the [check] lines print the real margin (errors ≤ 7.3e-7 on the H200).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_error.h"
#include "harness.h"
#include "ops/attention/attention_cache.h"
#include "ops/attention/attention_cache_cuda.h"

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct CacheCase {
  std::string name;
  std::vector<int64_t> cached;   // tokens each sequence holds before the step
  std::vector<int64_t> queries;  // new tokens (queries) of each sequence in the step
  int64_t Hq, Hkv, D, block_size;
  Fill fill_k = Fill::Normal, fill_v = Fill::Normal;
  double scale = 0;  // 0: D^-1/2
  int64_t window = 0;  // sliding window (attention_cache.h); 0 = full causal
};

// Sets the decode path's split merge (attention_cache_cuda_set_decode_merge) for a scope.
struct MergeMode {
  DecodeMerge saved;
  explicit MergeMode(DecodeMerge m) : saved(attention_cache_cuda_decode_merge()) { attention_cache_cuda_set_decode_merge(m); }
  ~MergeMode() { attention_cache_cuda_set_decode_merge(saved); }
};

// Sets the decode kernel (attention_cache_cuda_set_decode_kernel) for a scope.
struct KernelMode {
  DecodeKernel saved;
  explicit KernelMode(DecodeKernel k) : saved(attention_cache_cuda_decode_kernel()) {
    attention_cache_cuda_set_decode_kernel(k);
  }
  ~KernelMode() { attention_cache_cuda_set_decode_kernel(saved); }
};

const char* kernel_name(DecodeKernel k) {
  return k == DecodeKernel::warps ? "warps" : k == DecodeKernel::streams ? "streams" : "tiled";
}
constexpr DecodeKernel kDecodeKernels[] = {DecodeKernel::tiled, DecodeKernel::streams, DecodeKernel::warps};

const char* merge_name(DecodeMerge m) {
  return m == DecodeMerge::cluster ? "cluster" : m == DecodeMerge::fused ? "fused" : "kernel";
}

// The decode merges a decode case runs: the default twice (determinism), then each other one twice (the fused
// merge's counters are reset by each launch; the cluster launch keeps no state).
std::vector<DecodeMerge> decode_merge_runs() {
  const DecodeMerge def = attention_cache_cuda_decode_merge();
  std::vector<DecodeMerge> runs = {def, def};
  for (const DecodeMerge m : {DecodeMerge::cluster, DecodeMerge::kernel, DecodeMerge::fused})
    if (m != def) runs.insert(runs.end(), {m, m});
  return runs;
}

// A pool with every sequence's blocks at shuffled ids, plus a few spare blocks.
struct Layout {
  PagedKvShape shape;
  int64_t max_blocks = 0, T = 0, N = 0, max_q = 0, max_ctx = 0;
  std::vector<int32_t> tables;
  std::vector<int64_t> context, cu;
};

Layout make_layout(const CacheCase& c, uint64_t seed) {
  Layout L;
  L.N = static_cast<int64_t>(c.queries.size());
  L.cu.assign(1, 0);
  int64_t total_blocks = 0;
  for (int64_t n = 0; n < L.N; ++n) {
    const int64_t ctx = c.cached[n] + c.queries[n];
    L.context.push_back(ctx);
    L.cu.push_back(L.cu.back() + c.queries[n]);
    const int64_t blocks = (ctx + c.block_size - 1) / c.block_size;
    L.max_blocks = std::max(L.max_blocks, blocks);
    L.max_q = std::max(L.max_q, c.queries[n]);
    L.max_ctx = std::max(L.max_ctx, ctx);
    total_blocks += blocks;
  }
  L.T = L.cu.back();
  L.shape = {total_blocks + 3, c.block_size, c.Hkv, c.D};
  std::vector<int32_t> ids(static_cast<size_t>(L.shape.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  L.tables.assign(static_cast<size_t>(std::max<int64_t>(L.N * L.max_blocks, 1)), -1);
  size_t next = 0;
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t b = 0; b < (L.context[n] + c.block_size - 1) / c.block_size; ++b)
      L.tables[n * L.max_blocks + b] = ids[next++];
  return L;
}

AttentionCacheCudaParams params_of(const CacheCase& c, const Layout& L, float scale) {
  AttentionCacheCudaParams p;
  p.total_tokens = L.T;
  p.n_seqs = L.N;
  p.q_heads = c.Hq;
  p.kv_heads = c.Hkv;
  p.head_dim = c.D;
  p.num_blocks = L.shape.num_blocks;
  p.block_size = L.shape.block_size;
  p.max_blocks = L.max_blocks;
  p.max_query_len = L.max_q;
  p.max_context = L.max_ctx;
  p.scale = scale;
  p.window = c.window;
  return p;
}

// Double reference and the per-element bound (header comment), over the same cache contents.
void reference(const CacheCase& c, const Layout& L, const std::vector<float>& q, const std::vector<float>& kc,
               const std::vector<float>& vc, float scale, std::vector<double>& ref, std::vector<double>& bound) {
  const int64_t D = c.D, group = c.Hq / c.Hkv, row = c.Hkv * D;
  ref.assign(static_cast<size_t>(L.T * c.Hq * D), 0.0);
  bound.assign(ref.size(), 0.0);
  for (int64_t n = 0; n < L.N; ++n) {
    const int64_t nq = L.cu[n + 1] - L.cu[n];
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t t = L.cu[n] + i, pos = L.context[n] - nq + i, vis = pos + 1;
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> s(static_cast<size_t>(vis)), a(static_cast<size_t>(vis));
        std::vector<int64_t> off(static_cast<size_t>(vis));
        double mx = -INFINITY, amax = 0;
        const int64_t j0 = attention_window_begin(pos, c.window);  // keys [j0, vis); others are masked (p = 0)
        for (int64_t j = 0; j < j0; ++j) s[j] = -INFINITY, off[j] = 0;
        for (int64_t j = j0; j < vis; ++j) {
          const int64_t blk = L.tables[n * L.max_blocks + j / c.block_size];
          off[j] = (blk * c.block_size + j % c.block_size) * row + kvh * D;
          double dot = 0, adot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += static_cast<double>(q[(t * c.Hq + h) * D + d]) * kc[off[j] + d];
            adot += std::fabs(static_cast<double>(q[(t * c.Hq + h) * D + d]) * kc[off[j] + d]);
          }
          s[j] = dot * scale;
          a[j] = adot * std::fabs(scale);
          if (!std::isnan(s[j])) mx = std::max(mx, s[j]);
          amax = std::max(amax, a[j]);
        }
        double denom = 0;
        for (int64_t j = 0; j < vis; ++j) {
          s[j] = std::exp(s[j] - mx);
          denom += s[j];
        }
        const double k_terms = 2.0 * (D + 3) * amax + 2.0 * (11.0 * vis + 96) + 2;
        for (int64_t d = 0; d < D; ++d) {
          double o = 0, m = 0;
          for (int64_t j = 0; j < vis; ++j) {
            const double p = s[j] / denom;
            o += p * vc[off[j] + d];
            m += p * std::fabs(static_cast<double>(vc[off[j] + d]));
          }
          ref[(t * c.Hq + h) * D + d] = o;
          bound[(t * c.Hq + h) * D + d] = m * k_terms;  // ×u by the harness (k = 1)
        }
      }
    }
  }
}

void run_case(const CacheCase& c, uint64_t seed) {
  SCOPED_TRACE(c.name);
  const Layout L = make_layout(c, seed);
  const float scale = c.scale != 0 ? static_cast<float>(c.scale) : static_cast<float>(1.0 / std::sqrt(double(c.D)));
  const int64_t cache_n = L.shape.num_blocks * L.shape.block_size * L.shape.slot_elements();
  std::vector<float> kc = make_values(static_cast<size_t>(cache_n), c.fill_k, seed + 1);
  std::vector<float> vc = make_values(static_cast<size_t>(cache_n), c.fill_v, seed + 2);
  const std::vector<float> q = make_values(static_cast<size_t>(L.T * c.Hq * c.D), Fill::Normal, seed + 3);
  const AttentionCacheCudaParams p = params_of(c, L, scale);

  // The step's own k/v rows go in through the write op (the engine's order: write, then attend).
  std::vector<int64_t> slots(static_cast<size_t>(L.T));
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t t = L.cu[n]; t < L.cu[n + 1]; ++t) {
      const int64_t pos = L.context[n] - (L.cu[n + 1] - L.cu[n]) + (t - L.cu[n]);
      slots[t] = L.tables[n * L.max_blocks + pos / c.block_size] * c.block_size + pos % c.block_size;
    }
  const int64_t row = L.shape.slot_elements();
  const std::vector<float> k_new = make_values(static_cast<size_t>(L.T * row), Fill::Normal, seed + 4);
  const std::vector<float> v_new = make_values(static_cast<size_t>(L.T * row), Fill::Normal, seed + 5);
  DeviceBuffer kc_d = DeviceBuffer::from(kc, "k_cache"), vc_d = DeviceBuffer::from(vc, "v_cache");
  DeviceBuffer kn_d = DeviceBuffer::from(k_new, "k"), vn_d = DeviceBuffer::from(v_new, "v");
  DeviceBuffer slots_d = DeviceBuffer::from(slots, "slots"), flag(sizeof(int), "flag");
  HLM_CUDA_CHECK(cudaMemset(flag.as<int>(), 0, sizeof(int)));
  attention_cache_write_cuda(kc_d.as<float>(), vc_d.as<float>(), kn_d.as<float>(), vn_d.as<float>(),
                             slots_d.as<int64_t>(), L.T, p, flag.as<int>(), ctx().stream());
  attention_cache_write(kc.data(), vc.data(), k_new.data(), v_new.data(), slots.data(), L.T, L.shape);
  ctx().synchronize();
  EXPECT_EQ(read_flag(flag), 0);
  EXPECT_TRUE(check_exact("write k", kc_d.download<float>(), kc));
  EXPECT_TRUE(check_exact("write v", vc_d.download<float>(), vc));
  EXPECT_TRUE(buffers_ok({&kc_d, &vc_d}, {&kn_d, &vn_d, &slots_d}));
  kc_d.upload(kc.data(), kc.size() * sizeof(float));  // from here on the cache is an input
  vc_d.upload(vc.data(), vc.size() * sizeof(float));

  std::vector<float> cpu(static_cast<size_t>(L.T * c.Hq * c.D));
  attention_cache_forward(cpu.data(), q.data(), kc.data(), vc.data(), L.shape, L.tables.data(), L.max_blocks,
                          L.context.data(), L.cu.data(), L.N, c.Hq, scale, c.window);
  std::vector<double> ref, bound;
  reference(c, L, q, kc, vc, scale, ref, bound);

  DeviceBuffer q_d = DeviceBuffer::from(q, "q"), tables_d = DeviceBuffer::from(L.tables, "tables");
  DeviceBuffer ctx_d = DeviceBuffer::from(L.context, "context"), cu_d = DeviceBuffer::from(L.cu, "cu");
  const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);
  DeviceBuffer ws(std::max<size_t>(ws_bytes, 4), "workspace");
  // The decode path with each decode kernel; the chunk path once (no decode kernel runs).
  const std::vector<DecodeKernel> kernels =
      p.max_query_len == 1 ? std::vector<DecodeKernel>(std::begin(kDecodeKernels), std::end(kDecodeKernels))
                           : std::vector<DecodeKernel>{attention_cache_cuda_decode_kernel()};
  for (const DecodeKernel kernel : kernels) {
    KernelMode kernel_mode(kernel);
    std::vector<float> first;
    // reps 0, 1: the default split merge; decode path, then each other merge twice (decode_merge_runs): the same bits.
    const DecodeMerge def = attention_cache_cuda_decode_merge();
    const std::vector<DecodeMerge> runs =
        p.max_query_len == 1 ? decode_merge_runs() : std::vector<DecodeMerge>{def, def};
    for (int rep = 0; rep < static_cast<int>(runs.size()); ++rep) {
      MergeMode mode(runs[static_cast<size_t>(rep)]);
      DeviceBuffer out(cpu.size() * sizeof(float), "out");
      attention_cache_forward_cuda(out.as<float>(), q_d.as<float>(), kc_d.as<float>(), vc_d.as<float>(),
                                   tables_d.as<int32_t>(), ctx_d.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(),
                                   ws_bytes, flag.as<int>(), ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(read_flag(flag), 0);
      const std::vector<float> gpu = out.download<float>();
      EXPECT_TRUE(buffers_ok({&out, &ws}, {&q_d, &kc_d, &vc_d, &tables_d, &ctx_d, &cu_d}));
      if (rep == 0) {
        const std::string path = p.max_query_len == 1
                                     ? std::string("decode, ") + kernel_name(kernel) + " kernel (" +
                                           std::to_string(attention_cache_cuda_decode_splits(p)) + " splits)"
                                     : "chunk";
        EXPECT_TRUE(check_f32(c.name + " " + path, gpu, cpu, ref, bound, {1}));
        first = gpu;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), gpu.data(), gpu.size() * sizeof(float)))
            << (rep < 2 ? "not deterministic" : "the split merges differ") << " (" << kernel_name(kernel)
            << " kernel, rep " << rep << ": " << merge_name(runs[static_cast<size_t>(rep)]) << " vs "
            << merge_name(runs[0]) << ")";
      }
    }
  }
}

// The bf16 cache: write, the fp32 kernels over it, and the tensor-core chunk kernel (header comment).
void run_case_bf16(const CacheCase& c, uint64_t seed) {
  SCOPED_TRACE(c.name + " bf16 cache");
  const Layout L = make_layout(c, seed);
  const float scale = c.scale != 0 ? static_cast<float>(c.scale) : static_cast<float>(1.0 / std::sqrt(double(c.D)));
  const int64_t cache_n = L.shape.num_blocks * L.shape.block_size * L.shape.slot_elements();
  std::vector<float> kc = round_bf16(make_values(static_cast<size_t>(cache_n), c.fill_k, seed + 1));
  std::vector<float> vc = round_bf16(make_values(static_cast<size_t>(cache_n), c.fill_v, seed + 2));
  const std::vector<float> q = make_values(static_cast<size_t>(L.T * c.Hq * c.D), Fill::Normal, seed + 3);
  const AttentionCacheCudaParams p = params_of(c, L, scale);
  std::vector<int64_t> slots(static_cast<size_t>(L.T));
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t t = L.cu[n]; t < L.cu[n + 1]; ++t) {
      const int64_t pos = L.context[n] - (L.cu[n + 1] - L.cu[n]) + (t - L.cu[n]);
      slots[t] = L.tables[n * L.max_blocks + pos / c.block_size] * c.block_size + pos % c.block_size;
    }
  const int64_t row = L.shape.slot_elements();
  const std::vector<float> k_new = make_values(static_cast<size_t>(L.T * row), Fill::Normal, seed + 4);
  const std::vector<float> v_new = make_values(static_cast<size_t>(L.T * row), Fill::Normal, seed + 5);
  DeviceBuffer kc_d = DeviceBuffer::from(to_bf16(kc), "k_cache"), vc_d = DeviceBuffer::from(to_bf16(vc), "v_cache");
  DeviceBuffer kn_d = DeviceBuffer::from(k_new, "k"), vn_d = DeviceBuffer::from(v_new, "v");
  DeviceBuffer slots_d = DeviceBuffer::from(slots, "slots"), flag(sizeof(int), "flag");
  HLM_CUDA_CHECK(cudaMemset(flag.as<int>(), 0, sizeof(int)));
  attention_cache_write_cuda(kc_d.as<__nv_bfloat16>(), vc_d.as<__nv_bfloat16>(), kn_d.as<float>(), vn_d.as<float>(),
                             slots_d.as<int64_t>(), L.T, p, flag.as<int>(), ctx().stream());
  attention_cache_write(kc.data(), vc.data(), k_new.data(), v_new.data(), slots.data(), L.T, L.shape);
  kc = round_bf16(kc);  // the cache holds the written rows rounded to bf16
  vc = round_bf16(vc);
  ctx().synchronize();
  EXPECT_EQ(read_flag(flag), 0);
  EXPECT_EQ(kc_d.download<uint16_t>(), to_bf16(kc)) << "bf16 write k";
  EXPECT_EQ(vc_d.download<uint16_t>(), to_bf16(vc)) << "bf16 write v";
  EXPECT_TRUE(buffers_ok({&kc_d, &vc_d}, {&kn_d, &vn_d, &slots_d}));
  kc_d.upload(to_bf16(kc).data(), kc.size() * sizeof(uint16_t));  // from here on the cache is an input
  vc_d.upload(to_bf16(vc).data(), vc.size() * sizeof(uint16_t));

  DeviceBuffer tables_d = DeviceBuffer::from(L.tables, "tables"), ctx_d = DeviceBuffer::from(L.context, "context");
  DeviceBuffer cu_d = DeviceBuffer::from(L.cu, "cu");
  {  // the fp32 kernels over the bf16 cache
    std::vector<float> cpu(static_cast<size_t>(L.T * c.Hq * c.D));
    attention_cache_forward(cpu.data(), q.data(), kc.data(), vc.data(), L.shape, L.tables.data(), L.max_blocks,
                            L.context.data(), L.cu.data(), L.N, c.Hq, scale, c.window);
    std::vector<double> ref, bound;
    reference(c, L, q, kc, vc, scale, ref, bound);
    DeviceBuffer q_d = DeviceBuffer::from(q, "q");
    const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);
    const std::vector<DecodeKernel> kernels =
        p.max_query_len == 1 ? std::vector<DecodeKernel>(std::begin(kDecodeKernels), std::end(kDecodeKernels))
                             : std::vector<DecodeKernel>{attention_cache_cuda_decode_kernel()};
    for (const DecodeKernel kernel : kernels) {
      KernelMode kernel_mode(kernel);
      DeviceBuffer ws(std::max<size_t>(ws_bytes, 4), "workspace"), out(cpu.size() * sizeof(float), "out");
      attention_cache_forward_cuda(out.as<float>(), q_d.as<float>(), kc_d.as<__nv_bfloat16>(),
                                   vc_d.as<__nv_bfloat16>(), tables_d.as<int32_t>(), ctx_d.as<int64_t>(),
                                   cu_d.as<int64_t>(), p, ws.as<void>(), ws_bytes, flag.as<int>(), ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(read_flag(flag), 0);
      const std::string what = p.max_query_len == 1 ? std::string(" decode, ") + kernel_name(kernel) + " kernel,"
                                                     : std::string(" chunk");
      EXPECT_TRUE(check_f32(c.name + what + " over a bf16 cache", out.download<float>(), cpu, ref, bound, {1}));
      EXPECT_TRUE(buffers_ok({&out, &ws}, {&q_d, &kc_d, &vc_d, &tables_d, &ctx_d, &cu_d}));
    }
  }
  if (p.max_query_len > 1 && attention_cache_tc_supported(p)) {  // the tensor-core chunk kernel
    const std::vector<float> q16 = round_bf16(q);
    std::vector<float> cpu(static_cast<size_t>(L.T * c.Hq * c.D));
    attention_cache_forward(cpu.data(), q16.data(), kc.data(), vc.data(), L.shape, L.tables.data(), L.max_blocks,
                            L.context.data(), L.cu.data(), L.N, c.Hq, scale, c.window);
    std::vector<double> ref, bound;
    reference(c, L, q16, kc, vc, scale, ref, bound);
    DeviceBuffer q_d = DeviceBuffer::from(to_bf16(q16), "q bf16");
    std::vector<uint16_t> first;
    for (int rep = 0; rep < 2; ++rep) {
      DeviceBuffer out(cpu.size() * sizeof(uint16_t), "out bf16");
      attention_cache_forward_tc_cuda(out.as<__nv_bfloat16>(), q_d.as<__nv_bfloat16>(), kc_d.as<__nv_bfloat16>(),
                                      vc_d.as<__nv_bfloat16>(), tables_d.as<int32_t>(), ctx_d.as<int64_t>(),
                                      cu_d.as<int64_t>(), p, flag.as<int>(), ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(read_flag(flag), 0);
      const std::vector<uint16_t> gpu = out.download<uint16_t>();
      EXPECT_TRUE(buffers_ok({&out}, {&q_d, &kc_d, &vc_d, &tables_d, &ctx_d, &cu_d}));
      if (rep == 0) {
        EXPECT_TRUE(check_bf16(c.name + " tensor-core chunk", gpu, to_bf16(cpu), ref, &bound, 1));
        first = gpu;
      } else {
        EXPECT_EQ(first, gpu) << "not deterministic";
      }
    }
  }
}

}  // namespace

TEST(AttentionCacheCuda, Bf16CacheAndTensorCoreChunk) {
  HLM_REQUIRE_CUDA();
  run_case_bf16({"prefill D128 g3 bs7", {0, 0, 0}, {1, 65, 129}, 6, 2, 128, 7}, 51);
  run_case_bf16({"chunk D64 g2 bs16", {0, 50, 129, 7}, {37, 70, 1, 1}, 4, 2, 64, 16}, 52);
  // Offsets that are not multiples of 16 or 64, several query tiles, group 4.
  run_case_bf16({"chunk D128 g4 bs16", {0, 75, 300}, {150, 64, 33}, 8, 2, 128, 16}, 53);
  run_case_bf16({"chunk D40 g1 bs5 (scalar)", {3, 0}, {64, 9}, 3, 3, 40, 5}, 54);
  run_case_bf16({"decode D128 g4 bs16", {0, 16, 299, 999}, {1, 1, 1, 1}, 8, 2, 128, 16}, 55);
}

TEST(AttentionCacheCuda, ChunkPrefillAndMixed) {
  HLM_REQUIRE_CUDA();
  // Whole prompts through the cache (nothing cached), odd lengths, block size 7.
  run_case({"prefill D128 g3 bs7", {0, 0, 0}, {1, 65, 129}, 6, 2, 128, 7}, 11);
  // Chunks continuing cached sequences, mixed with one-query sequences (chunk path for all), D 64, group 2.
  run_case({"chunk D64 g2 bs16", {0, 50, 129, 7}, {37, 70, 1, 1}, 4, 2, 64, 16}, 12);
  // Padded head dim 40, group 1, block size 5.
  run_case({"chunk D40 g1 bs5", {3, 0}, {64, 9}, 3, 3, 40, 5}, 13);
}

TEST(AttentionCacheCuda, SlidingWindowChunkAndDecode) {
  HLM_REQUIRE_CUDA();
  const Fill n = Fill::Normal;
  // Chunks over cached sequences with windows shorter than the contexts (70 spans a key tile), and decode with
  // several splits (long contexts) where whole splits fall before the window.
  run_case({"window chunk D64 g2 bs16 W70", {0, 50, 129, 7}, {37, 70, 1, 1}, 4, 2, 64, 16, n, n, 0, 70}, 31);
  run_case({"window chunk D40 g1 bs5 W5", {3, 0}, {64, 9}, 3, 3, 40, 5, n, n, 0, 5}, 32);
  run_case({"window decode D128 g4 bs16 W100", {0, 16, 299, 999, 2048}, {1, 1, 1, 1, 1}, 8, 2, 128, 16, n, n, 0, 100},
           33);
  run_case({"window decode D64 g2 bs16 W1", {4999, 3}, {1, 1}, 4, 2, 64, 16, n, n, 0, 1}, 34);
}

TEST(AttentionCacheCuda, DecodeBatchOfDifferentLengths) {
  HLM_REQUIRE_CUDA();
  run_case({"decode D128 g4 bs16", {0, 16, 299, 999, 2048}, {1, 1, 1, 1, 1}, 8, 2, 128, 16}, 21);
  run_case({"decode D40 g3 bs5", {4, 130, 63}, {1, 1, 1}, 6, 2, 40, 5}, 22);
  run_case({"decode D64 g2 bs16 long", {4999}, {1}, 4, 2, 64, 16}, 23);
  run_case({"decode D128 g1 bs7", {0, 700, 33, 1}, {1, 1, 1, 1}, 4, 4, 128, 7}, 24);
  // A large batch: one split per (sequence, head group).
  std::vector<int64_t> cached, queries;
  for (int i = 0; i < 64; ++i) {
    cached.push_back(37 * i + 5);
    queries.push_back(1);
  }
  run_case({"decode D128 g4 B64", cached, queries, 8, 2, 128, 16}, 25);
}

TEST(AttentionCacheCuda, NonFiniteAndScale) {
  HLM_REQUIRE_CUDA();
  for (const auto& [cached, queries, tag] :
       {std::tuple{std::vector<int64_t>{40, 130, 0}, std::vector<int64_t>{1, 1, 1}, "decode"},
        std::tuple{std::vector<int64_t>{40, 0}, std::vector<int64_t>{30, 90}, "chunk"}}) {
    run_case({std::string(tag) + " special k", cached, queries, 4, 2, 64, 16, Fill::Special, Fill::Normal}, 31);
    run_case({std::string(tag) + " special v", cached, queries, 4, 2, 64, 16, Fill::Normal, Fill::Special}, 32);
    run_case({std::string(tag) + " scale 1", cached, queries, 4, 2, 64, 16, Fill::Normal, Fill::Normal, 1.0}, 33);
    run_case({std::string(tag) + " zeros k", cached, queries, 4, 2, 64, 16, Fill::Zeros, Fill::Normal}, 34);
  }
}

TEST(AttentionCacheCuda, BadMetadataRaisesTheFlag) {
  HLM_REQUIRE_CUDA();
  const CacheCase c{"bad", {10, 20}, {1, 1}, 2, 1, 64, 16};
  for (const std::string what : {"short context decode", "short context chunk", "bad block", "bad slot"}) {
    SCOPED_TRACE(what);
    Layout L = make_layout(c, 41);
    std::vector<int64_t> cu = L.cu;
    AttentionCacheCudaParams p = params_of(c, L, 0.125f);
    if (what == "short context chunk") {  // sequence 1 gets 3 queries in a context of 2
      cu = {0, 1, 4};
      L.context[1] = 2;
      p.total_tokens = 4;
      p.max_query_len = 3;
    } else if (what == "short context decode") {
      L.context[1] = 0;
    } else if (what == "bad block") {
      L.tables[1 * L.max_blocks] = static_cast<int32_t>(L.shape.num_blocks);  // one past the pool
    }
    const int64_t cache_n = L.shape.num_blocks * L.shape.block_size * L.shape.slot_elements();
    DeviceBuffer kc = DeviceBuffer::from(make_values(static_cast<size_t>(cache_n), Fill::Normal, 1), "k_cache");
    DeviceBuffer vc = DeviceBuffer::from(make_values(static_cast<size_t>(cache_n), Fill::Normal, 2), "v_cache");
    DeviceBuffer q =
        DeviceBuffer::from(make_values(static_cast<size_t>(p.total_tokens * c.Hq * c.D), Fill::Normal, 3), "q");
    DeviceBuffer tables = DeviceBuffer::from(L.tables, "tables"), ctxs = DeviceBuffer::from(L.context, "ctx");
    DeviceBuffer cu_d = DeviceBuffer::from(cu, "cu"), flag(sizeof(int), "flag");
    HLM_CUDA_CHECK(cudaMemset(flag.as<int>(), 0, sizeof(int)));
    DeviceBuffer out(static_cast<size_t>(p.total_tokens * c.Hq * c.D) * sizeof(float), "out");
    if (what == "bad slot") {
      const std::vector<int64_t> slots{0, L.shape.num_blocks * L.shape.block_size};
      DeviceBuffer slots_d = DeviceBuffer::from(slots, "slots");
      DeviceBuffer k = DeviceBuffer::from(make_values(static_cast<size_t>(2 * c.Hkv * c.D), Fill::Normal, 4), "k");
      attention_cache_write_cuda(kc.as<float>(), vc.as<float>(), k.as<float>(), k.as<float>(), slots_d.as<int64_t>(),
                                 2, p, flag.as<int>(), ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(read_flag(flag), 1);
      EXPECT_TRUE(buffers_ok({&kc, &vc}, {&k, &slots_d}));
      continue;
    }
    // Each decode kernel (the chunk case once): the flag, and the bad sequence's rows left unwritten.
    const std::vector<DecodeKernel> kernels =
        p.max_query_len == 1 ? std::vector<DecodeKernel>(std::begin(kDecodeKernels), std::end(kDecodeKernels))
                             : std::vector<DecodeKernel>{attention_cache_cuda_decode_kernel()};
    for (const DecodeKernel kernel : kernels) {
      SCOPED_TRACE(std::string(kernel_name(kernel)) + " decode kernel");
      KernelMode kernel_mode(kernel);
      HLM_CUDA_CHECK(cudaMemset(flag.as<int>(), 0, sizeof(int)));
      HLM_CUDA_CHECK(cudaMemset(out.as<void>(), 0xFF, out.bytes()));
      const size_t ws_bytes = attention_cache_forward_cuda_workspace_bytes(p);
      DeviceBuffer ws(std::max<size_t>(ws_bytes, 4), "workspace");
      attention_cache_forward_cuda(out.as<float>(), q.as<float>(), kc.as<float>(), vc.as<float>(),
                                   tables.as<int32_t>(), ctxs.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(),
                                   ws_bytes, flag.as<int>(), ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(read_flag(flag), 1);
      if (p.max_query_len == 1) {  // the other split merges: the same flag and bytes (twice: the counters stay usable)
        const std::vector<DecodeMerge> runs = decode_merge_runs();
        for (int rep = 2; rep < static_cast<int>(runs.size()); ++rep) {
          MergeMode mode(runs[static_cast<size_t>(rep)]);
          DeviceBuffer out2(static_cast<size_t>(p.total_tokens * c.Hq * c.D) * sizeof(float), "out2"),
              flag2(sizeof(int), "flag2");
          HLM_CUDA_CHECK(cudaMemset(flag2.as<int>(), 0, sizeof(int)));
          attention_cache_forward_cuda(out2.as<float>(), q.as<float>(), kc.as<float>(), vc.as<float>(),
                                       tables.as<int32_t>(), ctxs.as<int64_t>(), cu_d.as<int64_t>(), p, ws.as<void>(),
                                       ws_bytes, flag2.as<int>(), ctx().stream());
          ctx().synchronize();
          EXPECT_EQ(read_flag(flag2), 1);
          EXPECT_EQ(out.download_bytes(), out2.download_bytes())
              << merge_name(runs[static_cast<size_t>(rep)]) << " vs " << merge_name(runs[0]) << " split merge, rep "
              << rep;
        }
      }
      EXPECT_TRUE(buffers_ok({&out, &ws}, {&q, &kc, &vc, &tables, &ctxs, &cu_d}));
      if (what != "bad block") {  // the bad sequence's rows stay unwritten (0xFF poison), the good one's are written
        const std::vector<uint8_t> bytes = out.download_bytes();
        const size_t row_bytes = static_cast<size_t>(c.Hq * c.D) * sizeof(float);
        EXPECT_TRUE(std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(row_bytes), bytes.end(),
                                [](uint8_t b) { return b == 0xFF; }));
        EXPECT_FALSE(std::all_of(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(row_bytes),
                                 [](uint8_t b) { return b == 0xFF; }));
      }
    }
  }
}

// attention_cache_fill_rows_cuda (advance_uncomputed's SkippedRows::kRandom): rows t of the source land at slots[t]
// byte for byte, fp32 and bf16, every other row of the pool untouched; slots outside the pool are skipped. Row widths
// that take each copy word: 24 values (16-byte words in both types), 6 (4-byte words), 5 (4-byte in fp32, 2-byte in
// bf16).
TEST(AttentionCacheCuda, FillRowsCopiesSourceRowsToTheirSlots) {
  HLM_REQUIRE_CUDA();
  const int64_t pool_rows = 40;
  const std::vector<int64_t> slots{7, 0, 39, -1, 12, 40, 13};  // -1 and 40: outside, skipped
  const auto count = static_cast<int64_t>(slots.size());
  DeviceBuffer slots_d = DeviceBuffer::from(slots, "slots");
  for (const int64_t row : {int64_t{24}, int64_t{6}, int64_t{5}}) {
    SCOPED_TRACE("row of " + std::to_string(row));
    const std::vector<float> k_rows = make_values(static_cast<size_t>(count * row), Fill::Normal, 71);
    const std::vector<float> v_rows = make_values(static_cast<size_t>(count * row), Fill::Normal, 72);
    const std::vector<float> kc = make_values(static_cast<size_t>(pool_rows * row), Fill::Normal, 73);
    const std::vector<float> vc = make_values(static_cast<size_t>(pool_rows * row), Fill::Normal, 74);
    std::vector<float> k_expect = kc, v_expect = vc;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t s = slots[static_cast<size_t>(t)];
      if (s < 0 || s >= pool_rows) continue;
      std::copy_n(k_rows.begin() + t * row, row, k_expect.begin() + s * row);
      std::copy_n(v_rows.begin() + t * row, row, v_expect.begin() + s * row);
    }
    {
      DeviceBuffer kc_d = DeviceBuffer::from(kc, "k_cache"), vc_d = DeviceBuffer::from(vc, "v_cache");
      DeviceBuffer kr_d = DeviceBuffer::from(k_rows, "k_rows"), vr_d = DeviceBuffer::from(v_rows, "v_rows");
      attention_cache_fill_rows_cuda(kc_d.as<float>(), vc_d.as<float>(), kr_d.as<float>(), vr_d.as<float>(),
                                     slots_d.as<int64_t>(), count, row, pool_rows, ctx().stream());
      ctx().synchronize();
      EXPECT_TRUE(check_exact("fill k fp32", kc_d.download<float>(), k_expect));
      EXPECT_TRUE(check_exact("fill v fp32", vc_d.download<float>(), v_expect));
      EXPECT_TRUE(buffers_ok({&kc_d, &vc_d}, {&kr_d, &vr_d, &slots_d}));
    }
    {
      DeviceBuffer kc_d = DeviceBuffer::from(to_bf16(kc), "k_cache bf16");
      DeviceBuffer vc_d = DeviceBuffer::from(to_bf16(vc), "v_cache bf16");
      DeviceBuffer kr_d = DeviceBuffer::from(to_bf16(k_rows), "k_rows bf16");
      DeviceBuffer vr_d = DeviceBuffer::from(to_bf16(v_rows), "v_rows bf16");
      attention_cache_fill_rows_cuda(kc_d.as<__nv_bfloat16>(), vc_d.as<__nv_bfloat16>(), kr_d.as<__nv_bfloat16>(),
                                     vr_d.as<__nv_bfloat16>(), slots_d.as<int64_t>(), count, row, pool_rows,
                                     ctx().stream());
      ctx().synchronize();
      EXPECT_EQ(kc_d.download<uint16_t>(), to_bf16(k_expect));
      EXPECT_EQ(vc_d.download<uint16_t>(), to_bf16(v_expect));
      EXPECT_TRUE(buffers_ok({&kc_d, &vc_d}, {&kr_d, &vr_d, &slots_d}));
    }
  }
}
