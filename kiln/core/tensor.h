// Tensor: a contiguous, row-major array with a shape, a dtype and a device, sharing its Storage.
// Storage is host memory (64-byte aligned), a read-only memory-mapped file region, or (later)
// device memory. Views share storage and keep it alive.
//
// Example:
//   kiln::Tensor x = kiln::Tensor::empty({2, 3}, kiln::DType::f32);
//   float* p = x.data<float>();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual bool writable() const { return true; }
  // Hint that [offset, offset + bytes) will not be read soon: a file mapping drops those pages from
  // memory (they are read back from the file if touched again). Other storages ignore it.
  virtual void release_pages(size_t /*offset*/, size_t /*bytes*/) {}
  // Hint that [offset, offset + bytes) is about to be read whole: a file mapping reads those pages
  // in with one call instead of faulting them in one by one. Other storages ignore it.
  virtual void populate(size_t /*offset*/, size_t /*bytes*/) {}
  Device device() const { return device_; }

 protected:
  Device device_{};
};

// Host memory, 64-byte aligned, optionally zero-filled.
std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero = false);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype);

  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  // Copies host data of the given dtype.
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<int32_t>& v, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return kiln::numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset() const { return offset_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Same storage, new shape of equal numel.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice0(int64_t begin, int64_t end) const;
  // A new host tensor holding this one converted to `dtype` (a copy even when dtypes match).
  Tensor to(DType dtype) const;
  Tensor clone() const { return to(dtype_); }
  // Values as f32, for tests and host-side logic.
  std::vector<float> to_f32_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// Element-wise dtype conversion between host buffers (f32, bf16, f16 in any direction).
void convert(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);

}  // namespace kiln
