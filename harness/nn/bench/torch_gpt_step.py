#!/usr/bin/env python3
"""One training step of the labs' GPT in PyTorch beside the project's own, on one GPU.

What this script teaches: where a hand-written training core stands against the
framework everyone uses, at the same shapes, on the same GPU, measured the same
way. For each shape it prints one row per contender:

    dtl (fp32)            the project: build/harness/nn/dtl_nn_gpu_step (bench/gpu_step.cc)
    torch eager fp32      the same model in PyTorch, TF32 off (full fp32 GEMMs, as cuBLAS's
                          cublasSgemm in the project)
    torch bf16 autocast   torch.autocast(dtype=bfloat16): GEMMs in bf16 on tensor cores,
                          fp32 master weights and optimizer (lab 05's recipe)

with tokens/s (B*T / step time), the median step time, and the peak memory.

The model is harness/nn's make_gpt (model.cc): token + position embeddings; per
block x + attn(LayerNorm(x)) (qkv Linear with bias, causal softmax, proj Linear)
and x + proj(GELU_tanh(fc(LayerNorm(x)))) with fc to 4C; a final LayerNorm and
an lm_head without bias; mean cross-entropy; AdamW. One step = zero_grad,
forward, loss, backward, AdamW step, and the loss read on the host (loss.item()),
because the project's loss comes back to the host every step too.

What is compared, and what differs:
  - Time: on both sides the median of 50 steps after 10 warm-up steps, by the
    host clock around a step, with the same fixed random batch on the GPU. The
    project's loss waits for its stream within forward; PyTorch's loss.item()
    at the end of the step: either way each step waits for the one before.
  - Memory: PyTorch's torch.cuda.max_memory_allocated() (tensor bytes, rounded to
    the caching allocator's 512-byte blocks) vs the project's memory tracker peak
    (exact tensor bytes: parameters, gradients, AdamW's state, activations and
    scratch; harness/nn/memory.h). Neither counts cuBLAS's workspace or the CUDA
    context.
  - fp32 on both sides in the first two rows; the project has no bf16 compute in
    its layers (lab 05 keeps 16-bit copies and computes in fp32), so the third
    row is what autocast would add.

Run on the GPU host only (it needs CUDA and PyTorch); harness/nn/bench/gpu_check.sh
runs it. Never in CI: no test registers it. Usage:

    env -u LD_LIBRARY_PATH python3 harness/nn/bench/torch_gpt_step.py [--dtl build/harness/nn/dtl_nn_gpu_step]
        [--config small|medium|all] [--steps N]
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

# Shapes: name -> (vocab, batch, context, channels, heads, layers).
#   small: nn_bench's GPT breakdown (bench/nn_bench.cc), what dtl_train gpt trains.
#   medium: the same GPT at a size a GPU can be busy with (launches no longer dominate).
CONFIGS = {
    "small": (33, 8, 64, 64, 4, 2),
    "medium": (65, 16, 256, 256, 8, 4),
}


def run_dtl(binary, vocab, batch, context, channels, heads, layers, steps, env):
    """The project's row: (ms per step, peak bytes) from dtl_nn_gpu_step, or raises."""
    cmd = [binary] + [str(v) for v in (vocab, batch, context, channels, heads, layers, steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    text = out.stdout + out.stderr
    found = re.search(r"median_ms ([\d.]+) tokens_per_s \S+ peak_bytes (\d+)", text)
    if out.returncode != 0 or not found:
        raise RuntimeError("%s failed (exit %d):\n%s" % (binary, out.returncode, text[-2000:]))
    return float(found.group(1)), float(found.group(2))


def torch_rows(vocab, batch, context, channels, heads, layers, steps, warmup):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False  # full fp32 GEMMs, as the project's cublasSgemm
    torch.backends.cudnn.allow_tf32 = False

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(channels, eps=1e-5)
            self.qkv = nn.Linear(channels, 3 * channels)
            self.proj = nn.Linear(channels, channels)

        def forward(self, x):  # x (B, T, C)
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))  # (B, NH, T, hs)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c // heads)  # (B, NH, T, T), written out as in the project
            att = att.masked_fill(torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
            y = att.softmax(dim=-1) @ v
            return x + self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(channels, eps=1e-5)
            self.fc = nn.Linear(channels, 4 * channels)
            self.proj = nn.Linear(4 * channels, channels)

        def forward(self, x):
            return x + self.proj(F.gelu(self.fc(self.ln(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, channels)
            self.wpe = nn.Embedding(context, channels)
            self.blocks = nn.Sequential(*[m for _ in range(layers) for m in (Attention(), Mlp())])
            self.lnf = nn.LayerNorm(channels, eps=1e-5)
            self.lm_head = nn.Linear(channels, vocab, bias=False)

        def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
            return self.lm_head(self.lnf(self.blocks(x)))

    rows = []
    for label, autocast in (("torch eager fp32", False), ("torch bf16 autocast", True)):
        torch.manual_seed(1)
        model = Gpt().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        x = torch.randint(0, vocab, (batch, context), device="cuda")
        y = torch.randint(0, vocab, (batch, context), device="cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=False)  # the project zeroes its flat gradient buffer
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
            loss.backward()
            opt.step()
            loss.item()  # the loss on the host: waits for the step, as the project's loss does
            if i >= warmup:
                times.append(time.perf_counter() - start)
        rows.append((label, statistics.median(times) * 1e3, float(torch.cuda.max_memory_allocated())))
        del model, opt, x, y, logits, loss  # nothing of this row counts in the next one
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtl", default="build/harness/nn/dtl_nn_gpu_step", help="the project's step binary")
    parser.add_argument("--config", default="all", choices=["small", "medium", "all"])
    parser.add_argument("--steps", type=int, default=50, help="timed steps (after 10 warm-up steps)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch_gpt_step.py: PyTorch is not installed here (run it on the GPU host)")
    if not torch.cuda.is_available():
        sys.exit("torch_gpt_step.py: no GPU visible to PyTorch: nothing to compare")
    print("device: %s, PyTorch %s, CUDA %s" % (torch.cuda.get_device_name(0), torch.__version__, torch.version.cuda))

    # The project's binary needs the staged libraries (LD_LIBRARY_PATH of .carry/device-env.sh), which
    # this process was started without (PyTorch loads its own): pass them on if saved.
    env = dict(os.environ)
    if "DTL_LD_LIBRARY_PATH" in env:
        env["LD_LIBRARY_PATH"] = env["DTL_LD_LIBRARY_PATH"]

    names = ["small", "medium"] if args.config == "all" else [args.config]
    print("%-8s %-22s %12s %10s %14s %9s" % ("shape", "who", "tokens/s", "ms/step", "peak memory", "vs dtl"))
    for name in names:
        vocab, batch, context, channels, heads, layers = CONFIGS[name]
        print("%s: V %d, B %d, T %d, C %d, NH %d, L %d" % (name, vocab, batch, context, channels, heads, layers))
        try:
            dtl_ms, dtl_peak = run_dtl(args.dtl, vocab, batch, context, channels, heads, layers, args.steps, env)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            print("%s: the project's row failed: %s" % (name, e))
            continue
        rows = [("dtl (fp32)", dtl_ms, dtl_peak)] + torch_rows(vocab, batch, context, channels, heads, layers,
                                                                  args.steps, 10)
        for who, ms, peak in rows:
            print("%-8s %-22s %12.0f %10.3f %11.2f MiB %8.2fx" % (
                name, who, batch * context / (ms / 1e3), ms, peak / 2 ** 20, dtl_ms / ms))
    print("vs dtl: the project's step time / this row's (above 1: this row is faster)")


if __name__ == "__main__":
    main()
