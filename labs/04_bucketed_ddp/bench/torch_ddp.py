#!/usr/bin/env python3
"""Lab 04's GPU row beside PyTorch's DistributedDataParallel over NCCL.

The project's row `Gpu/overlap/nccl` (bench/ddp_gpu_bench.cc) trains harness/nn's
MLP (make_mlp(kIn, kHidden, kClasses, kDepth): 3.4 M parameters) on kBatch rows per
rank with SGD (lr 1e-3, momentum 0.9), its gradients allreduced by NCCL in buckets
of at most `cap` bytes while backward runs. This script reads those constants from
that file and times the same model, batch and optimizer in PyTorch:

    torch/ddp/nccl       DDP over NCCL, bucket_cap_mb = cap / 2^20 (the same cap),
                         gradient_as_bucket_view=True (the buckets are views of one
                         gradient buffer, as the Reducer's); PyTorch's small first
                         bucket (dist._DEFAULT_FIRST_BUCKET_BYTES) set to the lab's
                         kDefaultFirstBucketCapBytes (both 1 MiB)
                         -> beside Gpu/overlap/nccl [step_ms]
    torch/no-ddp         the same step without DDP: the compute floor of this
                         device (at one rank, what DDP's hooks and its one-rank
                         allreduces cost is torch/ddp - torch/no-ddp)

One step, on both sides: zero the gradients, forward, mean cross-entropy,
backward (DDP's allreduces inside), the optimizer step, then a CUDA synchronize.
Step time: the median of --steps timed steps after --warmup ones (the slowest
rank's, at several ranks). tokens/s: rows per second over every rank. Peak
memory: torch.cuda.max_memory_allocated() on rank 0 (the project's row reports
no memory; its tracker's exact bytes would be the thing to compare).

What differs, and is said in the output: the buckets. PyTorch closes a bucket
once it reaches the cap (a bucket may pass it by one tensor), and after the first
iteration rebuilds them in the order the gradients became ready; the lab's
assign_buckets() walks the parameters in reverse and closes a bucket before a
parameter would take it past the cap (7 buckets for this MLP, each 4 MiB weight
alone). The JSON line gives PyTorch's bucket sizes where DDP's
logging data has them.

Run on the GPU host (PyTorch loads its own CUDA and NCCL):

    env -u LD_LIBRARY_PATH python3 labs/04_bucketed_ddp/bench/torch_ddp.py [--out F.jsonl]
    # one rank per GPU on a multi-GPU host (the row's np2, np4 ...):
    env -u LD_LIBRARY_PATH python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        labs/04_bucketed_ddp/bench/torch_ddp.py

On a one-GPU host only one rank runs: PyTorch's NCCL (2.28) refuses a second rank
on the same GPU, and the script says so in an "unrun" line rather than time it
another way.
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "harness" / "nn" / "bench"))
import torch_bench_util as tbu  # noqa: E402

OUR_ROW = "Gpu/overlap/nccl"
SOURCE = HERE / "ddp_gpu_bench.cc"
HEADER = HERE.parent / "include" / "lab04" / "ddp.h"


def sizes() -> dict:
    """The row's model, batch and cap, read from ddp_gpu_bench.cc (and ddp.h's first-bucket cap)."""
    s = tbu.cpp_values(SOURCE, ["kIn", "kHidden", "kClasses", "kBatch", "kDepth", "cap"])
    s.update(tbu.cpp_values(HEADER, ["kDefaultFirstBucketCapBytes"]))
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tbu.add_common_args(parser)
    args = parser.parse_args()
    tbu.check_common_args(parser, args)
    s = sizes()
    run = tbu.Run("04", "torch_ddp.py", args)
    if not run.start():
        return tbu.EXIT_UNRUN
    torch, dist = run.torch, run.dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    model_fields = {"model": "make_mlp(%d, %d, %d, %d)" % (s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"]),
                    "parameters": sum(tbu.mlp_unit_params(s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"])),
                    "batch_per_rank": s["kBatch"], "optimizer": "SGD(lr 1e-3, momentum 0.9)", "dtype": "fp32"}
    x, y = tbu.batch(torch, s["kBatch"], s["kIn"], s["kClasses"], 7 + run.rank, run.device)

    for row in ("torch/no-ddp", "torch/ddp/nccl"):
        if row == "torch/no-ddp" and run.world > 1:
            continue  # a single-GPU floor: one rank's number
        run.reset_memory()
        model = tbu.torch_mlp(torch, s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"], seed=1).to(run.device)
        extra = {}
        if row == "torch/ddp/nccl":
            dist._DEFAULT_FIRST_BUCKET_BYTES = int(s["kDefaultFirstBucketCapBytes"])  # read by DDP's constructor
            model = DDP(model, device_ids=[run.device.index], bucket_cap_mb=s["cap"] / 2 ** 20,
                        gradient_as_bucket_view=True)
            extra = {"bucket_cap_bytes": int(s["cap"]), "first_bucket_cap_bytes": int(s["kDefaultFirstBucketCapBytes"])}
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

        def step():
            opt.zero_grad(set_to_none=False)  # zero in place, as the Reducer's flat gradient buffer
            F.cross_entropy(model(x), y).backward()
            opt.step()

        times = run.time(step)
        if row == "torch/ddp/nccl":
            try:  # DDP's logging data: the bucket sizes after the rebuild of the first iteration
                data = model._get_ddp_logging_data()
                extra["torch_bucket_sizes"] = str(data.get("bucket_sizes"))
            except (AttributeError, RuntimeError):
                pass
        run.emit({"row": row, **run.measured(times, s["kBatch"] * run.world), **model_fields, **extra,
                  "compare_with": OUR_ROW if row == "torch/ddp/nccl" else None, "compare_counter": "step_ms",
                  "note": "buckets: PyTorch fills them in forward order up to >= cap; the lab in reverse, "
                          "closing before the cap" if row == "torch/ddp/nccl" else "no DDP: one GPU's compute floor"})
        del model, opt, step
    run.finish()
    return tbu.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
