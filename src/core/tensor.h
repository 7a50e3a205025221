// Tensor: a typed, strided view of host memory. Shapes are outermost-first (row-major, like PyTorch); strides are in
// elements. A Tensor shares ownership of its storage (an allocation or a mapped file) so views stay valid.
// Non-goals: no autograd, no device dispatch here (backends take raw pointers), no broadcasting.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace hlm {

inline constexpr int kMaxRank = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[normalize_axis(i)]; }
  int64_t& operator[](int i) { return dims_[normalize_axis(i)]; }
  int64_t numel() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3, 4]"

 private:
  int normalize_axis(int i) const;
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled, contiguous host tensor.
  static Tensor zeros(Shape shape, DType dtype = DType::F32);
  // A non-owning-by-type view over `data` kept alive by `owner` (e.g. an mmap'ed file).
  static Tensor wrap(std::shared_ptr<void> owner, void* data, Shape shape, DType dtype);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank() : i]; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return owner_ != nullptr || data_ != nullptr; }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    check_element_type(sizeof(T));
    return static_cast<T*>(data_);
  }
  float* f32() const;  // checks dtype F32 and contiguity

  // Views (share storage).
  Tensor reshape(Shape shape) const;           // contiguous tensors only
  Tensor slice(int axis, int64_t begin, int64_t end) const;  // [begin, end) along axis
  Tensor select(int axis, int64_t index) const;              // drops the axis

  // Copies (new storage).
  Tensor contiguous() const;
  Tensor to(DType dtype) const;  // float dtypes only; f32 result is always contiguous
  Tensor clone() const { return contiguous_copy(); }

 private:
  Tensor contiguous_copy() const;
  void check_element_type(size_t element_size) const;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  std::array<int64_t, kMaxRank> strides_{};
  DType dtype_ = DType::F32;
};

}  // namespace hlm
