#!/usr/bin/env bash
# Lab 07's GPU check, prepared to run in one sitting on the GPU host (about 4
# minutes; see ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build 07 && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     labs/07_pipeline/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end. The CPU stand-in of the same ordering
# (StreamOrder.* in lab07_*_test) runs in CI, not here.
#   1. lab07_reference_gpu at 1 and 2 ranks through ctest (2 share the GPU through
#      NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 from the staged environment), and
#      once more by hand at 3 ranks (a middle stage with both neighbours)
#   2. lab07_bench's GPU rows Gpu/gpipe/nccl and Gpu/1f1b/nccl at 1, 2 and 4 ranks
#   3. 1F1B at 2 ranks under compute-sanitizer's memcheck, when it is
#      there (a receive read before it landed, or a sent copy freed early, shows there)
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
dir=build/labs/07_pipeline

step ctest-gpu 240 bash -c "cd build && ctest -R 'lab07_reference_gpu' --output-on-failure"
step gpu-np3 120 mpirun -n 3 "$dir/lab07_reference_gpu"
for np in 1 2 4; do
  step "bench-np$np" 180 mpirun -n "$np" "$dir/lab07_bench" --benchmark_filter='Gpu/' --dtl_quick
done
if command -v compute-sanitizer >/dev/null; then
  step memcheck-np2 300 mpirun -n 2 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$dir/lab07_reference_gpu" --gtest_filter='Nccl/PipelineGpu.*1f1b_m5*'
else
  echo "no compute-sanitizer: memcheck skipped" | tee -a "$summary"
fi
cat "$summary"
