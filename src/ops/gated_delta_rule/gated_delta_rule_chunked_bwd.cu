// Chunked gated delta rule on CUDA, backward: dU_loc, dstate (reverse sequential pass), dqk, wy and gva kernels and
// the backward launcher (contract and design: gated_delta_rule_chunked_cuda.h). The formulas are those of the CPU
// chunked backward (gated_delta_rule_chunked_backward.cpp, letters (a)-(h) there); per chunk, with D = dL/dM leaving it:
//   dU = scale·Aᵀ dO + diag(e^{γ_c − γ}) K Dᵀ                       (A = Q Kᵀ ⊙ Γ, lower incl. diagonal)
//   D_prev = e^{γ_c} D + scale·dOᵀ diag(e^γ) Q − dUᵀ W
//   dq = scale·diag(e^γ) dO M0 + Pm K,   dk = Pmᵀ Q + diag(e^{γ_c − γ}) U D + WY part   (Pm = scale·dO Uᵀ ⊙ Γ)
//   dW = −dU M0;  X = Rᵀ dW;  Y = Rᵀ dU;  dv = diag(β) Y;  E = −(X Wᵀ + Y Ũᵀ) strictly below the diagonal
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"
#include "ops/gated_delta_rule/gdn_chunked_tiles.cuh"
#include "ops/gated_delta_rule/gdn_mma_bwd.cuh"
#include "ops/gated_delta_rule/gdn_bwd_v2.cuh"

namespace hlm {
namespace gdn_chunked {

namespace {

// gdn_kernels_v2() (gdn_chunked_tiles.cuh: HLM_GDN_KERNELS unset or v2, the default) selects the v2 backward kernels
// (gdn_bwd_v2.cuh); HLM_GDN_KERNELS=v1 the v1 kernels. With v2,
// HLM_GDN_BWD_V2 (a comma list of du_local, dstate, dqk, wy; default all four) limits v2 to the kernels named, the
// others running v1 (A/B per kernel, bisecting). Both read once.
enum BwdKernel { kBwdDuLocal = 1, kBwdDstate = 2, kBwdDqk = 4, kBwdWy = 8 };
bool gdn_bwd_v2(BwdKernel k) {
  static const int mask = [] {
    if (!gdn_kernels_v2()) return 0;
    const char* list = std::getenv("HLM_GDN_BWD_V2");
    if (list == nullptr) return kBwdDuLocal | kBwdDstate | kBwdDqk | kBwdWy;
    const std::string l = std::string(",") + list + ",";
    int m = 0;
    for (const auto& [name, bit] : {std::pair<const char*, int>{"du_local", kBwdDuLocal}, {"dstate", kBwdDstate},
                                    {"dqk", kBwdDqk}, {"wy", kBwdWy}})
      if (l.find(std::string(",") + name + ",") != std::string::npos) m |= bit;
    return m;
  }();
  return (mask & k) != 0;
}
// v2 holds the full dU as bf16 (BackwardScratch::dUh) when dstate, dqk and wy are all v2, unless
// HLM_GDN_BWD_DU=f32 (read once; A/B of that change alone: the outputs are the same bits either way).
bool gdn_bwd_du_bf16() {
  static const bool f32 = [] {
    const char* e = std::getenv("HLM_GDN_BWD_DU");
    return e != nullptr && std::string(e) == "f32";
  }();
  return !f32 && gdn_bwd_v2(kBwdDstate) && gdn_bwd_v2(kBwdDqk) && gdn_bwd_v2(kBwdWy);
}

constexpr int kThreads = 256, kWarps = kThreads / 32;          // per-chunk kernels
constexpr int kPassThreads = 128, kPassWarps = kPassThreads / 32;  // the reverse state pass

BackwardScratch carve_backward(Carver& c, const Problem& p, const ForwardScratch& fs) {
  BackwardScratch s{};
  s.dstates = c.take<bf16>(static_cast<size_t>(fs.max_chunks * p.Hv * p.dv * p.dk));
  s.dU = c.take<float>(static_cast<size_t>(p.T * p.Hv * p.dv));
  s.dW = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dk));
  s.dkp = c.take<float>(static_cast<size_t>(p.T * p.Hv * p.dk));
  s.dgp = c.take<float>(static_cast<size_t>(p.T * p.Hv));
  s.dqv = c.take<float>(p.group() > 1 ? static_cast<size_t>(p.T * p.Hv * p.dk) : 0);
  s.dOh = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dv));
  return s;
}

// ---- dU_loc: per (chunk, v-head), dU = scale·(Q Kᵀ ⊙ Γ)ᵀ dO

constexpr size_t kLocSmem = 3 * smem_piece<bf16>(kC * kLdD) + smem_piece<float>(kC * kLdDf) +
                            smem_piece<bf16>(kC * kLdC) + smem_piece<float>(kC);

__global__ void __launch_bounds__(kThreads) du_local_kernel(Problem p, ForwardScratch fs, BackwardScratch bs,
                                                            Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Qb = sc.take<bf16>(kC * kLdD);
  bf16* Kb = sc.take<bf16>(kC * kLdD);
  bf16* dOb = sc.take<bf16>(kC * kLdD);
  float* F = sc.take<float>(kC * kLdDf);
  bf16* Ab = sc.take<bf16>(kC * kLdC);
  float* gam = sc.take<float>(kC);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < kC) gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  load_tile_bf16<kC, kD>(Qb, kLdD, p.q + (t0 * p.Hk + hk) * p.dk, p.Hk * p.dk, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Kb, kLdD, p.k + (t0 * p.Hk + hk) * p.dk, p.Hk * p.dk, len, dk, NoScale{});
  bf16* dOh = bs.dOh + (t0 * p.Hv + h) * p.dv;
  const int64_t vst = p.Hv * p.dv;
  for_tile<kC, kD>(gr.d_o + (t0 * p.Hv + h) * p.dv, vst, len, dv, [&](int i, int d, const float* v, int n) {
    for (int e = 0; e < n; ++e) {
      const bf16 x = __float2bfloat16_rn(v[e]);
      dOb[i * kLdD + d + e] = x;
      if (i < len && d + e < dv) dOh[i * vst + d + e] = x;
    }
  });
  __syncthreads();
  block_mma<kC, kC, kD, false, true, false, kWarps>(F, kLdCf, Qb, kLdD, Kb, kLdD);  // Q Kᵀ
  __syncthreads();
  decayed_causal_bf16(Ab, F, gam, len, p.scale);
  __syncthreads();
  block_mma<kC, kD, kC, true, false, false, kWarps>(F, kLdDf, Ab, kLdC, dOb, kLdD);  // scale·Aᵀ dO
  __syncthreads();
  for (int idx = tid; idx < len * dv; idx += kThreads) {
    const int i = idx / dv, a = idx % dv;
    bs.dU[((t0 + i) * p.Hv + h) * p.dv + a] = F[i * kLdDf + a];
  }
}

// ---- dstate: per (sequence, v-head, kBV state rows), reverse over the sequence's chunks

// kBufs = 2: the decayed keys, Qd, W and the dO tile of chunk ci−1 are copied (cp.async) into the other buffer while
// chunk ci is processed; kBufs = 1: one buffer, filled at the top of each chunk (less shared memory, so more blocks
// per SM overlap one another's copies instead).
template <int kBufs>
constexpr size_t dstate_smem() {
  return 3 * kBufs * smem_piece<bf16>(kC * kLdD) + smem_piece<float>(kBV * kLdDf) + smem_piece<bf16>(kBV * kLdD) +
         smem_piece<float>(kC * kLdVf) + (kBufs + 1) * smem_piece<bf16>(kC * kLdV) + smem_piece<float>(kC);
}

static_assert(blocks_fit_per_sm(dstate_smem<1>(), 2), "reverse state pass, one buffer: two blocks per SM");

template <int kBufs>
__global__ void __launch_bounds__(kPassThreads) dstate_kernel(Problem p, ForwardScratch fs, BackwardScratch bs,
                                                              Grads gr) {
  static_assert(kBufs == 1 || kBufs == 2, "one or two chunk buffers");
  const int64_t seq = blockIdx.x / p.Hv;
  const int h = static_cast<int>(blockIdx.x % p.Hv);
  const int a0 = static_cast<int>(blockIdx.y) * kBV, rows = static_cast<int>(min(int64_t{kBV}, p.dv - a0));
  const int dk = static_cast<int>(p.dk);
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Kb2 = sc.take<bf16>(kBufs * kC * kLdD);  // e^{γ_c − γ_i} k_i (Kd)
  bf16* Qb2 = sc.take<bf16>(kBufs * kC * kLdD);  // scale·e^{γ_i} q_i (Qd)
  bf16* Wb2 = sc.take<bf16>(kBufs * kC * kLdD);
  float* Df = sc.take<float>(kBV * kLdDf);
  bf16* Db = sc.take<bf16>(kBV * kLdD);
  float* Pf = sc.take<float>(kC * kLdVf);  // K̃ Dᵀ
  bf16* dOb2 = sc.take<bf16>(kBufs * kC * kLdV);
  bf16* nUb = sc.take<bf16>(kC * kLdV);  // −dU
  float* gam = sc.take<float>(kC);
  const auto Wb_ = [&](int b) { return Wb2 + b * kC * kLdD; };    // buffer b
  const auto Kb_ = [&](int b) { return Kb2 + b * kC * kLdD; };    // buffer b
  const auto Qb_ = [&](int b) { return Qb2 + b * kC * kLdD; };    // buffer b
  const auto dOb_ = [&](int b) { return dOb2 + b * kC * kLdV; };  // buffer b
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t state_off = ((seq * p.Hv + h) * p.dv + a0) * p.dk;
  const auto issue = [&](int64_t ci, int buf) {
    const ChunkInfo info = fs.table[ci];
    const int64_t off = (info.t0 * p.Hv + h) * p.dk;
    load_tile_async<kC, kD>(Kb_(buf), kLdD, fs.Kd + off, p.Hv * p.dk, info.len, dk);
    load_tile_async<kC, kD>(Qb_(buf), kLdD, fs.Qd + off, p.Hv * p.dk, info.len, dk);
    load_tile_async<kC, kD>(Wb_(buf), kLdD, fs.W + off, p.Hv * p.dk, info.len, dk);
    load_tile_async<kC, kBV>(dOb_(buf), kLdV, bs.dOh + (info.t0 * p.Hv + h) * p.dv + a0, p.Hv * p.dv, info.len,
                             rows);
  };

  StateTile D;
  D.init(gr.d_hT ? gr.d_hT + state_off : nullptr, p.dk, rows, dk, Df);
  const int64_t first = fs.seq_first[seq], last = fs.seq_first[seq + 1];
  if (kBufs == 2 && first < last) issue(last - 1, 0);
  cp_async_commit();
  for (int64_t ci = last - 1; ci >= first; --ci) {
    const int buf = kBufs == 2 ? static_cast<int>((last - 1 - ci) & 1) : 0;
    const ChunkInfo info = fs.table[ci];
    const int len = info.len;
    const int64_t t0 = info.t0;
    D.store(Df);
    if (tid < kC) gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
    __syncthreads();  // every warp is done with chunk ci+1 (its buffers are free again)
    if (kBufs == 1)
      issue(ci, 0);
    else if (ci > first)
      issue(ci - 1, buf ^ 1);
    cp_async_commit();
    state_to_bf16(Db, Df, bs.dstates + ((ci * p.Hv + h) * p.dv + a0) * p.dk, p.dk, rows, dk);  // D leaving ci
    const float gc = gam[len - 1];
    cp_async_wait<kBufs - 1>();  // chunk ci's copies have landed
    __syncthreads();
    block_mma<kC, kBV, kD, false, true, false, kPassWarps>(Pf, kLdVf, Kb_(buf), kLdD, Db, kLdD);  // K̃ Dᵀ
    __syncthreads();
    // dU = dU_loc + K̃ Dᵀ in place; nUb = bf16(−dU).
    update_tile<kPassThreads>(bs.dU + (t0 * p.Hv + h) * p.dv + a0, p.Hv * p.dv, Pf, 1.0f, nUb, -1.0f, len, rows);
    const float decay = expf(gc);
    __syncthreads();
    D.scale(decay);                            // D ← e^{γ_c} D
    D.add_tn(dOb_(buf), kLdV, Qb_(buf), kLdD);  //   + scale·dOᵀ diag(e^γ) Q
    D.add_tn(nUb, kLdV, Wb_(buf), kLdD);        //   − dUᵀ W
  }
  cp_async_wait<0>();
  if (gr.dh0) D.write(gr.dh0 + state_off, p.dk, rows, dk, Df);
}

// ---- dqk: per (chunk, v-head), dq, the output/state parts of dk and dγ, dW

// Shared memory: five regions, each reused by tiles whose lifetimes do not overlap (two blocks fit on an SM). Phases:
//   P1 QK = Q Kᵀ, dO Uᵀ   P2 Pm   P3 rs, cs   P4 dq = scale·diag(e^γ) dO M0 + Pm K   P5 dW = −dU M0
//   P6 ⟨M0, D⟩, Sb ← D   P7 dk = diag(e^{γ_c − γ}) U D + Pmᵀ Q, dγ
// (dW and dq are independent products, each computed exactly as before; only their order changed.)
//   A  Kb (loaded first, last read by P4's Pm K)  →  Ud (written after that product's barrier; read in P7)
//   B  dOb (first; last read by P4's dO M0)  →  dUb (written after that product's barrier; read in P5)
//      →  Qb again (reloaded from q after P5's barrier; read in P7)
//   C  Qb | Ub (first; last read in P1)  →  Sb: M0 (cp.async issued after P1's barrier; read in P4, P5, P6), then D
//      (written in P6, in place, after P5's barrier; read in P7)
//   D  QK | Pf = dO Uᵀ, then Pm fp32 (P1 .. P3)  →  F (first written in P4, after P3's barrier); past F's 64 × 132
//      floats (the tail of Pf): dgo (P4 ..), red (P6), Bs (P7), all first written after P3's barrier
//   P  Pb (Pm bf16, P2 .. P7); then gam, rs, cs.
constexpr size_t kTileB = smem_piece<bf16>(kC * kLdD);   // 64 × 136 bf16: 17,408 B
constexpr size_t kTileCf = smem_piece<float>(kC * kLdCf);  // 64 × 68 fp32: 17,408 B
constexpr size_t kTileDf = smem_piece<float>(kC * kLdDf);  // 64 × 132 fp32: 33,792 B
constexpr size_t kVec = smem_piece<float>(kC);
constexpr size_t kDqkA = 0, kDqkB = kDqkA + kTileB, kDqkC = kDqkB + kTileB;
constexpr size_t kDqkD = kDqkC + 2 * kTileB, kDqkP = kDqkD + 2 * kTileCf;
constexpr size_t kDqkV = kDqkP + smem_piece<bf16>(kC * kLdC);
constexpr size_t kDqkSmem = kDqkV + 3 * kVec;  // 114,432 B (was 201,216)
static_assert(smem_piece<bf16>(kD * kLdD) <= 2 * kTileB, "dqk: M0 / D fit in Qb | Ub");
static_assert(kTileDf + 3 * kVec <= 2 * kTileCf, "dqk: F, dgo, Bs, red fit in QK | Pf");
static_assert(blocks_fit_per_sm(kDqkSmem, 2), "dqk: two blocks per SM");

__global__ void __launch_bounds__(kThreads) dqk_kernel(Problem p, ForwardScratch fs, BackwardScratch bs, Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  bf16* Kb = reinterpret_cast<bf16*>(smem + kDqkA);
  bf16* Ud = Kb;  // diag(e^{γ_c − γ}) U, after Kb
  bf16* dOb = reinterpret_cast<bf16*>(smem + kDqkB);
  bf16* dUb = dOb;  // after dOb
  bf16* Qb2 = dOb;  // Q reloaded, after dUb
  bf16* Qb = reinterpret_cast<bf16*>(smem + kDqkC);
  bf16* Ub = reinterpret_cast<bf16*>(smem + kDqkC + kTileB);
  bf16* Sb = reinterpret_cast<bf16*>(smem + kDqkC);  // M0 [dv][dk], then D; after Qb, Ub
  float* QK = reinterpret_cast<float*>(smem + kDqkD);
  float* Pf = reinterpret_cast<float*>(smem + kDqkD + kTileCf);  // dO Uᵀ, then Pm
  float* F = reinterpret_cast<float*>(smem + kDqkD);               // after QK, Pf
  float* dgo = reinterpret_cast<float*>(smem + kDqkD + kTileDf);   // q_i · dq_i (output term)
  float* Bs = dgo + kC;                                            // state-path term B_i
  float* red = Bs + kC;
  bf16* Pb = reinterpret_cast<bf16*>(smem + kDqkP);  // Pm
  float* gam = reinterpret_cast<float*>(smem + kDqkV);
  float* rs = gam + kC;  // Σ_j Pm_ij QK_ij
  float* cs = rs + kC;   // Σ_i Pm_ij QK_ij
  const int tid = static_cast<int>(threadIdx.x);
  const float* q0 = p.q + (t0 * p.Hk + hk) * p.dk;
  const float* k0 = p.k + (t0 * p.Hk + hk) * p.dk;
  const int64_t qst = p.Hk * p.dk, vst = p.Hv * p.dv, v_off = (t0 * p.Hv + h) * p.dv;

  if (tid < kC) gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  load_tile_bf16<kC, kD>(Qb, kLdD, q0, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Kb, kLdD, k0, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(dOb, kLdD, bs.dOh + v_off, vst, len, dv, NoScale{});
  load_tile_bf16<kC, kD>(Ub, kLdD, fs.U + v_off, vst, len, dv, NoScale{});
  __syncthreads();  // gam, tiles
  const float gc = gam[len - 1];
  block_mma<kC, kC, kD, false, true, false, kWarps>(QK, kLdCf, Qb, kLdD, Kb, kLdD);  // Q Kᵀ
  block_mma<kC, kC, kD, false, true, false, kWarps>(Pf, kLdCf, dOb, kLdD, Ub, kLdD);  // dO Uᵀ
  __syncthreads();  // Qb, Ub read: region C takes M0 (bf16 copied as is)
  const bf16* M0 = fs.states + (ci * p.Hv + h) * p.dv * p.dk;
  load_tile_async<kD, kD>(Sb, kLdD, M0, p.dk, dv, dk);
  cp_async_commit();
  // Pm = scale·(dO Uᵀ) ⊙ Γ (fp32 in Pf, bf16 in Pb); its Γ exponents feed dγ through Pm ⊙ QK.
  for (int idx = tid; idx < kC * kC; idx += kThreads) {
    const int i = idx / kC, j = idx % kC;
    const float pm = (j <= i && i < len) ? p.scale * Pf[i * kLdCf + j] * expf(gam[i] - gam[j]) : 0.0f;
    Pf[i * kLdCf + j] = pm;
    Pb[i * kLdC + j] = __float2bfloat16_rn(pm);
  }
  __syncthreads();
  if (tid < kC) {
    float acc = 0.0f;
    for (int j = 0; j < kC; ++j) acc += Pf[tid * kLdCf + j] * QK[tid * kLdCf + j];
    rs[tid] = acc;
  } else if (tid < 2 * kC) {
    const int j = tid - kC;
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) acc += Pf[i * kLdCf + j] * QK[i * kLdCf + j];
    cs[j] = acc;
  }
  cp_async_wait<0>();
  __syncthreads();  // QK, Pf read: region D takes F; M0 landed
  // dq = scale·diag(e^γ) dO M0 + Pm K; dγ_i gets q_i · (first term).
  block_mma<kC, kD, kD, false, false, false, kWarps>(F, kLdDf, dOb, kLdD, Sb, kLdD);
  __syncthreads();  // dOb read: region B takes dU
  load_tile_bf16<kC, kD>(dUb, kLdD, bs.dU + v_off, vst, len, dv, NoScale{});
  for (int idx = tid; idx < kC * kD; idx += kThreads) F[(idx / kD) * kLdDf + idx % kD] *= p.scale * expf(gam[idx / kD]);
  __syncthreads();
  row_dots64<kWarps>(dgo, F, kLdDf, [&](int i) { return q0 + i * qst; }, len, dk);
  __syncthreads();
  block_mma<kC, kD, kC, false, false, true, kWarps>(F, kLdDf, Pb, kLdC, Kb, kLdD);
  __syncthreads();  // Kb read: region A takes diag(e^{γ_c − γ}) U
  for_tile<kC, kD>(fs.U + v_off, vst, len, dv, [&](int i, int d, const float* v, int n) {
    const float dec = i < len ? expf(gc - gam[i]) : 0.0f;
    for (int e = 0; e < n; ++e) Ud[i * kLdD + d + e] = __float2bfloat16_rn(dec * v[e]);
  });
  float* dq_dst = p.group() > 1 ? bs.dqv + (t0 * p.Hv + h) * p.dk : gr.dq + (t0 * p.Hk + hk) * p.dk;
  const int64_t dq_st = p.group() > 1 ? p.Hv * p.dk : p.Hk * p.dk;
  for (int idx = tid; idx < len * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    dq_dst[i * dq_st + d] = F[i * kLdDf + d];
  }
  __syncthreads();  // F read; dUb, Ud written
  // dW = −dU M0.
  block_mma<kC, kD, kD, false, false, false, kWarps>(F, kLdDf, dUb, kLdD, Sb, kLdD);
  __syncthreads();  // dUb and M0 read: region B takes Q again, Sb turns into D
  load_tile_bf16<kC, kD>(Qb2, kLdD, q0, qst, len, dk, NoScale{});
  for (int idx = tid; idx < len * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    bs.dW[((t0 + i) * p.Hv + h) * p.dk + d] = __float2bfloat16_rn(-F[i * kLdDf + d]);
  }
  // ⟨M0, D⟩ while Sb turns from M0 into D.
  const bf16* Dg = bs.dstates + (ci * p.Hv + h) * p.dv * p.dk;
  float md = 0.0f;
  for_tile<kD, kD>(Dg, p.dk, dv, dk, [&](int r, int d, const bf16* v, int n) {
    for (int e = 0; e < n; ++e) {
      md += static_cast<float>(Sb[r * kLdD + d + e]) * static_cast<float>(v[e]);
      Sb[r * kLdD + d + e] = v[e];
    }
  });
  md = cuda::block_sum<kThreads>(md, red);  // barriers inside: F read (dW), Qb2 and D written
  // dk = diag(e^{γ_c − γ}) U D + Pmᵀ Q; the state term gives B_i = k_i · (first term).
  block_mma<kC, kD, kD, false, false, false, kWarps>(F, kLdDf, Ud, kLdD, Sb, kLdD);
  __syncthreads();
  row_dots64<kWarps>(Bs, F, kLdDf, [&](int i) { return k0 + i * qst; }, len, dk);
  __syncthreads();
  block_mma<kC, kD, kC, true, false, true, kWarps>(F, kLdDf, Pb, kLdC, Qb2, kLdD);
  __syncthreads();
  for (int idx = tid; idx < len * dk; idx += kThreads) {
    const int i = idx / dk, d = idx % dk;
    bs.dkp[((t0 + i) * p.Hv + h) * p.dk + d] = F[i * kLdDf + d];
  }
  if (tid < len) {
    float dgi = rs[tid] - cs[tid] + dgo[tid] - Bs[tid];
    if (tid == len - 1) {
      float sumB = 0.0f;
      for (int m = 0; m < len; ++m) sumB += Bs[m];
      dgi += sumB + expf(gc) * md;
    }
    bs.dgp[(t0 + tid) * p.Hv + h] = dgi;
  }
}

// ---- wy: per (chunk, v-head), the WY backward, dv, dβ, dk, dg

// Shared memory: regions reused by tiles whose lifetimes do not overlap (two blocks fit on an SM). Phases:
//   P1 Y = Rᵀ dU (dv, y·v)   P2 X = Rᵀ dW (x·k, Xb, F ← diag(βe^γ) X)   P3 E' = X Wᵀ   P4 E' += Y Ũᵀ   P5 K Kᵀ
//   P6 EG (Ef, Rb)   P7 rowE, colE; F += diag(β) EG K + (diag(β) EG)ᵀ K   P8 dk, dβ, dγ, dg
// (K Kᵀ is an independent product computed exactly as before, now after P4; E' accumulates in the same order.)
//   R   Rb: R (loaded first; last read in P2)  →  diag(β) EG (written in P6)
//   S1  dUb (first; read in P1)  →  Y in place (after P1's barrier; last read in P4)  →  KK (P5, after P4's barrier)
//   S2  dWb (first; read in P2)  →  Xb in place (after P2's product barrier; last read in P3)  →  Kb (loaded from k
//       after P3's barrier; read in P5 and P7)
//   S3  Wb (first; last read in P3)  →  Ũ (cp.async after P3's barrier; read in P4)  →  rowE, colE, dgl, dgs (P7, P8;
//       written after P4's barrier)
//   S4  Ef (P3 .. P7)
//   F   Y (P1), then X (P2 ..) accumulating dk;  then gam, beta, yv, xk.
constexpr size_t kWyR = 0, kWyS1 = kWyR + smem_piece<bf16>(kC * kLdC), kWyS2 = kWyS1 + kTileB;
constexpr size_t kWyS3 = kWyS2 + kTileB, kWyS4 = kWyS3 + kTileB, kWyF = kWyS4 + kTileCf;
constexpr size_t kWyV = kWyF + kTileDf;
constexpr size_t kWySmem = kWyV + 4 * kVec;  // 113,664 B (was 184,320)
static_assert(kTileCf <= kTileB && 4 * kVec <= kTileB, "wy: KK fits in S1, the row sums in S3");
static_assert(blocks_fit_per_sm(kWySmem, 2), "wy: two blocks per SM");

__global__ void __launch_bounds__(kThreads) wy_kernel(Problem p, ForwardScratch fs, BackwardScratch bs, Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  bf16* Rb = reinterpret_cast<bf16*>(smem + kWyR);    // R, then diag(β) (E ⊙ Γ)
  bf16* dUb = reinterpret_cast<bf16*>(smem + kWyS1);  // dU, then Y
  float* KK = reinterpret_cast<float*>(smem + kWyS1);  // after Y
  bf16* dWb = reinterpret_cast<bf16*>(smem + kWyS2);
  bf16* Xb = dWb;                                       // after dW
  bf16* Kb = dWb;                                       // after X
  bf16* Wb = reinterpret_cast<bf16*>(smem + kWyS3);
  bf16* Utb = Wb;                                       // Ũ, after W
  float* rowE = reinterpret_cast<float*>(smem + kWyS3);  // Σ_j EG_ij KK_ij; after Ũ
  float* colE = rowE + kC;                               // Σ_i β_i EG_ij KK_ij
  float* dgl = colE + kC;                                // dγ of the chunk
  float* dgs = dgl + kC;                                 // its suffix sums
  float* Ef = reinterpret_cast<float*>(smem + kWyS4);  // X Wᵀ + Y Ũᵀ, then (E ⊙ Γ) ⊙ KK
  float* F = reinterpret_cast<float*>(smem + kWyF);
  float* gam = reinterpret_cast<float*>(smem + kWyV);
  float* beta = gam + kC;
  float* yv = beta + kC;
  float* xk = yv + kC;
  const int tid = static_cast<int>(threadIdx.x);
  const float* k0 = p.k + (t0 * p.Hk + hk) * p.dk;
  const float* v0 = p.v + (t0 * p.Hv + h) * p.dv;
  const int64_t kst = p.Hk * p.dk, vst = p.Hv * p.dv, v_off = (t0 * p.Hv + h) * p.dv,
                w_off = (t0 * p.Hv + h) * p.dk, wst = p.Hv * p.dk;

  if (tid < kC) {
    gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
    beta[tid] = tid < len ? p.beta[(t0 + tid) * p.Hv + h] : 0.0f;
  }
  // R as prep stored it for this chunk; W, dU, dW (Ũ and K come once W and X are read).
  load_tile_bf16<kC, kC>(Rb, kLdC, fs.R + (ci * p.Hv + h) * kC * kC, kC, kC, kC,
                         NoScale{});
  load_tile_bf16<kC, kD>(Wb, kLdD, fs.W + w_off, wst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(dUb, kLdD, bs.dU + v_off, vst, len, dv, NoScale{});
  load_tile_bf16<kC, kD>(dWb, kLdD, bs.dW + w_off, wst, len, dk, NoScale{});
  __syncthreads();
  // Y = Rᵀ dU: dv = diag(β) Y, y_i · v_i; Y kept as bf16 in dUb.
  block_mma<kC, kD, kC, true, false, false, kWarps>(F, kLdDf, Rb, kLdC, dUb, kLdD);
  __syncthreads();
  for (int idx = tid; idx < kC * kD; idx += kThreads) {
    const int i = idx / kD, a = idx % kD;
    const float y = F[i * kLdDf + a];
    if (i < len && a < dv) gr.dv[v_off + i * vst + a] = beta[i] * y;
    dUb[i * kLdD + a] = __float2bfloat16_rn(y);
  }
  row_dots64<kWarps>(yv, F, kLdDf, [&](int i) { return v0 + i * vst; }, len, dv);
  __syncthreads();
  // X = Rᵀ dW: x_i · k_i, X kept as bf16 in Xb (in place of dW), F ← diag(β e^γ) X (the first WY term of dk).
  block_mma<kC, kD, kC, true, false, false, kWarps>(F, kLdDf, Rb, kLdC, dWb, kLdD);
  __syncthreads();
  row_dots64<kWarps>(xk, F, kLdDf, [&](int i) { return k0 + i * kst; }, len, dk);
  for (int idx = tid; idx < kC * kD; idx += kThreads) Xb[(idx / kD) * kLdD + idx % kD] = __float2bfloat16_rn(F[(idx / kD) * kLdDf + idx % kD]);
  __syncthreads();
  for (int idx = tid; idx < kC * kD; idx += kThreads) {
    const int i = idx / kD;
    F[i * kLdDf + idx % kD] *= i < len ? beta[i] * expf(gam[i]) : 0.0f;
  }
  // E' = X Wᵀ + Y Ũᵀ (E = −E').
  block_mma<kC, kC, kD, false, true, false, kWarps>(Ef, kLdCf, Xb, kLdD, Wb, kLdD);
  __syncthreads();  // Xb, Wb read: Ũ (bf16 copied as is) takes Wb's place, K (for K Kᵀ and the dk products) Xb's
  load_tile_async<kC, kD>(Utb, kLdD, fs.Ut + v_off, vst, len, dv);
  cp_async_commit();
  load_tile_bf16<kC, kD>(Kb, kLdD, k0, kst, len, dk, NoScale{});
  cp_async_wait<0>();
  __syncthreads();
  block_mma<kC, kC, kD, false, true, true, kWarps>(Ef, kLdCf, dUb, kLdD, Utb, kLdD);
  __syncthreads();  // Y, Ũ read: K Kᵀ takes Y's place
  block_mma<kC, kC, kD, false, true, false, kWarps>(KK, kLdCf, Kb, kLdD, Kb, kLdD);  // K Kᵀ
  __syncthreads();
  // EG = E ⊙ Γ strictly below the diagonal; Rb ← diag(β) EG; through L_ij = β_i Γ_ij KK_ij: dβ, dγ.
  for (int idx = tid; idx < kC * kC; idx += kThreads) {
    const int i = idx / kC, j = idx % kC;
    const float eg = (j < i && i < len) ? -Ef[i * kLdCf + j] * expf(gam[i] - gam[j]) : 0.0f;
    Ef[i * kLdCf + j] = eg * KK[i * kLdCf + j];  // EG ⊙ KK
    Rb[i * kLdC + j] = __float2bfloat16_rn(beta[i] * eg);
  }
  __syncthreads();
  if (tid < kC) {
    float acc = 0.0f;
    for (int j = 0; j < kC; ++j) acc += Ef[tid * kLdCf + j];
    rowE[tid] = acc;
  } else if (tid < 2 * kC) {
    const int j = tid - kC;
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) acc += beta[i] * Ef[i * kLdCf + j];
    colE[j] = acc;
  }
  // dk += diag(β) EG K + (diag(β) EG)ᵀ K (each warp accumulates its own tiles of F).
  block_mma<kC, kD, kC, false, false, true, kWarps>(F, kLdDf, Rb, kLdC, Kb, kLdD);
  block_mma<kC, kD, kC, true, false, true, kWarps>(F, kLdDf, Rb, kLdC, Kb, kLdD);
  __syncthreads();
  // dk out: + the output/state part; per k-head directly when Hv = Hk, else per v-head for the GVA sum.
  const bool direct = p.group() == 1;
  float* dk_dst = direct ? gr.dk + t0 * kst + hk * p.dk : bs.dkp + w_off;
  const int64_t dk_st = direct ? kst : wst;
  for_tile<kC, kD>(bs.dkp + w_off, wst, len, dk, [&](int i, int d, const float* v, int n) {
    for (int e = 0; e < n; ++e)
      if (i < len && d + e < dk) dk_dst[i * dk_st + d + e] = v[e] + F[i * kLdDf + d + e];
  });
  if (tid < len) {
    const float ein = expf(gam[tid]);
    gr.dbeta[(t0 + tid) * p.Hv + h] = yv[tid] + ein * xk[tid] + rowE[tid];
    dgl[tid] = bs.dgp[(t0 + tid) * p.Hv + h] + beta[tid] * ein * xk[tid] + beta[tid] * rowE[tid] - colE[tid];
  }
  __syncthreads();
  chunk_suffix_sum(dgs, dgl, len);  // dg_t = Σ_{i ≥ t} dγ_i (warp 0)
  __syncthreads();                  // warp 1 reads rows 32..63
  if (tid < len) gr.dg[(t0 + tid) * p.Hv + h] = dgs[tid];
}

// ---- gva: dq, dk [T, Hk, dk] = Σ over the group's v-heads in order

__global__ void gva_kernel(float* out, const float* per_v, int64_t T, int64_t Hk, int64_t G, int64_t dk) {
  const int64_t n = T * Hk * dk;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % dk, hk = (i / dk) % Hk, t = i / (dk * Hk);
    const float* src = per_v + ((t * Hk + hk) * G) * dk + d;  // v-heads hk·G .. hk·G + G − 1
    float acc = 0.0f;
    for (int64_t g = 0; g < G; ++g) acc += src[g * dk];
    out[i] = acc;
  }
}

}  // namespace

}  // namespace gdn_chunked

size_t gated_delta_rule_chunked_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs) {
  using namespace gdn_chunked;
  Carver c;
  const Problem p = sizing_problem(shape, n_seqs);
  const ForwardScratch fs = carve_forward(c, p, true);
  carve_backward(c, p, fs);
  return c.used;
}

size_t gated_delta_rule_chunked_kept_bytes(const GdnShape& shape, int64_t n_seqs) {
  using namespace gdn_chunked;
  Carver c;
  carve_forward(c, sizing_problem(shape, n_seqs), true);
  return c.used;
}

size_t gated_delta_rule_chunked_backward_scratch_bytes(const GdnShape& shape, int64_t n_seqs) {
  using namespace gdn_chunked;
  const Problem p = sizing_problem(shape, n_seqs);
  Carver kept, c;
  carve_backward(c, p, carve_forward(kept, p, true));
  return c.used;
}

namespace gdn_chunked {
namespace {

// The backward's launches on carved scratch: fs as prep and the state pass left it (forward_kept) or to be filled
// by them here, bs the backward's own.
void run_backward(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout, const Problem& p,
                  const ForwardScratch& fs, BackwardScratch bs, bool forward_kept, cudaStream_t stream) {
  HLM_CHECK(p.T == 0 || (grads.dq && grads.dk && grads.dv && grads.dg && grads.dbeta && dout.d_o),
            "chunked gated delta rule: missing gradient buffer");
  // v2's reverse pass leaves the full dU as bf16 (same bytes, BackwardScratch::dUh) when both its readers are v2.
  if (gdn_bwd_du_bf16()) bs.dUh = reinterpret_cast<bf16*>(bs.dU);
  const Grads gr{grads.dq, grads.dk, grads.dv, grads.dg, grads.dbeta, grads.dh0, dout.d_o, dout.d_hT};
  if (!forward_kept) launch_forward_passes(p, fs, nullptr, stream);  // else prep and state left it there
  const dim3 chunks(static_cast<unsigned>(fs.max_chunks), static_cast<unsigned>(p.Hv));
  if (gdn_bwd_v2(kBwdDuLocal)) {
    void (*loc)(Problem, ForwardScratch, BackwardScratch, Grads) = v2::du_local_kernel<false>;
    if (p.dk == kD && p.dv == kD) loc = v2::du_local_kernel<true>;
    set_smem(loc, v2::kLocSmem);
    loc<<<chunks, v2::kLocThreads, v2::kLocSmem, stream>>>(p, fs, bs, gr);
  } else {
    set_smem(du_local_kernel, kLocSmem);
    du_local_kernel<<<chunks, kThreads, kLocSmem, stream>>>(p, fs, bs, gr);
  }
  HLM_CUDA_CHECK_LAUNCH();
  const dim3 pass_grid(static_cast<unsigned>(p.N * p.Hv), static_cast<unsigned>((p.dv + kBV - 1) / kBV));
  const bool one_buffer = state_pass_buffers(static_cast<int64_t>(pass_grid.x) * pass_grid.y) == 1;
  using Kernel = void (*)(Problem, ForwardScratch, BackwardScratch, Grads);
  // v2 instantiation [kFull][kDuBf16] for the problem's dims and bs.dUh.
  const auto pick = [&](Kernel part, Kernel full_part, Kernel bf16_part, Kernel full_bf16_part) {
    const bool full = p.dk == kD && p.dv == kD;
    return bs.dUh != nullptr ? (full ? full_bf16_part : bf16_part) : (full ? full_part : part);
  };
  if (gdn_bwd_v2(kBwdDstate)) {
    const Kernel ds = one_buffer ? pick(v2::dstate_kernel<1, false, false>, v2::dstate_kernel<1, true, false>,
                                        v2::dstate_kernel<1, false, true>, v2::dstate_kernel<1, true, true>)
                                 : pick(v2::dstate_kernel<2, false, false>, v2::dstate_kernel<2, true, false>,
                                        v2::dstate_kernel<2, false, true>, v2::dstate_kernel<2, true, true>);
    const size_t bytes = one_buffer ? v2::dstate_smem<1>() : v2::dstate_smem<2>();
    set_smem(ds, bytes);
    const int threads = one_buffer ? v2::kDstateThreads<1> : v2::kDstateThreads<2>;
    ds<<<static_cast<unsigned>(v2::dstate_blocks(p)), threads, bytes, stream>>>(p, fs, bs, gr);
  } else if (one_buffer) {
    set_smem(dstate_kernel<1>, dstate_smem<1>());
    dstate_kernel<1><<<pass_grid, kPassThreads, dstate_smem<1>(), stream>>>(p, fs, bs, gr);
  } else {
    set_smem(dstate_kernel<2>, dstate_smem<2>());
    dstate_kernel<2><<<pass_grid, kPassThreads, dstate_smem<2>(), stream>>>(p, fs, bs, gr);
  }
  HLM_CUDA_CHECK_LAUNCH();
  if (gdn_bwd_v2(kBwdDqk)) {
    const Kernel dqk = pick(v2::dqk_kernel<false, false>, v2::dqk_kernel<true, false>, v2::dqk_kernel<false, true>,
                            v2::dqk_kernel<true, true>);
    set_smem(dqk, v2::kDqkSmem);
    dqk<<<chunks, v2::kThreads, v2::kDqkSmem, stream>>>(p, fs, bs, gr);
  } else {
    set_smem(dqk_kernel, kDqkSmem);
    dqk_kernel<<<chunks, kThreads, kDqkSmem, stream>>>(p, fs, bs, gr);
  }
  HLM_CUDA_CHECK_LAUNCH();
  if (gdn_bwd_v2(kBwdWy)) {
    const Kernel wy = pick(v2::wy_kernel<false, false>, v2::wy_kernel<true, false>, v2::wy_kernel<false, true>,
                           v2::wy_kernel<true, true>);
    set_smem(wy, v2::kWySmem);
    wy<<<chunks, v2::kThreads, v2::kWySmem, stream>>>(p, fs, bs, gr);
  } else {
    set_smem(wy_kernel, kWySmem);
    wy_kernel<<<chunks, kThreads, kWySmem, stream>>>(p, fs, bs, gr);
  }
  HLM_CUDA_CHECK_LAUNCH();
  if (p.group() > 1 && p.T > 0) {
    const int64_t n = p.T * p.Hk * p.dk;
    if (!gdn_bwd_v2(kBwdWy) || p.dk != kD || p.dv != kD) {  // else wy_v2<kFull> summed dq (same bits)
      gva_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(grads.dq, bs.dqv, p.T, p.Hk,
                                                                               p.group(), p.dk);
      HLM_CUDA_CHECK_LAUNCH();
    }
    gva_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(grads.dk, bs.dkp, p.T, p.Hk,
                                                                             p.group(), p.dk);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace
}  // namespace gdn_chunked

void gated_delta_rule_chunked_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                            const GdnInputs<float>& in, const GdnShape& shape, float scale,
                                            void* workspace, size_t workspace_bytes, cudaStream_t stream,
                                            bool forward_kept) {
  using namespace gdn_chunked;
  const Problem p = make_problem(in, shape, scale);
  const size_t need = gated_delta_rule_chunked_backward_cuda_workspace_bytes(shape, in.n_seqs);
  HLM_CHECK(workspace_bytes >= need, "chunked gated delta rule: workspace of ", workspace_bytes, " bytes, needs ",
            need);
  Carver c{static_cast<char*>(workspace)};
  const ForwardScratch fs = carve_forward(c, p, true);
  const BackwardScratch bs = carve_backward(c, p, fs);
  run_backward(grads, dout, p, fs, bs, forward_kept, stream);
}

void gated_delta_rule_chunked_backward_kept_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                                 const GdnInputs<float>& in, const GdnShape& shape, float scale,
                                                 const void* kept, size_t kept_bytes, void* scratch,
                                                 size_t scratch_bytes, cudaStream_t stream) {
  using namespace gdn_chunked;
  const Problem p = make_problem(in, shape, scale);
  const size_t need_kept = gated_delta_rule_chunked_kept_bytes(shape, in.n_seqs);
  const size_t need_scratch = gated_delta_rule_chunked_backward_scratch_bytes(shape, in.n_seqs);
  HLM_CHECK(kept != nullptr || p.T == 0, "chunked gated delta rule: no kept forward");
  HLM_CHECK(kept_bytes >= need_kept, "chunked gated delta rule: kept forward of ", kept_bytes, " bytes, needs ",
            need_kept);
  HLM_CHECK(scratch_bytes >= need_scratch, "chunked gated delta rule: backward scratch of ", scratch_bytes,
            " bytes, needs ", need_scratch);
  // The kernels only read the forward's part (ForwardScratch's pointers are non-const for prep and the state pass,
  // which do not run here).
  Carver kc{static_cast<char*>(const_cast<void*>(kept))}, c{static_cast<char*>(scratch)};
  const ForwardScratch fs = carve_forward(kc, p, true);
  const BackwardScratch bs = carve_backward(c, p, fs);
  run_backward(grads, dout, p, fs, bs, /*forward_kept=*/true, stream);
}

}  // namespace hlm
