// What task D's tests share (public and hidden): Note [PowerSGD] of
// lab05/powersgd.h written again in double for every rank at once (the oracle,
// no code under test), each rank's gradients as a known function of rank and
// step, and comparisons across ranks with the vendor MPI.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/nn/half.h"
#include "harness/random.h"
#include "labs/05_mixed_precision/tests/mixed_test_util.h"
#include "lab05/powersgd.h"

namespace lab05_test {

/// What the InvalidArgument thrown by `call` says, or "" if nothing was thrown.
template <typename F>
std::string invalid_argument_message(F&& call) {
  try {
    call();
  } catch (const dtl::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

/// Rank `rank`'s gradient at `step`: N(0, 1) draws, different per rank and step.
inline std::vector<double> gradient(std::size_t count, int rank, int step) {
  dtl::Rng rng(1000 + static_cast<std::uint64_t>(rank) * 97 + static_cast<std::uint64_t>(step));
  std::vector<double> g(count);
  for (double& v : g) v = static_cast<double>(static_cast<float>(rng.normal()));  // float-representable
  return g;
}

/// Classical Gram-Schmidt in double on a row-major rows x cols matrix (a zero column stays zero).
inline void gram_schmidt(std::vector<double>& a, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = 0; j < cols; ++j) {
    std::vector<double> col(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) col[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i * cols + j)];
    for (std::int64_t k = 0; k < j; ++k) {
      double dot = 0.0;
      for (std::int64_t i = 0; i < rows; ++i) dot += a[static_cast<std::size_t>(i * cols + k)] * a[static_cast<std::size_t>(i * cols + j)];
      for (std::int64_t i = 0; i < rows; ++i) col[static_cast<std::size_t>(i)] -= dot * a[static_cast<std::size_t>(i * cols + k)];
    }
    double norm = 0.0;
    for (double v : col) norm += v * v;
    norm = std::sqrt(norm);
    for (std::int64_t i = 0; i < rows; ++i) {
      a[static_cast<std::size_t>(i * cols + j)] = norm == 0.0 ? 0.0 : col[static_cast<std::size_t>(i)] / norm;
    }
  }
}

/// max |got - expected| / max(1, max |expected|); infinity if the sizes differ.
template <typename T>
double max_gap(const std::vector<T>& got, const std::vector<double>& expected) {
  if (got.size() != expected.size()) return INFINITY;
  double top = 1.0, gap = 0.0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    top = std::max(top, std::abs(expected[k]));
    gap = std::max(gap, std::abs(static_cast<double>(got[k]) - expected[k]));
  }
  return gap / top;
}

/// Element-wise sum over the ranks, in double, by the vendor MPI_Allreduce.
inline std::vector<double> sum_over_ranks(const std::vector<float>& values) {
  std::vector<double> in(values.begin(), values.end()), out(values.size());
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_DOUBLE, MPI_SUM, comm());
  return out;
}

/// Whether every rank holds the same bits (rank 0's, sent by the vendor MPI_Bcast).
inline bool same_on_every_rank(const std::vector<float>& values) {
  std::vector<float> root = values;
  MPI_Bcast(root.data(), static_cast<int>(root.size() * sizeof(float)), MPI_BYTE, 0, comm());
  int same = std::equal(root.begin(), root.end(), values.begin(),
                        [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); });
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm());
  return all == 1;
}

/// The backend of the tests of Note [Error reset]'s bf16 exact calls, which owes nothing
/// to task A: a kBF16 kSum allreduce widens the values to float, sums them with the
/// vendor MPI_Allreduce and rounds once to bf16 (harness/nn/half.h); every other
/// allreduce goes to `inner`. Each operation is complete when it returns.
class Bf16OracleCommunicator final : public dtl::Communicator {
 public:
  explicit Bf16OracleCommunicator(dtl::Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string name() const override { return "bf16 oracle over " + inner_.name(); }

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    if (info.dtype == dtl::DType::kBF16 && info.op == dtl::ReduceOp::kSum) {
      auto* bits = static_cast<std::uint16_t*>(buf);
      std::vector<float> wide(info.count);
      for (std::size_t k = 0; k < info.count; ++k) wide[k] = dtl::nn::bf16_bits_to_float(bits[k]);
      MPI_Allreduce(MPI_IN_PLACE, wide.data(), static_cast<int>(info.count), MPI_FLOAT, MPI_SUM, comm());
      for (std::size_t k = 0; k < info.count; ++k) bits[k] = dtl::nn::float_to_bf16_bits(wide[k]);
    } else {
      inner_.allreduce(buf, info.count, info.dtype, info.op).wait();
    }
    return std::make_unique<Done>(info.description);
  }
  std::unique_ptr<dtl::WorkImpl> do_broadcast(void*, const dtl::OpInfo&) override { throw dtl::Error("not used by PowerSgd"); }
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void*, void*, const dtl::OpInfo&) override {
    throw dtl::Error("not used by PowerSgd");
  }
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void*, void*, const dtl::OpInfo&) override {
    throw dtl::Error("not used by PowerSgd");
  }

 private:
  struct Done final : dtl::WorkImpl {
    explicit Done(const std::string& description) : dtl::WorkImpl(description) { set_end(dtl::clock_seconds()); }
    bool test() override { return true; }
    bool wait_until(double) override { return true; }
  };
  dtl::Communicator& inner_;
};

/// Note [PowerSGD] in double, for W simulated ranks: Q and every rank's error; with
/// Note [Warm-up and power iterations]'s warm-up calls and extra rounds, and Note
/// [Error reset]'s resets (exact in double: the exact_dtype's rounding is not modelled).
struct Oracle {
  std::vector<lab05::MatrixShape> layout;
  int warmup = 0;                                  // options.warmup_steps
  int iterations = 1;                              // options.power_iterations
  int reset = 0;                                   // options.error_reset_period
  int calls = 0;                                   // step()s so far
  std::vector<int> ranks;                          // r per matrix, 0 = uncompressed (the header's rule)
  std::vector<std::vector<double>> q;              // m x r per matrix
  std::vector<std::vector<std::vector<double>>> error;  // [rank][matrix] n x m
  std::size_t count = 0;

  Oracle(std::vector<lab05::MatrixShape> shapes, const lab05::PowerSgdOptions& o, int world)
      : layout(std::move(shapes)), warmup(o.warmup_steps), iterations(o.power_iterations), reset(o.error_reset_period) {
    error.resize(static_cast<std::size_t>(world));
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const std::int64_t n = layout[i].rows, m = layout[i].cols;
      count += static_cast<std::size_t>(n * m);
      const bool compress = n >= 2 && m >= 2 && n * m >= o.min_compress_elements;
      const int r = compress ? static_cast<int>(std::min<std::int64_t>(o.rank, std::min(n, m))) : 0;
      ranks.push_back(r);
      q.emplace_back(static_cast<std::size_t>(m * r));
      for (std::int64_t row = 0; row < m; ++row) {
        for (int c = 0; c < r; ++c) q[i][static_cast<std::size_t>(row * r + c)] = lab05::initial_q(o.seed, i, row, c);
      }
      for (auto& e : error) e.emplace_back(static_cast<std::size_t>(compress ? n * m : 0), 0.0);
    }
  }

  /// Whether call `call` is exact (Note [Error reset]): the warm-up, or every reset-th call after it.
  bool exact(int call) const { return call < warmup || (reset > 0 && (call - warmup + 1) % reset == 0); }

  /// One step: every rank's flat gradient in, the compressed mean out.
  std::vector<double> step(const std::vector<std::vector<double>>& grads) {
    const auto w = static_cast<int>(grads.size());
    std::vector<double> out(count, 0.0);
    const bool warm = calls < warmup;
    if (exact(calls++)) {  // the exact mean of everything (plus the errors at a reset, which become 0)
      std::size_t at = 0;
      for (std::size_t i = 0; i < layout.size(); ++i) {
        const auto nm = static_cast<std::size_t>(layout[i].rows * layout[i].cols);
        for (int x = 0; x < w; ++x) {
          std::vector<double>& e = error[static_cast<std::size_t>(x)][i];
          for (std::size_t k = 0; k < nm; ++k) {
            out[at + k] += (grads[static_cast<std::size_t>(x)][at + k] + (warm || e.empty() ? 0.0 : e[k])) / w;
          }
          if (!warm) std::fill(e.begin(), e.end(), 0.0);
        }
        at += nm;
      }
      return out;
    }
    std::size_t at = 0;
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const std::int64_t n = layout[i].rows, m = layout[i].cols, r = ranks[i];
      const auto nm = static_cast<std::size_t>(n * m);
      auto el = [m](std::int64_t row, std::int64_t col) { return static_cast<std::size_t>(row * m + col); };
      if (r == 0) {
        for (std::size_t k = 0; k < nm; ++k) {
          for (int x = 0; x < w; ++x) out[at + k] += grads[static_cast<std::size_t>(x)][at + k] / w;
        }
        at += nm;
        continue;
      }
      std::vector<std::vector<double>> mats;
      for (int x = 0; x < w; ++x) {
        std::vector<double> mat(grads[static_cast<std::size_t>(x)].begin() + static_cast<std::ptrdiff_t>(at),
                                grads[static_cast<std::size_t>(x)].begin() + static_cast<std::ptrdiff_t>(at + nm));
        for (std::size_t k = 0; k < nm; ++k) mat[k] += error[static_cast<std::size_t>(x)][i][k];
        mats.push_back(std::move(mat));
      }
      // The extra rounds: P = GS(sum M Q), Q = mean M^T P, kept.
      for (int round = 1; round < iterations; ++round) {
        std::vector<double> p(static_cast<std::size_t>(n * r), 0.0), qm(static_cast<std::size_t>(m * r), 0.0);
        for (const auto& mat : mats) {
          for (std::int64_t row = 0; row < n; ++row) {
            for (std::int64_t c = 0; c < r; ++c) {
              for (std::int64_t col = 0; col < m; ++col) p[static_cast<std::size_t>(row * r + c)] += mat[el(row, col)] * q[i][static_cast<std::size_t>(col * r + c)];
            }
          }
        }
        gram_schmidt(p, n, r);
        for (const auto& mat : mats) {
          for (std::int64_t col = 0; col < m; ++col) {
            for (std::int64_t c = 0; c < r; ++c) {
              for (std::int64_t row = 0; row < n; ++row) qm[static_cast<std::size_t>(col * r + c)] += mat[el(row, col)] * p[static_cast<std::size_t>(row * r + c)] / w;
            }
          }
        }
        q[i] = qm;
      }
      std::vector<double> p(static_cast<std::size_t>(n * r), 0.0);
      for (const auto& mat : mats) {
        for (std::int64_t row = 0; row < n; ++row) {
          for (std::int64_t c = 0; c < r; ++c) {
            for (std::int64_t col = 0; col < m; ++col) p[static_cast<std::size_t>(row * r + c)] += mat[el(row, col)] * q[i][static_cast<std::size_t>(col * r + c)];
          }
        }
      }
      gram_schmidt(p, n, r);
      std::vector<double> qmean(static_cast<std::size_t>(m * r), 0.0);
      for (int x = 0; x < w; ++x) {
        const auto& mat = mats[static_cast<std::size_t>(x)];
        std::vector<double> qw(static_cast<std::size_t>(m * r), 0.0);
        for (std::int64_t col = 0; col < m; ++col) {
          for (std::int64_t c = 0; c < r; ++c) {
            for (std::int64_t row = 0; row < n; ++row) qw[static_cast<std::size_t>(col * r + c)] += mat[el(row, col)] * p[static_cast<std::size_t>(row * r + c)];
          }
        }
        auto& e = error[static_cast<std::size_t>(x)][i];
        for (std::int64_t row = 0; row < n; ++row) {
          for (std::int64_t col = 0; col < m; ++col) {
            double approx = 0.0;
            for (std::int64_t c = 0; c < r; ++c) approx += p[static_cast<std::size_t>(row * r + c)] * qw[static_cast<std::size_t>(col * r + c)];
            e[el(row, col)] = mat[el(row, col)] - approx;
          }
        }
        for (std::size_t k = 0; k < qmean.size(); ++k) qmean[k] += qw[k] / w;
      }
      q[i] = qmean;
      for (std::int64_t row = 0; row < n; ++row) {
        for (std::int64_t col = 0; col < m; ++col) {
          double v = 0.0;
          for (std::int64_t c = 0; c < r; ++c) v += p[static_cast<std::size_t>(row * r + c)] * qmean[static_cast<std::size_t>(col * r + c)];
          out[at + el(row, col)] = v;
        }
      }
      at += nm;
    }
    return out;
  }
};

}  // namespace lab05_test
