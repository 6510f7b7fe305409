/// @file
/// @brief Tensor: a shape, a dtype and a device over a shared, accounted Storage.
///
/// What this file teaches: a tensor is a small handle — shape, element type,
/// and an offset into a block of memory (Storage). Copying a Tensor copies the
/// handle, not the numbers (like PyTorch); clone() copies the numbers. Several
/// tensors can view one storage at different offsets: that is how a model's
/// parameters become views into one flat buffer (labs 04–06: buckets, flat
/// parameters, shards) with no copy.
///
/// Every Storage is charged to a MemoryCategory on its device's
/// MemoryTracker when it allocates and uncharged when it frees, so the counts
/// are exact. A storage can also release() its memory and allocate() it again
/// while every view stays bound to it: that is lab 06's "all-gather before
/// use, free after" without rebuilding the views.
///
/// What it leaves out: strides (every tensor is contiguous, row-major),
/// broadcasting, autograd. The layers in layers.h compute on raw pointers,
/// with the shapes written at each function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "harness/nn/half.h"
#include "harness/nn/memory.h"

namespace dtl {
/// @cond
// The host types of the 16-bit DTypes (harness/dtype.h declares dtype_of()).
template <> constexpr DType dtype_of<nn::f16>() noexcept { return DType::kF16; }
template <> constexpr DType dtype_of<nn::bf16>() noexcept { return DType::kBF16; }
/// @endcond
}  // namespace dtl

namespace dtl::nn {

// A tensor's element type is dtl::DType (harness/dtype.h), the same vocabulary
// the communicators take: a tensor's dtype() goes straight to a collective.
using ::dtl::DType;

/// @brief A tensor's shape: sizes of its dimensions, outermost first (row-major).
using Shape = std::vector<std::int64_t>;

/// @brief The number of elements of a shape (1 for the empty shape, a scalar).
/// @param[in] shape the shape.
/// @return the product of the sizes.
std::int64_t shape_numel(const Shape& shape) noexcept;

/// @brief A shape as text, e.g. "(4, 64, 128)".
/// @param[in] shape the shape.
/// @return the text.
std::string to_string(const Shape& shape);

/// @brief One block of memory on one device, charged to one MemoryCategory.
///
/// Exactly `bytes` bytes are charged while the memory is allocated. New memory
/// is zero-filled, so that nothing depends on what was there before (same run,
/// same bits). Not copyable; shared between tensors through std::shared_ptr.
class Storage {
 public:
  /// @brief Allocates `bytes` zeroed bytes on `device` and charges them to `category`.
  /// @param[in] bytes the size (0 allocates nothing).
  /// @param[in] category what the memory is for.
  /// @param[in] device where it lives.
  /// @throws dtl::InvalidArgument if bytes < 0, or Device::kCuda in a build without CUDA.
  /// @throws std::bad_alloc or dtl::CudaError if the allocation fails.
  Storage(std::int64_t bytes, MemoryCategory category, Device device);
  /// @brief Frees the memory (if allocated) and uncharges it.
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// @brief The memory, or null while released (or when bytes() is 0).
  /// @return the base pointer (a device pointer for Device::kCuda).
  void* data() const noexcept { return data_; }
  /// @brief The size, whether or not it is allocated now.
  /// @return the bytes.
  std::int64_t bytes() const noexcept { return bytes_; }
  /// @brief What the memory is charged to.
  /// @return the category.
  MemoryCategory category() const noexcept { return category_; }
  /// @brief Where the memory lives.
  /// @return the device.
  Device device() const noexcept { return device_; }
  /// @brief Whether the memory is there (false after release()).
  /// @return true while allocated or when bytes() is 0.
  bool is_allocated() const noexcept { return allocated_; }
  /// @brief Frees the memory and uncharges it; views stay bound but must not be read.
  void release() noexcept;
  /// @brief Allocates the memory again (zeroed) after release(); does nothing if allocated.
  /// @throws std::bad_alloc or dtl::CudaError if the allocation fails.
  void allocate();

 private:
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
  MemoryCategory category_;
  Device device_;
  bool allocated_ = false;
};

/// @brief A contiguous, row-major view of `numel()` elements of one dtype in a Storage.
class Tensor {
 public:
  /// @brief An undefined tensor (no storage); defined() is false.
  Tensor() = default;

  /// @brief A new tensor of zeros with its own storage.
  /// @param[in] shape the sizes (each >= 0).
  /// @param[in] dtype the element type.
  /// @param[in] category what its memory is charged to.
  /// @param[in] device where it lives (default CPU).
  /// @return the tensor.
  /// @throws dtl::InvalidArgument on a negative size.
  static Tensor zeros(const Shape& shape, DType dtype, MemoryCategory category,
                      Device device = Device::kCpu);

  /// @brief A new f32 or f64 CPU tensor holding `values`.
  /// @param[in] shape the sizes; their product must equal values.size().
  /// @param[in] values the elements, row-major (converted to `dtype`).
  /// @param[in] dtype DType::kF32 or DType::kF64.
  /// @param[in] category what its memory is charged to.
  /// @return the tensor.
  /// @throws dtl::InvalidArgument if the sizes disagree or dtype is not a float type.
  static Tensor from_values(const Shape& shape, std::span<const double> values, DType dtype,
                            MemoryCategory category = MemoryCategory::kOther);

  /// @brief Whether this tensor has storage.
  /// @return false for a default-constructed tensor.
  bool defined() const noexcept { return storage_ != nullptr; }
  /// @brief The sizes.
  /// @return the shape.
  const Shape& shape() const noexcept { return shape_; }
  /// @brief The number of dimensions.
  /// @return shape().size().
  int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  /// @brief One size; negative indices count from the end (-1 is the last).
  /// @param[in] i the dimension, in [-ndim(), ndim()).
  /// @return its size.
  /// @throws dtl::InvalidArgument if `i` is out of range.
  std::int64_t dim(int i) const;
  /// @brief The number of elements.
  /// @return the product of the sizes.
  std::int64_t numel() const noexcept { return numel_; }
  /// @brief The number of bytes of the elements this tensor views.
  /// @return numel() * dtype_size(dtype()).
  std::int64_t bytes() const noexcept { return numel_ * static_cast<std::int64_t>(dtype_size(dtype_)); }
  /// @brief The element type.
  /// @return the dtype.
  DType dtype() const noexcept { return dtype_; }
  /// @brief Where the elements live.
  /// @return the storage's device (CPU for an undefined tensor).
  Device device() const noexcept;
  /// @brief What the storage is charged to.
  /// @return the storage's category (kOther for an undefined tensor).
  MemoryCategory category() const noexcept;
  /// @brief The offset of the first element in the storage, in elements.
  /// @return the offset.
  std::int64_t offset() const noexcept { return offset_; }
  /// @brief The shared storage (null when undefined).
  /// @return the storage pointer.
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }

  /// @brief Typed pointer to the first element.
  /// @tparam T must match dtype() (float for kF32, ...).
  /// @return the pointer (a device pointer on CUDA).
  /// @throws dtl::InvalidArgument if T does not match, the tensor is undefined, or its storage is released.
  template <typename T>
  T* data() const {
    check_access(dtype_of<T>());
    return static_cast<T*>(raw()) ;
  }
  /// @brief The elements as a span (host memory only).
  /// @tparam T must match dtype().
  /// @return the span of numel() elements.
  /// @throws dtl::InvalidArgument as data(), or if the tensor is on a GPU.
  template <typename T>
  std::span<T> span() const {
    check_host();
    return {data<T>(), static_cast<std::size_t>(numel_)};
  }
  /// @brief Untyped pointer to the first element (null if undefined, released or empty).
  /// @return the pointer.
  void* raw() const noexcept;

  /// @brief Another handle on the same elements with another shape of the same numel.
  /// @param[in] shape the new sizes.
  /// @return the view.
  /// @throws dtl::InvalidArgument if the element counts differ.
  Tensor reshape(const Shape& shape) const;
  /// @brief A view of `shape_numel(shape)` elements starting `offset` elements into this tensor.
  /// @param[in] offset first element of the view, relative to this tensor.
  /// @param[in] shape the view's sizes.
  /// @return the view (same storage, same dtype).
  /// @throws dtl::InvalidArgument if the view does not fit inside this tensor.
  Tensor view(std::int64_t offset, const Shape& shape) const;
  /// @brief A deep copy in new storage.
  /// @param[in] category what the copy's memory is charged to.
  /// @return the copy (same shape, dtype and device).
  Tensor clone(MemoryCategory category) const;
  /// @brief Copies the elements of `src` into this tensor (host or device, either way).
  ///
  /// On the GPU it runs on the compute stream (compute_stream.h): a
  /// device-to-device copy is queued and returns; a copy to or from the host
  /// waits for that stream, so the host side is ready (or free) on return.
  /// @param[in] src same dtype and numel (shapes may differ).
  /// @throws dtl::InvalidArgument if dtype or numel differ.
  void copy_from(const Tensor& src) const;
  /// @brief A copy on another device, charged to the same category.
  /// @param[in] device the destination.
  /// @return the copy.
  Tensor to(Device device) const;
  /// @brief Sets every element to zero (on the GPU: queued on the compute stream, no wait).
  void zero() const;

 private:
  void check_access(DType wanted) const;
  void check_host() const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::kF32;
};

/// @brief Converts elements between float types: dst[i] = src[i] rounded to dst's type.
///
/// Any pair of f32, f64, f16 and bf16 on the CPU (lab 05: f32 master weights to
/// f16/bf16 compute copies and back); any pair of f32, f16 and bf16 on the GPU
/// (kernels/convert.cu, queued on the compute stream). Narrowing rounds to
/// nearest, ties to even; f16 overflows to infinity. Same dtype is a plain copy.
/// @param[out] dst the destination, numel() equal to src's, on src's device.
/// @param[in] src the source.
/// @throws dtl::InvalidArgument if the counts differ, the devices differ, a dtype is i32,
///         or f64 is asked for on the GPU.
void convert(const Tensor& dst, const Tensor& src);

}  // namespace dtl::nn
