// Host driver of swiglu_emu.sh: the SwiGLU kernels of src/ops/swiglu/swiglu.cu run on the CPU
// (tools/cuda_emu/emu.h), bf16-input form (In = bf16) against the fp32-input bf16-output form on the widened values:
//   - forward and backward, byte for byte (NaN payloads included), at element offsets 0 (vector path), 4 (vector path:
//     8-byte aligned bf16, 16-byte aligned fp32) and 1 (scalar path), on grids of the launchers' size and of one
//     block (grid-stride loops); the forward also with out = gate;
//   - the fp32-input form against a host evaluation of the kernels' element functions (swiglu_math.cuh's forward value,
//     the file's swiglu_backward_value) on the widened values, rounded by bf16_round.cuh: the same bits (same libm
//     expf), NaN where the host has NaN of any payload. (x86 returns the first operand's NaN when both are NaN, and
//     g++ may order a product's operands differently in the kernel and here; the GPU returns the canonical NaN.)
// The launchers' path choice (n_vec) and grid size are mirrored here (kernels only are copied).
#include "swiglu_kernel_emu.h"  // the kernel part of swiglu.cu (swiglu_emu.sh)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace hlm;

namespace {

int failures = 0, checks = 0;

void report(const std::string& what, size_t differ, size_t nans) {
  ++checks;
  if (differ != 0) ++failures;
  std::printf("[%s] %s: values differing %zu (NaNs %zu)\n", differ == 0 ? "pass" : "FAIL", what.c_str(), differ,
              nans);
}

float widen(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
bool is_nan16(uint16_t b) { return (b & 0x7FFFu) > 0x7F80u; }

// 16-byte aligned storage of `count` T, poisoned with 0xFF bytes (a NaN in fp32 and bf16), plus a poisoned tail.
template <class T>
struct Buf {
  static constexpr size_t kTail = 8;
  explicit Buf(size_t count) : n(count), raw((count + kTail) * sizeof(T) / sizeof(uint4) + 1) {
    std::memset(raw.data(), 0xFF, raw.size() * sizeof(uint4));
  }
  T* data() { return reinterpret_cast<T*>(raw.data()); }
  // Every byte outside [first, first + len) elements still holds the poison.
  bool poison_outside(size_t first, size_t len) const {
    const auto* b = reinterpret_cast<const unsigned char*>(raw.data());
    for (size_t i = 0; i < (n + kTail) * sizeof(T); ++i)
      if ((i < first * sizeof(T) || i >= (first + len) * sizeof(T)) && b[i] != 0xFF) return false;
    return true;
  }
  size_t n;
  std::vector<uint4> raw;
};

bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The launchers' choice: float4 for the first 4·⌊n/4⌋ elements when every pointer is aligned to its vector load or
// store (16 bytes for fp32, 8 for bf16); blocks as swiglu_grid (no cap needed at these sizes), or `blocks` if given.
template <class T>
bool vec_ok(const T* p) {
  return aligned_to(p, sizeof(T) == 4 ? 16 : 8);
}
unsigned grid_for(int64_t n_vec, int64_t n, int unroll, unsigned blocks) {
  if (blocks != 0) return blocks;
  const int64_t vector_threads = (n_vec + unroll - 1) / unroll, scalar_threads = n - 4 * n_vec;
  const int64_t threads = std::max<int64_t>(vector_threads, scalar_threads);
  return static_cast<unsigned>(std::max<int64_t>(1, (threads + 255) / 256));
}

template <class In>
void forward(__nv_bfloat16* out, const In* g, const In* u, int64_t n, unsigned blocks) {
  const int64_t n_vec = vec_ok(out) && vec_ok(g) && vec_ok(u) ? n / 4 : 0;
  emu_launch(Dim{grid_for(n_vec, n, kForwardUnroll, blocks), 1, 1}, 256, 0,
             [&] { swiglu_forward_kernel<In, __nv_bfloat16>(out, g, u, n_vec, n); });
}
template <class In>
void backward(__nv_bfloat16* dg, __nv_bfloat16* du, const float* dy, const In* g, const In* u, int64_t n,
              unsigned blocks) {
  const int64_t n_vec = vec_ok(dg) && vec_ok(du) && vec_ok(dy) && vec_ok(g) && vec_ok(u) ? n / 4 : 0;
  emu_launch(Dim{grid_for(n_vec, n, kBackwardUnroll, blocks), 1, 1}, 256, 0,
             [&] { swiglu_backward_kernel<In, __nv_bfloat16>(dg, du, dy, g, u, n_vec, n); });
}

const uint16_t kEdges16[] = {
    0x0000, 0x8000, 0x7F80, 0xFF80,                  // ±0, ±Inf
    0x7FC0, 0xFFC1, 0x7F81, 0xFFFF,                  // NaNs: quiet, negative with payload, signaling, all ones
    0x42B0, 0xC2B0, 0x42B2, 0xC2B2, 0x42C8, 0xC2C8,  // ±88, ±89 (e^89 overflows fp32), ±100
    0x0001, 0x8001, 0x007F, 0x0080,                  // subnormals (smallest, largest), the smallest normal
    0x7F7F, 0xFF7F, 0x3F80, 0xBF80,                  // ±max finite, ±1
};
constexpr size_t kNumEdges16 = sizeof(kEdges16) / sizeof(kEdges16[0]);

enum class Fill { Normal, Edge, Patterns };
const char* fill_name(Fill f) { return f == Fill::Normal ? "normal" : f == Fill::Edge ? "edge" : "patterns"; }

// Normal: N(0, 1)·3 rounded to bf16. Edge: every other element from kEdges16, the rest arbitrary bit patterns.
// Patterns (gate only; up as Edge): element i holds (40503·i) mod 2^16, every bf16 pattern in 65536 elements.
std::vector<uint16_t> bf16_values(size_t n, Fill fill, uint64_t seed, bool gate) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (fill == Fill::Normal)
      v[i] = cuda::f32_to_bf16_bits((gate ? 3.0f : 1.0f) * normal(rng));
    else if (fill == Fill::Patterns && gate)
      v[i] = static_cast<uint16_t>(40503u * i);
    else
      v[i] = i % 2 == 0 ? kEdges16[(i / 2 + seed) % kNumEdges16] : static_cast<uint16_t>(rng());
  }
  return v;
}
// d_out: N(0, 1), and for the edge fills every third element from ±0, ±Inf, NaN, ±3e38, a subnormal.
std::vector<float> dy_values(size_t n, Fill fill, uint64_t seed) {
  const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), 3e38f, -3e38f,
                         1e-40f};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = fill != Fill::Normal && i % 3 == 0 ? edges[(i / 3) % 8] : normal(rng);
  return v;
}

// bf16 output at `off` of buffer `b` (n values) against `want`: differing values (any_nan: a NaN matches a NaN of
// any payload), plus one if anything outside was written.
size_t differ16(Buf<__nv_bfloat16>& b, size_t off, const std::vector<uint16_t>& want, bool any_nan = false) {
  size_t d = b.poison_outside(off, want.size()) ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const uint16_t got = b.data()[off + i].x;
    d += got != want[i] && !(any_nan && is_nan16(got) && is_nan16(want[i]));
  }
  return d;
}
size_t nans16(const std::vector<uint16_t>& v) {
  size_t k = 0;
  for (const uint16_t b : v) k += is_nan16(b);
  return k;
}

void run(int64_t n_, Fill fill, uint64_t seed) {
  const auto n = static_cast<size_t>(n_);
  const auto g16 = bf16_values(n, fill, seed, true), u16 = bf16_values(n, fill, seed + 1, false);
  const auto dy = dy_values(n, fill, seed + 2);
  // Host evaluation of the element functions on the widened values.
  std::vector<uint16_t> host_out(n), host_dg(n), host_du(n);
  for (size_t i = 0; i < n; ++i) {
    host_out[i] = cuda::f32_to_bf16_bits(cuda::swiglu_forward_value(widen(g16[i]), widen(u16[i])));
    float dg, du;
    swiglu_backward_value(dy[i], widen(g16[i]), widen(u16[i]), dg, du);
    host_dg[i] = cuda::f32_to_bf16_bits(dg);
    host_du[i] = cuda::f32_to_bf16_bits(du);
  }

  for (const size_t off : {size_t{0}, size_t{4}, size_t{1}}) {
    // Inputs at element offset `off`: bf16 gate/up, their fp32 widenings, fp32 d_out.
    Buf<__nv_bfloat16> g(n + off), u(n + off);
    Buf<float> g32(n + off), u32(n + off), d(n + off);
    for (size_t i = 0; i < n; ++i) {
      g.data()[off + i].x = g16[i];
      u.data()[off + i].x = u16[i];
      g32.data()[off + i] = widen(g16[i]);
      u32.data()[off + i] = widen(u16[i]);
      d.data()[off + i] = dy[i];
    }
    const int64_t n_vec_bf16 = vec_ok(g.data() + off) ? n_ / 4 : 0;
    for (const unsigned blocks : {0u, 1u}) {
      const std::string name = "n " + std::to_string(n) + " " + fill_name(fill) + " offset " + std::to_string(off) +
                               (n_vec_bf16 > 0 ? " (vector)" : " (scalar)") +
                               (blocks == 0 ? " launcher grid" : " 1 block");
      // Forward: fp32 in (reference), bf16 in, bf16 in with out = gate.
      Buf<__nv_bfloat16> ref(n + off), out(n + off);
      forward(ref.data() + off, g32.data() + off, u32.data() + off, n_, blocks);
      forward(out.data() + off, g.data() + off, u.data() + off, n_, blocks);
      std::vector<uint16_t> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = ref.data()[off + i].x;
      report(name + ": fwd fp32 in vs host value", differ16(ref, off, host_out, true), nans16(host_out));
      report(name + ": fwd bf16 in vs fp32 in", differ16(out, off, want), nans16(want));
      Buf<__nv_bfloat16> alias = g;
      forward(alias.data() + off, alias.data() + off, u.data() + off, n_, blocks);
      report(name + ": fwd bf16 in, out = gate, vs fp32 in", differ16(alias, off, want), nans16(want));

      // Backward: fp32 in (reference), bf16 in.
      Buf<__nv_bfloat16> rdg(n + off), rdu(n + off), dg(n + off), du(n + off);
      backward(rdg.data() + off, rdu.data() + off, d.data() + off, g32.data() + off, u32.data() + off, n_, blocks);
      backward(dg.data() + off, du.data() + off, d.data() + off, g.data() + off, u.data() + off, n_, blocks);
      std::vector<uint16_t> want_dg(n), want_du(n);
      for (size_t i = 0; i < n; ++i) {
        want_dg[i] = rdg.data()[off + i].x;
        want_du[i] = rdu.data()[off + i].x;
      }
      report(name + ": bwd fp32 in vs host value (dgate, dup)",
             differ16(rdg, off, host_dg, true) + differ16(rdu, off, host_du, true), nans16(host_dg) + nans16(host_du));
      report(name + ": bwd bf16 in vs fp32 in (dgate, dup)", differ16(dg, off, want_dg) + differ16(du, off, want_du),
             nans16(want_dg) + nans16(want_du));
    }
  }
}

}  // namespace

int main() {
  // 1, 3: scalar only; 5, 7: one float4 and a rest; 4099: 1024 float4 (one block's worth for the forward, two for
  // the backward) and a rest of 3; 65539: every bf16 pattern as gate (16 blocks' worth: one block strides 16 times).
  uint64_t seed = 1;
  for (const int64_t n : {1, 3, 5, 7}) run(n, Fill::Edge, seed += 10);
  run(4099, Fill::Normal, seed += 10);
  run(4099, Fill::Edge, seed += 10);
  run(65539, Fill::Patterns, seed += 10);
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
