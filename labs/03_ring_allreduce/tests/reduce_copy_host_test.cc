// Lab 03, part 2 on the CPU: the reduce-copy kernel's per-thread work, ring_job()
// and the virtual ring, all run on the host — the same code the GPU runs, with
// every kernel thread stepped through one after another. Oracles: a plain scalar
// loop (the reduce-copy), a closed form (ring_job), the host sum (the ring).
//
// These need the CUDA headers (for __half and __nv_bfloat16), not a GPU: they run
// wherever CUDA is built, CI included. Without CUDA they skip, saying why.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "harness/error.h"
#include "harness/testing/mpi_test.h"

#if DTL_LAB_HAS_CUDA
#include "gpu_test_util.h"
#include "lab03/ring.h"
#include "lab03/ring_cuda.h"

namespace {

using namespace lab03_test;
namespace lab = dtl::lab03;

// Offsets of dst, a, b and dst2 (elements) inside buffers with room around them.
struct Shape {
  std::size_t count;
  std::size_t dst_off, a_off, b_off, dst2_off;
  bool copy;   // b == nullptr
  bool fused;  // dst2 != nullptr
};

constexpr std::size_t kGuard = 16;  // elements before and after that must stay untouched

// Runs the reduce-copy of `shape` as `num_threads` kernel threads on the host and
// compares it with the scalar loop, including the guard elements around dst and dst2.
template <typename T>
::testing::AssertionResult check_shape(const Shape& s, std::size_t num_threads) {
  const std::size_t n = s.count + 2 * kGuard;
  std::vector<T> a(n), b(n), dst(n), dst2(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Arbitrary finite values: the kernel and the loop do the very same fp32 add
    // and rounding, so the results must be equal bit for bit for any inputs.
    a[i] = from_float<T>(static_cast<float>((i * 37) % 101) * 0.37f - 11.0f);
    b[i] = from_float<T>(static_cast<float>((i * 53) % 97) * 0.71f - 29.0f);
    dst[i] = from_float<T>(-1000.0f);
    dst2[i] = from_float<T>(-2000.0f);
  }
  std::vector<T> want = dst, want2 = dst2;
  for (std::size_t i = 0; i < s.count; ++i) {
    const T x = a[s.a_off + i];
    const T v = s.copy ? x : from_float<T>(to_float(x) + to_float(b[s.b_off + i]));
    want[s.dst_off + i] = v;
    if (s.fused) want2[s.dst2_off + i] = v;
  }
  lab::ReduceCopyArgs<T> args;
  args.dst = dst.data() + s.dst_off;
  args.dst2 = s.fused ? dst2.data() + s.dst2_off : nullptr;
  args.a = a.data() + s.a_off;
  args.b = s.copy ? nullptr : b.data() + s.b_off;
  args.count = s.count;
  for (std::size_t t = 0; t < num_threads; ++t) lab::reduce_copy_host_thread(args, t, num_threads);
  const std::string what = "count " + std::to_string(s.count) + ", offsets dst " + std::to_string(s.dst_off) +
                           " a " + std::to_string(s.a_off) + " b " + std::to_string(s.b_off) + " dst2 " +
                           std::to_string(s.dst2_off) + (s.copy ? ", copy" : "") + (s.fused ? ", fused" : "") +
                           ", " + std::to_string(num_threads) + " threads";
  auto r = same_bits(want, dst, "dst (" + what + ")");
  if (!r) return r;
  return same_bits(want2, dst2, "dst2 (" + what + ")");
}

template <typename T>
class ReduceCopyHost : public ::testing::Test {};
TYPED_TEST_SUITE(ReduceCopyHost, GpuTypes, TypeNames);

// Every misalignment of dst, a and b (0..7 elements, independently) for the small
// counts: vectors where the three agree modulo 16 bytes, the scalar path where not.
TYPED_TEST(ReduceCopyHost, MatchesScalarLoopAtEveryOffset) {
  using T = TypeParam;
  for (std::size_t count : {0, 1, 3, 7, 8, 9, 1000}) {
    for (std::size_t d = 0; d < 8; ++d) {
      for (std::size_t a = 0; a < 8; ++a) {
        for (std::size_t b = 0; b < 8; ++b) {
          for (std::size_t threads : {1, 3, 32}) {
            ASSERT_TRUE(check_shape<T>({count, kGuard + d, kGuard + a, kGuard + b, 0, false, false}, threads));
          }
        }
      }
    }
  }
}

// The copy form (b null) and the fused form (dst2), aligned and misaligned.
TYPED_TEST(ReduceCopyHost, CopyAndFusedForms) {
  using T = TypeParam;
  for (std::size_t count : {0, 1, 3, 7, 8, 9, 1000}) {
    for (std::size_t d = 0; d < 8; ++d) {
      for (std::size_t a : {std::size_t{0}, d}) {
        for (std::size_t d2 : {std::size_t{0}, d, std::size_t{3}}) {
          for (std::size_t threads : {1, 5}) {
            ASSERT_TRUE(check_shape<T>({count, kGuard + d, kGuard + a, kGuard + d, kGuard + d2, true, false}, threads));
            ASSERT_TRUE(check_shape<T>({count, kGuard + d, kGuard + a, kGuard + a, kGuard + d2, false, true}, threads));
            ASSERT_TRUE(check_shape<T>({count, kGuard + d, kGuard + d, kGuard + d, kGuard + d2, true, true}, threads));
          }
        }
      }
    }
  }
}

// A large count (not a multiple of any vector width) with launch-sized thread
// counts, where each thread walks many vectors.
TYPED_TEST(ReduceCopyHost, LargeCountWithManyThreads) {
  using T = TypeParam;
  const std::size_t count = 1000003;
  for (std::size_t threads : {1, 256, 4096, 1000003, 2000000}) {
    EXPECT_TRUE(check_shape<T>({count, kGuard, kGuard, kGuard, kGuard, false, false}, threads));
  }
  EXPECT_TRUE(check_shape<T>({count, kGuard + 1, kGuard + 1, kGuard + 1, kGuard + 1, false, true}, 4096));
  EXPECT_TRUE(check_shape<T>({count, kGuard + 3, kGuard + 2, kGuard + 1, 0, false, false}, 4096));
  EXPECT_TRUE(check_shape<T>({count, kGuard + 5, kGuard + 5, kGuard, kGuard + 5, true, true}, 777));
}

// ring_job(): the chunk ring_step() names, in the part-1 layout, and the fused flags.
// Oracle: the closed form of the pull ring (receive chunk r-s-2 while reducing,
// r-t-1 at allgather step t), written out here independently of ring_step().
TEST(RingJob, ReceivesTheRingStepChunk) {
  for (int p = 2; p <= 9; ++p) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(p - 1),
                              static_cast<std::size_t>(7 * p + 3), std::size_t{100003}}) {
      for (bool fuse : {false, true}) {
        for (int r = 0; r < p; ++r) {
          for (int s = 0; s < 2 * (p - 1); ++s) {
            const bool reduce = s < p - 1;
            const int chunk = reduce ? ((r - s - 2) % p + 2 * p) % p : ((r - (s - p + 1) - 1) % p + 2 * p) % p;
            const lab::RingJob job = lab::ring_job(r, p, s, count, fuse);
            const std::string where = "P " + std::to_string(p) + ", rank " + std::to_string(r) + ", step " +
                                      std::to_string(s) + ", count " + std::to_string(count) +
                                      (fuse ? ", fused" : "");
            ASSERT_EQ(job.begin, lab::chunk_begin(count, p, chunk)) << where;
            ASSERT_EQ(job.count, lab::chunk_count(count, p, chunk)) << where;
            ASSERT_EQ(job.reduce, reduce) << where;
            ASSERT_EQ(job.to_right, fuse && s == p - 2) << where;
            ASSERT_EQ(job.skip, fuse && s == p - 1) << where;
          }
        }
      }
    }
  }
}

// The in-place hazard, checked: within one step, no (buffer, element) that one
// rank writes is read or written by another rank.
TEST(RingJob, OneStepsJobsTouchDisjointElements) {
  for (int p = 2; p <= 9; ++p) {
    const std::size_t count = static_cast<std::size_t>(3 * p + 2);
    for (bool fuse : {false, true}) {
      for (int s = 0; s < 2 * (p - 1); ++s) {
        // owner[buffer][element] = the rank touching it at this step (-1: none)
        std::vector<std::vector<int>> owner(static_cast<std::size_t>(p), std::vector<int>(count, -1));
        for (int r = 0; r < p; ++r) {
          const lab::RingJob job = lab::ring_job(r, p, s, count, fuse);
          if (job.skip) continue;
          std::vector<int> buffers = {r, (r + p - 1) % p};  // writes mine, reads mine and left
          if (job.to_right) buffers.push_back((r + 1) % p);
          for (int buf : buffers) {
            for (std::size_t i = job.begin; i < job.begin + job.count; ++i) {
              int& o = owner[static_cast<std::size_t>(buf)][i];
              ASSERT_TRUE(o == -1 || o == r) << "P " << p << ", step " << s << (fuse ? " (fused)" : "")
                                             << ": ranks " << o << " and " << r << " both touch element " << i
                                             << " of buffer " << buf;
              o = r;
            }
          }
        }
      }
    }
  }
}

TEST(RingJob, RejectsWhatRingStepRejects) {
  EXPECT_THROW(lab::ring_job(0, 1, 0, 10, false), dtl::InvalidArgument);
  EXPECT_THROW(lab::ring_job(3, 3, 0, 10, false), dtl::InvalidArgument);
  EXPECT_THROW(lab::ring_job(0, 3, 4, 10, true), dtl::InvalidArgument);
}


template <typename T>
class VirtualRingHost : public ::testing::Test {};
TYPED_TEST_SUITE(VirtualRingHost, GpuTypes, TypeNames);

// P = 1..8 virtual ranks, counts 0, 1, P-1 (empty chunks), 7P+3 (uneven chunks)
// and 100003, unfused and fused, 1 and 7 simulated threads: every buffer ends
// with the host sum, bit for bit.
TYPED_TEST(VirtualRingHost, MatchesHostSum) {
  using T = TypeParam;
  for (int p = 1; p <= 8; ++p) {
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, up - 1, 7 * up + 3, std::size_t{100003}}) {
      for (bool fuse : {false, true}) {
        for (std::size_t threads : {1, 7}) {
          if (count > 1000 && threads != 7) continue;
          std::vector<std::vector<T>> bufs(up, std::vector<T>(count));
          std::vector<T> sum(count);
          for (std::size_t i = 0; i < count; ++i) {
            float s = 0;
            for (int r = 0; r < p; ++r) {
              bufs[static_cast<std::size_t>(r)][i] = small_int<T>(i, r);
              s += to_float(bufs[static_cast<std::size_t>(r)][i]);
            }
            sum[i] = from_float<T>(s);
          }
          std::vector<T*> ptrs;
          for (auto& b : bufs) ptrs.push_back(b.data());
          lab::virtual_ring_allreduce_host<T>(ptrs, count, fuse, threads);
          for (int r = 0; r < p; ++r) {
            ASSERT_TRUE(same_bits(sum, bufs[static_cast<std::size_t>(r)],
                                  "virtual rank " + std::to_string(r) + " of " + std::to_string(p) + ", count " +
                                      std::to_string(count) + (fuse ? ", fused" : "") + ", " +
                                      std::to_string(threads) + " threads"));
          }
        }
      }
    }
  }
}

TYPED_TEST(VirtualRingHost, RejectsBadArguments) {
  using T = TypeParam;
  std::vector<T> a(4), b(4);
  std::vector<T*> none;
  std::vector<T*> with_null = {a.data(), nullptr};
  std::vector<T*> two = {a.data(), b.data()};
  EXPECT_THROW(lab::virtual_ring_allreduce_host<T>(none, 4, true), dtl::InvalidArgument);
  EXPECT_THROW(lab::virtual_ring_allreduce_host<T>(with_null, 4, true), dtl::InvalidArgument);
  EXPECT_THROW(lab::virtual_ring_allreduce_host<T>(two, 4, true, 0), dtl::InvalidArgument);
}

TEST(RingTraffic, CountsEveryStepsBytes) {
  // P = 4, 1000 floats: 3 reduce steps (3 x 1000 x 4 B each) + 3 copy steps (2 x ...).
  EXPECT_EQ(lab::virtual_ring_traffic_bytes(4, 1000, 4, false), (3 * 3 + 3 * 2) * 1000u * 4u);
  EXPECT_EQ(lab::virtual_ring_traffic_bytes(4, 1000, 4, true), (2 * 3 + 4 + 2 * 2) * 1000u * 4u);
  EXPECT_EQ(lab::virtual_ring_traffic_bytes(1, 1000, 4, true), 0u);
}

}  // namespace

#else  // no CUDA in this build

TEST(ReduceCopyHost, NeedsCudaHeaders) {
  GTEST_SKIP() << "this build has no CUDA (DTL_LAB_HAS_CUDA is not set: nvcc not found or "
                  "DTL_ENABLE_CUDA=OFF); the part-2 host tests need the CUDA headers for __half and __nv_bfloat16";
}

#endif
