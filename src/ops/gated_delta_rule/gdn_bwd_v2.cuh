// Chunked gated delta rule on CUDA, backward: the scratch the backward kernels share (BackwardScratch, written and
// read by v1 and v2 alike, same meaning) and the v2 kernels, selected by HLM_GDN_KERNELS=v2 in
// gated_delta_rule_chunked_bwd.cu. Included by that file after gdn_chunked_tiles.cuh, and by the CPU emulation
// (tools/cuda_emu/gdn_bwd_emu.sh) after an emulated prelude, so it uses nothing but that header's tiles and loaders
// and gdn_mma_bwd.cuh's primitives.
//
// v2 design (what differs from v1's wmma kernels): products are mma.sync m16n8k16 (gdn_mma.cuh) with fp32
// accumulators kept in registers; each warp owns a 16-row strip of the chunk (A operands that only it reads, dO and
// dU in dqk, come straight from global memory into A fragments); masks, decays and the row/column sums of dγ, dβ
// are applied on the accumulator fragments (lane shuffles); a product feeding the next one is re-packed to bf16 in
// registers (du_local) or re-stored once as bf16 (dqk's Pm, wy's X and Y, EG); shared tiles are bf16 only (no fp32
// staging of products) and read by ldmatrix; products skip the k-tiles and n-tiles a triangular operand (R, the
// causal masks, EG) makes zero; kFull instantiations (dk = dv = 128) drop the column guards. Same scratch contents,
// same outputs as v1 (bf16-sized differences only), except that with dstate, dqk and wy all v2 the full dU is held
// as bf16 (kDuBf16 instantiations, BackwardScratch::dUh; bit-identical outputs, half dU's bytes). Barriers per block: du_local 1, dqk 5, wy 6 (v1: ~8-14);
// dstate 2 per chunk with two buffers, 3 with one (v1: 4).
//
//   kernel    threads  smem (B) blocks/SM  registers (ptxas, kFull)   v1 (session 23 ncu, B8×T1024 H32)
//   du_local  128      52,480   4          128                        256 thr, 95 KB, 2 blocks, 272 µs
//   dstate    128/256  71,168   3 (1 buf)  150/151 (two buffers, 256 threads: 133/137; session 25)
//                                                                         128 thr, 98 KB, 2 blocks, 144 r, 631 µs
//   dqk       256      99,200   2          128 (8 B spill / none)     256 thr, 114 KB, 2 blocks, 1.09 ms
//   wy        256      109,056  2          128                        256 thr, 114 KB, 2 blocks, 722 µs
// (a/b: fp32 dU / bf16 dU. Not kFull: dstate 126/110 and 128/128 registers, dqk 32/20 B spill, wy 0/4 B spill.)
//
// du_local_v2 (per chunk and v-head, 4 warps, warp w = key rows j = 16w..): Aᵀ strip = K Qᵀ · scale·e^{γ_i − γ_j}
// for j ≤ i < len on the accumulators, re-packed to A fragments, times dO → dU_loc; dO also copied to bf16 (dOh).
//
// dstate_v2 (per sequence, v-head and 32 state rows, 4 warps with one chunk buffer, 8 with two; reverse over chunks):
// D = dL/dM [32][128] in fp32 accumulators for the whole pass (4 warps: warp w rows 16(w % 2), columns 64(w / 2);
// 8 warps: 32-column quarters); per chunk D → bf16 (shared, and the scratch as D leaving the chunk), Pf = Kd Dᵀ
// (warp w: rows i = 16(w % 4), all 32 columns a, or with 8 warps half of them), dU = dU_loc + Pf in place (fp32, or with
// kDuBf16 bf16 over dU_loc's bytes) and −dU (bf16) shared, D ← e^{γ_c} D + dOᵀ Qd − dUᵀ W with dOᵀ, −dUᵀ by
// ldmatrix.trans. The next chunk's tiles by cp.async into a second buffer when the grid is small
// (state_pass_buffers), as v1. The row tiles of a (sequence, head) are neighbours in the (one-dimensional) grid, so
// they run together and share the chunk tiles through L2.
//
// dqk_v2 (per chunk and v-head, 8 warps: strip s = warp % 4 (rows 16s..16s+15), half hf = warp / 4):
//   P1  Q Kᵀ and dO Uᵀ for the strip × columns 32hf..32hf+31 → Pm = scale·(dO Uᵀ) ⊙ Γ on the fragments, Pm ⊙ QK
//       row sums (rs) and column sums (cs) by lane shuffles, Pm (bf16) to shared memory
//   P2  dq = scale·diag(e^γ) dO M0 + Pm K for the strip × columns 64hf..64hf+63 (dγ gets q_i · first term)
//   P3  dW = −dU M0 (same tile), then M0's tile becomes D (and ⟨M0, D⟩ on the way)
//   P4  dk = diag(e^{γ_c − γ}) U D + Pmᵀ Q (B_i = k_i · first term), then dγ assembled per row
// Shared memory: Q, K, U (bf16 [64][136]), M0 → D (bf16 [128][136]), Pm (bf16 [64][72]), per-row partial sums.
//
// wy_v2: see its comment below (8 warps as dqk_v2; Y = Rᵀ dU, X = Rᵀ dW; E' and K Kᵀ; EG; dk, dβ, dγ, dg).
//
// Checked on the CPU: tools/cuda_emu/gdn_bwd_emu.sh runs all four (du_local → dstate → dqk → wy) on tiny shapes
// against the CPU chunked backward.
#pragma once

namespace hlm::gdn_chunked {

// The backward's scratch after the forward's (Carver order in carve_backward is the layout).
struct BackwardScratch {
  bf16* dstates;  // [max_chunks, Hv, dv, dk] D leaving each chunk
  float* dU;      // [T, Hv, dv]  scale·Aᵀ dO, then the full dU
  bf16* dW;       // [T, Hv, dk]
  float* dkp;     // [T, Hv, dk]  output/state part of dk, then (Hv > Hk) the full per-v-head dk
  float* dgp;     // [T, Hv]      output/state part of dγ
  float* dqv;     // [T, Hv, dk]  per-v-head dq (Hv > Hk only)
  bf16* dOh;      // [T, Hv, dv]  dO in bf16 (written by dU_loc; operand of the reverse pass and dqk)
  // Non-null (set by the launcher when dstate, dqk and wy are all v2): dstate_v2 leaves the full dU as bf16 in dU's
  // own bytes (dUh == (bf16*)dU, layout du_h_index) instead of fp32, and dqk_v2, wy_v2 read it from there. dU_loc
  // stays fp32 (dstate adds it to K̃ Dᵀ in fp32); every reader of the full dU rounds it to bf16 first, so the results
  // are bit-identical to the fp32 dU's (checked by gdn_bwd_emu.sh) with half the bytes written and read.
  // The kernels' template flag kDuBf16 (true exactly when dUh is set) picks the path at compile time.
  bf16* dUh = nullptr;
};

// bf16 index in dUh of dU[row][a] (row = t·Hv + h, a < dv): each group of kBV = 32 columns keeps its fp32 bytes
// (row·dv + 32q .. +31 floats) and holds its 32 bf16 in the first half of them. dstate_v2's block for columns
// a0..a0+31 so overwrites only the dU_loc values it has itself read (no race with the other column tiles).
__host__ __device__ constexpr int64_t du_h_index(int64_t row, int64_t dv, int64_t a) {
  return 2 * row * dv + a + kBV * (a / kBV);
}

struct Grads {
  float *dq, *dk, *dv, *dg, *dbeta, *dh0;
  const float *d_o, *d_hT;
};

namespace {

namespace v2 {

using mma::FragA;
using mma::FragB;
using mma::FragC;

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Stores the strip's accumulators acc[n] (n-tile n covers columns c0 + 8n ..) to dst rows (row stride `stride`),
// rows < len and columns < width only, each value x of row i as op(x, i). pairs: width and stride even (two-element
// stores).
template <int N, typename Dst, typename Op>
__device__ __forceinline__ void store_strip(Dst* dst, int64_t stride, const FragC (&acc)[N], int row0, int c0,
                                            int len, int width, bool pairs, Op op) {
  const int l = mma::lane_id(), g = l / 4, t = l % 4;
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = row0 + g + 8 * half, col = c0 + 8 * n + 2 * t;
      if (i >= len || col >= width) continue;
      Dst* p = dst + i * stride + col;
      const float x0 = op(acc[n].r[2 * half], i), x1 = op(acc[n].r[2 * half + 1], i);
      if constexpr (sizeof(Dst) == 4) {
        if (pairs) {
          *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
        } else {
          p[0] = x0;
          if (col + 1 < width) p[1] = x1;
        }
      } else {
        if (pairs) {
          *reinterpret_cast<uint32_t*>(p) = mma::pack_bf16x2(x0, x1);
        } else {
          p[0] = __float2bfloat16_rn(x0);
          if (col + 1 < width) p[1] = __float2bfloat16_rn(x1);
        }
      }
    }
}

// Σ over the strip's columns of acc[n] · rows of X (bf16 [.][ldx], columns c0 + 8n + 2t ..), per accumulator row:
// (row g, row g + 8), complete in every lane of the group.
template <int N>
__device__ __forceinline__ void strip_row_dots(float& lo, float& hi, const FragC (&acc)[N], const bf16* X, int ldx,
                                               int row0, int c0) {
  const int l = mma::lane_id(), g = l / 4, t = l % 4;
  lo = 0.0f;
  hi = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int col = c0 + 8 * n + 2 * t;
    const uint32_t xl = *reinterpret_cast<const uint32_t*>(X + (row0 + g) * ldx + col);
    const uint32_t xh = *reinterpret_cast<const uint32_t*>(X + (row0 + g + 8) * ldx + col);
    lo += acc[n].r[0] * mma::bf16_lo(xl) + acc[n].r[1] * mma::bf16_hi(xl);
    hi += acc[n].r[2] * mma::bf16_lo(xh) + acc[n].r[3] * mma::bf16_hi(xh);
  }
  lo = mma::group_sum(lo);
  hi = mma::group_sum(hi);
}

// acc[0..N) (+)= A(strip rows, k-tiles 0..KT) · B[k][c0 .. c0 + 8N) with B row-major [k][n] in shared memory and
// the A fragments given by a(kt).
// kStep k-tiles per (not unrolled) outer step when kStep < KT: bounds how many A loads from global are in flight
// (registers), where a(kt) loads; kStep = KT unrolls everything (a(kt) may then index a register array). Only
// k-tiles kt0 ≤ kt < kt1 (warp-uniform) are multiplied: the others are known zeros of a triangular operand.
template <int KT, int N, int kStep = KT, typename AFn>
__device__ __forceinline__ void strip_mma_kn(FragC (&acc)[N], AFn a, const bf16* B, int ldb, int c0, int kt0 = 0,
                                             int kt1 = KT) {
  static_assert(N % 2 == 0 && KT % kStep == 0, "n-tiles in pairs, whole steps");
#pragma unroll 1
  for (int k1 = 0; k1 < KT; k1 += kStep) {
    FragA af[kStep];
#pragma unroll
    for (int u = 0; u < kStep; ++u)
      if (k1 + u >= kt0 && k1 + u < kt1) af[u] = a(k1 + u);
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      if (k1 + u < kt0 || k1 + u >= kt1) continue;
#pragma unroll
      for (int np = 0; np < N / 2; ++np) {
        FragB b0, b1;
        mma::lds_b_kn(b0, b1, B, ldb, 16 * (k1 + u), c0 + 16 * np);
        mma::mma_bf16(acc[2 * np], af[u], b0);
        mma::mma_bf16(acc[2 * np + 1], af[u], b1);
      }
    }
  }
}

// The strip's accumulators as bf16 into a shared tile (row-major, ld), rows row0.., columns c0 + 8n ...
template <int N>
__device__ __forceinline__ void strip_to_smem(bf16* dst, int ld, const FragC (&acc)[N], int row0, int c0) {
  const int l = mma::lane_id(), g = l / 4, t = l % 4;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int col = c0 + 8 * n + 2 * t;
    *reinterpret_cast<uint32_t*>(dst + (row0 + g) * ld + col) = mma::pack_bf16x2(acc[n].r[0], acc[n].r[1]);
    *reinterpret_cast<uint32_t*>(dst + (row0 + g + 8) * ld + col) = mma::pack_bf16x2(acc[n].r[2], acc[n].r[3]);
  }
}

// Row dot products of the strip's accumulators with rows of a global fp32 matrix (row stride `stride`; rows < len,
// columns < width), per accumulator row (row g, row g + 8), complete in every lane of the group. kFull: width = 128.
template <bool kFull, int N>
__device__ __forceinline__ void strip_row_dots_global(float& lo, float& hi, const FragC (&acc)[N], const float* X,
                                                      int64_t stride, int row0, int c0, int len, int width) {
  const int l = mma::lane_id(), g = l / 4, t = l % 4;
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row0 + g + 8 * half;
    const float* row = X + min(i, len - 1) * stride;
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int col = c0 + 8 * n + 2 * t;
      float x0 = 0.0f, x1 = 0.0f;
      if constexpr (kFull) {
        const float2 v = __ldg(reinterpret_cast<const float2*>(row + col));
        x0 = v.x;
        x1 = v.y;
      } else {
        if (col < width) x0 = row[col];
        if (col + 1 < width) x1 = row[col + 1];
      }
      sum[half] += acc[n].r[2 * half] * x0 + acc[n].r[2 * half + 1] * x1;
    }
    if (i >= len) sum[half] = 0.0f;
  }
  lo = mma::group_sum(sum[0]);
  hi = mma::group_sum(sum[1]);
}

// ---- dqk_v2

constexpr size_t kTileB = smem_piece<bf16>(kC * kLdD);
constexpr size_t kDqkQ = 0, kDqkK = kDqkQ + kTileB, kDqkU = kDqkK + kTileB, kDqkS = kDqkU + kTileB;
constexpr size_t kDqkP = kDqkS + smem_piece<bf16>(kD * kLdD), kDqkV = kDqkP + smem_piece<bf16>(kC * kLdC);
// gam, rs[2][64], dgo[2][64], bs[2][64], cs[4][64], red[kWarps]
constexpr size_t kDqkSmem = kDqkV + smem_piece<float>(kC + 2 * kC * 3 + 4 * kC + kWarps);
static_assert(blocks_fit_per_sm(kDqkSmem, 2), "dqk_v2: two blocks per SM");

// kFull: dk = dv = 128 (the model's shape; loads and stores without column guards); else any dims ≤ 128.
template <bool kFull, bool kDuBf16>
__global__ void __launch_bounds__(kThreads, 2) dqk_kernel(Problem p, ForwardScratch fs, BackwardScratch bs, Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem + kDqkQ);
  bf16* Ks = reinterpret_cast<bf16*>(smem + kDqkK);
  bf16* Us = reinterpret_cast<bf16*>(smem + kDqkU);
  bf16* Ss = reinterpret_cast<bf16*>(smem + kDqkS);  // M0 [dv][dk], then D
  bf16* Ps = reinterpret_cast<bf16*>(smem + kDqkP);  // Pm [i][j]
  float* gam = reinterpret_cast<float*>(smem + kDqkV);
  float* rs = gam + kC;      // [hf][i]  Σ_j Pm_ij QK_ij over the half's columns
  float* dgo = rs + 2 * kC;  // [hf][i]  q_i · (scale e^{γ_i} M0ᵀ dO_i) over the half's columns
  float* bsv = dgo + 2 * kC;  // [hf][i]  k_i · (e^{γ_c − γ_i} Dᵀ U_i) over the half's columns
  float* cs = bsv + 2 * kC;  // [s][j]   Σ_i Pm_ij QK_ij over the strip's rows
  float* red = cs + 4 * kC;  // [warp]   ⟨M0, D⟩ partials
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int s = warp % 4, hf = warp / 4, r0 = 16 * s;
  const int i_lo = r0 + g, i_hi = r0 + g + 8;
  const float* q0 = p.q + (t0 * p.Hk + hk) * p.dk;
  const float* k0 = p.k + (t0 * p.Hk + hk) * p.dk;
  const int64_t qst = p.Hk * p.dk, vst = p.Hv * p.dv, wst = p.Hv * p.dk;
  const int64_t v_off = (t0 * p.Hv + h) * p.dv, w_off = (t0 * p.Hv + h) * p.dk;
  const bool dk_pairs = kFull || dk % 2 == 0;

  if (tid < kC) gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  load_tile_async<kD, kD>(Ss, kLdD, fs.states + (ci * p.Hv + h) * p.dv * p.dk, p.dk, dv, dk);  // M0
  cp_async_commit();
  load_tile_bf16<kC, kD>(Qs, kLdD, q0, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Ks, kLdD, k0, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Us, kLdD, fs.U + v_off, vst, len, dv, NoScale{});
  FragA ado[kD / 16];  // the strip's dO (bf16 in the scratch), A of dO Uᵀ and dO M0
#pragma unroll
  for (int kt = 0; kt < kD / 16; ++kt) ado[kt] = mma::ldg_a<kFull>(bs.dOh + v_off, vst, r0, 16 * kt, len, dv);
  __syncthreads();  // gam, Q, K, U
  const float gc = gam[len - 1], g_lo = gam[i_lo], g_hi = gam[i_hi];

  // P1: QK and P = dO Uᵀ over columns j0 .. j0 + 31; Pm on the fragments.
  const int j0 = 32 * hf;
  FragC qk[4], pm[4];
  mma::zero(qk);
  mma::zero(pm);
#pragma unroll
  for (int kt = 0; kt < kD / 16; ++kt) {
    const FragA aq = mma::lds_a(Qs, kLdD, r0, 16 * kt);
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      FragB b0, b1;
      mma::lds_b_nk(b0, b1, Ks, kLdD, 16 * kt, j0 + 16 * np);
      mma::mma_bf16(qk[2 * np], aq, b0);
      mma::mma_bf16(qk[2 * np + 1], aq, b1);
      mma::lds_b_nk(b0, b1, Us, kLdD, 16 * kt, j0 + 16 * np);
      mma::mma_bf16(pm[2 * np], ado[kt], b0);
      mma::mma_bf16(pm[2 * np + 1], ado[kt], b1);
    }
  }
  float rs_lo = 0.0f, rs_hi = 0.0f;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    float col[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = j0 + 8 * n + 2 * t + e;
      const float gj = gam[j];
      const float lo = (j <= i_lo && i_lo < len) ? p.scale * pm[n].r[e] * expf(g_lo - gj) : 0.0f;
      const float hi = (j <= i_hi && i_hi < len) ? p.scale * pm[n].r[2 + e] * expf(g_hi - gj) : 0.0f;
      pm[n].r[e] = lo;
      pm[n].r[2 + e] = hi;
      rs_lo += lo * qk[n].r[e];
      rs_hi += hi * qk[n].r[2 + e];
      col[e] = lo * qk[n].r[e] + hi * qk[n].r[2 + e];
    }
    const int j = j0 + 8 * n + 2 * t;
    *reinterpret_cast<uint32_t*>(Ps + i_lo * kLdC + j) = mma::pack_bf16x2(pm[n].r[0], pm[n].r[1]);
    *reinterpret_cast<uint32_t*>(Ps + i_hi * kLdC + j) = mma::pack_bf16x2(pm[n].r[2], pm[n].r[3]);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float v = mma::column_sum(col[e]);
      if (g == 0) cs[s * kC + j + e] = v;
    }
  }
  rs_lo = mma::group_sum(rs_lo);
  rs_hi = mma::group_sum(rs_hi);
  if (t == 0) {
    rs[hf * kC + i_lo] = rs_lo;
    rs[hf * kC + i_hi] = rs_hi;
  }
  cp_async_wait<0>();
  __syncthreads();  // Pm, M0

  // P2: dq = scale·diag(e^γ) dO M0 + Pm K over columns d0 .. d0 + 63.
  const int d0 = 64 * hf;
  FragC acc[8];
  mma::zero(acc);
  strip_mma_kn<kD / 16>(acc, [&](int kt) { return ado[kt]; }, Ss, kLdD, d0);
  {
    const float f_lo = i_lo < len ? p.scale * expf(g_lo) : 0.0f, f_hi = i_hi < len ? p.scale * expf(g_hi) : 0.0f;
    mma::scale_rows(acc, f_lo, f_hi);
    float lo, hi;
    strip_row_dots(lo, hi, acc, Qs, kLdD, r0, d0);
    if (t == 0) {
      dgo[hf * kC + i_lo] = lo;
      dgo[hf * kC + i_hi] = hi;
    }
  }
  strip_mma_kn<kC / 16>(acc, [&](int kt) { return mma::lds_a(Ps, kLdC, r0, 16 * kt); }, Ks, kLdD, d0);
  if (p.group() > 1)
    store_strip(bs.dqv + w_off, wst, acc, r0, d0, len, dk, dk_pairs, [](float x, int) { return x; });
  else
    store_strip(gr.dq + (t0 * p.Hk + hk) * p.dk, qst, acc, r0, d0, len, dk, dk_pairs, [](float x, int) { return x; });

  // P3: dW = −dU M0 (dU, fp32 or bf16 (bs.dUh), from the scratch straight into A fragments). kFull: D's tile (bf16, 8 × 16 B per
  // thread) is loaded into registers before dW's stores and the barrier instead of after them.
  const bf16* Dg = bs.dstates + (ci * p.Hv + h) * p.dv * p.dk;
  constexpr int kDVecs = kD * kD / 8 / kThreads;  // 8
  uint4 dreg[kFull ? kDVecs : 1];
  mma::zero(acc);
  if constexpr (kDuBf16)  // bf16 dU (du_h_index: k-tile kt lies in one column group)
    strip_mma_kn<kD / 16, 8, 2>(
        acc,
        [&](int kt) {
          return mma::ldg_a<kFull>(bs.dUh + du_h_index(t0 * p.Hv + h, p.dv, 0) + kBV * (16 * kt / kBV), 2 * vst, r0,
                                   16 * kt, len, dv);
        },
        Ss, kLdD, d0);
  else
    strip_mma_kn<kD / 16, 8, 2>(
        acc, [&](int kt) { return mma::ldg_a<kFull>(bs.dU + v_off, vst, r0, 16 * kt, len, dv); }, Ss, kLdD, d0);
  if constexpr (kFull) {
#pragma unroll
    for (int u = 0; u < kDVecs; ++u) {
      const int idx = tid + u * kThreads;  // row idx / 16, columns (idx % 16)·8 ..
      dreg[u] = __ldg(reinterpret_cast<const uint4*>(Dg + (idx / 16) * kD + (idx % 16) * 8));
    }
  }
  store_strip(bs.dW + w_off, wst, acc, r0, d0, len, dk, dk_pairs, [](float x, int) { return -x; });
  __syncthreads();  // every warp is done with M0: its tile becomes D
  float md = 0.0f;
  const auto put_d = [&](int r, int d, const bf16* v, int n) {
    for (int e = 0; e < n; ++e) {
      md += static_cast<float>(Ss[r * kLdD + d + e]) * static_cast<float>(v[e]);
      Ss[r * kLdD + d + e] = v[e];
    }
  };
  if constexpr (kFull) {
#pragma unroll
    for (int u = 0; u < kDVecs; ++u) {
      const int idx = tid + u * kThreads;
      put_d(idx / 16, (idx % 16) * 8, reinterpret_cast<const bf16*>(&dreg[u]), 8);
    }
  } else {
    for_tile<kD, kD>(Dg, p.dk, dv, dk, put_d);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) md += __shfl_xor_sync(0xffffffffu, md, off);
  if (lane == 0) red[warp] = md;
  __syncthreads();  // D

  // P4: dk = diag(e^{γ_c − γ}) U D + Pmᵀ Q over columns d0 .. d0 + 63.
  mma::zero(acc);
  strip_mma_kn<kD / 16>(acc, [&](int kt) { return mma::lds_a(Us, kLdD, r0, 16 * kt); }, Ss, kLdD, d0);
  {
    const float e_lo = i_lo < len ? expf(gc - g_lo) : 0.0f, e_hi = i_hi < len ? expf(gc - g_hi) : 0.0f;
    mma::scale_rows(acc, e_lo, e_hi);
    float lo, hi;
    strip_row_dots(lo, hi, acc, Ks, kLdD, r0, d0);
    if (t == 0) {
      bsv[hf * kC + i_lo] = lo;
      bsv[hf * kC + i_hi] = hi;
    }
  }
  strip_mma_kn<kC / 16>(acc, [&](int kt) { return mma::lds_a_trans(Ps, kLdC, r0, 16 * kt); }, Qs, kLdD, d0);
  store_strip(bs.dkp + w_off, wst, acc, r0, d0, len, dk, dk_pairs, [](float x, int) { return x; });
  __syncthreads();  // the per-row partial sums

  if (tid < len) {
    float dgi = rs[tid] + rs[kC + tid] - (cs[tid] + cs[kC + tid] + cs[2 * kC + tid] + cs[3 * kC + tid]) + dgo[tid] +
                dgo[kC + tid] - (bsv[tid] + bsv[kC + tid]);
    if (tid == len - 1) {
      float sum_b = 0.0f, md_all = 0.0f;
      for (int m = 0; m < len; ++m) sum_b += bsv[m] + bsv[kC + m];
      for (int w = 0; w < kWarps; ++w) md_all += red[w];
      dgi += sum_b + expf(gc) * md_all;
    }
    bs.dgp[(t0 + tid) * p.Hv + h] = dgi;
  }
}

// ---- wy_v2

// Shared memory: R (bf16 [64][72]), dU → Y and dW → X (bf16 [64][136], overwritten in place once every warp has read
// them), W, Ũ, K (bf16 [64][136]), diag(β) EG (bf16 [64][72]), per-row partial sums: 109,056 B, two blocks per SM.
constexpr size_t kWyR = 0, kWyY = kWyR + smem_piece<bf16>(kC * kLdC), kWyX = kWyY + kTileB, kWyW = kWyX + kTileB;
constexpr size_t kWyT = kWyW + kTileB, kWyK = kWyT + kTileB, kWyE = kWyK + kTileB;
constexpr size_t kWyV = kWyE + smem_piece<bf16>(kC * kLdC);
// gam, beta, yv[2][64], xk[2][64], rowE[2][64], colE[4][64], dgl, dgs
constexpr size_t kWySmem = kWyV + smem_piece<float>(16 * kC);
static_assert(blocks_fit_per_sm(kWySmem, 2), "wy_v2: two blocks per SM");

// Per (chunk, v-head), 8 warps as in dqk_v2 (strip s = warp % 4, half hf = warp / 4):
//   P1  Y = Rᵀ dU, X = Rᵀ dW for the strip × columns 64hf.. (R lower triangular: k-tiles ≥ s only): dv = diag(β) Y,
//       y·v and x·k on the fragments; then Y, X (bf16) in place of dU, dW; F = diag(βe^γ) X stays in registers
//   P2  E' = X Wᵀ + Y Ũᵀ and K Kᵀ for the strip × columns 32hf.. (skipped where j < i cannot occur): EG = −E' ⊙ Γ
//       strictly below the diagonal, EG ⊙ KK row sums (rowE) and β-weighted column sums (colE), diag(β) EG (bf16)
//   P3  F += diag(β) EG K + (diag(β) EG)ᵀ K; dk = dkp + F; dβ, dγ and dg (suffix sums)
//   GVA (Hv > Hk, kFull): dq summed over the group's v-heads (dqk_v2's per-v-head dq; the launcher drops dq's gva
//       pass)
template <bool kFull, bool kDuBf16>
__global__ void __launch_bounds__(kThreads, 2) wy_kernel(Problem p, ForwardScratch fs, BackwardScratch bs, Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  bf16* Rs = reinterpret_cast<bf16*>(smem + kWyR);
  bf16* Ys = reinterpret_cast<bf16*>(smem + kWyY);  // dU, then Y
  bf16* Xs = reinterpret_cast<bf16*>(smem + kWyX);  // dW, then X
  bf16* Ws = reinterpret_cast<bf16*>(smem + kWyW);
  bf16* Ts = reinterpret_cast<bf16*>(smem + kWyT);  // Ũ
  bf16* Ks = reinterpret_cast<bf16*>(smem + kWyK);
  bf16* Es = reinterpret_cast<bf16*>(smem + kWyE);  // diag(β) EG [i][j]
  float* gam = reinterpret_cast<float*>(smem + kWyV);
  float* beta = gam + kC;
  float* yv = beta + kC;      // [hf][i]
  float* xk = yv + 2 * kC;    // [hf][i]
  float* rowE = xk + 2 * kC;  // [hf][i]  Σ_j EG_ij KK_ij over the half's columns
  float* colE = rowE + 2 * kC;  // [s][j]   Σ_i β_i EG_ij KK_ij over the strip's rows
  float* dgl = colE + 4 * kC;
  float* dgs = dgl + kC;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int s = warp % 4, hf = warp / 4, r0 = 16 * s, d0 = 64 * hf, j0 = 32 * hf;
  const int i_lo = r0 + g, i_hi = r0 + g + 8;
  const float* k0 = p.k + (t0 * p.Hk + hk) * p.dk;
  const int64_t kst = p.Hk * p.dk, vst = p.Hv * p.dv, wst = p.Hv * p.dk;
  const int64_t v_off = (t0 * p.Hv + h) * p.dv, w_off = (t0 * p.Hv + h) * p.dk;
  const bool dk_pairs = kFull || dk % 2 == 0, dv_pairs = kFull || dv % 2 == 0;

  if (tid < kC) {
    gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
    beta[tid] = tid < len ? p.beta[(t0 + tid) * p.Hv + h] : 0.0f;
  }
  load_tile_async<kC, kC>(Rs, kLdC, fs.R + (ci * p.Hv + h) * kC * kC, kC, kC, kC);
  load_tile_async<kC, kD>(Xs, kLdD, bs.dW + w_off, wst, len, dk);
  load_tile_async<kC, kD>(Ws, kLdD, fs.W + w_off, wst, len, dk);
  load_tile_async<kC, kD>(Ts, kLdD, fs.Ut + v_off, vst, len, dv);
  cp_async_commit();
  // GVA (Hv > Hk), kFull, while the copies are in flight: dq of the k-head = Σ over its v-heads in order of dqk's
  // per-v-head dq (bs.dqv), the sum gva_kernel does in its own pass otherwise, with its float steps (from 0, v-head
  // order: the same bits). The group's G blocks of this chunk split the rows: v-head j sums rows j·len/G ..
  // (j + 1)·len/G − 1. (Not kFull: gva_kernel still; here it would cost the other dims' instantiations 12 B of spill.)
  if constexpr (kFull) {
    if (p.group() > 1) {
      const int G = static_cast<int>(p.group()), j = h % G, i0 = j * len / G, i1 = (j + 1) * len / G;
      const float* src = bs.dqv + (t0 * p.Hv + hk * G) * kD;
      float* dst = gr.dq + (t0 * p.Hk + hk) * kD;
      for (int idx = tid; idx < (i1 - i0) * kD; idx += kThreads) {
        const int i = i0 + idx / kD, d = idx % kD;
        float acc = 0.0f;
        for (int v = 0; v < G; ++v) acc += src[i * wst + v * kD + d];
        dst[i * kst + d] = acc;
      }
    }
  }
  if constexpr (kDuBf16) {  // bf16 dU: one [64][32] copy per column group (du_h_index)
    const bf16* du = bs.dUh + du_h_index(t0 * p.Hv + h, p.dv, 0);
#pragma unroll
    for (int q = 0; q < kD / kBV; ++q)
      load_tile_async<kC, kBV>(Ys + kBV * q, kLdD, du + 2 * kBV * q, 2 * vst, len, max(0, min(kBV, dv - kBV * q)));
    cp_async_commit();
  } else {
    load_tile_bf16<kC, kD>(Ys, kLdD, bs.dU + v_off, vst, len, dv, NoScale{});
  }
  load_tile_bf16<kC, kD>(Ks, kLdD, k0, kst, len, dk, NoScale{});
  cp_async_wait<0>();
  __syncthreads();  // gam, beta, tiles

  // P1: Y = Rᵀ dU, X = Rᵀ dW (A = Rᵀ: R[m][i] with m ≥ i, so k-tiles s..3).
  const auto r_t = [&](int kt) { return mma::lds_a_trans(Rs, kLdC, r0, 16 * kt); };
  FragC y[8], x[8];
  mma::zero(y);
  mma::zero(x);
  strip_mma_kn<kC / 16>(y, r_t, Ys, kLdD, d0, s);
  store_strip(gr.dv + v_off, vst, y, r0, d0, len, dv, dv_pairs, [&](float v, int i) { return beta[i] * v; });
  {
    float lo, hi;
    strip_row_dots_global<kFull>(lo, hi, y, p.v + v_off, vst, r0, d0, len, dv);
    if (t == 0) {
      yv[hf * kC + i_lo] = lo;
      yv[hf * kC + i_hi] = hi;
    }
  }
  strip_mma_kn<kC / 16>(x, r_t, Xs, kLdD, d0, s);
  {
    float lo, hi;
    strip_row_dots(lo, hi, x, Ks, kLdD, r0, d0);
    if (t == 0) {
      xk[hf * kC + i_lo] = lo;
      xk[hf * kC + i_hi] = hi;
    }
  }
  __syncthreads();  // every warp is done with dU and dW: Y and X take their places
  strip_to_smem(Ys, kLdD, y, r0, d0);
  strip_to_smem(Xs, kLdD, x, r0, d0);
  const float g_lo = gam[i_lo], g_hi = gam[i_hi];
  {
    const float f_lo = i_lo < len ? beta[i_lo] * expf(g_lo) : 0.0f, f_hi = i_hi < len ? beta[i_hi] * expf(g_hi) : 0.0f;
    mma::scale_rows(x, f_lo, f_hi);  // x becomes F = diag(β e^γ) X, the first WY term of dk
  }
  __syncthreads();  // X, Y

  // P2: E' = X Wᵀ + Y Ũᵀ, KK = K Kᵀ over columns j0 .. j0 + 31 (all zero after masking unless j0 < r0 + 16).
  FragC e[4], kk[4];
  mma::zero(e);
  mma::zero(kk);
  if (j0 < r0 + 16) {
#pragma unroll
    for (int kt = 0; kt < kD / 16; ++kt) {
      const FragA ax = mma::lds_a(Xs, kLdD, r0, 16 * kt), ay = mma::lds_a(Ys, kLdD, r0, 16 * kt);
      const FragA ak = mma::lds_a(Ks, kLdD, r0, 16 * kt);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        FragB b0, b1;
        mma::lds_b_nk(b0, b1, Ws, kLdD, 16 * kt, j0 + 16 * np);
        mma::mma_bf16(e[2 * np], ax, b0);
        mma::mma_bf16(e[2 * np + 1], ax, b1);
        mma::lds_b_nk(b0, b1, Ts, kLdD, 16 * kt, j0 + 16 * np);
        mma::mma_bf16(e[2 * np], ay, b0);
        mma::mma_bf16(e[2 * np + 1], ay, b1);
        mma::lds_b_nk(b0, b1, Ks, kLdD, 16 * kt, j0 + 16 * np);
        mma::mma_bf16(kk[2 * np], ak, b0);
        mma::mma_bf16(kk[2 * np + 1], ak, b1);
      }
    }
  }
  {
    const float b_lo = beta[i_lo], b_hi = beta[i_hi];
    float row_lo = 0.0f, row_hi = 0.0f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      float col[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int j = j0 + 8 * n + 2 * t + q;
        const float gj = gam[j];
        const float eg_lo = (j < i_lo && i_lo < len) ? -e[n].r[q] * expf(g_lo - gj) : 0.0f;
        const float eg_hi = (j < i_hi && i_hi < len) ? -e[n].r[2 + q] * expf(g_hi - gj) : 0.0f;
        const float ef_lo = eg_lo * kk[n].r[q], ef_hi = eg_hi * kk[n].r[2 + q];
        row_lo += ef_lo;
        row_hi += ef_hi;
        col[q] = b_lo * ef_lo + b_hi * ef_hi;
        e[n].r[q] = b_lo * eg_lo;
        e[n].r[2 + q] = b_hi * eg_hi;
      }
      const int j = j0 + 8 * n + 2 * t;
      *reinterpret_cast<uint32_t*>(Es + i_lo * kLdC + j) = mma::pack_bf16x2(e[n].r[0], e[n].r[1]);
      *reinterpret_cast<uint32_t*>(Es + i_hi * kLdC + j) = mma::pack_bf16x2(e[n].r[2], e[n].r[3]);
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float v = mma::column_sum(col[q]);
        if (g == 0) colE[s * kC + j + q] = v;
      }
    }
    row_lo = mma::group_sum(row_lo);
    row_hi = mma::group_sum(row_hi);
    if (t == 0) {
      rowE[hf * kC + i_lo] = row_lo;
      rowE[hf * kC + i_hi] = row_hi;
    }
  }
  __syncthreads();  // diag(β) EG, rowE, colE

  // P3: F += diag(β) EG K (columns j < i: k-tiles ≤ s) + (diag(β) EG)ᵀ K (rows i > j: k-tiles ≥ s).
  strip_mma_kn<kC / 16>(x, [&](int kt) { return mma::lds_a(Es, kLdC, r0, 16 * kt); }, Ks, kLdD, d0, 0, s + 1);
  strip_mma_kn<kC / 16>(x, [&](int kt) { return mma::lds_a_trans(Es, kLdC, r0, 16 * kt); }, Ks, kLdD, d0, s);
  // dk = the output/state part (dkp) + F: per k-head directly when Hv = Hk, else per v-head in place for the gva sum.
  {
    const bool direct = p.group() == 1;
    float* dst = direct ? gr.dk + t0 * kst + hk * p.dk : bs.dkp + w_off;
    const int64_t dst_st = direct ? kst : wst;
    const float* dkp = bs.dkp + w_off;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = r0 + g + 8 * half, col = d0 + 8 * n + 2 * t;
        if (i >= len || col >= dk) continue;
        const float* src = dkp + i * wst + col;
        float* out = dst + i * dst_st + col;
        if (dk_pairs) {
          const float2 v = *reinterpret_cast<const float2*>(src);
          *reinterpret_cast<float2*>(out) = make_float2(v.x + x[n].r[2 * half], v.y + x[n].r[2 * half + 1]);
        } else {
          out[0] = src[0] + x[n].r[2 * half];
          if (col + 1 < dk) out[1] = src[1] + x[n].r[2 * half + 1];
        }
      }
  }
  if (tid < len) {
    const float ein = expf(gam[tid]), b = beta[tid];
    const float xki = xk[tid] + xk[kC + tid], rowi = rowE[tid] + rowE[kC + tid];
    const float coli = colE[tid] + colE[kC + tid] + colE[2 * kC + tid] + colE[3 * kC + tid];
    gr.dbeta[(t0 + tid) * p.Hv + h] = yv[tid] + yv[kC + tid] + ein * xki + rowi;
    dgl[tid] = bs.dgp[(t0 + tid) * p.Hv + h] + b * ein * xki + b * rowi - coli;
  }
  __syncthreads();
  chunk_suffix_sum(dgs, dgl, len);  // dg_t = Σ_{i ≥ t} dγ_i (warp 0)
  __syncthreads();
  if (tid < len) gr.dg[(t0 + tid) * p.Hv + h] = dgs[tid];
}

// ---- dstate_v2: per (sequence, v-head, kBV = 32 state rows), reverse over the sequence's chunks

// Threads of dstate_kernel<kBufs>: 4 warps with one buffer (3 blocks share an SM, ≤ 170 registers each), 8 with two
// (one block per SM; session 25 split its D columns over twice the warps, so each of the SM's four schedulers gets
// two warps of the sequential pass instead of one). Its launch bounds take these constants as they are (no
// parentheses inside, for tools/cuda_emu's patterns).
template <int kBufs>
constexpr int kDstateThreads = kBufs == 2 ? 256 : 128;
template <int kBufs>
constexpr int kDstateMinBlocks = kBufs == 1 ? 3 : 1;

// Shared memory: kBufs × (the decayed keys Kd, Qd = scale·e^γ Q, W: bf16 [64][136]; the dO columns: bf16 [64][40]),
// D (bf16 [32][136]), −dU (bf16 [64][40]). kBufs = 2: 128,512 B (one block per SM, the next chunk's tiles copied
// while this one is processed); kBufs = 1: 71,168 B (three blocks per SM hide each other's copies).
template <int kBufs>
constexpr size_t dstate_smem() {
  return kBufs * (3 * kTileB + smem_piece<bf16>(kC * kLdV)) + smem_piece<bf16>(kBV * kLdD) +
         smem_piece<bf16>(kC * kLdV);
}
static_assert(blocks_fit_per_sm(dstate_smem<1>(), 3), "dstate_v2, one buffer: three blocks per SM");
static_assert(blocks_fit_per_sm(dstate_smem<2>(), 1), "dstate_v2, two buffers: one block per SM");

// The state-gradient tile D = dL/dM [kBV rows a][128 columns d] stays in fp32 accumulators for the whole pass: warp w
// holds rows 16(w % 2).. and columns (128 / (W / 2))·(w / 2).. (W = 4 warps: 64 columns, 8 n-tiles; W = 8: 32, 4).
// Per chunk (reverse order):
//   D (bf16) to shared memory and to the scratch (D leaving the chunk)             | barrier (tiles of the chunk landed)
//   Pf = Kd Dᵀ, warp w rows i = 16(w % 4).. × columns a (32 / (W / 4))·(w / 4)..; dU = dU_loc + Pf in place (global
//   fp32), −dU (bf16) shared                                                        | barrier
//   D ← e^{γ_c} D + dOᵀ Qd − dUᵀ W   (A = dOᵀ, −dUᵀ by ldmatrix.trans from [i][a] tiles; B = Qd, W k-major)
// Blocks of dstate_kernel (a one-dimensional grid): N·Hv·ceil(dv / kBV).
__host__ __device__ inline int64_t dstate_blocks(const Problem& p) { return p.N * p.Hv * ((p.dv + kBV - 1) / kBV); }

template <int kBufs, bool kFull, bool kDuBf16>
__global__ void __launch_bounds__(kDstateThreads<kBufs>, kDstateMinBlocks<kBufs>)
    dstate_kernel(Problem p, ForwardScratch fs, BackwardScratch bs, Grads gr) {
  static_assert(kBufs == 1 || kBufs == 2, "one or two chunk buffers");
  constexpr int kThreadsDs = kDstateThreads<kBufs>, kWarpsDs = kThreadsDs / 32;
  constexpr int kDN = kD / 8 / (kWarpsDs / 2);   // the warp's 8-column n-tiles of D
  constexpr int kPN = kBV / 8 / (kWarpsDs / 4);  // the warp's 8-column n-tiles of Pf (columns a)
  // Grid: x = (seq·Hv + h)·tiles + tile (dstate_blocks): the row tiles of one (sequence, head) are neighbours in
  // launch order, so they run together and three of the four reads of each chunk's Kd, Qd, W hit L2.
  const int64_t tiles = (p.dv + kBV - 1) / kBV, sh = blockIdx.x / tiles;
  const int64_t seq = sh / p.Hv;
  const int h = static_cast<int>(sh % p.Hv);
  const int a0 = static_cast<int>(blockIdx.x % tiles) * kBV, rows = static_cast<int>(min(int64_t{kBV}, p.dv - a0));
  const int dk = static_cast<int>(p.dk);
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Kb2 = sc.take<bf16>(kBufs * kC * kLdD);  // e^{γ_c − γ_i} k_i (Kd)
  bf16* Qb2 = sc.take<bf16>(kBufs * kC * kLdD);  // scale·e^{γ_i} q_i (Qd)
  bf16* Wb2 = sc.take<bf16>(kBufs * kC * kLdD);
  bf16* dOb2 = sc.take<bf16>(kBufs * kC * kLdV);
  bf16* Ds = sc.take<bf16>(kBV * kLdD);
  bf16* nUb = sc.take<bf16>(kC * kLdV);  // −dU [i][a]
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int ra = 16 * (warp % 2), cd = 8 * kDN * (warp / 2);  // the warp's D rows and columns
  const int ri = 16 * (warp % 4), ca = 8 * kPN * (warp / 4);   // the warp's Pf rows (tokens) and columns a
  const bool dk_pairs = kFull || dk % 2 == 0, a_pairs = kFull || (rows % 2 == 0 && p.dv % 2 == 0);
  const int64_t state_off = ((seq * p.Hv + h) * p.dv + a0) * p.dk, vst = p.Hv * p.dv;
  const int64_t kst = p.Hv * p.dk;  // token stride of Kd, Qd, W
  const bool rows_vec = vector_ok(fs.Kd, kst, dk) && vector_ok(fs.Qd, kst, dk) && vector_ok(fs.W, kst, dk);
  const auto issue = [&](const ChunkInfo& info, int buf) {
    const int64_t off = (info.t0 * p.Hv + h) * p.dk;
    if (rows_vec) {  // every chunk's rows then are too
      copy_rows_async<kThreadsDs>(Kb2 + buf * kC * kLdD, fs.Kd + off, kst, info.len, dk);
      copy_rows_async<kThreadsDs>(Qb2 + buf * kC * kLdD, fs.Qd + off, kst, info.len, dk);
      copy_rows_async<kThreadsDs>(Wb2 + buf * kC * kLdD, fs.W + off, kst, info.len, dk);
    } else {
      load_tile_async<kC, kD>(Kb2 + buf * kC * kLdD, kLdD, fs.Kd + off, kst, info.len, dk);
      load_tile_async<kC, kD>(Qb2 + buf * kC * kLdD, kLdD, fs.Qd + off, kst, info.len, dk);
      load_tile_async<kC, kD>(Wb2 + buf * kC * kLdD, kLdD, fs.W + off, kst, info.len, dk);
    }
    load_tile_async<kC, kBV>(dOb2 + buf * kC * kLdV, kLdV, bs.dOh + (info.t0 * p.Hv + h) * p.dv + a0, vst, info.len,
                             rows);
  };
  // This lane's dU_loc values of a chunk (rows i = ri + g + 8·half, columns a = ca + 8n + 2t, +1), into registers.
  // (Rows ≥ len load row len − 1, possibly another warp's; those values are never used.)
  const auto load_loc = [&](const ChunkInfo& info, float (&loc)[kPN][2][2]) {
#pragma unroll
    for (int n = 0; n < kPN; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = ri + g + 8 * half, a = ca + 8 * n + 2 * t;
        const float* du = bs.dU + (info.t0 + min(i, info.len - 1)) * vst + h * p.dv + a0 + a;
        loc[n][half][0] = loc[n][half][1] = 0.0f;
        if (a_pairs) {
          if (a < rows) {
            const float2 v = *reinterpret_cast<const float2*>(du);
            loc[n][half][0] = v.x;
            loc[n][half][1] = v.y;
          }
        } else {
          if (a < rows) loc[n][half][0] = du[0];
          if (a + 1 < rows) loc[n][half][1] = du[1];
        }
      }
  };
  const auto gamma_c = [&](const ChunkInfo& info) { return fs.gam[(info.t0 + info.len - 1) * p.Hv + h]; };

  FragC D[kDN];
  mma::zero(D);
  if (gr.d_hT) {
    const float* src = gr.d_hT + state_off;
#pragma unroll
    for (int n = 0; n < kDN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int a = ra + g + 8 * (e / 2), d = cd + 8 * n + 2 * t + (e % 2);
        if (a < rows && d < dk) D[n].r[e] = src[a * p.dk + d];
      }
  }
  // The pass runs one chunk after another, so every global load on a chunk's path is latency the SM cannot hide:
  // the chunk table, γ_c and the dU_loc values are read a chunk ahead of their use (cur: chunk ci, nxt: ci − 1, its
  // γ_c in gc_next, its dU_loc in loc once chunk ci's are consumed), as the forward's state pass does.
  const int64_t first = fs.seq_first[seq], last = fs.seq_first[seq + 1];
  const ChunkInfo none{0, 0, 0};
  ChunkInfo cur = first < last ? fs.table[last - 1] : none;
  ChunkInfo nxt = first + 1 < last ? fs.table[last - 2] : none;
  float gc_cur = first < last ? gamma_c(cur) : 0.0f;
  float loc[kPN][2][2];
  if (first < last) load_loc(cur, loc);
  if (kBufs == 2 && first < last) issue(cur, 0);
  cp_async_commit();
  for (int64_t ci = last - 1; ci >= first; --ci) {
    const int buf = kBufs == 2 ? static_cast<int>((last - 1 - ci) & 1) : 0;
    const ChunkInfo info = cur;
    const int len = info.len;
    const int64_t t0 = info.t0;
    const float gc = gc_cur;
    const ChunkInfo after = ci - 2 >= first ? fs.table[ci - 2] : none;  // used from the next chunk on
    const float gc_next = ci - 1 >= first ? gamma_c(nxt) : 0.0f;
    // D leaving chunk ci: bf16 to Ds (the B operand of Kd Dᵀ) and to the scratch (dqk reads it).
    strip_to_smem(Ds, kLdD, D, ra, cd);
    store_strip(bs.dstates + ((ci * p.Hv + h) * p.dv + a0) * p.dk, p.dk, D, ra, cd, rows, dk, dk_pairs,
                [](float x, int) { return x; });
    if (kBufs == 1) {
      __syncthreads();  // every warp is done with chunk ci+1's tiles
      issue(info, 0);
      cp_async_commit();
    }
    cp_async_wait<0>();
    __syncthreads();  // Ds, chunk ci's tiles; with two buffers every warp is done with the other one
    if (kBufs == 2 && ci > first) issue(nxt, buf ^ 1);
    cp_async_commit();
    const bf16* Kb = Kb2 + buf * kC * kLdD;
    const bf16* Qb = Qb2 + buf * kC * kLdD;
    const bf16* Wb = Wb2 + buf * kC * kLdD;
    const bf16* dOb = dOb2 + buf * kC * kLdV;
    // Pf = Kd Dᵀ (rows i = ri.., columns a = ca..); dU = dU_loc + Pf in place; nUb = −dU.
    FragC pf[kPN];
    mma::zero(pf);
#pragma unroll
    for (int kt = 0; kt < kD / 16; ++kt) {
      const FragA ak = mma::lds_a(Kb, kLdD, ri, 16 * kt);
#pragma unroll
      for (int np = 0; np < kPN / 2; ++np) {
        FragB b0, b1;
        mma::lds_b_nk(b0, b1, Ds, kLdD, 16 * kt, ca + 16 * np);
        mma::mma_bf16(pf[2 * np], ak, b0);
        mma::mma_bf16(pf[2 * np + 1], ak, b1);
      }
    }
    // kDuBf16: a row's bf16 pairs land on fp32 slots that other lanes (with 8 warps, another warp) loaded: every
    // load comes before any store, since the loads were issued a chunk ago, before this chunk's block barrier (the
    // first chunk's before the loop).
#pragma unroll
    for (int n = 0; n < kPN; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = ri + g + 8 * half, a = ca + 8 * n + 2 * t;
        float u0 = 0.0f, u1 = 0.0f;
        if (i < len) {
          u0 = loc[n][half][0] + pf[n].r[2 * half];
          u1 = loc[n][half][1] + pf[n].r[2 * half + 1];
          if constexpr (kDuBf16) {  // bf16 over the dU_loc bytes this warp has read (__syncwarp above)
            // du_h_index((t0 + i)·Hv + h, dv, a0 + a): a0 is a multiple of kBV, a < kBV
            bf16* du = reinterpret_cast<bf16*>(bs.dU + (t0 + i) * vst + h * p.dv + a0) + a;
            if (a_pairs) {
              if (a < rows) *reinterpret_cast<uint32_t*>(du) = mma::pack_bf16x2(u0, u1);
            } else {
              if (a < rows) du[0] = __float2bfloat16_rn(u0);
              if (a + 1 < rows) du[1] = __float2bfloat16_rn(u1);
            }
          } else {
            float* du = bs.dU + (t0 + i) * vst + h * p.dv + a0 + a;
            if (a_pairs) {
              if (a < rows) *reinterpret_cast<float2*>(du) = make_float2(u0, u1);
            } else {
              if (a < rows) du[0] = u0;
              if (a + 1 < rows) du[1] = u1;
            }
          }
        }
        *reinterpret_cast<uint32_t*>(nUb + i * kLdV + a) = mma::pack_bf16x2(-u0, -u1);
      }
    if (ci > first) load_loc(nxt, loc);  // chunk ci − 1's rows: other tokens than those just written
    __syncthreads();  // nUb
    // D ← e^{γ_c} D + dOᵀ Qd − dUᵀ W (rows a = ra.., columns d = cd..).
    const float decay = expf(gc);
#pragma unroll
    for (int n = 0; n < kDN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) D[n].r[e] *= decay;
#pragma unroll
    for (int kt = 0; kt < kC / 16; ++kt) {
      const FragA ad = mma::lds_a_trans(dOb, kLdV, ra, 16 * kt), an = mma::lds_a_trans(nUb, kLdV, ra, 16 * kt);
#pragma unroll
      for (int np = 0; np < kDN / 2; ++np) {
        FragB b0, b1;
        mma::lds_b_kn(b0, b1, Qb, kLdD, 16 * kt, cd + 16 * np);
        mma::mma_bf16(D[2 * np], ad, b0);
        mma::mma_bf16(D[2 * np + 1], ad, b1);
        mma::lds_b_kn(b0, b1, Wb, kLdD, 16 * kt, cd + 16 * np);
        mma::mma_bf16(D[2 * np], an, b0);
        mma::mma_bf16(D[2 * np + 1], an, b1);
      }
    }
    cur = nxt, nxt = after, gc_cur = gc_next;
  }
  cp_async_wait<0>();
  if (gr.dh0)
    store_strip(gr.dh0 + state_off, p.dk, D, ra, cd, rows, dk, dk_pairs, [](float x, int) { return x; });
}

// ---- du_local_v2: per (chunk, v-head), dU_loc = scale·(Q Kᵀ ⊙ Γ)ᵀ dO, and dO copied to bf16 (dOh)

constexpr int kLocThreads = 128;  // 4 warps, warp w owns key rows j = 16w .. 16w + 15
// Shared memory: Q, K, dO (bf16 [64][136]) and γ: 52,480 B, four blocks per SM.
constexpr size_t kLocSmem = 3 * kTileB + smem_piece<float>(kC);
static_assert(blocks_fit_per_sm(kLocSmem, 4), "du_local_v2: four blocks per SM");

// Warp w: Aᵀ strip [j][i] = (K Qᵀ)[j][i] · scale·e^{γ_i − γ_j} for j ≤ i < len (n-tiles i ≥ 16w only), on the
// accumulators; re-packed in registers to bf16 A fragments (gdn_mma::a_from_acc) and multiplied by dO (k-tiles
// i ≥ 16w): the strip's 16 × 128 dU_loc, stored fp32.
template <bool kFull>
__global__ void __launch_bounds__(kLocThreads, 4) du_local_kernel(Problem p, ForwardScratch fs, BackwardScratch bs,
                                                                   Grads gr) {
  const ChunkHead c = chunk_head(p, fs.table);
  if (c.len == 0) return;
  const int64_t t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = reinterpret_cast<bf16*>(smem + kTileB);
  bf16* dOs = reinterpret_cast<bf16*>(smem + 2 * kTileB);
  float* gam = reinterpret_cast<float*>(smem + 3 * kTileB);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp, j_lo = r0 + g, j_hi = r0 + g + 8;
  const int64_t qst = p.Hk * p.dk, vst = p.Hv * p.dv, v_off = (t0 * p.Hv + h) * p.dv;
  const bool dv_pairs = kFull || dv % 2 == 0;

  if (tid < kC) gam[tid] = fs.gam[(t0 + min(tid, len - 1)) * p.Hv + h];
  load_tile_bf16<kC, kD>(Qs, kLdD, p.q + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16<kC, kD>(Ks, kLdD, p.k + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  bf16* dOh = bs.dOh + v_off;
  for_tile<kC, kD>(gr.d_o + v_off, vst, len, dv, [&](int i, int d, const float* v, int n) {
    for (int e = 0; e < n; ++e) {
      const bf16 x = __float2bfloat16_rn(v[e]);
      dOs[i * kLdD + d + e] = x;
      if (i < len && d + e < dv) dOh[i * vst + d + e] = x;
    }
  });
  __syncthreads();

  FragC at[8];
  mma::zero(at);
#pragma unroll
  for (int kt = 0; kt < kD / 16; ++kt) {
    const FragA ak = mma::lds_a(Ks, kLdD, r0, 16 * kt);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (np < warp) continue;  // i < 16w: above the diagonal of every row of the strip
      FragB b0, b1;
      mma::lds_b_nk(b0, b1, Qs, kLdD, 16 * kt, 16 * np);
      mma::mma_bf16(at[2 * np], ak, b0);
      mma::mma_bf16(at[2 * np + 1], ak, b1);
    }
  }
  {
    const float g_lo = gam[j_lo], g_hi = gam[j_hi];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int i = 8 * n + 2 * t + q;
        const float gi = gam[i];
        at[n].r[q] = (i >= j_lo && i < len) ? p.scale * at[n].r[q] * expf(gi - g_lo) : 0.0f;
        at[n].r[2 + q] = (i >= j_hi && i < len) ? p.scale * at[n].r[2 + q] * expf(gi - g_hi) : 0.0f;
      }
  }
  FragC acc[16];
  mma::zero(acc);
#pragma unroll
  for (int kt = 0; kt < kC / 16; ++kt) {
    if (kt < warp) continue;
    const FragA a = gdn_mma::a_from_acc(at[2 * kt], at[2 * kt + 1]);
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      FragB b0, b1;
      mma::lds_b_kn(b0, b1, dOs, kLdD, 16 * kt, 16 * np);
      mma::mma_bf16(acc[2 * np], a, b0);
      mma::mma_bf16(acc[2 * np + 1], a, b1);
    }
  }
  store_strip(bs.dU + v_off, vst, acc, r0, 0, len, dv, dv_pairs, [](float x, int) { return x; });
}

}  // namespace v2

}  // namespace

}  // namespace hlm::gdn_chunked
