#!/usr/bin/env python3
"""The outside anchor of lab 03's reduce-copy rows: PyTorch's c = a + b on the same GPU.

Bytes counted as the lab counts them (3 x size: two reads and a write), times from
CUDA events, the median of 50 runs after 10 warm-ups, float32. Buffer sets rotate so
that each round touches at least 4x the L2 cache, as the lab's benchmark does.
Run on the GPU host with PyTorch's own libraries:

    env -u LD_LIBRARY_PATH python3 labs/03_ring_allreduce/bench/torch_anchor.py

Prints one line per size: `torch.add/<size> <GB/s> GB/s (<median us> us)`.
"""
import statistics

import torch


def gbps(size_bytes: int, runs: int = 50, warmup: int = 10) -> tuple[float, float]:
    n = size_bytes // 4
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sets = max(1, -(-4 * l2 // (3 * size_bytes)))
    bufs = [(torch.ones(n, device="cuda"), torch.ones(n, device="cuda"), torch.empty(n, device="cuda"))
            for _ in range(sets)]
    times = []
    for i in range(warmup + runs):
        a, b, c = bufs[i % sets]
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.add(a, b, out=c)
        stop.record()
        stop.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop) * 1e-3)
    t = statistics.median(times)
    return 3 * size_bytes / t * 1e-9, t * 1e6


def main() -> None:
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    for mib in (1, 16, 64, 256, 1024):
        rate, us = gbps(mib << 20)
        print(f"torch.add/{mib} MiB {rate:.0f} GB/s ({us:.1f} us)")


if __name__ == "__main__":
    main()
