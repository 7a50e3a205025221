// Gated delta rule CUDA kernels and launchers: the token recurrence with the state rows split over lanes and held in
// registers (contract: gated_delta_rule.h; design, numerics and workspace: gated_delta_rule_cuda.h).
//
// Forward: one block per (sequence, v-head), ceil(dv/16) warps. A warp owns 16 state rows: 4 row slots of 8 lanes,
// each thread 4 rows (a = 16·warp + 4·slot + i) × 16 columns (float4 chunks c = sub + 8·j, sub = lane % 8, columns
// 4c..4c+3), so M lives in 64 registers. Per-row dot products are 8-lane sums done for the 4 rows at once (transposed
// reduction, reduce_rows4 / allgather_rows4). k, q, v, g, β of 16 tokens are staged in shared memory with cp.async,
// double-buffered (one barrier per 16 tokens); padded columns (≥ dk) and rows (≥ dv) are zeros and stay inert.
//
// Backward: work item = (sequence, v-head, row group of rg ≤ 64 rows), rg/4 warps. A warp owns 4 rows × all 128
// columns (lane l: columns 4l..4l+3), so the cross-row sums of dq and dk need no shuffles inside a warp (each lane sums
// its 4 rows) and per-row dot products are 32-lane transposed reductions. Three recompute levels (S1 = 32, S2 = 4):
//   sweep 1: forward over the sequence, the rows' state at every S1 boundary → checkpoints (global workspace);
//   per S1 segment, in reverse: sweep 2 recomputes it from its checkpoint and stores the state at every S2 boundary
//   (per-block global scratch, thread-private, stays in L2); per S2 sub-segment, in reverse: sweep 3 recomputes its
//   tokens, keeping α·M (shared memory, thread-private) and v − p (shared memory, per warp) per token, then the reverse
//   step walks them backwards carrying D = dL/dM in registers; meanwhile the start state of the next sub-segment (or
//   the previous segment's checkpoint) is loaded into the free M registers. Per token, each warp writes its partial
//   dq, dk (float4 per lane), dg, dβ to shared memory; after each sub-segment the block sums warps in order and writes
//   per-group partials; gdn_finish_kernel sums the groups and the GVA v-heads in a fixed order. No atomics anywhere.
// All staging uses the same double-buffered cp.async scheme: one step = one staged unit of tokens, one barrier per step
// (plus one per reverse sub-segment for the partial sums). Every barrier and every shuffle sits in block-uniform control
// flow (loop bounds and branches depend only on the work item), shuffles always with the full warp.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"

namespace hlm {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxDim = static_cast<int>(gated_delta_rule_cuda_max_dim());  // 128: padded row/column count

// Forward layout.
constexpr int kFwdRowsPerWarp = 16;
constexpr int kFwdMaxThreads = 32 * kMaxDim / kFwdRowsPerWarp;  // 256
constexpr int kFwdTokens = 16;                                  // tokens per staged chunk
constexpr int kFwdBuf = kFwdTokens * (3 * kMaxDim + 2);         // floats per buffer: k, q, v [16][128], g, beta [16]

// Backward layout.
constexpr int kSeg = static_cast<int>(gated_delta_rule_cuda_segment());  // S1 = 32
constexpr int kSub = 4;                                                   // S2 = tokens per staged unit
constexpr int kSubs = kSeg / kSub;                                        // 8 sub-segments per segment
constexpr int kBwdMaxRows = 64;                                           // rows per group
constexpr int kBwdMaxThreads = 8 * kBwdMaxRows;                           // 512: 4 rows per warp
constexpr int64_t kBwdMaxBlocks = 1024;  // persistent grid cap (bounds the per-block scratch)
static_assert(kSeg % kSub == 0 && kSubs >= 2, "segment must hold whole sub-segments");

struct Dims {
  int64_t T, Hk, Hv, dk, dv, N;
  __host__ __device__ int64_t group() const { return Hv / Hk; }
  __device__ int64_t vo(int64_t t, int64_t h) const { return (t * Hv + h) * dv; }
  __device__ int64_t gb(int64_t t, int64_t h) const { return t * Hv + h; }
  __device__ int64_t state(int64_t seq, int64_t h) const { return (seq * Hv + h) * dv * dk; }
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- cp.async (4-byte copies: rows of any length and alignment)

__device__ __forceinline__ void cp_async4(float* smem_dst, const float* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// ---- Lane reductions (fixed xor trees: deterministic; lanes that end with the same row hold the same bits)

// x[r] = this lane's partial of row r (r < 4) inside an aligned group of kGroup lanes (8 or 32). Returns the group sum
// of row 2·h1 + h2, where h1 = lane bit kGroup/2 and h2 = lane bit kGroup/4: 3 + log2(kGroup/4) shuffles for 4 rows.
template <int kGroup>
__device__ __forceinline__ float reduce_rows4(const float (&x)[4], int lane) {
  constexpr int o1 = kGroup / 2, o2 = kGroup / 4;
  const bool h1 = (lane & o1) != 0, h2 = (lane & o2) != 0;
  const float send0 = h1 ? x[0] : x[2], send1 = h1 ? x[1] : x[3];
  float keep0 = h1 ? x[2] : x[0], keep1 = h1 ? x[3] : x[1];  // rows 2·h1, 2·h1 + 1
  keep0 += __shfl_xor_sync(kFull, send0, o1);
  keep1 += __shfl_xor_sync(kFull, send1, o1);
  const float send = h2 ? keep0 : keep1;
  float z = h2 ? keep1 : keep0;  // row 2·h1 + h2
  z += __shfl_xor_sync(kFull, send, o2);
#pragma unroll
  for (int off = o2 / 2; off > 0; off >>= 1) z += __shfl_xor_sync(kFull, z, off);
  return z;
}

// z = reduce_rows4's result; returns every row's sum in every lane of the group (3 shuffles).
template <int kGroup>
__device__ __forceinline__ void allgather_rows4(float z, int lane, float (&out)[4]) {
  constexpr int o1 = kGroup / 2, o2 = kGroup / 4;
  const bool h1 = (lane & o1) != 0, h2 = (lane & o2) != 0;
  const float other = __shfl_xor_sync(kFull, z, o2);  // row 2·h1 + !h2
  const float lo = h2 ? other : z, hi = h2 ? z : other;  // rows 2·h1, 2·h1 + 1
  const float plo = __shfl_xor_sync(kFull, lo, o1), phi = __shfl_xor_sync(kFull, hi, o1);  // rows 2·!h1, 2·!h1 + 1
  out[0] = h1 ? plo : lo;
  out[1] = h1 ? phi : hi;
  out[2] = h1 ? lo : plo;
  out[3] = h1 ? hi : phi;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

// ============================================================================ forward

struct FwdArgs {
  float* o;
  float* hT;
  const float *q, *k, *v, *g, *beta, *h0;
  const int64_t* cu;
  Dims s;
  float scale;
};

__global__ void __launch_bounds__(kFwdMaxThreads, 2) gdn_forward_kernel(FwdArgs args) {
  extern __shared__ float4 fwd_smem4[];
  float* smem = reinterpret_cast<float*>(fwd_smem4);  // 2 buffers of kFwdBuf floats
  const Dims& s = args.s;
  const int64_t seq = blockIdx.x / s.Hv, h = blockIdx.x % s.Hv;
  const int tid = threadIdx.x, nthr = blockDim.x, warp = tid >> 5, nwarps = nthr >> 5, lane = tid & 31;
  const int sub = lane & 7, row_base = warp * kFwdRowsPerWarp + (lane >> 3) * 4;  // rows row_base + i, i < 4
  const int64_t begin = args.cu[seq], len = args.cu[seq + 1] - begin;

  for (int i = tid; i < 2 * kFwdBuf; i += nthr) smem[i] = 0.0f;  // padding stays zero; real entries are copied in
  __syncthreads();

  float M[4][16];
  {
    const float* h0 = args.h0 != nullptr ? args.h0 + s.state(seq, h) : nullptr;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t a = row_base + i, d = 4 * (sub + 8 * j) + e;
          M[i][4 * j + e] = (h0 != nullptr && a < s.dv && d < s.dk) ? h0[a * s.dk + d] : 0.0f;
        }
  }

  // Chunk c: tokens begin + 16c .. (at most 16), into buffer c & 1.
  const int64_t n_chunks = (len + kFwdTokens - 1) / kFwdTokens;
  const float* k_head = args.k + (h / s.group()) * s.dk;
  const float* q_head = args.q + (h / s.group()) * s.dk;
  const float* v_head = args.v + h * s.dv;
  const int64_t kq_stride = s.Hk * s.dk, v_stride = s.Hv * s.dv;
  const auto stage = [&](int64_t c) {
    float* b = smem + (c & 1) * kFwdBuf;
    const int64_t t0 = begin + c * kFwdTokens;
    const int n = static_cast<int>(min64(kFwdTokens, len - c * kFwdTokens));
    for (int tk = warp; tk < n; tk += nwarps) {
      const int64_t t = t0 + tk;
      const float* kr = k_head + t * kq_stride;
      const float* qr = q_head + t * kq_stride;
      const float* vr = v_head + t * v_stride;
      for (int d = lane; d < s.dk; d += 32) {
        cp_async4(b + tk * kMaxDim + d, kr + d);
        cp_async4(b + (kFwdTokens + tk) * kMaxDim + d, qr + d);
      }
      for (int a = lane; a < s.dv; a += 32) cp_async4(b + (2 * kFwdTokens + tk) * kMaxDim + a, vr + a);
      if (lane == 0) {
        cp_async4(b + 3 * kFwdTokens * kMaxDim + tk, args.g + s.gb(t, h));
        cp_async4(b + 3 * kFwdTokens * kMaxDim + kFwdTokens + tk, args.beta + s.gb(t, h));
      }
    }
  };
  if (n_chunks > 0) stage(0);
  cp_async_commit();

  // Lanes whose rows' reduced output they hold: row 2·bit2 + bit1 of the slot; lanes with bit0 = 0 write it.
  const int out_row = row_base + 2 * ((lane >> 2) & 1) + ((lane >> 1) & 1);
  for (int64_t c = 0; c < n_chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // chunk c visible to all; everyone is done with chunk c − 1 (the buffer refilled next)
    if (c + 1 < n_chunks) stage(c + 1);
    cp_async_commit();
    const float* b = smem + (c & 1) * kFwdBuf;
    const int n = static_cast<int>(min64(kFwdTokens, len - c * kFwdTokens));
    for (int tk = 0; tk < n; ++tk) {
      const int64_t t = begin + c * kFwdTokens + tk;
      const float4* k4 = reinterpret_cast<const float4*>(b + tk * kMaxDim);
      const float4* q4 = reinterpret_cast<const float4*>(b + (kFwdTokens + tk) * kMaxDim);
      const float* vrow = b + (2 * kFwdTokens + tk) * kMaxDim;
      const float alpha = expf(b[3 * kFwdTokens * kMaxDim + tk]);
      const float beta = b[3 * kFwdTokens * kMaxDim + kFwdTokens + tk];
      float kr[16];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 x = k4[sub + 8 * j];
        kr[4 * j] = x.x;
        kr[4 * j + 1] = x.y;
        kr[4 * j + 2] = x.z;
        kr[4 * j + 3] = x.w;
      }
      float p[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // Ma = α M; p = Ma k (lane part)
        p[i] = 0.0f;
#pragma unroll
        for (int x = 0; x < 16; ++x) {
          M[i][x] *= alpha;
          p[i] = fmaf(M[i][x], kr[x], p[i]);
        }
      }
      float pr[4];
      allgather_rows4<8>(reduce_rows4<8>(p, lane), lane, pr);
      float qr[16];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 x = q4[sub + 8 * j];
        qr[4 * j] = x.x;
        qr[4 * j + 1] = x.y;
        qr[4 * j + 2] = x.z;
        qr[4 * j + 3] = x.w;
      }
      float o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // u = β (v − p); M = Ma + u kᵀ; o = M q (lane part)
        const float u = beta * (vrow[row_base + i] - pr[i]);
        o[i] = 0.0f;
#pragma unroll
        for (int x = 0; x < 16; ++x) {
          M[i][x] = fmaf(u, kr[x], M[i][x]);
          o[i] = fmaf(M[i][x], qr[x], o[i]);
        }
      }
      const float oz = reduce_rows4<8>(o, lane);
      if ((lane & 1) == 0 && out_row < s.dv) args.o[s.vo(t, h) + out_row] = args.scale * oz;
    }
  }

  if (args.hT != nullptr) {
    float* hT = args.hT + s.state(seq, h);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t a = row_base + i, d = 4 * (sub + 8 * j) + e;
          if (a < s.dv && d < s.dk) hT[a * s.dk + d] = M[i][4 * j + e];
        }
  }
}

// ============================================================================ backward

// Shared-memory layout of the backward (offsets in floats; all float4 regions 16-byte aligned). nthr = 8·rg threads.
struct BwdSmem {
  int st;     // [kSub][4 rows][nthr] float4: α·M of the thread's rows before each token of the sub-segment
  int pq;     // [kSub][nwarps][128]: per-warp partial dq (unscaled)
  int pk;     // [kSub][nwarps][128]: per-warp partial dk
  int pg;     // [kSub][nwarps]
  int pb;     // [kSub][nwarps]
  int pv;     // [kSub][rg]: v − p of each row before each token of the sub-segment (written by lane 0 of the warp)
  int stage;  // 2 buffers of stage_size: k, q [kSub][128], v, dO [kSub][rg], g, beta [kSub]
  int stage_size;
  int total;
};
__host__ __device__ inline BwdSmem bwd_smem_layout(int rg) {
  const int nthr = 8 * rg, nw = rg / 4;
  BwdSmem L{};
  L.st = 0;
  L.pq = L.st + kSub * 4 * nthr * 4;
  L.pk = L.pq + kSub * nw * kMaxDim;
  L.pg = L.pk + kSub * nw * kMaxDim;
  L.pb = L.pg + kSub * nw;
  L.pv = L.pb + kSub * nw;
  L.stage = L.pv + kSub * rg;
  L.stage_size = 2 * kSub * kMaxDim + 2 * kSub * rg + 2 * kSub;
  L.total = L.stage + 2 * L.stage_size;
  return L;
}
// Offsets inside one staging buffer.
__device__ __forceinline__ int st_k(int tk) { return tk * kMaxDim; }
__device__ __forceinline__ int st_q(int tk) { return (kSub + tk) * kMaxDim; }
__device__ __forceinline__ int st_v(int tk, int rg) { return 2 * kSub * kMaxDim + tk * rg; }
__device__ __forceinline__ int st_do(int tk, int rg) { return 2 * kSub * kMaxDim + (kSub + tk) * rg; }
__device__ __forceinline__ int st_g(int tk, int rg) { return 2 * kSub * kMaxDim + 2 * kSub * rg + tk; }
__device__ __forceinline__ int st_b(int tk, int rg) { return 2 * kSub * kMaxDim + 2 * kSub * rg + kSub + tk; }

// The step schedule of one work item (len > 0 tokens; units of kSub tokens, nu of them, in n1 segments):
//   steps [0, nu): sweep 1 over unit = step;
//   then segments n1 − 1 down to 0, each: sweep 2 over its sub-segments 0 .. nsub − 2, then the reverse over
//   nsub − 1 .. 0 (nsub = kSubs, or nsub_last for the last segment): 2·nsub − 1 steps per segment.
enum BwdKind { kSweep1 = 0, kSweep2 = 1, kReverse = 2 };
struct BwdStep {
  int kind;
  int sub, nsub;  // sub-segment index in its segment, sub-segments in the segment (phase 2)
  int64_t seg, unit;
};
__host__ __device__ inline int64_t bwd_num_steps(int64_t len) {
  if (len <= 0) return 0;
  const int64_t nu = (len + kSub - 1) / kSub, n1 = (len + kSeg - 1) / kSeg, nsub_last = nu - kSubs * (n1 - 1);
  return nu + (2 * nsub_last - 1) + (2 * kSubs - 1) * (n1 - 1);
}
__host__ __device__ inline BwdStep bwd_decode(int64_t step, int64_t len) {
  const int64_t nu = (len + kSub - 1) / kSub, n1 = (len + kSeg - 1) / kSeg, nsub_last = nu - kSubs * (n1 - 1);
  BwdStep r{};
  if (step < nu) {
    r.kind = kSweep1;
    r.unit = step;
    r.seg = step / kSubs;
    r.sub = static_cast<int>(step % kSubs);
    r.nsub = 0;
    return r;
  }
  int64_t x = step - nu, lam;
  const int64_t first = 2 * nsub_last - 1;
  if (x < first) {
    r.seg = n1 - 1;
    lam = x;
    r.nsub = static_cast<int>(nsub_last);
  } else {
    x -= first;
    r.seg = n1 - 2 - x / (2 * kSubs - 1);
    lam = x % (2 * kSubs - 1);
    r.nsub = kSubs;
  }
  if (lam < r.nsub - 1) {
    r.kind = kSweep2;
    r.sub = static_cast<int>(lam);
  } else {
    r.kind = kReverse;
    r.sub = static_cast<int>(2 * (r.nsub - 1) - lam);
  }
  r.unit = r.seg * kSubs + r.sub;
  return r;
}

struct BwdArgs {
  float *dq_p, *dk_p, *dg_p, *db_p;  // per-group partials [T, Hv, ng, dk] (dq scaled), [T, Hv, ng]
  float *dv, *dh0;
  float* ckpt;  // [T/S1 + N + 1, Hv, dv, dk]: state at each segment start
  float4* l2;   // [gridDim.x, kSubs − 1, 4, nthr]: state at each sub-segment start of the current segment
  const float *q, *k, *v, *g, *beta, *h0, *d_o, *d_hT;
  const int64_t* cu;
  Dims s;
  int ng, rg;
  float scale;
};

// Checkpoint slot of the segment starting at token t0 of sequence seq: t0 / S1 + seq is distinct for distinct
// segments (a sequence's segments start S1 apart, the next sequence starts after its last one) and < T/S1 + N + 1.
__device__ __forceinline__ int64_t checkpoint_slot(int64_t t0, int64_t seq) { return t0 / kSeg + seq; }

// One recompute step on the thread's 4 rows × 4 columns: Ma = α M, p = Ma k, vp = v − p, M = Ma + β vp kᵀ. With
// kStore, Ma goes to st_out (thread-private) and vp to pv_out[4·warp .. +3] (lane 0; the warp's lanes agree).
template <bool kStore>
__device__ __forceinline__ void bwd_forward_token(float (&M)[4][4], const float* b, int tk, int rg, int warp, int lane,
                                                  float4* st_out, float* pv_out, int nthr, int tid) {
  const float4 k4 = reinterpret_cast<const float4*>(b + st_k(tk))[lane];
  const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
  const float alpha = expf(b[st_g(tk, rg)]), beta = b[st_b(tk, rg)];
  float p[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    p[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      M[i][e] *= alpha;
      p[i] = fmaf(M[i][e], kr[e], p[i]);
    }
  }
  if (kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) st_out[i * nthr + tid] = make_float4(M[i][0], M[i][1], M[i][2], M[i][3]);
  }
  float pr[4];
  allgather_rows4<32>(reduce_rows4<32>(p, lane), lane, pr);
  const float* vrow = b + st_v(tk, rg) + 4 * warp;
  float vp[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    vp[i] = vrow[i] - pr[i];
    const float u = beta * vp[i];
#pragma unroll
    for (int e = 0; e < 4; ++e) M[i][e] = fmaf(u, kr[e], M[i][e]);
  }
  if (kStore && lane == 0) reinterpret_cast<float4*>(pv_out)[warp] = make_float4(vp[0], vp[1], vp[2], vp[3]);
}

// One reverse step (gated_delta_rule_recurrent.cpp): D ← dL/dM before the token; per-warp partials of dq, dk, dg,
// dβ to shared memory; dv to global.
__device__ __forceinline__ void bwd_reverse_token(float (&D)[4][4], const float* pv_in, const float* b, int tk,
                                                  int rg, int warp, int lane, const float4* st_in, int nthr, int tid,
                                                  float* pq, float* pk, float* pg, float* pb, float* dv_row,
                                                  int64_t row0, int64_t dv, float scale) {
  const float4 k4 = reinterpret_cast<const float4*>(b + st_k(tk))[lane];
  const float4 q4 = reinterpret_cast<const float4*>(b + st_q(tk))[lane];
  const float kr[4] = {k4.x, k4.y, k4.z, k4.w}, qr[4] = {q4.x, q4.y, q4.z, q4.w};
  const float alpha = expf(b[st_g(tk, rg)]), beta = b[st_b(tk, rg)];
  const float* dOrow = b + st_do(tk, rg) + 4 * warp;
  const float4 vp4 = reinterpret_cast<const float4*>(pv_in)[warp];
  const float vp[4] = {vp4.x, vp4.y, vp4.z, vp4.w};
  float Ma[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 x = st_in[i * nthr + tid];
    Ma[i][0] = x.x;
    Ma[i][1] = x.y;
    Ma[i][2] = x.z;
    Ma[i][3] = x.w;
  }
  float dq[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, du[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // dq += dO_a M'_a; D_a += scale dO_a q; du = D_a k (lane part)
    const float dOa = dOrow[i], sdOa = scale * dOa, u = beta * vp[i];
    du[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dq[e] = fmaf(dOa, fmaf(u, kr[e], Ma[i][e]), dq[e]);
      D[i][e] = fmaf(sdOa, qr[e], D[i][e]);
      du[i] = fmaf(D[i][e], kr[e], du[i]);
    }
  }
  float dur[4];
  allgather_rows4<32>(reduce_rows4<32>(du, lane), lane, dur);
  float dbeta = 0.0f, dg = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // dk += D_a u + Ma dp; dMa = D_a + dp k; dg += Ma·dMa; D_a = α dMa
    dbeta = fmaf(dur[i], vp[i], dbeta);
    const float dp = -beta * dur[i], u = beta * vp[i];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dk[e] = fmaf(Ma[i][e], dp, fmaf(D[i][e], u, dk[e]));
      const float dMa = fmaf(dp, kr[e], D[i][e]);
      dg = fmaf(Ma[i][e], dMa, dg);
      D[i][e] = alpha * dMa;
    }
  }
  dg = warp_sum(dg);
  const float du_mine = lane == 0 ? dur[0] : lane == 1 ? dur[1] : lane == 2 ? dur[2] : dur[3];
  const int64_t a = row0 + 4 * warp + lane;
  if (lane < 4 && a < dv) dv_row[a] = beta * du_mine;
  reinterpret_cast<float4*>(pq + warp * kMaxDim)[lane] = make_float4(dq[0], dq[1], dq[2], dq[3]);
  reinterpret_cast<float4*>(pk + warp * kMaxDim)[lane] = make_float4(dk[0], dk[1], dk[2], dk[3]);
  if (lane == 0) {
    pg[warp] = dg;
    pb[warp] = dbeta;
  }
}

__global__ void __launch_bounds__(kBwdMaxThreads, 1) gdn_backward_kernel(BwdArgs args) {
  extern __shared__ float4 bwd_smem4[];
  float* smem = reinterpret_cast<float*>(bwd_smem4);
  const Dims& s = args.s;
  const int rg = args.rg, ng = args.ng;
  const int tid = threadIdx.x, nthr = blockDim.x, warp = tid >> 5, nw = nthr >> 5, lane = tid & 31;
  const BwdSmem L = bwd_smem_layout(rg);
  float4* st = reinterpret_cast<float4*>(smem + L.st);
  float* pq = smem + L.pq;
  float* pk = smem + L.pk;
  float* pg = smem + L.pg;
  float* pb = smem + L.pb;
  float* pv = smem + L.pv;
  float* stage_base = smem + L.stage;
  float4* l2 = args.l2 + static_cast<int64_t>(blockIdx.x) * (kSubs - 1) * 4 * nthr;
  const int64_t n_items = s.N * s.Hv * ng;

  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int64_t seq = item / (s.Hv * ng), h = (item / ng) % s.Hv;
    const int64_t row0 = (item % ng) * rg, grp = item % ng;
    const int64_t begin = args.cu[seq], len = args.cu[seq + 1] - begin;
    const int nrows = static_cast<int>(min64(rg, s.dv - row0));  // real rows of the group (rest: zero padding)
    // Per-item bases; token t adds t·(row stride).
    const float* k_item = args.k + (h / s.group()) * s.dk;
    const float* q_item = args.q + (h / s.group()) * s.dk;
    const float* v_item = args.v + h * s.dv + row0;
    const float* do_item = args.d_o + h * s.dv + row0;
    const int64_t kq_stride = s.Hk * s.dk, vo_stride = s.Hv * s.dv;

    __syncthreads();  // the previous item is done with shared memory
    for (int i = tid; i < 2 * L.stage_size; i += nthr) stage_base[i] = 0.0f;
    __syncthreads();  // zeros land before any cp.async into the same buffers

    // Thread's elements: rows row0 + 4·warp + i (i < 4), columns 4·lane + e (e < 4).
    const auto load_state = [&](float (&X)[4][4], const float* src) {  // natural [dv, dk] layout, zeros outside
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t a = row0 + 4 * warp + i, d = 4 * lane + e;
          X[i][e] = (src != nullptr && a < s.dv && d < s.dk) ? src[a * s.dk + d] : 0.0f;
        }
    };
    const auto store_state = [&](const float (&X)[4][4], float* dst) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t a = row0 + 4 * warp + i, d = 4 * lane + e;
          if (a < s.dv && d < s.dk) dst[a * s.dk + d] = X[i][e];
        }
    };
    const auto ckpt_ptr = [&](int64_t seg) {
      return args.ckpt + (checkpoint_slot(begin + seg * kSeg, seq) * s.Hv + h) * s.dv * s.dk;
    };

    float M[4][4], D[4][4];
    load_state(M, args.h0 != nullptr ? args.h0 + s.state(seq, h) : nullptr);
    load_state(D, args.d_hT != nullptr ? args.d_hT + s.state(seq, h) : nullptr);

    // Staging of one step's unit into buffer (step & 1); q and dO only for reverse steps.
    const auto stage = [&](int64_t step) {
      const BwdStep S = bwd_decode(step, len);
      float* b = stage_base + (step & 1) * L.stage_size;
      const int64_t t0 = begin + S.unit * kSub;
      const int n = static_cast<int>(min64(kSub, len - S.unit * kSub));
      const bool rev = S.kind == kReverse;
      for (int tk = warp; tk < n; tk += nw) {
        const int64_t t = t0 + tk;
        const float* kr = k_item + t * kq_stride;
        const float* qr = q_item + t * kq_stride;
        for (int d = lane; d < s.dk; d += 32) {
          cp_async4(b + st_k(tk) + d, kr + d);
          if (rev) cp_async4(b + st_q(tk) + d, qr + d);
        }
        const float* vr = v_item + t * vo_stride;
        const float* dor = do_item + t * vo_stride;
        for (int a = lane; a < nrows; a += 32) {
          cp_async4(b + st_v(tk, rg) + a, vr + a);
          if (rev) cp_async4(b + st_do(tk, rg) + a, dor + a);
        }
        if (lane == 0) {
          cp_async4(b + st_g(tk, rg), args.g + s.gb(t, h));
          cp_async4(b + st_b(tk, rg), args.beta + s.gb(t, h));
        }
      }
    };

    const int64_t n_steps = bwd_num_steps(len), n_seg = (len + kSeg - 1) / kSeg;
    if (n_steps > 0) stage(0);
    cp_async_commit();
    for (int64_t step = 0; step < n_steps; ++step) {
      cp_async_wait_all();
      __syncthreads();  // this step's unit visible to all; everyone is done with the previous step
      if (step + 1 < n_steps) stage(step + 1);
      cp_async_commit();
      const BwdStep S = bwd_decode(step, len);
      const float* b = stage_base + (step & 1) * L.stage_size;
      const int n = static_cast<int>(min64(kSub, len - S.unit * kSub));
      if (S.kind == kSweep1) {
        if (S.sub == 0) store_state(M, ckpt_ptr(S.seg));
        for (int tk = 0; tk < n; ++tk)
          bwd_forward_token<false>(M, b, tk, rg, warp, lane, nullptr, nullptr, nthr, tid);
      } else if (S.kind == kSweep2) {
        if (S.sub == 0 && S.seg == n_seg - 1) load_state(M, ckpt_ptr(S.seg));  // else prefetched (reverse, below)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          l2[(S.sub * 4 + i) * nthr + tid] = make_float4(M[i][0], M[i][1], M[i][2], M[i][3]);
        for (int tk = 0; tk < n; ++tk)  // n = kSub: never the segment's last sub-segment
          bwd_forward_token<false>(M, b, tk, rg, warp, lane, nullptr, nullptr, nthr, tid);
      } else {
        // M = this sub-segment's start: from sweep 2 (last sub-segment), the checkpoint (a one-sub-segment last
        // segment, right after sweep 1), or prefetched by the previous reverse step.
        if (S.nsub == 1) load_state(M, ckpt_ptr(S.seg));
#pragma unroll
        for (int j = 0; j < kSub; ++j)  // sweep 3: α·M and v − p per token
          if (j < n) bwd_forward_token<true>(M, b, j, rg, warp, lane, st + j * 4 * nthr, pv + j * rg, nthr, tid);
        __syncwarp();  // pv: written by lane 0, read by the whole warp
        // Prefetch the next step's start state (its latency hides behind the reverse walk): the previous sub-segment's
        // (sweep-2 scratch), or after sub-segment 0 the previous segment's checkpoint (its sweep 2 starts from it).
        if (S.sub > 0) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float4 x = l2[((S.sub - 1) * 4 + i) * nthr + tid];
            M[i][0] = x.x;
            M[i][1] = x.y;
            M[i][2] = x.z;
            M[i][3] = x.w;
          }
        } else if (S.seg > 0) {
          load_state(M, ckpt_ptr(S.seg - 1));
        }
        const int64_t t0 = begin + S.unit * kSub;
#pragma unroll
        for (int j = kSub - 1; j >= 0; --j)
          if (j < n)
            bwd_reverse_token(D, pv + j * rg, b, j, rg, warp, lane, st + j * 4 * nthr, nthr, tid, pq + j * nw * kMaxDim,
                              pk + j * nw * kMaxDim, pg + j * nw, pb + j * nw, args.dv + s.vo(t0 + j, h), row0,
                              s.dv, args.scale);
        __syncthreads();  // the warps' partials of the unit are complete
        const int per_tok = 2 * static_cast<int>(s.dk) + 2;
        for (int task = tid; task < n * per_tok; task += nthr) {  // sum warps in order → group partials
          const int j = task / per_tok, x = task - j * per_tok;
          const int64_t gidx = ((t0 + j) * s.Hv + h) * ng + grp;
          if (x < 2 * s.dk) {
            const bool is_q = x < s.dk;
            const int d = is_q ? x : x - static_cast<int>(s.dk);
            const float* src = (is_q ? pq : pk) + j * nw * kMaxDim + d;
            float acc = src[0];
            for (int w = 1; w < nw; ++w) acc += src[w * kMaxDim];
            if (is_q)
              args.dq_p[gidx * s.dk + d] = args.scale * acc;
            else
              args.dk_p[gidx * s.dk + d] = acc;
          } else {
            const bool is_g = x == 2 * s.dk;
            const float* src = (is_g ? pg : pb) + j * nw;
            float acc = src[0];
            for (int w = 1; w < nw; ++w) acc += src[w];
            (is_g ? args.dg_p : args.db_p)[gidx] = acc;
          }
        }
      }
    }
    if (args.dh0 != nullptr) store_state(D, args.dh0 + s.state(seq, h));
  }
}

// dq, dk [T, Hk, dk] = Σ over the G v-heads of the k-head (in order) of Σ over the groups (in order) of the partials;
// dg, dβ [T, Hv] = Σ over the groups.
__global__ void gdn_finish_kernel(float* dq, float* dk, float* dg, float* db, const float* dq_p, const float* dk_p,
                                  const float* dg_p, const float* db_p, int64_t T, int64_t Hk, int64_t Hv,
                                  int64_t dkdim, int64_t ng) {
  const int64_t G = Hv / Hk, n_qk = T * Hk * dkdim, n_gb = T * Hv, terms = G * ng;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_qk + n_gb;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < n_qk) {
      const int64_t d = i % dkdim, th = i / dkdim;  // th = t·Hk + hk; partial (t, hk·G + j, g) = (th·G)·ng + j·ng + g
      const int64_t base = th * terms * dkdim + d;
      float aq = dq_p[base], ak = dk_p[base];
      for (int64_t m = 1; m < terms; ++m) {
        aq += dq_p[base + m * dkdim];
        ak += dk_p[base + m * dkdim];
      }
      dq[i] = aq;
      dk[i] = ak;
    } else {
      const int64_t j = i - n_qk;
      float ag = dg_p[j * ng], ab = db_p[j * ng];
      for (int64_t m = 1; m < ng; ++m) {
        ag += dg_p[j * ng + m];
        ab += db_p[j * ng + m];
      }
      dg[j] = ag;
      db[j] = ab;
    }
  }
}

// ============================================================================ host side

Dims check_shape(const GdnShape& s, int64_t n_seqs) {
  HLM_CHECK(s.total_tokens >= 0 && s.key_dim > 0 && s.value_dim > 0 && n_seqs >= 0, "gated_delta_rule_cuda: bad shape");
  HLM_CHECK(s.k_heads > 0 && s.v_heads > 0 && s.v_heads % s.k_heads == 0, "gated_delta_rule_cuda: v heads ",
            s.v_heads, " not a multiple of k heads ", s.k_heads);
  HLM_CHECK(s.key_dim <= gated_delta_rule_cuda_max_dim() && s.value_dim <= gated_delta_rule_cuda_max_dim(),
            "gated_delta_rule_cuda: key_dim ", s.key_dim, " / value_dim ", s.value_dim, " above the CUDA limit ",
            gated_delta_rule_cuda_max_dim());
  return {s.total_tokens, s.k_heads, s.v_heads, s.key_dim, s.value_dim, n_seqs};
}

// Raises a kernel's dynamic shared memory limit when it needs more than the default 48 KiB.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Backward geometry: ng groups of rg rows (multiple of 4, ≤ 64), balanced over dv; 8·rg threads per block.
struct BwdGeometry {
  int ng, rg, threads;
  int64_t items, blocks;
};
BwdGeometry bwd_geometry(const Dims& d) {
  BwdGeometry g{};
  g.ng = static_cast<int>((d.dv + kBwdMaxRows - 1) / kBwdMaxRows);
  const int per = static_cast<int>((d.dv + g.ng - 1) / g.ng);
  g.rg = (per + 3) / 4 * 4;
  g.threads = 8 * g.rg;
  g.items = d.N * d.Hv * g.ng;
  g.blocks = std::min(g.items, kBwdMaxBlocks);
  return g;
}

struct Workspace {
  float *ckpt, *dq_p, *dk_p, *dg_p, *db_p;
  float4* l2;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it.
Workspace carve(void* base, const Dims& d) {
  const BwdGeometry g = bwd_geometry(d);
  const size_t f = sizeof(float);
  const size_t ckpt = cuda::align_up_256(static_cast<size_t>((d.T / kSeg + d.N + 1) * d.Hv * d.dv * d.dk) * f);
  const size_t l2 = cuda::align_up_256(static_cast<size_t>(g.blocks * (kSubs - 1) * 4 * g.threads) * sizeof(float4));
  const size_t pqk = cuda::align_up_256(static_cast<size_t>(d.T * d.Hv * g.ng * d.dk) * f);
  const size_t pgb = cuda::align_up_256(static_cast<size_t>(d.T * d.Hv * g.ng) * f);
  Workspace ws{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, ckpt + l2 + 2 * pqk + 2 * pgb};
  if (base == nullptr) return ws;
  auto* b = static_cast<char*>(base);
  ws.ckpt = reinterpret_cast<float*>(b);
  ws.l2 = reinterpret_cast<float4*>(b + ckpt);
  ws.dq_p = reinterpret_cast<float*>(b + ckpt + l2);
  ws.dk_p = reinterpret_cast<float*>(b + ckpt + l2 + pqk);
  ws.dg_p = reinterpret_cast<float*>(b + ckpt + l2 + 2 * pqk);
  ws.db_p = reinterpret_cast<float*>(b + ckpt + l2 + 2 * pqk + pgb);
  return ws;
}

}  // namespace

void gated_delta_rule_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& shape,
                                   float scale, cudaStream_t stream) {
  const Dims d = check_shape(shape, in.n_seqs);
  HLM_CHECK(in.cu_seqlens != nullptr && (out.o != nullptr || d.T == 0),
            "gated_delta_rule_forward_cuda: missing buffer");
  if (d.N == 0) return;
  HLM_CHECK(d.N * d.Hv <= 0x7fffffff, "gated_delta_rule_forward_cuda: too many (sequence, head) pairs");
  const size_t smem = 2 * kFwdBuf * sizeof(float);
  allow_smem(gdn_forward_kernel, smem);
  const int threads = static_cast<int>(32 * ((d.dv + kFwdRowsPerWarp - 1) / kFwdRowsPerWarp));
  const FwdArgs args{out.o, out.hT, in.q, in.k, in.v, in.g, in.beta, in.h0, in.cu_seqlens, d, scale};
  gdn_forward_kernel<<<static_cast<unsigned>(d.N * d.Hv), threads, smem, stream>>>(args);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t gated_delta_rule_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs) {
  return carve(nullptr, check_shape(shape, n_seqs)).bytes;
}

void gated_delta_rule_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                    const GdnInputs<float>& in, const GdnShape& shape, float scale, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  const Dims d = check_shape(shape, in.n_seqs);
  HLM_CHECK(in.cu_seqlens != nullptr, "gated_delta_rule_backward_cuda: cu_seqlens missing");
  HLM_CHECK(d.T == 0 || (grads.dq && grads.dk && grads.dv && grads.dg && grads.dbeta && dout.d_o),
            "gated_delta_rule_backward_cuda: missing gradient buffer");
  if (d.N == 0) return;
  const Workspace ws = carve(workspace, d);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= ws.bytes, "gated_delta_rule_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  const BwdGeometry g = bwd_geometry(d);
  const size_t smem = static_cast<size_t>(bwd_smem_layout(g.rg).total) * sizeof(float);
  allow_smem(gdn_backward_kernel, smem);
  const BwdArgs args{ws.dq_p, ws.dk_p, ws.dg_p,  ws.db_p,  grads.dv, grads.dh0, ws.ckpt,   ws.l2,   in.q,
                     in.k,    in.v,    in.g,     in.beta,  in.h0,    dout.d_o,  dout.d_hT, in.cu_seqlens, d,
                     g.ng,    g.rg,    scale};
  gdn_backward_kernel<<<static_cast<unsigned>(g.blocks), g.threads, smem, stream>>>(args);
  HLM_CUDA_CHECK_LAUNCH();
  if (d.T == 0) return;
  const int64_t n = d.T * d.Hk * d.dk + d.T * d.Hv;
  gdn_finish_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(
      grads.dq, grads.dk, grads.dg, grads.dbeta, ws.dq_p, ws.dk_p, ws.dg_p, ws.db_p, d.T, d.Hk, d.Hv, d.dk, g.ng);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
