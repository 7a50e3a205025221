// Self-test of emu_mma.h and of gdn_mma.cuh's load / re-pack helpers on the CPU: one warp multiplies random bf16
// tiles loaded every way the helpers offer (A row-major and k-major, B n-major and k-major, single and paired tiles,
// ldmatrix x1 by hand) and a chained product through a_from_acc, and compares each 16×8 result with a plain double
// product of the same bf16 values (exact products; only the sum order differs). Also: the shuffles of emu.h.
// Build and run: bash tools/cuda_emu/emu_mma_selftest.sh
#include <cstdio>
#include <random>

#define HLM_CUDA_EMU 1
#include "ops/gated_delta_rule/gdn_mma.cuh"

using namespace hlm::gdn_mma;
using bf16 = __nv_bfloat16;

namespace {
constexpr int kLd = 24;  // bf16 row stride of the 16-wide test tiles (48 B: 16-byte aligned rows)
int g_fail = 0, g_checks = 0;

void check(const char* what, const float (&got)[16][8], const double (&want)[16][8], double tol) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      ++g_checks;
      if (std::fabs(got[r][c] - want[r][c]) > tol * (1.0 + std::fabs(want[r][c]))) {
        if (g_fail++ < 10) std::printf("FAIL %s [%d][%d]: %g vs %g\n", what, r, c, got[r][c], want[r][c]);
      }
    }
}
}  // namespace

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  alignas(128) static bf16 A[16 * kLd], At[16 * kLd], Bn[16 * kLd], Bk[16 * kLd], B2[16 * kLd];
  float a[16][16], b[16][16], b2[16][8];  // math values: A [m][k], B [k][n] (n 0-15), B2 [k][n]
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      a[i][j] = static_cast<float>(bf16(ud(rng)));
      b[i][j] = static_cast<float>(bf16(ud(rng)));
      A[i * kLd + j] = bf16(a[i][j]);   // row-major [m][k]
      At[j * kLd + i] = bf16(a[i][j]);  // k-major [k][m]
      Bk[i * kLd + j] = bf16(b[i][j]);  // k-major [k][n]
      Bn[j * kLd + i] = bf16(b[i][j]);  // n-major [n][k]
    }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      b2[i][j] = static_cast<float>(bf16(ud(rng)));
      B2[i * kLd + j] = bf16(b2[i][j]);
    }
  double want[2][16][8], chain[16][8];
  float want_r[16][16];  // the first product rounded to bf16, as a_from_acc does
  for (int n = 0; n < 2; ++n)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        double s = 0;
        for (int k = 0; k < 16; ++k) s += static_cast<double>(a[r][k]) * b[k][8 * n + c];
        want[n][r][c] = s;
        want_r[r][8 * n + c] = static_cast<float>(bf16(static_cast<float>(s)));
      }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += static_cast<double>(want_r[r][k]) * b2[k][c];
      chain[r][c] = s;
    }

  float got[8][2][16][8];  // variant, n-tile, C
  int shfl_bad = 0;
  emu_launch({1, 1, 1}, 32, 0, [&] {
    const int l = lane_id();
    FragA fa[2];
    load_a(fa[0], A, kLd);
    load_a_trans(fa[1], At, kLd);
    FragB fb[4][2];
    load_b2(fb[0], Bn, kLd);
    load_b2_trans(fb[1], Bk, kLd);
    load_b(fb[2][0], Bn, kLd);
    load_b(fb[2][1], Bn + 8 * kLd, kLd);
    load_b_trans(fb[3][0], Bk, kLd);
    load_b_trans(fb[3][1], Bk + 8, kLd);
    for (int v = 0; v < 8; ++v)
      for (int n = 0; n < 2; ++n) {
        FragC c;
        zero(c);
        if (v < 4) mma_16816(c, fa[0], fb[v][n]);      // A row-major with each B load
        else if (v < 7) mma_16816(c, fa[1], fb[v - 4][n]);  // A k-major
        else {  // A by hand with x1 loads (matrix i = rows 8(i%2).., cols 8(i/2)..)
          FragA h;
          for (int i = 0; i < 4; ++i) ldsm_x1(h.r[i], A + (8 * (i % 2) + l % 8) * kLd + 8 * (i / 2));
          mma_16816(c, h, fb[0][n]);
        }
        for (int e = 0; e < 4; ++e) got[v][n][acc_row(e)][acc_col(e)] = c.r[e];
      }
    // Chain: C = A B (two n-tiles) → a_from_acc → C2 = bf16(C) · B2.
    FragC c0, c1, c2;
    zero(c0), zero(c1), zero(c2);
    mma_16816(c0, fa[0], fb[0][0]);
    mma_16816(c1, fa[0], fb[0][1]);
    FragB b2f;
    load_b_trans(b2f, B2, kLd);
    mma_16816(c2, a_from_acc(c0, c1), b2f);
    for (int e = 0; e < 4; ++e) got[0][0][acc_row(e)][acc_col(e)] = c2.r[e];  // variant 0 re-checked below as chain
    // Shuffles.
    const float x = static_cast<float>(l);
    if (__shfl_xor_sync(0xffffffffu, x, 5) != static_cast<float>(l ^ 5)) ++shfl_bad;
    if (__shfl_up_sync(0xffffffffu, x, 3) != static_cast<float>(l >= 3 ? l - 3 : l)) ++shfl_bad;
    if (__shfl_down_sync(0xffffffffu, l, 4) != (l + 4 < 32 ? l + 4 : l)) ++shfl_bad;
  });
  const char* names[8] = {"chain", "A row x B n-major x4", "A row x B k-major x4", "A row x B n-major x2",
                          "A kmaj x B n-major x4", "A kmaj x B k-major x4", "A kmaj x B n-major x2", "A x1 x B n x4"};
  // Variant 3 (A row × B k-major x2) is checked through index 3; variant 0's first tile holds the chain.
  names[3] = "A row x B k-major x2";
  for (int v = 1; v < 8; ++v)
    for (int n = 0; n < 2; ++n) check(names[v], got[v][n], want[n], 1e-6);
  check("A row x B n-major x4 (tile 1)", got[0][1], want[1], 1e-6);
  check(names[0], got[0][0], chain, 1e-6);
  // The launcher's schedule (emu.h): a read of what another thread writes before the same barrier must see the old
  // value in some block, whichever of the two threads is the lower (consecutive blocks run in opposite thread orders),
  // and never with the barrier in between. Two blocks of 64 threads: thread t writes s[t], then reads s[t ^ 1].
  int stale_without[2] = {0, 0}, stale_with[2] = {0, 0};
  for (const bool barrier : {false, true}) {
    emu_launch({2, 1, 1}, 64, 0, [&] {
      __shared__ int s[64];
      const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
      s[t] = 0;
      __syncthreads();
      s[t] = 1000 * (b + 1) + t;
      if (barrier) __syncthreads();
      const bool stale = s[t ^ 1] != 1000 * (b + 1) + (t ^ 1);
      (barrier ? stale_with : stale_without)[b] += stale ? 1 : 0;
    });
  }
#if HLM_EMU_FIBERS
  const bool order_ok = stale_without[0] > 0 && stale_without[1] > 0 && stale_with[0] == 0 && stale_with[1] == 0;
#else  // host threads: whether the race shows is up to the OS scheduler; the barrier must still order it
  const bool order_ok = stale_with[0] == 0 && stale_with[1] == 0;
#endif
  std::printf("emu_mma self-test: %d checks, %d failed; shuffles %s; missing barrier %s (stale reads per block "
              "without it %d, %d; with it %d, %d)\n",
              g_checks, g_fail, shfl_bad ? "FAILED" : "ok", order_ok ? "shows" : "HIDDEN", stale_without[0],
              stale_without[1], stale_with[0], stale_with[1]);
  return g_fail || shfl_bad || !order_ok;
}
