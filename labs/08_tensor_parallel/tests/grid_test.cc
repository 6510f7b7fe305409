// Lab 08, TP x DP: tensor parallel inside groups of T consecutive ranks, data
// parallel across them, on lab 07's grid (lab07/grid.h: make_grid(world, T) and
// allreduce_data_parallel_gradients(), the student's own lab-07 code). Every T that
// divides the rank count (at 4 ranks: 1 x 4, 2 x 2, 4 x 1): the groups' members, and
// a GPT trained with each replica on 1/D of the batch against one process on the
// whole batch.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "labs/08_tensor_parallel/tests/gpt_test_util.h"

namespace lab08_test {
namespace {

constexpr std::int64_t kGlobal = 12;  // divisible by D = 1, 2, 3, 4

TEST(Grid, RanksAndGroups) {
  const int W = comm().size(), w = comm().rank();
  for (int T = 1; T <= W; ++T) {
    if (W % T != 0) continue;
    lab08::Grid grid = lab08::make_grid(comm(), T);
    EXPECT_EQ(grid.model_size, T);
    EXPECT_EQ(grid.replicas, W / T);
    EXPECT_EQ(grid.model_rank, w % T);
    EXPECT_EQ(grid.replica, w / T);
    EXPECT_EQ(grid.model_group.size(), T);
    EXPECT_EQ(grid.model_group.rank(), w % T) << "rank in the tensor group must be the tensor-parallel rank";
    EXPECT_EQ(grid.data_group.size(), W / T);
    EXPECT_EQ(grid.data_group.rank(), w / T) << "rank in the data group must be the replica";
    std::vector<int> tensor_members(static_cast<std::size_t>(T)), data_members(static_cast<std::size_t>(W / T));
    MPI_Allgather(&w, 1, MPI_INT, tensor_members.data(), 1, MPI_INT, grid.model_group);
    MPI_Allgather(&w, 1, MPI_INT, data_members.data(), 1, MPI_INT, grid.data_group);
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(tensor_members[static_cast<std::size_t>(t)], (w / T) * T + t) << "tensor groups are consecutive ranks";
    }
    for (int d = 0; d < W / T; ++d) EXPECT_EQ(data_members[static_cast<std::size_t>(d)], d * T + w % T);
  }
}

TEST(Grid, TpSizeThatDoesNotDivideIsRefused) {
  const int W = comm().size();
  const lab08::Grid whole = lab08::make_grid(comm(), W);  // one replica of every rank: accepted
  EXPECT_EQ(whole.model_group.size(), W);
  for (int bad : {0, W + 1}) {
    EXPECT_TRUE(refused([&] { lab08::make_grid(comm(), bad); }, {"make_grid", "'model_size'"},
                        "model_size = T = " + std::to_string(bad) + " on " + std::to_string(W) + " ranks"));
  }
}

TEST(Grid, DataParallelGradientsAreAveragedPerSlice) {
  const int W = comm().size(), w = comm().rank();
  lab08::Grid grid = lab08::make_grid(comm(), 1);  // every rank its own replica
  dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kNonblocking);
  nn::Model model(nn::DType::kF64);
  {
    std::vector<std::unique_ptr<nn::Layer>> layers;
    layers.push_back(random_linear("fc", 2, 3, true, 1));
    model.add_unit("u", std::move(layers));
  }
  for (nn::Parameter* p : model.parameters()) {
    std::vector<double> g(static_cast<std::size_t>(p->grad.numel()));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = (w + 1.0) * static_cast<double>(i + 1);
    p->grad.copy_from(tensor_of(p->grad.shape(), g));
  }
  lab08::allreduce_data_parallel_gradients(data, model);
  for (nn::Parameter* p : model.parameters()) {
    std::vector<double> want(static_cast<std::size_t>(p->grad.numel()));
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = (W + 1.0) / 2.0 * static_cast<double>(i + 1);
    EXPECT_TRUE(close_to(want, values(p->grad), "the average over " + std::to_string(W) + " replicas of d" + p->name));
  }
}

TEST(Grid, TensorTimesDataParallelEqualsOneProcess) {
  const int W = comm().size();
  for (int T = 1; T <= W; ++T) {
    if (W % T != 0) continue;
    lab08::Grid grid = lab08::make_grid(comm(), T);
    dtl::MpiCommunicator tensor(grid.model_group, dtl::MpiMode::kNonblocking);
    dtl::MpiCommunicator data(grid.data_group, dtl::MpiMode::kNonblocking);
    const GptShape shape = gpt_shape(T, 12);
    const Trained oracle = train_oracle(shape, 7, 3, kGlobal);
    const Trained mine = train_parallel(tensor, shape, 7, 3, kGlobal, &data, grid.replica, grid.replicas);
    EXPECT_TRUE(params_match(oracle.model.parameters(), mine.model.parameters(), false, T, grid.model_rank,
                             "the GPT after 3 steps, " + std::to_string(W / T) + " replicas x T = " +
                                 std::to_string(T) + " (replica " + std::to_string(grid.replica) + ")",
                             kF32Tol));
  }
}

}  // namespace
}  // namespace lab08_test
