/// @file
/// @brief StreamModelCommunicator: the NCCL backend's two streams and two events,
/// played on the host, so that CI (no GPU) checks what a GPU run would need of the
/// order in which training code issues, waits for and touches its buffers.
///
/// On a GPU (Note [Why a side stream] in harness/comm/nccl_communicator.h) the
/// training code queues kernels on the compute stream; a collective issued at some
/// point of that queue reads its buffer after everything queued before the issue
/// (the `ready` event), runs on the side stream concurrently with whatever is queued
/// after it, and only once its Work completed does the compute stream wait for it
/// (`done`). Two mistakes then race, and a CPU backend hides both, because its
/// "kernels" run at once and in order:
///   - a kernel queued after the issue and before the Work completed writes the
///     buffer in flight (a gradient written after its bucket left: that gradient
///     is missing from the sum, or half of it is);
///   - a kernel queued before the Work completed reads the buffer (an optimizer
///     step on half-reduced gradients).
/// This communicator forwards every operation to a real backend (the results are
/// real) and keeps one list in program order, the model of the compute stream:
/// what the code under test and the test say they queue (compute_writes(),
/// compute_reads()), the point of each issue ("ready") and the point where each
/// Work was seen complete ("done"). check() then finds both races, and the list
/// lets a test ask more (a bucket that left before its last gradient).
///
/// Single-threaded like the Communicator it wraps: issue, test and wait from one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/communicator.h"

namespace dtl::testing {

/// @brief Forwards to an inner Communicator and records, in one program-ordered list,
/// the compute stream's accesses and each operation's issue ("ready") and completion ("done").
class StreamModelCommunicator final : public dtl::Communicator {
 public:
  /// @brief What an entry of the compute stream is.
  enum class Kind {
    kWrite,  ///< a kernel that writes [begin, begin + bytes) (compute_writes())
    kRead,   ///< a kernel that reads it (compute_reads())
    kReady,  ///< operation `op` issued here: it reads its buffers after every entry before this one
    kDone,   ///< operation `op` seen complete here: entries after this one see its result
  };
  /// @brief One entry of the compute stream.
  struct Entry {
    Kind kind = Kind::kWrite;  ///< what it is
    const std::byte* begin = nullptr;  ///< the buffer touched (kReady, kDone: the buffer the operation writes)
    std::size_t bytes = 0;     ///< its size
    int op = -1;               ///< kReady, kDone: the operation's index, 0, 1, ... in issue order
    std::string what;          ///< for messages: the kernel's name, or the operation's description
    const std::byte* in_begin = nullptr;  ///< kReady, kDone: the buffer the operation reads (may be `begin`)
    std::size_t in_bytes = 0;  ///< its size
  };

  /// @brief Records the operations issued on `inner`, which must outlive this.
  /// @param[in] inner the backend that does the work.
  explicit StreamModelCommunicator(dtl::Communicator& inner) : inner_(inner) {}

  /// @brief The inner backend's rank. @return it.
  int rank() const override { return inner_.rank(); }
  /// @brief The inner backend's world size. @return it.
  int world_size() const override { return inner_.world_size(); }
  /// @brief The name. @return "stream model over " and the inner backend's name.
  std::string name() const override { return "stream model over " + inner_.name(); }

  /// @brief A kernel queued on the compute stream that writes `bytes` at `begin`.
  /// @param[in] begin the buffer. @param[in] bytes its size. @param[in] what the kernel, for messages.
  void compute_writes(const void* begin, std::size_t bytes, std::string what) {
    entries_.push_back({Kind::kWrite, static_cast<const std::byte*>(begin), bytes, -1, std::move(what), nullptr, 0});
  }
  /// @brief A kernel queued on the compute stream that reads `bytes` at `begin`.
  /// @param[in] begin the buffer. @param[in] bytes its size. @param[in] what the kernel, for messages.
  void compute_reads(const void* begin, std::size_t bytes, std::string what) {
    entries_.push_back({Kind::kRead, static_cast<const std::byte*>(begin), bytes, -1, std::move(what), nullptr, 0});
  }

  /// @brief The compute stream, in program order. @return the entries.
  const std::vector<Entry>& entries() const { return entries_; }
  /// @brief Forgets the entries (operations still pending record nothing when they complete).
  void clear() {
    entries_.clear();
    ++generation_;
    next_op_ = 0;
  }

  /// @brief The two races of Note [Why a side stream], on the entries so far: an
  /// access to an operation's buffers between its ready and its done (a write to
  /// what it reads or writes, or a read of what it writes), and an operation never
  /// seen complete when `all_done` is true.
  /// @param[in] all_done whether every operation must have been seen complete.
  /// @return "" when there is none; otherwise the first, with the entries around it.
  std::string check(bool all_done = true) const {
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& ready = entries_[i];
      if (ready.kind != Kind::kReady) continue;
      bool done = false;
      for (std::size_t j = i + 1; j < entries_.size() && !done; ++j) {
        const Entry& e = entries_[j];
        if (e.kind == Kind::kDone && e.op == ready.op) {
          done = true;
        } else if ((e.kind == Kind::kWrite && (overlaps(e, ready) || overlaps_input(e, ready))) ||
                   (e.kind == Kind::kRead && overlaps(e, ready))) {
          std::ostringstream why;
          why << "'" << e.what << "' (compute stream entry " << j << ") "
              << (e.kind == Kind::kWrite ? "writes" : "reads") << " the buffer of " << ready.what
              << " while it is in flight: issued at entry " << i << ", not yet waited for. On a GPU "
              << (e.kind == Kind::kWrite ? "the collective may or may not see this write"
                                         : "this kernel may read the buffer before the collective wrote it")
              << "\n" << around(j);
          return why.str();
        }
      }
      if (!done && all_done) {
        return ready.what + " (issued at compute stream entry " + std::to_string(i) +
               ") was never waited for: on a GPU nothing orders later kernels after it\n" + around(i);
      }
    }
    return "";
  }

  /// @brief Records an operation issued elsewhere (a PeerLink's send or receive, see
  /// harness/testing/stream_model_peer_link.h) as if issued here: its ready entry now,
  /// its done entry when the returned operation is seen complete.
  /// @param[in] inner the operation, issued on its own backend.
  /// @param[in] what its description.
  /// @param[in] out the buffer it writes (null: none). @param[in] out_bytes its size.
  /// @param[in] in the buffer it reads (null: none). @param[in] in_bytes its size.
  /// @return the operation to hand back in its place.
  std::unique_ptr<dtl::WorkImpl> track(dtl::Work inner, const std::string& what, const void* out, std::size_t out_bytes,
                                       const void* in, std::size_t in_bytes) {
    return issue(what, out, out_bytes, in, in_bytes, [&] { return std::move(inner); });
  }

  /// @brief The entries from `at` - 4 to `at` + 2, one a line, for messages.
  /// @param[in] at an entry index.
  /// @return the lines.
  std::string around(std::size_t at) const {
    std::ostringstream out;
    const std::size_t first = at >= 4 ? at - 4 : 0;
    for (std::size_t k = first; k < entries_.size() && k <= at + 2; ++k) {
      static constexpr const char* kNames[] = {"write", "read ", "ready", "done "};
      out << (k == at ? "  > " : "    ") << k << " " << kNames[static_cast<int>(entries_[k].kind)] << " "
          << entries_[k].what << "\n";
    }
    return out.str();
  }

 protected:
  std::unique_ptr<dtl::WorkImpl> do_allreduce(void* buf, const dtl::OpInfo& info) override {
    return issue(info.description, buf, info.total_bytes(), buf, info.total_bytes(),
                 [&] { return inner_.allreduce(buf, info.count, info.dtype, info.op); });
  }
  std::unique_ptr<dtl::WorkImpl> do_broadcast(void* buf, const dtl::OpInfo& info) override {
    return issue(info.description, buf, info.total_bytes(), buf, info.total_bytes(),
                 [&] { return inner_.broadcast(buf, info.count, info.dtype, info.root); });
  }
  std::unique_ptr<dtl::WorkImpl> do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                   const dtl::OpInfo& info) override {
    // Writes one block, reads all P blocks.
    return issue(info.description, recv_buf, block_bytes(info), send_buf, info.total_bytes(),
                 [&] { return inner_.reduce_scatter(send_buf, recv_buf, info.count, info.dtype, info.op); });
  }
  std::unique_ptr<dtl::WorkImpl> do_allgather(const void* send_buf, void* recv_buf, const dtl::OpInfo& info) override {
    // Writes all P blocks, reads one.
    return issue(info.description, recv_buf, info.total_bytes(), send_buf, block_bytes(info),
                 [&] { return inner_.allgather(send_buf, recv_buf, info.count, info.dtype); });
  }

 private:
  static bool overlaps(const Entry& a, const Entry& b) {
    return a.bytes > 0 && b.bytes > 0 && a.begin < b.begin + b.bytes && b.begin < a.begin + a.bytes;
  }
  // Whether `a`'s buffer overlaps the input of operation `op`.
  static bool overlaps_input(const Entry& a, const Entry& op) {
    return a.bytes > 0 && op.in_bytes > 0 && a.begin < op.in_begin + op.in_bytes && op.in_begin < a.begin + a.bytes;
  }
  static std::size_t block_bytes(const dtl::OpInfo& info) { return info.count * dtl::dtype_size(info.dtype); }

  // The inner Work; on completion, the kDone entry (the compute stream waits for `done` there).
  class Forward final : public dtl::WorkImpl {
   public:
    Forward(dtl::Work work, const std::string& description, StreamModelCommunicator* owner, Entry done)
        : dtl::WorkImpl(description),
          work_(std::move(work)),
          owner_(owner),
          done_(std::move(done)),
          generation_(owner->generation_) {}
    bool test() override { return finish(work_.test()); }
    bool wait_until(double deadline) override {
      return finish(work_.wait_for(std::max(0.0, deadline - dtl::clock_seconds())));
    }

   private:
    bool finish(bool complete) {
      if (complete && !recorded_) {
        recorded_ = true;
        set_start(work_.start_seconds());
        set_end(work_.end_seconds());
        if (owner_->generation_ == generation_) owner_->entries_.push_back(done_);
      }
      return complete;
    }
    dtl::Work work_;
    StreamModelCommunicator* owner_;
    Entry done_;
    std::uint64_t generation_;
    bool recorded_ = false;
  };

  template <typename Issue>
  std::unique_ptr<dtl::WorkImpl> issue(const std::string& description, const void* out, std::size_t out_bytes,
                                       const void* in, std::size_t in_bytes, Issue&& call) {
    const int op = next_op_++;
    Entry ready{Kind::kReady, static_cast<const std::byte*>(out), out_bytes, op, description,
                static_cast<const std::byte*>(in), in_bytes};
    entries_.push_back(ready);
    Entry done = ready;
    done.kind = Kind::kDone;
    return std::make_unique<Forward>(call(), description, this, std::move(done));
  }

  dtl::Communicator& inner_;
  std::vector<Entry> entries_;
  std::uint64_t generation_ = 0;
  int next_op_ = 0;
};

}  // namespace dtl::testing
