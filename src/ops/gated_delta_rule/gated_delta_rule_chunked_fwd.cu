// Chunked gated delta rule on CUDA, forward: chunk table, prep, state pass and output kernels and the forward launcher
// (contract and design: gated_delta_rule_chunked_cuda.h; tiles and helpers: gdn_chunked_tiles.cuh). Names follow the
// CPU chunked reference (gated_delta_rule_chunk.h): γ chunk-local cumsum, Γ_ij = e^{γ_i − γ_j} (j ≤ i), L, R, W, Ũ, U.
// HLM_GDN_KERNELS=v2 launches the v2 kernels of gdn_fwd_v2.cuh instead (prep_v2, state_v2, output_v2; selection and
// the state pass's rows-per-block choice at the end of the anonymous namespace below).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule_chunked_cuda.h"
#include "ops/gated_delta_rule/gdn_chunked_tiles.cuh"
#include "ops/gated_delta_rule/gdn_fwd_v2.cuh"

namespace hlm {
namespace gdn_chunked {

namespace {

constexpr int kPrepThreads = 256, kPrepWarps = kPrepThreads / 32;
constexpr int kStateThreads = 128, kStateWarps = kStateThreads / 32;
constexpr int kOutThreads = 256, kOutWarps = kOutThreads / 32;

// ---- prep: per (chunk, v-head), γ, R, W, Ũ

// Shared memory (61,952 B, so three blocks share an SM): Xb, Rb, gam and beta have regions of their own; the other
// five buffers share two 17,408 B regions P0, P1 by lifetime (phases in kernel order; "|" marks the barrier between
// the last read of a region's old contents and the first write of its new):
//   P0       Kb (k, bf16 [64][kLdD]): the k load → K Kᵀ | (barrier after K Kᵀ) Rf (fp32 [64][kLdCf]): L → the inverse
//            → bf16(R)
//   P1       KK = K Kᵀ (fp32 [64][kLdCf]): K Kᵀ → L | (invert_unit_lower64's first barrier) its tmp (1024 floats)
//   P0 ∪ P1  | (barrier before the W product: Rf read by bf16(R); tmp read before the inverse's last barrier)
//            F (fp32 [64][kLdDf]): W, then Ũ
constexpr size_t kPrepPiece = smem_piece<bf16>(kC * kLdD);
static_assert(smem_piece<float>(kC * kLdCf) <= kPrepPiece && smem_piece<float>(1024) <= kPrepPiece &&
                  smem_piece<float>(kC * kLdDf) <= 2 * kPrepPiece,
              "prep: Rf, KK and tmp fit one region, F two");
constexpr size_t kPrepSmem = 2 * kPrepPiece + smem_piece<bf16>(kC * kLdD) + smem_piece<bf16>(kC * kLdC) +
                             2 * smem_piece<float>(kC);
static_assert(blocks_fit_per_sm(kPrepSmem, 3), "prep: three blocks per SM");

__global__ void __launch_bounds__(kPrepThreads) prep_kernel(Problem p, ForwardScratch s) {
  const ChunkHead c = chunk_head(p, s.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  char* P0 = sc.take<char>(kPrepPiece);
  char* P1 = sc.take<char>(kPrepPiece);
  bf16* Kb = reinterpret_cast<bf16*>(P0);    // k rows (P0, until K Kᵀ)
  float* Rf = reinterpret_cast<float*>(P0);  // L, then R (P0, from L to bf16(R))
  float* KK = reinterpret_cast<float*>(P1);  // K Kᵀ (P1, until L)
  float* tmp = reinterpret_cast<float*>(P1);  // invert_unit_lower64's scratch (P1)
  float* F = reinterpret_cast<float*>(P0);   // W, then Ũ (P0 ∪ P1, from the W product)
  bf16* Xb = sc.take<bf16>(kC * kLdD);       // β e^γ k rows, then β v rows
  bf16* Rb = sc.take<bf16>(kC * kLdC);
  float* gam = sc.take<float>(kC);
  float* beta = sc.take<float>(kC);
  const int tid = static_cast<int>(threadIdx.x);

  const float* k0 = p.k + (t0 * p.Hk + hk) * p.dk;
  const float* v0 = p.v + (t0 * p.Hv + h) * p.dv;
  const int64_t kst = p.Hk * p.dk, vst = p.Hv * p.dv;
  chunk_cumsum(gam, p.g + t0 * p.Hv + h, p.Hv, len);
  if (tid < kC) beta[tid] = tid < len ? p.beta[(t0 + tid) * p.Hv + h] : 0.0f;
  __syncthreads();
  // One read of k: Kb = k, Xb = β e^γ k (for W), and the decayed keys e^{γ_c − γ_i} k_i (bf16, global) that the
  // state pass and the backward's reverse pass multiply with.
  const float gc = gam[len - 1];
  bf16* Kd = s.Kd + (t0 * p.Hv + h) * p.dk;
  const int64_t kdst = p.Hv * p.dk;
  for_tile<kC, kD>(k0, kst, len, dk, [&](int i, int d, const float* v, int n) {
    const float wx = i < len ? beta[i] * expf(gam[i]) : 0.0f, dec = i < len ? expf(gc - gam[i]) : 0.0f;
    for (int e = 0; e < n; ++e) {
      Kb[i * kLdD + d + e] = __float2bfloat16_rn(v[e]);
      Xb[i * kLdD + d + e] = __float2bfloat16_rn(wx * v[e]);
      if (i < len && d + e < p.dk) Kd[i * kdst + d + e] = __float2bfloat16_rn(dec * v[e]);
    }
  });
  __syncthreads();
  block_mma<kC, kC, kD, false, true, false, kPrepWarps>(KK, kLdCf, Kb, kLdD, Kb, kLdD);  // K Kᵀ
  __syncthreads();  // Kb's last read: Rf may overwrite it
  // L_ij = β_i Γ_ij (k_i·k_j) for j < i < len; exponents only for j < i (≤ 0 when g ≤ 0).
  for (int idx = tid; idx < kC * kC; idx += kPrepThreads) {
    const int i = idx / kC, j = idx % kC;
    Rf[i * kLdCf + j] = (j < i && i < len) ? beta[i] * expf(gam[i] - gam[j]) * KK[i * kLdCf + j] : 0.0f;
  }
  invert_unit_lower64(Rf, kLdCf, tmp);  // barriers inside, before (KK's last read: tmp may overwrite it) and after
  bf16* R_out = s.R ? s.R + (ci * p.Hv + h) * kC * kC : nullptr;
  for (int idx = tid; idx < kC * kC; idx += kPrepThreads) {
    const bf16 r = __float2bfloat16_rn(Rf[(idx / kC) * kLdCf + idx % kC]);
    Rb[(idx / kC) * kLdC + idx % kC] = r;
    if (R_out) R_out[idx] = r;
  }
  if (s.Qd) {  // backward: Qd = scale·e^γ q, the reverse state pass's operand
    bf16* Qd = s.Qd + (t0 * p.Hv + h) * p.dk;
    const float* q0 = p.q + (t0 * p.Hk + hk) * p.dk;
    for_tile<kC, kD>(q0, kst, len, dk, [&](int i, int d, const float* v, int n) {
      const float sc_in = i < len ? p.scale * expf(gam[i]) : 0.0f;
      for (int e = 0; e < n; ++e)
        if (i < len && d + e < p.dk) Qd[i * kdst + d + e] = __float2bfloat16_rn(sc_in * v[e]);
    });
  }
  __syncthreads();  // Rf's last read (tmp's was before the inverse's last barrier): F may overwrite both
  block_mma<kC, kD, kC, false, false, false, kPrepWarps>(F, kLdDf, Rb, kLdC, Xb, kLdD);  // W = R diag(βe^γ) K
  __syncthreads();
  for (int idx = tid; idx < len * p.dk; idx += kPrepThreads) {
    const int i = idx / dk, d = idx % dk;
    s.W[((t0 + i) * p.Hv + h) * p.dk + d] = __float2bfloat16_rn(F[i * kLdDf + d]);
  }
  load_tile_bf16<kC, kD>(Xb, kLdD, v0, vst, len, dv, [&](int i) { return beta[i]; });
  __syncthreads();
  block_mma<kC, kD, kC, false, false, false, kPrepWarps>(F, kLdDf, Rb, kLdC, Xb, kLdD);  // Ũ = R diag(β) V
  __syncthreads();
  for (int idx = tid; idx < len * p.dv; idx += kPrepThreads) {
    const int i = idx / dv, a = idx % dv;
    const int64_t slot = ((t0 + i) * p.Hv + h) * p.dv + a;
    s.U[slot] = F[i * kLdDf + a];
    if (s.Ut) s.Ut[slot] = __float2bfloat16_rn(F[i * kLdDf + a]);
  }
  if (tid < len) s.gam[(t0 + tid) * p.Hv + h] = gam[tid];
}

// ---- state pass: per (sequence, v-head, kBV state rows), sequential over the sequence's chunks

// kBufs = 2: W and the decayed keys of chunk ci+1 are copied (cp.async) into the other buffer while chunk ci is
// processed; kBufs = 1: one buffer, filled at the top of each chunk (less shared memory, so more blocks per SM
// overlap one another's copies instead).
template <int kBufs>
constexpr size_t state_smem() {
  return 2 * kBufs * smem_piece<bf16>(kC * kLdD) + smem_piece<float>(kBV * kLdDf) + smem_piece<bf16>(kBV * kLdD) +
         smem_piece<float>(kC * kLdVf) + smem_piece<bf16>(kC * kLdV) + smem_piece<float>(kC);
}

static_assert(blocks_fit_per_sm(state_smem<1>(), 3), "state pass, one buffer: three blocks per SM");

template <int kBufs>
__global__ void __launch_bounds__(kStateThreads) state_kernel(Problem p, ForwardScratch s, float* hT) {
  static_assert(kBufs == 1 || kBufs == 2, "one or two chunk buffers");
  const int64_t seq = blockIdx.x / p.Hv;
  const int h = static_cast<int>(blockIdx.x % p.Hv);
  const int a0 = static_cast<int>(blockIdx.y) * kBV, rows = static_cast<int>(min(int64_t{kBV}, p.dv - a0));
  const int dk = static_cast<int>(p.dk);
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Wb2 = sc.take<bf16>(kBufs * kC * kLdD);
  bf16* Kb2 = sc.take<bf16>(kBufs * kC * kLdD);  // e^{γ_c − γ_i} k_i (Kd)
  float* Sf = sc.take<float>(kBV * kLdDf);
  bf16* Sb = sc.take<bf16>(kBV * kLdD);
  float* Pf = sc.take<float>(kC * kLdVf);  // W M0ᵀ
  bf16* Ub = sc.take<bf16>(kC * kLdV);
  float* gam = sc.take<float>(kC);
  const auto Wb_ = [&](int b) { return Wb2 + b * kC * kLdD; };  // buffer b
  const auto Kb_ = [&](int b) { return Kb2 + b * kC * kLdD; };  // buffer b
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t state_off = ((seq * p.Hv + h) * p.dv + a0) * p.dk;
  const auto issue = [&](int64_t ci, int buf) {
    const ChunkInfo info = s.table[ci];
    const int64_t off = (info.t0 * p.Hv + h) * p.dk;
    load_tile_async<kC, kD>(Wb_(buf), kLdD, s.W + off, p.Hv * p.dk, info.len, dk);
    load_tile_async<kC, kD>(Kb_(buf), kLdD, s.Kd + off, p.Hv * p.dk, info.len, dk);
  };

  StateTile S;
  S.init(p.h0 ? p.h0 + state_off : nullptr, p.dk, rows, dk, Sf);
  const int64_t first = s.seq_first[seq], last = s.seq_first[seq + 1];
  if (kBufs == 2 && first < last) issue(first, 0);
  cp_async_commit();
  for (int64_t ci = first; ci < last; ++ci) {
    const int buf = kBufs == 2 ? static_cast<int>((ci - first) & 1) : 0;
    const ChunkInfo info = s.table[ci];
    const int len = info.len;
    const int64_t t0 = info.t0;
    S.store(Sf);
    if (tid < kC) gam[tid] = s.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
    __syncthreads();  // every warp is done with chunk ci−1 (its buffers are free again)
    if (kBufs == 1)
      issue(ci, 0);
    else if (ci + 1 < last)
      issue(ci + 1, buf ^ 1);
    cp_async_commit();
    state_to_bf16(Sb, Sf, s.states + ((ci * p.Hv + h) * p.dv + a0) * p.dk, p.dk, rows, dk);  // M0
    const float gc = gam[len - 1];
    cp_async_wait<kBufs - 1>();  // chunk ci's copies (all but the prefetch group) have landed
    __syncthreads();
    block_mma<kC, kBV, kD, false, true, false, kStateWarps>(Pf, kLdVf, Wb_(buf), kLdD, Sb, kLdD);  // W M0ᵀ
    __syncthreads();
    // U = Ũ − W M0ᵀ in place of Ũ; Ub = bf16(U).
    update_tile<kStateThreads>(s.U + (t0 * p.Hv + h) * p.dv + a0, p.Hv * p.dv, Pf, -1.0f, Ub, 1.0f, len, rows);
    const float decay = expf(gc);
    __syncthreads();
    S.scale(decay);                     // M ← e^{γ_c} M
    S.add_tn(Ub, kLdV, Kb_(buf), kLdD);  //   + Uᵀ diag(e^{γ_c − γ}) K
  }
  cp_async_wait<0>();
  if (hT) S.write(hT + state_off, p.dk, rows, dk, Sf);
}

// ---- output: per (chunk, v-head)

// Shared memory (112,896 B, so two blocks share an SM): Qs, Ub, Ab and gam have regions of their own; the rest is
// shared by lifetime (phases in kernel order; "|" marks the barrier between the last read of a region's old
// contents and the first write of its new):
//   S  Qb, Kb (bf16 [64][kLdD] each, one after the other): the loads → Q Kᵀ | (barrier after Q Kᵀ) Sb = M0 (bf16
//      [128][kLdD]), copied by cp.async while the mask is computed, landed by the barrier after the mask → M0ᵀ product
//   F  Q Kᵀ (fp32 [64][kLdCf]): Q Kᵀ → the mask | (barrier after the mask) the output (fp32 [64][kLdDf]) → o
static_assert(2 * kC * kLdD == kD * kLdD, "output: Qb and Kb fill Sb's region");
constexpr size_t kOutSmem = smem_piece<bf16>(kD * kLdD) + 2 * smem_piece<bf16>(kC * kLdD) +
                            smem_piece<float>(kC * kLdDf) + smem_piece<bf16>(kC * kLdC) + smem_piece<float>(kC);
static_assert(blocks_fit_per_sm(kOutSmem, 2), "output: two blocks per SM");

__global__ void __launch_bounds__(kOutThreads) output_kernel(Problem p, ForwardScratch s, float* o) {
  const ChunkHead c = chunk_head(p, s.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Sb = sc.take<bf16>(kD * kLdD);  // M0 [dv][dk] (region S, from after Q Kᵀ)
  bf16* Qb = Sb;                        // q (region S, until Q Kᵀ)
  bf16* Kb = Sb + kC * kLdD;            // k (region S, until Q Kᵀ)
  bf16* Qs = sc.take<bf16>(kC * kLdD);  // diag(e^γ) q
  bf16* Ub = sc.take<bf16>(kC * kLdD);
  float* F = sc.take<float>(kC * kLdDf);  // Q Kᵀ, then the output
  bf16* Ab = sc.take<bf16>(kC * kLdC);
  float* gam = sc.take<float>(kC);
  const int tid = static_cast<int>(threadIdx.x);
  const float* q0 = p.q + (t0 * p.Hk + hk) * p.dk;
  const int64_t qst = p.Hk * p.dk;

  if (tid < kC) gam[tid] = s.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  __syncthreads();  // gam
  for_tile<kC, kD>(q0, qst, len, dk, [&](int i, int d, const float* v, int n) {  // q and diag(e^γ) q, one read
    const float e_in = i < len ? expf(gam[i]) : 0.0f;
    for (int e = 0; e < n; ++e) {
      Qb[i * kLdD + d + e] = __float2bfloat16_rn(v[e]);
      Qs[i * kLdD + d + e] = __float2bfloat16_rn(e_in * v[e]);
    }
  });
  load_tile_bf16<kC, kD>(Kb, kLdD, p.k + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Ub, kLdD, s.U + (t0 * p.Hv + h) * p.dv, p.Hv * p.dv, len, dv, NoScale{});
  __syncthreads();
  block_mma<kC, kC, kD, false, true, false, kOutWarps>(F, kLdCf, Qb, kLdD, Kb, kLdD);  // Q Kᵀ
  __syncthreads();  // Qb's and Kb's last read: M0 may overwrite them
  // M0 (bf16 in global: the copy gives the bits a load through fp32 gave, NaN payloads aside), landing during the mask.
  load_tile_async<kD, kD>(Sb, kLdD, s.states + (ci * p.Hv + h) * p.dv * p.dk, p.dk, dv, dk);
  cp_async_commit();
  decayed_causal_bf16(Ab, F, gam, len, 1.0f);  // A = Q Kᵀ ⊙ Γ
  cp_async_wait<0>();
  __syncthreads();  // M0 landed; Q Kᵀ's last read: the output may overwrite it
  block_mma<kC, kD, kD, false, true, false, kOutWarps>(F, kLdDf, Qs, kLdD, Sb, kLdD);  // diag(e^γ) Q M0ᵀ
  block_mma<kC, kD, kC, false, false, true, kOutWarps>(F, kLdDf, Ab, kLdC, Ub, kLdD);  // + A U
  __syncthreads();
  for (int idx = tid; idx < len * dv; idx += kOutThreads) {
    const int i = idx / dv, a = idx % dv;
    o[((t0 + i) * p.Hv + h) * p.dv + a] = p.scale * F[i * kLdDf + a];
  }
}

// ---- v2 selection (gdn_kernels_v2() in gdn_chunked_tiles.cuh: HLM_GDN_KERNELS unset or v2; gdn_fwd_v2.cuh)

// HLM_GDN_PREP=v1 keeps v1's prep kernel under HLM_GDN_KERNELS=v2 (A/B of prep_v2 alone; call C ran state_v2 and
// output_v2 after v1's prep). Read once.
bool gdn_prep_v1_forced() {
  static const bool v1 = [] {
    const char* e = std::getenv("HLM_GDN_PREP");
    return e != nullptr && std::string(e) == "v1";
  }();
  return v1;
}

template <int kWarps, int kSplit>
int state_v2_blocks_per_sm() {
  static const int n = [] {
    const auto kernel = fwd_v2::state_v2_kernel<kWarps, kSplit>;
    set_smem(kernel, fwd_v2::state_v2_smem<kWarps, kSplit>());
    int b = 0;
    HLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32,
                                                                 fwd_v2::state_v2_smem<kWarps, kSplit>()));
    return std::max(b, 1);
  }();
  return n;
}

template <int kWarps, int kSplit>
void launch_state_v2_as(const Problem& p, const ForwardScratch& s, float* hT, cudaStream_t stream) {
  const int64_t rows = kWarps / kSplit * fwd_v2::kStateRowsPerWarp;
  const dim3 grid(static_cast<unsigned>(p.N * p.Hv), static_cast<unsigned>((p.dv + rows - 1) / rows));
  const auto kernel = fwd_v2::state_v2_kernel<kWarps, kSplit>;
  set_smem(kernel, fwd_v2::state_v2_smem<kWarps, kSplit>());
  kernel<<<grid, kWarps * 32, fwd_v2::state_v2_smem<kWarps, kSplit>(), stream>>>(p, s, hT);
}

// HLM_GDN_STATE_WARPS=1|2|4|8 forces state_v2's warps per block without split keys (A/B runs); unset: launch_state_v2's
// rule. Any other value is refused. Read once.
int state_v2_forced_warps() {
  static const int w = [] {
    const char* e = std::getenv("HLM_GDN_STATE_WARPS");
    if (e == nullptr || *e == '\0') return 0;
    const std::string v(e);
    HLM_CHECK(v == "1" || v == "2" || v == "4" || v == "8", "HLM_GDN_STATE_WARPS=", v, ": expected 1, 2, 4 or 8");
    return std::stoi(v);
  }();
  return w;
}
// HLM_GDN_STATE_SPLIT=on|off forces split keys (4 warps per block: 2 row strips × 2 key halves) on or off (A/B runs);
// unset: launch_state_v2's rule. Any other value is refused. Read once.
int state_v2_forced_split() {  // 0 unset, 1 off, 2 on
  static const int f = [] {
    const char* e = std::getenv("HLM_GDN_STATE_SPLIT");
    if (e == nullptr || *e == '\0') return 0;
    const std::string v(e);
    HLM_CHECK(v == "on" || v == "off", "HLM_GDN_STATE_SPLIT=", v, ": expected on or off");
    return v == "on" ? 2 : 1;
  }();
  return f;
}

// Split keys (state_v2_kernel<4, 2>: a warp pair per 16 rows) when the sequences × heads × 16-row strips are at most
// two per SM, so one warp per 16 rows would leave half the SMs' schedulers idle, and the split grid still runs in one
// wave: B1×T16384 H32 (256 strips: 128 blocks of 4 warps; session 25, H200: 621 µs against 727 with 2 warps per
// block). Not at B2×T4096 H32 (512 strips): there the split form took 224 µs against 202 for 4 unsplit warps.
// Otherwise rows per block (16·kWarps): the fewest waves of blocks (all sequences are taken as equally long), among the
// kWarps that give at least half the SMs a block (kWarps = 1 when none does); on a tie, the order below. More warps
// per block share one copy of the chunk's W and Kd tiles: session 23 (call C, kWarps = 1 at B1×T16384 H32, 256
// one-warp blocks) measured ~7 µs per chunk step against ~2.6 µs with 2 warps per block at B2×T4096 (also 256
// blocks), so one-warp blocks are the last resort. B8×T1024 H32: 8 warps (256 blocks, one wave); the 4B shape
// (4 sequences × 32 heads): 4.
void launch_state_v2(const Problem& p, const ForwardScratch& s, float* hT, cudaStream_t stream) {
  int device = 0, sms = 0;
  HLM_CUDA_CHECK(cudaGetDevice(&device));
  HLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t strips = (p.dv + fwd_v2::kStateRowsPerWarp - 1) / fwd_v2::kStateRowsPerWarp;
  const int64_t split_blocks = p.N * p.Hv * ((strips + 1) / 2);
  bool split = p.N * p.Hv * strips <= 2 * static_cast<int64_t>(sms) &&
               split_blocks <= static_cast<int64_t>(state_v2_blocks_per_sm<4, 2>()) * sms;
  if (state_v2_forced_split()) split = state_v2_forced_split() == 2;
  if (state_v2_forced_warps()) split = false;
  if (split) {
    launch_state_v2_as<4, 2>(p, s, hT, stream);
    return;
  }
  // Candidates in order of preference on a tie: 4 (two U strips, so the next Ũ is copied a chunk ahead), then 8
  // (one strip; taken only for fewer waves, e.g. B8×T1024 H32), 2, 1.
  const int order[4] = {4, 8, 2, 1};
  const int per_sm[4] = {state_v2_blocks_per_sm<4, 1>(), state_v2_blocks_per_sm<8, 1>(),
                         state_v2_blocks_per_sm<2, 1>(), state_v2_blocks_per_sm<1, 1>()};
  int best = 1;
  int64_t best_waves = INT64_MAX;
  for (int i = 0; i < 4; ++i) {
    const int kw = order[i];
    const int64_t blocks = p.N * p.Hv * ((strips + kw - 1) / kw);
    if (2 * blocks < sms && kw > 1) continue;
    const int64_t slots = static_cast<int64_t>(per_sm[i]) * sms, waves = (blocks + slots - 1) / slots;
    if (waves < best_waves) best = kw, best_waves = waves;
  }
  if (state_v2_forced_warps()) best = state_v2_forced_warps();
  switch (best) {
    case 8: launch_state_v2_as<8, 1>(p, s, hT, stream); break;
    case 4: launch_state_v2_as<4, 1>(p, s, hT, stream); break;
    case 2: launch_state_v2_as<2, 1>(p, s, hT, stream); break;
    default: launch_state_v2_as<1, 1>(p, s, hT, stream); break;
  }
}

}  // namespace

Problem make_problem(const GdnInputs<float>& in, const GdnShape& s, float scale) {
  HLM_CHECK(s.k_heads > 0 && s.v_heads % s.k_heads == 0, "chunked gated delta rule: v_heads ", s.v_heads,
            " is not a multiple of k_heads ", s.k_heads);
  HLM_CHECK(s.key_dim >= 1 && s.key_dim <= kD && s.value_dim >= 1 && s.value_dim <= kD,
            "chunked gated delta rule on CUDA: key_dim and value_dim must be in [1, ", kD, "], got ", s.key_dim,
            " and ", s.value_dim);
  HLM_CHECK(in.n_seqs >= 1 && in.cu_seqlens, "chunked gated delta rule: no sequences");
  return {in.q, in.k, in.v, in.g, in.beta, in.h0, in.cu_seqlens, s.total_tokens, s.k_heads, s.v_heads,
          s.key_dim, s.value_dim, in.n_seqs, scale};
}

ForwardScratch carve_forward(Carver& c, const Problem& p, bool for_backward) {
  ForwardScratch s{};
  s.max_chunks = max_chunks(p.T, p.N);
  s.table = c.take<ChunkInfo>(static_cast<size_t>(s.max_chunks));
  s.seq_first = c.take<int64_t>(static_cast<size_t>(p.N + 1));
  s.gam = c.take<float>(static_cast<size_t>(p.T * p.Hv));
  s.W = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dk));
  s.Kd = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dk));
  s.U = c.take<float>(static_cast<size_t>(p.T * p.Hv * p.dv));
  s.states = c.take<bf16>(static_cast<size_t>(s.max_chunks * p.Hv * p.dv * p.dk));
  if (for_backward) {
    s.R = c.take<bf16>(static_cast<size_t>(s.max_chunks * p.Hv * kC * kC));
    s.Ut = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dv));
    s.Qd = c.take<bf16>(static_cast<size_t>(p.T * p.Hv * p.dk));
  }
  return s;
}

void launch_forward_passes(const Problem& p, const ForwardScratch& s, float* hT, cudaStream_t stream) {
  chunk_table_kernel<<<1, 256, 0, stream>>>(p.cu, p.N, s.max_chunks, s.table, s.seq_first);
  HLM_CUDA_CHECK_LAUNCH();
  const dim3 chunk_grid(static_cast<unsigned>(s.max_chunks), static_cast<unsigned>(p.Hv));
  if (gdn_kernels_v2() && !gdn_prep_v1_forced()) {
    set_smem(fwd_v2::prep_v2_kernel, fwd_v2::kPrepV2Smem);
    fwd_v2::prep_v2_kernel<<<chunk_grid, fwd_v2::kPrepV2Threads, fwd_v2::kPrepV2Smem, stream>>>(p, s);
  } else {
    set_smem(prep_kernel, kPrepSmem);
    prep_kernel<<<chunk_grid, kPrepThreads, kPrepSmem, stream>>>(p, s);
  }
  HLM_CUDA_CHECK_LAUNCH();
  if (gdn_kernels_v2()) {
    launch_state_v2(p, s, hT, stream);
    HLM_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(static_cast<unsigned>(p.N * p.Hv), static_cast<unsigned>((p.dv + kBV - 1) / kBV));
  if (state_pass_buffers(static_cast<int64_t>(grid.x) * grid.y) == 1) {
    set_smem(state_kernel<1>, state_smem<1>());
    state_kernel<1><<<grid, kStateThreads, state_smem<1>(), stream>>>(p, s, hT);
  } else {
    set_smem(state_kernel<2>, state_smem<2>());
    state_kernel<2><<<grid, kStateThreads, state_smem<2>(), stream>>>(p, s, hT);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace gdn_chunked

namespace gdn_chunked {
Problem sizing_problem(const GdnShape& shape, int64_t n_seqs) {
  Problem p{};
  p.T = shape.total_tokens;
  p.Hk = shape.k_heads;
  p.Hv = shape.v_heads;
  p.dk = shape.key_dim;
  p.dv = shape.value_dim;
  p.N = n_seqs;
  return p;
}
}  // namespace gdn_chunked

size_t gated_delta_rule_chunked_forward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs) {
  gdn_chunked::Carver c;
  gdn_chunked::carve_forward(c, gdn_chunked::sizing_problem(shape, n_seqs), false);
  return c.used;
}

void gated_delta_rule_chunked_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in,
                                           const GdnShape& shape, float scale, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream, bool keep_for_backward) {
  using namespace gdn_chunked;
  const Problem p = make_problem(in, shape, scale);
  HLM_CHECK(out.o != nullptr || p.T == 0, "chunked gated delta rule: output o missing");
  const size_t need = keep_for_backward ? gated_delta_rule_chunked_kept_bytes(shape, in.n_seqs)
                                        : gated_delta_rule_chunked_forward_cuda_workspace_bytes(shape, in.n_seqs);
  HLM_CHECK(workspace_bytes >= need, "chunked gated delta rule: workspace of ", workspace_bytes, " bytes, needs ",
            need, keep_for_backward ? " (kept for the backward)" : "");
  Carver c{static_cast<char*>(workspace)};
  // Kept for the backward: the front of the backward's layout (carved first, identically there), which also takes R,
  // Ũ and Qd, filled by prep when present; the backward's own scratch behind it is not touched here.
  const ForwardScratch s = carve_forward(c, p, keep_for_backward);
  launch_forward_passes(p, s, out.hT, stream);
  if (gdn_kernels_v2()) {
    set_smem(fwd_v2::output_v2_kernel, fwd_v2::kOutV2Smem);
    fwd_v2::output_v2_kernel<<<dim3(static_cast<unsigned>(s.max_chunks), static_cast<unsigned>(p.Hv)),
                               fwd_v2::kOutV2Threads, fwd_v2::kOutV2Smem, stream>>>(p, s, out.o);
    HLM_CUDA_CHECK_LAUNCH();
    return;
  }
  set_smem(output_kernel, kOutSmem);
  output_kernel<<<dim3(static_cast<unsigned>(s.max_chunks), static_cast<unsigned>(p.Hv)), kOutThreads, kOutSmem,
                  stream>>>(p, s, out.o);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
