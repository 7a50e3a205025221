// v2 forward kernels of the chunked gated delta rule (selected by HLM_GDN_KERNELS=v2; launcher in
// gated_delta_rule_chunked_fwd.cu): warp-level mma.sync (gdn_mma.cuh) with accumulators kept and consumed in
// registers. Same inputs, scratch contents and outputs as the v1 kernels (gdn_chunked_tiles.cuh, ForwardScratch).
//
// state_v2 (the sequential pass), per (sequence, v-head, 16·kWarps state rows), kWarps·32 threads:
//   warp w owns the 16 state rows a0 + 16w.. as 16 fp32 accumulator tiles (16 rows × 8 key columns each: the
//   whole 16 × 128 row strip, 64 registers), so no product needs another warp's data. Per chunk:
//     Uᵀ = Ũᵀ − M0 Wᵀ   [16 rows][64 tokens]: the accumulators start as Ũᵀ (from the warp's fp32 strip in shared
//                       memory, copied by cp.async a chunk ahead with W and Kd into a second strip, or with one
//                       strip (8 warps per block) during the previous chunk's update), A = bf16(−M0) re-packed
//                       from the state accumulators, B = W (ldmatrix, n-major)
//     M0 (bf16) stored straight from the packed registers; U (fp32, in place of Ũ) through the strip (16-byte rows)
//     M ← e^{γ_c} M + Uᵀ Kd   A = bf16(Uᵀ) re-packed from the U accumulators, B = Kd (ldmatrix.trans, k-major)
//   The block's warps share the chunk's W and Kd tiles (bf16, 2 × 17 KB), copied by cp.async a chunk ahead into a
//   second buffer; one block barrier per chunk (copies landed / the other buffer free).
//   With 8 warps per block ≤ 128 registers (launch bounds: 2 blocks, 16 warps per SM); fewer warps use 186.
//   kWarps (1, 2, 4 or 8) is picked at launch (launch_state_v2): fewer rows per block when there are few
//   sequences × heads, so at least half the 132 SMs get work. With split keys (kSplit = 2, state_v2_kernel<4, 2>,
//   taken when the row strips are at most two per SM: B1×T16384 H32) a pair of warps shares 16 rows, each warp 64
//   key columns, and the pair adds its two halves of Uᵀ through shared memory (see the kernel's comment).
// prep_v2 and output_v2 (per chunk and v-head, 8 warps): see their comments below.
// Numerics as v1: M0 and U enter the products as bf16, everything accumulates in fp32; U's sum starts from Ũ
// instead of subtracting a separately summed W M0ᵀ (a different fp32 rounding order, the same error bound); prep_v2's
// inverse merges use split hi + lo bf16 operands (~16 significant bits; see invert_unit_lower64_tc).
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
// U strips per warp: two (the next chunk's Ũ copied a whole chunk ahead, with W and Kd) where shared memory allows,
// one with 8 warps per block (two blocks per SM; the next Ũ is then copied after the strip's U has been stored).
template <int kWarps>
__host__ __device__ constexpr int state_v2_strips() {
  return kWarps == 8 ? 1 : 2;
}
// Bytes of one warp's exchange buffer for split-key passes: its partial Uᵀ accumulators [8 tiles][4][32 lanes] fp32.
constexpr size_t kExchangeBytes = smem_piece<float>(kC / 8 * 4 * 32);
// kSplit = 1: each warp owns 16 state rows × all 128 key columns. kSplit = 2: a pair of warps owns 16 rows, each warp
// 64 key columns (see state_v2_kernel), so one sequence × few heads still fills every scheduler of the SMs it runs on.
template <int kWarps, int kSplit>
constexpr size_t state_v2_smem() {  // W and Kd, two buffers each, the U strips of every row strip, the exchange
  return 4 * smem_piece<bf16>(kC * kLdD) + kWarps / kSplit * state_v2_strips<kWarps>() * kStripBytes +
         (kSplit == 2 ? kWarps * kExchangeBytes : 0);
}
static_assert(blocks_fit_per_sm(state_v2_smem<8, 1>(), 2) && blocks_fit_per_sm(state_v2_smem<4, 1>(), 2) &&
                  blocks_fit_per_sm(state_v2_smem<4, 2>(), 2),
              "state_v2: two blocks of 8 or 4 warps per SM");

// Barrier of the two warps (64 threads) of split-key pair 0 or 1 (named barriers 1 and 2; 0 is __syncthreads'). The
// ids are immediates: a register id makes ptxas reserve all 16 of the block's barriers.
__device__ __forceinline__ void pair_sync(int pair) {
  if (pair == 0)
    asm volatile("bar.sync 1, 64;" ::: "memory");
  else
    asm volatile("bar.sync 2, 64;" ::: "memory");
}

// The warp's strips of U (one or two buffers, kStripBytes apart) for one chunk each: columns r0..r0+15 of the
// chunk's rows [len][dv] of U (row stride ust).
// Vector path (16-byte cp.async, zero-filled outside len / dv) when dv and the strides allow, else scalar copies.
struct UStrip {
  float* sm;  // [kC][kLdStrip]
  int r0, dv;
  int64_t ust;
  bool vec;
  __device__ UStrip(float* sm_, int r0_, int dv_, int64_t ust_, const float* U)
      : sm(sm_), r0(r0_), dv(dv_), ust(ust_), vec(dv_ % 4 == 0 && ust_ % 4 == 0 && reinterpret_cast<uintptr_t>(U) % 16 == 0) {}
  // Global → strip b (asynchronous on the vector path: the caller commits and waits).
  __device__ void load(int b, const float* src, int len) const {
    float* sm = this->sm + b * static_cast<int>(kStripBytes / sizeof(float));
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
  // Strip b → global, the valid part.
  __device__ void store(int b, float* dst, int len) const {
    const float* sm = this->sm + b * static_cast<int>(kStripBytes / sizeof(float));
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

// kSplit = 2 (split keys): warps 2p and 2p + 1 own the same 16 rows, warp 2p + h the key columns 64h..64h + 63 of
// them (32 accumulator registers instead of 64). Uᵀ = Ũᵀ − M0 Wᵀ sums over the keys, so each warp forms its half of
// the sum (warp 2p from Ũᵀ, warp 2p + 1 from 0), the pair swaps them through shared memory (exchange buffer, pair
// barrier) and both add them in one order (half 0 + half 1: the same bits in both warps); M ← e^{γ_c} M + Uᵀ Kd then
// needs no exchange (each warp updates its own key columns). Warp 2p copies Ũ and stores U through its strip. Half
// the products per warp and twice the warps for the SMs' schedulers, for one barrier and 64 shared accesses per lane
// per chunk; the launch takes it when the sequences × heads × row strips are fewer than the schedulers.
// Sums in U: one fp32 order for kSplit = 1 (keys 0..127 in one chain), another for kSplit = 2 (two chains of 64, then
// added): results differ in the last bits between the two forms, as between any two fp32 orders (the bound is bf16's).
template <int kWarps, int kSplit>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 8 || kSplit == 2 ? 2 : 1)
    state_v2_kernel(Problem p, ForwardScratch s, float* hT) {
  static_assert(kSplit == 1 || (kSplit == 2 && kWarps == 4), "split keys: two warp pairs (pair_sync, launch bounds)");
  constexpr int kKeyTiles = kD / 8 / kSplit;    // the warp's 8-key accumulator tiles of the state
  constexpr int kKeyGroups = kD / 16 / kSplit;  // the warp's 16-key groups (k steps of Uᵀ, n pairs of the update)
  const int64_t seq = blockIdx.x / p.Hv;
  const int h = static_cast<int>(blockIdx.x % p.Hv);
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int strip_id = warp / kSplit, half = warp % kSplit;  // row strip of the block; key half (0 when kSplit = 1)
  const int kg0 = half * kKeyGroups;                         // the warp's first 16-key group
  const int r0 = static_cast<int>(blockIdx.y) * (kWarps / kSplit) * kStateRowsPerWarp + strip_id * kStateRowsPerWarp;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Wb2 = sc.take<bf16>(2 * kC * kLdD);
  bf16* Kb2 = sc.take<bf16>(2 * kC * kLdD);  // e^{γ_c − γ_i} k_i (Kd)
  constexpr int kStrips = state_v2_strips<kWarps>();
  constexpr int kStripFloats = static_cast<int>(kStripBytes / sizeof(float));
  float* strip_sm = sc.take<float>(kWarps / kSplit * kStrips * kStripFloats) + strip_id * kStrips * kStripFloats;
  constexpr int kXFloats = static_cast<int>(kExchangeBytes / sizeof(float));
  float* xchg = kSplit == 2 ? sc.take<float>(kWarps * kXFloats) : nullptr;  // [warp][tile·4 + e][lane]
  const bool owns_strip = half == 0;  // the warp that copies Ũ in and U out
  // This lane's ldmatrix row addresses in buffer 0 (bytes; buffer 1 is kTileBytes further).
  constexpr int kTileBytes = kC * kLdD * 2;
  const gdn_mma::saddr_t w_lane = gdn_mma::smem_addr(Wb2 + gdn_mma::lane_off_b2(kLdD));
  const gdn_mma::saddr_t k_lane = gdn_mma::smem_addr(Kb2 + gdn_mma::lane_off_b2_trans(kLdD));
  const int64_t hst = p.Hv * p.dk;  // token stride of W, Kd
  const int64_t ust = p.Hv * p.dv;  // token stride of U
  const float* u_head = s.U + static_cast<int64_t>(h) * p.dv;
  const UStrip strip(strip_sm, r0, dv, ust, s.U);
  const bool rows_vec = vector_ok(s.W, hst, dk) && vector_ok(s.Kd, hst, dk);  // every chunk's rows then are too
  const auto issue = [&](const ChunkInfo& info, int buf) {
    const int64_t off = (info.t0 * p.Hv + h) * p.dk;
    if (rows_vec) {
      copy_rows_async<kWarps * 32>(Wb2 + buf * kC * kLdD, s.W + off, hst, info.len, dk);
      copy_rows_async<kWarps * 32>(Kb2 + buf * kC * kLdD, s.Kd + off, hst, info.len, dk);
    } else {
      load_tile_async<kC, kD>(Wb2 + buf * kC * kLdD, kLdD, s.W + off, hst, info.len, dk);
      load_tile_async<kC, kD>(Kb2 + buf * kC * kLdD, kLdD, s.Kd + off, hst, info.len, dk);
    }
  };
  // This lane's accumulator coordinates: rows (state rows / value channels) r0 + g, r0 + g + 8; columns 2t, 2t + 1
  // of each 8-wide tile (key dims for the state, tokens for Uᵀ). In the strip, Uᵀ element (row c, token i) is at
  // i·kLdStrip + c: this lane's elements are at lane_strip + (8j + e % 2)·kLdStrip + 8(e / 2).
  const int lane = gdn_mma::lane_id();
  const int g = lane / 4, t2 = 2 * (lane % 4);
  const int ra = r0 + g, rb = r0 + g + 8;
  float* lane_strip = strip_sm + t2 * kLdStrip + g;

  // The state strip: S[n] holds key columns 8(n + half·kKeyTiles)..+7.
  FragC S[kKeyTiles];
  const int64_t state_off = ((seq * p.Hv + h) * p.dv) * p.dk;
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int a = e < 2 ? ra : rb, d = 8 * (n + half * kKeyTiles) + t2 + (e % 2);
      S[n].r[e] = (p.h0 && a < dv && d < dk) ? p.h0[state_off + static_cast<int64_t>(a) * p.dk + d] : 0.0f;
    }

  // The chunk table and γ_c are read a chunk ahead of their use (cur: chunk ci, next: ci + 1, its γ_c in gc_next), so
  // no table load stands between the barrier and the next chunk's copies.
  const int64_t first = s.seq_first[seq], last = s.seq_first[seq + 1];
  const auto gamma_c = [&](const ChunkInfo& info) { return s.gam[(info.t0 + info.len - 1) * p.Hv + h]; };
  ChunkInfo cur = first < last ? s.table[first] : ChunkInfo{0, 0, 0};
  ChunkInfo next = first + 1 < last ? s.table[first + 1] : ChunkInfo{0, 0, 0};
  float gc_cur = first < last ? gamma_c(cur) : 0.0f;
  if (first < last) {
    issue(cur, 0);
    if (owns_strip) strip.load(0, u_head + cur.t0 * ust, cur.len);
  }
  cp_async_commit();
  for (int64_t ci = first; ci < last; ++ci) {
    const int buf = static_cast<int>((ci - first) & 1);
    const ChunkInfo info = cur;
    const int len = info.len;
    const float gc = gc_cur;
    const ChunkInfo after = ci + 2 < last ? s.table[ci + 2] : ChunkInfo{0, 0, 0};  // used from the next chunk on
    const float gc_next = ci + 1 < last ? gamma_c(next) : 0.0f;
    cp_async_wait<0>();  // this thread's copies of chunk ci (W, Kd, Ũ strip) have landed
    __syncthreads();     // everyone's have; everyone is done with chunk ci − 1 (the other buffer, the exchange)
    if (ci + 1 < last) {
      issue(next, buf ^ 1);
      if (kStrips == 2 && owns_strip) strip.load(buf ^ 1, u_head + next.t0 * ust, next.len);  // U of ci − 1 stored
    }
    cp_async_commit();
    const int sb = kStrips == 2 ? buf : 0;  // the strip holding chunk ci's Ũ
    float* lane_sb = lane_strip + sb * kStripFloats;
    const gdn_mma::saddr_t wl = w_lane + buf * kTileBytes, kl = k_lane + buf * kTileBytes;

    // Uᵀ = Ũᵀ − M0 Wᵀ (this warp's keys): the accumulators start as Ũᵀ (from the strip; zeros for the second key
    // half); M0 (bf16) to the per-chunk states on the way.
    FragC U[kC / 8];
#pragma unroll
    for (int j = 0; j < kC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) U[j].r[e] = owns_strip ? lane_sb[(8 * j + e % 2) * kLdStrip + 8 * (e / 2)] : 0.0f;
    bf16* m0a = s.states + (ci * p.Hv + h) * p.dv * p.dk + static_cast<int64_t>(ra) * p.dk;  // row ra; rb 8 rows on
#pragma unroll
    for (int kk = 0; kk < kKeyGroups; ++kk) {  // key dims 16(kg0 + kk)..+15
      const FragA A = gdn_mma::a_from_acc(S[2 * kk], S[2 * kk + 1], -1.0f);  // bf16(−M0) = −bf16(M0)
#pragma unroll
      for (int x = 0; x < 4; ++x) {  // A.r[x]: row x % 2 ? rb : ra, columns 16kk + t2 + 8(x / 2), +1
        const int a = x % 2 ? rb : ra, d = 16 * (kg0 + kk) + t2 + 8 * (x / 2);
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
        gdn_mma::load_b2(b, wl + 2 * ((16 * jj) * kLdD + 16 * (kg0 + kk)));
        gdn_mma::mma_16816(U[2 * jj], A, b[0]);
        gdn_mma::mma_16816(U[2 * jj + 1], A, b[1]);
      }
    }
    if constexpr (kSplit == 2) {  // the pair's two halves of the key sum, added in one order in both warps
      float* mine = xchg + warp * kXFloats + lane;
      const float* other = xchg + (warp ^ 1) * kXFloats + lane;
#pragma unroll
      for (int j = 0; j < kC / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[(4 * j + e) * 32] = U[j].r[e];
      pair_sync(static_cast<int>(threadIdx.x) / 64);
#pragma unroll
      for (int j = 0; j < kC / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float o = other[(4 * j + e) * 32];
          U[j].r[e] = half == 0 ? U[j].r[e] + o : o + U[j].r[e];
        }
    }
    // U: through the strip to global (in place of Ũ), and as bf16 A operands (tokens 16kk..16kk+15 as k).
    if (owns_strip) {
      __syncwarp();  // every lane has read its Ũ from the strip
#pragma unroll
      for (int j = 0; j < kC / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) lane_sb[(8 * j + e % 2) * kLdStrip + 8 * (e / 2)] = U[j].r[e];
    }
    FragA UA[kC / 16];
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk) UA[kk] = gdn_mma::a_from_acc(U[2 * kk], U[2 * kk + 1]);
    if (owns_strip) {
      __syncwarp();
      strip.store(sb, s.U + info.t0 * ust + static_cast<int64_t>(h) * p.dv, len);
      __syncwarp();  // the strip is read: the next chunk's Ũ may land in it
      if (kStrips == 1 && ci + 1 < last) strip.load(0, u_head + next.t0 * ust, next.len);
    }
    if (kStrips == 1) cp_async_commit();

    // M ← e^{γ_c} M + Uᵀ Kd (this warp's key columns).
    const float decay = expf(gc);
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[n].r[e] *= decay;
#pragma unroll
    for (int jj = 0; jj < kKeyGroups; ++jj)  // key dims 16(kg0 + jj)..+15
#pragma unroll
      for (int kk = 0; kk < kC / 16; ++kk) {  // tokens 16kk..
        FragB b[2];
        gdn_mma::load_b2_trans(b, kl + 2 * ((16 * kk) * kLdD + 16 * (kg0 + jj)));
        gdn_mma::mma_16816(S[2 * jj], UA[kk], b[0]);
        gdn_mma::mma_16816(S[2 * jj + 1], UA[kk], b[1]);
      }
    cur = next, next = after, gc_cur = gc_next;
  }
  if (hT) {
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int a = e < 2 ? ra : rb, d = 8 * (n + half * kKeyTiles) + t2 + (e % 2);
        if (a < dv && d < dk) hT[state_off + static_cast<int64_t>(a) * p.dk + d] = S[n].r[e];
      }
  }
}

// ---- Packed tile loads

// dst[0..3] = bf16(s·v[0..3]) as one 8-byte store (dst 8-byte aligned).
__device__ __forceinline__ void store4_bf16(bf16* dst, const float* v, float s) {
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(gdn_mma::pack_bf16x2(s * v[0], s * v[1]), gdn_mma::pack_bf16x2(s * v[2], s * v[3]));
}
// load_tile_bf16 (gdn_chunked_tiles.cuh) with the vector path's four values stored as one 8-byte store instead of four
// 2-byte ones (ld a multiple of 4 elements; the same bits).
template <int kRows, int kCols, typename Scale>
__device__ __forceinline__ void load_tile_bf16_packed(bf16* dst, int ld, const float* src, int64_t stride, int len,
                                                      int width, Scale scale) {
  for_tile<kRows, kCols>(src, stride, len, width, [&](int i, int d, const float* v, int n) {
    const float sc = i < len ? scale(i) : 0.0f;
    if (n == 4) {
      store4_bf16(dst + i * ld + d, v, sc);
    } else {
      for (int e = 0; e < n; ++e) dst[i * ld + d + e] = __float2bfloat16_rn(sc * v[e]);
    }
  });
}

// ---- Unit-lower-triangular inverse on the tensor cores (prep_v2)

// x ≈ hi + lo with hi = bf16(x), lo = bf16(x − hi) (16 significant bits), for a pair, as two bf16x2 registers.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = gdn_mma::pack_bf16x2(x0, x1);
  const float2 h = gdn_mma::unpack_bf16x2(hi);
  lo = gdn_mma::pack_bf16x2(x0 - h.x, x1 - h.y);
}
// The A fragment of the fp32 16 × 16 tile at A (row-major, lda), split.
__device__ __forceinline__ void load_a_split(FragA& hi, FragA& lo, const float* A, int lda) {
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const float* e = A + (g + 8 * (x % 2)) * lda + t2 + 8 * (x / 2);
    split_bf16x2(e[0], e[1], hi.r[x], lo.r[x]);
  }
}
// The B fragment of the fp32 16 (k) × 8 (n) tile at B (k-major: B[k][n] = B[k·ldb + n]), split.
__device__ __forceinline__ void load_b_split(FragB& hi, FragB& lo, const float* B, int ldb) {
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
#pragma unroll
  for (int x = 0; x < 2; ++x) split_bf16x2(B[(t2 + 8 * x) * ldb + g], B[(t2 + 8 * x + 1) * ldb + g], hi.r[x], lo.r[x]);
}
// The A fragments (split) of the 16 × 16 tile held as accumulators lo_cols (columns 0-7) and hi_cols (8-15).
__device__ __forceinline__ void a_split_from_acc(FragA& hi, FragA& lo, const FragC& c0, const FragC& c1) {
  split_bf16x2(c0.r[0], c0.r[1], hi.r[0], lo.r[0]);
  split_bf16x2(c0.r[2], c0.r[3], hi.r[1], lo.r[1]);
  split_bf16x2(c1.r[0], c1.r[1], hi.r[2], lo.r[2]);
  split_bf16x2(c1.r[2], c1.r[3], hi.r[3], lo.r[3]);
}
// d += a·b from split operands: ah·bh + ah·bl + al·bh (al·bl, ~2^-16 relative, dropped), small terms first.
__device__ __forceinline__ void mma_split(FragC& d, const FragA& ah, const FragA& al, const FragB& bh, const FragB& bl) {
  gdn_mma::mma_16816(d, al, bh);
  gdn_mma::mma_16816(d, ah, bl);
  gdn_mma::mma_16816(d, ah, bh);
}

// On entry A [64][lda] fp32 holds a strictly lower triangular L (zeros on and above the diagonal); on return R =
// (I + L)^-1 except its lower-left 32 × 32 block, which is in low [32][kLdLow] (A keeps L there). The four 16 × 16
// diagonal blocks by fp32 forward substitution (as invert_unit_lower64), then the merges R21 = −(R22 L21) R11 at
// sizes 16 (warps 0, 1: one block pair each) and 32 (warps 0, 1: 16 rows each) as tensor-core products of split
// operands (hi + lo bf16: ~16 significant bits per operand, fp32 sums; R is rounded to bf16 after this, 2^-9).
// Contains block barriers (call from uniform control flow with 256 threads); the last one makes R complete.
constexpr int kLdLow = 36;
__device__ inline void invert_unit_lower64_tc(float* A, int lda, float* low) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
  invert_diagonal_blocks16(A, lda);  // 1. the diagonal blocks (gdn_chunked_tiles.cuh)
  // 2. Size 16, pair o = 32·warp: R21 = −(R22 L21) R11 in place of L21 (read only by this warp).
  if (warp < 2) {
    const int o = 32 * warp;
    FragA ah, al;
    load_a_split(ah, al, A + (o + 16) * lda + o + 16, lda);  // R22
    FragC P[2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      gdn_mma::zero(P[n]);
      FragB bh, bl;
      load_b_split(bh, bl, A + (o + 16) * lda + o + 8 * n, lda);  // L21 (k = its rows)
      mma_split(P[n], ah, al, bh, bl);
    }
    FragA ph, pl;
    a_split_from_acc(ph, pl, P[0], P[1]);
    FragC Q[2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      gdn_mma::zero(Q[n]);
      FragB bh, bl;
      load_b_split(bh, bl, A + o * lda + o + 8 * n, lda);  // R11
      mma_split(Q[n], ph, pl, bh, bl);
    }
    __syncwarp();  // every lane has read L21
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        A[(o + 16 + g + 8 * (e / 2)) * lda + o + 8 * n + t2 + (e % 2)] = -Q[n].r[e];
  }
  __syncthreads();
  // 3. Size 32, rows 32 + 16·warp: R21 = −(R_bot L21) R_top into low (A's L21 is still read by the other warp).
  if (warp < 2) {
    const int mt = warp;
    FragC P[4];
#pragma unroll
    for (int n = 0; n < 4; ++n) gdn_mma::zero(P[n]);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      if (kk <= mt) {  // R_bot is lower triangular
        FragA ah, al;
        load_a_split(ah, al, A + (32 + 16 * mt) * lda + 32 + 16 * kk, lda);
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          FragB bh, bl;
          load_b_split(bh, bl, A + (32 + 16 * kk) * lda + 8 * n, lda);  // L21
          mma_split(P[n], ah, al, bh, bl);
        }
      }
    FragC Q[4];
#pragma unroll
    for (int n = 0; n < 4; ++n) gdn_mma::zero(Q[n]);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      FragA ph, pl;
      a_split_from_acc(ph, pl, P[2 * kk], P[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < 4; ++n)
        if (8 * n < 16 * kk + 16) {  // R_top is lower triangular: rows 16kk.. are zero right of column 16kk + 15
          FragB bh, bl;
          load_b_split(bh, bl, A + (16 * kk) * lda + 8 * n, lda);
          mma_split(Q[n], ph, pl, bh, bl);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) low[(16 * mt + g + 8 * (e / 2)) * kLdLow + 8 * n + t2 + (e % 2)] = -Q[n].r[e];
  }
  __syncthreads();
}

// ---- prep_v2: per (chunk, v-head), γ, Kd, L, R = (I + L)^-1, W = R diag(βe^γ) K, Ũ = R diag(β) V

// 8 warps; warp w takes rows 16(w % 4).. (strip ws) and a column half hf = w / 4 of each product. The products are
// mma.sync with their results stored from the accumulators (K Kᵀ → L in fp32 shared memory for the inverse; W and Ũ
// straight to global); the per-row factors βe^γ, β and e^{γ_c − γ} are computed once per row, not per element. The
// inverse: fp32 substitution in the diagonal 16 × 16 blocks, merges on the tensor cores with split (hi + lo bf16)
// operands (invert_unit_lower64_tc). Barriers: after γ, after the k tile, the inverse's five, after bf16(R) and βv.
// Shared memory (67,328 B, three blocks per SM):
//   Kb  bf16 [64][kLdD]   k (K Kᵀ), then β v (after the inverse's barriers: its last K Kᵀ read is behind them)
//   Xb  bf16 [64][kLdD]   βe^γ k
//   Rf  fp32 [64][kLdCf]  L, then R (but its lower-left 32 × 32 block, in low [32][kLdLow]);  Rb bf16 [64][kLdC]
//   gam, beta, wx (βe^γ), dec (e^{γ_c − γ}) fp32 [64]
constexpr int kPrepV2Threads = 256;
constexpr size_t kPrepV2Smem = 2 * smem_piece<bf16>(kC * kLdD) + smem_piece<float>(kC * kLdCf) +
                               smem_piece<float>(32 * kLdLow) + smem_piece<bf16>(kC * kLdC) + 4 * smem_piece<float>(kC);
static_assert(blocks_fit_per_sm(kPrepV2Smem, 3), "prep_v2: three blocks per SM");

__global__ void __launch_bounds__(kPrepV2Threads, 3) prep_v2_kernel(Problem p, ForwardScratch s) {
  const ChunkHead c = chunk_head(p, s.table);
  if (c.len == 0) return;
  const int64_t ci = c.ci, t0 = c.t0;
  const int len = c.len, h = c.h, hk = c.hk, dk = c.dk, dv = c.dv;
  extern __shared__ __align__(128) char smem[];
  SmemCarver sc{smem};
  bf16* Kb = sc.take<bf16>(kC * kLdD);
  bf16* Xb = sc.take<bf16>(kC * kLdD);
  float* Rf = sc.take<float>(kC * kLdCf);
  float* low = sc.take<float>(32 * kLdLow);  // R's lower-left 32 × 32 block
  bf16* Rb = sc.take<bf16>(kC * kLdC);
  float* gam = sc.take<float>(kC);
  float* beta = sc.take<float>(kC);
  float* wx = sc.take<float>(kC);
  float* dec = sc.take<float>(kC);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t kst = p.Hk * p.dk, hst = p.Hv * p.dk, ust = p.Hv * p.dv;

  // γ (warp 0), then the per-row factors (warp 0 again: its lanes see γ after __syncwarp).
  chunk_cumsum(gam, p.g + t0 * p.Hv + h, p.Hv, len);
  if (tid < 32) {
    __syncwarp();
    const float gc = gam[len - 1];
    for (int i = tid; i < kC; i += 32) {
      const float b = i < len ? p.beta[(t0 + i) * p.Hv + h] : 0.0f;
      beta[i] = b;
      wx[i] = i < len ? b * expf(gam[i]) : 0.0f;
      dec[i] = i < len ? expf(gc - gam[i]) : 0.0f;
    }
  }
  __syncthreads();
  // One read of k: Kb = k, Xb = βe^γ k, and the decayed keys Kd = e^{γ_c − γ} k (bf16, global).
  bf16* Kd = s.Kd + (t0 * p.Hv + h) * p.dk;
  const bool kd_pairs = dk % 4 == 0 && hst % 4 == 0;  // Kd rows' 4-element groups are 8-byte aligned
  for_tile<kC, kD>(p.k + (t0 * p.Hk + hk) * p.dk, kst, len, dk, [&](int i, int d, const float* v, int n) {
    const float w = wx[i], e_out = dec[i];
    if (n == 4) {  // the vector path: d < dk implies d + 3 < dk
      store4_bf16(Kb + i * kLdD + d, v, 1.0f);
      store4_bf16(Xb + i * kLdD + d, v, w);
      if (i < len && d < dk) {
        if (kd_pairs) {
          store4_bf16(Kd + i * hst + d, v, e_out);
        } else {
          for (int e = 0; e < 4; ++e) Kd[i * hst + d + e] = __float2bfloat16_rn(e_out * v[e]);
        }
      }
      return;
    }
    for (int e = 0; e < n; ++e) {
      Kb[i * kLdD + d + e] = __float2bfloat16_rn(v[e]);
      Xb[i * kLdD + d + e] = __float2bfloat16_rn(w * v[e]);
      if (i < len && d + e < dk) Kd[i * hst + d + e] = __float2bfloat16_rn(e_out * v[e]);
    }
  });
  if (s.Qd) {  // backward: Qd = scale·e^γ q, the reverse state pass's operand
    bf16* Qd = s.Qd + (t0 * p.Hv + h) * p.dk;
    for_tile<kC, kD>(p.q + (t0 * p.Hk + hk) * p.dk, kst, len, dk, [&](int i, int d, const float* v, int n) {
      const float sc_in = i < len ? p.scale * expf(gam[i]) : 0.0f;
      for (int e = 0; e < n; ++e)
        if (i < len && d + e < dk) Qd[i * hst + d + e] = __float2bfloat16_rn(sc_in * v[e]);
    });
  }
  __syncthreads();

  const int warp = tid / 32, ws = warp % 4, hf = warp / 4;
  const int g = gdn_mma::lane_id() / 4, t2 = 2 * (gdn_mma::lane_id() % 4);
  const int ia = 16 * ws + g, ib = ia + 8;
  // L = β_i Γ_ij (k_i·k_j) for j < i < len, over key columns 32hf..32hf+31; tiles wholly on or above the diagonal are
  // not multiplied (their L is 0), but every element of the warp's 16 × 32 block is written.
  {
    FragC S[4];
#pragma unroll
    for (int n = 0; n < 4; ++n) gdn_mma::zero(S[n]);
    const gdn_mma::saddr_t a_lane = gdn_mma::smem_addr(Kb + (16 * ws) * kLdD + gdn_mma::lane_off_a(kLdD));
    const gdn_mma::saddr_t b_lane = gdn_mma::smem_addr(Kb + (32 * hf) * kLdD + gdn_mma::lane_off_b2(kLdD));
    const bool any = 32 * hf < 16 * ws + 16;  // some j < i in this block
    if (any) {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        FragA a;
        gdn_mma::load_a(a, a_lane + 2 * 16 * kk);
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
          if (32 * hf + 16 * jj < 16 * ws + 16) {
            FragB b[2];
            gdn_mma::load_b2(b, b_lane + 2 * ((16 * jj) * kLdD + 16 * kk));
            gdn_mma::mma_16816(S[2 * jj], a, b[0]);
            gdn_mma::mma_16816(S[2 * jj + 1], a, b[1]);
          }
      }
    }
    const float ba = beta[ia], bb = beta[ib], ga = gam[ia], gb = gam[ib];
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = half ? ib : ia, j = 32 * hf + 8 * n + t2;
        const float bi = half ? bb : ba, gi = half ? gb : ga;
        float2 l;
        l.x = (j < i && i < len) ? bi * expf(gi - gam[j]) * S[n].r[2 * half] : 0.0f;  // exponents only for j < i
        l.y = (j + 1 < i && i < len) ? bi * expf(gi - gam[j + 1]) * S[n].r[2 * half + 1] : 0.0f;
        *reinterpret_cast<float2*>(Rf + i * kLdCf + j) = l;
      }
  }
  invert_unit_lower64_tc(Rf, kLdCf, low);  // barriers inside, before (L written) and after (R complete)
  // bf16(R) (and R for the backward); β v into Kb (its K Kᵀ reads ended before the inverse's first barrier).
  bf16* R_out = s.R ? s.R + (ci * p.Hv + h) * kC * kC : nullptr;
  for (int idx = tid; idx < kC * kC; idx += kPrepV2Threads) {
    const int i = idx / kC, jc = idx % kC;
    const bf16 r = __float2bfloat16_rn(i >= 32 && jc < 32 ? low[(i - 32) * kLdLow + jc] : Rf[i * kLdCf + jc]);
    Rb[(idx / kC) * kLdC + idx % kC] = r;
    if (R_out) R_out[idx] = r;
  }
  load_tile_bf16_packed<kC, kD>(Kb, kLdD, p.v + (t0 * p.Hv + h) * p.dv, ust, len, dv, [&](int i) { return beta[i]; });
  __syncthreads();

  // W = R (βe^γ K) and Ũ = R (β V) over columns 64hf..64hf+63; R is lower triangular: token tiles kk ≤ ws only.
  const gdn_mma::saddr_t r_lane = gdn_mma::smem_addr(Rb + (16 * ws) * kLdC + gdn_mma::lane_off_a(kLdC));
#pragma unroll
  for (int which = 0; which < 2; ++which) {  // 0: W from Xb, 1: Ũ from Kb (β v)
    const bf16* X = which == 0 ? Xb : Kb;
    const gdn_mma::saddr_t x_lane = gdn_mma::smem_addr(X + 64 * hf + gdn_mma::lane_off_b2_trans(kLdD));
    FragC F[8];
#pragma unroll
    for (int n = 0; n < 8; ++n) gdn_mma::zero(F[n]);
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk)
      if (kk <= ws) {
        FragA ra;
        gdn_mma::load_a(ra, r_lane + 2 * 16 * kk);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          FragB b[2];
          gdn_mma::load_b2_trans(b, x_lane + 2 * ((16 * kk) * kLdD + 16 * jj));
          gdn_mma::mma_16816(F[2 * jj], ra, b[0]);
          gdn_mma::mma_16816(F[2 * jj + 1], ra, b[1]);
        }
      }
    const int width = which == 0 ? dk : dv;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = half ? ib : ia, col = 64 * hf + 8 * n + t2;
        if (i >= len || col >= width) continue;
        const float x0 = F[n].r[2 * half], x1 = F[n].r[2 * half + 1];
        const bool two = col + 1 < width;
        if (which == 0) {
          bf16* dst = s.W + ((t0 + i) * p.Hv + h) * p.dk + col;
          if (two && dk % 2 == 0 && hst % 2 == 0) {  // col even: a 4-byte aligned pair
            *reinterpret_cast<uint32_t*>(dst) = gdn_mma::pack_bf16x2(x0, x1);
          } else {
            dst[0] = __float2bfloat16_rn(x0);
            if (two) dst[1] = __float2bfloat16_rn(x1);
          }
        } else {
          const int64_t slot = ((t0 + i) * p.Hv + h) * p.dv + col;
          if (two && dv % 2 == 0 && ust % 2 == 0) {  // col even: 8- and 4-byte aligned pairs
            *reinterpret_cast<float2*>(s.U + slot) = make_float2(x0, x1);
            if (s.Ut) *reinterpret_cast<uint32_t*>(s.Ut + slot) = gdn_mma::pack_bf16x2(x0, x1);
          } else {
            s.U[slot] = x0;
            if (two) s.U[slot + 1] = x1;
            if (s.Ut) {
              s.Ut[slot] = __float2bfloat16_rn(x0);
              if (two) s.Ut[slot + 1] = __float2bfloat16_rn(x1);
            }
          }
        }
      }
  }
  if (tid < len) s.gam[(t0 + tid) * p.Hv + h] = gam[tid];
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
  load_tile_bf16_packed<kC, kD>(Qb, kLdD, p.q + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16_packed<kC, kD>(Kb, kLdD, p.k + (t0 * p.Hk + hk) * p.dk, qst, len, dk, NoScale{});
  load_tile_bf16_packed<kC, kD>(Ub, kLdD, s.U + (t0 * p.Hv + h) * p.dv, ust, len, dv, NoScale{});
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
  gdn_mma::scale_rows(O, ea, eb);
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
