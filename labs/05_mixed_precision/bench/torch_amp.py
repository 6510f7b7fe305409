#!/usr/bin/env python3
"""Lab 05's GPU rows beside PyTorch: 16-bit gradient averaging over NCCL, and torch.amp steps.

The project's rows `Gpu/nccl/f16 buckets` and `Gpu/nccl/bf16 buckets`
(bench/mixed_gpu_bench.cc) average the gradient buckets of the Step rows' MLP
(make_mlp(kIn, kHidden, kClasses, kDepth) of bench/mixed_bench.h) over NCCL: in
16 bits (allreduce_mean_half, divide before the sum) as impl_ms, and in fp32
(ReduceOp::kAvg) as fp32_ms, each bucket waited for on the host, buckets cut as
the trainer cuts them (MixedOptions::bucket_cap_bytes). This script reads those
sizes from the C++ source and measures in PyTorch:

    torch/nccl/f16 buckets    per bucket: view.div_(W), all_reduce(SUM), synchronize
                              -> beside Gpu/nccl/f16 buckets [impl_ms]
    torch/nccl/bf16 buckets   the same in bf16 -> beside Gpu/nccl/bf16 buckets [impl_ms]
    torch/nccl/f32 buckets    all_reduce(AVG) of the fp32 buckets
                              -> beside Gpu/nccl/f16 buckets [fp32_ms]

and what a PyTorch user trains this MLP with (kBatch rows per rank, AdamW lr 1e-3,
no weight decay, as MixedOptions), one step = zero_grad, forward, loss, backward,
optimizer, synchronize:

    torch/amp/fp16+GradScaler  DDP + fp16_compress_hook (gradients travel in fp16),
                               torch.autocast(float16), GradScaler with the lab's
                               LossScalerOptions (init 65536, x2 every 2000 clean
                               steps, x0.5 on overflow); fp32 parameters are the
                               master weights
    torch/amp/bf16             DDP + bf16_compress_hook, torch.autocast(bfloat16), no scaler
    torch/fp32                 DDP, fp32 throughout (TF32 off)

The project has no GPU row for the whole mixed-precision step yet (the Step/...
rows run on CPU ranks), so these three lines have nothing beside them; they are
recorded so that such a row can be put beside them. The recipes differ too: the
lab keeps a 16-bit working copy and computes in fp32 (Note [Compute copies]);
autocast keeps fp32 parameters and runs the GEMMs in 16 bits on tensor cores.

Run on the GPU host (PyTorch loads its own CUDA and NCCL):

    env -u LD_LIBRARY_PATH python3 labs/05_mixed_precision/bench/torch_amp.py [--out F.jsonl]
    # one rank per GPU on a multi-GPU host (the rows' np2):
    env -u LD_LIBRARY_PATH python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        labs/05_mixed_precision/bench/torch_amp.py

On a one-GPU host only one rank runs: PyTorch's NCCL (2.28) refuses a second rank
on the same GPU (an "unrun" line says so).
"""
import argparse
import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "harness" / "nn" / "bench"))
import torch_bench_util as tbu  # noqa: E402

SIZES = HERE / "mixed_bench.h"
HEADER = HERE.parent / "include" / "lab05" / "mixed.h"


def sizes() -> dict:
    """The MLP and batch of mixed_bench.h; the bucket cap and the loss scaler's defaults of mixed.h."""
    s = tbu.cpp_values(SIZES, ["kIn", "kHidden", "kClasses", "kDepth", "kBatch"])
    s.update(tbu.cpp_values(HEADER, ["bucket_cap_bytes", "init_scale", "growth_factor", "backoff_factor",
                                     "growth_interval"]))
    return s


def comm_rows(run, s, n):
    torch, dist = run.torch, run.dist
    g = torch.Generator().manual_seed(300 + run.rank)
    values = torch.randn(n, generator=g) * 2.0 ** (run.rank - 4)  # as the row's gradients(): N(0,1) x 2^(rank-4)
    for row, dtype, ours, counter in (("torch/nccl/f16 buckets", torch.float16, "Gpu/nccl/f16 buckets", "impl_ms"),
                                      ("torch/nccl/bf16 buckets", torch.bfloat16, "Gpu/nccl/bf16 buckets", "impl_ms"),
                                      ("torch/nccl/f32 buckets", torch.float32, "Gpu/nccl/f16 buckets", "fp32_ms")):
        run.reset_memory()
        element = torch.finfo(dtype).bits // 8
        buf = values.to(dtype).to(run.device)
        cuts = tbu.buckets(n, element, int(s["bucket_cap_bytes"]))

        def step():
            for offset, count in cuts:
                view = buf[offset:offset + count]
                if dtype == torch.float32:
                    dist.all_reduce(view, op=dist.ReduceOp.AVG)
                else:
                    view.div_(run.world)  # the lab's DividePlacement::kPre
                    dist.all_reduce(view, op=dist.ReduceOp.SUM)
                torch.cuda.synchronize(run.device)  # as the row's Work::wait() per bucket

        times = run.time(step)
        run.emit({"row": row, **run.measured(times, None), "elements": n, "bytes": n * element,
                  "buckets": len(cuts), "compare_with": ours, "compare_counter": counter})
        del buf, step


def step_rows(run, s):
    torch = run.torch
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = tbu.batch(torch, s["kBatch"], s["kIn"], s["kClasses"], 7 + run.rank, run.device)
    model_fields = {"model": "make_mlp(%d, %d, %d, %d)" % (s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"]),
                    "batch_per_rank": s["kBatch"], "optimizer": "AdamW(lr 1e-3, weight_decay 0)",
                    "bucket_cap_bytes": int(s["bucket_cap_bytes"])}
    for row, dtype, hook in (("torch/amp/fp16+GradScaler", torch.float16, default_hooks.fp16_compress_hook),
                             ("torch/amp/bf16", torch.bfloat16, default_hooks.bf16_compress_hook),
                             ("torch/fp32", None, None)):
        run.reset_memory()
        model = tbu.torch_mlp(torch, s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"], seed=1).to(run.device)
        model = DDP(model, device_ids=[run.device.index], bucket_cap_mb=s["bucket_cap_bytes"] / 2 ** 20)
        if hook is not None:
            model.register_comm_hook(state=None, hook=hook)  # state None: the default process group
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        scaler = None
        if dtype == torch.float16:
            scaler = torch.amp.GradScaler("cuda", init_scale=s["init_scale"], growth_factor=s["growth_factor"],
                                          backoff_factor=s["backoff_factor"],
                                          growth_interval=int(s["growth_interval"]))

        def step():
            opt.zero_grad(set_to_none=False)
            with torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext():
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)  # skips the step on an inf/NaN gradient
                scaler.update()

        times = run.time(step)
        extra = {"loss_scale": scaler.get_scale()} if scaler is not None else {}
        run.emit({"row": row, **run.measured(times, s["kBatch"] * run.world), **model_fields, **extra,
                  "compare_with": None, "note": "no project GPU row for the whole step yet (Step/... rows are CPU)"})
        del model, opt, scaler, step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tbu.add_common_args(parser)
    parser.add_argument("--only", choices=["comm", "step"], help="one group of rows (default both)")
    args = parser.parse_args()
    tbu.check_common_args(parser, args)
    s = sizes()
    n = sum(tbu.mlp_unit_params(s["kIn"], s["kHidden"], s["kClasses"], s["kDepth"]))
    run = tbu.Run("05", "torch_amp.py", args)
    if not run.start():
        return tbu.EXIT_UNRUN
    if args.only in (None, "comm"):
        comm_rows(run, s, n)
    if args.only in (None, "step"):
        step_rows(run, s)
    run.finish()
    return tbu.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
