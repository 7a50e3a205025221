// v2 forward kernels of the chunked gated delta rule (selected by HLM_GDN_KERNELS=v2; launcher in
// gated_delta_rule_chunked_fwd.cu): warp-level mma.sync (gdn_mma.cuh) with accumulators kept and consumed in
// registers. Same inputs, scratch contents and outputs as the v1 kernels (gdn_chunked_tiles.cuh, ForwardScratch).
//
// state_v2 (the sequential pass), per (sequence, v-head, 16·kWarps state rows), kWarps·32 threads:
//   warp w owns the 16 state rows a0 + 16w.. as 16 fp32 accumulator tiles (16 rows × 8 key columns each: the
//   whole 16 × 128 row strip, 64 registers), so no product needs another warp's data. Per chunk:
//     Uᵀ = Ũᵀ − M0 Wᵀ   [16 rows][64 tokens]: the accumulators start as Ũᵀ (fp32, loaded from global at the top
//                       of the chunk, landing while M0 is stored), A = bf16(−M0) re-packed from the state
//                       accumulators, B = W (ldmatrix, n-major)
//     M0 (bf16) and U (fp32, in place of Ũ) stored straight from the registers
//     M ← e^{γ_c} M + Uᵀ Kd   A = bf16(Uᵀ) re-packed from the U accumulators, B = Kd (ldmatrix.trans, k-major)
//   The block's warps share the chunk's W and Kd tiles (bf16, 2 × 17 KB), copied by cp.async a chunk ahead into a
//   second buffer; one block barrier per chunk (copies landed / the other buffer free).
//   ≤ 128 registers (launch bounds: 16 warps per SM by registers; the shared memory allows 3 blocks).
//   kWarps (1, 2, 4 or 8) is picked at launch: fewer rows per block when there are few sequences × heads, so the
//   132 SMs all get work (B1×T16384 H32: 256 one-warp blocks instead of 32 blocks of 128 rows).
// output_v2 (per chunk and v-head, 8 warps): see its comment below; one block barrier.
// Numerics as v1: M0 and U enter the products as bf16, everything accumulates in fp32; U's sum starts from Ũ
// instead of subtracting a separately summed W M0ᵀ (a different fp32 rounding order, the same error bound).
#pragma once
#include "ops/gated_delta_rule/gdn_chunked_tiles.cuh"
#include "ops/gated_delta_rule/gdn_mma.cuh"

namespace hlm::gdn_chunked::fwd_v2 {

namespace {

using gdn_mma::FragA;
using gdn_mma::FragB;
using gdn_mma::FragC;

// ---- state_v2

constexpr int kStateRowsPerWarp = 16;
// A warp's U strip in shared memory: [64 tokens][16 rows] fp32, row stride 20 floats (80 B: 16-byte aligned rows
// for cp.async, and the accumulator-layout reads (rows 2t, columns g) fall on distinct banks).
constexpr int kLdStrip = kStateRowsPerWarp + 4;
constexpr size_t kStripBytes = smem_piece<float>(kC * kLdStrip);
template <int kWarps>
constexpr size_t state_v2_smem() {  // W and Kd, two buffers each, and a U strip per warp
  return 4 * smem_piece<bf16>(kC * kLdD) + kWarps * kStripBytes;
}
static_assert(blocks_fit_per_sm(state_v2_smem<8>(), 2), "state_v2: two blocks of 8 warps per SM");

// The warp's strip of U for one chunk: columns r0..r0+15 of the chunk's rows [len][dv] of U (row stride ust).
// Vector path (16-byte cp.async, zero-filled outside len / dv) when dv and the strides allow, else scalar copies.
struct UStrip {
  float* sm;  // [kC][kLdStrip]
  int r0, dv;
  int64_t ust;
  bool vec;
  __device__ UStrip(float* sm_, int r0_, int dv_, int64_t ust_, const float* U)
      : sm(sm_), r0(r0_), dv(dv_), ust(ust_), vec(dv_ % 4 == 0 && ust_ % 4 == 0 && reinterpret_cast<uintptr_t>(U) % 16 == 0) {}
  // Global → strip (asynchronous on the vector path: the caller commits and waits).
  __device__ void load(const float* src, int len) const {
    const int lane = gdn_mma::lane_id();
    if (vec) {
#pragma unroll
      for (int it = 0; it < kC * 4 / 32; ++it) {  // 16-byte pieces: row i, columns 4c..4c+3
        const int idx = it * 32 + lane, i = idx / 4, c = 4 * (idx % 4);
        const bool valid = i < len && r0 + c < dv;
        cp_async16(sm + i * kLdStrip + c, valid ? src + i * ust + r0 + c : src, valid);
      }
    } else {
#pragma unroll 1
      for (int idx = lane; idx < kC * kStateRowsPerWarp; idx += 32) {
        const int i = idx / kStateRowsPerWarp, c = idx % kStateRowsPerWarp;
        sm[i * kLdStrip + c] = (i < len && r0 + c < dv) ? src[i * ust + r0 + c] : 0.0f;
      }
    }
  }
  // Strip → global, the valid part.
  __device__ void store(float* dst, int len) const {
    const int lane = gdn_mma::lane_id();
    if (vec) {
#pragma unroll
      for (int it = 0; it < kC * 4 / 32; ++it) {
        const int idx = it * 32 + lane, i = idx / 4, c = 4 * (idx % 4);
        if (i < len && r0 + c < dv)
          *reinterpret_cast<float4*>(dst + i * ust + r0 + c) = *reinterpret_cast<const float4*>(sm + i * kLdStrip + c);
      }
    } else {
#pragma unroll 1
      for (int idx = lane; idx < kC * kStateRowsPerWarp; idx += 32) {
        const int i = idx / kStateRowsPerWarp, c = idx % kStateRowsPerWarp;
        if (i < len && r0 + c < dv) dst[i * ust + r0 + c] = sm[i * kLdStrip + c];
      }
    }
  }
};

template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 8 ? 2 : 1) state_v2_kernel(Problem p, ForwardScratch s, float* hT) {
  const int64_t seq = blockIdx.x / p.Hv;
  const int h = static_cast<int>(blockIdx.x % p.Hv);
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int r0 = static_cast<int>(blockIdx.y) * kWarps * kStateRowsPerWarp + warp * kStateRowsPerWarp;  // strip
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Wb2 = sc.take<bf16>(2 * kC * kLdD);
  bf16* Kb2 = sc.take<bf16>(2 * kC * kLdD);  // e^{γ_c − γ_i} k_i (Kd)
  float* strip_sm = sc.take<float>(kWarps * kStripBytes / sizeof(float)) + warp * (kStripBytes / sizeof(float));
  // This lane's ldmatrix row addresses in buffer 0 (bytes; buffer 1 is kTileBytes further).
  constexpr int kTileBytes = kC * kLdD * 2;
  const gdn_mma::saddr_t w_lane = gdn_mma::smem_addr(Wb2 + gdn_mma::lane_off_b2(kLdD));
  const gdn_mma::saddr_t k_lane = gdn_mma::smem_addr(Kb2 + gdn_mma::lane_off_b2_trans(kLdD));
  const int64_t hst = p.Hv * p.dk;  // token stride of W, Kd
  const int64_t ust = p.Hv * p.dv;  // token stride of U
  const float* u_head = s.U + static_cast<int64_t>(h) * p.dv;
  const UStrip strip(strip_sm, r0, dv, ust, s.U);
  const auto issue = [&](const ChunkInfo& info, int buf) {
    const int64_t off = (info.t0 * p.Hv + h) * p.dk;
    load_tile_async<kC, kD>(Wb2 + buf * kC * kLdD, kLdD, s.W + off, hst, info.len, dk);
    load_tile_async<kC, kD>(Kb2 + buf * kC * kLdD, kLdD, s.Kd + off, hst, info.len, dk);
  };
  // This lane's accumulator coordinates: rows (state rows / value channels) r0 + g, r0 + g + 8; columns 2t, 2t + 1
  // of each 8-wide tile (key dims for the state, tokens for Uᵀ). In the strip, Uᵀ element (row c, token i) is at
  // i·kLdStrip + c: this lane's elements are at lane_strip + (8j + e % 2)·kLdStrip + 8(e / 2).
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
  const int ra = r0 + g, rb = r0 + g + 8;
  float* lane_strip = strip_sm + t2 * kLdStrip + g;

  // The state strip: S[n] holds key columns 8n..8n+7.
  FragC S[kD / 8];
  const int64_t state_off = ((seq * p.Hv + h) * p.dv) * p.dk;
#pragma unroll
  for (int n = 0; n < kD / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int a = e < 2 ? ra : rb, d = 8 * n + t2 + (e % 2);
      S[n].r[e] = (p.h0 && a < dv && d < dk) ? p.h0[state_off + static_cast<int64_t>(a) * p.dk + d] : 0.0f;
    }

  const int64_t first = s.seq_first[seq], last = s.seq_first[seq + 1];
  ChunkInfo next = first < last ? s.table[first] : ChunkInfo{0, 0, 0};
  if (first < last) {
    issue(next, 0);
    strip.load(u_head + next.t0 * ust, next.len);
  }
  cp_async_commit();
  for (int64_t ci = first; ci < last; ++ci) {
    const int buf = static_cast<int>((ci - first) & 1);
    const ChunkInfo info = next;
    const int len = info.len;
    const float gc = s.gam[(info.t0 + len - 1) * p.Hv + h];
    if (ci + 1 < last) next = s.table[ci + 1];
    cp_async_wait<0>();  // this thread's copies of chunk ci (W, Kd, Ũ strip) have landed
    __syncthreads();     // everyone's have; everyone is done with chunk ci − 1 (the other buffer is free)
    if (ci + 1 < last) issue(next, buf ^ 1);
    cp_async_commit();
    const gdn_mma::saddr_t wl = w_lane + buf * kTileBytes, kl = k_lane + buf * kTileBytes;

    // Uᵀ = Ũᵀ − M0 Wᵀ: the accumulators start as Ũᵀ (from the strip); M0 (bf16) to the per-chunk states on the way.
    FragC U[kC / 8];
#pragma unroll
    for (int j = 0; j < kC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) U[j].r[e] = lane_strip[(8 * j + e % 2) * kLdStrip + 8 * (e / 2)];
    bf16* m0a = s.states + (ci * p.Hv + h) * p.dv * p.dk + static_cast<int64_t>(ra) * p.dk;  // row ra; rb 8 rows on
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {  // key dims 16kk..16kk+15
      const FragA A = gdn_mma::a_from_acc(S[2 * kk], S[2 * kk + 1], -1.0f);  // bf16(−M0) = −bf16(M0)
#pragma unroll
      for (int x = 0; x < 4; ++x) {  // A.r[x]: row x % 2 ? rb : ra, columns 16kk + t2 + 8(x / 2), +1
        const int a = x % 2 ? rb : ra, d = 16 * kk + t2 + 8 * (x / 2);
        if (a < dv && d < dk) {
          const uint32_t bits = A.r[x] ^ 0x80008000u;  // both signs flipped back: bf16(M0)
          bf16* dst = m0a + (x % 2) * 8 * p.dk + d;
          if (dk % 2 == 0) {  // d even, so d + 1 < dk and the pair is 4-byte aligned
            *reinterpret_cast<uint32_t*>(dst) = bits;
          } else {
            *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(bits & 0xffffu);
            if (d + 1 < dk) *reinterpret_cast<uint16_t*>(dst + 1) = static_cast<uint16_t>(bits >> 16);
          }
        }
      }
#pragma unroll
      for (int jj = 0; jj < kC / 16; ++jj) {  // tokens 16jj..16jj+15
        FragB b[2];
        gdn_mma::load_b2(b, wl + 2 * ((16 * jj) * kLdD + 16 * kk));
        gdn_mma::mma_16816(U[2 * jj], A, b[0]);
        gdn_mma::mma_16816(U[2 * jj + 1], A, b[1]);
      }
    }
    // U: through the strip to global (in place of Ũ), and as bf16 A operands (tokens 16kk..16kk+15 as k).
    __syncwarp();  // every lane has read its Ũ from the strip
#pragma unroll
    for (int j = 0; j < kC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) lane_strip[(8 * j + e % 2) * kLdStrip + 8 * (e / 2)] = U[j].r[e];
    FragA UA[kC / 16];
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk) UA[kk] = gdn_mma::a_from_acc(U[2 * kk], U[2 * kk + 1]);
    __syncwarp();
    strip.store(s.U + info.t0 * ust + static_cast<int64_t>(h) * p.dv, len);
    __syncwarp();  // the strip is read: the next chunk's Ũ may land in it
    if (ci + 1 < last) strip.load(u_head + next.t0 * ust, next.len);
    cp_async_commit();

    // M ← e^{γ_c} M + Uᵀ Kd.
    const float decay = expf(gc);
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[n].r[e] *= decay;
#pragma unroll
    for (int jj = 0; jj < kD / 16; ++jj)  // key dims 16jj..16jj+15
#pragma unroll
      for (int kk = 0; kk < kC / 16; ++kk) {  // tokens 16kk..
        FragB b[2];
        gdn_mma::load_b2_trans(b, kl + 2 * ((16 * kk) * kLdD + 16 * jj));
        gdn_mma::mma_16816(S[2 * jj], UA[kk], b[0]);
        gdn_mma::mma_16816(S[2 * jj + 1], UA[kk], b[1]);
      }
  }
  if (hT) {
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int a = e < 2 ? ra : rb, d = 8 * n + t2 + (e % 2);
        if (a < dv && d < dk) hT[state_off + static_cast<int64_t>(a) * p.dk + d] = S[n].r[e];
      }
  }
}

// ---- output_v2: per (chunk, v-head), O = scale · (diag(e^γ) Q M0ᵀ + (Q Kᵀ ⊙ Γ) U)

// 8 warps: warp w takes query rows 16(w % 4).. (strip ws) and value columns 64(w / 4).. (half hf); the strip's
// Q Kᵀ is computed by both of its warps (64 key columns; tiles wholly above the diagonal skipped), masked and decayed
// on the fragments and re-packed as the A operand of the U product, so the only block barrier is after the loads.
// Shared memory (87,296 B, two blocks per SM): Qb, Kb, Ub [64][kLdD] and M0 [128][kLdD] bf16, γ [64].
constexpr int kOutV2Threads = 256;
constexpr size_t kOutV2Smem = 3 * smem_piece<bf16>(kC * kLdD) + smem_piece<bf16>(kD * kLdD) + smem_piece<float>(kC);
static_assert(blocks_fit_per_sm(kOutV2Smem, 2), "output_v2: two blocks per SM");

__global__ void __launch_bounds__(kOutV2Threads, 2) output_v2_kernel(Problem p, ForwardScratch s, float* o) {
  const ChunkHead c = chunk_head(p, s.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Qb = sc.take<bf16>(kC * kLdD);
  bf16* Kb = sc.take<bf16>(kC * kLdD);
  bf16* Ub = sc.take<bf16>(kC * kLdD);
  bf16* Mb = sc.take<bf16>(kD * kLdD);  // M0 [dv][dk]
  float* gam = sc.take<float>(kC);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t qst = p.Hk * p.dk, ust = p.Hv * p.dv;

  load_tile_async<kD, kD>(Mb, kLdD, s.states + (ci * p.Hv + h) * p.dv * p.dk, p.dk, dv, dk);
  cp_async_commit();
  if (tid < kC) gam[tid] = s.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  load_tile_bf16<kC, kD>(Qb, kLdD, p.q + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Kb, kLdD, p.k + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Ub, kLdD, s.U + (t0 * p.Hv + h) * p.dv, ust, len, dv, NoScale{});
  cp_async_wait<0>();
  __syncthreads();

  const int warp = tid / 32, ws = warp % 4, hf = warp / 4;
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
  const int ia = 16 * ws + g, ib = ia + 8;  // this lane's query rows
  const gdn_mma::saddr_t q_lane = gdn_mma::smem_addr(Qb + (16 * ws) * kLdD + gdn_mma::lane_off_a(kLdD));
  const gdn_mma::saddr_t k_lane = gdn_mma::smem_addr(Kb + gdn_mma::lane_off_b2(kLdD));
  const gdn_mma::saddr_t m_lane = gdn_mma::smem_addr(Mb + (64 * hf) * kLdD + gdn_mma::lane_off_b2(kLdD));
  const gdn_mma::saddr_t u_lane = gdn_mma::smem_addr(Ub + 64 * hf + gdn_mma::lane_off_b2_trans(kLdD));

  // A = Q Kᵀ ⊙ Γ over key tiles 0..2ws+1 (the rest is above the diagonal), as bf16 A operands by 16 keys.
  FragA A2[kC / 16];
  {
    FragC S[kC / 8];
#pragma unroll
    for (int n = 0; n < kC / 8; ++n) gdn_mma::zero(S[n]);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      FragA a;
      gdn_mma::load_a(a, q_lane + 2 * 16 * kk);
#pragma unroll
      for (int jj = 0; jj < kC / 16; ++jj)
        if (jj <= ws) {
          FragB b[2];
          gdn_mma::load_b2(b, k_lane + 2 * ((16 * jj) * kLdD + 16 * kk));
          gdn_mma::mma_16816(S[2 * jj], a, b[0]);
          gdn_mma::mma_16816(S[2 * jj + 1], a, b[1]);
        }
    }
    const float ga = gam[ia], gb = gam[ib];
#pragma unroll
    for (int n = 0; n < kC / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e < 2 ? ia : ib, j = 8 * n + t2 + (e % 2);
        // Exponents only for j ≤ i (≤ 0 when g ≤ 0); rows ≥ len are zero anyway (q rows are zero there).
        S[n].r[e] = (j <= i && i < len) ? S[n].r[e] * expf((e < 2 ? ga : gb) - gam[j]) : 0.0f;
      }
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk) A2[kk] = gdn_mma::a_from_acc(S[2 * kk], S[2 * kk + 1]);
  }

  // O = diag(e^γ) (Q M0ᵀ) + A U over value columns 64hf.. (8 tiles of 8).
  FragC O[8];
#pragma unroll
  for (int n = 0; n < 8; ++n) gdn_mma::zero(O[n]);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {  // key dims
    FragA a;
    gdn_mma::load_a(a, q_lane + 2 * 16 * kk);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      FragB b[2];
      gdn_mma::load_b2(b, m_lane + 2 * ((16 * jj) * kLdD + 16 * kk));  // B[d][a] = M0[a][d]
      gdn_mma::mma_16816(O[2 * jj], a, b[0]);
      gdn_mma::mma_16816(O[2 * jj + 1], a, b[1]);
    }
  }
  const float ea = expf(gam[ia]), eb = expf(gam[ib]);
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    O[n].r[0] *= ea, O[n].r[1] *= ea;
    O[n].r[2] *= eb, O[n].r[3] *= eb;
  }
#pragma unroll
  for (int kk = 0; kk < kC / 16; ++kk)  // tokens 16kk.. (only up to the strip's diagonal)
    if (kk <= ws) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        FragB b[2];
        gdn_mma::load_b2_trans(b, u_lane + 2 * ((16 * kk) * kLdD + 16 * jj));  // B[i][a] = U[i][a]
        gdn_mma::mma_16816(O[2 * jj], A2[kk], b[0]);
        gdn_mma::mma_16816(O[2 * jj + 1], A2[kk], b[1]);
      }
    }
  float* o_head = o + (t0 * p.Hv + h) * p.dv;
  const bool pairs = dv % 2 == 0 && reinterpret_cast<uintptr_t>(o) % 8 == 0 && ust % 2 == 0;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // rows ia, ib
      const int i = half ? ib : ia, a = 64 * hf + 8 * n + t2;
      if (i >= len || a >= dv) continue;
      float* dst = o_head + i * ust + a;
      const float x0 = p.scale * O[n].r[2 * half], x1 = p.scale * O[n].r[2 * half + 1];
      if (pairs) {
        *reinterpret_cast<float2*>(dst) = make_float2(x0, x1);
      } else {
        dst[0] = x0;
        if (a + 1 < dv) dst[1] = x1;
      }
    }
}

}  // namespace

}  // namespace hlm::gdn_chunked::fwd_v2
