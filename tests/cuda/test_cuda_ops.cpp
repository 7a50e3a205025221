// CUDA backend layer tests: availability, error checks, the caching allocator, the context and host<->device copies.
// The op comparisons live in cases_<op>.cpp (one file per op) on top of harness.h. Host-only tests here run on every
// machine; the rest skip without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <string>

#include "backend/cuda/column_sum.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_tensor.h"
#include "core/dtype.h"
#include "core/error.h"
#include "harness.h"

using namespace hlm;
using namespace hlm::cuda_test;

TEST(CudaBackend, AvailabilityNeverThrows) {
  bool available = false;
  EXPECT_NO_THROW(available = cuda_available());
  if (!available) {
    // The reason agrees with the device list: "no driver" / "no device" exactly when no GPU is listed, else a reason
    // about device 0 (no kernel image for its architecture, cudaSetDevice or the probe kernel failing).
    const std::string reason = cuda_unavailable_reason();
    EXPECT_FALSE(reason.empty());
    const bool says_no_gpu = reason.rfind("no usable CUDA driver", 0) == 0 || reason == "no CUDA device";
    EXPECT_EQ(says_no_gpu, cuda_devices().empty()) << reason;
  } else {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
    EXPECT_FALSE(cuda_devices().empty());
  }
  std::cout << "[info] cuda_available=" << available << " " << cuda_unavailable_reason() << "\n";
  for (const auto& d : cuda_devices())
    std::cout << "[info] device " << d.index << ": " << d.name << " sm_" << d.compute_major << d.compute_minor << ", "
              << d.multiprocessors << " SMs, " << (d.total_memory_bytes >> 20) << " MiB\n";
}

TEST(CudaBackend, CheckMacroThrowsWithLocationAndMessage) {
  try {
    HLM_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_NE(what.find("test_cuda_ops.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << what;
  }
  try {
    HLM_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, SizeClasses) {
  EXPECT_EQ(CudaAllocator::size_class(0), 0u);
  EXPECT_EQ(CudaAllocator::size_class(1), 512u);
  EXPECT_EQ(CudaAllocator::size_class(512), 512u);
  EXPECT_EQ(CudaAllocator::size_class(513), 1024u);
  EXPECT_EQ(CudaAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CudaAllocator::size_class((size_t{1} << 20) + 1), (size_t{5} << 18));  // 1.25 MiB
  size_t prev = 0;
  for (size_t b = 1; b < (size_t{1} << 26); b = b * 3 / 2 + 7) {
    const size_t c = CudaAllocator::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, std::max<size_t>(b + 511, b + b / 4)) << b;  // at most 25% (or 511 B) of waste
    EXPECT_EQ(c % 512, 0u) << b;
    EXPECT_GE(c, prev);
    prev = c;
  }
}

TEST(CudaBackend, ColumnSumPlan) {
  EXPECT_EQ(column_sum_plan(1, 10, 1 << 20).chunks, 1);
  EXPECT_EQ(column_sum_plan(32, 10, 1 << 20).chunks, 1);
  const ColumnSumPlan p = column_sum_plan(1000, 65, ~size_t{0} / 2);
  EXPECT_EQ(p.chunks, 32);
  EXPECT_EQ(p.rows_per_chunk, 32);
  EXPECT_GE(p.chunks * p.rows_per_chunk, 1000);
  EXPECT_EQ(p.scratch_bytes, size_t(32 * 65 * 4));
  // Scratch-limited: at most scratch / (4 · cols) chunks.
  const ColumnSumPlan q = column_sum_plan(100000, 1000, 40000);
  EXPECT_EQ(q.chunks, 10);
  EXPECT_EQ(q.rows_per_chunk, 10000);
  EXPECT_EQ(column_sum_plan(100000, 1000000, 1000).chunks, 1);  // no room: single pass
  EXPECT_LE(column_sum_plan(1 << 30, 4, ~size_t{0} / 2).chunks, kColumnSumMaxChunks);
}

TEST(CudaAllocator, ReusesFreedBlocksAndTracksStats) {
  HLM_REQUIRE_CUDA();
  CudaAllocator a;
  void* p1 = a.allocate(1000);
  ASSERT_NE(p1, nullptr);
  CudaAllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.bytes_requested, 1000u);
  EXPECT_EQ(s.bytes_reserved, 1024u);
  EXPECT_EQ(s.num_device_mallocs, 1u);
  a.deallocate(p1);
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().bytes_reserved, 1024u);  // cached, not returned
  void* p2 = a.allocate(600);                 // same class (1024): served from the free list
  EXPECT_EQ(p2, p1);
  s = a.stats();
  EXPECT_EQ(s.num_cache_hits, 1u);
  EXPECT_EQ(s.num_device_mallocs, 1u);
  void* p3 = a.allocate(3 << 20);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1024u + (3u << 20));
  EXPECT_EQ(s.peak_bytes_in_use, 1024u + (3u << 20));
  a.deallocate(p3);
  a.deallocate(p2);
  EXPECT_EQ(a.allocate(0), nullptr);
  a.deallocate(nullptr);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u + (3u << 20));
  a.release_cached();
  s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.num_device_frees, 2u);
  EXPECT_EQ(s.peak_bytes_reserved, 1024u + (3u << 20));
  EXPECT_THROW(a.deallocate(reinterpret_cast<void*>(0x1234)), Error);
}

TEST(CudaAllocator, OutOfMemoryIsAnErrorNotACrash) {
  HLM_REQUIRE_CUDA();
  CudaAllocator a;
  void* small = a.allocate(4096);
  a.deallocate(small);  // cached; the failed request below must release it before giving up
  try {
    a.allocate(size_t{1} << 50);  // 1 PiB
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().bytes_reserved, 0u);
  // The device is still usable afterwards.
  void* p = a.allocate(4096);
  EXPECT_NE(p, nullptr);
  a.deallocate(p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaContext, DefaultContextHasStreamBlasLtAndWorkspace) {
  HLM_REQUIRE_CUDA();
  CudaContext& c = ctx();
  EXPECT_NE(c.stream(), nullptr);
  const CudaBlasLt lt = c.blaslt();
  EXPECT_NE(lt.handle, nullptr);
  EXPECT_NE(lt.workspace, nullptr);
  EXPECT_EQ(lt.workspace_bytes, size_t{32} << 20);
  EXPECT_EQ(lt.stream, c.stream());
  EXPECT_GE(c.allocator().stats().bytes_in_use, size_t{32} << 20);
  EXPECT_NO_THROW(c.synchronize());
}

TEST(CudaTensor, RoundTripsF32Bf16AndStridedViews) {
  HLM_REQUIRE_CUDA();
  CudaContext& c = ctx();
  Tensor h = Tensor::zeros({3, 5}, DType::F32);
  for (int64_t i = 0; i < 15; ++i) h.f32()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  CudaTensor d = cuda_upload(c, h);
  EXPECT_EQ(d.shape(), h.shape());
  const Tensor back = cuda_download(c, d);
  EXPECT_EQ(std::memcmp(back.raw(), h.raw(), h.nbytes()), 0);

  const Tensor hb = h.to(DType::BF16);
  const Tensor backb = cuda_download(c, cuda_upload(c, hb));
  EXPECT_EQ(backb.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(backb.raw(), hb.raw(), hb.nbytes()), 0);

  const Tensor view = h.slice(1, 1, 4);  // [3, 3], strided
  ASSERT_FALSE(view.is_contiguous());
  const Tensor backv = cuda_download(c, cuda_upload(c, view));
  const Tensor expect = view.contiguous();
  EXPECT_EQ(std::memcmp(backv.raw(), expect.raw(), expect.nbytes()), 0);

  CudaTensor wrong = CudaTensor::empty(c, {2, 2});
  EXPECT_THROW(cuda_copy(c, wrong, h), Error);
  Tensor empty = Tensor::zeros({0, 4});
  EXPECT_EQ(cuda_download(c, cuda_upload(c, empty)).numel(), 0);
}
