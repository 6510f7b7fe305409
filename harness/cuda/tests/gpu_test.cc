// GPU smoke tests: device buffers, a kernel checked against the host, errors as
// dtl::CudaError. Every rank skips together when there is no GPU.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "harness/cuda/check.h"
#include "harness/cuda/copy.h"
#include "harness/cuda/device.h"
#include "harness/testing/mpi_test.h"

namespace dtl::cuda::test {
void saxpy(int n, float a, const float* x, float* y);
}

namespace {

#define SKIP_WITHOUT_GPU()                                      \
  std::string why;                                              \
  const bool has_gpu = dtl::cuda::gpu_count(&why) > 0;          \
  DTL_SKIP_IF_ANY(!has_gpu, "no GPU on some rank: " + why)

TEST(Gpu, SaxpyMatchesHost) {
  SKIP_WITHOUT_GPU();
  const int n = 1000003;  // not a multiple of the block size
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97);
    y[i] = static_cast<float>(i % 13);
    expected[i] = 2.0f * x[i] + y[i];  // exact: small integers
  }
  dtl::cuda::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  // saxpy runs on the legacy default stream (null): the copies go there too.
  dtl::cuda::upload(static_cast<float*>(dx.data()), std::span<const float>(x), nullptr);
  dtl::cuda::upload(static_cast<float*>(dy.data()), std::span<const float>(y), nullptr);
  dtl::cuda::test::saxpy(n, 2.0f, static_cast<const float*>(dx.data()), static_cast<float*>(dy.data()));
  y = dtl::cuda::download(static_cast<const float*>(dy.data()), n, nullptr);
  EXPECT_TRUE(dtl::testing::buffers_equal(expected, y, "y"));
}

TEST(Gpu, ErrorsBecomeCudaError) {
  SKIP_WITHOUT_GPU();
  void* p = nullptr;
  try {
    DTL_CUDA_CHECK(cudaMalloc(&p, ~std::size_t{0}));
    ADD_FAILURE() << "allocating 2^64 bytes should fail";
  } catch (const dtl::CudaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cudaMalloc"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cudaErrorMemoryAllocation"));
  }
}

TEST(Gpu, CountIsZeroWithAReasonOrPositive) {
  std::string why;
  const int n = dtl::cuda::gpu_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
  }
}

}  // namespace
