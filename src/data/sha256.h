// SHA-256 (FIPS 180-4), incremental, for the checksums in corpus.json. Small and dependency-free; not constant-time
// and not meant for anything security-related.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hlm {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Finishes the hash and returns 64 lowercase hex digits; the object must not be updated afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed
};

std::string sha256_hex(std::string_view bytes);

}  // namespace hlm
