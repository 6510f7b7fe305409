#!/usr/bin/env python3
"""Lab 06's GPU row beside PyTorch's FSDP2 (fully_shard) over NCCL.

The project's row `Gpu/fsdp+prefetch1/nccl` (bench/fsdp_gpu_bench.cc) trains
harness/nn's MLP (make_mlp(kIn, kHidden, kClasses, kDepth): units fc0..fc5 and
head, 1.45 M parameters) on kBatch rows per rank with AdamW (lr, weight_decay),
FSDP with `prefetch` units gathered ahead, f32, no offload; its vendor column is a
plain DDP step on the same GPU (one allreduce of the flat gradients). This script
reads those constants from that file and times in PyTorch:

    torch/fsdp2+prefetch<k>/nccl   fully_shard on every unit (fc0..fc5, head) and
                                   on the root, reshard_after_forward=True (every
                                   unit is gathered again for backward, as the
                                   lab's FSDP), explicit prefetch of the next k
                                   units in forward (set_modules_to_forward_prefetch)
                                   and the previous k in backward
                                   (set_modules_to_backward_prefetch); k = 0: no
                                   explicit prefetch, FSDP2's defaults (its backward
                                   then still prefetches one unit, by the reverse
                                   order of forward: FSDP2 has no switch to stop it)
                                   -> beside Gpu/fsdp+prefetch<k>/nccl [step_ms]
    torch/ddp/nccl                 DDP on the same model (PyTorch's default buckets)
                                   -> beside the same row's DDP column [vendor_ms]

One step on both sides: zero_grad, forward, mean cross-entropy, backward (the
reduce-scatters inside), AdamW, then a CUDA synchronize. Step time: median of
--steps timed steps after --warmup ones (the slowest rank's). tokens/s: rows per
second over every rank. Peak memory: torch.cuda.max_memory_allocated() on rank 0.
The lab's trainer accounts its bytes exactly (Note [ZeRO stages] in
lab06/fsdp.h: 4S + 4(1 + k)L of parameters, as much of gradients, 8S of AdamW
state, plus activations); the project's row reports no memory yet, so that column
is PyTorch's alone.

Run on the GPU host (PyTorch loads its own CUDA and NCCL):

    env -u LD_LIBRARY_PATH python3 labs/06_fsdp/bench/torch_fsdp.py [--prefetch K] [--out F.jsonl]
    # one rank per GPU on a multi-GPU host (the row's np2, np4 ...):
    env -u LD_LIBRARY_PATH python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        labs/06_fsdp/bench/torch_fsdp.py

At one rank FSDP2's shards are the whole model and its collectives are copies: the
number measures the machinery (hooks, copies, launches), as the project's np1 row
does. On a one-GPU host only one rank runs: PyTorch's NCCL (2.28) refuses a
second rank on the same GPU (an "unrun" line says so).
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "harness" / "nn" / "bench"))
import torch_bench_util as tbu  # noqa: E402

SOURCE = HERE / "fsdp_gpu_bench.cc"


def sizes() -> dict:
    """The row's MLP, batch, AdamW and prefetch, read from fsdp_gpu_bench.cc."""
    return tbu.cpp_values(SOURCE, ["kIn", "kHidden", "kClasses", "kBatch", "kDepth", "lr", "weight_decay", "prefetch"])


def set_prefetch(units, k: int) -> None:
    """Unit i prefetches units i+1..i+k in forward and i-1..i-k in backward (nearest first)."""
    for i, unit in enumerate(units):
        unit.set_modules_to_forward_prefetch(list(units[i + 1:i + 1 + k]))
        unit.set_modules_to_backward_prefetch([units[j] for j in range(i - 1, max(-1, i - 1 - k), -1)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tbu.add_common_args(parser)
    parser.add_argument("--prefetch", type=int, help="units prefetched (default: the row's, from fsdp_gpu_bench.cc)")
    args = parser.parse_args()
    tbu.check_common_args(parser, args)
    s = sizes()
    k = int(s["prefetch"]) if args.prefetch is None else args.prefetch
    if k < 0:
        parser.error(f"--prefetch must be >= 0, not {k}")
    run = tbu.Run("06", "torch_fsdp.py", args)
    if not run.start():
        return tbu.EXIT_UNRUN
    torch = run.torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    our_row = "Gpu/fsdp+prefetch%d/nccl" % int(s["prefetch"])
    model_fields = {"model": "make_mlp(%d, %d, %d, %d)" % (s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"]),
                    "parameters": sum(tbu.mlp_unit_params(s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"])),
                    "batch_per_rank": s["kBatch"], "optimizer": "AdamW(lr %g, weight_decay %g)" % (s["lr"],
                                                                                                 s["weight_decay"]),
                    "dtype": "fp32"}
    x, y = tbu.batch(torch, s["kBatch"], s["kIn"], s["kClasses"], 7 + run.rank, run.device)
    mesh = init_device_mesh("cuda", (run.world,))

    for row in ("torch/fsdp2+prefetch%d/nccl" % k, "torch/ddp/nccl"):
        run.reset_memory()
        model = tbu.torch_mlp(torch, s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"], seed=1).to(run.device)
        if row.startswith("torch/fsdp2"):
            units = list(model)  # fc0..fc{depth-1}, head: the lab's units
            for unit in units:
                fully_shard(unit, mesh=mesh, reshard_after_forward=True)
            fully_shard(model, mesh=mesh, reshard_after_forward=True)  # the root: no parameters of its own
            set_prefetch(units, k)
            compare = (our_row, "step_ms") if k == int(s["prefetch"]) else (None, "step_ms")
        else:
            model = DDP(model, device_ids=[run.device.index])
            compare = (our_row, "vendor_ms")
        opt = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])

        def step():
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()

        times = run.time(step)
        run.emit({"row": row, **run.measured(times, s["kBatch"] * run.world), **model_fields,
                  "prefetch": k if row.startswith("torch/fsdp2") else None,
                  "compare_with": compare[0], "compare_counter": compare[1]})
        del model, opt, step
    run.finish()
    return tbu.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
