/// @file
/// @brief RecordingCommunicator: a Communicator that forwards every operation to
/// another and records what it was asked to do.
///
/// For tests that check what a backend was asked to do (how many allreduces, how
/// many bytes gathered, in which dtype, how many operations in flight at once),
/// independently of the code under test: the record is taken here, at the
/// interface, from the calls themselves, never from the counters or statistics the
/// code under test keeps about itself. Labs 04 and 06 wrap their real backend in
/// one and hand it to the reducer or the trainer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/communicator.h"

namespace dtl::testing {

/// @brief Forwards to an inner Communicator and records, per operation, its kind,
/// dtype, elements, bytes, buffers, when it was issued and when the inner backend completed it.
///
/// Single-threaded like the Communicator it wraps: issue, test and wait from one thread.
class RecordingCommunicator final : public dtl::Communicator {
 public:
  /// @brief One recorded operation.
  struct Op {
    dtl::CollectiveKind kind = dtl::CollectiveKind::kAllreduce;  ///< which collective
    dtl::DType dtype = dtl::DType::kF32;                         ///< its element type
    std::size_t count = 0;  ///< OpInfo::count: the elements of the buffer (of one block for reduce_scatter, allgather)
    std::size_t bytes = 0;  ///< OpInfo::total_bytes(): the whole buffer, the n of the cost formulas
    double issue = 0.0;     ///< clock_seconds() when the operation was called
    double end = 0.0;       ///< when the inner backend completed it; 0 until someone waited for it or tested it
    const void* send = nullptr;  ///< the buffer read (allreduce, broadcast: the one buffer)
    std::size_t send_bytes = 0;  ///< its size: a block for allgather, the whole buffer otherwise
    const void* recv = nullptr;  ///< the buffer written (allreduce, broadcast: the one buffer)
    std::size_t recv_bytes = 0;  ///< its size: a block for reduce_scatter, the whole buffer otherwise
  };

  /// @brief Records the operations issued on `inner`, which must outlive this.
  /// @param[in] inner the backend that does the work.
  explicit RecordingCommunicator(dtl::Communicator& inner) : inner_(inner) {}

  /// @brief The inner backend's rank. @return it.
  int rank() const override { return inner_.rank(); }
  /// @brief The inner backend's world size. @return it.
  int world_size() const override { return inner_.world_size(); }
  /// @brief The name. @return "recording " and the inner backend's name.
  std::string name() const override { return "recording " + inner_.name(); }

  /// @brief Every operation since construction or the last clear(), in issue order.
  /// @return the record.
  const std::vector<Op>& ops() const { return ops_; }

  /// @brief The operations of one kind, in issue order.
  /// @param[in] kind the collective.
  /// @return copies of their records.
  std::vector<Op> ops(dtl::CollectiveKind kind) const {
    std::vector<Op> out;
    std::copy_if(ops_.begin(), ops_.end(), std::back_inserter(out), [kind](const Op& o) { return o.kind == kind; });
    return out;
  }

  /// @brief Forgets the record; operations still pending are no longer recorded when they complete.
  void clear() {
    ops_.clear();
    ++generation_;
  }

  /// @brief How many operations of `kind` were issued.
  /// @param[in] kind the collective.
  /// @return the count.
  int count(dtl::CollectiveKind kind) const {
    return static_cast<int>(std::count_if(ops_.begin(), ops_.end(), [kind](const Op& o) { return o.kind == kind; }));
  }

  /// @brief The elements (Op::count) of the operations of `kind`, summed.
  /// @param[in] kind the collective.
  /// @return the sum.
  std::size_t elements(dtl::CollectiveKind kind) const {
    std::size_t n = 0;
    for (const Op& o : ops_) n += o.kind == kind ? o.count : 0;
    return n;
  }

  /// @brief The bytes (Op::bytes) of the operations of `kind`, summed.
  /// @param[in] kind the collective.
  /// @return the sum.
  std::size_t bytes(dtl::CollectiveKind kind) const {
    std::size_t b = 0;
    for (const Op& o : ops_) b += o.kind == kind ? o.bytes : 0;
    return b;
  }

  /// @brief The most operations of `kind` in flight at once: at each issue, those
  /// issued no later whose completion (the inner backend's end time) came later or
  /// has not been seen.
  /// @param[in] kind the collective.
  /// @return the maximum over the issues of `kind`; 0 when there were none.
  int max_in_flight(dtl::CollectiveKind kind) const {
    int most = 0;
    for (const Op& o : ops_) {
      if (o.kind != kind) continue;
      int n = 0;
      for (const Op& p : ops_) n += p.kind == kind && p.issue <= o.issue && (p.end == 0.0 || p.end > o.issue) ? 1 : 0;
      most = std::max(most, n);
    }
    return most;
  }

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    return record(info, buf, info.total_bytes(), buf, info.total_bytes(),
                  [&] { return inner_.allreduce(buf, info.count, info.dtype, info.op); });
  }
  std::unique_ptr<dtl::WorkImpl> do_broadcast(void* buf, const dtl::OpInfo& info) override {
    return record(info, buf, info.total_bytes(), buf, info.total_bytes(),
                  [&] { return inner_.broadcast(buf, info.count, info.dtype, info.root); });
  }
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                   const dtl::OpInfo& info) override {
    return record(info, send_buf, info.total_bytes(), recv_buf, block_bytes(info),
                  [&] { return inner_.reduce_scatter(send_buf, recv_buf, info.count, info.dtype, info.op); });
  }
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void* send_buf, void* recv_buf, const dtl::OpInfo& info) override {
    return record(info, send_buf, block_bytes(info), recv_buf, info.total_bytes(),
                  [&] { return inner_.allgather(send_buf, recv_buf, info.count, info.dtype); });
  }

 private:
  // A WorkImpl that completes with the inner Work, taking its times, and writes the
  // end time into its record (unless clear() came in between).
  class Forward final : public dtl::WorkImpl {
   public:
    Forward(dtl::Work work, const dtl::OpInfo& info, RecordingCommunicator* owner, std::size_t index)
        : dtl::WorkImpl(info.description),
          work_(std::move(work)),
          owner_(owner),
          index_(index),
          generation_(owner->generation_) {}
    bool test() override { return done(work_.test()); }
    bool wait_until(double deadline) override {
      return done(work_.wait_for(std::max(0.0, deadline - dtl::clock_seconds())));
    }

   private:
    bool done(bool complete) {
      if (complete) {
        set_start(work_.start_seconds());
        set_end(work_.end_seconds());
        if (owner_->generation_ == generation_) owner_->ops_[index_].end = work_.end_seconds();
      }
      return complete;
    }
    dtl::Work work_;
    RecordingCommunicator* owner_;
    std::size_t index_;
    std::uint64_t generation_;
  };

  // One rank's block of a reduce_scatter or allgather.
  static std::size_t block_bytes(const dtl::OpInfo& info) { return info.count * dtl::dtype_size(info.dtype); }

  // Records the operation at its issue time, then issues it on the inner backend.
  template <typename Issue>
  std::unique_ptr<dtl::WorkImpl> record(const dtl::OpInfo& info, const void* send, std::size_t send_bytes,
                                        const void* recv, std::size_t recv_bytes, Issue&& issue) {
    ops_.push_back({info.kind, info.dtype, info.count, info.total_bytes(), dtl::clock_seconds(), 0.0, send, send_bytes,
                    recv, recv_bytes});
    const std::size_t index = ops_.size() - 1;
    return std::make_unique<Forward>(issue(), info, this, index);
  }

  dtl::Communicator& inner_;
  std::vector<Op> ops_;
  std::uint64_t generation_ = 0;  // bumped by clear(): Works issued before it no longer write their end
};

}  // namespace dtl::testing
