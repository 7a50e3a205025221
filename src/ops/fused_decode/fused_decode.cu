// The persistent batch-1 decode kernel (contract and design: fused_decode_cuda.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/fused_decode/fused_decode_cuda.h"

namespace hlm {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers + 32;  // warp 0: the producer
constexpr int kStages = 4;                 // ring slots
constexpr int kSlotBytes = 40960;          // one slot: whole rows, ≤ 40 KB
constexpr int kMaxInner = kSlotBytes / 2;  // a bf16 row of ≤ 20,480 values fits a slot
constexpr int kXBytes = kMaxInner * 2;     // x in bf16; the attention's warp-merge scratch in the same bytes
constexpr int kMaxParts = 8;               // a slot's rows split into up to 8 column parts (one per warp)
constexpr int kMaxBlockRows = 256;         // a block's rows of one product phase
constexpr int kAccFloats = kMaxBlockRows * kMaxParts;  // their partial dot products
constexpr int kMaxGroup = 8;               // q heads per kv head
constexpr int kMaxHeadDim = 256;
// Shared memory layout (bytes).
constexpr int kRingOffset = 0;
constexpr int kXOffset = kRingOffset + kStages * kSlotBytes;
constexpr int kAccOffset = kXOffset + kXBytes;
constexpr int kQsOffset = kAccOffset + kAccFloats * 4;
constexpr int kKvOffset = kQsOffset + kMaxGroup * kMaxHeadDim * 4;
constexpr int kRedOffset = kKvOffset + 2 * kMaxHeadDim * 4;
constexpr int kBarOffset = kRedOffset + 64 * 4;
constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + 16;

// The kernel's integer view of the shape.
struct Dims {
  int layers, H, Hq, Hkv, D, F, Cq, Ckv, G, S;  // G blocks; S key splits per kv head
  int num_blocks, block_size, max_blocks;
  float eps, qk_eps, mult, scale;
  bool skip_products;  // diagnostic: consumers release slots without computing (FusedDecodeShape::skip_products)
  bool fma_dots;       // fp32-FMA row dots instead of tensor-core ones (FusedDecodeShape::fma_dots)
  uint64_t prefetch_bytes;  // L2 prefetch distance of the weight stream per block (FusedDecodeShape)
};

// Global scratch (fused_decode_cuda_workspace_bytes lays it out).
struct Work {
  float* qkv;        // [Cq + 2·Ckv]
  float* attn;       // [Cq]
  float* act;        // [F]
  float* part_o;     // [Hkv·S, Gq, D]
  float* part_m;     // [Hkv·S, Gq]
  float* part_l;     // [Hkv·S, Gq]
  unsigned* counters;  // [0]: grid barrier; [1 + layer·Hkv + kvh]: finished splits
};

// ---- PTX helpers (sm_90) ----
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// The consumers' own barrier (named barrier 1; the producer warp never joins it).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Every block's consumers arrive; all proceed once all G blocks have (target = G · barriers so far).
__device__ __forceinline__ void grid_sync(unsigned* counter, unsigned target, int tid) {
  consumer_sync();
  if (tid == 0) {
    __threadfence();  // release: the block's writes (ordered before by the barrier above) before the arrival
    atomicAdd(counter, 1u);
    while (load_acquire(counter) < target) {
    }
  }
  consumer_sync();
}

// ---- The weight stream: a block's rows of each product, as up to three segments ----
struct Segment {
  const __nv_bfloat16* w;  // the segment's first row
  int rows, inner;
  int out0;    // the phase's output index of the first row
  int local0;  // its index in the block's shared accumulators (gate/up phase)
};

__device__ __forceinline__ void block_rows(int R, const Dims& d, int& r0, int& r1) {
  r0 = static_cast<int>(static_cast<long long>(R) * blockIdx.x / d.G);
  r1 = static_cast<int>(static_cast<long long>(R) * (blockIdx.x + 1) / d.G);
}

enum Phase { kQkv = 0, kOut = 1, kGateUp = 2, kDown = 3, kPhases = 4 };

__device__ int phase_segments(const FusedDecodeLayer& L, const Dims& d, int phase, Segment* s) {
  int r0, r1, n = 0;
  if (phase == kQkv) {
    block_rows(d.Cq + 2 * d.Ckv, d, r0, r1);
    const int bounds[4] = {0, d.Cq, d.Cq + d.Ckv, d.Cq + 2 * d.Ckv};
    const __nv_bfloat16* mats[3] = {L.q, L.k, L.v};
    for (int m = 0; m < 3; ++m) {
      const int lo = max(r0, bounds[m]), hi = min(r1, bounds[m + 1]);
      if (lo < hi) s[n++] = {mats[m] + static_cast<size_t>(lo - bounds[m]) * d.H, hi - lo, d.H, lo, lo - r0};
    }
  } else if (phase == kOut) {
    block_rows(d.H, d, r0, r1);
    if (r0 < r1) s[n++] = {L.o + static_cast<size_t>(r0) * d.Cq, r1 - r0, d.Cq, r0, 0};
  } else if (phase == kGateUp) {
    block_rows(d.F, d, r0, r1);
    if (r0 < r1) {
      s[n++] = {L.gate + static_cast<size_t>(r0) * d.H, r1 - r0, d.H, r0, 0};
      s[n++] = {L.up + static_cast<size_t>(r0) * d.H, r1 - r0, d.H, d.F + r0, r1 - r0};
    }
  } else {
    block_rows(d.H, d, r0, r1);
    if (r0 < r1) s[n++] = {L.down + static_cast<size_t>(r0) * d.F, r1 - r0, d.F, r0, 0};
  }
  return n;
}

__device__ __forceinline__ int rows_per_slot(int inner) { return max(1, kSlotBytes / (inner * 2)); }

// The block's weight stream as a sequence of ring slots: layer by layer, phase by phase, segment by segment, whole
// rows of ≤ 40 KB at a time.
struct StreamCursor {
  int layer = 0, phase = 0, seg = 0, row = 0, nseg = -1;
  Segment segs[3];
  // The next slot's source and size; false at the end of the stream.
  __device__ bool next(const FusedDecodeLayer* layers, const Dims& d, const unsigned char*& src, uint32_t& bytes) {
    while (layer < d.layers) {
      if (nseg < 0) {
        nseg = phase_segments(layers[layer], d, phase, segs);
        seg = 0;
        row = 0;
      }
      if (seg < nseg) {
        const Segment& s = segs[seg];
        if (row < s.rows) {
          const int nr = min(rows_per_slot(s.inner), s.rows - row);
          src = reinterpret_cast<const unsigned char*>(s.w + static_cast<size_t>(row) * s.inner);
          bytes = static_cast<uint32_t>(nr) * static_cast<uint32_t>(s.inner) * 2u;
          row += nr;
          return true;
        }
        ++seg;
        row = 0;
        continue;
      }
      nseg = -1;
      if (++phase == kPhases) {
        phase = 0;
        ++layer;
      }
    }
    return false;
  }
};

__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// The producer: the block's whole weight stream, slot by slot, as far ahead as the ring allows; with
// d.prefetch_bytes > 0 it also asks L2 for the stream's next prefetch_bytes beyond the slot it is about to wait for,
// so that the memory system keeps working while the ring is full (attention, barriers).
__device__ void produce(const FusedDecodeLayer* layers, const Dims& d, unsigned char* ring, uint64_t* full,
                        uint64_t* empty) {
  StreamCursor copy, ahead;
  uint64_t copied = 0, looked = 0;  // bytes of the stream copied / walked by the prefetch cursor
  const unsigned char* src = nullptr;
  uint32_t bytes = 0;
  for (uint32_t it = 0; copy.next(layers, d, src, bytes); ++it) {
    if (d.prefetch_bytes > 0) {
      const unsigned char* p = nullptr;
      uint32_t n = 0;
      while (looked < copied + bytes + d.prefetch_bytes && ahead.next(layers, d, p, n)) {
        if (looked >= copied + bytes) prefetch_l2(p, n);  // slots beyond this one
        looked += n;
      }
    }
    const int slot = static_cast<int>(it % kStages);
    mbar_wait(&empty[slot], ((it / kStages) & 1u) ^ 1u);
    mbar_arrive_expect_tx(&full[slot], bytes);
    bulk_copy_to_shared(ring + slot * kSlotBytes, src, bytes, &full[slot]);
    copied += bytes;
  }
}

// D += A·B on tensor cores (m16n8k16, bf16 in, fp32 accumulate), with A's rows 8-15 zero.
__device__ __forceinline__ void mma_rows8(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

// Dot product of 16-byte vectors [v0, v1) of a bf16 row and of x (bf16), both in shared memory, by one warp on tensor
// cores; every lane gets the sum. The range is cut into 8 sub-ranges m = 0..7; A's row m is x over sub-range m and B's
// column n the row over sub-range n, so D[m][m] is sub-range m's dot product (the other D entries are unused): lane
// (g, q) = (lane / 4, lane % 4) loads the same 16 bytes of x and of the row (vector 4c + q of sub-range g at step c)
// and hands them to two products as their (k 2q, 2q+1 | 2q+8, 2q+9) pairs, a permutation of k that the diagonal does
// not see. D[m][m] sits in lane 4m + m/2, element m mod 2; the 8 are summed by an xor-shuffle tree. Per 512 bytes of
// weights: 2 shared loads and 2 products per lane instead of ~30 instructions of fp32 FMAs.
__device__ __forceinline__ float row_dot(const __nv_bfloat16* row, const __nv_bfloat16* x, int v0, int v1, int lane) {
  const uint4* w4 = reinterpret_cast<const uint4*>(row);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int g = lane >> 2, q = lane & 3, len = v1 - v0;
  const int s0 = v0 + g * len / 8, s1 = v0 + (g + 1) * len / 8;
  const int steps = ((len + 7) / 8 + 3) / 4;
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
  for (int c = 0; c < steps; ++c) {
    const int v = s0 + 4 * c + q;
    uint4 w = make_uint4(0u, 0u, 0u, 0u), xv = make_uint4(0u, 0u, 0u, 0u);
    if (v < s1) {
      w = w4[v];
      xv = x4[v];
    }
    mma_rows8(d, xv.x, xv.y, w.x, w.y);
    mma_rows8(d, xv.z, xv.w, w.z, w.w);
  }
  return warp_sum(q == (g >> 1) ? d[g & 1] : 0.0f);
}

// The same dot product with fp32 FMAs (lanes stride over the vectors, two accumulators, an xor-shuffle sum): the
// first version, measured faster inside the kernel than the tensor-core one (docs/benchmarks.md, session 21).
__device__ __forceinline__ float row_dot_fma(const __nv_bfloat16* row, const __nv_bfloat16* x, int v0, int v1,
                                             int lane) {
  const uint4* w4 = reinterpret_cast<const uint4*>(row);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  float a0 = 0.0f, a1 = 0.0f;
  for (int v = v0 + lane; v < v1; v += 32) {
    const uint4 w = w4[v], xv = x4[v];
    const uint32_t ww[4] = {w.x, w.y, w.z, w.w}, xx[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      a0 = fmaf(__uint_as_float(ww[q] << 16), __uint_as_float(xx[q] << 16), a0);
      a1 = fmaf(__uint_as_float(ww[q] & 0xffff0000u), __uint_as_float(xx[q] & 0xffff0000u), a1);
    }
  }
  return warp_sum(a0 + a1);
}

// One product phase of a layer for the consumers. A slot of nr rows is cut into nr · p (row, column part) items,
// p = 8 / gcd(nr, 8), so that the 8 warps share it evenly (a slot of 2 rows of 9,728 would otherwise busy 2 warps);
// item i goes to warp i mod 8, its dot product to partial[(local row) · 8 + part]. The caller zeroed partial for the
// phase's rows and, after a consumer_sync, sums each row's 8 parts in order (finish_rows): deterministic.
__device__ void consume(const Segment* seg, int nseg, const __nv_bfloat16* x, unsigned char* ring, uint64_t* full,
                        uint64_t* empty, uint32_t& it, float* partial, int warp, int lane, bool skip,
                        bool fma_dots) {
  for (int s = 0; s < nseg; ++s) {
    const int inner = seg[s].inner, rps = rows_per_slot(inner), nvec = inner / 8;
    for (int r = 0; r < seg[s].rows; r += rps, ++it) {
      const int nr = min(rps, seg[s].rows - r);
      const int p = nr % 8 == 0 ? 1 : nr % 4 == 0 ? 2 : nr % 2 == 0 ? 4 : 8;
      const int slot = static_cast<int>(it % kStages);
      mbar_wait(&full[slot], (it / kStages) & 1u);
      const __nv_bfloat16* tile = reinterpret_cast<const __nv_bfloat16*>(ring + slot * kSlotBytes);
      for (int i = skip ? nr * p : warp; i < nr * p; i += kConsumerWarps) {
        const int row = i / p, part = i % p;
        const __nv_bfloat16* w_row = tile + static_cast<size_t>(row) * inner;
        const int v0 = part * nvec / p, v1 = (part + 1) * nvec / p;
        const float y = fma_dots ? row_dot_fma(w_row, x, v0, v1, lane) : row_dot(w_row, x, v0, v1, lane);
        if (lane == 0) partial[(seg[s].local0 + r + row) * kMaxParts + part] = y;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
  }
}

// After consume and a consumer_sync: emit(segment, row, y) for each of the block's rows of the phase, y the sum of
// its parts in order.
template <class Emit>
__device__ void finish_rows(const Segment* seg, int nseg, const float* partial, int tid, const Emit& emit) {
  for (int s = 0; s < nseg; ++s)
    for (int r = tid; r < seg[s].rows; r += kConsumers) {
      const float* q = partial + (seg[s].local0 + r) * kMaxParts;
      float y = q[0];
#pragma unroll
      for (int k = 1; k < kMaxParts; ++k) y += q[k];
      emit(seg[s], r, y);
    }
}

__device__ void zero_partials(float* partial, int tid) {
  for (int i = tid; i < kAccFloats; i += kConsumers) partial[i] = 0.0f;
}

// x ← bf16(w · (h · r)), r = 1/sqrt(Σh²/H + eps): the RMSNorm of the residual stream (read from L2).
__device__ void norm_to_x(__nv_bfloat16* x, const float* h, const float* w, const Dims& d, float* red, int tid) {
  float ss = 0.0f;
  for (int i = tid; i < d.H; i += kConsumers) {
    const float v = __ldcg(h + i);
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  if (tid % 32 == 0) red[tid / 32] = ss;
  consumer_sync();
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kConsumerWarps; ++k) total += red[k];
  const float r = 1.0f / sqrtf(total / static_cast<float>(d.H) + d.eps);
  for (int i = tid; i < d.H; i += kConsumers) x[i] = __float2bfloat16_rn(w[i] * (__ldcg(h + i) * r));
  consumer_sync();
}

__device__ void cast_to_x(__nv_bfloat16* x, const float* src, int n, int tid) {
  for (int i = tid; i < n; i += kConsumers) x[i] = __float2bfloat16_rn(__ldcg(src + i));
  consumer_sync();
}

// The profiling timeline (FusedDecodeStep::timeline): the block's first consumer thread stamps mark k of `layer`.
__device__ __forceinline__ void timeline_mark(const FusedDecodeStep& st, int G, int layer, int k, int tid) {
  if (st.timeline == nullptr || tid != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  st.timeline[(static_cast<size_t>(layer) * G + blockIdx.x) * kFusedDecodeMarks + k] = t;
}

// A q, k or v head of the new token into dst [D] (fp32, shared): optional RMSNorm (weight nw), optional RoPE,
// by one warp.
template <int D>
__device__ void prepare_head(float* dst, const float* src, const float* nw, bool rotate, const Dims& d,
                             const FusedDecodeStep& st, int pos, int lane) {
  constexpr int E = D / 32;
  float xv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) xv[e] = __ldcg(src + lane * E + e);
  if (nw != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) ss = fmaf(xv[e], xv[e], ss);
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + d.qk_eps);
#pragma unroll
    for (int e = 0; e < E; ++e) xv[e] = nw[lane * E + e] * (xv[e] * r);
  }
#pragma unroll
  for (int e = 0; e < E; ++e) dst[lane * E + e] = xv[e];
  __syncwarp();
  if (rotate && st.rope_cos != nullptr) {
    const int half = static_cast<int>(st.rotary_dim / 2);
    const bool bad = pos < 0 || pos >= st.rope_positions;
    for (int i = lane; i < half; i += 32) {
      const float x1 = dst[i], x2 = dst[i + half];
      if (bad) {
        dst[i] = cuda::quiet_nan();
        dst[i + half] = cuda::quiet_nan();
        continue;
      }
      const float c = st.rope_cos[static_cast<int64_t>(pos) * half + i];
      const float s = st.rope_sin[static_cast<int64_t>(pos) * half + i];
      dst[i] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(-x2, s));
      dst[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
    if (bad && lane == 0 && st.error_flag != nullptr) atomicOr(st.error_flag, 1);
    __syncwarp();
  }
}

template <int E>
__device__ __forceinline__ void load_bf16(float (&out)[E], const __nv_bfloat16* p) {
  if constexpr (E == 2) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    out[0] = __uint_as_float(u << 16);
    out[1] = __uint_as_float(u & 0xffff0000u);
  } else if constexpr (E == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    out[0] = __uint_as_float(u.x << 16);
    out[1] = __uint_as_float(u.x & 0xffff0000u);
    out[2] = __uint_as_float(u.y << 16);
    out[3] = __uint_as_float(u.y & 0xffff0000u);
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      out[2 * q] = __uint_as_float(w[q] << 16);
      out[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
    }
  }
}

// The attention of the new token for one layer: (kv head, split) units; the last split of a kv head merges.
template <int D>
__device__ void attention_phase(const FusedDecodeLayer& L, int layer, const Dims& d, const FusedDecodeStep& st,
                                const Work& w, unsigned char* smem, int tid, int warp, int lane) {
  constexpr int E = D / 32;
  constexpr int U = E <= 2 ? 8 : (E == 4 ? 4 : 2);  // keys in flight per warp (more spill at 168 registers)
  float* qs = reinterpret_cast<float*>(smem + kQsOffset);
  float* kv_new = reinterpret_cast<float*>(smem + kKvOffset);  // k [D], v [D] of the new token (bf16 values)
  float* scratch = reinterpret_cast<float*>(smem + kXOffset);
  int* flag_last = reinterpret_cast<int*>(smem + kRedOffset + 32 * 4);
  const int Gq = d.Hq / d.Hkv, S = d.S, units = d.Hkv * S;
  const int ctx = static_cast<int>(*st.context), pos = *st.position;
  const int start = L.window > 0 ? max(0, ctx - static_cast<int>(L.window)) : 0;
  const int64_t slot = *st.cache_slot;
  const bool slot_ok = slot >= 0 && slot < static_cast<int64_t>(d.num_blocks) * d.block_size;
  float* sc_o = scratch;                               // [8 warps][Gq][D]
  float* sc_m = scratch + kConsumerWarps * Gq * D;     // [8][Gq]
  float* sc_l = sc_m + kConsumerWarps * Gq;            // [8][Gq]
  for (int u = blockIdx.x; u < units; u += d.G) {
    const int kvh = u / S, split = u % S;
    const int span = max(ctx - start, 0), len = (span + S - 1) / S;
    const int a = min(start + split * len, ctx), b = min(ctx, a + len);
    const bool has_new = a <= ctx - 1 && ctx - 1 < b;
    const int tasks = Gq + (has_new ? 2 : 0);
    for (int t = warp; t < tasks; t += kConsumerWarps) {
      if (t < Gq) {
        prepare_head<D>(qs + t * D, w.qkv + static_cast<size_t>(kvh * Gq + t) * D, L.q_norm, true, d, st, pos, lane);
      } else {
        const bool is_k = t == Gq;
        float* dst = kv_new + (is_k ? 0 : D);
        prepare_head<D>(dst, w.qkv + d.Cq + (is_k ? 0 : d.Ckv) + static_cast<size_t>(kvh) * D,
                        is_k ? L.k_norm : nullptr, is_k, d, st, pos, lane);
        __nv_bfloat16* cache = is_k ? L.k_cache : L.v_cache;
        for (int i = lane; i < D; i += 32) {
          const __nv_bfloat16 r = __float2bfloat16_rn(dst[i]);
          dst[i] = __bfloat162float(r);
          if (slot_ok) cache[(slot * d.Hkv + kvh) * D + i] = r;
        }
        if (!slot_ok && lane == 0 && st.error_flag != nullptr) atomicOr(st.error_flag, 1);
      }
    }
    // The unit's block-table entries into shared memory (the warp-merge scratch is free until after the key loop):
    // the key loop then waits on one memory latency per round instead of two.
    int* ids = reinterpret_cast<int*>(scratch);
    const int first_blk = a / d.block_size, nblk = b > a ? (b - 1) / d.block_size - first_blk + 1 : 0;
    const bool ids_cached = nblk <= kXBytes / 4;
    if (ids_cached)
      for (int i = tid; i < nblk; i += kConsumers)
        ids[i] = first_blk + i < d.max_blocks ? st.block_table[first_blk + i] : -1;
    consumer_sync();
    timeline_mark(st, d.G, layer, kMarkHeadsReady, tid);
    // Keys [a, b): warp `warp` takes a + warp, a + warp + 8, ..., U at a time.
    float qf[kMaxGroup][E], m[kMaxGroup], l[kMaxGroup], o[kMaxGroup][E];
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        o[h][e] = 0.0f;
        qf[h][e] = h < Gq ? qs[h * D + lane * E + e] : 0.0f;
      }
    }
    const size_t row_stride = static_cast<size_t>(d.Hkv) * D;
    for (int j0 = a + warp; j0 < b; j0 += kConsumerWarps * U) {
      float kk[U][E], vv[U][E];
      bool ok[U];
#pragma unroll
      for (int q = 0; q < U; ++q) {
        const int j = j0 + q * kConsumerWarps;
        ok[q] = j < b;
        if (!ok[q]) continue;
        if (has_new && j == ctx - 1) {
#pragma unroll
          for (int e = 0; e < E; ++e) {
            kk[q][e] = kv_new[lane * E + e];
            vv[q][e] = kv_new[D + lane * E + e];
          }
          continue;
        }
        const int bi = j / d.block_size;
        const int id = ids_cached ? ids[bi - first_blk] : bi < d.max_blocks ? st.block_table[bi] : -1;
        if (id < 0 || id >= d.num_blocks) {
          ok[q] = false;
          if (lane == 0 && st.error_flag != nullptr) atomicOr(st.error_flag, 1);
          continue;
        }
        const size_t off = (static_cast<size_t>(id) * d.block_size + j % d.block_size) * row_stride +
                           static_cast<size_t>(kvh) * D + lane * E;
        load_bf16<E>(kk[q], L.k_cache + off);
        load_bf16<E>(vv[q], L.v_cache + off);
      }
#pragma unroll
      for (int q = 0; q < U; ++q) {
        if (!ok[q]) continue;
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h >= Gq) break;
          float s = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) s = fmaf(qf[h][e], kk[q][e], s);
          s = warp_sum(s) * d.scale;
          const float mn = fmaxf(m[h], s);
          const float corr = expf(m[h] - mn), p = expf(s - mn);
          l[h] = l[h] * corr + p;
#pragma unroll
          for (int e = 0; e < E; ++e) o[h][e] = o[h][e] * corr + p * vv[q][e];
          m[h] = mn;
        }
      }
    }
    consumer_sync();  // every warp is done with the block ids before the scratch takes the warps' states
    timeline_mark(st, d.G, layer, kMarkKeysDone, tid);
    // Merge the warps, then write the unit's partial.
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= Gq) break;
#pragma unroll
      for (int e = 0; e < E; ++e) sc_o[(warp * Gq + h) * D + lane * E + e] = o[h][e];
      if (lane == 0) {
        sc_m[warp * Gq + h] = m[h];
        sc_l[warp * Gq + h] = l[h];
      }
    }
    consumer_sync();
    for (int t = tid; t < Gq * D; t += kConsumers) {
      const int h = t / D, e = t % D;
      float M = -INFINITY;
      for (int k = 0; k < kConsumerWarps; ++k) M = fmaxf(M, sc_m[k * Gq + h]);
      float Ls = 0.0f, O = 0.0f;
      for (int k = 0; k < kConsumerWarps; ++k) {
        const float mk = sc_m[k * Gq + h];
        if (mk == -INFINITY) continue;  // a warp without keys
        const float f = expf(mk - M);
        Ls += sc_l[k * Gq + h] * f;
        O += sc_o[(k * Gq + h) * D + e] * f;
      }
      w.part_o[(static_cast<size_t>(u) * Gq + h) * D + e] = O;
      if (e == 0) {
        w.part_m[u * Gq + h] = M;
        w.part_l[u * Gq + h] = Ls;
      }
    }
    __threadfence();
    consumer_sync();
    if (tid == 0) *flag_last = atomicAdd(&w.counters[1 + layer * d.Hkv + kvh], 1u) == static_cast<unsigned>(S - 1);
    consumer_sync();
    timeline_mark(st, d.G, layer, kMarkPartialWritten, tid);
    if (*flag_last) {  // every split of this kv head is written: merge them into the attention output
      __threadfence();
      for (int t = tid; t < Gq * D; t += kConsumers) {
        const int h = t / D, e = t % D;
        float M = -INFINITY;
        for (int s = 0; s < S; ++s) M = fmaxf(M, __ldcg(w.part_m + (kvh * S + s) * Gq + h));
        float Ls = 0.0f, O = 0.0f;
        for (int s = 0; s < S; ++s) {
          const int us = kvh * S + s;
          const float ms = __ldcg(w.part_m + us * Gq + h);
          if (ms == -INFINITY) continue;  // a split without keys
          const float f = expf(ms - M);
          Ls += __ldcg(w.part_l + us * Gq + h) * f;
          O += __ldcg(w.part_o + (static_cast<size_t>(us) * Gq + h) * D + e) * f;
        }
        w.attn[(kvh * Gq + h) * D + e] = O / Ls;
      }
    }
    consumer_sync();
    timeline_mark(st, d.G, layer, kMarkSplitsMerged, tid);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    fused_decode_kernel(float* __restrict__ h, const FusedDecodeLayer* __restrict__ layers, Dims d,
                        FusedDecodeStep st, Work w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem + kRingOffset;
  __nv_bfloat16* x = reinterpret_cast<__nv_bfloat16*>(smem + kXOffset);
  float* acc = reinterpret_cast<float*>(smem + kAccOffset);
  float* red = reinterpret_cast<float*>(smem + kRedOffset);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOffset);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) produce(layers, d, ring, full, empty);
    return;
  }
  const int tid = threadIdx.x - 32, warp = tid / 32, lane = tid % 32;
  unsigned barriers = 0;
  uint32_t it = 0;
  Segment seg[3];
  const auto sync = [&] { grid_sync(w.counters, ++barriers * static_cast<unsigned>(d.G), tid); };
  const auto mark = [&](int layer, int k) { timeline_mark(st, d.G, layer, k, tid); };
  // A grid barrier between two phases of a layer, marked on the timeline before (k) and after (k + 1).
  const auto barrier = [&](int layer, int k) {
    mark(layer, k);
    sync();
    mark(layer, k + 1);
  };
  const auto add_residual = [&](const Segment& s, int r, float y) {
    float* p = h + s.out0 + r;
    *p = __fadd_rn(__ldcg(p), __fmul_rn(d.mult, y));
  };
  for (int layer = 0; layer < d.layers; ++layer) {
    const FusedDecodeLayer L = layers[layer];
    // This block's rows of one product (x ready, acc zeroed before x was formed) into acc; returns its segments.
    const auto products = [&](Phase phase) {
      const int n = phase_segments(L, d, phase, seg);
      consume(seg, n, x, ring, full, empty, it, acc, warp, lane, d.skip_products, d.fma_dots);
      consumer_sync();
      return n;
    };
    // q, k, v of RMSNorm(h).
    mark(layer, 0);
    zero_partials(acc, tid);
    norm_to_x(x, h, L.input_norm, d, red, tid);
    int n = products(kQkv);
    finish_rows(seg, n, acc, tid, [&](const Segment& s, int r, float y) { w.qkv[s.out0 + r] = y; });
    barrier(layer, 1);
    attention_phase<D>(L, layer, d, st, w, smem, tid, warp, lane);
    barrier(layer, 3);
    // h += o_proj(attention).
    zero_partials(acc, tid);
    cast_to_x(x, w.attn, d.Cq, tid);
    finish_rows(seg, products(kOut), acc, tid, add_residual);
    barrier(layer, 5);
    // SwiGLU of RMSNorm(h): this block's gate rows j and up rows j, then the activations of its rows.
    zero_partials(acc, tid);
    norm_to_x(x, h, L.post_attention_norm, d, red, tid);
    if (products(kGateUp) == 2) {
      const int rows = seg[0].rows;
      for (int j = tid; j < rows; j += kConsumers) {
        const float* qg = acc + j * kMaxParts;
        const float* qu = acc + (rows + j) * kMaxParts;
        float g = qg[0], u = qu[0];
#pragma unroll
        for (int k = 1; k < kMaxParts; ++k) {
          g += qg[k];
          u += qu[k];
        }
        w.act[seg[0].out0 + j] = g / (1.0f + expf(-g)) * u;
      }
    }
    barrier(layer, 7);
    // h += down_proj(activations).
    zero_partials(acc, tid);
    cast_to_x(x, w.act, d.F, tid);
    finish_rows(seg, products(kDown), acc, tid, add_residual);
    mark(layer, 9);
    if (layer + 1 < d.layers) sync();
  }
#else
  __trap();
#endif
}

struct Launch {
  int grid = 0;
  std::string refusal;
};

// The grid (one block per multiprocessor, all resident) on device `dev`, or why the kernel cannot run there; opts the
// kernel into its shared memory on that device.
template <int D>
Launch query_launch(int dev) {
  Launch l;
  int major = 0, sms = 0, optin = 0, coop = 0;
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (major < 9) {
    l.refusal = "needs compute capability 9.0 (bulk copies, mbarrier transactions)";
    return l;
  }
  if (optin < kSmemBytes) {
    l.refusal = "needs " + std::to_string(kSmemBytes) + " bytes of shared memory per block";
    return l;
  }
  if (coop == 0) {
    l.refusal = "the device has no cooperative launch";
    return l;
  }
  HLM_CUDA_CHECK(
      cudaFuncSetAttribute(fused_decode_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  int per_sm = 0;
  HLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_decode_kernel<D>, kThreads, kSmemBytes));
  if (per_sm < 1) {
    l.refusal = "the kernel does not fit a multiprocessor";
    return l;
  }
  l.grid = sms;  // one block per multiprocessor: the ring takes most of its shared memory
  return l;
}

// query_launch for the current device, once per device (every launch asks: no attribute queries per decode step).
template <int D>
Launch plan_launch() {
  int dev = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mutex;
  static std::map<int, Launch> planned;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = planned.find(dev); it != planned.end()) return it->second;
  return planned.emplace(dev, query_launch<D>(dev)).first->second;
}

Launch plan_for(int64_t D) {
  switch (D) {
    case 64:
      return plan_launch<64>();
    case 128:
      return plan_launch<128>();
    case 256:
      return plan_launch<256>();
    default: {
      Launch l;
      l.refusal = "head dim " + std::to_string(D) + " (64, 128 or 256 only)";
      return l;
    }
  }
}

struct Layout {
  size_t qkv, attn, act, part_o, part_m, part_l, counters, total;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

Layout layout(const FusedDecodeShape& s, int grid) {
  const int64_t Gq = s.q_heads / std::max<int64_t>(s.kv_heads, 1);
  const int64_t S = std::max<int64_t>(1, grid / std::max<int64_t>(s.kv_heads, 1)), units = s.kv_heads * S;
  Layout l{};
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align256(bytes);
    return here;
  };
  l.qkv = take(sizeof(float) * static_cast<size_t>((s.q_heads + 2 * s.kv_heads) * s.head_dim));
  l.attn = take(sizeof(float) * static_cast<size_t>(s.q_heads * s.head_dim));
  l.act = take(sizeof(float) * static_cast<size_t>(s.intermediate));
  l.part_o = take(sizeof(float) * static_cast<size_t>(units * Gq * s.head_dim));
  l.part_m = take(sizeof(float) * static_cast<size_t>(units * Gq));
  l.part_l = take(sizeof(float) * static_cast<size_t>(units * Gq));
  l.counters = take(sizeof(unsigned) * static_cast<size_t>(1 + s.layers * s.kv_heads));
  l.total = at;
  return l;
}

}  // namespace

std::string fused_decode_cuda_refusal(const FusedDecodeShape& s) {
  if (s.layers < 1 || s.hidden < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.intermediate < 1)
    return "an empty shape";
  if (s.q_heads % s.kv_heads != 0 || s.q_heads / s.kv_heads > kMaxGroup)
    return std::to_string(s.q_heads) + " q heads over " + std::to_string(s.kv_heads) + " kv heads (at most " +
           std::to_string(kMaxGroup) + " per kv head)";
  const int64_t Cq = s.q_heads * s.head_dim;
  for (const int64_t inner : {s.hidden, Cq, s.intermediate})
    if (inner % 8 != 0 || inner > kMaxInner)
      return "a product's inner dim " + std::to_string(inner) + " (a multiple of 8, at most " +
             std::to_string(kMaxInner) + ")";
  if (s.block_size < 1 || s.num_blocks < 1) return "no KV pool";
  const Launch l = plan_for(s.head_dim);
  if (!l.refusal.empty()) return l.refusal;
  const auto per_block = [&](int64_t rows) { return (rows + l.grid - 1) / l.grid; };
  if (2 * per_block(s.intermediate) > kMaxBlockRows || per_block((s.q_heads + 2 * s.kv_heads) * s.head_dim) >
      kMaxBlockRows || per_block(s.hidden) > kMaxBlockRows)
    return "a product's rows per block exceed the kernel's accumulators";
  const int64_t Gq = s.q_heads / s.kv_heads;
  if (kConsumerWarps * Gq * (s.head_dim + 2) * 4 > kXBytes) return "the attention scratch exceeds shared memory";
  return {};
}

int fused_decode_cuda_grid(int64_t head_dim) {
  const Launch l = plan_for(head_dim);
  HLM_CHECK(l.refusal.empty(), "fused decode: ", l.refusal);
  return l.grid;
}

size_t fused_decode_cuda_workspace_bytes(const FusedDecodeShape& s) {
  const Launch l = plan_for(s.head_dim);
  HLM_CHECK(l.refusal.empty(), "fused decode: ", l.refusal);
  return layout(s, l.grid).total;
}

void fused_decode_cuda(float* hidden, const FusedDecodeLayer* layers, const FusedDecodeShape& s,
                       const FusedDecodeStep& step, void* workspace, cudaStream_t stream) {
  const Launch l = plan_for(s.head_dim);
  HLM_CHECK(l.refusal.empty(), "fused decode: ", l.refusal);
  const Layout lay = layout(s, l.grid);
  char* ws = static_cast<char*>(workspace);
  Work w;
  w.qkv = reinterpret_cast<float*>(ws + lay.qkv);
  w.attn = reinterpret_cast<float*>(ws + lay.attn);
  w.act = reinterpret_cast<float*>(ws + lay.act);
  w.part_o = reinterpret_cast<float*>(ws + lay.part_o);
  w.part_m = reinterpret_cast<float*>(ws + lay.part_m);
  w.part_l = reinterpret_cast<float*>(ws + lay.part_l);
  w.counters = reinterpret_cast<unsigned*>(ws + lay.counters);
  HLM_CUDA_CHECK(cudaMemsetAsync(w.counters, 0, sizeof(unsigned) * static_cast<size_t>(1 + s.layers * s.kv_heads),
                                 stream));
  Dims d;
  d.layers = static_cast<int>(s.layers);
  d.H = static_cast<int>(s.hidden);
  d.Hq = static_cast<int>(s.q_heads);
  d.Hkv = static_cast<int>(s.kv_heads);
  d.D = static_cast<int>(s.head_dim);
  d.F = static_cast<int>(s.intermediate);
  d.Cq = d.Hq * d.D;
  d.Ckv = d.Hkv * d.D;
  d.G = l.grid;
  d.S = std::max(1, l.grid / d.Hkv);
  d.num_blocks = static_cast<int>(s.num_blocks);
  d.block_size = static_cast<int>(s.block_size);
  d.max_blocks = static_cast<int>(s.max_blocks);
  d.eps = s.norm_eps;
  d.qk_eps = s.qk_norm_eps;
  d.mult = s.residual_multiplier;
  d.scale = s.attention_scale;
  d.skip_products = s.skip_products;
  d.fma_dots = s.fma_dots;
  d.prefetch_bytes = static_cast<uint64_t>(std::max<int64_t>(0, s.l2_prefetch_bytes));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(l.grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  switch (s.head_dim) {
    case 64:
      HLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fused_decode_kernel<64>, hidden, layers, d, step, w));
      break;
    case 128:
      HLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fused_decode_kernel<128>, hidden, layers, d, step, w));
      break;
    default:
      HLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fused_decode_kernel<256>, hidden, layers, d, step, w));
      break;
  }
}

}  // namespace hlm
