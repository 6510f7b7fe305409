# Sourced by the sbatch scripts in cluster/: one place for what every job does.
# Runs `./dtl bench LAB -n <the job's tasks> ...` from the repository the job was
# submitted from; ./dtl mpirun (under ./dtl bench) picks srun --mpi=pmix or mpirun
# inside the allocation. Build first, on a login node, on a file system every node
# sees: `./dtl build` (the job does not compile).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "${BASH_SOURCE[0]}")/..}"
[[ -d "${DTL_BUILD_DIR:-build}/labs" ]] || { echo "cluster: run ./dtl build first (no build/labs here)" >&2; exit 2; }

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
