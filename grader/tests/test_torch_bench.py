"""The PyTorch comparisons of labs 04-07 (labs/0[4-7]_*/bench/torch_*.py and
harness/nn/bench/torch_bench_util.py), checked where there is no PyTorch and no GPU:
the sizes they read from the C++ benches, the bucket and stage cuts, the one-GPU
limit, the timing loop, the side-by-side table, and the scripts' refusals of bad
arguments. What needs PyTorch and a GPU (the timings themselves) runs only on the
GPU host, from each lab's bench/gpu_check.sh."""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "nn" / "bench"))
import torch_bench_util as tbu  # noqa: E402

SCRIPTS = {
    "04": ROOT / "labs" / "04_bucketed_ddp" / "bench" / "torch_ddp.py",
    "05": ROOT / "labs" / "05_mixed_precision" / "bench" / "torch_amp.py",
    "06": ROOT / "labs" / "06_fsdp" / "bench" / "torch_fsdp.py",
    "07": ROOT / "labs" / "07_pipeline" / "bench" / "torch_pipeline.py",
}
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def load(lab: str):
    """A script as a module (its top level imports no torch)."""
    spec = importlib.util.spec_from_file_location(f"torch_script_{lab}", SCRIPTS[lab])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(lab: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(SCRIPTS[lab]), *args], capture_output=True, text=True,
                          env=full_env, timeout=60)


class TestCppValues(unittest.TestCase):
    def test_expressions(self):
        self.assertEqual(tbu.cpp_number("std::size_t{4} << 20"), 4 << 20)
        self.assertEqual(tbu.cpp_number(" 512 "), 512)
        self.assertAlmostEqual(tbu.cpp_number("1e-3f"), 1e-3)
        self.assertAlmostEqual(tbu.cpp_number("0.01f"), 0.01)
        self.assertEqual(tbu.cpp_number("4 * 1024 + 1"), 4097)
        for bad in ("kIn", "1 / 2", "foo()", "1.5 << 2", "", "true"):
            with self.assertRaises(ValueError, msg=bad):
                tbu.cpp_number(bad)

    def test_first_assignment_of_each_name(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "bench.cc"
            path.write_text("// kBatch == 3 is not an assignment\n"
                            "constexpr std::int64_t kIn = 256, kHidden = 1024, kBatch = 512;\n"
                            "const nn::AdamWOptions kAdamW{.lr = 1e-3f, .weight_decay = 0.01f};\n"
                            "  const std::size_t cap = std::size_t{4} << 20;\n"
                            "  std::size_t bucket_cap_bytes = cap;  // not a constant, and not the first `cap =`\n"
                            "constexpr std::int64_t kBatch = 8;\n")
            got = tbu.cpp_values(path, ["kIn", "kHidden", "kBatch", "lr", "weight_decay", "cap"])
            self.assertEqual(got, {"kIn": 256, "kHidden": 1024, "kBatch": 512, "lr": 1e-3, "weight_decay": 0.01,
                                   "cap": 4 << 20})
            with self.assertRaisesRegex(ValueError, r"bench\.cc.*kClasses"):
                tbu.cpp_values(path, ["kClasses"])
            with self.assertRaisesRegex(ValueError, r"bench\.cc.*bucket_cap_bytes"):
                tbu.cpp_values(path, ["bucket_cap_bytes"])  # `= cap`: a name, not a constant
            path.write_text("nn::Model real_model() { return nn::make_mlp(64, 512, 10, 8, 7); }\n"
                            "nn::Model other() { return nn::make_mlp(kIn, 3); }\n")
            self.assertEqual(tbu.cpp_call_ints(path, "real_model() { return nn::make_mlp"), [64, 512, 10, 8, 7])
            with self.assertRaisesRegex(ValueError, "integer literals"):
                tbu.cpp_call_ints(path, "other() { return nn::make_mlp")

    def test_every_script_reads_its_row_from_the_cpp_bench(self):
        """Each script's sizes() parses today's C++ source, and the sizes agree with what
        the benches' own comments say of them (so a changed C++ constant that the comment
        follows is read right, and one that the parse would miss fails here, not on the GPU host)."""
        s04 = load("04").sizes()
        params04 = sum(tbu.mlp_unit_params(s04["kIn"], s04["kHidden"], s04["kClasses"], s04["kDepth"]))
        text04 = (ROOT / "labs/04_bucketed_ddp/bench/ddp_gpu_bench.cc").read_text()
        self.assertAlmostEqual(params04 / 1e6, float(re.search(r"\(([\d.]+) M parameters", text04).group(1)), places=1)
        self.assertIn(f"same {s04['cap'] >> 20} MiB cap", text04)  # the row's comment names its cap
        self.assertEqual(s04["kDefaultFirstBucketCapBytes"], 1 << 20)

        s05 = load("05").sizes()
        n05 = sum(tbu.mlp_unit_params(s05["kIn"], s05["kHidden"], s05["kClasses"], s05["kDepth"]))
        # mixed_gpu_bench.cc: "the 16-bit and the fp32 gradients of this MLP fit one bucket each"
        self.assertEqual(len(tbu.buckets(n05, 2, int(s05["bucket_cap_bytes"]))), 1)
        self.assertEqual(len(tbu.buckets(n05, 4, int(s05["bucket_cap_bytes"]))), 1)
        self.assertEqual((s05["init_scale"], s05["growth_factor"], s05["backoff_factor"], s05["growth_interval"]),
                         (65536.0, 2.0, 0.5, 2000))  # PyTorch's GradScaler defaults too

        s06 = load("06").sizes()
        params06 = sum(tbu.mlp_unit_params(s06["kIn"], s06["kHidden"], s06["kClasses"], s06["kDepth"]))
        text06 = (ROOT / "labs/06_fsdp/bench/fsdp_gpu_bench.cc").read_text()
        self.assertAlmostEqual(params06 / 1e6, float(re.search(r"([\d.]+) M\s*(?://\s*)?parameters", text06).group(1)),
                               places=2)
        self.assertIn(f"Gpu/fsdp+prefetch{s06['prefetch']}/nccl", text06)  # the row the script compares with
        self.assertIn(f"units fc0..fc{s06['kDepth'] - 1} and head", text06)

        script07 = load("07")
        s07 = script07.sizes()
        # the default --micro-batches must be runnable at P = 1 and 2
        for stages in (1, 2):
            self.assertEqual(script07.micro_batch_list("4,8,16", s07["kBatch"], stages), [4, 8, 16])


class TestCuts(unittest.TestCase):
    def test_mlp_unit_params(self):
        self.assertEqual(tbu.mlp_unit_params(256, 1024, 10, 4), [263168, 1049600, 1049600, 1049600, 10250])
        self.assertEqual(tbu.mlp_unit_params(1, 1, 1, 1), [2, 2])
        with self.assertRaisesRegex(ValueError, "depth 0"):
            tbu.mlp_unit_params(4, 4, 4, 0)

    def test_buckets(self):
        self.assertEqual(tbu.buckets(10, 2, 8), [(0, 4), (4, 4), (8, 2)])
        self.assertEqual(tbu.buckets(8, 2, 8), [(0, 4), (4, 4)])
        self.assertEqual(tbu.buckets(0, 4, 100), [])
        self.assertEqual(tbu.buckets(3, 4, 3), [(0, 1), (1, 1), (2, 1)])  # cap below one element: one each
        rng = random.Random(5)
        for _ in range(200):
            n, element, cap = rng.randrange(0, 300), rng.choice((2, 4)), rng.randrange(1, 100)
            cut = tbu.buckets(n, element, cap)
            self.assertEqual(sum(c for _, c in cut), n)
            self.assertEqual([o for o, _ in cut], [sum(c for _, c in cut[:k]) for k in range(len(cut))])
            self.assertTrue(all(c * element <= max(cap, element) for _, c in cut))
        with self.assertRaises(ValueError):
            tbu.buckets(10, 0, 8)

    def test_split_stages_is_optimal(self):
        """Against brute force over every cut: the largest stage is as small as it can be."""
        rng = random.Random(11)
        for _ in range(150):
            n = rng.randrange(1, 8)
            costs = [float(rng.randrange(0, 20)) for _ in range(n)]
            for stages in range(1, n + 1):
                bounds = tbu.split_stages(costs, stages)
                self.assertEqual((bounds[0], bounds[-1], len(bounds)), (0, n, stages + 1))
                self.assertTrue(all(a < b for a, b in zip(bounds, bounds[1:])), bounds)
                got = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
                best = min(max(sum(costs[a:b]) for a, b in zip((0, *cut), (*cut, n)))
                           for cut in itertools.combinations(range(1, n), stages - 1))
                self.assertEqual(got, best, (costs, stages, bounds))

    def test_split_stages_ties_and_the_lab07_model(self):
        self.assertEqual(tbu.split_stages([1, 1, 1], 2), [0, 1, 3])  # earliest cut among equals (model.cc)
        self.assertEqual(tbu.split_stages([1, 1, 1, 1], 2), [0, 2, 4])
        self.assertEqual(tbu.split_stages([5], 1), [0, 1])
        # make_mlp(64, 512, 10, 8): fc0 33280, fc1..fc7 262656 each, head 5130; by hand, P = 2
        # cuts after fc3 (821248 | 1055754) rather than after fc4 (1083904 | 793098).
        counts = [float(c) for c in tbu.mlp_unit_params(64, 512, 10, 8)]
        self.assertEqual(tbu.split_stages(counts, 2), [0, 4, 9])
        for bad in (0, 10):
            with self.assertRaisesRegex(ValueError, "stages"):
                tbu.split_stages(counts, bad)

    def test_stage_shapes(self):
        script07 = load("07")
        s = {"features": 64, "hidden": 512, "classes": 10, "depth": 8}
        self.assertEqual([script07.stage_shapes(s, [0, 4, 9], r) for r in (0, 1)], [(64, 512), (512, 10)])
        self.assertEqual(script07.stage_shapes(s, [0, 9], 0), (64, 10))
        self.assertEqual([script07.stage_shapes(s, [0, 3, 6, 9], r) for r in range(3)],
                         [(64, 512), (512, 512), (512, 10)])

    def test_bubble_theory(self):
        self.assertEqual(tbu.bubble_theory(1, 8), 0.0)
        self.assertAlmostEqual(tbu.bubble_theory(2, 8), 1 / 9)
        self.assertAlmostEqual(tbu.bubble_theory(3, 4), 2 / 6)
        self.assertAlmostEqual(tbu.bubble_theory(4, 4), 3 / 7)
        with self.assertRaises(ValueError):
            tbu.bubble_theory(2, 0)

    def test_micro_batch_list(self):
        script07 = load("07")
        self.assertEqual(script07.micro_batch_list("4, 8,16", 64, 2), [4, 8, 16])
        self.assertEqual(script07.micro_batch_list("3", 63, 3), [3])
        for text, batch, stages, why in (("2", 64, 3, "m >= P = 3"), ("3", 64, 2, "divide the batch of 64"),
                                         ("", 64, 1, "empty"), ("4,x", 64, 1, "integers"), ("0", 64, 1, "m >= 1")):
            with self.assertRaisesRegex(ValueError, re.escape(why)):
                script07.micro_batch_list(text, batch, stages)


class TestOneGpu(unittest.TestCase):
    def test_refusal(self):
        self.assertIsNone(tbu.shared_gpu_refusal(1, 1, (2, 28, 9), {}))
        self.assertIsNone(tbu.shared_gpu_refusal(2, 2, (2, 28, 9), {}))
        self.assertIsNone(tbu.shared_gpu_refusal(4, 4, None, {}))
        for world, gpus in ((2, 1), (3, 2), (4, 1)):
            why = tbu.shared_gpu_refusal(world, gpus, (2, 28, 9), {"NCCL_MULTI_RANK_GPU_ENABLE": "1"})
            self.assertIn(f"{world} ranks on {gpus} GPU", why)
            self.assertIn("2.28.9", why)
        self.assertIn("unknown", tbu.shared_gpu_refusal(2, 1, None, {}))
        self.assertIn("NCCL_MULTI_RANK_GPU_ENABLE=1", tbu.shared_gpu_refusal(2, 1, (2, 30, 7), {}))
        self.assertIsNone(tbu.shared_gpu_refusal(2, 1, (2, 30, 7), {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}))
        self.assertIsNone(tbu.shared_gpu_refusal(3, 1, (3, 0, 0), {"NCCL_MULTI_RANK_GPU_ENABLE": "1"}))
        self.assertIn("no GPU", tbu.shared_gpu_refusal(1, 0, (2, 30, 7), {}))

    def test_nccl_tuple(self):
        self.assertEqual(tbu.nccl_tuple((2, 28, 9)), (2, 28, 9))
        self.assertEqual(tbu.nccl_tuple((2, 28, 9, "+cuda13.0")), (2, 28, 9))
        self.assertEqual(tbu.nccl_tuple(22809), (2, 28, 9))
        self.assertEqual(tbu.nccl_tuple(2708), (2, 7, 8))
        self.assertIsNone(tbu.nccl_tuple("2.28"))


class TestTiming(unittest.TestCase):
    def test_time_steps(self):
        now, log = [0.0], []

        def clock():
            return now[0]

        def step():
            log.append("step")
            now[0] += 1.0 + len(log)  # each step takes longer than the one before

        times = tbu.time_steps(step, lambda: log.append("sync"), 2, 3, before=lambda: log.append("before"),
                               clock=clock)
        self.assertEqual(log, ["before", "step", "sync"] * 5)
        self.assertEqual(times, [1.0 + 8, 1.0 + 11, 1.0 + 14])  # the warm-up steps (2 and 5 s) left out
        for warmup, steps in ((-1, 1), (0, 0)):
            with self.assertRaises(ValueError):
                tbu.time_steps(step, lambda: None, warmup, steps)

    def test_summary(self):
        got = tbu.summary([s / 1e3 for s in (10, 1, 9, 2, 8, 3, 7, 4, 6, 5)])
        self.assertAlmostEqual(got["step_ms"], 5.5)
        self.assertAlmostEqual(got["p10_ms"], 1.0)
        self.assertAlmostEqual(got["p90_ms"], 9.0)
        self.assertEqual(got["timed_steps"], 10)
        self.assertAlmostEqual(tbu.summary([0.002])["p90_ms"], 2.0)
        with self.assertRaises(ValueError):
            tbu.summary([])


class TestSideBySide(unittest.TestCase):
    BENCH = {"benchmarks": [
        {"name": "Gpu/overlap/nccl/iterations:20/manual_time", "run_name": "Gpu/overlap/nccl/iterations:20/manual_time",
         "step_ms": 6.0, "vendor_ms": 8.0},
        {"name": "Gpu/nccl/f16 buckets/iterations:4/manual_time", "impl_ms": 0.5, "fp32_ms": 0.9}]}
    LINES = [
        {"row": "torch/ddp/nccl", "status": "ok", "step_ms": 4.0, "tokens_per_s": 128000.0, "peak_mib": 52.5,
         "compare_with": "Gpu/overlap/nccl", "compare_counter": "step_ms"},
        {"row": "torch/nccl/f32 buckets", "status": "ok", "step_ms": 0.3, "tokens_per_s": None, "peak_mib": 3.0,
         "compare_with": "Gpu/nccl/f16 buckets", "compare_counter": "fp32_ms"},
        {"row": "torch/fsdp2+prefetch1/nccl", "status": "ok", "step_ms": 2.0, "tokens_per_s": 1.0, "peak_mib": 1.0,
         "compare_with": "Gpu/fsdp+prefetch1/nccl", "compare_counter": "step_ms"},
        {"row": "torch/no-ddp", "status": "ok", "step_ms": 2.0, "tokens_per_s": 256000.0, "peak_mib": 40.0,
         "compare_with": None},
        {"row": "torch_pipeline.py at 2 ranks", "status": "unrun", "reason": "NCCL 2.28.9 refuses"}]

    def test_rows_and_ratios(self):
        self.assertEqual(set(tbu.our_rows(self.BENCH)), {"Gpu/overlap/nccl", "Gpu/nccl/f16 buckets"})
        lines = tbu.compare_lines(self.BENCH, self.LINES)
        self.assertEqual(len(lines), 1 + len(self.LINES))
        ddp, f32, fsdp, floor, unrun = lines[1:]
        self.assertRegex(ddp, r"^torch/ddp/nccl\s+4\.000\s+6\.000\s+1\.50\s+128000\s+52\.50\s+Gpu/overlap/nccl \[step_ms\]$")
        self.assertRegex(f32, r"0\.300\s+0\.900\s+3\.00\s+-\s+3\.00\s+Gpu/nccl/f16 buckets \[fp32_ms\]$")
        self.assertIn("not in the project's results", fsdp)
        self.assertIn("(no project row to compare)", floor)
        self.assertIn("not run: NCCL 2.28.9 refuses", unrun)

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            ours, torch_out = Path(d) / "bench.json", Path(d) / "torch.jsonl"
            ours.write_text(json.dumps(self.BENCH))
            torch_out.write_text("\n".join(json.dumps(line) for line in self.LINES) + "\n\n")
            util = ROOT / "harness" / "nn" / "bench" / "torch_bench_util.py"
            out = subprocess.run([sys.executable, str(util), "compare", str(ours), str(torch_out),
                                  str(Path(d) / "absent.jsonl")], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("absent.jsonl is missing", out.stdout)
            self.assertRegex(out.stdout, r"torch/ddp/nccl .* 1\.50 ")
            torch_out.write_text("{not json\n")
            out = subprocess.run([sys.executable, str(util), "compare", str(ours), str(torch_out)],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, tbu.EXIT_USAGE)
            self.assertIn("torch.jsonl:1: not JSON", out.stderr)


class TestScripts(unittest.TestCase):
    def test_bad_arguments_are_refused_naming_them(self):
        for lab in SCRIPTS:
            out = run_script(lab, "--steps", "0")
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("--steps must be >= 1", out.stderr)
            out = run_script(lab, "--warmup", "1")
            self.assertIn("--warmup must be >= 2", out.stderr)
        out = run_script("07", "--micro-batches", "3")
        self.assertIn("--micro-batches 3: must divide the batch of 64 rows", out.stderr)
        out = run_script("07", "--micro-batches", "2", env={"WORLD_SIZE": "4", "RANK": "0"})
        self.assertIn("m >= P = 4", out.stderr)
        out = run_script("07", "--schedules", "zb")
        self.assertIn("--schedules 'zb'", out.stderr)
        out = run_script("06", "--prefetch", "-1")
        self.assertIn("--prefetch must be >= 0", out.stderr)

    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed here: the scripts would try to run")
    def test_without_pytorch_each_script_says_so(self):
        for lab in SCRIPTS:
            with tempfile.TemporaryDirectory() as d:
                out = run_script(lab, "--out", str(Path(d) / "o.jsonl"))
                self.assertEqual(out.returncode, tbu.EXIT_USAGE, out.stderr)
                self.assertIn("PyTorch is not installed here", out.stderr)
                self.assertEqual((Path(d) / "o.jsonl").read_text(), "")  # emptied, nothing measured


if __name__ == "__main__":
    unittest.main()
