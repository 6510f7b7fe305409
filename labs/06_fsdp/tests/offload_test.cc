// Task E: CPU offload (Note [CPU offload]).
//
// Four things are checked, each against something the trainer does not report
// about itself:
//   - the training is one process's (the fp32 oracle), and bit for bit FSDP's
//     without offload: the copies are exact, so nothing may change;
//   - where the bytes live, from the two MemoryTrackers: every shard, gradient
//     shard and optimizer byte on the host tracker (Device::kPinnedHost), none on
//     the compute device's (Device::kCpu), which holds only the gathered units;
//   - no collective reads or writes host memory: a recording wrapper keeps every
//     buffer the trainer hands the backend, and none may overlap a host tensor;
//   - the copies per step are the closed form (8S to the device, 4S back);
//   - the device's peaks at prefetch k are the schedule's closed form, exactly;
//   - a checkpoint written with offload resumes with or without it, at any W' <= W.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "labs/06_fsdp/tests/fsdp_test_util.h"

namespace lab06_test {
namespace {

using lab06::ShardingMode;
using C = nn::MemoryCategory;

lab06::ShardedOptions offload_options(OptKind opt, int prefetch, const std::vector<lab06::FlatLayout>& layouts) {
  lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, opt, prefetch, layouts);
  o.offload = true;
  return o;
}

// kSteps steps of FSDP with or without offload; the gathered parameters.
std::vector<float> fsdp_run(ModelKind kind, OptKind opt, int prefetch, bool offload) {
  auto backend = mpi_backend(comm());
  nn::Model model = make_model(kind, 5 + static_cast<std::uint64_t>(comm().rank()) * 1000);
  lab06::ShardedOptions o = options_for(ShardingMode::kFsdp, opt, prefetch, test_layouts(model, comm().size()));
  o.offload = offload;
  lab06::ShardedTrainer trainer(*backend, model, o);
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), comm().size());
    trainer.step(b.x, b.y);
  }
  return gathered_parameters(trainer, comm());
}

// MLP and GPT, SGD and AdamW, prefetch 0 and 1: the oracle's parameters within the
// stated tolerance, and exactly those of FSDP without offload.
TEST(Offload, EqualsOneProcessAndFsdpWithoutOffload) {
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    for (OptKind opt : {OptKind::kSgd, OptKind::kAdamW}) {
      const std::vector<float> expected = single_process(kind, opt, 5);
      for (int prefetch : {0, 1}) {
        const std::string what = std::string("offload ") + model_name(kind) + " " + opt_name(opt) + " prefetch " +
                                 std::to_string(prefetch);
        const std::vector<float> got = fsdp_run(kind, opt, prefetch, true);
        EXPECT_TRUE(close_to(expected, got, what));
        const std::vector<float> plain = fsdp_run(kind, opt, prefetch, false);
        ASSERT_EQ(got.size(), plain.size()) << what;
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (got[i] != plain[i]) {
            ADD_FAILURE() << "rank " << comm().rank() << ", " << what << ": parameter element " << i << " is "
                          << got[i] << ", FSDP without offload has " << plain[i]
                          << " (the copies are exact: offload must not change a bit)";
            break;
          }
        }
      }
    }
  }
}

// Prefetch 0, two steps. With S = N/W and L the largest padded unit:
//   host (kPinnedHost): parameters 4S, gradients 4S, optimizer 8S (AdamW) or 4S (SGD
//                       momentum), at every moment from the constructor on;
//   device (kCpu):      parameters peak 4L, gradients peak 4L, optimizer 0; between
//                       steps nothing of either.
TEST(Offload, ShardsAndStateLiveOnTheHostOnly) {
  auto backend = mpi_backend(comm());
  const int size = comm().size();
  nn::MemoryTracker& device = nn::memory_tracker(nn::Device::kCpu);
  nn::MemoryTracker& host = nn::memory_tracker(nn::Device::kPinnedHost);
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    for (OptKind opt : {OptKind::kSgd, OptKind::kAdamW}) {
      const nn::MemorySnapshot dev0 = device.snapshot(), host0 = host.snapshot();
      auto dev_peak = [&](C c) { return device.peak(c) - dev0.current[static_cast<int>(c)]; };
      auto dev_now = [&](C c) { return device.current(c) - dev0.current[static_cast<int>(c)]; };
      auto host_peak = [&](C c) { return host.peak(c) - host0.current[static_cast<int>(c)]; };
      auto host_now = [&](C c) { return host.current(c) - host0.current[static_cast<int>(c)]; };
      nn::Model model = make_model(kind, 1);
      const auto layouts = test_layouts(model, size);
      const Sizes s = sizes_of(layouts);
      const std::int64_t shard = s.n / size, state = (opt == OptKind::kAdamW ? 8 : 4) * shard;
      const std::string what = std::string("offload ") + model_name(kind) + " " + opt_name(opt) + " at W = " +
                               std::to_string(size) + " (S = " + std::to_string(shard) +
                               ", L = " + std::to_string(s.largest) + ")";
      lab06::ShardedTrainer trainer(*backend, model, offload_options(opt, 0, layouts));
      device.reset_peak();
      host.reset_peak();
      for (int step = 0; step < 2; ++step) {
        const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), size);
        trainer.step(b.x, b.y);
      }
      EXPECT_EQ(host_peak(C::kParameters), 4 * shard) << what << ": host parameter bytes (the shard, 4S)";
      EXPECT_EQ(host_now(C::kParameters), 4 * shard) << what << ": host parameter bytes between steps";
      EXPECT_EQ(host_peak(C::kGradients), 4 * shard) << what << ": host gradient bytes (the gradient shard, 4S)";
      EXPECT_EQ(host_now(C::kOptimizerState), state) << what << ": host optimizer bytes";
      EXPECT_EQ(dev_peak(C::kParameters), 4 * s.largest) << what << ": device parameter bytes (one unit, 4L)";
      EXPECT_EQ(dev_peak(C::kGradients), 4 * s.largest) << what << ": device gradient bytes (one unit, 4L)";
      EXPECT_EQ(dev_peak(C::kOptimizerState), 0) << what << ": optimizer state on the device";
      EXPECT_EQ(dev_now(C::kParameters), 0) << what << ": device parameter bytes between steps";
      EXPECT_EQ(dev_now(C::kGradients), 0) << what << ": device gradient bytes between steps";
      if (comm().rank() == 0) {
        std::printf("[ info ] %s: host params %lld B grads %lld B optimizer %lld B (closed form 4S, 4S, %lld); "
                    "device peak params %lld B grads %lld B (closed form 4L = %lld)\n",
                    what.c_str(), static_cast<long long>(host_peak(C::kParameters)),
                    static_cast<long long>(host_peak(C::kGradients)),
                    static_cast<long long>(host_now(C::kOptimizerState)), static_cast<long long>(state),
                    static_cast<long long>(dev_peak(C::kParameters)), static_cast<long long>(dev_peak(C::kGradients)),
                    static_cast<long long>(4 * s.largest));
      }
    }
  }
}

// Prefetch 0, 1 and 2, f32 and bf16 gathers, two steps: the compute device's peaks
// are the closed form of the schedule, exactly. With prefetch k, 1 + k consecutive
// units are gathered or in flight at once (forward: u..u+k; backward: u..u-k), and
// as many full gradients live (the unit in backward and the k reduce-scatters left in
// flight). With W_k(x) = the largest sum of x over 1 + k consecutive units
// (window_max), L_u a unit's padded size and S_u = L_u / W its shard:
//   device (kCpu):      parameters 4 W_k(L), gradients 4 W_k(L), optimizer 0,
//                       communication 2 W_k(S + L) with 16-bit gathers (the two
//                       bf16 buffers of every gather in flight), 0 with f32; a
//                       trainer that widens a prefetched gather as soon as it sees it
//                       complete frees those buffers sooner, so this one is a range:
//                       from one unit's 2 (S_u + L_u) up to 2 W_k(S + L);
//   host (kPinnedHost): 4S, 4S, 8S, whatever k is;
//   copies:             8S to the device and 4S back per step, whatever k is.
// The brief's "largest unit + k units" bound is W_k(L) <= (1 + k) L.
TEST(Offload, DevicePeakIsTheScheduleClosedFormAtEveryPrefetch) {
  auto backend = mpi_backend(comm());
  const int size = comm().size();
  nn::MemoryTracker& device = nn::memory_tracker(nn::Device::kCpu);
  nn::MemoryTracker& host = nn::memory_tracker(nn::Device::kPinnedHost);
  for (ModelKind kind : {ModelKind::kOddMlp, ModelKind::kGpt}) {
    for (nn::DType pd : {nn::DType::kF32, nn::DType::kBF16}) {
      for (int k : {0, 1, 2}) {
        const nn::MemorySnapshot dev0 = device.snapshot(), host0 = host.snapshot();
        auto dev_peak = [&](C c) { return device.peak(c) - dev0.current[static_cast<int>(c)]; };
        auto dev_now = [&](C c) { return device.current(c) - dev0.current[static_cast<int>(c)]; };
        auto host_peak = [&](C c) { return host.peak(c) - host0.current[static_cast<int>(c)]; };
        nn::Model model = make_model(kind, 3);
        const auto layouts = test_layouts(model, size);
        const Sizes s = sizes_of(layouts);
        const std::int64_t shard = s.n / size;
        std::vector<std::int64_t> comm_per_unit;
        for (const std::int64_t l : s.padded) comm_per_unit.push_back(2 * (l / size + l));
        const std::int64_t want_full = 4 * window_max(s.padded, k);
        const std::int64_t want_comm = pd == nn::DType::kF32 ? 0 : window_max(comm_per_unit, k);
        lab06::ShardedOptions o = offload_options(OptKind::kAdamW, k, layouts);
        o.param_dtype = pd;
        lab06::ShardedTrainer trainer(*backend, model, o);
        device.reset_peak();
        host.reset_peak();
        const std::string what = std::string("offload ") + model_name(kind) + ", " + dtype_name(pd) +
                                 " gathers, prefetch " + std::to_string(k) + ", W = " + std::to_string(size) +
                                 " (S = " + std::to_string(shard) + ")";
        for (int step = 0; step < 2; ++step) {
          const Batch b = rank_batch(kind, step, kGlobalBatch, comm().rank(), size);
          const lab06::StepResult r = trainer.step(b.x, b.y);
          EXPECT_EQ(r.host_to_device_bytes, 8 * shard) << what << ", step " << step << ": host-to-device bytes (8S)";
          EXPECT_EQ(r.device_to_host_bytes, 4 * shard) << what << ", step " << step << ": device-to-host bytes (4S)";
        }
        EXPECT_EQ(dev_peak(C::kParameters), want_full) << what << ": device parameter peak (4 W_k(L))";
        EXPECT_EQ(dev_peak(C::kGradients), want_full) << what << ": device gradient peak (4 W_k(L))";
        // A gather widened as soon as it is seen complete (before its unit's hook) frees
        // its 16-bit buffers early: fewer bytes, as long as every gather had its own.
        EXPECT_LE(dev_peak(C::kCommunication), want_comm)
            << what << ": device communication peak (at most 2 W_k(S + L) with 16-bit gathers, else 0)";
        EXPECT_GE(dev_peak(C::kCommunication), want_comm == 0 ? 0 : window_max(comm_per_unit, 0))
            << what << ": device communication peak (at least one gather's 16-bit buffers, 2 (S_u + L_u))";
        EXPECT_EQ(dev_peak(C::kOptimizerState), 0) << what << ": optimizer state on the device";
        EXPECT_EQ(host_peak(C::kParameters), 4 * shard) << what << ": host parameter bytes (4S)";
        EXPECT_EQ(host_peak(C::kGradients), 4 * shard) << what << ": host gradient bytes (4S)";
        EXPECT_EQ(host_peak(C::kOptimizerState), 8 * shard) << what << ": host optimizer bytes (8S)";
        for (C c : {C::kParameters, C::kGradients, C::kCommunication}) {
          EXPECT_EQ(dev_now(c), 0) << what << ": device " << nn::to_string(c) << " bytes left between steps";
        }
        if (comm().rank() == 0) {
          std::printf("[ info ] %s: device peak params %lld B, grads %lld B, comm %lld B (closed form 4 W_k(L) = %lld, "
                      "2 W_k(S + L) = %lld; bound 4(1 + k)L = %lld); host %lld + %lld + %lld B (4S, 4S, 8S)\n",
                      what.c_str(), static_cast<long long>(dev_peak(C::kParameters)),
                      static_cast<long long>(dev_peak(C::kGradients)),
                      static_cast<long long>(dev_peak(C::kCommunication)), static_cast<long long>(want_full),
                      static_cast<long long>(want_comm), static_cast<long long>(4 * (1 + k) * s.largest),
                      static_cast<long long>(host_peak(C::kParameters)), static_cast<long long>(host_peak(C::kGradients)),
                      static_cast<long long>(host_peak(C::kOptimizerState)));
        }
      }
    }
  }
}

// Whether [p, p + n) overlaps tensor t's elements.
bool overlaps(const void* p, std::size_t n, const nn::Tensor& t) {
  if (p == nullptr || n == 0 || !t.defined() || t.raw() == nullptr || t.bytes() == 0) return false;
  const auto* a = static_cast<const std::uint8_t*>(p);
  const auto* b = static_cast<const std::uint8_t*>(t.raw());
  return a < b + t.bytes() && b < a + n;
}

// f32 and bf16 gathers, prefetch 1: every buffer of every collective lies outside
// every host tensor (shard, gradient shard, optimizer state); the trainer's copy
// counts are 8S to the device and 4S back per step; the collectives are FSDP's
// (Note [ZeRO stages]: 2 all-gathers and 1 reduce-scatter per unit).
TEST(Offload, CollectivesNeverTouchHostMemoryAndCopiesAreTheClosedForm) {
  for (nn::DType pd : {nn::DType::kF32, nn::DType::kBF16}) {
    auto inner = mpi_backend(comm());
    RecordingCommunicator recording(*inner);
    nn::Model model = make_model(ModelKind::kGpt, 2);
    const auto layouts = test_layouts(model, comm().size());
    const Sizes s = sizes_of(layouts);
    const std::int64_t shard = s.n / comm().size();
    lab06::ShardedOptions o = offload_options(OptKind::kAdamW, 1, layouts);
    o.param_dtype = pd;
    lab06::ShardedTrainer trainer(recording, model, o);
    const std::string what = std::string("offload, ") + dtype_name(pd) + " gathers, GPT at W = " +
                             std::to_string(comm().size()) + " (S = " + std::to_string(shard) + ")";
    std::vector<nn::Tensor> host_tensors;
    for (int u = 0; u < trainer.unit_count(); ++u) {
      const lab06::UnitState& st = trainer.unit(u);
      EXPECT_EQ(st.shard.device(), nn::Device::kPinnedHost) << what << ": unit " << st.name << "'s shard";
      EXPECT_EQ(st.grad_shard.device(), nn::Device::kPinnedHost) << what << ": unit " << st.name << "'s gradient shard";
      host_tensors.push_back(st.shard);
      host_tensors.push_back(st.grad_shard);
      if (st.adamw) {
        EXPECT_EQ(st.adamw->m().device(), nn::Device::kPinnedHost) << what << ": unit " << st.name << "'s AdamW m";
        host_tensors.push_back(st.adamw->m());
        host_tensors.push_back(st.adamw->v());
      }
    }
    for (int step = 0; step < 2; ++step) {
      recording.clear();
      const Batch b = rank_batch(ModelKind::kGpt, step, kGlobalBatch, comm().rank(), comm().size());
      const lab06::StepResult r = trainer.step(b.x, b.y);
      const std::string at = what + ", step " + std::to_string(step);
      EXPECT_EQ(r.host_to_device_bytes, 2 * 4 * shard) << at << ": host-to-device bytes (8S: two gathers per unit)";
      EXPECT_EQ(r.device_to_host_bytes, 4 * shard) << at << ": device-to-host bytes (4S: one gradient shard per unit)";
      EXPECT_EQ(recording.count(dtl::CollectiveKind::kAllgather), 2 * trainer.unit_count()) << at;
      EXPECT_EQ(recording.count(dtl::CollectiveKind::kReduceScatter), trainer.unit_count()) << at;
      EXPECT_EQ(recording.count(dtl::CollectiveKind::kAllreduce), 0) << at;
      int index = 0;
      for (const auto& op : recording.ops()) {
        for (const nn::Tensor& t : host_tensors) {
          const bool reads = overlaps(op.send, op.send_bytes, t), writes = overlaps(op.recv, op.recv_bytes, t);
          if (reads || writes) {
            ADD_FAILURE() << "rank " << comm().rank() << ", " << at << ": operation " << index << " ("
                          << dtl::collective_name(op.kind) << ") " << (reads ? "reads" : "writes")
                          << " host memory (a shard, gradient shard or optimizer state): a collective may only "
                             "use device buffers (Note [CPU offload])";
            break;
          }
        }
        ++index;
      }
    }
  }
}

// A checkpoint does not care where the shards lived. Train 2 steps with offload at W,
// save, train 2 more: the run that never stopped. Load at every W' <= W, with and
// without offload, and train the same 2 steps: bit for bit the never-stopped run at
// W' = W (either way: the copies are exact), within the tolerance of one process's 4
// steps at every W'. With offload the load fills the host tensors in place: the
// shards and the AdamW state are still on the host, and the device holds nothing.
TEST(OffloadCheckpoint, ResumesWithAndWithoutOffload) {
  constexpr int kHalf = 2;
  const ModelKind kind = ModelKind::kOddMlp;
  ScratchDir dir;
  const std::vector<float> never_stopped = run_saving_halfway(kind, kHalf, dir.path(), [](nn::Model& model) {
    return offload_options(OptKind::kAdamW, 1, test_layouts(model, comm().size()));
  });
  const std::vector<float> oracle = single_process(kind, OptKind::kAdamW, 3, 2 * kHalf);
  nn::MemoryTracker& device = nn::memory_tracker(nn::Device::kCpu);
  nn::MemoryTracker& host = nn::memory_tracker(nn::Device::kPinnedHost);
  for (int w2 = 1; w2 <= comm().size(); ++w2) {
    SubComm sub(w2);
    if (!sub.member()) continue;
    for (bool offload : {true, false}) {
      auto backend = mpi_backend(sub.get());
      const nn::MemorySnapshot dev0 = device.snapshot(), host0 = host.snapshot();
      nn::Model model = make_model(kind, 99);
      const auto layouts = test_layouts(model, w2);
      lab06::ShardedOptions o = offload_options(OptKind::kAdamW, 0, layouts);
      o.offload = offload;
      lab06::ShardedTrainer trainer(*backend, model, o);
      lab06::load_checkpoint(trainer, dir.path());
      const std::string what = "saved with offload at W = " + std::to_string(comm().size()) + ", loaded " +
                               (offload ? "with" : "without") + " offload at W' = " + std::to_string(w2);
      if (offload) {
        const std::int64_t shard = sizes_of(layouts).n / w2;
        for (int u = 0; u < trainer.unit_count(); ++u) {
          const lab06::UnitState& st = trainer.unit(u);
          EXPECT_EQ(st.shard.device(), nn::Device::kPinnedHost) << what << ": unit " << st.name << "'s shard";
          EXPECT_EQ(st.adamw->v().device(), nn::Device::kPinnedHost) << what << ": unit " << st.name << "'s AdamW v";
        }
        EXPECT_EQ(host.current(C::kParameters) - host0.current[static_cast<int>(C::kParameters)], 4 * shard)
            << what << ": host parameter bytes after the load (4S')";
        EXPECT_EQ(host.current(C::kOptimizerState) - host0.current[static_cast<int>(C::kOptimizerState)], 8 * shard)
            << what << ": host optimizer bytes after the load (8S')";
        EXPECT_EQ(device.current(C::kParameters) - dev0.current[static_cast<int>(C::kParameters)], 0)
            << what << ": device parameter bytes after the load";
      }
      for (int step = kHalf; step < 2 * kHalf; ++step) {
        const Batch b = rank_batch(kind, step, kGlobalBatch, backend->rank(), w2);
        trainer.step(b.x, b.y);
      }
      const std::vector<float> got = gathered_parameters(trainer, sub.get());
      EXPECT_TRUE(close_to(oracle, got, what));
      if (w2 == comm().size()) {
        EXPECT_TRUE(got == never_stopped) << what << ": rank " << comm().rank()
                                          << ": not bit-identical to the run that never stopped";
      }
    }
  }
}

TEST(OffloadErrors, OnlyFsdpOffloads) {
  auto backend = mpi_backend(comm());
  for (ShardingMode mode : {ShardingMode::kZero1, ShardingMode::kZero2}) {
    nn::Model model = make_model(ModelKind::kOddMlp, 1);
    lab06::ShardedOptions o = options_for(mode, OptKind::kAdamW, 0, test_layouts(model, comm().size()));
    o.offload = true;
    std::string m = "no exception";
    try {
      lab06::ShardedTrainer t(*backend, model, o);
    } catch (const dtl::InvalidArgument& e) {
      m = e.what();
    }
    EXPECT_NE(m.find("options.offload"), std::string::npos) << lab06::sharding_mode_name(mode) << ": " << m;
    EXPECT_NE(m.find("rank " + std::to_string(comm().rank())), std::string::npos)
        << "the message should name the rank: " << m;
  }
}

}  // namespace
}  // namespace lab06_test
