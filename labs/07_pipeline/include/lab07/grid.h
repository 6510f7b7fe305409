/// @file
/// @brief Lab 07, task E: model parallel inside groups of consecutive ranks, data
/// parallel across them (grid.cc).
///
/// One grid serves both ways of splitting a model: the model-parallel group is a
/// pipeline of P stages here (Note [Pipeline x data parallel] in lab07/pipeline.h)
/// and a tensor-parallel group of T ranks in lab 08, which links this lab's library
/// and builds its TP x DP on your make_grid() and allreduce_data_parallel_gradients()
/// (Note [TP x DP] in lab08/tensor_parallel.h). The names are Megatron-LM's: the
/// model-parallel group and rank, the data-parallel group.
///
/// W = D x G ranks, G = model_size: rank r is model rank r mod G of replica r / G.
/// With W = 6, G = 3 (D = 2):
///
///     world rank    0  1  2  3  4  5
///     replica       0  0  0  1  1  1      model groups {0,1,2}, {3,4,5}
///     model rank    0  1  2  0  1  2      data groups {0,3}, {1,4}, {2,5}
#pragma once

#include <mpi.h>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_comm.h"
#include "harness/nn/model.h"

namespace dtl::lab07 {

/// @brief This rank's place in D replicas of a model split over G consecutive ranks.
struct Grid {
  Comm model_group;    ///< the G ranks of this replica (a pipeline's stages; lab 08: a tensor-parallel group); rank = model_rank
  Comm data_group;     ///< the D ranks at the same model rank, one per replica; rank = replica
  int model_rank = 0;  ///< world rank mod G: the stage (lab 08: the tensor-parallel rank)
  int replica = 0;     ///< world rank / G
  int model_size = 1;  ///< G: P stages (lab 08: T tensor-parallel ranks)
  int replicas = 1;    ///< D = world size / G
};

/// @brief Splits `world` into D model-parallel groups of G consecutive ranks, and
/// G data-parallel groups of D ranks.
///
/// Collective over `world`.
/// @param[in] world the ranks (size W).
/// @param[in] model_size G, dividing W.
/// @return this rank's grid; both communicators are owned (freed with the Grid).
/// @throws dtl::InvalidArgument naming "model_size" if it is < 1 or does not divide W
///         (on every rank, before any communication).
Grid make_grid(MPI_Comm world, int model_size);

/// @brief Averages the gradients of this rank's model (its stage, or its slices) over
/// its data-parallel group: one ReduceOp::kAvg allreduce of the flat gradient buffer
/// if the model's gradients were flattened, else one per parameter in its own dtype;
/// all issued, then all waited for. Nothing to do for a group of one.
///
/// Collective over `data`: every replica calls it once per step.
/// @param[in] data the data-parallel group (a Communicator over Grid::data_group).
/// @param[in,out] model this rank's model; its gradients become the average.
void allreduce_data_parallel_gradients(Communicator& data, nn::Model& model);

}  // namespace dtl::lab07
