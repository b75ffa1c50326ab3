#include "kiln/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/memory.h"
#include "kiln/core/threads.h"

namespace kiln {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

class HostStorage final : public Storage {
 public:
  HostStorage(size_t bytes, bool zero) : bytes_(bytes), mapped_(bytes >= kMapBytes) {
    if (mapped_) {  // fresh pages, already zero
      ptr_ = map_pages(bytes);
      return;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    ptr_ = std::aligned_alloc(64, rounded);
    if (!ptr_) throw std::bad_alloc();
    if (zero) std::memset(ptr_, 0, rounded);
  }
  ~HostStorage() override {
    if (mapped_)
      unmap_pages(ptr_, bytes_);
    else
      std::free(ptr_);
  }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }

 private:
  // From this size on, storage is mapped pages (see map_pages), not malloc'd.
  static constexpr size_t kMapBytes = size_t(1) << 20;
  void* ptr_;
  size_t bytes_;
  bool mapped_;
};

}  // namespace

std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero) {
  return std::make_shared<HostStorage>(bytes, zero);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {
  KILN_CHECK(offset_ + nbytes() <= storage_->bytes(), "tensor ", shape_str(shape_),
             " exceeds its storage");
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return Tensor(allocate_host(size_t(kiln::numel(shape)) * dtype_size(dtype)), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  return Tensor(allocate_host(size_t(kiln::numel(shape)) * dtype_size(dtype), true), 0, shape,
                dtype);
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape) {
  KILN_CHECK(int64_t(v.size()) == kiln::numel(shape), "size mismatch");
  Tensor t = empty(shape, DType::f32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& shape) {
  KILN_CHECK(int64_t(v.size()) == kiln::numel(shape), "size mismatch");
  Tensor t = empty(shape, DType::i32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  KILN_CHECK(kiln::numel(shape) == numel(), "reshape ", shape_str(shape_), " -> ",
             shape_str(shape));
  return Tensor(storage_, offset_, shape, dtype_);
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  KILN_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "bad slice");
  Shape s = shape_;
  s[0] = end - begin;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  return Tensor(storage_, offset_ + size_t(begin * row) * dtype_size(dtype_), s, dtype_);
}

Tensor Tensor::to(DType dtype) const {
  Tensor out = empty(shape_, dtype);
  convert(raw(), dtype_, out.raw(), dtype, numel());
  return out;
}

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  if (dtype_ == DType::i32) {
    for (int64_t i = 0; i < numel(); ++i) v[i] = float(data<int32_t>()[i]);
  } else if (dtype_ == DType::i64) {
    for (int64_t i = 0; i < numel(); ++i) v[i] = float(data<int64_t>()[i]);
  } else {
    convert(raw(), dtype_, v.data(), DType::f32, numel());
  }
  return v;
}

namespace {

// One typed loop per (source, target) pair, so the compiler vectorises it (a dtype switch per
// element ran at under 1 G elements/s: the bf16 gradient casts of training were a quarter of a step).
template <typename S, typename D, typename Fn>
void convert_typed(const void* src, void* dst, int64_t n, Fn fn) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = fn(s[i]);
      },
      1 << 16);
}

}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, size_t(n) * dtype_size(st));
    return;
  }
  if (st == DType::f32 && dt == DType::bf16)
    return convert_typed<float, bf16_t>(src, dst, n, [](float v) { return f32_to_bf16(v); });
  if (st == DType::bf16 && dt == DType::f32)
    return convert_typed<bf16_t, float>(src, dst, n, [](bf16_t v) { return bf16_to_f32(v); });
  auto load = [&](int64_t i) -> float {
    switch (st) {
      case DType::f32: return static_cast<const float*>(src)[i];
      case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(src)[i]);
      case DType::f16: return f16_to_f32(static_cast<const f16_t*>(src)[i]);
      default: throw InternalError("convert: unsupported source dtype");
    }
  };
  auto store = [&](int64_t i, float v) {
    switch (dt) {
      case DType::f32: static_cast<float*>(dst)[i] = v; break;
      case DType::bf16: static_cast<bf16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::f16: static_cast<f16_t*>(dst)[i] = f32_to_f16(v); break;
      default: throw InternalError("convert: unsupported target dtype");
    }
  };
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) store(i, load(i));
      },
      1 << 16);
}

}  // namespace kiln
