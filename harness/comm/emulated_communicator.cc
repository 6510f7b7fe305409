// The alpha-beta network emulator. See emulated_communicator.h for the model.
#include "harness/comm/emulated_communicator.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <utility>

namespace dtl {

namespace {

// The presets. Bandwidths are line rates (what the link can carry, not what
// a given MPI achieves on it); alphas are typical one-way small-message
// latencies through the whole software stack. Sources:
//  - 1GbE: IEEE 802.3ab, 1 Gbit/s = 125 MB/s; ~50 us for MPI over kernel TCP.
//  - 10GbE, 25GbE, 100GbE: IEEE 802.3ae / 802.3by / 802.3ba line rates (10, 25,
//    100 Gbit/s = 1.25, 3.125, 12.5 GB/s); latency ~10 us for MPI over kernel TCP
//    on 10GbE, ~5 us on 25GbE, ~2 us for RoCE v2 on 100GbE (vendor MPI/perftest figures).
//  - IB-HDR: InfiniBand HDR, 200 Gbit/s = 25 GB/s per port (NVIDIA ConnectX-6
//    datasheet); MPI latency about 1 us (osu_latency on HDR).
//  - NVLink4: NVIDIA H100 SXM, 900 GB/s of NVLink bandwidth per GPU in both
//    directions together, so 450 GB/s each way (H100 datasheet); about 2 us for
//    a small NCCL operation within a node.
struct Preset {
  const char* name;
  double alpha_seconds;
  double bytes_per_second;
};
constexpr Preset kPresets[] = {
    {"1GbE", 50e-6, 125e6},    {"10GbE", 10e-6, 1.25e9},  {"25GbE", 5e-6, 3.125e9}, {"100GbE", 2e-6, 12.5e9},
    {"IB-HDR", 1e-6, 25e9},    {"NVLink4", 2e-6, 450e9},
};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view text) {
  std::size_t a = 0, b = text.size();
  while (a < b && std::isspace(static_cast<unsigned char>(text[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(text[b - 1]))) --b;
  return std::string(text.substr(a, b - a));
}

// "5us" -> 5e-6; "10GB/s" -> 1e10. `units` maps suffixes (lower case) to factors.
double parse_quantity(const std::string& text, const std::vector<std::pair<std::string, double>>& units,
                      const char* argument) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = lower(trim(end == nullptr ? "" : end));
  for (const auto& [suffix, factor] : units) {
    if (unit == suffix && end != text.c_str()) return value * factor;
  }
  std::string known;
  for (const auto& [suffix, factor] : units) known += (known.empty() ? "" : ", ") + suffix;
  throw_invalid_argument("parse_link", argument, "is '" + text + "': expected a number and one of " + known);
}

std::string format_seconds(double seconds) {
  std::ostringstream out;
  if (seconds >= 1e-3) out << seconds * 1e3 << " ms";
  else if (seconds >= 1e-6 || seconds == 0) out << seconds * 1e6 << " us";
  else out << seconds * 1e9 << " ns";
  return out.str();
}

// The operation as the link saw it: it completes when both the real operation
// and the model's time are over; waiting sleeps, it never spins.
class EmulatedWork final : public WorkImpl {
 public:
  EmulatedWork(std::string description, Work inner, double model_start, double model_end,
               std::shared_ptr<std::atomic<std::size_t>> late)
      : WorkImpl(std::move(description), inner.issue_seconds()),
        inner_(std::move(inner)),
        model_end_(model_end),
        late_(std::move(late)) {
    set_start(model_start);
  }

  bool test() override {
    if (complete_) return true;
    if (!inner_.test() || clock_seconds() < model_end_) return false;
    complete();
    return true;
  }
  bool wait_until(double deadline_seconds) override {
    if (complete_) return true;
    if (!inner_.wait_for(std::max(0.0, deadline_seconds - clock_seconds()))) return false;
    const double until = std::min(model_end_, deadline_seconds);
    const double left = until - clock_seconds();
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
    // sleep_for never returns early, so now >= until; a deadline before the model's end is a timeout.
    if (clock_seconds() < model_end_) return false;
    complete();
    return true;
  }

 private:
  void complete() {
    complete_ = true;
    const double real_end = inner_.end_seconds();
    if (real_end > model_end_) ++*late_;
    set_end(std::max(model_end_, real_end));
  }

  Work inner_;
  double model_end_;
  std::shared_ptr<std::atomic<std::size_t>> late_;
  bool complete_ = false;
};

}  // namespace

std::string LinkModel::describe() const {
  std::ostringstream out;
  out << name << " (alpha " << format_seconds(alpha_seconds) << ", " << bytes_per_second / 1e9 << " GB/s)";
  return out.str();
}

std::vector<std::string> link_names() {
  std::vector<std::string> names;
  for (const auto& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

LinkModel link_by_name(std::string_view name) {
  for (const auto& preset : kPresets) {
    if (lower(name) == lower(preset.name)) return {preset.name, preset.alpha_seconds, preset.bytes_per_second};
  }
  std::string known;
  for (const auto& preset : kPresets) known += (known.empty() ? "" : ", ") + std::string(preset.name);
  throw_invalid_argument("link_by_name", "name",
                         "is '" + std::string(name) + "', not a known link; known: " + known +
                             " (or give one as \"alpha=5us,bw=10GB/s\" to parse_link)");
}

LinkModel parse_link(std::string_view spec) {
  if (spec.find('=') == std::string_view::npos) return link_by_name(trim(spec));
  static const std::vector<std::pair<std::string, double>> kTimes = {
      {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  static const std::vector<std::pair<std::string, double>> kRates = {
      {"b/s", 1.0},           {"kb/s", 1e3},          {"mb/s", 1e6},           {"gb/s", 1e9},
      {"kib/s", 1024.0},      {"mib/s", 1048576.0},   {"gib/s", 1073741824.0}, {"gbps", 1e9 / 8},
      {"mbps", 1e6 / 8}};
  LinkModel link{std::string(spec), 0.0, 0.0};
  std::istringstream in{std::string(spec)};
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = lower(trim(item.substr(0, eq)));
    const std::string value = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    if (key == "alpha") {
      link.alpha_seconds = parse_quantity(value, kTimes, "alpha");
    } else if (key == "bw") {
      // "Gb/s" (bits) and "GB/s" (bytes) differ only in case: look before lowering.
      const bool bits = value.find("b/s") != std::string::npos && value.find("ib/s") == std::string::npos;
      link.bytes_per_second = parse_quantity(value, kRates, "bw") / (bits ? 8.0 : 1.0);
    } else {
      throw_invalid_argument("parse_link", "spec",
                             "is '" + std::string(spec) + "': unknown key '" + key + "' (keys: alpha, bw)");
    }
  }
  DTL_REQUIRE_ARG(link.bytes_per_second > 0, "parse_link", "spec",
                  "is '" + std::string(spec) + "': it needs a positive bandwidth, e.g. bw=10GB/s");
  DTL_REQUIRE_ARG(link.alpha_seconds >= 0, "parse_link", "spec",
                  "is '" + std::string(spec) + "': alpha must not be negative");
  return link;
}

double model_seconds(const LinkModel& link, CollectiveKind kind, std::size_t bytes, int world_size) {
  if (world_size <= 1) return 0.0;
  const double p = world_size;
  const double n = static_cast<double>(bytes);
  const double step = link.alpha_seconds + n / (p * link.bytes_per_second);  // one ring step: a chunk of n/P
  switch (kind) {
    case CollectiveKind::kAllreduce: return 2.0 * (p - 1.0) * step;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllgather: return (p - 1.0) * step;
    case CollectiveKind::kBroadcast:
      return std::ceil(std::log2(p)) * (link.alpha_seconds + n / link.bytes_per_second);
  }
  return 0.0;
}

const LinkModel& TwoLevelLink::link_for(std::span<const int> world_ranks) const {
  DTL_REQUIRE_ARG(group_size >= 1, "TwoLevelLink::link_for", "group_size",
                  "is " + std::to_string(group_size) + "; it must be >= 1");
  DTL_REQUIRE_ARG(!world_ranks.empty(), "TwoLevelLink::link_for", "world_ranks", "is empty");
  const int group = world_ranks.front() / group_size;
  for (const int r : world_ranks) {
    DTL_REQUIRE_ARG(r >= 0, "TwoLevelLink::link_for", "world_ranks", "holds rank " + std::to_string(r));
    if (r / group_size != group) return across;  // one hop crosses: every ring step waits for it
  }
  return inside;
}

std::string TwoLevelLink::describe() const {
  return "groups of " + std::to_string(group_size) + " on " + inside.describe() + ", across on " + across.describe();
}

EmulatedCommunicator::EmulatedCommunicator(std::unique_ptr<Communicator> inner, const TwoLevelLink& network,
                                           std::span<const int> world_ranks)
    : EmulatedCommunicator(std::move(inner), network.link_for(world_ranks)) {
  DTL_REQUIRE_ARG(world_ranks.size() == static_cast<std::size_t>(inner_->world_size()), "EmulatedCommunicator",
                  "world_ranks",
                  "has " + std::to_string(world_ranks.size()) + " ranks; inner has " +
                      std::to_string(inner_->world_size()) + " (rank " + std::to_string(inner_->rank()) + ")");
}

EmulatedCommunicator::EmulatedCommunicator(std::unique_ptr<Communicator> inner, LinkModel link)
    : inner_(std::move(inner)), link_(std::move(link)) {
  DTL_REQUIRE_ARG(inner_ != nullptr, "EmulatedCommunicator", "inner", "is null");
  DTL_REQUIRE_ARG(link_.bytes_per_second > 0, "EmulatedCommunicator", "link",
                  "has bandwidth " + std::to_string(link_.bytes_per_second) + "; it must be positive");
  DTL_REQUIRE_ARG(link_.alpha_seconds >= 0, "EmulatedCommunicator", "link", "has a negative alpha");
  inner_->set_timeout(0);  // our Work applies the timeout, once, to the whole operation
}

std::string EmulatedCommunicator::name() const { return "emulated " + link_.describe() + " over " + inner_->name(); }

std::unique_ptr<WorkImpl> EmulatedCommunicator::emulate(const OpInfo& info, Work inner) {
  const double seconds = model_seconds(link_, info.kind, info.total_bytes(), info.world_size);
  double start = 0.0;
  {
    // One link: this operation gets it when the previous one is done with it.
    std::lock_guard lock(mutex_);
    start = std::max(inner.issue_seconds(), link_free_at_);
    link_free_at_ = start + seconds;
  }
  return std::make_unique<EmulatedWork>(info.description, std::move(inner), start, start + seconds, late_);
}

// do_allreduce: The inner allreduce, completed at the model's time.
std::unique_ptr<WorkImpl> EmulatedCommunicator::do_allreduce(void* buf, const OpInfo& info) {
  return emulate(info, inner_->allreduce(buf, info.count, info.dtype, info.op));
}

// do_broadcast: The inner broadcast, completed at the model's time.
std::unique_ptr<WorkImpl> EmulatedCommunicator::do_broadcast(void* buf, const OpInfo& info) {
  return emulate(info, inner_->broadcast(buf, info.count, info.dtype, info.root));
}

// do_reduce_scatter: The inner reduce-scatter, completed at the model's time.
std::unique_ptr<WorkImpl> EmulatedCommunicator::do_reduce_scatter(const void* send_buf, void* recv_buf,
                                                                  const OpInfo& info) {
  return emulate(info, inner_->reduce_scatter(send_buf, recv_buf, info.count, info.dtype, info.op));
}

// do_allgather: The inner allgather, completed at the model's time.
std::unique_ptr<WorkImpl> EmulatedCommunicator::do_allgather(const void* send_buf, void* recv_buf,
                                                              const OpInfo& info) {
  return emulate(info, inner_->allgather(send_buf, recv_buf, info.count, info.dtype));
}

}  // namespace dtl
