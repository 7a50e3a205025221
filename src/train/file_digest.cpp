// File digests for checkpoint manifests (file_digest.h).
#include "train/file_digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hlm {
namespace {

constexpr uint64_t kMulA = 0x9E3779B185EBCA87ull, kMulB = 0xC2B2AE3D27D4EB4Full, kMulC = 0x165667B19E3779F9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t mix(uint64_t acc, uint64_t word) { return rotl(acc + word * kMulB, 31) * kMulA; }
uint64_t finish(uint64_t h) {
  h ^= h >> 33;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulC;
  h ^= h >> 32;
  return h;
}

class Digest {
 public:
  Digest() : lanes_{kMulA + kMulB, kMulB, 0, 0 - kMulA} {}
  // Whole 32-byte blocks only, except at the end (finish_with takes the rest).
  void blocks(const unsigned char* p, size_t n) {
    for (size_t i = 0; i + 32 <= n; i += 32) {
      for (int l = 0; l < 4; ++l) {
        uint64_t w;
        std::memcpy(&w, p + i + 8 * l, 8);
        lanes_[l] = mix(lanes_[l], w);
      }
    }
  }
  std::string finish_with(const unsigned char* tail, size_t n, uint64_t total) {
    unsigned char block[32] = {};
    std::memcpy(block, tail, n);
    block[n] ^= 0x80;  // n < 32: marks where the data ended inside the padded block
    blocks(block, 32);
    std::string hex;
    char buf[17];
    for (int l = 0; l < 4; ++l) {
      const uint64_t h = finish(lanes_[l] ^ finish(total + static_cast<uint64_t>(l) * kMulC) ^ lanes_[(l + 1) % 4]);
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
      hex += buf;
    }
    return hex;
  }

 private:
  std::array<uint64_t, 4> lanes_;
};

}  // namespace

FileDigest file_digest(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HLM_CHECK_INPUT(fd >= 0, path.string(), ": cannot open: ", std::strerror(errno));
  std::vector<unsigned char> buf(size_t{4} << 20);
  Digest d;
  FileDigest out;
  size_t have = 0;  // bytes in buf not yet digested (< 32 after each round)
  for (;;) {
    const ssize_t r = ::read(fd, buf.data() + have, buf.size() - have);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      throw_input_error(path.string(), ": read failed: ", std::strerror(e));
    }
    if (r == 0) break;
    out.bytes += static_cast<uint64_t>(r);
    have += static_cast<size_t>(r);
    const size_t whole = have / 32 * 32;
    d.blocks(buf.data(), whole);
    std::memmove(buf.data(), buf.data() + whole, have - whole);
    have -= whole;
  }
  ::close(fd);
  out.hex = d.finish_with(buf.data(), have, out.bytes);
  return out;
}

}  // namespace hlm
