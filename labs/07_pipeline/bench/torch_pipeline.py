#!/usr/bin/env python3
"""Lab 07's pipeline beside torch.distributed.pipelining (GPipe and 1F1B) over NCCL.

The model and batch are those of the lab's Real rows (bench/pipeline_bench.cc:
real_model() = make_mlp(64, 512, 10, 8), kBatch = 64 rows), read from that file,
cut into P contiguous stages by parameter count exactly as Model::split_stages
cuts them (P = 2: units fc0..fc3 | fc4..fc7, head). P is the number of ranks,
one stage per rank. For each schedule and each m of --micro-batches:

    torch/<gpipe|1f1b>/P<P>/m<m>   PipelineStage + ScheduleGPipe or Schedule1F1B,
                                   mean cross-entropy per micro-batch with the
                                   gradients scaled by 1/m (scale_grads), so a step's
                                   gradients are those of the batch's mean loss, as
                                   the lab's train_step(); 1F1B lines
                                   -> beside Gpu/1f1b/nccl [step_ms] (compare the
                                   line with the row's m)

One step: zero the stage's gradients, schedule.step(), a CUDA synchronize; no
optimizer (the lab's rows time train_step() alone). Step time: the median of
--steps timed steps after --warmup ones, the slowest rank's. tokens/s: rows per
second. Peak memory: torch.cuda.max_memory_allocated() per stage (peak_mib is
stage 0's; the lab's act0/actL count activations alone, PyTorch's number also
holds the stage's parameters and gradients).

The bubble, as the lab defines it: 1 - busy / step, averaged over the stages,
where busy is the stage's forward and backward compute for the m micro-batches.
PyTorch's schedules record no spans, so busy is measured apart: the same stage
module runs its m forwards and backwards alone on this GPU, no communication, no
schedule (median of as many steps). theory = (P - 1)/(m + P - 1); ratio = bubble
/ theory (the project's goal: within 10% of theory at m >= 4).

What cannot run where, said in the output and not papered over:
  - P >= 2 needs P ranks. PyTorch's own NCCL (2.28 in its 2.11 wheel) refuses two
    ranks on one GPU, so on the one-GPU host P >= 2 gives an "unrun" line (exit
    status 3). On a host with P GPUs:
        env -u LD_LIBRARY_PATH python3 -m torch.distributed.run --standalone \\
            --nproc-per-node 2 labs/07_pipeline/bench/torch_pipeline.py
    On one GPU, PyTorch may be given the project's staged NCCL 2.30 instead
    (LD_PRELOAD=.carry/nccl/lib/libnccl.so.2, NCCL_MULTI_RANK_GPU_ENABLE=1): the
    script then runs, and marks its lines shared_gpu: the ranks time-slice one GPU,
    so the numbers measure overheads, as the project's own shared-GPU rows do.
  - Gloo on CPU tensors would run anywhere, but it is not what a user would pick
    on GPUs and is not a fair anchor: it is not offered.
  - P = 1 (one rank) runs everywhere: the whole model as one stage, m micro-batches.
    No pipeline and no bubble; "bubble" there is what PyTorch's schedule adds to
    the m forwards and backwards (nothing to compare with the formula).
  - PyTorch refuses m < P (n_microbatches must be >= the number of stages), and
    this script refuses an m that does not divide the batch (the stages' receive
    buffers are sized for equal micro-batches).

Run on the GPU host (PyTorch loads its own CUDA and NCCL):

    env -u LD_LIBRARY_PATH python3 labs/07_pipeline/bench/torch_pipeline.py [--micro-batches 4,8,16] [--out F.jsonl]
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "harness" / "nn" / "bench"))
import torch_bench_util as tbu  # noqa: E402

SOURCE = HERE / "pipeline_bench.cc"
OUR_ROW = "Gpu/1f1b/nccl"


def sizes() -> dict:
    """real_model()'s make_mlp arguments and kBatch, read from pipeline_bench.cc."""
    features, hidden, classes, depth, seed = tbu.cpp_call_ints(SOURCE, "real_model() { return nn::make_mlp")
    s = {"features": features, "hidden": hidden, "classes": classes, "depth": depth, "seed": seed}
    s.update(tbu.cpp_values(SOURCE, ["kBatch"]))
    return s


def micro_batch_list(text: str, batch: int, stages: int) -> list[int]:
    """The m of --micro-batches ("4,8,16"), each checked: >= P (PyTorch's schedules
    refuse fewer) and a divisor of the batch. Raises ValueError naming the value."""
    try:
        ms = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--micro-batches {text!r}: expected integers separated by commas") from None
    if not ms:
        raise ValueError("--micro-batches is empty")
    for m in ms:
        if m < max(1, stages):
            raise ValueError(f"--micro-batches {m}: PyTorch's schedules need m >= P = {stages} (and m >= 1)")
        if batch % m:
            raise ValueError(f"--micro-batches {m}: must divide the batch of {batch} rows")
    return ms


def stage_shapes(s: dict, bounds: list[int], stage: int) -> tuple[int, int]:
    """(input features, output features) of stage `stage` of make_mlp cut at `bounds`."""
    first, end = bounds[stage], bounds[stage + 1]
    return (s["features"] if first == 0 else s["hidden"]), (s["classes"] if end == s["depth"] + 1 else s["hidden"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tbu.add_common_args(parser)
    parser.add_argument("--micro-batches", default="4,8,16", help="the m to run, comma-separated (default 4,8,16)")
    parser.add_argument("--schedules", default="gpipe,1f1b", help="gpipe, 1f1b or both (default)")
    args = parser.parse_args()
    tbu.check_common_args(parser, args)
    schedules = [v for v in args.schedules.split(",") if v]
    if not schedules or any(v not in ("gpipe", "1f1b") for v in schedules):
        parser.error(f"--schedules {args.schedules!r}: choose from gpipe, 1f1b")
    s = sizes()
    run = tbu.Run("07", "torch_pipeline.py", args)
    P, r = run.world, run.rank
    try:
        ms = micro_batch_list(args.micro_batches, s["kBatch"], P)
    except ValueError as e:
        parser.error(str(e))
    if not run.start():
        return tbu.EXIT_UNRUN
    torch = run.torch
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    counts = tbu.mlp_unit_params(s["features"], s["hidden"], s["classes"], s["depth"])
    bounds = tbu.split_stages([float(c) for c in counts], P)
    fin, fout = stage_shapes(s, bounds, r)
    first, last = r == 0, r == P - 1
    x, y = tbu.batch(torch, s["kBatch"], s["features"], s["classes"], 7, run.device)  # the same batch on every rank
    shared = P > run.environment["gpus"]

    for name in schedules:
        for m in ms:
            run.reset_memory()
            units = list(tbu.torch_mlp(torch, s["features"], s["hidden"], s["classes"], s["depth"], s["seed"]))
            module = torch.nn.Sequential(*units[bounds[r]:bounds[r + 1]]).to(run.device)
            del units
            rows = s["kBatch"] // m
            stage = PipelineStage(module, r, P, run.device,
                                  input_args=torch.empty(rows, fin, device="meta"),
                                  output_args=torch.empty(rows, fout, device="meta"))
            kind = ScheduleGPipe if name == "gpipe" else Schedule1F1B
            schedule = kind(stage, n_microbatches=m, loss_fn=F.cross_entropy)  # mean per micro-batch, grads / m

            def step():
                module.zero_grad(set_to_none=False)
                if first and last:
                    schedule.step(x, target=y)
                elif first:
                    schedule.step(x)
                elif last:
                    schedule.step(target=y)
                else:
                    schedule.step()

            times = run.time(step)
            measured = run.measured(times, s["kBatch"])
            peaks = run.gather(float(measured["peak_bytes"]))

            # busy: this stage's m forwards and backwards alone (no schedule, no communication)
            mb_in = torch.randn(rows, fin, device=run.device).requires_grad_(not first)
            mb_y, grad_out = y[:rows], torch.ones(rows, fout, device=run.device)

            def compute():
                for _ in range(m):
                    out = module(mb_in)
                    if last:
                        (F.cross_entropy(out, mb_y) / m).backward()
                    else:
                        out.backward(grad_out)

            busy = 0.0
            for turn in range(P):  # one stage at a time: ranks sharing a GPU must not slow each other here
                if P > 1:
                    run.barrier()
                if turn == r:
                    busy = tbu.summary(tbu.time_steps(compute, lambda: torch.cuda.synchronize(run.device),
                                                      args.warmup, args.steps))["step_ms"]
            busies = run.gather(busy)
            step_ms = measured["step_ms"]
            bubble = sum(1.0 - b / step_ms for b in busies) / P
            theory = tbu.bubble_theory(P, m)
            run.emit({"row": "torch/%s/P%d/m%d" % (name, P, m), **measured, "stages": P, "micro_batches": m,
                      "stage_bounds": bounds, "busy_ms_per_stage": busies, "bubble": bubble, "theory": theory,
                      "ratio": bubble / theory if theory > 0 else None,
                      "peak_mib_per_stage": [p / 2 ** 20 for p in peaks], "shared_gpu": shared,
                      "model": "make_mlp(%d, %d, %d, %d)" % (s["features"], s["hidden"], s["classes"], s["depth"]),
                      "compare_with": OUR_ROW if name == "1f1b" and P >= 2 else None, "compare_counter": "step_ms",
                      "note": ("ranks share one GPU (time-sliced): overheads, not speed" if shared else
                               "P = 1: no pipeline; bubble = what the schedule adds" if P == 1 else "")})
            del stage, schedule, module, step, compute, mb_in, grad_out
    run.finish()
    return tbu.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
