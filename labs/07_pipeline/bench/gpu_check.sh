#!/usr/bin/env bash
# Lab 07's GPU check, prepared to run in one sitting on the GPU host (see
# ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build 07 && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     labs/07_pipeline/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end.
#   PyTorch's torch.distributed.pipelining (GPipe, 1F1B) on the Real rows' MLP and
#   batch (bench/torch_pipeline.py; exit status 3 = a configuration this host
#   cannot run, its JSON line says why):
#   1. torch-pipeline-np1: P = 1, the whole model as one stage (no bubble: what the
#      schedule adds to m forwards and backwards); runs on any GPU host
#   2. torch-pipeline-np2: P = 2 with PyTorch's own NCCL; on a one-GPU host NCCL 2.28
#      refuses the second rank, and the script says so instead of timing anything
#   3. torch-pipeline-np2-shared: P = 2 with the staged NCCL 2.30 preloaded into
#      PyTorch (NCCL_MULTI_RANK_GPU_ENABLE=1): the two ranks time-slice one GPU, so
#      the lines (marked shared_gpu) measure overheads, as the project's shared-GPU
#      rows do; experimental: if PyTorch does not take the preloaded NCCL, step 2's
#      refusal appears again
#   4. torch-vs-dtl: the 1F1B lines beside the project's Gpu/1f1b/nccl row, when a
#      step above wrote $OUT/bench-np2.json (lab07_bench --benchmark_out)
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
script=labs/07_pipeline/bench/torch_pipeline.py

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
