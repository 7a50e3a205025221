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
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/column_sum.h"
#include "core/tuning_cache.h"
#include "harness.h"
#include "ops/matmul/gemv_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/swiglu/swiglu_cuda.h"
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
void check_forward_mixed(const CudaBlasLt& lt) {
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;  // see the header comment (bf16 subnormal operands)
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 b = DeviceBuffer::from(in.bias, "bias"), y = DeviceBuffer::from(in.y0, "y");
    if (!c.accumulate) y = DeviceBuffer(in.y0.size() * 4, "y");
    matmul_forward_mixed_cuda(lt, y.as<float>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(),
                              c.bias ? b.as<float>() : nullptr, {c.M, c.N, c.K}, c.accumulate);
    if (c.M * c.N > 0) {
      EXPECT_TRUE(check_f32(name(c, "fwd mixed"), y.download<float>(), e.y, e.y64, e.mag_y, dot_tolerance(c, c.K)));
    }
    EXPECT_TRUE(buffers_ok({&y}, {&x, &w, &b})) << name(c, "fwd mixed");
  }
}

void check_backward_mixed(const CudaBlasLt& lt) {
  for (const MatmulCase& c : kCases) {
    if (c.fill == Fill::Denormal) continue;
    const Inputs in = make_inputs(c, true);
    const Expected e = expected(c, in);
    DeviceBuffer x = DeviceBuffer::from(to_bf16(in.x), "x"), w = DeviceBuffer::from(to_bf16(in.w), "w"),
                 dy = DeviceBuffer::from(to_bf16(in.dy), "dy"), dx = DeviceBuffer::from(in.dx0, "dx"),
                 dw = DeviceBuffer::from(in.dw0, "dw"), db = DeviceBuffer::from(in.dbias0, "dbias");
    if (!c.accumulate) dx = DeviceBuffer(in.dx0.size() * 4, "dx");
    matmul_backward_mixed_cuda(lt, dx.as<float>(), dw.as<float>(), db.as<float>(),
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

TEST(MatmulCuda, ForwardMixed) {
  HLM_REQUIRE_CUDA();
  note_reference();
  check_forward_mixed(ctx().blaslt());
}

TEST(MatmulCuda, BackwardMixed) {
  HLM_REQUIRE_CUDA();
  note_reference();
  check_backward_mixed(ctx().blaslt());
}

// HLM_MATMUL_AUTOTUNE (matmul_cuda.h): the algorithm timed among the heuristic's first 8 must keep the same contract
// (the same tolerances: any algorithm is one summation order of the same products), and the tuning must engage for
// the shapes where cuBLASLt offers more than one algorithm (counted by matmul_cuda_autotuned_keys). The switch is part
// of the in-process choice's key, so with the environment's autotune off the shapes are new keys here and timed now;
// with HLM_MATMUL_AUTOTUNE=on in the environment (whole suites run that way, session 40) earlier tests have timed the
// same keys already and these calls reuse those choices. Either way the checks run on timed choices, and the process
// must have timed some key (a broken autotune leaves the count at 0).
TEST(MatmulCuda, AutotunedAlgorithmsKeepTheContract) {
  HLM_REQUIRE_CUDA();
  note_reference();
  const size_t before = matmul_cuda_autotuned_keys();
  matmul_cuda_set_autotune(1);
  check_forward_mixed(ctx().blaslt());
  check_backward_mixed(ctx().blaslt());
  matmul_cuda_set_autotune(-1);
  const size_t total = matmul_cuda_autotuned_keys(), tuned = total - before;
  std::cout << "[check] matmul autotune: " << tuned << " shapes timed among several algorithms in this test, "
            << total << " in the process\n";
  EXPECT_GT(total, 0u) << "no GEMM shape was timed: the autotune did not engage";
  if (!matmul_cuda_autotune()) EXPECT_GT(tuned, 0u) << "the environment's autotune is off: these keys were new";
}

// HLM_MATMUL_AUTOTUNE_CACHE (matmul_cuda.h, core/tuning_cache.h): a GEMM key timed once is recorded in the file (one
// line per key timed among several algorithms); a second cuBLASLt handle, whose keys are new to the in-process
// cache as a later process's would be, takes the recorded choice without timing (the timed-key count does not move,
// no line is added) and writes the same bytes. Shapes large enough that cuBLASLt offers several algorithms.
TEST(MatmulCuda, AutotuneCacheReplaysTheRecordedChoice) {
  HLM_REQUIRE_CUDA();
  const std::string path = "/tmp/hlm-test-autotune-cache-" + std::to_string(::getpid()) + ".tsv";
  std::remove(path.c_str());
  set_gemm_tuning_cache_path(path);
  matmul_cuda_set_autotune(1);
  const int64_t M = 1024, N = 768, K = 1280;
  std::mt19937 rng(38);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs(static_cast<size_t>(M * K)), ws(static_cast<size_t>(N * K));
  for (float& v : xs) v = normal(rng);
  for (float& v : ws) v = normal(rng);
  DeviceBuffer x = DeviceBuffer::from(to_bf16(xs), "x"), w = DeviceBuffer::from(to_bf16(ws), "w");
  DeviceBuffer y1(static_cast<size_t>(M * N) * 4, "y first"), y2(static_cast<size_t>(M * N) * 4, "y second");
  const auto lines = [&] {
    std::ifstream in(path);
    size_t n = 0;
    for (std::string l; std::getline(in, l);) n += l.empty() ? 0 : 1;
    return n;
  };
  const size_t before = matmul_cuda_autotuned_keys();
  matmul_forward_mixed_cuda(ctx().blaslt(), y1.as<float>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr,
                            {M, N, K}, false);
  const size_t timed = matmul_cuda_autotuned_keys() - before;
  EXPECT_EQ(lines(), timed) << "one line per key timed among several algorithms";
  cublasLtHandle_t second = nullptr;
  ASSERT_EQ(cublasLtCreate(&second), CUBLAS_STATUS_SUCCESS);
  CudaBlasLt lt = ctx().blaslt();
  lt.handle = second;
  matmul_forward_mixed_cuda(lt, y2.as<float>(), x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, {M, N, K},
                            false);
  EXPECT_EQ(matmul_cuda_autotuned_keys() - before, timed) << "the second handle timed again instead of reading";
  EXPECT_EQ(lines(), timed) << "the second handle appended a line for a recorded key";
  EXPECT_TRUE(y1.download<uint32_t>() == y2.download<uint32_t>()) << "the replayed choice wrote other bytes";
  std::cout << "[check] matmul autotune cache: " << timed << " key(s) timed and recorded, replayed by a second handle "
            << "with the same bytes\n";
  cublasLtDestroy(second);
  matmul_cuda_set_autotune(-1);
  set_gemm_tuning_cache_path(std::nullopt);
  std::remove(path.c_str());
  if (timed == 0) GTEST_SKIP() << "cuBLASLt offered one algorithm for the shape: nothing was timed or replayed";
}

// The small-row GEMV (gemv_cuda.h): a group of three outputs (n = 1, 65 with a bias, 257) over one x, x given in fp32
// (rounded to bf16 in the kernel) and in bf16, M = 1..4, K = 8 (one chunk), 1000 (lanes with unequal chunk counts),
// 4104 (more chunks than one unrolled pass), every fill but Denormal (bf16 operands, as ForwardMixed). Same
// products as matmul_forward_mixed_cuda, another summation order: the fp32 dot rule. Also what it refuses.
TEST(MatmulCuda, GemvGroup) {
  HLM_REQUIRE_CUDA();
  note_reference();
  const int64_t ns[3] = {1, 65, 257};
  for (const Fill fill : {Fill::Normal, Fill::Large, Fill::Zeros, Fill::Special}) {
    for (const int64_t K : {int64_t{8}, int64_t{1000}, int64_t{4104}}) {
      for (int64_t M = 1; M <= gemv_max_rows(); ++M) {
        std::vector<MatmulCase> cases;
        std::vector<Inputs> ins;
        std::vector<Expected> es;
        std::vector<DeviceBuffer> ws, bs, ys;
        for (int i = 0; i < 3; ++i) {
          cases.push_back(MatmulCase{M, ns[i], K, i == 1, false, fill});
          ins.push_back(make_inputs(cases.back(), true));
          es.push_back(expected(cases.back(), ins.back()));
          ws.push_back(DeviceBuffer::from(to_bf16(ins.back().w), "w"));
          bs.push_back(DeviceBuffer::from(ins.back().bias, "bias"));
        }
        // x before rounding: make_inputs draws it with the same seed and size for every output of the group.
        const std::vector<float> x_raw = make_values(static_cast<size_t>(M * K), fill, 81);
        const std::vector<float> x_rounded = round_bf16(x_raw);  // bit comparison: NaN != NaN under ==
        ASSERT_EQ(x_rounded.size(), ins[0].x.size());
        ASSERT_EQ(std::memcmp(x_rounded.data(), ins[0].x.data(), x_rounded.size() * sizeof(float)), 0);
        const DeviceBuffer x32 = DeviceBuffer::from(x_raw, "x f32"), x16 = DeviceBuffer::from(to_bf16(ins[0].x), "x");
        for (const bool bf16_input : {false, true}) {
          ys.clear();
          GemvOutput outs[3];
          for (int i = 0; i < 3; ++i) {
            ys.emplace_back(static_cast<size_t>(M * ns[i]) * 4, "y");
            outs[i] = GemvOutput{ws[static_cast<size_t>(i)].as<__nv_bfloat16>(),
                                 i == 1 ? bs[static_cast<size_t>(i)].as<float>() : nullptr, ys.back().as<float>(), ns[i]};
          }
          ASSERT_TRUE(gemv_supported(M, K, outs, 3));
          gemv_bf16_cuda(outs, 3, bf16_input ? nullptr : x32.as<float>(), bf16_input ? x16.as<__nv_bfloat16>() : nullptr,
                         M, K, ctx().stream());
          for (int i = 0; i < 3; ++i) {
            const MatmulCase& c = cases[static_cast<size_t>(i)];
            const Expected& e = es[static_cast<size_t>(i)];
            const std::string what = bf16_input ? "gemv (bf16 x)" : "gemv (f32 x)";
            EXPECT_TRUE(check_f32(name(c, what.c_str()), ys[static_cast<size_t>(i)].download<float>(), e.y, e.y64,
                                  e.mag_y, dot_tolerance(c, c.K)));
          }
          EXPECT_TRUE(buffers_ok({&ys[0], &ys[1], &ys[2]}, {&x32, &x16, &ws[0], &ws[1], &ws[2], &bs[1]}))
              << "gemv M=" << M << " K=" << K << " " << fill_name(fill);
        }
      }
    }
  }
  // Refused shapes: K not a multiple of 8, too many rows or outputs, a weight that is not 16-byte aligned.
  DeviceBuffer w = DeviceBuffer::from(std::vector<uint16_t>(64 * 24, 0), "w"), y(64 * 4 * 4, "y");
  GemvOutput ok{w.as<__nv_bfloat16>(), nullptr, y.as<float>(), 8};
  EXPECT_TRUE(gemv_supported(1, 24, &ok, 1));
  EXPECT_FALSE(gemv_supported(1, 20, &ok, 1));
  EXPECT_FALSE(gemv_supported(gemv_max_rows() + 1, 24, &ok, 1));
  EXPECT_FALSE(gemv_supported(0, 24, &ok, 1));
  EXPECT_FALSE(gemv_supported(1, gemv_max_k() + 8, &ok, 1));
  GemvOutput seven[7] = {ok, ok, ok, ok, ok, ok, ok};
  EXPECT_FALSE(gemv_supported(1, 24, seven, 7));
  GemvOutput misaligned = ok;
  misaligned.w = w.as<__nv_bfloat16>() + 1;
  EXPECT_FALSE(gemv_supported(1, 24, &misaligned, 1));
}

// The small-row GEMV with SwiGLU in its epilogue (gemv_bf16_swiglu_cuda) against what it replaces: the group GEMV of
// the same gate and up products followed by swiglu_forward_cuda (h in fp32) or swiglu_forward_bf16_cuda (h in bf16),
// byte for byte (the same fp32 sums, the same SwiGLU expression: swiglu_math.cuh). x in fp32 and in bf16, biases on
// and off, M = 1..4, and (K, n) = (8, 5003: more (gate, up) pairs than the GEMV's resident warps, so warps take
// several), (1000, 37), (2560, 1), (4104, 300); fills Normal, Large (SwiGLU's exp over- and underflows), Special
// (NaN/±Inf). Also what it refuses.
TEST(MatmulCuda, GemvSwigluEqualsGemvThenSwigluBitForBit) {
  HLM_REQUIRE_CUDA();
  const std::pair<int64_t, int64_t> shapes[] = {{8, 5003}, {1000, 37}, {2560, 1}, {4104, 300}};
  uint64_t seed = 300;
  size_t compared = 0;
  for (const Fill fill : {Fill::Normal, Fill::Large, Fill::Special}) {
    for (const auto& [K, n] : shapes) {
      const size_t wn = static_cast<size_t>(n * K);
      const DeviceBuffer wg = DeviceBuffer::from(to_bf16(make_values(wn, fill, ++seed)), "w gate");
      const DeviceBuffer wu = DeviceBuffer::from(to_bf16(make_values(wn, fill, ++seed)), "w up");
      const DeviceBuffer bg = DeviceBuffer::from(make_values(static_cast<size_t>(n), fill, ++seed), "b gate");
      const DeviceBuffer bu = DeviceBuffer::from(make_values(static_cast<size_t>(n), fill, ++seed), "b up");
      for (int64_t M = 1; M <= gemv_max_rows(); ++M) {
        const std::vector<float> x_raw = make_values(static_cast<size_t>(M * K), fill, ++seed);
        const DeviceBuffer x32 = DeviceBuffer::from(x_raw, "x f32"), x16 = DeviceBuffer::from(to_bf16(x_raw), "x bf16");
        for (const bool bias : {false, true}) {
          for (const bool bf16_input : {false, true}) {
            SCOPED_TRACE("gemv swiglu K " + std::to_string(K) + " n " + std::to_string(n) + " M " + std::to_string(M) +
                         (bias ? " bias " : " ") + (bf16_input ? "bf16 x " : "f32 x ") + fill_name(fill));
            const float* xf = bf16_input ? nullptr : x32.as<float>();
            const __nv_bfloat16* xb = bf16_input ? x16.as<__nv_bfloat16>() : nullptr;
            const size_t hn = static_cast<size_t>(M * n);
            DeviceBuffer yg(hn * 4, "y gate"), yu(hn * 4, "y up");
            const GemvOutput gate{wg.as<__nv_bfloat16>(), bias ? bg.as<float>() : nullptr, yg.as<float>(), n};
            const GemvOutput up{wu.as<__nv_bfloat16>(), bias ? bu.as<float>() : nullptr, yu.as<float>(), n};
            const GemvOutput group[2] = {gate, up};
            ASSERT_TRUE(gemv_supported(M, K, group, 2));
            ASSERT_TRUE(gemv_swiglu_supported(M, K, gate, up));
            gemv_bf16_cuda(group, 2, xf, xb, M, K, ctx().stream());
            DeviceBuffer ref32(hn * 4, "h f32 (separate)"), ref16(hn * 2, "h bf16 (separate)");
            swiglu_forward_cuda(ref32.as<float>(), yg.as<float>(), yu.as<float>(), M * n, ctx().stream());
            swiglu_forward_bf16_cuda(ref16.as<__nv_bfloat16>(), yg.as<float>(), yu.as<float>(), M * n, ctx().stream());
            DeviceBuffer h32(hn * 4, "h f32 (fused)"), h16(hn * 2, "h bf16 (fused)");
            gemv_bf16_swiglu_cuda(gate, up, h32.as<float>(), nullptr, xf, xb, M, K, ctx().stream());
            gemv_bf16_swiglu_cuda(gate, up, nullptr, h16.as<__nv_bfloat16>(), xf, xb, M, K, ctx().stream());
            ctx().synchronize();
            EXPECT_EQ(h32.download_bytes(), ref32.download_bytes()) << "fp32 h";
            EXPECT_EQ(h16.download_bytes(), ref16.download_bytes()) << "bf16 h";
            EXPECT_TRUE(buffers_ok({&h32, &h16, &ref32, &ref16, &yg, &yu}, {&x32, &x16, &wg, &wu, &bg, &bu}));
            compared += 3 * hn;
          }
        }
      }
    }
  }
  std::printf("[check] gemv swiglu: %zu outputs compared byte for byte with the separate launches\n", compared);
  // Refused: unequal n, a misaligned weight, K not a multiple of 8, too many rows.
  DeviceBuffer w = DeviceBuffer::from(std::vector<uint16_t>(64 * 24, 0), "w");
  const GemvOutput ok{w.as<__nv_bfloat16>(), nullptr, nullptr, 8};
  GemvOutput other = ok;
  EXPECT_TRUE(gemv_swiglu_supported(1, 24, ok, ok));
  other.n = 7;
  EXPECT_FALSE(gemv_swiglu_supported(1, 24, ok, other));
  other = ok;
  other.w = w.as<__nv_bfloat16>() + 1;
  EXPECT_FALSE(gemv_swiglu_supported(1, 24, ok, other));
  EXPECT_FALSE(gemv_swiglu_supported(1, 20, ok, ok));
  EXPECT_FALSE(gemv_swiglu_supported(gemv_max_rows() + 1, 24, ok, ok));
}
