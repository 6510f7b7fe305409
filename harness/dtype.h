/// @file
/// @brief DType: the one element-type vocabulary of the tree, shared by tensors
/// (harness/nn), communicators (harness/comm) and the labs, as PyTorch's tensors
/// and c10d share one ScalarType. Nothing converts between element types.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace dtl {

/// @brief The element type of a buffer or a tensor.
///
/// Every DType can be stored and moved; which ones a piece of code can *add*
/// is its own contract (the MPI backend moves kF16 and kBF16 but does not
/// reduce them, and says so naming the type).
enum class DType {
  kF32,   ///< float: the compute type of training
  kF64,   ///< double: gradient checks
  kI32,   ///< std::int32_t: token ids, class labels
  kF16,   ///< IEEE half precision (16 bits; dtl::nn::f16 on the host)
  kBF16,  ///< bfloat16 (16 bits; dtl::nn::bf16 on the host)
};

/// @brief The size of one element.
/// @param[in] dtype the element type.
/// @return 4 for kF32 and kI32, 8 for kF64, 2 for kF16 and kBF16 (0 for a value outside the enum).
constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

/// @brief The element type's short name, for messages and traces.
/// @param[in] dtype the element type.
/// @return "f32", "f64", "i32", "f16" or "bf16" ("?" for a value outside the enum).
constexpr const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

/// @brief The element types that every CPU collective of the tree adds up
/// (MPI has arithmetic for them): the typed Communicator calls and the collectives
/// of labs 02 and 03 are instantiated for these.
/// @tparam T a candidate element type.
template <typename T>
concept Element = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t>;

/// @brief The DType of a C++ element type: float, double, std::int32_t here, and
/// dtl::nn::f16 / dtl::nn::bf16 where harness/nn/half.h declares them.
/// @tparam T the element type.
/// @return its DType.
template <typename T>
constexpr DType dtype_of() noexcept = delete;
/// @cond
template <> constexpr DType dtype_of<float>() noexcept { return DType::kF32; }
template <> constexpr DType dtype_of<double>() noexcept { return DType::kF64; }
template <> constexpr DType dtype_of<std::int32_t>() noexcept { return DType::kI32; }
/// @endcond

}  // namespace dtl
