"""Grading one submission from start to end, and a batch of them.

grade_one() is the whole pipeline, in order: the pristine tree with the
submission's files (submission.py), the course's prebuilt objects for that tree
(prebuilt.py, built first if need be), the build of the student's files and the
include check (build.py), the imports check (imports.py: a refused file is
graded as the skeleton's), the test runs (runner.py) inside the sandbox
(sandbox.py), the scores (score.py, perf.py) and the report (report.py). It
works in a fresh temporary folder and
always returns a result: a submission can only lower its score. grade_batch()
grades every sub-folder of a folder: one after the other, or with --jobs N, N
at a time for the build and the correctness runs (each in a process of its
own, its output in OUT/NAME.log), then the speed items one submission at a
time with nothing else of the batch running (Note [Speed in a batch]). A batch
run again into the same OUT keeps the submissions it finished (resume.py) and
prints a progress line with an ETA after each one (progress.BatchProgress).

The temporary folder holds tree/ (the pristine tree with the submission),
build/ and runs/ (each run's working folder). The build's sandbox sees all of it
read-only but build/, and the prebuilt entry's build folder read-only (nothing
of the submission runs while compiling); the runs' sandbox also covers the tree's
reference/ and grader/hidden/ (the sources) and build/ but for the one program
the run runs (read-only), and may write runs/ alone.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import imports, objects, prebuilt, progress, resume
from .build import build, build_tree, compiler_errors, configure_args, foreign_includes
from .lab import GraderError, Lab, binaries_for, skeleton_src
from .perf import fit_ranks, not_gradable_here_row, perf_rows, usable_cores
from .process import confine
from .report import gradescope_results, print_report, totals, write_summary
from .runner import Allowance, gpu_available, run_items
from .sandbox import Sandbox
from .score import TEST_OUTPUT_CAP, failed_rows, item_rows
from .submission import copy_pristine_tree, make_tree, submission_sources

# Temporary folders of gradings in progress: an interrupted grader removes them (cleanup()).
WORK_FOLDERS: set[Path] = set()
# The processes of a batch's parallel gradings (--jobs): an interrupted grader stops them.
WORKERS: set[int] = set()


# How grading in a student repository says that its total is not the whole grade.
HIDDEN_POINTS_NOTE = ("more points come from hidden tests (other rank counts and inputs), graded by your "
                      "instructor: they are not in this total")


def cleanup() -> None:
    """Stops the batch's gradings in progress, which remove their own folders, and
    removes this process's temporary folders (the grader was interrupted)."""
    for pid in list(WORKERS):
        try:
            os.kill(pid, signal.SIGTERM)  # a worker's on_signal kills its runs and removes its tree
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    for folder in list(WORK_FOLDERS):
        shutil.rmtree(folder, ignore_errors=True)


def refused_imports(lab: Lab, tree: Path, build_dir: Path) -> list[tuple[str, imports.Refusal]]:
    """(lab folder, refusal) for every import the rules refuse, every definition or
    start-up section they refuse, and every line of inline assembly (objects.py), in
    the lab's student library and in the dependency labs' (each under its own
    rubric's rules): every submitted file a build compiles."""
    found = [(lab.name, r) for r in imports.check(tree, build_dir, lab.name, lab.imports)]
    for dep in lab.dependencies:
        found += [(dep.name, r) for r in imports.check(tree, build_dir, dep.name, dep.imports)]
    for each in lab.with_dependencies:
        found += [(each.name, r) for r in objects.check_objects(tree, build_dir, each.name)]
        found += [(each.name, r) for r in objects.check_assembly(tree, build_dir, each.name)]
    return found


def revert_to_skeleton(tree: Path, refused: list[tuple[str, imports.Refusal]]) -> list[str]:
    """Puts the skeleton's version in place of every submitted file a refusal names
    (an object file of given/ refused means a submitted header it includes: all of
    the lab's src/ headers go back); returns the notes that say so."""
    notes, reverted = [], set()
    for lab_name, refusal in refused:
        notes.append(f"refused: labs/{lab_name}/{refusal} -- graded as the skeleton's")
        src = tree / "labs" / lab_name / "src"
        if refusal.file.startswith("src/"):
            names = [refusal.file[len("src/"):]]
        else:
            names = [p.name for p in src.iterdir() if p.suffix in (".h", ".cuh")]
        for name in names:
            if (lab_name, name) not in reverted:
                shutil.copyfile(skeleton_src(lab_name) / name, src / name)
                reverted.add((lab_name, name))
    return notes


@dataclass
class Graded:
    """One submission's grading so far: its rows and notes, and, when its speed
    items are measured later (a batch's `hold`), what they need."""
    rows: list[dict]
    notes: list[str]
    refusals: list[str]
    started: float
    passed: set[str] | None = None      # with `held`: the items that passed (the speed items' requires)
    held: Path | None = None            # the folder with its benchmarks, student_bench and reference_bench

    def to_json(self) -> str:
        return json.dumps(dict(rows=self.rows, notes=self.notes, refusals=self.refusals, started=self.started,
                               passed=sorted(self.passed) if self.passed is not None else None,
                               held=str(self.held) if self.held is not None else None))

    @classmethod
    def from_json(cls, text: str) -> "Graded":
        data = json.loads(text)
        return cls(data["rows"], data["notes"], data["refusals"], data["started"],
                   set(data["passed"]) if data["passed"] is not None else None,
                   Path(data["held"]) if data["held"] is not None else None)


def strip_debug_info(programs: list[Path]) -> None:
    """Drops the debug information from the programs a run may see (the hidden
    tests', the reference's benchmark): a run sees only the program it runs, and
    of that no more than the machine code (no names of the hidden tests' locals,
    no line tables)."""
    for program in programs:
        if program.is_file() and not program.is_symlink():  # never through a link into the prebuilt objects
            subprocess.run(["strip", "--strip-debug", str(program)], capture_output=True, timeout=120)


def course_objects(lab: Lab, tree: Path, hidden_dirs: list[Path], targets: list[str]) -> prebuilt.Entry:
    """The prebuilt course objects for the grading of `tree` (its course files, the
    targets), built first if no entry has them (See Note [Prebuilt course objects])."""
    def key_of(t: Path) -> str:
        return prebuilt.course_key(lab, t, configure_args(lab, Path("TREE")), targets)

    with progress.status("course objects"):
        return prebuilt.ensure(lab, key_of(tree), lambda dest: copy_pristine_tree(lab, dest, hidden_dirs), key_of,
                               lambda t, b, tg: build_tree(lab, t, b, tg), targets)


def grade_one(lab: Lab, source: Path, description: str, hidden_dirs: list[Path], args) -> dict:
    """Grades one submission (the lab's src files in `source`); prints the table and
    returns Gradescope's results as a dict. A submission can only lower its score:
    whatever it does, this returns."""
    return finish(lab, grade_correctness(lab, source, description, hidden_dirs, args))


def grade_correctness(lab: Lab, source: Path, description: str, hidden_dirs: list[Path], args,
                      hold: Path | None = None) -> Graded:
    """grade_one() up to the report. With `hold` (a folder), the speed items are not
    measured: their two benchmarks are copied there for measure_held()."""
    started = time.monotonic()
    print(f"Grading lab {lab.number} ({lab.name}): {description}", flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"dtl-grade-{lab.number}-"))
    WORK_FOLDERS.add(work)
    runs = work / "runs"
    runs.mkdir()
    log_lines: list[str] = []

    def log(text: str) -> None:
        log_lines.append(text)
        if args.verbose:
            print(text)

    try:
        tree = work / "tree"
        tree.mkdir()
        notes = make_tree(lab, source, tree, hidden_dirs, args)
        for note in notes:
            print(f"  note: {note}")
        has_hidden = any((tree / "grader" / "hidden" / lab.name).glob("*_test.cc"))
        gpu = gpu_available()
        binaries = binaries_for(lab, has_hidden, gpu)
        # GPU items stay without a GPU: they are listed as not gradable (score.py).
        items = [i for i in lab.items if i.binary in binaries or (i.gpu and not gpu)]
        # A student's repository has no hidden tests: say what they are worth, so that
        # "100 / 100" does not read as the final grade.
        unseen = sum(i.points for i in lab.items if i.binary == "hidden" and i not in items)
        if not any(i.binary == "hidden" for i in lab.items):
            unseen = lab.hidden_points
        unseen_note = f"{unseen:g} {HIDDEN_POINTS_NOTE}" if unseen else ""
        if unseen_note:
            notes.append(unseen_note)
        # Performance items need the reference's benchmark beside the submission's:
        # not gradable in a repository without reference/ (a student's export).
        has_reference = (tree / "reference" / lab.name / "src").is_dir()
        targets = list(binaries.values())
        # The expected tests come from the course's own programs (the reference's),
        # never from one that links submitted code (runner.run_items()).
        listers = {kind: exe.replace("_student_", "_reference_") for kind, exe in binaries.items()} \
            if has_reference else {}
        targets += list(listers.values())
        if lab.perf and has_reference:
            targets += [f"lab{lab.number}_student_bench", f"lab{lab.number}_bench"]

        # The course's objects, prebuilt once (prebuilt.py): this build compiles the student's files only.
        entry = None if getattr(args, "no_prebuilt", False) else course_objects(lab, tree, hidden_dirs, targets)

        build_box = run_box = None
        if args.no_sandbox:
            notes.append("graded WITHOUT the sandbox (--no-sandbox): the submission ran with the grader's rights")
            print(f"  note: {notes[-1]}")
        else:
            build_box = Sandbox(tree=work, writable=[work / "build"], cache=True,
                                read_only=[entry.build] if entry is not None else [])
            # A run writes only runs/; of build/ it sees the one program it runs, read-only.
            run_box = Sandbox(tree=work, writable=[runs], hidden=[tree / "reference", tree / "grader" / "hidden"],
                              gpu=gpu, programs_only=work / "build")

        print("  building ...", flush=True)
        confine(build_box, building=True)
        with progress.status("building"):
            made = build(lab, tree, work / "build", targets, entry)
        refusals: list[str] = []
        if made.returncode == 0 and not foreign_includes(lab, tree, work / "build"):
            # What the student's code imports, before any of it runs (imports.py).
            refused = refused_imports(lab, tree, work / "build")
            if refused:
                refusals = revert_to_skeleton(tree, refused)
                for note in refusals:
                    notes.append(note)
                    print(f"  {note}")
                made = build(lab, tree, work / "build", targets, entry)
                if made.returncode == 0 and refused_imports(lab, tree, work / "build"):
                    raise GraderError("refused imports remain with the skeleton's files: a rubric's "
                                      "[imports] rules refuse the skeleton itself")
        foreign = foreign_includes(lab, tree, work / "build") if made.returncode == 0 else []
        if made.returncode != 0 or foreign:
            if foreign:
                why = "the submission includes files it may not use"
                errors = ("only the lab's src/ and include/, harness/, datasets/ and system headers may be "
                          "included; these are not:\n  " + "\n  ".join(foreign[:10]))
            else:
                why = "the build timed out" if made.timed_out else "the submission does not compile"
                errors = compiler_errors(made.output)
            print(f"  {why}; every item scores 0. {'The compiler said' if not foreign else 'Details'}:\n{errors}")
            # A speed item with more ranks than cores is out of the total for every submission alike.
            cores, why_cores = usable_cores()
            fits = [p for p in lab.perf if fit_ranks(p, cores) is not None]
            rows = failed_rows(items + fits, gpu, f"{why}:\n{errors}")
            rows += [not_gradable_here_row(p, cores, why_cores) for p in lab.perf if p not in fits]
        else:
            print(f"  built in {made.seconds:.0f} s; running tests ...", flush=True)
            exe_dir = work / "build" / "labs" / lab.name
            strip_debug_info([exe_dir / name for name in targets])
            runnable = [i for i in items if gpu or not i.gpu]
            confine(run_box)
            by_run, names, listing = run_items(runnable, binaries, exe_dir, runs, log,
                                               Allowance.starting_now(lab.budget), listers)
            rows = item_rows(items, gpu, by_run, names, listing)
            passed = {r["name"] for r in rows if r["status"] == "passed"}
            if hold is not None and lab.perf and has_reference:
                hold.mkdir(parents=True, exist_ok=True)
                shutil.copy2(exe_dir / f"lab{lab.number}_student_bench", hold / "student_bench")
                shutil.copy2(exe_dir / f"lab{lab.number}_bench", hold / "reference_bench")
                print("  speed items: measured after the batch's correctness runs", flush=True)
                return Graded(rows, notes, refusals, started, passed, hold)
            rows += perf_rows(lab, passed, has_reference, exe_dir, runs, log)
        return Graded(rows, notes, refusals, started)
    finally:
        confine(None)
        if args.keep:
            (work / "run.log").write_text("\n".join(log_lines))
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        WORK_FOLDERS.discard(work)


def finish(lab: Lab, graded: Graded, outs: tuple = ()) -> dict:
    """The report of a grading: prints the table (on stdout, and on each of `outs`),
    returns Gradescope's results."""
    rows = graded.rows
    if graded.refusals:  # a failed item says why its file was not run, first
        for row in rows:
            if row.get("status") == "failed":
                row["output"] = ("\n".join(graded.refusals) + "\n\n" + row["output"])[:TEST_OUTPUT_CAP]
    total, max_total = totals(rows)
    elapsed = time.monotonic() - graded.started
    for out in (sys.stdout, *outs):
        print_report(lab, rows, total, max_total, out)
        for note in graded.notes:  # the hidden points a student repository cannot grade
            if HIDDEN_POINTS_NOTE in note:
                print(note, file=out, flush=True)
        print(f"graded in {elapsed:.0f} s", file=out, flush=True)
    return gradescope_results(lab, rows, total, max_total, elapsed, graded.notes)


def measure_held(lab: Lab, graded: Graded, args) -> None:
    """Measures the speed items of a grading that held them (grade_correctness()
    with `hold`), in the runs' sandbox around the held folder; adds their rows."""
    runs = graded.held / "runs"
    runs.mkdir(exist_ok=True)
    box = None if args.no_sandbox else Sandbox(tree=graded.held, writable=[runs])
    confine(box)
    try:
        graded.rows += perf_rows(lab, graded.passed, True, graded.held, runs, print if args.verbose else (lambda _: None),
                                 student=graded.held / "student_bench", reference=graded.held / "reference_bench")
    finally:
        confine(None)


# Note [Speed in a batch]
# ~~~~~~~~~~~~~~~~~~~~~~~
# Instructors grade many submissions at once, and a speed item measured while
# other gradings build and run tests beside it measures them (issue 31). With
# --jobs N, grade_batch() grades N submissions at a time, each in a process of
# its own (the sandbox and the run bookkeeping in process.py are per process),
# up to the end of their correctness runs; each keeps its two benchmarks in the
# batch's folder. Once every submission is there, this process measures the
# speed items, one submission after the other, with nothing else of the batch
# running. Gradings that are not part of the batch (another ./dtl grade) take
# turns with it (turns.py, Note [Turns]): their commands wait while a speed item
# measures, and their speed items wait for the batch's commands; what else runs
# on the machine the noise guard sees (perf.py, Note [Noise guard]).

def _graded_in_worker(lab: Lab, sub: Path | None, hidden_dirs: list[Path], args, hold: Path, log: Path,
                      result: Path) -> int:
    """Starts a process that grades `sub` (None: what `args` selects, --reference or
    --skeleton) up to its speed items (printing into `log`) and writes its Graded
    (or the grader's error) as JSON into `result`; returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        WORKERS.clear()           # the parent's: an interrupted worker stops only its own runs...
        WORK_FOLDERS.clear()      # ...and removes only its own tree, not the batch's folder
        progress.ENABLED = False  # no live status line in a log file
        if sub is not None:
            args.submission = str(sub)
        try:
            source, description = submission_sources(lab, args)
            text = grade_correctness(lab, source, description, hidden_dirs, args, hold=hold).to_json()
        except GraderError as e:
            text = json.dumps({"grader_error": str(e)})
        result.write_text(text)
        code = 0
    except BaseException as e:  # noqa: BLE001 -- the parent reports a worker that gave no result
        print(f"grade: the grading process failed: {e!r}", flush=True)
    finally:
        sys.stdout.flush()
        os._exit(code)


def grader_error_results(lab: Lab, error: BaseException) -> dict:
    """The results of a submission the grader itself failed on: 0 of the lab's
    points, saying so, so that an instructor regrades it by hand."""
    max_total = sum(i.points for i in lab.items) + sum(p.points for p in lab.perf)
    return {"score": 0.0, "max_score": float(max_total), "execution_time": 0.0,
            "output": f"Lab {lab.number}: grader error ({type(error).__name__}: {error}); not graded, "
                      "ask your instructor", "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [{"name": "grader error", "score": 0.0, "max_score": float(max_total), "status": "failed",
                       "output": f"the grader failed on this submission: {type(error).__name__}: {error}",
                       "visibility": "visible"}]}


def grade_batch(lab: Lab, folder: Path, out: Path, hidden_dirs: list[Path], args) -> int:
    """Grades every sub-folder of `folder` (a submission each, named by the folder),
    one after the other, or `args.jobs` at a time up to the speed items, which come
    last, one submission at a time (Note [Speed in a batch]); writes out/NAME.json
    and out/summary.csv (and out/NAME.log with --jobs). Submissions an earlier run
    into `out` finished are kept, not graded again (resume.py); a progress line
    with an estimate of the time left follows each one (progress.BatchProgress)."""
    if not folder.is_dir():
        raise GraderError(f"--batch {folder}: not a folder")
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not submissions:
        raise GraderError(f"--batch {folder}: no sub-folders (one per submission) in it")
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, getattr(args, "jobs", 1) or 1)
    prints = {sub.name: resume.fingerprint(sub, lab.number, hidden_dirs) for sub in submissions}
    graded: dict[str, dict] = resume.finished(out, prints)
    todo = [sub for sub in submissions if sub.name not in graded]
    if graded:
        print(f"resuming: {len(graded)} of {len(submissions)} submissions were graded by an earlier run into {out} "
              f"and are kept ({resume.STATE_FILE}); grading the other {len(todo)}", flush=True)
    bar = progress.BatchProgress(len(submissions), len(graded), 1 if jobs == 1 else 2)
    print(bar.line(), flush=True)

    def step(name: str, what: str) -> None:
        bar.step()
        print(bar.line(f"{name} {what}"), flush=True)

    if jobs == 1:
        for sub in todo:
            args.submission = str(sub)
            try:
                source, description = submission_sources(lab, args)
                graded[sub.name] = grade_one(lab, source, description, hidden_dirs, args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 -- one submission must not end the batch
                graded[sub.name] = grader_error_results(lab, e)
                print(f"  GRADER ERROR for {sub.name}: {type(e).__name__}: {e} -- recorded, going on", flush=True)
            resume.record(out, sub.name, graded[sub.name], prints[sub.name])
            step(sub.name, "graded")
    else:
        batch = Path(tempfile.mkdtemp(prefix=f"dtl-batch-{lab.number}-"))
        WORK_FOLDERS.add(batch)
        try:
            waiting, running, done = list(todo), {}, {}
            print(f"grading {len(todo)} submissions, {jobs} at a time up to their speed items; "
                  f"each one's output in {out}/NAME.log", flush=True)
            while waiting or running:
                while waiting and len(running) < jobs:
                    sub = waiting.pop(0)
                    pid = _graded_in_worker(lab, sub, hidden_dirs, args, batch / sub.name, out / f"{sub.name}.log",
                                            batch / f"{sub.name}.json")
                    WORKERS.add(pid)
                    running[pid] = sub
                pid, _ = os.wait()
                WORKERS.discard(pid)
                sub = running.pop(pid)
                result = batch / f"{sub.name}.json"
                try:
                    if not result.exists():
                        raise GraderError(f"grading {sub.name} gave no result; see {out / (sub.name + '.log')}")
                    if "grader_error" in (text := result.read_text()):
                        error = json.loads(text).get("grader_error")
                        if error is not None:
                            raise GraderError(error)
                    done[sub.name] = Graded.from_json(text)
                    print(f"  {sub.name}: correctness graded", flush=True)
                except Exception as e:  # noqa: BLE001 -- one submission must not end the batch
                    graded[sub.name] = grader_error_results(lab, e)
                    print(f"  GRADER ERROR for {sub.name}: {type(e).__name__}: {e} -- recorded, going on", flush=True)
                step(sub.name, "correctness graded")
            for sub in todo:
                if sub.name not in done:
                    resume.record(out, sub.name, graded[sub.name], prints[sub.name])
                    step(sub.name, "recorded")
                    continue
                outcome = done[sub.name]
                try:
                    with open(out / f"{sub.name}.log", "a") as log:
                        print(f"\n=== {sub.name}", flush=True)
                        if outcome.held is not None:
                            measure_held(lab, outcome, args)
                        results = finish(lab, outcome, (log,))  # the table: on the console and in the log
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception as e:  # noqa: BLE001 -- one submission must not end the batch
                    results = grader_error_results(lab, e)
                    print(f"  GRADER ERROR for {sub.name}: {type(e).__name__}: {e} -- recorded, going on", flush=True)
                graded[sub.name] = results
                resume.record(out, sub.name, results, prints[sub.name])
                step(sub.name, "graded")
        finally:
            shutil.rmtree(batch, ignore_errors=True)
            WORK_FOLDERS.discard(batch)
    write_summary(out / "summary.csv", {sub.name: graded[sub.name] for sub in submissions})
    kept = len(submissions) - len(todo)
    print(f"\ngraded {len(todo)} submissions{f' ({kept} more kept from an earlier run)' if kept else ''}; "
          f"results in {out}/ (summary.csv, NAME.json)")
    return 0


def grade_labs(labs: list[tuple[Lab, list[Path]]], args) -> int:
    """Grades every lab of `labs` (each with its hidden test folders) as `args`
    selects (--reference or --skeleton), `args.jobs` labs at a time up to their
    speed items; then, one lab after the other with nothing else running, each
    lab's speed items and its report (Note [Speed in a batch], with labs for
    submissions: `./dtl demo` grades the nine references so). Returns 0 when every
    lab was graded, 1 when the grader failed on one (its error is printed)."""
    jobs = max(1, getattr(args, "jobs", 1) or 1)
    batch = Path(tempfile.mkdtemp(prefix="dtl-labs-"))
    WORK_FOLDERS.add(batch)
    status = 0
    try:
        waiting, running, done = list(labs), {}, {}
        print(f"grading {len(labs)} labs, {jobs} at a time up to their speed items; then each lab's speed items "
              "and report, one lab after the other", flush=True)
        while waiting or running:
            while waiting and len(running) < jobs:
                lab, hidden_dirs = waiting.pop(0)
                name = f"lab{lab.number}"
                pid = _graded_in_worker(lab, None, hidden_dirs, args, batch / name, batch / f"{name}.log",
                                        batch / f"{name}.json")
                WORKERS.add(pid)
                running[pid] = lab
                print(f"  lab {lab.number}: grading", flush=True)
            pid, _ = os.wait()
            WORKERS.discard(pid)
            lab = running.pop(pid)
            done[lab.number] = lab
            print(f"  lab {lab.number}: correctness graded", flush=True)
        for lab, _ in labs:
            name = f"lab{lab.number}"
            print(f"\n################ lab {lab.number} ################", flush=True)
            log, result = batch / f"{name}.log", batch / f"{name}.json"
            print(log.read_text(errors="replace").rstrip() if log.exists() else "", flush=True)
            try:
                text = result.read_text() if result.exists() else json.dumps({"grader_error": "no result"})
                if (error := json.loads(text).get("grader_error")) is not None:
                    raise GraderError(error)
                outcome = Graded.from_json(text)
                if outcome.held is not None:
                    measure_held(lab, outcome, args)
                finish(lab, outcome)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 -- one lab must not end the others
                print(f"grade: lab {lab.number}: {type(e).__name__}: {e}", flush=True)
                status = 1
    finally:
        shutil.rmtree(batch, ignore_errors=True)
        WORK_FOLDERS.discard(batch)
    return status
