// Tensor-core (mma.sync m16n8k16 bf16, fp32 accumulate) flash attention for bf16 storage, head dims 64 and 128:
// forward, and the backward's dk/dv and dq kernels; and the forward of a prefill chunk over a paged bf16 KV cache
// (tc_paged_forward_kernel, attention_cache_cuda.h's tensor-core path). Contract and semantics: attention_cuda.h; the launchers in
// attention.cu dispatch here (tc_supported) and keep the scalar kernels for f32 and other head dims.
//
// Layout: blocks of 4 warps; every tile is 64 rows (queries or keys) and each warp owns 16 of them. Tiles of q/k/v/dO
// are staged with cp.async (double buffered over the loop) into shared rows of D + 8 bf16 (the 16-byte pad puts the
// 8 rows an ldmatrix reads in 8 different bank groups), then read with ldmatrix into mma fragments.
//   forward: one block per (sequence, query tile, query head), longest rows first. Per key tile: S = Q Kᵀ (16×64
//            per warp), online softmax in registers (fp32), O += P V. Causal: key tiles past the query tile are never
//            loaded; in the diagonal tile a warp skips the key chunks (16 keys) after its rows.
//   dk/dv:   one block per (sequence, key tile, kv head); loops over the group's query heads and then the query tiles
//            at or after the key tile, in order: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q (fp32 registers).
//            Per query tile, a warp computes Sᵀ and dPᵀ (16 keys × 16 queries each) for a group of kGroup query
//            chunks in one pass over the head dim, so each K / V fragment read serves the whole group; then per
//            chunk, in order, P and dS and the dV / dK mma. The per-accumulator mma order is the one-chunk order.
//            kGroup is 1 for now (larger groups spill at D = 128 and were slower; see kGroup).
//   dq:      one block per (sequence, query tile, query head); loops over key tiles: S, dP, dQ += dS K.
//   Dᵢ = rowsum(dO ∘ O): one warp per row. No float atomics: every output element is owned by one thread.
//
// Precision: Q, K, V, dO enter the mma as stored (bf16, exact products); every accumulation is fp32. P (forward
// P V, backward Pᵀ dO) and dS (dSᵀ Q, dS K) are fp32 and must become bf16 mma operands. kSplitP = false rounds them
// to nearest bf16 once, as FlashAttention does. kSplitP = true feeds them as an unevaluated sum hi + lo of two bf16
// (hi = x truncated to bf16, lo = the rest rounded), ~16 significant bits, at the cost of one more mma per such step
// (forward ~1.5×, backward ~1.6× the mma work). The tests compare against the CPU computed in fp32 and rounded ONCE
// to bf16 and allow 2× that error (check_bf16). One extra bf16 rounding per term of Σⱼ Pᵢⱼ vⱼ is harmless there (P
// ∈ [0, 1], terms of one sign: a host simulation of the test's cases gives the same max error as the CPU's), but
// for dq/dk = Σ dS k, whose terms cancel, it is not free: the same simulation (normal inputs, the test's lengths,
// D and scales, 6 seeds) gives max errors up to ~0.85× the 2× bound. On the H200 (2026-11-30) the single rounding
// failed the case with large v and dO (|x| ~ 1e15): dq 1.065e28 against the bound 9.79e27 and dv 2.315e13 against
// 2.252e13, so the split is ON: the kernels keep the contract's "within 2× one bf16 rounding" at the extra mma cost
// (measured in docs/benchmarks.md). In the split, lo has x's sign and is != 0 when x != 0, so for y = ±Inf the two products are infinities of
// one sign (x·y as on the CPU), never Inf − Inf (and 0·Inf only where x = 0, as on the CPU).
//
// Masked keys are skipped, never multiplied by 0 (attention_cuda.h): masked scores are selected away (-Inf / P = 0 /
// dS = 0 by selection, not by multiplication), key chunks entirely in the future are skipped, and the one partially
// masked 16×16 block of a warp on the diagonal goes through the mma only when the operand rows it multiplies by 0 (V
// in the forward, Q and dO for dk/dv, K for dq) are all finite; otherwise that block takes a scalar path that skips
// the masked pairs. Rows past the sequence end are staged as zeros.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/attention_tc.cuh"

namespace hlm::attention_detail {

namespace {

using bf16 = __nv_bfloat16;

constexpr bool kSplitP = true;  // header comment
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;  // query and key tile rows (attention_cuda_query_tile / key_tile)
static_assert(kTile == attention_cuda_query_tile() && kTile == attention_cuda_key_tile(), "tile sizes");
static_assert(kTile == 16 * kWarps, "each warp owns 16 rows of a tile");
constexpr int kPad = 8;  // bf16 of padding per shared row (16 bytes)
constexpr unsigned kFullMask = 0xffffffffu;

template <int D>
inline constexpr int kStride = D + kPad;  // shared row stride in bf16: (D + 8)·2 bytes = an odd multiple of 16

// ---- Primitives (inline PTX)

// 16 bytes global -> shared, asynchronously; valid = false zero-fills the 16 bytes without reading `src`.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}
// 4 bytes global -> shared, asynchronously; valid = false zero-fills.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8×8 matrix i (16 bytes each); register i of lane l receives
// matrix i's row l/4, columns 2(l%4), 2(l%4)+1 (low half = lower column). With .trans the matrix is transposed:
// register i receives M_i[2(l%4)][l/4] (low half) and M_i[2(l%4)+1][l/4].
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// d += A·B, m16n8k16, A 16×16 row-major bf16, B 16×8 "col" (each column's 16 k values) bf16, d fp32. Lane l = 4g + t:
//   A: a0 = (row g, k 2t..2t+1), a1 = (row g+8, k 2t..2t+1), a2 = (row g, k 2t+8..2t+9), a3 = (row g+8, k 2t+8..2t+9)
//   B: b0 = (k 2t..2t+1, col g), b1 = (k 2t+8..2t+9, col g)
//   C/D: d0, d1 = (row g, cols 2t, 2t+1), d2, d3 = (row g+8, cols 2t, 2t+1)
// (each .b32 register holds the lower k / column in its low half).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- Fragment addressing: the shared address this lane passes to ldmatrix .x4 (stride S bf16 per row).
//
// A operand of one 16×16 block at (r0, c0) of a row-major tile (Q, dO, K or V with k = head dim):
//   matrices m0 = rows 0-7 / cols 0-7 -> a0, m1 = rows 8-15 / cols 0-7 -> a1, m2 = rows 0-7 / cols 8-15 -> a2,
//   m3 = rows 8-15 / cols 8-15 -> a3. Lane l addresses matrix i = l/8, row l%8: row r0 + l%8 + 8·(i&1),
//   column c0 + 8·(i>>1). Trace, lane 9 (i = 1): row r0 + 1 + 8, col c0 -> m1's row 1; register a1 of lane l then
//   holds (row 8 + l/4, cols 2(l%4)..+1) = (row g+8, k 2t..2t+1). Matches the A layout above.
template <int S>
__device__ __forceinline__ const bf16* frag_a(const bf16* tile, int r0, int c0, int lane) {
  return tile + (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + c0 + 8 * (lane >> 4);
}
// B operands of TWO n8 tiles (n0..n0+7 and n0+8..n0+15) for one k16 step (k0..k0+15), from a tile stored n-major
// ([n][k]: K or V rows when k = head dim, for S = Q Kᵀ, dP = dO Vᵀ; Q or dO rows for Sᵀ = K Qᵀ, dPᵀ = V dOᵀ), no trans:
//   m0 = n 0-7 / k 0-7 -> b0 of tile n0, m1 = n 0-7 / k 8-15 -> b1 of tile n0, m2 = n 8-15 / k 0-7 -> b0 of tile
//   n0+8, m3 = n 8-15 / k 8-15 -> b1 of tile n0+8. Lane l: row (n) n0 + l%8 + 8·(i>>1), column (k) k0 + 8·(i&1).
//   Trace, register 0 of lane l: m0 row l/4 = n g, cols 2t..2t+1 = k 2t..2t+1 -> b0 = (k 2t..2t+1, col g). Register 1:
//   m1 row g, cols 8 + 2t.. -> b1 = (k 2t+8.., col g).
template <int S>
__device__ __forceinline__ const bf16* frag_b_nmajor(const bf16* tile, int n0, int k0, int lane) {
  return tile + (n0 + (lane & 7) + 8 * (lane >> 4)) * S + k0 + 8 * ((lane >> 3) & 1);
}
// B operands of TWO n8 tiles (columns n0.. and n0+8..) for one k16 step (rows k0..k0+15) from a tile stored k-major
// ([k][n]: V for O = P V, dO and Q for dV = Pᵀ dO and dK = dSᵀ Q, K for dQ = dS K), with .trans:
//   m0 = k 0-7 / n 0-7 -> b0 of tile n0, m1 = k 8-15 / n 0-7 -> b1 of tile n0, m2 = k 0-7 / n 8-15 -> b0 of tile
//   n0+8, m3 = k 8-15 / n 8-15 -> b1 of tile n0+8. Lane l: row (k) k0 + l%8 + 8·(i&1), column (n) n0 + 8·(i>>1).
//   Trace, register 0 of lane l (.trans): M0[2t][g], M0[2t+1][g] = (k 2t, 2t+1; n g) -> b0. Register 1: M1 rows
//   8 + 2t.. -> b1 = (k 2t+8..2t+9, n g).
template <int S>
__device__ __forceinline__ const bf16* frag_b_kmajor(const bf16* tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * S + n0 + 8 * (lane >> 4);
}

__device__ __forceinline__ uint32_t pack2(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// x ≈ hi + lo (header comment): hi = x truncated toward zero to bf16; lo = bf16(x - hi) (exact difference in fp32),
// replaced by ±2^-126 (x's sign) when it would be 0 or non-finite while x != 0. With kSplitP = false: hi = bf16(x).
__device__ __forceinline__ void split_bf16(float x, bf16& hi, bf16& lo) {
  if constexpr (!kSplitP) {
    hi = __float2bfloat16_rn(x);
    lo = __float2bfloat16_rn(0.0f);
  } else {
    const uint32_t bits = __float_as_uint(x);
    // (A NaN whose payload sits in the low 16 bits would truncate to Inf: NaN is rounded, which keeps it NaN.)
    hi = x != x ? __float2bfloat16_rn(x) : __ushort_as_bfloat16(static_cast<unsigned short>(bits >> 16));
    const float rest = x - __uint_as_float(bits & 0xffff0000u);
    const float l = __bfloat162float(__float2bfloat16_rn(rest));
    const bool keep = l != 0.0f && fabsf(l) < INFINITY;
    lo = __float2bfloat16_rn(keep ? l : (x == 0.0f ? 0.0f : copysignf(0x1p-126f, x)));
  }
}

// A fragments (hi and lo parts) of the 16×16 block whose columns (the mma's k) are the columns of the two 16×8
// accumulator tiles c0 (cols 0-7) and c1 (cols 8-15): a0 = (row g, k 2t..) = c0[0..1], a1 = (row g+8, k 2t..) =
// c0[2..3], a2 = (row g, k 8+2t..) = c1[0..1], a3 = (row g+8, k 8+2t..) = c1[2..3].
__device__ __forceinline__ void frag_a_from_acc(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&c0)[4],
                                                const float (&c1)[4]) {
  const float x[8] = {c0[0], c0[1], c0[2], c0[3], c1[0], c1[1], c1[2], c1[3]};  // a_r holds x[2r], x[2r + 1]
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    bf16 h0, l0, h1, l1;
    split_bf16(x[2 * r], h0, l0);
    split_bf16(x[2 * r + 1], h1, l1);
    hi[r] = pack2(h0, h1);
    lo[r] = pack2(l0, l1);
  }
}

// acc += P·B over one k16 step with P given as accumulator tiles c0, c1 (frag_a_from_acc) and B = two n8 tiles.
__device__ __forceinline__ void mma_split(float (&acc0)[4], float (&acc1)[4], const uint32_t (&a_hi)[4],
                                          const uint32_t (&a_lo)[4], const uint32_t (&b)[4]) {
  mma_bf16(acc0, a_hi, b[0], b[1]);
  mma_bf16(acc1, a_hi, b[2], b[3]);
  if constexpr (kSplitP) {
    mma_bf16(acc0, a_lo, b[0], b[1]);
    mma_bf16(acc1, a_lo, b[2], b[3]);
  }
}

// Row reductions over the 4 lanes (t = 0..3) holding one accumulator row; xor tree, every lane gets the same bits.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

// Element (row g and row g+8, column c = 0..15, uniform over the warp) of a 16×16 block held as the accumulator
// tiles x0 (columns 0-7) and x1 (columns 8-15), fetched from the lane that holds it: lane 4g + (c%8)/2, register
// c%2 (+2 for row g+8) of x0 for c < 8, of x1 otherwise. Selects, not dynamic indexing: the tiles stay in registers.
__device__ __forceinline__ void acc_pair_at(const float (&x0)[4], const float (&x1)[4], int c, int lane, float& row_lo,
                                            float& row_hi) {
  const int src = (lane & ~3) | ((c & 7) >> 1);
  const bool odd = (c & 1) != 0, right = c >= 8;
  const float v_lo = right ? (odd ? x1[1] : x1[0]) : (odd ? x0[1] : x0[0]);
  const float v_hi = right ? (odd ? x1[3] : x1[2]) : (odd ? x0[3] : x0[2]);
  row_lo = __shfl_sync(kFullMask, v_lo, src);
  row_hi = __shfl_sync(kFullMask, v_hi, src);
}

// The scalar path of a partially masked 16×16 block: acc (16 rows × D, accumulator layout: acc[i] holds columns
// 8i + 2t, +1 of rows g, g+8) += Σ_jj x(row, jj) · rows[jj][:] over the jj with visible(jj, half) (half 0: row g,
// 1: row g+8), x given as accumulator tiles x0, x1 (frag layout above). Pairs that are not visible are skipped, so a
// non-finite value in rows[jj] reaches only the rows that see jj. fp32 FMAs in jj order.
template <int D, typename Visible>
__device__ __forceinline__ void scalar_acc_16(float (&acc)[D / 8][4], const float (&x0)[4], const float (&x1)[4],
                                              const bf16* rows, int lane, Visible visible) {
  const int t = lane % 4;
#pragma unroll 1
  for (int jj = 0; jj < 16; ++jj) {
    float x_lo, x_hi;
    acc_pair_at(x0, x1, jj, lane, x_lo, x_hi);
    const bool vis_lo = visible(jj, 0), vis_hi = visible(jj, 1);
    const bf16* r = rows + jj * kStride<D> + 2 * t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float y = __bfloat162float(r[8 * i + e]);
        if (vis_lo) acc[i][e] = fmaf(x_lo, y, acc[i][e]);
        if (vis_hi) acc[i][2 + e] = fmaf(x_hi, y, acc[i][2 + e]);
      }
    }
  }
}

// Any non-finite bf16 among the 8 of a 16-byte word.
__device__ __forceinline__ bool has_nonfinite(uint4 w) {
  const uint32_t x[4] = {w.x, w.y, w.z, w.w};
  bool bad = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) bad |= (x[i] & 0x7f80u) == 0x7f80u || (x[i] & 0x7f800000u) == 0x7f800000u;
  return bad;
}
// Any non-finite value in rows r0..r0+15 of a staged tile (all D columns); the result is the same on every lane.
template <int D>
__device__ bool rows16_nonfinite(const bf16* tile, int r0, int lane) {
  constexpr int kChunks = D / 8;
  bool bad = false;
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int r = idx / kChunks, c = idx % kChunks;
    bad |= has_nonfinite(*reinterpret_cast<const uint4*>(tile + (r0 + r) * kStride<D> + 8 * c));
  }
  return __any_sync(kFullMask, bad);
}

// Stages rows [tok0, tok0 + 64) of `head` (token stride heads·D) into a [64][D + 8] shared tile with cp.async; rows at
// or past n_rows become zeros.
template <int D>
__device__ void stage_tile(bf16* dst, const bf16* src, int64_t tok0, int64_t n_rows, int64_t heads, int64_t head) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = r < n_rows;
    const bf16* g = valid ? src + ((tok0 + r) * heads + head) * D + 8 * c : src;
    cp_async16(dst + r * kStride<D> + 8 * c, g, valid);
  }
}
// Stages 64 fp32 row values (lse or Dᵢ) of query head h for tokens [tok0, tok0 + 64); rows past n_rows become 0.
__device__ void stage_rows(float* dst, const float* src, int64_t tok0, int64_t n_rows, int64_t heads, int64_t h) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    const bool valid = r < n_rows;
    cp_async4(dst + r, valid ? src + (tok0 + r) * heads + h : src, valid);
  }
}

template <int D>
constexpr size_t forward_smem_bytes() {
  return sizeof(bf16) * static_cast<size_t>(5 * kTile * kStride<D>);  // q, 2 × (k, v)
}
template <int D>
constexpr size_t dq_smem_bytes() {
  return sizeof(bf16) * static_cast<size_t>(6 * kTile * kStride<D>);  // q, dO, 2 × (k, v)
}
template <int D>
constexpr size_t dkdv_smem_bytes() {
  return sizeof(bf16) * static_cast<size_t>(6 * kTile * kStride<D>) +  // k, v, 2 × (q, dO)
         sizeof(float) * static_cast<size_t>(4 * kTile);               // 2 × (lse, Dᵢ)
}

// ---- Forward

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_forward_kernel(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const int64_t* cu_seqlens,
                      Dims dm, int* error_flag) {
  constexpr int S = kStride<D>;
  constexpr int kSteps = D / 16;  // k16 steps over the head dim
  constexpr int kDTiles = D / 8;  // n8 tiles over the head dim
  // Block order: tile rank-major over the sequences, the longest rows (last query tiles) first.
  const int64_t seq = blockIdx.x % dm.n_seqs;
  const int64_t qtile = dm.n_tiles - 1 - blockIdx.x / dm.n_seqs;
  const int64_t q0 = qtile * kTile, h = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || q0 >= sb.len) return;  // uniform over the block
  const int64_t kvh = h / dm.group, len = sb.len, begin = sb.begin;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [64][S]
  bf16* k_s = q_s + kTile * S;                     // [2][64][S]
  bf16* v_s = k_s + 2 * kTile * S;                 // [2][64][S]
  stage_tile<D>(q_s, q, begin + q0, len - q0, dm.Hq, h);
  stage_tile<D>(k_s, k, begin, len, dm.Hkv, kvh);
  stage_tile<D>(v_s, v, begin, len, dm.Hkv, kvh);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int64_t row_pos[2] = {q0 + 16 * warp + lane / 4, q0 + 16 * warp + lane / 4 + 8};  // rows g, g+8
  const int n_ktiles = static_cast<int>(qtile) + 1;  // key tiles 0..qtile; the last is the diagonal one

  uint32_t qf[kSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kt = 0; kt < n_ktiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();  // tile kt has landed for every thread; every warp is done with tile kt - 1's buffer
    if (kt == 0) {
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) ldsm_x4(qf[ks], frag_a<S>(q_s, 16 * warp, 16 * ks, lane));
    }
    if (kt + 1 < n_ktiles) {
      const int64_t k1 = static_cast<int64_t>(kt + 1) * kTile;
      const int nb = (kt + 1) & 1;
      stage_tile<D>(k_s + nb * kTile * S, k, begin + k1, len - k1, dm.Hkv, kvh);
      stage_tile<D>(v_s + nb * kTile * S, v, begin + k1, len - k1, dm.Hkv, kvh);
      cp_async_commit();
    }
    const bf16* kb = k_s + (kt & 1) * kTile * S;
    const bf16* vb = v_s + (kt & 1) * kTile * S;
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const bool diag = kt == n_ktiles - 1;
    // Key chunks (16 keys) this warp uses: all, or on the diagonal those up to its own rows' chunk.
    const int n_chunks = diag ? warp + 1 : 4;

    // S = Q Kᵀ: 16 rows × 64 keys, tile nt holds keys k0 + 8nt .. +7.
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kc >= n_chunks) break;
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t b[4];
        ldsm_x4(b, frag_b_nmajor<S>(kb, 16 * kc, 16 * ks, lane));
        mma_bf16(s[2 * kc], qf[ks], b[0], b[1]);
        mma_bf16(s[2 * kc + 1], qf[ks], b[2], b[3]);
      }
    }
    // Scale and mask (key j visible to row i iff j <= i; off the diagonal always), tile max.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = k0 + 8 * nt + 2 * t + (e & 1);
        const bool vis = j <= row_pos[e >> 1];
        s[nt][e] = vis ? s[nt][e] * dm.scale : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);  // fmaxf skips NaN, like the CPU's std::max
      }
    }
    float alpha[2], m_use[2], e_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      // While every visible score is -Inf (or NaN), exponents are taken against 0 (as in the scalar kernel).
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = expf(m[r] - m_use[r]);
      m[r] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = expf(s[nt][e] - m_use[e >> 1]);  // masked: exp(-Inf) = 0
        e_sum[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = fmaf(alpha[r], l[r], quad_sum(e_sum[r]));
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
    // The partially masked chunk (diagonal, chunk == warp) multiplies P = 0 by V rows: mma only if they are finite.
    const bool diag_scalar = diag && rows16_nonfinite<D>(vb, 16 * warp, lane);
    // O += P V.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kc >= n_chunks) break;
      if (diag_scalar && kc == warp) continue;  // below
      uint32_t a_hi[4], a_lo[4];
      frag_a_from_acc(a_hi, a_lo, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, frag_b_kmajor<S>(vb, 16 * kc, 16 * dp, lane));
        mma_split(o[2 * dp], o[2 * dp + 1], a_hi, a_lo, b);
      }
    }
    if (diag_scalar) {
      // Scalar path for chunk `warp`: skip the masked keys (j > i) instead of multiplying P = 0 by a non-finite v.
      float p0[4], p1[4];
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kc != warp) continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p0[e] = s[2 * kc][e];
          p1[e] = s[2 * kc + 1][e];
        }
      }
      const int64_t j0 = k0 + 16 * warp;
      scalar_acc_16<D>(o, p0, p1, vb + 16 * warp * S, lane,
                       [&](int jj, int half) { return j0 + jj <= row_pos[half]; });
    }
  }

  // out = O / l, lse = m + log l; a row with no finite max gets NaN (the CPU's exp(-Inf - -Inf)).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row_pos[r] >= len) continue;
    const int64_t row = (begin + row_pos[r]) * dm.Hq + h;
    const bool no_finite_max = m[r] == -INFINITY;
    const float inv_l = 1.0f / l[r];
    bf16* dst = out + row * D + 2 * t;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      const float x0 = no_finite_max ? cuda::quiet_nan() : o[i][2 * r] * inv_l;
      const float x1 = no_finite_max ? cuda::quiet_nan() : o[i][2 * r + 1] * inv_l;
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) = __halves2bfloat162(__float2bfloat16_rn(x0),
                                                                            __float2bfloat16_rn(x1));
    }
    if (t == 0) lse[row] = no_finite_max ? cuda::quiet_nan() : m[r] + logf(l[r]);
  }
}

// ---- Paged forward (attention over a paged bf16 KV cache, attention_cache_cuda.h's tensor-core chunk path)

// Stages the cached K and V rows of key positions [k0, k0 + 64) of kv head kvh, found through the sequence's block
// table, into [64][D + 8] shared tiles with cp.async; positions at or past kend, and rows whose block id is outside
// the pool (error flag raised), become zeros.
template <int D>
__device__ void stage_paged(bf16* k_dst, bf16* v_dst, const bf16* k_cache, const bf16* v_cache,
                            const int32_t* table, int64_t k0, int64_t kend, int64_t kvh, const PagedDims& dm,
                            int* error_flag) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t pos = k0 + r;
    bool valid = pos < kend;
    int64_t off = 0;
    if (valid) {
      const int64_t block = table[pos / dm.block_size];
      valid = block >= 0 && block < dm.num_blocks;
      if (!valid && error_flag != nullptr && c == 0) atomicOr(error_flag, 1);
      off = ((block * dm.block_size + pos % dm.block_size) * dm.Hkv + kvh) * D + 8 * c;
    }
    cp_async16(k_dst + r * kStride<D> + 8 * c, valid ? k_cache + off : k_cache, valid);
    cp_async16(v_dst + r * kStride<D> + 8 * c, valid ? v_cache + off : v_cache, valid);
  }
}

// One block per (sequence, query tile, query head), longest rows first, as tc_forward_kernel; the chunk's queries sit
// at absolute positions start .. ctx − 1 (start = ctx − n_q), so query row i sees keys j ≤ start + i. Key tiles past
// the block's last query are never loaded; a warp skips the 16-key chunks past its own last row. Masked scores are
// selected to −Inf before the softmax (P = 0), but unlike tc_forward_kernel a partially masked chunk always goes
// through the mma: a non-finite v row of a new token can make the earlier rows of its 16-key chunk NaN (0 · Inf).
// The cache holds the model's own k/v, finite unless the model already overflowed.
template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_paged_forward_kernel(bf16* out, const bf16* q, const bf16* k_cache, const bf16* v_cache,
                            const int32_t* tables, const int64_t* context_lens, const int64_t* cu, PagedDims dm,
                            int* error_flag) {
  constexpr int S = kStride<D>;
  constexpr int kSteps = D / 16;
  constexpr int kDTiles = D / 8;
  const int64_t seq = blockIdx.x % dm.N;
  const int64_t qtile = dm.n_tiles - 1 - blockIdx.x / dm.N;
  const int64_t q0 = qtile * kTile, h = blockIdx.y;
  // The sequence's rows and context, validated as attention_cache.cu's seq_view.
  const int64_t b = cu[seq], e = cu[seq + 1], ctx = context_lens[seq];
  bool ok = b >= 0 && e >= b && e <= dm.T && e - b <= dm.max_q && ctx >= e - b && ctx <= dm.max_ctx &&
            (ctx + dm.block_size - 1) / dm.block_size <= dm.max_blocks;
  if (seq == 0 && b != 0) ok = false;
  if (seq == dm.N - 1 && e != dm.T) ok = false;
  if (!ok) {
    if (error_flag != nullptr && threadIdx.x == 0) atomicOr(error_flag, 1);
    return;
  }
  const int64_t nq = e - b, start = ctx - nq;
  if (q0 >= nq) return;  // uniform over the block
  const int64_t kvh = h / dm.group;
  const int32_t* table = tables + seq * dm.max_blocks;
  const int64_t kend = start + q0 + kTile < ctx ? start + q0 + kTile : ctx;  // keys the tile's rows see: [0, kend)

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [64][S]
  bf16* k_s = q_s + kTile * S;                     // [2][64][S]
  bf16* v_s = k_s + 2 * kTile * S;                 // [2][64][S]
  stage_tile<D>(q_s, q, b + q0, nq - q0, dm.Hq, h);
  stage_paged<D>(k_s, v_s, k_cache, v_cache, table, 0, kend, kvh, dm, error_flag);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int64_t local[2] = {q0 + 16 * warp + lane / 4, q0 + 16 * warp + lane / 4 + 8};  // rows g, g+8 in the chunk
  const int64_t row_pos[2] = {start + local[0], start + local[1]};                      // their absolute positions
  const int64_t warp_last = start + q0 + 16 * warp + 15;  // the warp's last row's position
  const int n_ktiles = static_cast<int>((kend + kTile - 1) / kTile);

  uint32_t qf[kSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kt = 0; kt < n_ktiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();  // tile kt has landed for every thread; every warp is done with tile kt - 1's buffer
    if (kt == 0) {
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) ldsm_x4(qf[ks], frag_a<S>(q_s, 16 * warp, 16 * ks, lane));
    }
    if (kt + 1 < n_ktiles) {
      const int nb = (kt + 1) & 1;
      stage_paged<D>(k_s + nb * kTile * S, v_s + nb * kTile * S, k_cache, v_cache, table,
                     static_cast<int64_t>(kt + 1) * kTile, kend, kvh, dm, error_flag);
      cp_async_commit();
    }
    const bf16* kb = k_s + (kt & 1) * kTile * S;
    const bf16* vb = v_s + (kt & 1) * kTile * S;
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    // 16-key chunks of this tile the warp's rows can see: those starting at or before its last row.
    const int64_t seen = warp_last < k0 ? 0 : (warp_last - k0) / 16 + 1;
    const int n_chunks = static_cast<int>(seen < 4 ? seen : 4);

    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kc >= n_chunks) break;
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t bb[4];
        ldsm_x4(bb, frag_b_nmajor<S>(kb, 16 * kc, 16 * ks, lane));
        mma_bf16(s[2 * kc], qf[ks], bb[0], bb[1]);
        mma_bf16(s[2 * kc + 1], qf[ks], bb[2], bb[3]);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int64_t j = k0 + 8 * nt + 2 * t + (x & 1);
        const bool vis = j <= row_pos[x >> 1] && j < kend;
        s[nt][x] = vis ? s[nt][x] * dm.scale : -INFINITY;
        mx[x >> 1] = fmaxf(mx[x >> 1], s[nt][x]);
      }
    }
    float alpha[2], m_use[2], e_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = expf(m[r] - m_use[r]);
      m[r] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        s[nt][x] = expf(s[nt][x] - m_use[x >> 1]);
        e_sum[x >> 1] += s[nt][x];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = fmaf(alpha[r], l[r], quad_sum(e_sum[r]));
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kc >= n_chunks) break;
      uint32_t a_hi[4], a_lo[4];
      frag_a_from_acc(a_hi, a_lo, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t bb[4];
        ldsm_x4_trans(bb, frag_b_kmajor<S>(vb, 16 * kc, 16 * dp, lane));
        mma_split(o[2 * dp], o[2 * dp + 1], a_hi, a_lo, bb);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (local[r] >= nq) continue;
    const int64_t row = (b + local[r]) * dm.Hq + h;
    const bool no_finite_max = m[r] == -INFINITY;
    const float inv_l = 1.0f / l[r];
    bf16* dst = out + row * D + 2 * t;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      const float x0 = no_finite_max ? cuda::quiet_nan() : o[i][2 * r] * inv_l;
      const float x1 = no_finite_max ? cuda::quiet_nan() : o[i][2 * r + 1] * inv_l;
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) = __halves2bfloat162(__float2bfloat16_rn(x0),
                                                                            __float2bfloat16_rn(x1));
    }
  }
}

// ---- Backward

// dvec[r] = Σ_d d_out[r, d] · out[r, d] for rows r of [T · Hq]: one warp per row, D/32 fmas per lane then a xor tree.
template <int D>
__global__ void tc_row_dot_kernel(float* dvec, const bf16* d_out, const bf16* out, int64_t rows) {
  constexpr int kPer = D / 32;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < kPer; ++c) {
      const int64_t x = r * D + lane * kPer + c;
      acc = fmaf(__bfloat162float(d_out[x]), __bfloat162float(out[x]), acc);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(kFullMask, acc, off);
    if (lane == 0) dvec[r] = acc;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_dkdv_kernel(bf16* dk, bf16* dv, const bf16* d_out, const bf16* q, const bf16* k, const bf16* v,
                   const float* lse, const float* dvec, const int64_t* cu_seqlens, Dims dm, int* error_flag) {
  constexpr int S = kStride<D>;
  constexpr int kSteps = D / 16;
  constexpr int kDTiles = D / 8;
  // Query chunks per Sᵀ / dPᵀ pass (below). ptxas -v, sm_90a, nvcc 13: D = 64 (K / V in registers) kGroup 2: 172
  // registers, no spills (kGroup 4: 245); D = 128 kGroup 4: 255 registers, 8 bytes of spill stores (kGroup 2: 20;
  // kGroup 1: 253, none, but 4 ldmatrix per 4 mma of Sᵀ / dPᵀ). Measured on the H200 (2026-11-30, B8 T1024 32/8
  // heads): D = 128 with kGroup 4 made the dk/dv kernel slower (1.30 ms, 569k local-memory spill requests; forward +
  // backward 2.549 -> 2.685 ms), so D = 128 keeps one chunk per pass; so does D = 64 until a bench measures its
  // variant (K / V in registers, kGroup 2: 2 blocks per SM instead of 3).
  constexpr int kGroup = 1;
  // Block order: tile rank-major over the sequences, the first key tiles (most query tiles to visit) first.
  const int64_t seq = blockIdx.x % dm.n_seqs, k0 = (blockIdx.x / dm.n_seqs) * kTile, kvh = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || k0 >= sb.len) return;
  const int64_t len = sb.len, begin = sb.begin;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* k_s = reinterpret_cast<bf16*>(smem_raw);  // [64][S]
  bf16* v_s = k_s + kTile * S;                     // [64][S]
  bf16* q_s = v_s + kTile * S;                     // [2][64][S]
  bf16* do_s = q_s + 2 * kTile * S;                // [2][64][S]
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * kTile * S);  // [2][64]
  float* dvec_s = lse_s + 2 * kTile;                               // [2][64]

  // Work item `it` = (query head kvh·group + it / n_qtiles, query tile k0 + 64·(it % n_qtiles)), in this order.
  // (32-bit counts: no 64-bit division per item while dk and dv fill the registers.)
  const int n_qtiles = static_cast<int>((len - k0 + kTile - 1) / kTile);
  const int n_items = static_cast<int>(dm.group) * n_qtiles;
  const auto stage_item = [&](int it, int buf) {
    const int64_t h = kvh * dm.group + it / n_qtiles, q0 = k0 + (it % n_qtiles) * kTile;
    stage_tile<D>(q_s + buf * kTile * S, q, begin + q0, len - q0, dm.Hq, h);
    stage_tile<D>(do_s + buf * kTile * S, d_out, begin + q0, len - q0, dm.Hq, h);
    stage_rows(lse_s + buf * kTile, lse, begin + q0, len - q0, dm.Hq, h);
    stage_rows(dvec_s + buf * kTile, dvec, begin + q0, len - q0, dm.Hq, h);
  };
  stage_tile<D>(k_s, k, begin + k0, len - k0, dm.Hkv, kvh);
  stage_tile<D>(v_s, v, begin + k0, len - k0, dm.Hkv, kvh);
  stage_item(0, 0);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int key_r[2] = {16 * warp + lane / 4, 16 * warp + lane / 4 + 8};  // rows g, g+8 (relative to k0)
  float dk_acc[kDTiles][4], dv_acc[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.0f;
  }

  // kKVRegs: the warp's K and V A fragments (16 keys × D) stay in registers for the whole block (32 registers at
  // D = 64; D = 128 has no room: dk and dv already hold 128) instead of being read once per k-step of a chunk group.
  // Off: D = 64 could, but the variant is not measured yet (kGroup comment above).
  constexpr bool kKVRegs = false;
  uint32_t kf[kKVRegs ? kSteps : 1][4], vf[kKVRegs ? kSteps : 1][4];

  for (int it = 0; it < n_items; ++it) {
    cp_async_wait_all();
    __syncthreads();  // item it has landed; every warp is done with item it - 1's buffers
    if constexpr (kKVRegs) {
      if (it == 0) {  // k_s and v_s landed with item 0 and never change
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks) {
          ldsm_x4(kf[ks], frag_a<S>(k_s, 16 * warp, 16 * ks, lane));
          ldsm_x4(vf[ks], frag_a<S>(v_s, 16 * warp, 16 * ks, lane));
        }
      }
    }
    if (it + 1 < n_items) {
      stage_item(it + 1, (it + 1) & 1);
      cp_async_commit();
    }
    const int buf = it & 1;
    const bf16* qb = q_s + buf * kTile * S;
    const bf16* dob = do_s + buf * kTile * S;
    const float* lse_b = lse_s + buf * kTile;
    const float* dvec_b = dvec_s + buf * kTile;
    const int64_t q0 = k0 + (it % n_qtiles) * kTile;
    const bool diag = q0 == k0;
    // Visibility in 32-bit tile-relative terms: key k0 + kr sees query q0 + qi iff kr <= q_rel + qi, and the query
    // is in the sequence iff qi < n_q.
    const int q_rel = static_cast<int>(q0 - k0), n_q = static_cast<int>(len - q0 < kTile ? len - q0 : kTile);
    // Query chunks (16 queries) that see some of this warp's keys: on the diagonal, chunks from the warp's own on.
    const int c_first = diag ? warp : 0;
    // The partially masked block (diagonal, chunk == warp) multiplies P = dS = 0 by its Q and dO rows.
    const bool diag_scalar =
        diag && (rows16_nonfinite<D>(qb, 16 * warp, lane) || rows16_nonfinite<D>(dob, 16 * warp, lane));

    // Query chunks (16 queries) in groups of kGroup: one pass over the k-steps computes Sᵀ and dPᵀ of the group's
    // live chunks (from c_first on, before the sequence end), so each K / V fragment feeds up to 2·kGroup mma; then
    // each live chunk of the group, in increasing order, turns them into P and dS and adds its dV and dK terms.
    // Every accumulator gets the same mma sequence as with one chunk per pass: Sᵀ / dPᵀ tiles k-steps 0, 1, ...
    // from 0; dV / dK chunk after chunk.
#pragma unroll 1
    for (int c0 = 0; c0 < 4; c0 += kGroup) {
      bool live[kGroup];
      bool any_live = false;
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        live[j] = c0 + j >= c_first && q0 + 16 * (c0 + j) < len;  // warp-uniform
        any_live |= live[j];
      }
      if (!any_live) continue;
      // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: 16 keys × 16 queries per chunk c0 + j, tile nt holds queries q0 + 16(c0 + j) +
      // 8nt .. +7; every tile gets its k-steps in increasing order.
      float st[kGroup][2][4], dpt[kGroup][2][4];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) st[j][nt][e] = dpt[j][nt][e] = 0.0f;
        }
      }
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t ka[4], va[4];
        if constexpr (kKVRegs) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            ka[r] = kf[ks][r];
            va[r] = vf[ks][r];
          }
        } else {
          ldsm_x4(ka, frag_a<S>(k_s, 16 * warp, 16 * ks, lane));
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (!live[j]) continue;  // warp-uniform; its st / dpt stay unused
          uint32_t b[4];
          ldsm_x4(b, frag_b_nmajor<S>(qb, 16 * (c0 + j), 16 * ks, lane));
          mma_bf16(st[j][0], ka, b[0], b[1]);
          mma_bf16(st[j][1], ka, b[2], b[3]);
        }
        if constexpr (!kKVRegs) ldsm_x4(va, frag_a<S>(v_s, 16 * warp, 16 * ks, lane));
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (!live[j]) continue;  // warp-uniform; its st / dpt stay unused
          uint32_t b[4];
          ldsm_x4(b, frag_b_nmajor<S>(dob, 16 * (c0 + j), 16 * ks, lane));
          mma_bf16(dpt[j][0], va, b[0], b[1]);
          mma_bf16(dpt[j][1], va, b[2], b[3]);
        }
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        if (!live[j]) continue;
        const int c = c0 + j;
        // Pᵀ = exp(s - lse), dSᵀ = Pᵀ ⊙ (dPᵀ - Dᵢ), both 0 by selection where query i does not see key j (j > i,
        // or i past the sequence end).
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = 16 * c + 8 * nt + 2 * t + (e & 1);  // query row in the tile
            const bool vis = key_r[e >> 1] <= q_rel + qi && qi < n_q;
            const float p = expf(st[j][nt][e] * dm.scale - lse_b[qi]);
            const float ds = p * (dpt[j][nt][e] - dvec_b[qi]);
            st[j][nt][e] = vis ? p : 0.0f;
            dpt[j][nt][e] = vis ? ds : 0.0f;
          }
        }
        if (diag_scalar && c == warp) {
          // Scalar path: skip the masked queries instead of multiplying P = dS = 0 by a non-finite q or dO row.
          const int i0 = 16 * c;
          const auto visible = [&](int ii, int half) { return key_r[half] <= q_rel + i0 + ii && i0 + ii < n_q; };
          scalar_acc_16<D>(dv_acc, st[j][0], st[j][1], dob + 16 * c * S, lane, visible);
          scalar_acc_16<D>(dk_acc, dpt[j][0], dpt[j][1], qb + 16 * c * S, lane, visible);
          continue;
        }
        // dV += Pᵀ dO, dK += dSᵀ Q (k = the 16 queries of chunk c).
        uint32_t p_hi[4], p_lo[4], ds_hi[4], ds_lo[4];
        frag_a_from_acc(p_hi, p_lo, st[j][0], st[j][1]);
        frag_a_from_acc(ds_hi, ds_lo, dpt[j][0], dpt[j][1]);
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          uint32_t b[4];
          ldsm_x4_trans(b, frag_b_kmajor<S>(dob, 16 * c, 16 * dp, lane));
          mma_split(dv_acc[2 * dp], dv_acc[2 * dp + 1], p_hi, p_lo, b);
          ldsm_x4_trans(b, frag_b_kmajor<S>(qb, 16 * c, 16 * dp, lane));
          mma_split(dk_acc[2 * dp], dk_acc[2 * dp + 1], ds_hi, ds_lo, b);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key_pos = k0 + key_r[r];
    if (key_pos >= len) continue;
    const int64_t row = (begin + key_pos) * dm.Hkv + kvh;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(dk + row * D + 8 * i + 2 * t) = __halves2bfloat162(
          __float2bfloat16_rn(dk_acc[i][2 * r] * dm.scale), __float2bfloat16_rn(dk_acc[i][2 * r + 1] * dm.scale));
      *reinterpret_cast<__nv_bfloat162*>(dv + row * D + 8 * i + 2 * t) =
          __halves2bfloat162(__float2bfloat16_rn(dv_acc[i][2 * r]), __float2bfloat16_rn(dv_acc[i][2 * r + 1]));
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_dq_kernel(bf16* dq, const bf16* d_out, const bf16* q, const bf16* k, const bf16* v, const float* lse,
                 const float* dvec, const int64_t* cu_seqlens, Dims dm, int* error_flag) {
  constexpr int S = kStride<D>;
  constexpr int kSteps = D / 16;
  constexpr int kDTiles = D / 8;
  // Block order: tile rank-major over the sequences, the longest rows (last query tiles) first.
  const int64_t seq = blockIdx.x % dm.n_seqs;
  const int64_t qtile = dm.n_tiles - 1 - blockIdx.x / dm.n_seqs;
  const int64_t q0 = qtile * kTile, h = blockIdx.y;
  const SeqBounds sb = seq_bounds(cu_seqlens, seq, dm, error_flag);
  if (!sb.ok || q0 >= sb.len) return;
  const int64_t kvh = h / dm.group, len = sb.len, begin = sb.begin;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);  // [64][S]
  bf16* do_s = q_s + kTile * S;                    // [64][S]
  bf16* k_s = do_s + kTile * S;                    // [2][64][S]
  bf16* v_s = k_s + 2 * kTile * S;                 // [2][64][S]
  stage_tile<D>(q_s, q, begin + q0, len - q0, dm.Hq, h);
  stage_tile<D>(do_s, d_out, begin + q0, len - q0, dm.Hq, h);
  stage_tile<D>(k_s, k, begin, len, dm.Hkv, kvh);
  stage_tile<D>(v_s, v, begin, len, dm.Hkv, kvh);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int64_t row_pos[2] = {q0 + 16 * warp + lane / 4, q0 + 16 * warp + lane / 4 + 8};
  float lse_r[2], dvec_r[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool valid = row_pos[r] < len;
    const int64_t row = (begin + row_pos[r]) * dm.Hq + h;
    lse_r[r] = valid ? lse[row] : 0.0f;
    dvec_r[r] = valid ? dvec[row] : 0.0f;
  }
  const int n_ktiles = static_cast<int>(qtile) + 1;

  uint32_t qf[kSteps][4], dof[kSteps][4];
  float dq_acc[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) dq_acc[i][0] = dq_acc[i][1] = dq_acc[i][2] = dq_acc[i][3] = 0.0f;

  for (int kt = 0; kt < n_ktiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        ldsm_x4(qf[ks], frag_a<S>(q_s, 16 * warp, 16 * ks, lane));
        ldsm_x4(dof[ks], frag_a<S>(do_s, 16 * warp, 16 * ks, lane));
      }
    }
    if (kt + 1 < n_ktiles) {
      const int64_t k1 = static_cast<int64_t>(kt + 1) * kTile;
      const int nb = (kt + 1) & 1;
      stage_tile<D>(k_s + nb * kTile * S, k, begin + k1, len - k1, dm.Hkv, kvh);
      stage_tile<D>(v_s + nb * kTile * S, v, begin + k1, len - k1, dm.Hkv, kvh);
      cp_async_commit();
    }
    const bf16* kb = k_s + (kt & 1) * kTile * S;
    const bf16* vb = v_s + (kt & 1) * kTile * S;
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    const bool diag = kt == n_ktiles - 1;
    const int n_chunks = diag ? warp + 1 : 4;
    // The partially masked block (diagonal, chunk == warp) multiplies dS = 0 by its K rows.
    const bool diag_scalar = diag && rows16_nonfinite<D>(kb, 16 * warp, lane);

#pragma unroll 1
    for (int kc = 0; kc < 4; ++kc) {
      if (kc >= n_chunks) break;
      // S = Q Kᵀ, dP = dO Vᵀ: 16 rows × 16 keys, tile nt holds keys k0 + 16kc + 8nt .. +7.
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      float dp[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t b[4];
        ldsm_x4(b, frag_b_nmajor<S>(kb, 16 * kc, 16 * ks, lane));
        mma_bf16(s[0], qf[ks], b[0], b[1]);
        mma_bf16(s[1], qf[ks], b[2], b[3]);
        ldsm_x4(b, frag_b_nmajor<S>(vb, 16 * kc, 16 * ks, lane));
        mma_bf16(dp[0], dof[ks], b[0], b[1]);
        mma_bf16(dp[1], dof[ks], b[2], b[3]);
      }
      // dS = exp(s - lse) ⊙ (dP - Dᵢ), 0 by selection where key j > row i.
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = k0 + 16 * kc + 8 * nt + 2 * t + (e & 1);
          const bool vis = j <= row_pos[e >> 1];
          const float ds = expf(s[nt][e] * dm.scale - lse_r[e >> 1]) * (dp[nt][e] - dvec_r[e >> 1]);
          s[nt][e] = vis ? ds : 0.0f;
        }
      }
      if (diag_scalar && kc == warp) {
        // Scalar path: skip the masked keys instead of multiplying dS = 0 by a non-finite k row.
        const int64_t j0 = k0 + 16 * kc;
        scalar_acc_16<D>(dq_acc, s[0], s[1], kb + 16 * kc * S, lane,
                         [&](int jj, int half) { return j0 + jj <= row_pos[half]; });
        continue;
      }
      // dQ += dS K (k = the 16 keys of chunk kc).
      uint32_t a_hi[4], a_lo[4];
      frag_a_from_acc(a_hi, a_lo, s[0], s[1]);
#pragma unroll
      for (int dpair = 0; dpair < kDTiles / 2; ++dpair) {
        uint32_t b[4];
        ldsm_x4_trans(b, frag_b_kmajor<S>(kb, 16 * kc, 16 * dpair, lane));
        mma_split(dq_acc[2 * dpair], dq_acc[2 * dpair + 1], a_hi, a_lo, b);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row_pos[r] >= len) continue;
    const int64_t row = (begin + row_pos[r]) * dm.Hq + h;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(dq + row * D + 8 * i + 2 * t) = __halves2bfloat162(
          __float2bfloat16_rn(dq_acc[i][2 * r] * dm.scale), __float2bfloat16_rn(dq_acc[i][2 * r + 1] * dm.scale));
    }
  }
}

// ---- Launchers

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int D>
void forward_launch(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const int64_t* cu,
                    const Dims& dm, int* flag, cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<D>();
  allow_smem(tc_forward_kernel<D>, smem);
  const dim3 grid(static_cast<unsigned>(dm.n_seqs * dm.n_tiles), static_cast<unsigned>(dm.Hq));
  tc_forward_kernel<D><<<grid, kThreads, smem, stream>>>(out, lse, q, k, v, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <int D>
void backward_launch(bf16* dq, bf16* dk, bf16* dv, const bf16* d_out, const bf16* q, const bf16* k, const bf16* v,
                     const bf16* out, const float* lse, float* dvec, const int64_t* cu, const Dims& dm, int* flag,
                     cudaStream_t stream) {
  const int64_t rows = dm.T * dm.Hq;
  constexpr int kRowDotThreads = 256;
  tc_row_dot_kernel<D><<<cuda::grid_blocks(rows, kRowDotThreads / 32), kRowDotThreads, 0, stream>>>(dvec, d_out, out,
                                                                                                      rows);
  HLM_CUDA_CHECK_LAUNCH();
  constexpr size_t smem_dkdv = dkdv_smem_bytes<D>(), smem_dq = dq_smem_bytes<D>();
  allow_smem(tc_dkdv_kernel<D>, smem_dkdv);
  allow_smem(tc_dq_kernel<D>, smem_dq);
  const auto x = static_cast<unsigned>(dm.n_seqs * dm.n_tiles);
  tc_dkdv_kernel<D><<<dim3(x, static_cast<unsigned>(dm.Hkv)), kThreads, smem_dkdv, stream>>>(
      dk, dv, d_out, q, k, v, lse, dvec, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
  tc_dq_kernel<D><<<dim3(x, static_cast<unsigned>(dm.Hq)), kThreads, smem_dq, stream>>>(dq, d_out, q, k, v, lse, dvec,
                                                                                        cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

template <int D>
void paged_forward_launch(bf16* out, const bf16* q, const bf16* kc, const bf16* vc, const int32_t* tables,
                          const int64_t* ctx, const int64_t* cu, const PagedDims& dm, int* flag, cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<D>();
  allow_smem(tc_paged_forward_kernel<D>, smem);
  const dim3 grid(static_cast<unsigned>(dm.N * dm.n_tiles), static_cast<unsigned>(dm.Hq));
  tc_paged_forward_kernel<D><<<grid, kThreads, smem, stream>>>(out, q, kc, vc, tables, ctx, cu, dm, flag);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool tc_supported(const Dims& dm, const void* const* tensors, int n_tensors) {
  if (dm.D != 64 && dm.D != 128) return false;
  if (dm.window > 0) return false;  // sliding windows run on the scalar kernels (attention.cu)
  for (int i = 0; i < n_tensors; ++i)
    if (reinterpret_cast<uintptr_t>(tensors[i]) % 16 != 0) return false;  // cp.async and bf16x2 stores
  return true;
}

void tc_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const int64_t* cu_seqlens,
                const Dims& dm, int* error_flag, cudaStream_t stream) {
  if (dm.D == 64)
    forward_launch<64>(out, lse, q, k, v, cu_seqlens, dm, error_flag, stream);
  else
    forward_launch<128>(out, lse, q, k, v, cu_seqlens, dm, error_flag, stream);
}

void tc_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* d_out, const bf16* q, const bf16* k, const bf16* v,
                 const bf16* out, const float* lse, float* dvec, const int64_t* cu_seqlens, const Dims& dm,
                 int* error_flag, cudaStream_t stream) {
  if (dm.D == 64)
    backward_launch<64>(dq, dk, dv, d_out, q, k, v, out, lse, dvec, cu_seqlens, dm, error_flag, stream);
  else
    backward_launch<128>(dq, dk, dv, d_out, q, k, v, out, lse, dvec, cu_seqlens, dm, error_flag, stream);
}

void tc_paged_forward(bf16* out, const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* tables,
                      const int64_t* context_lens, const int64_t* cu_seqlens, const PagedDims& dm, int* error_flag,
                      cudaStream_t stream) {
  if (dm.D == 64)
    paged_forward_launch<64>(out, q, k_cache, v_cache, tables, context_lens, cu_seqlens, dm, error_flag, stream);
  else
    paged_forward_launch<128>(out, q, k_cache, v_cache, tables, context_lens, cu_seqlens, dm, error_flag, stream);
}

}  // namespace hlm::attention_detail
