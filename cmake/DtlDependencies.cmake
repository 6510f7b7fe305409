# Every dependency comes from Debian packages or the CUDA toolkit; nothing is
# downloaded at configure or build time.
include_guard(GLOBAL)

find_package(MPI REQUIRED COMPONENTS CXX)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(Threads REQUIRED)

set(DTL_HAVE_NCCL OFF)
if(DTL_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_package(NCCL)
  if(NCCL_FOUND)
    set(DTL_HAVE_NCCL ON)
  else()
    message(STATUS "dtlabs: NCCL not found, NCCL comparisons disabled (pass -DNCCL_ROOT=...)")
  endif()
endif()

# mpirun: run as root and oversubscribed without the user passing any flag.
set(DTL_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(DTL_MPIEXEC_FLAGS --oversubscribe --bind-to none)
set(DTL_MPI_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_btl_vader_single_copy_mechanism=none)
