#include "core/host_alloc.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace hlm {

std::shared_ptr<std::byte> host_alloc_uninitialized(size_t bytes) {
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  HLM_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

std::shared_ptr<std::byte> host_alloc(size_t bytes) {
  std::shared_ptr<std::byte> p = host_alloc_uninitialized(bytes);
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  std::memset(p.get(), 0, rounded == 0 ? kHostAlignment : rounded);
  return p;
}

}  // namespace hlm
