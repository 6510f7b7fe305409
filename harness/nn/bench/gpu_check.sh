#!/usr/bin/env bash
# The training core's GPU check, prepared to run in one sitting on the GPU host
# (a few minutes; see ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     harness/nn/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end.
#   1. nn_gpu_test: every layer, the loss, the optimizers, convert() and both
#      models on the GPU against the CPU (layers_gpu_test.cc), and cuda_ops
#   2. the same under compute-sanitizer: memcheck (out-of-bounds, misaligned),
#      then synccheck (warp shuffles with lanes missing, __syncthreads misuse)
#   3. dtl_train gpt --device cuda, the whole training loop on the GPU (where the
#      staging carried build/examples/dtl_train; stage-deps.sh copies *gpu*, *nccl*
#      and *_bench binaries, so it may not have)
#   4. one GPT training step beside PyTorch (eager fp32 and bf16 autocast):
#      tokens/s, ms/step, peak memory, bench/torch_gpt_step.py with the project's
#      dtl_nn_gpu_step; the table is $OUT/torch-gpt-step.log
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh

test=build/harness/nn/nn_gpu_test
step nn-gpu-test 120 bash -c "cd build && ctest -R nn_gpu_test --output-on-failure"
step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 1 "$test"
step synccheck 300 compute-sanitizer --tool synccheck --error-exitcode 1 "$test" --gtest_filter='LayersGpu.*'
if [[ -x build/examples/dtl_train ]]; then
  step train-gpt-gpu 300 build/examples/dtl_train gpt --device cuda
else
  echo "train-gpt-gpu                skipped: build/examples/dtl_train was not staged" | tee -a "$summary"
fi
# PyTorch loads its own CUDA libraries (no LD_LIBRARY_PATH); the project's binary gets the staged ones.
step torch-gpt-step 400 env -u LD_LIBRARY_PATH DTL_LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
  python3 harness/nn/bench/torch_gpt_step.py --dtl build/harness/nn/dtl_nn_gpu_step
cat "$summary"
