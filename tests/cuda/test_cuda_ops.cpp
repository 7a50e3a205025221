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
  // The 3-MiB block was cut from a segment of 4 MiB (requests >= 1 MiB: the request rounded up to 2 MiB).
  EXPECT_EQ(s.peak_bytes_reserved, 1024u + (4u << 20));
  EXPECT_THROW(a.deallocate(reinterpret_cast<void*>(0x1234)), Error);
}

// Large requests share segments: freed blocks merge and serve other sizes without a new cudaMalloc, so a step whose
// phases ask for different large sizes settles on the memory of its largest phase.
TEST(CudaAllocator, LargeBlocksAreCutFromSegmentsAndMerged) {
  HLM_REQUIRE_CUDA();
  constexpr size_t MiB = size_t{1} << 20;
  CudaAllocator a;
  void* big = a.allocate(10 * MiB);
  CudaAllocatorStats s = a.stats();
  EXPECT_EQ(s.num_device_mallocs, 1u);
  EXPECT_EQ(s.segment_bytes, 10 * MiB);
  EXPECT_EQ(s.num_large_allocs, 1u);
  a.deallocate(big);
  EXPECT_EQ(a.stats().segment_free_bytes, 10 * MiB);
  // Phase 2: three blocks of other sizes from the same segment.
  void* p1 = a.allocate(4 * MiB);
  void* p2 = a.allocate(3 * MiB + 100);
  void* p3 = a.allocate(2 * MiB);
  EXPECT_EQ(p1, big);  // cut from the front of the one free block
  EXPECT_EQ(static_cast<char*>(p2), static_cast<char*>(big) + 4 * MiB);
  s = a.stats();
  EXPECT_EQ(s.num_device_mallocs, 1u);
  EXPECT_EQ(s.num_cache_hits, 3u);
  EXPECT_EQ(s.bytes_requested, 9 * MiB + 100);
  // p2 is rounded to 512 B; p3 got the whole rest (3 MiB - 512 B): a rest under 1 MiB is not cut off.
  EXPECT_EQ(s.bytes_in_use, 10 * MiB);
  // The blocks are usable device memory, and do not overlap.
  HLM_CUDA_CHECK(cudaMemset(p1, 1, 4 * MiB));
  HLM_CUDA_CHECK(cudaMemset(p2, 2, 3 * MiB + 100));
  HLM_CUDA_CHECK(cudaMemset(p3, 3, 2 * MiB));
  unsigned char edge[2] = {0, 0};
  HLM_CUDA_CHECK(cudaMemcpy(&edge[0], static_cast<char*>(p2) - 1, 1, cudaMemcpyDeviceToHost));
  HLM_CUDA_CHECK(cudaMemcpy(&edge[1], p2, 1, cudaMemcpyDeviceToHost));
  EXPECT_EQ(edge[0], 1);
  EXPECT_EQ(edge[1], 2);
  // No free block is left: a second segment.
  void* p4 = a.allocate(2 * MiB);
  EXPECT_EQ(a.stats().num_device_mallocs, 2u);
  a.deallocate(p2);
  a.deallocate(p1);
  a.deallocate(p3);  // p1 + p2 + p3 + the rest: one free block of 10 MiB again
  void* whole = a.allocate(10 * MiB);
  EXPECT_EQ(whole, big);
  EXPECT_EQ(a.stats().num_device_mallocs, 2u);
  a.deallocate(whole);
  a.deallocate(p4);
  a.release_cached();
  s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.segment_bytes, 0u);
  EXPECT_EQ(s.num_device_frees, 2u);
  EXPECT_EQ(s.num_oom_retries, 0u);
}

// A segment block freed inside a private pool (a captured kernel may still read it) is the pool's until the pool is
// released: the general allocations do not get it back before.
TEST(CudaAllocator, SegmentBlockFreedInAPoolStaysPrivateUntilReleased) {
  HLM_REQUIRE_CUDA();
  constexpr size_t MiB = size_t{1} << 20;
  CudaAllocator a;
  const uint64_t pool = a.create_pool();
  void* general = a.allocate(4 * MiB);
  a.begin_pool(pool);
  a.deallocate(general);  // adopted by the pool
  a.end_pool();
  EXPECT_GE(a.pool_bytes(pool), 4 * MiB);
  void* other = a.allocate(4 * MiB);
  EXPECT_NE(other, general);
  a.deallocate(other);
  a.release_pool(pool);
  EXPECT_EQ(a.pool_bytes(pool), 0u);
  void* again = a.allocate(4 * MiB);  // the released block is a free segment block again
  EXPECT_TRUE(again == general || again == other);
  a.deallocate(again);
  a.release_cached();
  EXPECT_EQ(a.stats().bytes_reserved, 0u);
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
