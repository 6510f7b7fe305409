# What every prepared GPU check script shares (sourced, from the project's root on
# the GPU host; ../shared/gpu/README.md): $OUT made, the staged environment of
# .carry sourced, $OUT/summary.txt started, step(), and $OUT/machine.txt (the GPU,
# the driver, nvcc, and the staged NCCL).
# shellcheck shell=bash
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .carry/device-env.sh
summary="$OUT/summary.txt"
: >"$summary"
step() {  # step NAME SECONDS COMMAND...: runs, logs, records the exit status
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$summary"
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  ls .carry/nccl/lib/libnccl.so.* 2>/dev/null; } >"$OUT/machine.txt" 2>&1
