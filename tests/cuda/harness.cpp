#include "harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>

#include "backend/cuda/cuda_error.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace hlm::cuda_test {

CudaContext& ctx() { return cuda_context(); }

const char* fill_name(Fill fill) {
  switch (fill) {
    case Fill::Normal: return "normal";
    case Fill::Large: return "large";
    case Fill::Zeros: return "zeros";
    case Fill::Denormal: return "denormal";
    case Fill::Special: return "special";
  }
  return "?";
}

std::vector<float> make_values(size_t n, Fill fill, uint64_t stream, float scale) {
  constexpr uint64_t kSeed = 20251117;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (fill) {
      case Fill::Normal:
      case Fill::Special: v[i] = rng_normal(kSeed, stream, i) * scale; break;
      case Fill::Large: v[i] = rng_normal(kSeed, stream, i) * 1e15f * scale; break;
      case Fill::Zeros: v[i] = (i % 3 == 1) ? -0.0f : 0.0f; break;
      case Fill::Denormal: {
        const uint32_t w = philox4x32(kSeed, stream, i)[0];
        uint32_t bits = 1u + (w % 0x7fffffu);  // a subnormal mantissa, never zero
        if (w & 0x80000000u) bits |= 0x80000000u;
        std::memcpy(&v[i], &bits, 4);
        break;
      }
    }
  }
  if (fill == Fill::Special && n > 0) {
    v[n / 5] = std::numeric_limits<float>::quiet_NaN();
    v[n / 2] = std::numeric_limits<float>::infinity();
    v[n - 1] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<float> to_f32(const std::vector<double>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

std::vector<float> bf16_to_f32(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = hlm::bf16_to_f32(v[i]);
  return out;
}

std::vector<float> round_bf16(const std::vector<float>& v) { return bf16_to_f32(to_bf16(v)); }

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::abs(v[i]);
  return out;
}

// ---- DeviceBuffer

DeviceBuffer::DeviceBuffer(size_t bytes, std::string name)
    : block_(ctx().allocator(), bytes + 2 * kGuardBytes), bytes_(bytes), name_(std::move(name)),
      uploaded_(bytes, 0xFF) {  // until an upload, unchanged() means "still the poison": nothing was written
  auto* base = static_cast<char*>(block_.data());
  HLM_CUDA_CHECK(cudaMemsetAsync(base, kGuardByte, kGuardBytes, ctx().stream()));
  HLM_CUDA_CHECK(cudaMemsetAsync(base + kGuardBytes, 0xFF, bytes_, ctx().stream()));
  HLM_CUDA_CHECK(cudaMemsetAsync(base + kGuardBytes + bytes_, kGuardByte, kGuardBytes, ctx().stream()));
  ctx().synchronize();
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  HLM_CHECK(bytes == bytes_, "DeviceBuffer::upload: ", bytes, " bytes into ", bytes_);
  uploaded_.assign(static_cast<const uint8_t*>(host), static_cast<const uint8_t*>(host) + bytes);
  if (bytes == 0) return;
  HLM_CUDA_CHECK(cudaMemcpyAsync(as<char>(), host, bytes, cudaMemcpyHostToDevice, ctx().stream()));
  ctx().synchronize();
}

std::vector<uint8_t> DeviceBuffer::download_bytes() const {
  ctx().synchronize();  // the kernels under test ran on this stream
  std::vector<uint8_t> out(bytes_);
  if (bytes_ == 0) return out;
  HLM_CUDA_CHECK(cudaMemcpyAsync(out.data(), as<char>(), bytes_, cudaMemcpyDeviceToHost, ctx().stream()));
  ctx().synchronize();
  return out;
}

::testing::AssertionResult DeviceBuffer::guards_intact() const {
  ctx().synchronize();
  std::vector<uint8_t> all(bytes_ + 2 * kGuardBytes);
  HLM_CUDA_CHECK(cudaMemcpyAsync(all.data(), block_.data(), all.size(), cudaMemcpyDeviceToHost, ctx().stream()));
  ctx().synchronize();
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (all[i] != kGuardByte)
      return ::testing::AssertionFailure() << name_ << ": guard byte " << (kGuardBytes - i)
                                           << " before the buffer was overwritten";
    if (all[kGuardBytes + bytes_ + i] != kGuardByte)
      return ::testing::AssertionFailure() << name_ << ": guard byte " << i << " after the buffer (" << bytes_
                                           << " bytes) was overwritten";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult DeviceBuffer::unchanged() const {
  const std::vector<uint8_t> now = download_bytes();
  for (size_t i = 0; i < now.size(); ++i)
    if (now[i] != uploaded_[i])
      return ::testing::AssertionFailure() << name_ << ": input modified at byte " << i << " of " << now.size();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult buffers_ok(std::initializer_list<const DeviceBuffer*> outputs,
                                      std::initializer_list<const DeviceBuffer*> inputs) {
  for (const DeviceBuffer* b : outputs)
    if (auto r = b->guards_intact(); !r) return r;
  for (const DeviceBuffer* b : inputs) {
    if (auto r = b->guards_intact(); !r) return r;
    if (auto r = b->unchanged(); !r) return r;
  }
  return ::testing::AssertionSuccess();
}

int read_flag(const DeviceBuffer& flag) { return flag.download<int>().at(0); }

// ---- Checks

namespace {

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Non-finite parity: NaN where the reference has NaN, the same infinity where it has one, finite otherwise.
bool parity_ok(float gpu, float ref) {
  if (std::isnan(ref)) return std::isnan(gpu);
  if (std::isinf(ref)) return gpu == ref;
  return std::isfinite(gpu);
}

struct Worst {
  double ratio = 0;  // error / tolerance
  double err = 0;
  size_t index = 0;
};

void print_line(const std::string& what, const std::string& text) { std::cout << "[check] " << what << ": " << text << "\n"; }

}  // namespace

::testing::AssertionResult check_exact(const std::string& what, const std::vector<float>& gpu,
                                       const std::vector<float>& cpu32) {
  if (gpu.size() != cpu32.size())
    return ::testing::AssertionFailure() << what << ": size " << gpu.size() << " vs " << cpu32.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const bool ok = same_bits(gpu[i], cpu32[i]) || (std::isnan(gpu[i]) && std::isnan(cpu32[i]));
    if (!ok && bad++ == 0) first = i;
  }
  print_line(what, "n=" + std::to_string(gpu.size()) + " exact, mismatches=" + std::to_string(bad));
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << gpu.size()
                                       << " elements differ from the CPU bit pattern; first at " << first << ": gpu "
                                       << fmt(gpu[first]) << " cpu " << fmt(cpu32[first]);
}

::testing::AssertionResult check_f32(const std::string& what, const std::vector<float>& gpu,
                                     const std::vector<float>& cpu32, const std::vector<double>& ref64,
                                     const std::vector<double>& mag, const F32Tolerance& tol) {
  const size_t n = gpu.size();
  if (cpu32.size() != n || ref64.size() != n || mag.size() != n)
    return ::testing::AssertionFailure() << what << ": size mismatch gpu " << n << " cpu " << cpu32.size() << " ref "
                                         << ref64.size() << " mag " << mag.size();
  Worst worst;
  size_t bad = 0, parity_bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < n; ++i) {
    if (!parity_ok(gpu[i], cpu32[i])) {
      if (parity_bad++ == 0)
        first << " first non-finite mismatch at " << i << ": gpu " << fmt(gpu[i]) << " cpu " << fmt(cpu32[i]) << ";";
      continue;
    }
    if (!std::isfinite(cpu32[i])) continue;
    const double err = std::abs(static_cast<double>(gpu[i]) - ref64[i]);
    const double cpu_err = std::isfinite(ref64[i]) ? std::abs(static_cast<double>(cpu32[i]) - ref64[i]) : 0.0;
    const double bound = tol.k * kU * mag[i] + cpu_err + tol.abs_floor;
    const double ratio = std::isfinite(ref64[i]) ? err / bound : (same_bits(gpu[i], cpu32[i]) ? 0.0 : 2.0);
    if (ratio > worst.ratio) worst = {ratio, err, i};
    if (ratio > 1.0 && bad++ == 0)
      first << " first out of tolerance at " << i << ": gpu " << fmt(gpu[i]) << " ref64 " << fmt(ref64[i]) << " cpu32 "
            << fmt(cpu32[i]) << " bound " << fmt(bound) << ";";
  }
  print_line(what, "n=" + std::to_string(n) + " k=" + fmt(tol.k) + " worst err/bound=" + fmt(worst.ratio) +
                       " (err " + fmt(worst.err) + " at " + std::to_string(worst.index) + ")" +
                       (parity_bad + bad ? " FAIL" : ""));
  if (bad == 0 && parity_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " elements out of tolerance, " << parity_bad
                                       << " non-finite mismatches (of " << n << ");" << first.str();
}

::testing::AssertionResult check_bf16(const std::string& what, const std::vector<uint16_t>& gpu,
                                      const std::vector<uint16_t>& cpu_bf16, const std::vector<double>& ref64,
                                      const std::vector<double>* mag, double k) {
  const size_t n = gpu.size();
  if (cpu_bf16.size() != n || ref64.size() != n || (mag != nullptr && mag->size() != n))
    return ::testing::AssertionFailure() << what << ": size mismatch";
  double err_gpu = 0, err_cpu = 0, max_ref = 0;
  size_t parity_bad = 0, worst = 0;
  std::ostringstream first;
  for (size_t i = 0; i < n; ++i) {
    const float g = hlm::bf16_to_f32(gpu[i]), c = hlm::bf16_to_f32(cpu_bf16[i]);
    if (!parity_ok(g, c)) {
      if (parity_bad++ == 0) first << " first non-finite mismatch at " << i << ": gpu " << fmt(g) << " cpu " << fmt(c);
      continue;
    }
    if (!std::isfinite(c) || !std::isfinite(ref64[i])) continue;
    const double eg = std::abs(g - ref64[i]) - (mag != nullptr ? k * kU * (*mag)[i] : 0.0);
    if (eg > err_gpu) {
      err_gpu = eg;
      worst = i;
    }
    err_cpu = std::max(err_cpu, std::abs(c - ref64[i]));
    max_ref = std::max(max_ref, std::abs(ref64[i]));
  }
  const double bound = 2.0 * err_cpu + 0x1p-20 * max_ref;
  const bool ok = parity_bad == 0 && err_gpu <= bound;
  print_line(what, "n=" + std::to_string(n) + " bf16 max err gpu" + (mag != nullptr ? "(-k·u·mag, k=" + fmt(k) + ")" : "") +
                       "=" + fmt(err_gpu) + " cpu=" + fmt(err_cpu) +
                       " bound=" + fmt(bound) + (ok ? "" : " FAIL"));
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max |gpu - ref64| = " << fmt(err_gpu) << " (at " << worst
                                       << ") exceeds 2 x max |cpu_bf16 - ref64| + 2^-20 max|ref| = " << fmt(bound)
                                       << "; " << parity_bad << " non-finite mismatches;" << first.str();
}

}  // namespace hlm::cuda_test
