// DTL_NCCL_CHECK on calls that need no GPU: ncclGetVersion succeeds, and an
// invalid argument becomes a dtl::NcclError that names the call and NCCL's text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/comm/nccl_check.h"
#include "harness/testing/mpi_test.h"

namespace {

TEST(NcclCheck, SuccessPassesThrough) {
  int version = 0;
  DTL_NCCL_CHECK(ncclGetVersion(&version));
  EXPECT_GE(version, 22800) << "NCCL 2.28 or newer expected, got " << version;
}

TEST(NcclCheck, ErrorBecomesNcclError) {
  try {
    DTL_NCCL_CHECK(ncclCommCount(nullptr, nullptr));
    ADD_FAILURE() << "ncclCommCount(nullptr, nullptr) should fail";
  } catch (const dtl::NcclError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("ncclCommCount"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nccl_check_test.cc"));
    EXPECT_EQ(e.code(), static_cast<int>(ncclInvalidArgument));
  }
}

}  // namespace
