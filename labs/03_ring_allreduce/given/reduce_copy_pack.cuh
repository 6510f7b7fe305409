// Lab 03, task D, given: the building blocks of the reduce-copy — fp32
// accumulation for every element type, 16-byte packs and their loads and
// stores, and the one-element reduce-copy used for the head and the tail.
// reduce_copy_thread() in src/reduce_copy.cuh (the task) is written with them.
//
// All of it is __host__ __device__ (DTL_HOST_DEVICE): the kernels call it on the
// GPU, the CPU tests call it on host memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lab03/ring_cuda.h"

#ifndef DTL_HOST_DEVICE
#if defined(__CUDACC__)
#define DTL_HOST_DEVICE __host__ __device__
#else
#define DTL_HOST_DEVICE
#endif
#endif

namespace dtl::lab03::detail {

// ---------------------------------------------------------------------------
// fp32 accumulation: every element type converts to float and back
// ---------------------------------------------------------------------------

DTL_HOST_DEVICE inline float to_float(float x) { return x; }
DTL_HOST_DEVICE inline float to_float(__half x) { return __half2float(x); }
DTL_HOST_DEVICE inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
DTL_HOST_DEVICE inline T from_float(float x);
template <>
DTL_HOST_DEVICE inline float from_float<float>(float x) { return x; }
template <>
DTL_HOST_DEVICE inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
DTL_HOST_DEVICE inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// ---------------------------------------------------------------------------
// 16 bytes of elements, loaded and stored as one
// ---------------------------------------------------------------------------

// Pack<T> is 16 bytes: 4 floats or 8 halves. `p` must be 16-byte aligned.
template <typename T>
struct alignas(kVectorBytes) Pack {
  static constexpr std::size_t kElements = kVectorBytes / sizeof(T);
  T elem[kElements];
};

template <typename T>
DTL_HOST_DEVICE inline Pack<T> load_pack(const T* p) {
  Pack<T> pack;
#ifdef __CUDA_ARCH__
  // One 128-bit load (int4), then the bits reinterpreted: the compiler keeps
  // them in registers. (As llm.c's Packed128.)
  const int4 bits = *reinterpret_cast<const int4*>(p);
  memcpy(&pack, &bits, sizeof pack);
#else
  std::memcpy(static_cast<void*>(&pack), p, sizeof pack);  // void*: __half is trivially copyable
#endif
  return pack;
}

template <typename T>
DTL_HOST_DEVICE inline void store_pack(T* p, const Pack<T>& pack) {
#ifdef __CUDA_ARCH__
  int4 bits;
  memcpy(&bits, &pack, sizeof bits);
  *reinterpret_cast<int4*>(p) = bits;
#else
  std::memcpy(static_cast<void*>(p), &pack, sizeof pack);
#endif
}

DTL_HOST_DEVICE inline std::uintptr_t offset_in_vector(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kVectorBytes;
}

// Element i of the reduce-copy, alone (the head and the tail).
template <typename T>
DTL_HOST_DEVICE inline void reduce_copy_one(const ReduceCopyArgs<T>& args, std::size_t i) {
  const T value = args.b == nullptr ? args.a[i] : from_float<T>(to_float(args.a[i]) + to_float(args.b[i]));
  args.dst[i] = value;
  if (args.dst2 != nullptr) args.dst2[i] = value;
}

}  // namespace dtl::lab03::detail
