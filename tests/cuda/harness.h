// CUDA-vs-CPU comparison harness (one harness; one case file per op: cases_<op>.cpp).
//
// Each op test builds inputs on the host (make_values: normal, large, zeros, denormal, special = NaN/±Inf), runs the
// CPU reference (src/ops/<op>/<op>_ref.cpp: the float instantiation, and the double one as the accurate reference)
// and the CUDA launcher on guarded device buffers, then compares with one of the checks below. Every check prints one
// line ("[check] ...") with its worst error, so a passing run still documents its margins.
//
// Guards: every DeviceBuffer has kGuardBytes of sentinel bytes on each side and its body starts as 0xFF bytes (a NaN
// in f32 and bf16), so an out-of-bounds write fails guards_intact() and an output element the kernel forgot to write
// fails the comparison. Inputs can be checked for unintended writes with unchanged().
//
// Tolerances (u = 2^-24, the fp32 unit roundoff; the reason for each k is written next to it in the case files):
//   check_exact: bit-identical, NaN matching NaN (ops whose CUDA kernels do the CPU's float operations in the same
//     order with the same roundings: residual, embedding, rope).
//   check_f32:   |gpu − ref64| <= k·u·mag + |cpu32 − ref64| + abs_floor per element, where ref64 is the double
//     reference on the same inputs, mag the size of the terms behind the element (|ref| for elementwise ops; the
//     abs-value computation where terms cancel), k the number of fp32 roundings along the kernel's longest
//     dependency chain, |cpu32 − ref64| admits what the fp32 CPU reference itself gets wrong (shared fp32 overflow,
//     expf rounding), and abs_floor a few subnormal spacings (subnormal results carry no relative precision).
//   check_bf16:  the flash-attention rule: max_i (|gpu − ref64| − k·u·mag)_i <= 2 · max|cpu_bf16 − ref64|
//     + 2^-20 · max|ref64|, where cpu_bf16 is the CPU reference run on the same bf16 inputs (in fp32/fp64) and rounded
//     once to bf16. When the fp32 values agree to ~1e-6, the two bf16 roundings differ only next to a rounding
//     midpoint, where both errors are ~half an ulp, so 2× leaves room; the tiny floor covers outputs that are exactly
//     representable (zero CPU error); k·u·mag (optional, the fp32 rule's allowance) covers outputs whose terms cancel,
//     where the GPU's fp32 arithmetic, not the bf16 rounding, dominates (e.g. rmsnorm dx with D = 1, where the CPU
//     computes the cancellation in double).
// Non-finite parity in check_f32 and check_bf16: NaN exactly where the CPU float/bf16 reference has NaN, and the same
// infinity where it has one.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/device_query.h"

// Skips the test (reported as skipped by GoogleTest and ctest) when no GPU can run this build's kernels.
#define HLM_REQUIRE_CUDA()                                                                          \
  do {                                                                                              \
    if (!::hlm::cuda_available()) GTEST_SKIP() << "CUDA unavailable: " << ::hlm::cuda_unavailable_reason(); \
  } while (0)

namespace hlm::cuda_test {

inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24: fp32 unit roundoff
inline constexpr size_t kGuardBytes = 256;
inline constexpr uint8_t kGuardByte = 0xA5;

CudaContext& ctx();

// ---- Inputs

enum class Fill {
  Normal,    // N(0, 1) · scale
  Large,     // N(0, 1) · 1e15 · scale: squares and pairwise products stay far below fp32's 3.4e38
  Zeros,     // +0 and -0
  Denormal,  // ± subnormal fp32 values (2^-149 .. 2^-126)
  Special,   // Normal, with NaN, +Inf and -Inf at fixed positions (n/5, n/2, n-1)
};
const char* fill_name(Fill fill);
std::vector<float> make_values(size_t n, Fill fill, uint64_t stream, float scale = 1.0f);

std::vector<double> to_f64(const std::vector<float>& v);
std::vector<float> to_f32(const std::vector<double>& v);
std::vector<uint16_t> to_bf16(const std::vector<float>& v);    // round to nearest even (core/dtype.h)
std::vector<float> bf16_to_f32(const std::vector<uint16_t>& v);
// Rounds through bf16: the values a bf16 input holds, as floats.
std::vector<float> round_bf16(const std::vector<float>& v);

// ---- Guarded device buffers (from the context's caching allocator)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `bytes` of body, poisoned with 0xFF, between two guard zones.
  explicit DeviceBuffer(size_t bytes, std::string name = "buffer");
  template <typename T>
  static DeviceBuffer from(const std::vector<T>& host, std::string name) {
    DeviceBuffer b(host.size() * sizeof(T), std::move(name));
    b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }

  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(static_cast<char*>(block_.data()) + kGuardBytes);
  }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  void upload(const void* host, size_t bytes);  // body only; remembered for unchanged()
  std::vector<uint8_t> download_bytes() const;
  template <typename T>
  std::vector<T> download() const {
    const std::vector<uint8_t> raw = download_bytes();
    std::vector<T> out(raw.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), raw.data(), out.size() * sizeof(T));
    return out;
  }

  // Both guard zones still hold kGuardByte.
  ::testing::AssertionResult guards_intact() const;
  // The body still holds what upload() put there (for inputs the kernel must not write), or, never uploaded, the
  // initial 0xFF poison (for outputs a call must leave alone, e.g. gradients of a forward-only call).
  ::testing::AssertionResult unchanged() const;

 private:
  CudaBuffer block_;
  size_t bytes_ = 0;
  std::string name_;
  std::vector<uint8_t> uploaded_;
};

// Guards of every listed buffer, and unchanged() of the inputs.
::testing::AssertionResult buffers_ok(std::initializer_list<const DeviceBuffer*> outputs,
                                      std::initializer_list<const DeviceBuffer*> inputs);

// Pointers one float past a 16-byte boundary (the warp-per-row kernels' scalar fallback): upload
// shifted_by_one(v) (v after one 0) and pass as<float>() + 1; body_after_one gives a shifted buffer's data after its
// first float; first_unwritten says that first float still holds the 0xFF poison (nothing was written before the
// data).
inline std::vector<float> shifted_by_one(const std::vector<float>& v) {
  std::vector<float> s(v.size() + 1, 0.0f);
  std::copy(v.begin(), v.end(), s.begin() + 1);
  return s;
}
inline std::vector<float> body_after_one(const DeviceBuffer& b) {
  std::vector<float> v = b.download<float>();
  return std::vector<float>(v.begin() + 1, v.end());
}
inline bool first_unwritten(const DeviceBuffer& b) { return b.download_bytes()[0] == 0xFF; }

// A zeroed device int for kernels' error flags.
int read_flag(const DeviceBuffer& flag);

// ---- Checks (see the header comment for the rules)

struct F32Tolerance {
  double k = 8;                   // multiples of u·mag
  double abs_floor = 0x1p-140;   // 512 subnormal spacings (2^-149 each)
};

::testing::AssertionResult check_exact(const std::string& what, const std::vector<float>& gpu,
                                       const std::vector<float>& cpu32);
::testing::AssertionResult check_f32(const std::string& what, const std::vector<float>& gpu,
                                     const std::vector<float>& cpu32, const std::vector<double>& ref64,
                                     const std::vector<double>& mag, const F32Tolerance& tol);
// mag/k (optional): the fp32 computing error k·u·mag_i is subtracted from each GPU error before the rule is applied,
// for outputs whose terms cancel (rmsnorm dx, dot products) where the CPU reference computes in double.
::testing::AssertionResult check_bf16(const std::string& what, const std::vector<uint16_t>& gpu,
                                      const std::vector<uint16_t>& cpu_bf16, const std::vector<double>& ref64,
                                      const std::vector<double>* mag = nullptr, double k = 0);

// |v| elementwise (for magnitudes of elementwise ops).
std::vector<double> abs_of(const std::vector<double>& v);

}  // namespace hlm::cuda_test
