# shellcheck shell=bash
# Sourced by the sbatch scripts in cluster/: one place for what every job does.
# Runs `./dtl bench LAB -n <the job's tasks> ...` from the repository the job was
# submitted from; ./dtl mpirun (under ./dtl bench) picks srun --mpi=pmix or mpirun
# inside the allocation. Build first, on a login node, on a file system every node
# sees: `./dtl build` (the job does not compile).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "${BASH_SOURCE[0]}")/..}"
[[ -d "${DTL_BUILD_DIR:-build}/labs" ]] || { echo "cluster: run ./dtl build first (no build/labs here)" >&2; exit 2; }
# Compute nodes take compilers, MPI and CUDA from the cluster (modules, a container),
# and the job runs as a user: ./dtl setup's Debian package check would stop it there.
export DTL_SETUP_DONE=1

# GPUs on this node: 0 without a driver or without nvidia-smi (the count must not end
# the job under `set -o pipefail` where there is none).
gpus_per_node() {
  local n
  n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  echo "${n:-0}"
}

# one_node_mpirun N PROGRAM [ARGS]: N ranks on the first node of the job only (CUDA
# IPC, lab 03's GPU ring, reaches the GPUs of one node only). srun takes --nodes;
# mpirun fills the first node with --map-by ppr:N:node.
one_node_mpirun() {
  local n="$1"; shift
  if [[ "${DTL_LAUNCHER:-auto}" != mpirun ]] && command -v srun >/dev/null \
     && srun --mpi=list 2>&1 | grep -q pmix; then
    ./dtl mpirun --launcher srun --nodes=1 --ntasks="$n" "$@"
  else
    ./dtl mpirun --launcher mpirun -n "$n" --map-by "ppr:$n:node" "$@"
  fi
}

# Print what the run depends on, so a results file says where it came from.
cluster_banner() {
  echo "# job ${SLURM_JOB_ID:-none} on ${SLURM_JOB_NUM_NODES:-1} node(s): ${SLURM_JOB_NODELIST:-$(hostname)}," \
       "${SLURM_NTASKS:-?} tasks, $(date -u +%Y-%m-%dT%H:%MZ)"
  for v in UCX_TLS UCX_NET_DEVICES FI_PROVIDER OMPI_MCA_pml OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include \
           NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_NET_GDR_LEVEL NCCL_DEBUG CUDA_VISIBLE_DEVICES; do
    [[ -n "${!v:-}" ]] && echo "#   $v=${!v}"
  done
  return 0
}

# cluster_bench LAB [bench options]: the lab's benchmark over every task of the job.
cluster_bench() {
  local lab="$1"; shift
  cluster_banner
  ./dtl bench "$lab" -n "${SLURM_NTASKS:-2}" "$@"
}
