// Lab 07: pipeline x data parallel (task E). D pipelines of P stages over the
// world: every split that divides the rank count (at 4 ranks: 1 x 4, 2 x 2, 4 x 1),
// each replica on 1/D of the batch, gradients averaged per stage over its
// data-parallel group, against one process on the whole batch.
//
// The pipelines here are the test's own (naive_step(): one batch, blocking sends
// down a chain), not your PipelineStage: a fault in task C costs task C's items only.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "harness/comm/mpi_communicator.h"
#include "harness/error.h"
#include "labs/07_pipeline/tests/pipeline_test_util.h"

namespace lab07_test {
namespace {

constexpr std::int64_t kGlobal = 12;  // divisible by D = 1, 2, 3, 4 (and 6 in the hidden tests)

TEST(Grid, RanksAndGroups) {
  const int W = comm().size(), r = comm().rank();
  for (int P = 1; P <= W; ++P) {
    if (W % P != 0) continue;
    lab07::Grid grid = lab07::make_grid(comm(), P);
    EXPECT_EQ(grid.model_size, P);
    EXPECT_EQ(grid.replicas, W / P);
    EXPECT_EQ(grid.model_rank, r % P);
    EXPECT_EQ(grid.replica, r / P);
    EXPECT_EQ(grid.model_group.size(), P);
    EXPECT_EQ(grid.model_group.rank(), r % P) << "rank in the pipeline must be the stage";
    EXPECT_EQ(grid.data_group.size(), W / P);
    EXPECT_EQ(grid.data_group.rank(), r / P) << "rank in the data group must be the replica";
    // Who is in my data group: the world ranks of the same stage.
    std::vector<int> members(static_cast<std::size_t>(W / P));
    MPI_Allgather(&r, 1, MPI_INT, members.data(), 1, MPI_INT, grid.data_group);
    for (int d = 0; d < W / P; ++d) EXPECT_EQ(members[static_cast<std::size_t>(d)], d * P + r % P);
  }
}

TEST(Grid, ModelSizesThatDoNotDivideTheWorldAreRefused) {
  const int W = comm().size();
  for (int bad : {0, W + 1}) {
    try {
      lab07::make_grid(comm(), bad);
      ADD_FAILURE() << "make_grid(world of " << W << ", model_size = " << bad << ") did not throw";
    } catch (const dtl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("model_size"), std::string::npos) << e.what();
    }
  }
}

void expect_grid_equals_one_process(ModelKind kind, int P) {
  const int W = comm().size();
  lab07::Grid grid = lab07::make_grid(comm(), P);
  const int D = grid.replicas;
  const std::int64_t rows = kGlobal / D;
  nn::Model whole = make_model(kind, 3);
  const nn::Stage stage = stage_of(whole, even_cut(5, P), grid.model_rank, input_shape(kind, rows));
  nn::Model model = std::move(whole).slice(stage.begin, stage.end);
  const nn::Tensor values = model.flatten_values();
  const nn::Tensor grads = model.flatten_grads();
  nn::Sgd sgd(kSgd, values.numel());
  dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kThread);
  constexpr int kSteps = 3;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = make_batch(kind, step, kGlobal, grid.replica * rows, (grid.replica + 1) * rows);
    naive_step(grid.model_group, model, stage, b);
    lab07::allreduce_data_parallel_gradients(data, model);
    sgd.step(values.span<float>(), grads.span<float>());
  }
  const Oracle oracle = run_oracle(kind, 3, kSteps, kGlobal);
  EXPECT_TRUE(close_to(unit_values(oracle.model, stage.begin, stage.end), values_of(model),
                       "stage " + std::to_string(grid.model_rank) + " of replica " + std::to_string(grid.replica) +
                           " (" + std::to_string(D) + " x " + std::to_string(P) + " on " + std::to_string(W) +
                           " ranks)"));
}

TEST(Grid, PipelinesTimesDataParallelEqualOneProcess) {
  const int W = comm().size();
  for (int P = 1; P <= W; ++P) {
    if (W % P != 0) continue;
    expect_grid_equals_one_process(ModelKind::kMlp, P);
    expect_grid_equals_one_process(ModelKind::kGpt, P);
  }
}

// The per-parameter path: a stage whose gradients were not flattened.
TEST(Grid, UnflattenedGradientsAreAveragedToo) {
  const int W = comm().size(), r = comm().rank();
  lab07::Grid grid = lab07::make_grid(comm(), 1);  // W replicas of one stage
  dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kThread);
  nn::Model model = make_model(ModelKind::kMlp, 3);
  for (nn::Parameter* p : model.parameters()) {
    for (float& g : p->grad.span<float>()) g = static_cast<float>(r + 1);
  }
  lab07::allreduce_data_parallel_gradients(data, model);
  const float mean = static_cast<float>(W + 1) / 2.0f;  // (1 + 2 + ... + W) / W
  for (const nn::Parameter* p : model.parameters()) {
    for (float g : p->grad.span<float>()) {
      ASSERT_EQ(g, mean) << "rank " << r << ": " << p->name;
    }
  }
}

}  // namespace
}  // namespace lab07_test
