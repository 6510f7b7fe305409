/// @file
/// @brief The alpha-beta network emulator: a Communicator that does the real
/// reduction on a real backend but completes each operation only when the
/// alpha-beta model of a chosen link (10 GbE, 100 GbE, NVLink, ...) says it
/// would have, one operation at a time as on one link.
///
/// Why: on a 2-core machine, real shared-memory communication is CPU work that
/// competes with compute for the same two cores, so "does backward overlap the
/// allreduce?" cannot be seen there. The emulator waits by *sleeping*, so the
/// cores stay with the compute, and the time an operation takes is the model's,
/// for the link you chose. Results are right (the inner backend reduces); times
/// are emulated, and every name and label it produces says "emulated".
///
/// The model (P ranks, n bytes in the whole buffer, alpha the per-message
/// latency, B the link's bytes per second; the ring algorithms NCCL uses):
///
///     allreduce        2 (P-1) (alpha + n / (P B))    reduce-scatter then allgather
///     reduce_scatter     (P-1) (alpha + n / (P B))    n = the input, P blocks
///     allgather          (P-1) (alpha + n / (P B))    n = the output, P blocks
///     broadcast     ceil(log2 P) (alpha + n / B)      binomial tree, whole message per hop
///
/// and 0 when P = 1. A two-level network (TwoLevelLink: groups of G ranks on a
/// fast link, the groups joined by a slow one, as GPUs in a node on NVLink and
/// the nodes on Ethernet) gives each communicator the link of its slowest hop: a
/// ring whose ranks all lie in one group runs on the inside link; a ring that
/// spans groups waits at every step for the hop that crosses, so it runs on the
/// across link. Operations are serialized FIFO as on one link: an
/// operation starts at max(its issue time, the previous one's end) and ends
/// model_seconds() later. Simplifications: each rank applies the model from its
/// own issue times (the real operation underneath still synchronizes the
/// ranks); contention and congestion are not modelled.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "harness/comm/communicator.h"

namespace dtl {

/// @brief A link in the alpha-beta model: time(n bytes, one message) = alpha + n / B.
struct LinkModel {
  std::string name;               ///< e.g. "10GbE", or "alpha=5us,bw=10GB/s" for a custom link
  double alpha_seconds = 0.0;     ///< alpha: the latency of one message, seconds
  double bytes_per_second = 1.0;  ///< B: the bandwidth, bytes per second

  /// @brief The link in words.
  /// @return e.g. "10GbE (alpha 10 us, 1.25 GB/s)".
  std::string describe() const;
};

/// @brief A named link (the presets).
///
/// Presets, line rates and typical small-message latencies (see the comment
/// beside the table in emulated_communicator.cc for sources): "1GbE", "10GbE",
/// "25GbE", "100GbE", "IB-HDR", "NVLink4". Case-insensitive.
/// @param[in] name one of the preset names.
/// @return its model.
/// @throws InvalidArgument naming `name` and listing the presets.
LinkModel link_by_name(std::string_view name);

/// @brief The preset names.
/// @return {"1GbE", "10GbE", "25GbE", "100GbE", "IB-HDR", "NVLink4"}.
std::vector<std::string> link_names();

/// @brief A link from text: a preset name, or "alpha=5us,bw=10GB/s".
///
/// alpha takes s, ms, us or ns; bw takes B/s, KB/s, MB/s, GB/s (powers of 10),
/// KiB/s, MiB/s, GiB/s (powers of 2) or Gb/s, Mb/s, Gbps, Mbps (bits). Either
/// key may be left out (alpha 0; bandwidth unlimited is not allowed, so bw is
/// required).
/// @param[in] spec the text.
/// @return the model, named `spec`.
/// @throws InvalidArgument naming what could not be parsed.
LinkModel parse_link(std::string_view spec);

/// @brief A two-level network: groups of `group_size` consecutive ranks joined
/// inside by one link, the groups joined by another (this file's header).
struct TwoLevelLink {
  LinkModel inside;    ///< between ranks of one group (e.g. NVLink4 inside a node)
  LinkModel across;    ///< between groups (e.g. 10GbE between nodes)
  int group_size = 1;  ///< G: world ranks [g G, (g + 1) G) form group g

  /// @brief The link a ring over these world ranks runs at: `inside` when they all
  /// lie in one group, else `across`.
  /// @param[in] world_ranks the communicator's members, as ranks of the world (>= 0).
  /// @return the link.
  /// @throws InvalidArgument if group_size < 1, `world_ranks` is empty or holds a negative rank.
  const LinkModel& link_for(std::span<const int> world_ranks) const;
  /// @brief The network in words.
  /// @return e.g. "groups of 2 on NVLink4 (...), across on 10GbE (...)".
  std::string describe() const;
};

/// @brief The model's time for one operation (formulas in this file's header).
/// @param[in] link the link.
/// @param[in] kind the collective.
/// @param[in] bytes n, the whole buffer (OpInfo::total_bytes()).
/// @param[in] world_size P >= 1.
/// @return seconds; 0 when P == 1.
double model_seconds(const LinkModel& link, CollectiveKind kind, std::size_t bytes, int world_size);

/// @brief The alpha-beta emulator over a real communicator (see this file's header).
///
/// Each operation is handed to the inner communicator at once (so the data are
/// right) and its Work completes at the later of the model's end and the inner
/// operation's end. Work::start_seconds()/end_seconds() are the emulated link's:
/// when the operation had the link, and when it completed. An inner operation
/// that ends after the model's end makes the emulation late (the machine could
/// not keep up with the emulated link); late_operations() counts them, so a
/// measurement can say it is not trustworthy. Best over MpiCommunicator in
/// thread mode, whose operations progress while the caller computes.
class EmulatedCommunicator final : public Communicator {
 public:
  /// @brief Wraps `inner` (taking ownership) behind the model of `link`.
  /// @param[in] inner the real backend; its rank and world size are ours.
  /// @param[in] link the emulated link.
  /// @throws InvalidArgument if `inner` is null or the link's bandwidth is not positive.
  EmulatedCommunicator(std::unique_ptr<Communicator> inner, LinkModel link);
  /// @brief Wraps `inner` behind the link of a two-level network that its members use
  /// (TwoLevelLink::link_for()).
  /// @param[in] inner the real backend over exactly the ranks `world_ranks`.
  /// @param[in] network the two-level network.
  /// @param[in] world_ranks inner's members as ranks of the world, in inner's rank order.
  /// @throws InvalidArgument as TwoLevelLink::link_for(), or if world_ranks.size() is not
  ///         inner's world size.
  EmulatedCommunicator(std::unique_ptr<Communicator> inner, const TwoLevelLink& network,
                       std::span<const int> world_ranks);

  /// @return the inner communicator's rank.
  int rank() const override { return inner_->rank(); }
  /// @return the inner communicator's world size.
  int world_size() const override { return inner_->world_size(); }
  /// @return e.g. "emulated 10GbE (alpha 10 us, 1.25 GB/s) over mpi-thread".
  std::string name() const override;
  /// @return the emulated link.
  const LinkModel& link() const noexcept { return link_; }
  /// @return the real backend underneath.
  Communicator& inner() noexcept { return *inner_; }
  /// @return how many operations completed later than the model said (the real backend was slower).
  std::size_t late_operations() const noexcept { return late_->load(); }

 protected:
  DTL_COMMUNICATOR_OPERATIONS;  // contracts on Communicator; what this backend does: the .cc

 private:
  std::unique_ptr<WorkImpl> emulate(const OpInfo& info, Work inner);

  std::unique_ptr<Communicator> inner_;
  LinkModel link_;
  std::mutex mutex_;
  double link_free_at_ = 0.0;  // when the previous operation's model time ends
  std::shared_ptr<std::atomic<std::size_t>> late_ = std::make_shared<std::atomic<std::size_t>>(0);
};

}  // namespace dtl
