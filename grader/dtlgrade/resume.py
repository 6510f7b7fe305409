"""A batch that picks up where it stopped: finished submissions are kept, the rest graded.

grade_batch() (grading.py) writes each submission's OUT/NAME.json when its grading
is over, and then records the submission as finished in OUT/.batch-state.json
(record()). A later `--batch` into the same OUT keeps every submission that
finished() says is done and grades the others. A submission counts as done only
when all of these hold:

  - the state file names it, with the fingerprint it has now (fingerprint(): the
    lab, the hidden test folders, and the path, size and modification time of
    every file in its folder), so that a resubmitted or edited folder is graded
    again;
  - OUT/NAME.json is there, is a JSON object with Gradescope's score, max_score
    and tests, and is what the state file recorded (its SHA-256);
  - it was not a grader error (those are worth another try).

Both files are written whole or not at all (write_atomic(): a temporary file,
then a rename), and the state only after the results, so an interruption at any
moment leaves a submission either finished or to be graded again, never half
counted. A results file that was cut short some other way fails the checks and
is graded again.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

STATE_FILE = ".batch-state.json"


def write_atomic(path: Path, text: str) -> None:
    """Writes `path` whole or not at all: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fingerprint(submission: Path, lab_number: str, hidden_dirs: list[Path]) -> str:
    """What makes a grading of `submission` the same grading again: the lab, the
    hidden test folders, and every file under the folder (path, size, modification
    time; cheap on a checkout with a build folder, and any change regrades it)."""
    h = hashlib.sha256(f"lab {lab_number}\n".encode())
    for d in hidden_dirs:
        h.update(f"hidden {d}\n".encode())
    for folder, dirs, files in os.walk(submission):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            h.update(f"{path.relative_to(submission)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _load_state(out: Path) -> dict:
    try:
        state = json.loads((out / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def complete_results(text: str) -> dict | None:
    """The results in `text` when they are a whole grading, else None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        return None
    if not all(isinstance(data.get(k), (int, float)) for k in ("score", "max_score")):
        return None
    if any(t.get("name") == "grader error" for t in data["tests"] if isinstance(t, dict)):
        return None
    return data


def finished(out: Path, fingerprints: dict[str, str]) -> dict[str, dict]:
    """{name: its results} for every submission in `fingerprints` ({name: its
    fingerprint now}) that an earlier run of the batch finished (the module's
    docstring says when that is)."""
    state, done = _load_state(out), {}
    for name, print_now in fingerprints.items():
        entry = state.get(name)
        if not isinstance(entry, dict) or entry.get("fingerprint") != print_now:
            continue
        try:
            text = (out / f"{name}.json").read_text()
        except OSError:
            continue
        if hashlib.sha256(text.encode()).hexdigest() != entry.get("results_sha256"):
            continue
        results = complete_results(text)
        if results is not None:
            done[name] = results
    return done


def record(out: Path, name: str, results: dict, print_now: str | None) -> None:
    """Writes OUT/NAME.json, then marks `name` finished with fingerprint `print_now`
    (None: the grading is not to be kept, e.g. a grader error: the mark is removed)."""
    text = json.dumps(results, indent=2) + "\n"
    write_atomic(out / f"{name}.json", text)
    state = _load_state(out)
    if print_now is None or complete_results(text) is None:
        state.pop(name, None)
    else:
        state[name] = {"fingerprint": print_now, "results_sha256": hashlib.sha256(text.encode()).hexdigest()}
    write_atomic(out / STATE_FILE, json.dumps(state, indent=1, sort_keys=True) + "\n")
