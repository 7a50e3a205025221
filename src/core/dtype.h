// Element types: one table (kDTypeTable) gives name, size and safetensors code of each; everything else derives from it.
// bf16/f16 are storage types: compute happens in f32 (conversions below are exact for widening, round-to-nearest-even
// for narrowing, NaN preserved).
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace hlm {

enum class DType : uint8_t { F32, BF16, F16, I32, I64 };

struct DTypeInfo {
  DType dtype;
  std::string_view name;              // our name, as printed
  std::string_view safetensors_name;  // the code in a safetensors header
  size_t size;                        // bytes per element
};

inline constexpr std::array<DTypeInfo, 5> kDTypeTable{{
    {DType::F32, "f32", "F32", 4},
    {DType::BF16, "bf16", "BF16", 2},
    {DType::F16, "f16", "F16", 2},
    {DType::I32, "i32", "I32", 4},
    {DType::I64, "i64", "I64", 8},
}};
static_assert(kDTypeTable.size() == static_cast<size_t>(DType::I64) + 1, "one row per DType, in enum order");

constexpr const DTypeInfo& dtype_info(DType t) { return kDTypeTable[static_cast<size_t>(t)]; }
constexpr size_t dtype_size(DType t) { return dtype_info(t).size; }
constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Looks up a safetensors dtype code ("BF16"); nullopt when we do not support it (e.g. "F8_E4M3", "BOOL").
std::optional<DType> dtype_from_safetensors(std::string_view code);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (any float dtype) into f32.
void convert_to_f32(float* dst, const void* src, DType src_dtype, size_t n);
// Converts n f32 values into `dst_dtype` (any float dtype).
void convert_from_f32(void* dst, DType dst_dtype, const float* src, size_t n);

}  // namespace hlm
