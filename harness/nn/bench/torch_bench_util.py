#!/usr/bin/env python3
"""What the PyTorch comparisons of labs 04-07 share (labs/0[4-7]_*/bench/torch_*.py).

Each lab's script builds the model and batch of one of the lab's GPU benchmark rows
in PyTorch, times it the same way, and writes one JSON line per row: step time
(median of the timed steps, each ended by a CUDA synchronize), tokens/s (rows of
the batch per second, over every rank) and peak memory
(torch.cuda.max_memory_allocated). The lab's bench/gpu_check.sh then puts each line
beside the project's row with `compare` below.

The sizes are read from the C++ source of the project's row (cpp_values), so the
two sides cannot drift apart: a renamed or reshaped constant stops the script with
an error naming the file, not a quietly different model.

Nothing here imports torch at module level: the pure parts (sizes, bucket cuts,
stage cuts, the timing loop, the one-GPU limit, the side-by-side table) run on the
CPU machine, where grader/tests/test_torch_bench.py checks them.

    python3 harness/nn/bench/torch_bench_util.py compare OURS.json TORCH.jsonl [TORCH2.jsonl ...]
        OURS.json: the project's bench binary's --benchmark_out (JSON); TORCH.jsonl:
        a script's --out. Prints one line per torch row with the project's number
        beside it and their ratio.
"""
from __future__ import annotations

import argparse
import ast
import gc
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[3]

# Exit statuses of the scripts (gpu_check.sh's summary shows them).
EXIT_OK = 0
EXIT_USAGE = 2    # bad arguments, no PyTorch, no GPU
EXIT_UNRUN = 3    # a configuration this host cannot run (a JSON line with "status": "unrun" says why)

# --------------------------------------------------------------------------
# Sizes from the C++ source
# --------------------------------------------------------------------------

_SIZE_T = re.compile(r"std::size_t\{(\d+)\}")


def cpp_number(text: str) -> float | int:
    """The value of a C++ constant expression of the benches: integer and float
    literals (1e-3f, 0.01f), std::size_t{N}, and <<, *, + between them.
    Raises ValueError on anything else."""
    expr = _SIZE_T.sub(r"\1", text.strip())
    expr = re.sub(r"(?<=[\d.])[fF]\b", "", expr)  # 1e-3f -> 1e-3
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not a constant expression: {text!r}") from e

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.LShift, ast.Mult, ast.Add)):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.LShift):
                if not (isinstance(a, int) and isinstance(b, int)):
                    raise ValueError(f"<< of a non-integer in {text!r}")
                return a << b
            return a * b if isinstance(node.op, ast.Mult) else a + b
        raise ValueError(f"not a constant expression: {text!r}")

    return value(tree.body)


def cpp_values(path: Path, names: list[str]) -> dict[str, float | int]:
    """{name: value} of the first `name = <expr>` (or `.name = <expr>` in a designated
    initializer) for each name in the C++ file `path`. Raises ValueError naming the
    file and the name if one is missing or not a constant."""
    text = Path(path).read_text()
    out = {}
    for name in names:
        found = re.search(r"(?<!\w)" + re.escape(name) + r"\s*=(?!=)\s*((?:std::size_t\{\d+\}|[^,;}\n])+)", text)
        if not found:
            raise ValueError(f"{path}: no `{name} = ...` found (did the bench's constants change?)")
        try:
            out[name] = cpp_number(found.group(1))
        except ValueError as e:
            raise ValueError(f"{path}: {name}: {e}") from e
    return out


def cpp_call_ints(path: Path, call: str) -> list[int]:
    """The integer arguments of the first `call(a, b, ...)` in the C++ file `path`,
    e.g. cpp_call_ints(f, "real_model() { return nn::make_mlp") -> [64, 512, 10, 8, 7]."""
    text = Path(path).read_text()
    found = re.search(re.escape(call) + r"\s*\(([^)]*)\)", text)
    if not found:
        raise ValueError(f"{path}: no `{call}(...)` found")
    args = [a.strip() for a in found.group(1).split(",")]
    if not all(re.fullmatch(r"\d+", a) for a in args):
        raise ValueError(f"{path}: `{call}({found.group(1)})`: expected integer literals")
    return [int(a) for a in args]


def mlp_unit_params(features: int, hidden: int, classes: int, depth: int) -> list[int]:
    """Parameters per unit of harness/nn's make_mlp: fc0..fc{depth-1} (Linear with
    bias, then ReLU) and head (Linear with bias)."""
    if min(features, hidden, classes, depth) < 1:
        raise ValueError(f"make_mlp sizes must be >= 1: in {features}, hidden {hidden}, classes {classes}, depth {depth}")
    return [(features if u == 0 else hidden) * hidden + hidden for u in range(depth)] + [hidden * classes + classes]


def buckets(n: int, element: int, cap: int) -> list[tuple[int, int]]:
    """(offset, count) of each bucket of n elements of `element` bytes under a cap of
    `cap` bytes: lab 05's trainer's cut (mixed_gpu_bench.cc's buckets())."""
    if element < 1 or cap < 1 or n < 0:
        raise ValueError(f"buckets: n {n}, element {element}, cap {cap}")
    per = max(1, cap // element)
    return [(offset, min(per, n - offset)) for offset in range(0, n, per)]


def split_stages(costs: list[float], stages: int) -> list[int]:
    """Stage bounds [0, b1, ..., n] of harness/nn's Model::split_stages: contiguous
    stages minimizing the largest stage's cost; among equal cuts the earliest
    (model.cc's dynamic programme, step for step)."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"split_stages: stages is {stages}; it must be in [1, {n}] (the unit count)")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                candidate = max(best[s - 1][j], prefix[i] - prefix[j])
                if candidate < best[s][i]:
                    best[s][i], cut[s][i] = candidate, j
    bounds = [0] * (stages + 1)
    bounds[stages] = n
    for s in range(stages, 0, -1):
        bounds[s - 1] = cut[s][bounds[s]]
    return bounds


def bubble_theory(stages: int, micro_batches: int) -> float:
    """(P - 1) / (m + P - 1): the idle fraction of GPipe and 1F1B with equal stages."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"bubble_theory: P {stages}, m {micro_batches}")
    return (stages - 1) / (micro_batches + stages - 1)


# --------------------------------------------------------------------------
# One GPU, several ranks
# --------------------------------------------------------------------------

def nccl_tuple(version) -> tuple[int, int, int] | None:
    """(major, minor, patch) of what torch.cuda.nccl.version() returns: a tuple in
    recent PyTorch (perhaps with a suffix string), NCCL_VERSION_CODE (an int) in old ones."""
    if isinstance(version, int):
        if version >= 10000:  # 2.9 on: major * 10000 + minor * 100 + patch
            return version // 10000, version // 100 % 100, version % 100
        return version // 1000, version // 100 % 10, version % 100
    numbers = [v for v in version if isinstance(v, int)] if isinstance(version, (tuple, list)) else []
    return tuple(numbers[:3]) if len(numbers) >= 2 else None


def shared_gpu_refusal(world: int, gpus: int, nccl: tuple[int, ...] | None, env: dict[str, str]) -> str | None:
    """Why `world` ranks cannot run over NCCL on `gpus` GPUs with this NCCL, or None if they can.

    One rank per GPU always works. More ranks than GPUs need NCCL >= 2.30 with
    NCCL_MULTI_RANK_GPU_ENABLE=1 (older NCCL refuses a second rank on a GPU:
    "Duplicate GPU detected"); PyTorch 2.11's wheel brings NCCL 2.28."""
    if world < 1:
        return f"world size {world}: need at least 1 rank"
    if gpus < 1:
        return "no GPU visible"
    if world <= gpus:
        return None
    shown = ".".join(map(str, nccl)) if nccl else "unknown"
    if nccl is None or tuple(nccl[:2]) < (2, 30):
        return (f"{world} ranks on {gpus} GPU(s): PyTorch's NCCL {shown} refuses two ranks on one GPU "
                "(NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 allows it); run on a host with a GPU per rank")
    if env.get("NCCL_MULTI_RANK_GPU_ENABLE") != "1":
        return f"{world} ranks on {gpus} GPU(s): NCCL {shown} allows it only with NCCL_MULTI_RANK_GPU_ENABLE=1"
    return None


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------

def time_steps(step: Callable[[], None], sync: Callable[[], None], warmup: int, steps: int,
               before: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds of each of `steps` timed calls of step() after `warmup` untimed ones.
    Each call is timed from before step() to after sync() (a CUDA synchronize, so
    every kernel of the step is in its time); before() (a barrier across ranks)
    runs untimed ahead of each."""
    if warmup < 0 or steps < 1:
        raise ValueError(f"time_steps: warmup {warmup} (>= 0), steps {steps} (>= 1)")
    times = []
    for i in range(warmup + steps):
        if before is not None:
            before()
        start = clock()
        step()
        sync()
        if i >= warmup:
            times.append(clock() - start)
    return times


def summary(seconds: list[float]) -> dict[str, float]:
    """step_ms (median), p10_ms and p90_ms (nearest rank) of step times in seconds."""
    if not seconds:
        raise ValueError("summary: no step times")
    ordered = sorted(seconds)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"step_ms": statistics.median(ordered) * 1e3, "p10_ms": rank(0.10) * 1e3, "p90_ms": rank(0.90) * 1e3,
            "timed_steps": len(ordered)}


# --------------------------------------------------------------------------
# The scripts' common frame: arguments, ranks, JSON lines (torch imported lazily)
# --------------------------------------------------------------------------

def add_common_args(parser: argparse.ArgumentParser, steps: int = 50, warmup: int = 10) -> None:
    parser.add_argument("--steps", type=int, default=steps, help=f"timed steps per row (default {steps})")
    parser.add_argument("--warmup", type=int, default=warmup, help=f"untimed steps first (default {warmup})")
    parser.add_argument("--out", type=Path, help="write the JSON lines to this file too (rank 0; emptied first)")


def check_common_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, not {args.steps}")
    if args.warmup < 2:
        # DDP rebuilds its buckets after the first iteration, FSDP2 and the
        # pipeline schedules set up lazily on the first: never time those.
        parser.error(f"--warmup must be >= 2, not {args.warmup}")


class Run:
    """One script's run: the ranks (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, else one
    rank), the device, the NCCL process group, and rank 0's JSON lines."""

    def __init__(self, lab: str, script: str, args: argparse.Namespace):
        self.lab, self.script, self.args = lab, script, args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        self.torch = self.dist = self.device = None
        self.environment: dict = {}
        if self.rank == 0 and args.out:
            Path(args.out).write_text("")  # this run's lines only

    def emit(self, fields: dict) -> None:
        """One JSON line on stdout (and --out), rank 0 only, with what every line carries."""
        if self.rank != 0:
            return
        line = {"lab": self.lab, "script": self.script, "world_size": self.world, **self.environment, **fields}
        text = json.dumps(line, sort_keys=False)
        print(text, flush=True)
        if self.args.out:
            with open(self.args.out, "a") as f:
                f.write(text + "\n")

    def unrun(self, row: str, reason: str, compare_with: str | None = None) -> None:
        """A line that says why `row` was not measured (instead of a number measured another way)."""
        print(f"{self.script}: {row}: not run: {reason}", file=sys.stderr, flush=True)
        self.emit({"row": row, "status": "unrun", "reason": reason, "compare_with": compare_with})

    def start(self) -> bool:
        """Imports torch, picks the device, and joins the NCCL group. False (after an
        "unrun" line) when this host cannot run this world size; exits with
        EXIT_USAGE without PyTorch or a GPU."""
        self.environment = {}
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            print(f"{self.script}: PyTorch is not installed here (run it on the GPU host)", file=sys.stderr)
            sys.exit(EXIT_USAGE)
        if not torch.cuda.is_available():
            print(f"{self.script}: no GPU visible to PyTorch: nothing to compare", file=sys.stderr)
            sys.exit(EXIT_USAGE)
        self.torch, self.dist = torch, dist
        gpus = torch.cuda.device_count()
        self.device = torch.device("cuda", self.local_rank % gpus)
        torch.cuda.set_device(self.device)
        try:
            import torch.cuda.nccl as torch_nccl
            nccl = nccl_tuple(torch_nccl.version())  # the NCCL loaded at run time (ncclGetVersion)
        except (ImportError, RuntimeError, AttributeError):
            nccl = None
        self.environment = {
            "gpu": torch.cuda.get_device_name(self.device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": ".".join(map(str, nccl)) if nccl else None, "gpus": gpus}
        # Full fp32 GEMMs, as the project's cublasSgemm (its layers have no TF32).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        why = shared_gpu_refusal(self.world, gpus, nccl, dict(os.environ))
        if why is not None:
            self.unrun(f"{self.script} at {self.world} ranks", why)
            return False
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=self.rank, world_size=self.world, device_id=self.device)
        return True

    def barrier(self) -> None:
        """A barrier that needs only an fp32 Sum allreduce (dist.barrier's own
        collective may need a type that a reduced NCCL build lacks)."""
        t = self.torch.zeros(1, device=self.device)
        self.dist.all_reduce(t)
        self.torch.cuda.synchronize(self.device)

    def time(self, step: Callable[[], None]) -> list[float]:
        """Step times (seconds), each the slowest rank's, after warm-up."""
        torch = self.torch
        before = self.barrier if self.world > 1 else None
        mine = time_steps(step, lambda: torch.cuda.synchronize(self.device), self.args.warmup, self.args.steps, before)
        if self.world == 1:
            return mine
        local = torch.tensor(mine, dtype=torch.float64, device=self.device)
        everyone = torch.empty(self.world * len(mine), dtype=torch.float64, device=self.device)
        self.dist.all_gather_into_tensor(everyone, local)  # AllGather: no reduction type needed
        return everyone.view(self.world, len(mine)).max(dim=0).values.tolist()

    def gather(self, value: float) -> list[float]:
        """Every rank's `value`, in rank order (an AllGather of fp64)."""
        if self.world == 1:
            return [float(value)]
        torch = self.torch
        mine = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        everyone = torch.empty(self.world, dtype=torch.float64, device=self.device)
        self.dist.all_gather_into_tensor(everyone, mine)
        return everyone.tolist()

    def reset_memory(self) -> None:
        """Frees what earlier rows left (their models must be deleted first) and restarts the peak."""
        gc.collect()
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def measured(self, times: list[float], tokens_per_step: int | None) -> dict:
        """The fields of a measured row: times, tokens/s (every rank's rows; None for a
        row without a batch, such as a collective alone), peak memory (this rank)."""
        s = summary(times)
        peak = self.torch.cuda.max_memory_allocated(self.device)
        rate = tokens_per_step / (s["step_ms"] / 1e3) if tokens_per_step else None
        return {"status": "ok", **s, "tokens_per_step": tokens_per_step, "tokens_per_s": rate, "peak_bytes": peak,
                "peak_mib": peak / 2 ** 20, "peak_reserved_mib": self.torch.cuda.max_memory_reserved(self.device) / 2 ** 20}

    def finish(self) -> None:
        if self.dist is not None and self.dist.is_initialized():
            self.dist.destroy_process_group()


def torch_mlp(torch, features: int, hidden: int, classes: int, depth: int, seed: int):
    """harness/nn's make_mlp in PyTorch: an nn.Sequential of units fc0..fc{depth-1}
    (each nn.Sequential(Linear, ReLU)) and head (Linear), fp32. Same shapes and
    parameter order (weight, then bias); PyTorch's own initialization (the values
    do not change a step's time)."""
    nn = torch.nn
    torch.manual_seed(seed)
    units = [nn.Sequential(nn.Linear(features if u == 0 else hidden, hidden), nn.ReLU()) for u in range(depth)]
    return nn.Sequential(*units, nn.Linear(hidden, classes))


def batch(torch, rows: int, features: int, classes: int, seed: int, device):
    """x ~ N(0, 1) of (rows, features) and integer targets in [0, classes), on `device`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g)
    y = torch.randint(0, classes, (rows,), generator=g)
    return x.to(device), y.to(device)


# --------------------------------------------------------------------------
# Side by side: the project's rows (Google Benchmark JSON) and the torch lines
# --------------------------------------------------------------------------

_GB_SUFFIX = re.compile(r"(/iterations:\d+|/repeats:\d+|/manual_time|/real_time|/process_time)+$")


def our_rows(bench_json: dict) -> dict[str, dict]:
    """{row name without Google Benchmark's suffixes: its entry} of a --benchmark_out file."""
    return {_GB_SUFFIX.sub("", b.get("run_name") or b["name"]): b for b in bench_json.get("benchmarks", [])}


def compare_lines(bench_json: dict, torch_lines: list[dict]) -> list[str]:
    """The side-by-side table: per torch line, its step time, tokens/s and peak
    memory, the project's number of the row it names (compare_with, counter
    compare_counter) and ours / torch (below 1: the project is faster)."""
    ours = our_rows(bench_json)
    head = "%-34s %10s %10s %8s %12s %10s  %s" % ("torch row", "torch ms", "ours ms", "ours/pt", "tokens/s",
                                                  "peak MiB", "project row")
    out = [head]
    for line in torch_lines:
        row = line.get("row", "?")
        if line.get("status") != "ok":
            out.append("%-34s %s" % (row, "not run: " + str(line.get("reason", "?"))))
            continue
        ms = line["step_ms"]
        name, counter = line.get("compare_with"), line.get("compare_counter", "step_ms")
        mine = ours.get(name, {}).get(counter) if name else None
        ratio = "%8.2f" % (mine / ms) if mine and ms > 0 else "%8s" % "-"
        if name is None:
            where = "(no project row to compare)"
        elif mine is None:
            where = f"{name} [{counter}]: not in the project's results"
        else:
            where = f"{name} [{counter}]"
        rate = line.get("tokens_per_s")
        out.append("%-34s %10.3f %10s %s %12s %10.2f  %s" % (
            row, ms, "%.3f" % mine if mine is not None else "-", ratio, "%.0f" % rate if rate else "-",
            line["peak_mib"], where))
    return out


def read_jsonl(path: Path) -> list[dict]:
    lines = []
    for number, text in enumerate(Path(path).read_text().splitlines(), 1):
        if text.strip():
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not JSON: {e}") from e
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The project's GPU rows beside PyTorch's (see the module's doc).")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp_parser = sub.add_parser("compare", help="print the side-by-side table")
    cmp_parser.add_argument("ours", type=Path, help="the project's bench --benchmark_out file (JSON)")
    cmp_parser.add_argument("torch", type=Path, nargs="+", help="torch scripts' --out files (JSON lines)")
    args = parser.parse_args(argv)
    torch_lines = []
    try:
        bench_json = json.loads(args.ours.read_text()) if args.ours.exists() else {}
        for path in args.torch:
            if path.exists():
                torch_lines += read_jsonl(path)
            else:
                print(f"compare: {path} is missing (its step did not run or wrote nothing)")
    except (OSError, ValueError) as e:
        print(f"compare: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not bench_json:
        print(f"compare: {args.ours} is missing: the project's column is empty")
    print("\n".join(compare_lines(bench_json, torch_lines)))
    print("ours/pt: the project's number / PyTorch's step time (above 1: PyTorch is faster; "
          "the goal for DDP and FSDP steps is at most 1.2)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
