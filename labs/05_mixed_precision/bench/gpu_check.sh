#!/usr/bin/env bash
# Lab 05's GPU check, prepared to run in one sitting on the GPU host (about 5
# minutes; see ../shared/gpu/README.md). Build and stage here first:
#     ./dtl build 05 && ../shared/gpu/stage-deps.sh --build
# then, on the GPU host from the project's root, with $OUT the folder that comes back:
#     labs/05_mixed_precision/bench/gpu_check.sh
# Each step has its own timeout and log under $OUT; the script goes on after a
# failure and prints a summary at the end.
#   1. lab 05's GPU tests (reference build) through ctest: GpuHalf.* and GpuNccl.*
#      at 1 and 2 ranks (2 ranks share the GPU: NCCL 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1)
#   2. the same binary at 2 ranks with NCCL_DEBUG=WARN, GpuNccl.* only, twice (a race
#      between the compute stream and NCCL's shows as a flaky run)
#   3. GpuNccl.* under compute-sanitizer (memcheck) at 1 rank
#   4. the benchmark's Gpu/nccl rows (16-bit vs fp32 bucket averaging) at 1 and 2 ranks
#   5. PyTorch on the same GPU, one rank (bench/torch_amp.py; its own NCCL 2.28 refuses
#      two ranks on one GPU): the same buckets averaged in f16/bf16/f32, and torch.amp
#      steps of the same MLP (fp16 + GradScaler, bf16, fp32), then torch-vs-dtl.log
#      beside the np1 rows (bench-np1.json)
# Record the numbers in labs/05_mixed_precision/bench/RESULTS.md with the date and device.
set -uo pipefail
# $OUT, the staged environment, step() and machine.txt (shared by every GPU check).
# shellcheck source=harness/cuda/gpu_check_steps.sh
source harness/cuda/gpu_check_steps.sh
lab=build/labs/05_mixed_precision
step ctest-gpu 240 bash -c "cd build && ctest -R 'lab05.*gpu' -LE student --output-on-failure"
for run in 1 2; do
  step "nccl-np2-$run" 120 mpirun -n 2 -x NCCL_DEBUG=WARN "$lab/lab05_reference_gpu" --gtest_filter='GpuNccl.*'
done
if command -v compute-sanitizer >/dev/null; then
  step memcheck-np1 240 mpirun -n 1 compute-sanitizer --tool memcheck "$lab/lab05_reference_gpu" --gtest_filter='GpuNccl.*'
else
  echo "no compute-sanitizer: memcheck skipped" | tee -a "$summary"
fi
for np in 1 2; do
  step "bench-np$np" 120 mpirun -n "$np" "$lab/lab05_bench" --benchmark_filter='Gpu/' \
    --benchmark_out="$OUT/bench-np$np.json" --benchmark_out_format=json
done
# PyTorch loads its own CUDA and NCCL libraries: no LD_LIBRARY_PATH (../shared/gpu/README.md).
step torch-amp-np1 240 env -u LD_LIBRARY_PATH python3 labs/05_mixed_precision/bench/torch_amp.py \
  --out "$OUT/torch-amp-np1.jsonl"
step torch-vs-dtl 30 python3 harness/nn/bench/torch_bench_util.py compare "$OUT/bench-np1.json" \
  "$OUT/torch-amp-np1.jsonl"
cat "$OUT/torch-vs-dtl.log" "$summary"
