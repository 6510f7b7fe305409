#!/usr/bin/env python3
"""How long a class takes to grade, and whether a batch scores as single gradings do.

Builds a batch of lab 04 submissions: COPIES copies of the reference with MUTANTS
(below) spread among them, each a plausible mistake that costs points. Then it
grades the batch as an instructor would (`./dtl grade 04 --batch DIR --jobs J`),
times it, and grades each mutant again on its own: a mutant's score in the batch
must equal its score alone, item by item, and every copy of the reference must
score what the reference scores alone. Prints the table the README's instructor
section records.

usage: python3 grader/batch_bench.py [--copies 100] [--jobs 2] [--work DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAB = "04"
# A submission is a student's checkout: lab 04's files and those of lab 03, whose
# ring lab 04 builds on (both the reference's here).
LABS = ("03_ring_allreduce", "04_bucketed_ddp")

# name: (file, old, new). Each `old` stands exactly once in the reference's file.
MUTANTS = {
    "held_back": ("ddp_reducer.cc",  # serialised: every bucket waits for the last gradient (loses speed)
                  "  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped) {\n",
                  "  if (--pending_[static_cast<std::size_t>(b)] == 0 && options_.mode == ReducerMode::kOverlapped &&\n"
                  "      std::count(pending_.begin(), pending_.end(), std::size_t{0}) ==\n"
                  "          static_cast<std::ptrdiff_t>(pending_.size())) {\n"),
    "sum_not_average": ("ddp_reducer.cc", "DType::kF32, ReduceOp::kAvg);", "DType::kF32, ReduceOp::kSum);"),
    "exact_cap_left_open": ("ddp_buckets.cc", "    if (current_bytes >= cap()) {", "    if (current_bytes > cap()) {"),
    "first_cap_ignored": ("ddp_buckets.cc", "return buckets.empty() ? first_cap_bytes : cap_bytes;", "return cap_bytes;"),
    # Equivalent, kept as a check of the check: reset_step() drops the bucket's Work,
    # whose destructor waits, so the gradients are averaged before finish() returns.
    "last_bucket_not_waited": ("ddp_reducer.cc", "for (std::size_t b = 0; b < next_launch_; ++b) work_[b].wait();",
                               "for (std::size_t b = 0; b + 1 < next_launch_; ++b) work_[b].wait();"),
    "no_sync_nests": ("ddp_reducer.cc", "  if (no_sync_) {\n    throw Error(\"Reducer::no_sync(): already inside",
                      "  if (false) {\n    throw Error(\"Reducer::no_sync(): already inside"),
    "second_gradient_accepted": ("ddp_reducer.cc", "  if (ready_[i]) {", "  if (false && ready_[i]) {"),
    "bucket_one_short": ("ddp_reducer.cc", "    bucket.count = end - bucket.offset;",
                         "    bucket.count = end - bucket.offset - 1;"),
    "no_reset_after_step": ("ddp_reducer.cc", "  record_stats(wait_begin, wait_end);\n  reset_step();\n",
                            "  record_stats(wait_begin, wait_end);\n"),
    "issued_in_finish": ("ddp_reducer.cc", "  if (options_.mode != ReducerMode::kOverlapped) launch_ready_buckets();",
                         "  launch_ready_buckets();"),
}


EQUIVALENT = {"last_bucket_not_waited"}  # mistakes that cannot cost points (see above)


def make_submission(dest: Path, mutant: str | None) -> None:
    for lab in LABS:
        src = dest / "labs" / lab / "src"
        src.mkdir(parents=True)
        for path in sorted((ROOT / "reference" / lab / "src").iterdir()):
            if path.suffix in (".cc", ".h", ".cu", ".cuh"):
                shutil.copyfile(path, src / path.name)
    if mutant is None:
        return
    file, old, new = MUTANTS[mutant]
    file = Path("labs") / LABS[1] / "src" / file
    text = (dest / file).read_text()
    if text.count(old) != 1:
        sys.exit(f"batch_bench: mutant {mutant}: {old!r} stands {text.count(old)} times in {file}, not once")
    if mutant == "issued_in_finish":  # and the hook no longer issues anything
        text = text.replace("== 0 && options_.mode == ReducerMode::kOverlapped) {", "== 0 && false) {")
    (dest / file).write_text(text.replace(old, new))


def scores(results: Path) -> dict[str, float]:
    data = json.loads(results.read_text())
    return {t["name"]: float(t.get("score", 0)) for t in data["tests"] if t.get("max_score", 0) > 0} | \
        {"TOTAL": float(data["score"])}


def grade_alone(sub: Path, out: Path) -> dict[str, float]:
    subprocess.run([sys.executable, str(ROOT / "grader" / "grade.py"), LAB, "--submission", str(sub), "--json",
                    str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False)
    return scores(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=100, help="submissions in the batch, mutants included")
    parser.add_argument("--jobs", type=int, default=2, help="the batch's --jobs")
    parser.add_argument("--work", type=Path, help="folder for the batch and its results (default: a temporary one)")
    args = parser.parse_args()
    if args.copies < len(MUTANTS) + 1:
        parser.error(f"--copies must be at least {len(MUTANTS) + 1} (the mutants and one reference)")
    work = args.work or Path(tempfile.mkdtemp(prefix="dtl-batch-bench-"))
    batch, out, alone = work / "submissions", work / "grades", work / "alone"
    shutil.rmtree(batch, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    # Mutants spread evenly through the batch (names sort in batch order).
    step = args.copies // len(MUTANTS)
    where = {i * step + step // 2: name for i, name in enumerate(MUTANTS)}
    for i in range(args.copies):
        make_submission(batch / f"s{i:03d}", where.get(i))
    print(f"batch_bench: {args.copies} lab {LAB} submissions ({len(MUTANTS)} mutants) in {batch}", flush=True)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "grader" / "grade.py"), LAB, "--batch", str(batch), "--out",
                           str(out), "--jobs", str(args.jobs)], cwd=ROOT, check=False)
    batch_seconds = time.monotonic() - start
    if proc.returncode != 0:
        print(f"batch_bench: the batch exited {proc.returncode}")
    with open(out / "summary.csv") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    alone.mkdir(parents=True, exist_ok=True)
    reference = grade_alone(batch / "s000" if 0 not in where else batch / "s001", alone / "reference.json")
    problems, notes = [], []
    print(f"\n| submission | mistake | batch | alone |\n| --- | --- | ---: | ---: |")
    for i, name in sorted(where.items()):
        sub = f"s{i:03d}"
        in_batch, by_itself = scores(out / f"{sub}.json"), grade_alone(batch / sub, alone / f"{sub}.json")
        print(f"| {sub} | {name} | {in_batch['TOTAL']:g} | {by_itself['TOTAL']:g} |")
        differ = sorted(k for k in in_batch.keys() | by_itself.keys() if in_batch.get(k) != by_itself.get(k))
        # A speed item is a measurement: its score may move by a step between two runs.
        measured = [k for k in differ if k.startswith("Speed") or k == "TOTAL"]
        if set(differ) - set(measured):
            problems.append(f"{sub} ({name}): {[(k, in_batch.get(k), by_itself.get(k)) for k in differ]}")
        elif measured:
            notes.append(f"{sub} ({name}): speed scored {[(k, in_batch.get(k), by_itself.get(k)) for k in measured]}")
        if in_batch["TOTAL"] >= reference["TOTAL"] and name not in EQUIVALENT:
            problems.append(f"{sub} ({name}) loses no points: {in_batch['TOTAL']:g}")
    copies = [s for s in rows if int(s[1:]) not in where]
    low = [s for s in copies if float(rows[s]["score"]) != reference["TOTAL"]]
    if low:
        problems.append(f"{len(low)} reference copies differ from the reference alone ({reference['TOTAL']:g}): "
                        + ", ".join(f"{s}={rows[s]['score']}" for s in low[:10]))
    print(f"\nbatch of {args.copies} (--jobs {args.jobs}): {batch_seconds / 60:.1f} min, "
          f"{batch_seconds / args.copies:.1f} s per submission; {len(copies)} reference copies at "
          f"{reference['TOTAL']:g}: {len(copies) - len(low)} equal")
    for n in notes:
        print("note (batch, alone):", n)
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
