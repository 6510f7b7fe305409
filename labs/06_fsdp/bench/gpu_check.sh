#!/usr/bin/env bash
# Lab 06's GPU check, prepared to run in one sitting on the GPU host (about 5
# minutes; see ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build 06 && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     labs/06_fsdp/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end. The CPU stand-in of the same ordering
# (StreamOrder.* in lab06_*_test) runs in CI, not here: the staging carries GPU,
# NCCL and benchmark binaries only.
#   1. lab06_reference_gpu at 1 and 2 ranks (2 share the GPU through NCCL >= 2.30,
#      NCCL_MULTI_RANK_GPU_ENABLE=1 from the staged environment), through ctest
#   2. lab06_bench's GPU row Gpu/fsdp+prefetch1/nccl at 1 and 2 ranks
#   3. FSDP with prefetch 2 once more at 2 ranks under compute-sanitizer's memcheck,
#      when it is there (a unit freed while a collective still uses it shows there)
#   4. PyTorch's FSDP2 (fully_shard, the row's prefetch) and DDP on the same model
#      and batch, one rank (bench/torch_fsdp.py; PyTorch's own NCCL 2.28 refuses two
#      ranks on one GPU), then torch-vs-dtl.log: step time, tokens/s and peak memory
#      beside the np1 row's (bench-np1.json)
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
dir=build/labs/06_fsdp

step ctest-gpu 240 bash -c "cd build && ctest -R 'lab06_reference_gpu' --output-on-failure"
for np in 1 2; do
  step "bench-np$np" 180 mpirun -n "$np" "$dir/lab06_bench" --benchmark_filter='Gpu/' --dtl_quick \
    --benchmark_out="$OUT/bench-np$np.json" --benchmark_out_format=json
done
if command -v compute-sanitizer >/dev/null; then
  step memcheck-np2 300 mpirun -n 2 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$dir/lab06_reference_gpu" --gtest_filter='Nccl/FsdpGpu.*fsdp_p2*'
else
  echo "no compute-sanitizer: memcheck skipped" | tee -a "$summary"
fi
# PyTorch loads its own CUDA and NCCL libraries: no LD_LIBRARY_PATH (../shared/gpu/README.md).
step torch-fsdp-np1 240 env -u LD_LIBRARY_PATH python3 labs/06_fsdp/bench/torch_fsdp.py \
  --out "$OUT/torch-fsdp-np1.jsonl"
step torch-vs-dtl 30 python3 harness/nn/bench/torch_bench_util.py compare "$OUT/bench-np1.json" \
  "$OUT/torch-fsdp-np1.jsonl"
cat "$OUT/torch-vs-dtl.log" "$summary"
