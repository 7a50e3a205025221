#include "backend/cuda/cuda_allocator.h"

#include <algorithm>
#include <bit>
#include <optional>

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
  for (auto& [id, pool] : pools_)
    for (auto& [cls, blocks] : pool.free_lists)
      for (void* p : blocks) {
        if (!segments_.is_taken(reinterpret_cast<uintptr_t>(p))) cudaFree(p);
      }
  for (const auto& [base, bytes] : segments_.release_free_segments()) cudaFree(reinterpret_cast<void*>(base));
}

void CudaAllocator::device_malloc_locked(void** ptr, size_t bytes, bool may_release) {
  cudaError_t status = cudaMalloc(ptr, bytes);
  if (status == cudaErrorMemoryAllocation && may_release) {
    cudaGetLastError();  // clear it, give the cache back to the driver, and retry once
    ++stats_.num_oom_retries;
    release_cached_locked();
    status = cudaMalloc(ptr, bytes);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw_internal_error("CUDA out of memory: cannot allocate ", bytes, " bytes; allocator holds ",
                         stats_.bytes_reserved, " bytes, ", stats_.bytes_in_use, " in use, peak ",
                         stats_.peak_bytes_in_use, ", ", segments_.free_bytes(), " free in segments (largest ",
                         segments_.largest_free(), ")", active_pool_ != 0 ? " (inside a private pool)" : "");
  }
  HLM_CUDA_CHECK(status);
  ++stats_.num_device_mallocs;
  stats_.bytes_reserved += bytes;
  stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
}

void* CudaAllocator::allocate_large_locked(size_t bytes) {
  const size_t rounded = (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
  ++stats_.num_large_allocs;
  std::optional<BestFitRanges::Taken> taken = segments_.take(rounded);
  if (taken) {
    ++stats_.num_cache_hits;
  } else {
    const size_t segment = (rounded + kSegmentRound - 1) / kSegmentRound * kSegmentRound;
    void* base = nullptr;
    device_malloc_locked(&base, segment, true);
    segments_.add_segment(reinterpret_cast<uintptr_t>(base), segment);
    taken = segments_.take(rounded);
    HLM_CHECK(taken.has_value(), "CudaAllocator: a new segment of ", segment, " bytes does not hold ", rounded);
  }
  void* ptr = reinterpret_cast<void*>(taken->addr);
  live_.emplace(ptr, Live{taken->bytes, bytes, 0});
  stats_.bytes_in_use += taken->bytes;
  stats_.bytes_requested += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void* CudaAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_allocs;
  if (active_pool_ == 0 && bytes >= kLargeBytes) return allocate_large_locked(bytes);
  const size_t cls = size_class(bytes);
  void* ptr = nullptr;
  Pool* pool = active_pool_ != 0 ? &pools_.at(active_pool_) : nullptr;
  FreeLists& lists = pool != nullptr ? pool->free_lists : free_lists_;
  auto it = lists.find(cls);
  if (it != lists.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.num_cache_hits;
  } else {
    // Inside a capture no release: cudaFree is not allowed there (a stream's pool may release the general cache).
    device_malloc_locked(&ptr, cls, pool == nullptr || !pool->capture);
    if (pool != nullptr) pool->bytes += cls;
  }
  live_.emplace(ptr, Live{cls, bytes, active_pool_});
  stats_.bytes_in_use += cls;
  stats_.bytes_requested += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CudaAllocator::free_general_locked(void* ptr, size_t bytes) {
  if (segments_.is_taken(reinterpret_cast<uintptr_t>(ptr))) {
    segments_.give_back(reinterpret_cast<uintptr_t>(ptr));
  } else {
    free_lists_[bytes].push_back(ptr);
  }
}

void CudaAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  HLM_CHECK(it != live_.end(), "CudaAllocator::deallocate: pointer was not allocated here (or freed twice)");
  const Live block = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= block.cls;
  stats_.bytes_requested -= block.requested;
  // Inside a capture every freed block joins the active pool; a pool's block goes back to its pool while it exists.
  // A segment block adopted by a pool stays taken in its segment until the pool is released.
  uint64_t owner = active_pool_ != 0 ? active_pool_ : block.pool;
  auto pool = pools_.find(owner);
  if (pool == pools_.end()) {
    free_general_locked(ptr, block.cls);
    return;
  }
  if (block.pool != owner) pool->second.bytes += block.cls;  // a general block adopted by the capture's pool
  pool->second.free_lists[block.cls].push_back(ptr);
}

uint64_t CudaAllocator::create_pool(bool for_capture) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_pool_++;
  Pool pool;
  pool.capture = for_capture;
  pools_.emplace(id, std::move(pool));
  return id;
}

void CudaAllocator::begin_pool(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  HLM_CHECK(active_pool_ == 0, "CudaAllocator::begin_pool: pool ", active_pool_, " is still active");
  HLM_CHECK(pools_.count(id) == 1, "CudaAllocator::begin_pool: no pool ", id);
  active_pool_ = id;
}

void CudaAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_pool_ = 0;
}

void CudaAllocator::release_pool(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active_pool_ == id) active_pool_ = 0;
  auto pool = pools_.find(id);
  if (pool == pools_.end()) return;
  for (auto& [cls, blocks] : pool->second.free_lists)
    for (void* p : blocks) free_general_locked(p, cls);
  for (auto& [ptr, block] : live_)
    if (block.pool == id) block.pool = 0;
  pools_.erase(pool);
}

size_t CudaAllocator::pool_bytes(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto pool = pools_.find(id);
  return pool == pools_.end() ? 0 : pool->second.bytes;
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
  for (const auto& [base, bytes] : segments_.release_free_segments()) {
    HLM_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(base)));
    ++stats_.num_device_frees;
    stats_.bytes_reserved -= bytes;
  }
}

void CudaAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
  stats_.peak_bytes_reserved = stats_.bytes_reserved;
}

CudaAllocatorStats CudaAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CudaAllocatorStats s = stats_;
  s.segment_bytes = segments_.segment_bytes();
  s.segment_free_bytes = segments_.free_bytes();
  return s;
}

}  // namespace hlm
