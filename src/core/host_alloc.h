// Aligned host memory. 64-byte alignment suits AVX-512 loads and cache lines; buffers are owned by shared_ptr so
// tensor views keep their storage alive.
#pragma once
#include <cstddef>
#include <memory>

namespace hlm {

inline constexpr size_t kHostAlignment = 64;

// Returns zero-initialised, kHostAlignment-aligned memory of `bytes` bytes (bytes may be 0).
std::shared_ptr<std::byte> host_alloc(size_t bytes);
// The same without the zero fill (contents unspecified): for pools handed out piecewise (core/arena.h), where
// zeroing a whole fresh block touches every page of it, however little is used (a 64-MiB arena block cost ~0.1-0.2 s
// of page faults on a small model's first forward).
std::shared_ptr<std::byte> host_alloc_uninitialized(size_t bytes);

}  // namespace hlm
