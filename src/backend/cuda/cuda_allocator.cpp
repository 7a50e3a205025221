#include "backend/cuda/cuda_allocator.h"

#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace hlm {

namespace {
constexpr size_t kMinBlock = 512;
}

size_t CudaAllocator::size_class(size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes <= kMinBlock) return kMinBlock;
  // 2^k <= bytes - 1 < 2^(k+1): round up to a multiple of 2^(k-2) (quarters of the power of two), at least 512 B.
  const int k = std::bit_width(bytes - 1) - 1;
  const size_t step = std::max(kMinBlock, size_t{1} << (k >= 2 ? k - 2 : 0));
  return (bytes + step - 1) / step * step;
}

CudaAllocator::~CudaAllocator() {
  // Errors are ignored here: at process exit the CUDA runtime may already be unloading.
  for (auto& [cls, blocks] : free_lists_)
    for (void* p : blocks) cudaFree(p);
}

void* CudaAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_allocs;
  void* ptr = nullptr;
  auto it = free_lists_.find(cls);
  if (it != free_lists_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.num_cache_hits;
  } else {
    cudaError_t status = cudaMalloc(&ptr, cls);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, give the cache back to the driver, and retry once
      release_cached_locked();
      status = cudaMalloc(&ptr, cls);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw_internal_error("CUDA out of memory: cannot allocate ", bytes, " bytes (class ", cls, "); allocator holds ",
                           stats_.bytes_reserved, " bytes, ", stats_.bytes_in_use, " in use, peak ",
                           stats_.peak_bytes_in_use);
    }
    HLM_CUDA_CHECK(status);
    ++stats_.num_device_mallocs;
    stats_.bytes_reserved += cls;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  live_.emplace(ptr, std::make_pair(cls, bytes));
  stats_.bytes_in_use += cls;
  stats_.bytes_requested += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CudaAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  HLM_CHECK(it != live_.end(), "CudaAllocator::deallocate: pointer was not allocated here (or freed twice)");
  const auto [cls, requested] = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= cls;
  stats_.bytes_requested -= requested;
  free_lists_[cls].push_back(ptr);
}

void CudaAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CudaAllocator::release_cached_locked() {
  for (auto& [cls, blocks] : free_lists_) {
    for (void* p : blocks) {
      HLM_CUDA_CHECK(cudaFree(p));
      ++stats_.num_device_frees;
      stats_.bytes_reserved -= cls;
    }
    blocks.clear();
  }
}

void CudaAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
  stats_.peak_bytes_reserved = stats_.bytes_reserved;
}

CudaAllocatorStats CudaAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace hlm
