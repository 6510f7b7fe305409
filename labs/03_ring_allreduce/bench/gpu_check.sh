#!/usr/bin/env bash
# Lab 03's GPU check, prepared to run in one sitting on the GPU host (about 8
# minutes; see ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     labs/03_ring_allreduce/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end.
#   1. ctest -R 'gpu|nccl' -LE student (every GPU and NCCL test, 1-4 ranks), twice
#   2. lab03_bench's GPU rows at 1 rank (reduce-copy, virtual ring; the ring as
#      a CUDA Graph in a step of its own)
#   3. its IPC ring rows (task G, and G2's step flags) and NCCL rows at 2 and 4
#      ranks sharing the GPU: plain, with NCCL_MAX_CTAS=1, and under MPS
#      (nvidia-cuda-mps-control -d)
#   4. PyTorch's torch.add on the same GPU (torch_anchor.py)
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
here="$(cd "$(dirname "$0")" && pwd)"

step ctest-1 240 bash -c "cd build && ctest -R 'gpu|nccl' -LE student --output-on-failure"
step ctest-2 240 bash -c "cd build && ctest -R 'gpu|nccl' -LE student --output-on-failure"
bench=build/labs/03_ring_allreduce/lab03_bench
step bench-np1 120 mpirun -n 1 "$bench" --benchmark_filter='Gpu(ReduceCopy|VirtualRing/)'
step bench-np1-graph 120 mpirun -n 1 "$bench" --benchmark_filter='GpuVirtualRingGraph'
# Task G2's rows (step flags: stream waits on other processes' flags, never run on a
# GPU before) in steps of their own, so that a wait that is never met (each call
# aborts the job after 20 s) cannot take task G's and NCCL's rows with it.
for np in 2 4; do
  step "bench-np$np" 120 mpirun -n "$np" "$bench" --benchmark_filter='GpuIpcRing/'
  step "bench-np$np-flags" 90 mpirun -n "$np" "$bench" --benchmark_filter='GpuIpcRingFlags'
  step "bench-np$np-ctas1" 120 mpirun -n "$np" -x NCCL_MAX_CTAS=1 "$bench" --benchmark_filter='GpuIpcRing/'
done
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && {
    for np in 2 4; do
      step "bench-np$np-mps" 120 mpirun -n "$np" -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY \
        "$bench" --benchmark_filter='GpuIpcRing'
    done
    echo quit | nvidia-cuda-mps-control
  }
else
  echo "no nvidia-cuda-mps-control: MPS rows skipped" | tee -a "$summary"
fi
step torch-anchor 120 env -u LD_LIBRARY_PATH python3 "$here/torch_anchor.py"
cat "$summary"
