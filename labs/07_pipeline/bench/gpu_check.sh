#!/usr/bin/env bash
# Lab 07's GPU check, prepared to run in one sitting on the GPU host (about 6
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
#      (at 2 ranks also as JSON, $OUT/bench-np2.json, for step 5)
#   3. 1F1B at 2 ranks under compute-sanitizer's memcheck, when it is
#      there (a receive read before it landed, or a sent copy freed early, shows there)
#   PyTorch's torch.distributed.pipelining (GPipe, 1F1B) on the Real rows' MLP and
#   batch (bench/torch_pipeline.py; exit status 3 = a configuration this host
#   cannot run, its JSON line says why):
#   4. torch-pipeline-np1: P = 1, the whole model as one stage (no bubble: what the
#      schedule adds to m forwards and backwards); runs on any GPU host
#      torch-pipeline-np2: P = 2 with PyTorch's own NCCL; on a one-GPU host NCCL 2.28
#      refuses the second rank, and the script says so instead of timing anything
#      torch-pipeline-np2-shared: P = 2 with the staged NCCL 2.30 preloaded into
#      PyTorch (NCCL_MULTI_RANK_GPU_ENABLE=1): the two ranks time-slice one GPU, so
#      the lines (marked shared_gpu) measure overheads, as the project's shared-GPU
#      rows do; experimental: if PyTorch does not take the preloaded NCCL, the
#      refusal above appears again
#   5. torch-vs-dtl: the 1F1B lines beside the project's Gpu/1f1b/nccl row
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
dir=build/labs/07_pipeline
script=labs/07_pipeline/bench/torch_pipeline.py

step ctest-gpu 240 bash -c "cd build && ctest -R 'lab07_reference_gpu' --output-on-failure"
step gpu-np3 120 mpirun -n 3 "$dir/lab07_reference_gpu"
for np in 1 2 4; do
  step "bench-np$np" 180 mpirun -n "$np" "$dir/lab07_bench" --benchmark_filter='Gpu/' --dtl_quick \
    --benchmark_out="$OUT/bench-np$np.json" --benchmark_out_format=json
done
if command -v compute-sanitizer >/dev/null; then
  step memcheck-np2 300 mpirun -n 2 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$dir/lab07_reference_gpu" --gtest_filter='Nccl/PipelineGpu.*1f1b_m5*'
else
  echo "no compute-sanitizer: memcheck skipped" | tee -a "$summary"
fi

# PyTorch loads its own CUDA and NCCL libraries: no LD_LIBRARY_PATH (../shared/gpu/README.md).
step torch-pipeline-np1 180 env -u LD_LIBRARY_PATH python3 "$script" --out "$OUT/torch-pipeline-np1.jsonl"
step torch-pipeline-np2 180 env -u LD_LIBRARY_PATH python3 -m torch.distributed.run --standalone \
  --nproc-per-node 2 "$script" --out "$OUT/torch-pipeline-np2.jsonl"
if [[ -e .carry/nccl/lib/libnccl.so.2 ]]; then
  step torch-pipeline-np2-shared 180 env -u LD_LIBRARY_PATH LD_PRELOAD="$PWD/.carry/nccl/lib/libnccl.so.2" \
    NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_ALGO=Ring python3 -m torch.distributed.run --standalone \
    --nproc-per-node 2 "$script" --out "$OUT/torch-pipeline-np2-shared.jsonl"
else
  echo "torch-pipeline-np2-shared    skipped: .carry/nccl was not staged" | tee -a "$summary"
fi
if [[ -e "$OUT/bench-np2.json" ]]; then
  step torch-vs-dtl 30 python3 harness/nn/bench/torch_bench_util.py compare "$OUT/bench-np2.json" \
    "$OUT/torch-pipeline-np2.jsonl" "$OUT/torch-pipeline-np2-shared.jsonl"
  cat "$OUT/torch-vs-dtl.log"
fi
cat "$summary"
