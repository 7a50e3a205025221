// Matmul (cuBLASLt): CUDA (src/ops/matmul/matmul.cu) vs the CPU reference (matmul_ref.cpp, OpenBLAS sgemm), forward
// and backward, f32 and bf16 storage. Where OpenBLAS is missing (the standalone build on the GPU machine may lack it),
// the fp32 CPU side is a naive fp32 loop here instead, and the test prints a [note]; the fp64 reference is always the
// naive double loop below (no dgemm needed).
// Cases: M, N, K each 1 somewhere, odd sizes (65, 127, 129, 257, 1000), a larger product (128 × 512 × 1024),
// bias / accumulate / accumulate_dx on and off, K = 0 and M = 0, and every fill.
//
// Tolerances (fp32 rule, harness.h). A dot product of K terms in any summation order (cuBLAS blocks and may split K)
// has error ≲ λ·sqrt(K)·u·Σ|x||w| with high probability (Higham & Mary 2019, probabilistic rounding error analysis;
// λ = 6 makes a violation by chance < 1e-7 per element); the worst-case bound K·u·Σ|x||w| is too loose to catch
// TF32 (2^-11 per product), which this one catches. Bias add and output: +4. So:
//   y: k = 6·sqrt(K) + 4, mag = Σ_k |x||w| + |bias| (+ |y before| when accumulating)
//   dx: k = 6·sqrt(N) + 4, mag = Σ_n |dy||w| (+ |dx before|);  dw: k = 6·sqrt(M) + 4, mag = Σ_m |dy||x| + |dw before|
//   dbias (two-pass column sum, deterministic): k = column_sum_path_length + 2, mag = Σ_m |dy| + |dbias before|.
// Subnormal inputs: results near 2^-126 carry no relative precision, and the fp32 floor (harness) is widened to
// K · 2^-149 · 4 (each product's rounding is worth ≤ half a subnormal spacing).
// bf16: the flash-attention rule on y and dx (with the fp32 allowance k·u·mag of the dot products); dw and dbias are fp32 outputs, checked by the fp32 rule on the
// bf16-rounded inputs. Subnormal bf16 inputs are not used (tensor cores may flush subnormal operands).
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "backend/cuda/column_sum.h"
#include "harness.h"
#include "ops/matmul/matmul_cuda.h"
#if HLM_CUDA_TEST_HAVE_CBLAS
#include "ops/matmul/matmul.h"
#endif

using namespace hlm;
using namespace hlm::cuda_test;

namespace {

struct MatmulCase {
  int64_t M, N, K;
  bool bias, accumulate;
  Fill fill;  // of x (forward) and dy (backward); w is normal except for Special
};

const std::vector<MatmulCase> kCases = {
    {1, 1, 1, false, false, Fill::Normal},     {1, 65, 127, true, false, Fill::Normal},
    {65, 1, 127, false, true, Fill::Normal},   {127, 65, 1, true, true, Fill::Normal},
    {3, 1000, 65, true, false, Fill::Normal},  {64, 128, 256, false, false, Fill::Normal},
    {257, 129, 1000, true, true, Fill::Normal}, {33, 4096, 64, true, false, Fill::Normal},
    {128, 512, 1024, false, false, Fill::Normal}, {5, 7, 0, true, false, Fill::Normal},
    {5, 7, 0, true, true, Fill::Normal},       {0, 5, 7, true, false, Fill::Normal},
    {65, 127, 33, true, false, Fill::Large},   {17, 33, 65, true, true, Fill::Zeros},
    {17, 33, 65, false, false, Fill::Denormal}, {17, 33, 65, true, false, Fill::Special},
};

std::string name(const MatmulCase& c, const char* what) {
  return std::string("matmul.") + what + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
         " K=" + std::to_string(c.K) + (c.bias ? " bias" : "") + (c.accumulate ? " accumulate" : "") + " " +
         fill_name(c.fill);
}

double k_dot(int64_t terms) { return 6.0 * std::sqrt(static_cast<double>(terms)) + 4.0; }

F32Tolerance dot_tolerance(const MatmulCase& c, int64_t terms) {
  F32Tolerance t{k_dot(terms)};
  if (c.fill == Fill::Denormal) t.abs_floor += static_cast<double>(terms) * 0x1p-149 * 4;
  return t;
}

// ---- CPU sides: fp32 (matmul_ref.cpp, or naive fp32 loops without OpenBLAS) and the fp64 reference (naive).

template <typename T>
void naive_forward(T* y, const T* x, const T* w, const T* bias, int64_t M, int64_t N, int64_t K, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T s = 0;
      for (int64_t k = 0; k < K; ++k) s += x[i * K + k] * w[j * K + k];
      y[i * N + j] = (accumulate ? y[i * N + j] + s : s);
      if (bias != nullptr) y[i * N + j] += bias[j];
    }
}

template <typename T>
void naive_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, int64_t M, int64_t N, int64_t K,
                    bool accumulate_dx) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      T s = 0;
      for (int64_t j = 0; j < N; ++j) s += dy[i * N + j] * w[j * K + k];
      dx[i * K + k] = accumulate_dx ? dx[i * K + k] + s : s;
    }
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) {
      T s = 0;
      for (int64_t i = 0; i < M; ++i) s += dy[i * N + j] * x[i * K + k];
      dw[j * K + k] += s;
    }
  for (int64_t j = 0; j < N; ++j) {
    double s = 0;
    for (int64_t i = 0; i < M; ++i) s += static_cast<double>(dy[i * N + j]);
    dbias[j] += static_cast<T>(s);
  }
}

void cpu_forward(float* y, const float* x, const float* w, const float* bias, int64_t M, int64_t N, int64_t K,
                 bool accumulate) {
#if HLM_CUDA_TEST_HAVE_CBLAS
  matmul_forward(y, x, w, bias, M, N, K, accumulate);
#else
  naive_forward<float>(y, x, w, bias, M, N, K, accumulate);
#endif
}

void cpu_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x, const float* w, int64_t M,
                  int64_t N, int64_t K, bool accumulate_dx) {
#if HLM_CUDA_TEST_HAVE_CBLAS
  matmul_backward<float>(dx, dw, dbias, dy, x, w, M, N, K, accumulate_dx);
#else
  naive_backward<float>(dx, dw, dbias, dy, x, w, M, N, K, accumulate_dx);
#endif
}

void note_reference() {
  static bool once = [] {
    std::cout << (HLM_CUDA_TEST_HAVE_CBLAS
                      ? "[note] matmul fp32 CPU side: matmul_ref.cpp (OpenBLAS)\n"
                      : "[note] matmul fp32 CPU side: OpenBLAS missing in this build, naive fp32 loops in "
                        "cases_matmul.cpp stand in for matmul_ref.cpp\n");
    return true;
  }();
  (void)once;
}

struct Inputs {
  std::vector<float> x, w, bias, y0, dy, dx0, dw0, dbias0;
};
Inputs make_inputs(const MatmulCase& c, bool bf16) {
  const auto M = static_cast<size_t>(c.M), N = static_cast<size_t>(c.N), K = static_cast<size_t>(c.K);
  const Fill wfill = c.fill == Fill::Special ? Fill::Special : Fill::Normal;
  Inputs in{make_values(M * K, c.fill, 81),          make_values(N * K, wfill, 82),
            make_values(N, Fill::Normal, 83),        make_values(M * N, Fill::Normal, 84),
            make_values(M * N, c.fill, 85),          make_values(M * K, Fill::Normal, 86),
            make_values(N * K, Fill::Normal, 87),    make_values(N, Fill::Normal, 88)};
  if (bf16) {  // bf16 storage: x, w, bias, y, dy, dx; dw and dbias stay fp32
    in.x = round_bf16(in.x);
    in.w = round_bf16(in.w);
    in.bias = round_bf16(in.bias);
    in.y0 = round_bf16(in.y0);
    in.dy = round_bf16(in.dy);
    in.dx0 = round_bf16(in.dx0);
  }
  return in;
}

// Σ_k |a[i,k]|·|b[j,k]| for row-major a [I, K], b [J, K] (b_t: b is [K, J]).
std::vector<double> abs_products(const std::vector<float>& a, const std::vector<float>& b, int64_t I, int64_t J,
                                 int64_t K, bool b_is_kj, bool a_is_ki = false) {
  std::vector<double> out(static_cast<size_t>(I * J), 0.0);
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = a[static_cast<size_t>(a_is_ki ? k * I + i : i * K + k)];
        const double bv = b[static_cast<size_t>(b_is_kj ? k * J + j : j * K + k)];
        s += std::abs(av * bv);
      }
      out[static_cast<size_t>(i * J + j)] = s;
    }
  return out;
}

struct Expected {
  std::vector<float> y, dx, dw, dbias;           // fp32 CPU side
  std::vector<double> y64, dx64, dw64, dbias64;  // fp64 reference
  std::vector<double> mag_y, mag_dx, mag_dw, mag_dbias;
};

Expected expected(const MatmulCase& c, const Inputs& in) {
  const int64_t M = c.M, N = c.N, K = c.K;
  Expected e;
  e.y = in.y0;
  cpu_forward(e.y.data(), in.x.data(), in.w.data(), c.bias ? in.bias.data() : nullptr, M, N, K, c.accumulate);
  e.dx = in.dx0;
  e.dw = in.dw0;
  e.dbias = in.dbias0;
  cpu_backward(e.dx.data(), e.dw.data(), e.dbias.data(), in.dy.data(), in.x.data(), in.w.data(), M, N, K, c.accumulate);

  const auto x = to_f64(in.x), w = to_f64(in.w), b = to_f64(in.bias), dy = to_f64(in.dy);
  e.y64 = to_f64(in.y0);
  naive_forward<double>(e.y64.data(), x.data(), w.data(), c.bias ? b.data() : nullptr, M, N, K, c.accumulate);
  e.dx64 = to_f64(in.dx0);
  e.dw64 = to_f64(in.dw0);
  e.dbias64 = to_f64(in.dbias0);
  naive_backward<double>(e.dx64.data(), e.dw64.data(), e.dbias64.data(), dy.data(), x.data(), w.data(), M, N, K,
                         c.accumulate);

  e.mag_y = abs_products(in.x, in.w, M, N, K, false);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double& m = e.mag_y[static_cast<size_t>(i * N + j)];
      if (c.bias) m += std::abs(static_cast<double>(in.bias[static_cast<size_t>(j)]));
      if (c.accumulate) m += std::abs(static_cast<double>(in.y0[static_cast<size_t>(i * N + j)]));
    }
  e.mag_dx = abs_products(in.dy, in.w, M, K, N, /*b_is_kj=*/true);  // Σ_n |dy[i,n]|·|w[n,k]|
  if (c.accumulate)
    for (size_t i = 0; i < e.mag_dx.size(); ++i) e.mag_dx[i] += std::abs(static_cast<double>(in.dx0[i]));
  e.mag_dw = abs_products(in.dy, in.x, N, K, M, /*b_is_kj=*/true, /*a_is_ki=*/true);  // Σ_m |dy[m,n]|·|x[m,k]|
  for (size_t i = 0; i < e.mag_dw.size(); ++i) e.mag_dw[i] += std::abs(static_cast<double>(in.dw0[i]));
  e.mag_dbias.assign(static_cast<size_t>(N), 0.0);
  for (int64_t j = 0; j < N; ++j) {
    double s = std::abs(static_cast<double>(in.dbias0[static_cast<size_t>(j)]));
    for (int64_t i = 0; i < M; ++i) s += std::abs(static_cast<double>(in.dy[static_cast<size_t>(i * N + j)]));
    e.mag_dbias[static_cast<size_t>(j)] = s;
  }
  return e;
}

F32Tolerance dbias_tolerance(const MatmulCase& c) {
  const ColumnSumPlan plan = column_sum_plan(c.M, c.N, ctx().blaslt().workspace_bytes);
  return {static_cast<double>(column_sum_path_length(plan)) + 2};
}

}  // namespace

TEST(MatmulCuda, ForwardF32) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    const Inputs in = make_inputs(c, false);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 b = DeviceBuffer::from(in.bias, "bias"), y = DeviceBuffer::from(in.y0, "y");
    if (!c.accumulate) y = DeviceBuffer(in.y0.size() * 4, "y");  // poisoned: every element must be written
    matmul_forward_cuda(ctx().blaslt(), y.as<float>(), x.as<float>(), w.as<float>(), c.bias ? b.as<float>() : nullptr,
                        {c.M, c.N, c.K}, c.accumulate);
    const auto gpu = y.download<float>();
    if (c.M * c.N > 0) {
      EXPECT_TRUE(check_f32(name(c, "fwd f32"), gpu, e.y, e.y64, e.mag_y, dot_tolerance(c, c.K)));
    }
    EXPECT_TRUE(buffers_ok({&y}, {&x, &w, &b})) << name(c, "fwd f32");
  }
}

TEST(MatmulCuda, BackwardF32) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    const Inputs in = make_inputs(c, false);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(in.x, "x"), w = DeviceBuffer::from(in.w, "w"),
                 dy = DeviceBuffer::from(in.dy, "dy"), dx = DeviceBuffer::from(in.dx0, "dx"),
                 dw = DeviceBuffer::from(in.dw0, "dw"), db = DeviceBuffer::from(in.dbias0, "dbias");
    if (!c.accumulate) dx = DeviceBuffer(in.dx0.size() * 4, "dx");
    matmul_backward_cuda(ctx().blaslt(), dx.as<float>(), dw.as<float>(), db.as<float>(), dy.as<float>(),
                         x.as<float>(), w.as<float>(), {c.M, c.N, c.K}, c.accumulate);
    EXPECT_TRUE(check_f32(name(c, "bwd dx f32"), dx.download<float>(), e.dx, e.dx64, e.mag_dx, dot_tolerance(c, c.N)));
    EXPECT_TRUE(check_f32(name(c, "bwd dw f32"), dw.download<float>(), e.dw, e.dw64, e.mag_dw, dot_tolerance(c, c.M)));
    EXPECT_TRUE(check_f32(name(c, "bwd dbias f32"), db.download<float>(), e.dbias, e.dbias64, e.mag_dbias,
                          dbias_tolerance(c)));
    EXPECT_TRUE(buffers_ok({&dx, &dw, &db}, {&x, &w, &dy})) << name(c, "bwd f32");

    // Every output may be nullptr (= not wanted).
    EXPECT_NO_THROW(matmul_backward_cuda(ctx().blaslt(), nullptr, nullptr, nullptr, dy.as<float>(), x.as<float>(),
                                         w.as<float>(), {c.M, c.N, c.K});
                    ctx().synchronize());
  }
}

TEST(MatmulCuda, ForwardBf16) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;  // see the header comment
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 b = DeviceBuffer::from(to_bf16(in.bias), "bias"), y = DeviceBuffer::from(to_bf16(in.y0), "y");
    if (!c.accumulate) y = DeviceBuffer(in.y0.size() * 2, "y");
    matmul_forward_cuda(ctx().blaslt(), y.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(),
                        c.bias ? b.as<__nv_bfloat16>() : nullptr, {c.M, c.N, c.K}, c.accumulate);
    if (c.M * c.N > 0) {
      EXPECT_TRUE(check_bf16(name(c, "fwd bf16"), y.download<uint16_t>(), to_bf16(e.y), e.y64, &e.mag_y, k_dot(c.K)));
    }
    EXPECT_TRUE(buffers_ok({&y}, {&x, &w, &b})) << name(c, "fwd bf16");
  }
}

TEST(MatmulCuda, BackwardBf16) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 dy = DeviceBuffer::from(to_bf16(in.dy), "dy"), dx = DeviceBuffer::from(to_bf16(in.dx0), "dx"),
                 dw = DeviceBuffer::from(in.dw0, "dw"), db = DeviceBuffer::from(in.dbias0, "dbias");
    if (!c.accumulate) dx = DeviceBuffer(in.dx0.size() * 2, "dx");
    matmul_backward_cuda(ctx().blaslt(), dx.as<__nv_bfloat16>(), dw.as<float>(), db.as<float>(),
                         dy.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), {c.M, c.N, c.K},
                         c.accumulate);
    if (c.M * c.K > 0) {
      EXPECT_TRUE(
          check_bf16(name(c, "bwd dx bf16"), dx.download<uint16_t>(), to_bf16(e.dx), e.dx64, &e.mag_dx, k_dot(c.N)));
    }
    EXPECT_TRUE(check_f32(name(c, "bwd dw (bf16 inputs)"), dw.download<float>(), e.dw, e.dw64, e.mag_dw,
                          dot_tolerance(c, c.M)));
    EXPECT_TRUE(check_f32(name(c, "bwd dbias (bf16 inputs)"), db.download<float>(), e.dbias, e.dbias64, e.mag_dbias,
                          dbias_tolerance(c)));
    EXPECT_TRUE(buffers_ok({&dx, &dw, &db}, {&x, &w, &dy})) << name(c, "bwd bf16");
  }
}

// Mixed precision (the model's bf16 compute mode): bf16 operands, fp32 results. With bf16-rounded inputs every
// product is exact in fp32, so y, dx, dw and dbias follow the fp32 rule on those inputs, as the f32 path does.
TEST(MatmulCuda, ForwardMixed) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;  // see the header comment (bf16 subnormal operands)
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 b = DeviceBuffer::from(in.bias, "bias"), y = DeviceBuffer::from(in.y0, "y");
    if (!c.accumulate) y = DeviceBuffer(in.y0.size() * 4, "y");
    matmul_forward_mixed_cuda(ctx().blaslt(), y.as<float>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(),
                              c.bias ? b.as<float>() : nullptr, {c.M, c.N, c.K}, c.accumulate);
    if (c.M * c.N > 0) {
      EXPECT_TRUE(check_f32(name(c, "fwd mixed"), y.download<float>(), e.y, e.y64, e.mag_y, dot_tolerance(c, c.K)));
    }
    EXPECT_TRUE(buffers_ok({&y}, {&x, &w, &b})) << name(c, "fwd mixed");
  }
}

TEST(MatmulCuda, BackwardMixed) {
  HLM_REQUIRE_CUDA();
  note_reference();
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 dy = DeviceBuffer::from(to_bf16(in.dy), "dy"), dx = DeviceBuffer::from(in.dx0, "dx"),
                 dw = DeviceBuffer::from(in.dw0, "dw"), db = DeviceBuffer::from(in.dbias0, "dbias");
    if (!c.accumulate) dx = DeviceBuffer(in.dx0.size() * 4, "dx");
    matmul_backward_mixed_cuda(ctx().blaslt(), dx.as<float>(), dw.as<float>(), db.as<float>(),
                               dy.as<__nv_bfloat16>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(),
                               {c.M, c.N, c.K}, c.accumulate);
    EXPECT_TRUE(
        check_f32(name(c, "bwd dx mixed"), dx.download<float>(), e.dx, e.dx64, e.mag_dx, dot_tolerance(c, c.N)));
    EXPECT_TRUE(
        check_f32(name(c, "bwd dw mixed"), dw.download<float>(), e.dw, e.dw64, e.mag_dw, dot_tolerance(c, c.M)));
    EXPECT_TRUE(check_f32(name(c, "bwd dbias mixed"), db.download<float>(), e.dbias, e.dbias64, e.mag_dbias,
                          dbias_tolerance(c)));
    EXPECT_TRUE(buffers_ok({&dx, &dw, &db}, {&x, &w, &dy})) << name(c, "bwd mixed");
  }
}
