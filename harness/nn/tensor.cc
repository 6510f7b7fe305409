// Tensor and Storage: allocation, accounting, views and copies.
#include "harness/nn/tensor.h"

#include <cstring>
#include <new>

#include "harness/error.h"
#include "harness/nn/compute_stream.h"
#include "harness/nn/kernels/kernels.h"

#ifdef DTL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#endif

namespace dtl::nn {

std::int64_t shape_numel(const Shape& shape) noexcept {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

std::string to_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

// ---------------------------------------------------------------------------
// The compute stream (Note [The compute stream] in compute_stream.h)
// ---------------------------------------------------------------------------

namespace {
thread_local CUstream_st* t_compute_stream = nullptr;
}  // namespace

CUstream_st* compute_stream() noexcept { return t_compute_stream; }
void set_compute_stream(CUstream_st* stream) noexcept { t_compute_stream = stream; }

// ---------------------------------------------------------------------------
// Storage
// ---------------------------------------------------------------------------

namespace {

// Whether Device::kPinnedHost memory comes from cudaMallocHost: only in a CUDA
// build on a machine with a GPU (asked once). Elsewhere it is ordinary memory.
bool pinned_by_cuda() {
#ifdef DTL_HAVE_CUDA
  static const bool gpu = [] {
    int count = 0;
    const bool found = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    cudaGetLastError();  // "no device" is an answer here, not an error to keep
    return found;
  }();
  return gpu;
#else
  return false;
#endif
}

}  // namespace

// Note [Stream-ordered device memory]
// Device memory comes from cudaMallocAsync and goes back with cudaFreeAsync, both
// on the calling thread's compute stream (harness/nn/compute_stream.h), and is
// zeroed there (cudaMemsetAsync): ordered with the kernels of that stream and
// synchronizing nothing else. cudaFree would wait for the whole device, every
// stream of this process, and that is a deadlock once an NCCL receive is posted
// ahead on a stream of its own (lab 07's NcclPeerLink): a stage freeing a
// finished send's copy would wait for a receive whose sender waits for this
// stage's next message. The other streams are ordered by events: NCCL's operations
// start after a `ready` event recorded on the compute stream after the allocation,
// and a buffer is freed only after the compute stream waited for their `done`.

Storage::Storage(std::int64_t bytes, MemoryCategory category, Device device)
    : bytes_(bytes), category_(category), device_(device) {
  DTL_REQUIRE_ARG(bytes >= 0, "Storage", "bytes", "is negative (" + std::to_string(bytes) + ")");
#ifndef DTL_HAVE_CUDA
  DTL_REQUIRE_ARG(device != Device::kCuda, "Storage", "device",
                  "is cuda, but this build has no CUDA (nvcc was not found)");
#endif
  allocate();
}

Storage::~Storage() { release(); }

void Storage::allocate() {
  if (allocated_) return;
  if (bytes_ > 0) {
    const auto n = static_cast<std::size_t>(bytes_);
    if (device_ == Device::kCuda) {
#ifdef DTL_HAVE_CUDA
      // See Note [Stream-ordered device memory].
      DTL_CUDA_CHECK(cudaMallocAsync(&data_, n, compute_stream()));
      DTL_CUDA_CHECK(cudaMemsetAsync(data_, 0, n, compute_stream()));
#endif
    } else if (device_ == Device::kPinnedHost && pinned_by_cuda()) {
#ifdef DTL_HAVE_CUDA
      DTL_CUDA_CHECK(cudaMallocHost(&data_, n));
      std::memset(data_, 0, n);
#endif
    } else {
      // 64-byte alignment: a cache line, and enough for any SIMD load. The
      // tracker counts the bytes asked for, not what the allocator rounds to.
      data_ = ::operator new(n, std::align_val_t{64});
      std::memset(data_, 0, n);
    }
    memory_tracker(device_).allocated(category_, bytes_);
  }
  allocated_ = true;
}

void Storage::release() noexcept {
  if (!allocated_) return;
  if (data_ != nullptr) {
    if (device_ == Device::kCuda) {
#ifdef DTL_HAVE_CUDA
      cudaFreeAsync(data_, compute_stream());  // Note [Stream-ordered device memory]; errors ignored (a destructor)
#endif
    } else if (device_ == Device::kPinnedHost && pinned_by_cuda()) {
#ifdef DTL_HAVE_CUDA
      cudaFreeHost(data_);
#endif
    } else {
      ::operator delete(data_, std::align_val_t{64});
    }
    memory_tracker(device_).freed(category_, bytes_);
    data_ = nullptr;
  }
  allocated_ = false;
}

// ---------------------------------------------------------------------------
// Tensor
// ---------------------------------------------------------------------------

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryCategory category, Device device) {
  for (const std::int64_t s : shape) {
    DTL_REQUIRE_ARG(s >= 0, "Tensor::zeros", "shape", "has a negative size: " + to_string(shape));
  }
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.numel_ * static_cast<std::int64_t>(dtype_size(dtype)),
                                         category, device);
  return t;
}

Tensor Tensor::from_values(const Shape& shape, std::span<const double> values, DType dtype,
                           MemoryCategory category) {
  DTL_REQUIRE_ARG(shape_numel(shape) == static_cast<std::int64_t>(values.size()),
                  "Tensor::from_values", "values",
                  "has " + std::to_string(values.size()) + " elements; shape " + to_string(shape) +
                      " needs " + std::to_string(shape_numel(shape)));
  DTL_REQUIRE_ARG(dtype == DType::kF32 || dtype == DType::kF64, "Tensor::from_values", "dtype",
                  std::string("must be f32 or f64, not ") + dtype_name(dtype));
  Tensor t = zeros(shape, dtype, category);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(values[i]);
    } else {
      t.data<double>()[i] = values[i];
    }
  }
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  DTL_REQUIRE_ARG(i >= -n && i < n, "Tensor::dim", "i",
                  "is " + std::to_string(i) + " for a tensor of shape " + to_string(shape_));
  return shape_[static_cast<std::size_t>(i < 0 ? i + n : i)];
}

Device Tensor::device() const noexcept { return storage_ ? storage_->device() : Device::kCpu; }

MemoryCategory Tensor::category() const noexcept {
  return storage_ ? storage_->category() : MemoryCategory::kOther;
}

void* Tensor::raw() const noexcept {
  if (!storage_ || storage_->data() == nullptr) return nullptr;
  return static_cast<std::byte*>(storage_->data()) +
         offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void Tensor::check_access(DType wanted) const {
  DTL_REQUIRE_ARG(defined(), "Tensor::data", "this", "is an undefined tensor");
  DTL_REQUIRE_ARG(wanted == dtype_, "Tensor::data", "T",
                  std::string("is ") + dtype_name(wanted) + " but the tensor holds " + dtype_name(dtype_));
  DTL_REQUIRE_ARG(storage_->is_allocated(), "Tensor::data", "this",
                  "views a storage that was released (call Storage::allocate() first)");
}

void Tensor::check_host() const {
  DTL_REQUIRE_ARG(is_host(device()), "Tensor::span", "this",
                  "lives on the GPU; copy it to the host with to(Device::kCpu)");
}

Tensor Tensor::reshape(const Shape& shape) const {
  DTL_REQUIRE_ARG(shape_numel(shape) == numel_, "Tensor::reshape", "shape",
                  to_string(shape) + " has a different element count than " + to_string(shape_));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  const std::int64_t n = shape_numel(shape);
  DTL_REQUIRE_ARG(offset >= 0 && n >= 0 && offset + n <= numel_, "Tensor::view", "offset",
                  std::to_string(offset) + " + " + std::to_string(n) + " elements do not fit in " +
                      std::to_string(numel_));
  Tensor t = *this;
  t.shape_ = shape;
  t.numel_ = n;
  t.offset_ = offset_ + offset;
  return t;
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor t = zeros(shape_, dtype_, category, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  DTL_REQUIRE_ARG(src.dtype_ == dtype_ && src.numel_ == numel_, "Tensor::copy_from", "src",
                  std::string("is ") + dtype_name(src.dtype_) + " " + to_string(src.shape_) +
                      ", this is " + dtype_name(dtype_) + " " + to_string(shape_));
  if (numel_ == 0) return;
  DTL_REQUIRE_ARG(raw() != nullptr, "Tensor::copy_from", "this", "has no memory (released?)");
  DTL_REQUIRE_ARG(src.raw() != nullptr, "Tensor::copy_from", "src", "has no memory (released?)");
  const auto n = static_cast<std::size_t>(bytes());
  if (is_host(device()) && is_host(src.device())) {
    std::memmove(raw(), src.raw(), n);
    return;
  }
#ifdef DTL_HAVE_CUDA
  if (device() == Device::kCuda && src.device() == Device::kCuda) {
    // Device to device: queued on the compute stream like a kernel, no wait
    // (Note [The compute stream] in compute_stream.h).
    DTL_CUDA_CHECK(cudaMemcpyAsync(raw(), src.raw(), n, cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  // Host and device: on the compute stream, which produced or will consume the
  // device side, and waited for, so that the host side may be reused at once.
  // See Note [Copies beside non-blocking streams] in harness/cuda/copy.h.
  dtl::cuda::copy(raw(), src.raw(), n, compute_stream());
#endif
}

Tensor Tensor::to(Device device) const {
  Tensor t = zeros(shape_, dtype_, category(), device);
  t.copy_from(*this);
  return t;
}

void Tensor::zero() const {
  if (numel_ == 0) return;
  DTL_REQUIRE_ARG(raw() != nullptr, "Tensor::zero", "this", "has no memory (released?)");
  if (is_host(device())) {
    std::memset(raw(), 0, static_cast<std::size_t>(bytes()));
    return;
  }
#ifdef DTL_HAVE_CUDA
  // Queued on the compute stream, no wait: the ops that read it run there too.
  DTL_CUDA_CHECK(cudaMemsetAsync(raw(), 0, static_cast<std::size_t>(bytes()), compute_stream()));
#endif
}

namespace {

// Element i of a float-typed tensor as a double (exact for all four types).
double load(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF64: return static_cast<const double*>(base)[i];
    case DType::kF16: return f16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kI32: break;
  }
  return 0.0;
}

// Stores v (already a float for the 16-bit types: see convert()) as element i.
void store(void* base, DType dtype, std::int64_t i, double v) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(base)[i] = v; break;
    case DType::kF16: static_cast<std::uint16_t*>(base)[i] = float_to_f16_bits(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    case DType::kI32: break;
  }
}

}  // namespace

namespace {

// The GPU kernels' name for a 16-bit-or-f32 dtype (kernels.h), or -1.
int gpu_kind(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kBF16: return 2;
    default: return -1;
  }
}

}  // namespace

void convert(const Tensor& dst, const Tensor& src) {
  DTL_REQUIRE_ARG(dst.numel() == src.numel(), "convert", "dst",
                  "has " + std::to_string(dst.numel()) + " elements, src " + std::to_string(src.numel()));
  DTL_REQUIRE_ARG(is_host(dst.device()) == is_host(src.device()), "convert", "dst",
                  std::string("is on ") + to_string(dst.device()) + " but src is on " + to_string(src.device()) +
                      "; convert runs where both are");
  DTL_REQUIRE_ARG(dst.dtype() != DType::kI32, "convert", "dst", "is i32; convert handles float types only");
  DTL_REQUIRE_ARG(src.dtype() != DType::kI32, "convert", "src", "is i32; convert handles float types only");
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  DTL_REQUIRE_ARG(dst.raw() != nullptr, "convert", "dst", "has no memory (released?)");
  DTL_REQUIRE_ARG(src.raw() != nullptr, "convert", "src", "has no memory (released?)");
  if (dst.device() == Device::kCuda) {  // convert's one dispatch point: kernels/convert.cu
#ifdef DTL_HAVE_CUDA
    const bool done = detail::convert_on_gpu(detail::OnCuda{compute_stream()}, dst.raw(), gpu_kind(dst.dtype()),
                                             src.raw(), gpu_kind(src.dtype()), dst.numel());
    DTL_REQUIRE_ARG(done, "convert", "dst",
                    std::string("is ") + dtype_name(dst.dtype()) + " and src " + dtype_name(src.dtype()) +
                        "; on the GPU convert handles f32, f16 and bf16");
#endif
    return;
  }
  // f64 -> f16/bf16 goes through float first. That double rounding can differ
  // from a direct rounding in rare ties; lab 05 converts from f32, where it is exact.
  for (std::int64_t i = 0; i < src.numel(); ++i) store(dst.raw(), dst.dtype(), i, load(src.raw(), src.dtype(), i));
}

}  // namespace dtl::nn
