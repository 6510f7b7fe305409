// Task D, allgather: for every count and element type the result equals
// MPI_Allgather's, no vendor collective is called, and the tracer sees the
// schedule — the ring: exactly P - 1 messages per rank, one block each, (P-1)/P
// of the result; recursive doubling: log2 P messages carrying the same (P-1)/P.
// Recursive doubling needs a power-of-two rank count and must say so otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collective_test_util.h"
#include "harness/error.h"
#include "lab02/collectives.h"

namespace {

using namespace lab02_test;
using dtl::testing::buffers_equal;

constexpr int kTag = 8;

template <typename T>
using AllgatherFn = void (*)(MPI_Comm, std::span<const T>, std::span<T>, int);

bool power_of_two(int p) { return (p & (p - 1)) == 0; }

// Runs `allgather` for every count of the sweep against MPI_Allgather; a rank
// must send `messages` messages carrying (P-1) blocks in all.
template <typename T>
void check_allgather(const std::string& name, AllgatherFn<T> allgather, int messages) {
  const int rank = comm().rank();
  const int size = comm().size();
  for (std::size_t count : sweep_counts()) {
    if (!keep_going()) return;  // one failing case is enough (collective: all ranks stop)
    const std::string what = name + ", " + case_name(type_name<T>(), -1, count);
    const std::vector<T> send = values<T>(count, rank);
    std::vector<T> recv(size * count, T{-1});
    const auto counts = traced([&] { allgather(comm(), send, recv, kTag); });
    EXPECT_TRUE(no_vendor_collective(counts, what));
    EXPECT_TRUE(only_tag(counts, kTag, what));

    std::vector<T> expected(size * count, T{-1});
    const int n = static_cast<int>(count);
    DTL_MPI_CHECK(MPI_Allgather(send.data(), n, dtl::mpi_datatype<T>(), expected.data(), n, dtl::mpi_datatype<T>(),
                                comm()));
    EXPECT_TRUE(buffers_equal(expected, recv, "recv_buf (" + what + ")"));
    if (count == 0) continue;
    EXPECT_EQ(counts.messages_sent, messages) << "rank " << rank << ": " << name << " sends exactly " << messages
                                              << " message(s) at " << size << " rank(s) (" << what << ")";
    EXPECT_EQ(counts.bytes_sent, static_cast<std::int64_t>((size - 1) * count * sizeof(T)))
        << "rank " << rank << ": every rank sends P - 1 blocks in all, (P-1)/P of the result (" << what << ")";
  }
}

TEST(AllgatherRing, MatchesVendor) {
  for_each_type([](auto type) {
    using T = typename decltype(type)::type;
    check_allgather<T>("allgather_ring", &dtl::lab02::allgather_ring<T>, comm().size() - 1);
  });
}

// At 1, 2, 4 and 8 ranks: the sweep against MPI_Allgather. At other rank counts
// the call must refuse, on every rank, with an InvalidArgument naming `comm`.
TEST(AllgatherRecursiveDoubling, PowersOfTwoOnly) {
  if (power_of_two(comm().size())) {
    for_each_type([](auto type) {
      using T = typename decltype(type)::type;
      check_allgather<T>("allgather_recursive_doubling", &dtl::lab02::allgather_recursive_doubling<T>,
                         ceil_log2(comm().size()));
    });
    return;
  }
  const std::vector<float> send(3);
  std::vector<float> recv(3 * comm().size());
  EXPECT_THAT([&] { dtl::lab02::allgather_recursive_doubling<float>(comm(), send, recv, 0); },
              ::testing::ThrowsMessage<dtl::InvalidArgument>(
                  ::testing::AllOf(::testing::HasSubstr("'comm'"), ::testing::HasSubstr("power of two"),
                                   ::testing::HasSubstr("rank "))))
      << "at " << comm().size() << " ranks (not a power of two) recursive doubling must refuse";
}

TEST(Allgather, RejectsBadArguments) {
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  const int size = comm().size();
  const std::vector<float> send(3);
  std::vector<float> recv(3 * size), too_long(3 * size + 1);
  std::vector<AllgatherFn<float>> all = {&dtl::lab02::allgather_ring<float>};
  if (power_of_two(size)) all.push_back(&dtl::lab02::allgather_recursive_doubling<float>);
  for (const auto allgather : all) {
    EXPECT_THAT([&] { allgather(comm(), send, too_long, 0); },
                ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'recv_buf'")));
    EXPECT_THAT([&] { allgather(comm(), send, recv, -1); }, ThrowsMessage<dtl::InvalidArgument>(HasSubstr("'tag'")));
  }
}

}  // namespace
