#include "core/tensor.h"

#include <cstring>
#include <vector>

#include "core/host_alloc.h"

namespace hlm {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  HLM_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "rank ", dims.size(), " exceeds kMaxRank");
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    HLM_CHECK(dims[i] >= 0, "negative dimension ", dims[i]);
    dims_[i] = dims[i];
  }
}

int Shape::normalize_axis(int i) const {
  const int axis = i < 0 ? i + rank_ : i;
  HLM_CHECK(axis >= 0 && axis < rank_, "axis ", i, " out of range for rank ", rank_);
  return axis;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

static std::array<int64_t, kMaxRank> contiguous_strides(const Shape& shape) {
  std::array<int64_t, kMaxRank> strides{};
  int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t;
  auto storage = host_alloc(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  t.data_ = storage.get();
  t.owner_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::wrap(std::shared_ptr<void> owner, void* data, Shape shape, DType dtype) {
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

void Tensor::check_element_type(size_t element_size) const {
  HLM_CHECK(element_size == dtype_size(dtype_), "element size ", element_size, " does not match dtype ",
            dtype_name(dtype_));
}

float* Tensor::f32() const {
  HLM_CHECK(dtype_ == DType::F32, "expected an f32 tensor, got ", dtype_name(dtype_));
  HLM_CHECK(is_contiguous(), "expected a contiguous tensor of shape ", shape_.str());
  return static_cast<float*>(data_);
}

Tensor Tensor::reshape(Shape shape) const {
  HLM_CHECK(is_contiguous(), "reshape needs a contiguous tensor");
  HLM_CHECK(shape.numel() == numel(), "reshape ", shape_.str(), " -> ", shape.str(), " changes the element count");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int axis, int64_t begin, int64_t end) const {
  const int a = axis < 0 ? axis + rank() : axis;
  HLM_CHECK(a >= 0 && a < rank(), "slice axis ", axis, " out of range");
  HLM_CHECK(0 <= begin && begin <= end && end <= shape_[a], "slice [", begin, ", ", end, ") out of range for ",
            shape_.str(), " axis ", a);
  Tensor t = *this;
  t.data_ = static_cast<std::byte*>(data_) + begin * strides_[a] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[a] = end - begin;
  return t;
}

Tensor Tensor::select(int axis, int64_t index) const {
  const int a = axis < 0 ? axis + rank() : axis;
  Tensor s = slice(a, index, index + 1);
  std::array<int64_t, kMaxRank> dims{};
  std::array<int64_t, kMaxRank> strides{};
  int r = 0;
  for (int i = 0; i < rank(); ++i) {
    if (i == a) continue;
    dims[r] = shape_[i];
    strides[r] = strides_[i];
    ++r;
  }
  s.shape_ = Shape(std::span<const int64_t>(dims.data(), static_cast<size_t>(r)));
  s.strides_ = strides;
  return s;
}

// Walks every element of a strided tensor in row-major order, calling fn(byte offset from data, linear index).
template <typename Fn>
static void for_each_offset(const Shape& shape, const std::array<int64_t, kMaxRank>& strides, size_t esize, Fn fn) {
  const int64_t n = shape.numel();
  std::array<int64_t, kMaxRank> idx{};
  for (int64_t linear = 0; linear < n; ++linear) {
    int64_t off = 0;
    for (int i = 0; i < shape.rank(); ++i) off += idx[i] * strides[i];
    fn(off * static_cast<int64_t>(esize), linear);
    for (int i = shape.rank() - 1; i >= 0; --i) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::contiguous_copy() const {
  Tensor out = zeros(shape_, dtype_);
  const size_t esize = dtype_size(dtype_);
  if (is_contiguous()) {
    std::memcpy(out.data_, data_, nbytes());
    return out;
  }
  auto* dst = static_cast<std::byte*>(out.data_);
  const auto* src = static_cast<const std::byte*>(data_);
  for_each_offset(shape_, strides_, esize,
                  [&](int64_t off, int64_t linear) { std::memcpy(dst + linear * esize, src + off, esize); });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : contiguous_copy(); }

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return contiguous();
  Tensor src = contiguous();
  Tensor out = zeros(shape_, dtype);
  if (dtype == DType::F32) {
    convert_to_f32(static_cast<float*>(out.data_), src.data_, dtype_, static_cast<size_t>(numel()));
  } else if (dtype_ == DType::F32) {
    convert_from_f32(out.data_, dtype, static_cast<const float*>(src.data_), static_cast<size_t>(numel()));
  } else {
    Tensor wide = src.to(DType::F32);
    convert_from_f32(out.data_, dtype, wide.f32(), static_cast<size_t>(numel()));
  }
  return out;
}

}  // namespace hlm
