#include "core/host_alloc.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace hlm {

std::shared_ptr<std::byte> host_alloc(size_t bytes) {
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  HLM_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  std::memset(p, 0, rounded == 0 ? kHostAlignment : rounded);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace hlm
