"""The skeleton states contracts, not recipes (issue 26, part 1).

The `// |` lines after `// BEGIN SOLUTION(name)` in reference/NN_topic/src become the
student's `// TODO(student):` text (grader/skeleton.py). They say what a block must
achieve (inputs, outputs, invariants), the error to raise on bad input and the handout
section to read; the derivation (the steps, the formulas, the loop bounds that are the
point of a task) lives in the handout's graded hints (labs/README.md, "Hints").

This check reads the `// |` lines (no build, well under a second) and flags those that
look like a recipe: a loop ("for step =", "for s in"), min/max or an assignment with
arithmetic on its right side, modular or bitwise index arithmetic, numbered steps. A
formula that is part of the interface (a layout the tests fix, a bound the header
documents) may stay: it goes in ALLOWED, with the reason, and an entry that no longer
matches a line is reported too, so the list stays honest.
"""
import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

ROOT = helpers.ROOT
HINT = re.compile(r"^\s*// \|\s?(?P<text>.*)$")
BEGIN = re.compile(r"^\s*// BEGIN SOLUTION")

# What a recipe looks like. Each pattern names why it is flagged.
RECIPE = {
    "a loop": re.compile(r"\bfor\s*\((?:int|auto|std::size_t|size_t|[^)]*;)|\bfor\s+(?:each\s+)?\w+\s*(?:=|in\b|from\b|<)|\bwhile\s*\(", re.I),
    "min/max": re.compile(r"\b(?:std::)?(?:min|max)\s*\("),
    "an assignment with arithmetic": re.compile(r"(?<![<>!=])\b[A-Za-z_]\w*(?:\[[^\]]*\])?\s*(?:=|\+=|-=)\s*(?!=)"
                                                r"[^,;:]*?\w\s*[-+*/%]\s*[\w(]"),
    "modular index arithmetic": re.compile(r"[\w)]\s*%\s*[\w(]"),
    "bit arithmetic": re.compile(r"\w\s*(?:<<|>>|\^)\s*\w|\w\s*&\s*\(|\w\s*&\s*\d"),
    "numbered steps": re.compile(r"^\s*(?:\(?\d{1,2}[.)]\s|step\s+\d+\b)|\(\d\)\s+\w|\b(?:first|second|third)\s*,", re.I),
    # Formulas that are sometimes the interface (a count the tracer checks, a layout the
    # header fixes): flagged all the same, so that each one kept is listed in ALLOWED.
    "a closed-form count": re.compile(r"\b(?:ceil|floor|log2)\b"),
    "index arithmetic": re.compile(r"\[[^\]\[]*\w(?:\s+[-+*/]\s+|[*/])\w[^\]\[]*[,)]"),
    "a scale factor": re.compile(r"\b(?:scaled|weighted|multiplied|divided)\s+by\s+[\w.]+\s*/\s*\w+"),
    "an element-wise formula": re.compile(r"\w+\[\w+\]\s*[-+*/]\s*\w+\[\w+\]"),
}

# Justified exceptions: (reference file relative to reference/, a substring of the line)
# -> why the formula stays in the contract.
ALLOWED: dict[tuple[str, str], str] = {
    ("01_point_to_point/src/halo.cc", "field[halo + n, n + 2 halo)"):
        "the field's layout is the function's interface, drawn in the header and handout Task C; "
        "which cells go where is still the student's",
    ("02_collectives/src/allgather.cc", "in exactly log2 P"):
        "the message count the tracer checks (handout section (e)'s table): without it a correct "
        "but different algorithm fails a test the contract did not announce",
    ("02_collectives/src/broadcast.cc", "ceil(log2 P) messages"):
        "L defines the message counts the tracer checks (handout section (e)), not how to reach them",
    ("02_collectives/src/broadcast.cc", "2 (n - floor(n / P))"):
        "the root's byte budget the tracer checks (handout section (e)); it says how much, not how",
    ("03_ring_allreduce/src/reduce_copy.cuh", "= a[i] + b[i]"):
        "the definition of a reduce-copy (what each element must hold), the kernel's interface; the "
        "task is the head/vector/tail split, which the line does not give",
    ("05_mixed_precision/src/half_reduce.cc", "holds in[i] + inout[i]"):
        "the operation's definition (the reduction a 16-bit allreduce performs); rounding it once is "
        "the contract",
    ("07_pipeline/src/stage.cc", "weighted by rows / B"):
        "the weighting is fixed by Note [GPipe and 1F1B] so that m micro-batches equal one batch; "
        "the equivalence tests depend on it",
    ("07_pipeline/src/stage.cc", "scaled by rows / B"):
        "as above: the loss gradient's scale is the interface the equivalence tests check",
    ("08_tensor_parallel/src/vocab_parallel.cc", "[vocab_begin_, vocab_begin_ + vocab_local_)"):
        "which rows a rank owns is fixed by Note [Vocabulary parallel] and the given members; the "
        "tests compare with slices of the full table",
    ("09_parameter_server/src/server.cc", "scaled by 1/W"):
        "ASP's update rule, given in the handout's table of section (c) and checked by the tests' "
        "replay; the task is when and where to apply it",
}


def hint_lines(root: Path = ROOT):
    """Yields (file relative to reference/, line number, text) for every `// |` line."""
    for path in sorted((root / "reference").glob("[0-9][0-9]_*/src/**/*")):
        if not path.is_file() or path.suffix not in (".cc", ".h", ".cu", ".cuh"):
            continue
        in_hints = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BEGIN.match(line):
                in_hints = True
                continue
            m = HINT.match(line)
            if in_hints and m:
                yield str(path.relative_to(root / "reference")), number, m.group("text")
            else:
                in_hints = False


def recipe_marks(text: str) -> list[str]:
    """Why a hint line reads like a recipe: [] when it does not."""
    return [why for why, pattern in RECIPE.items() if pattern.search(text)]


def flagged(root: Path = ROOT):
    """(where, text, reasons) for every hint line flagged and not allowed; and the
    ALLOWED entries that matched no flagged line."""
    found, used = [], set()
    for rel, number, text in hint_lines(root):
        reasons = recipe_marks(text)
        if not reasons:
            continue
        allowed = [key for key in ALLOWED if key[0] == rel and key[1] in text]
        if allowed:
            used.update(allowed)
            continue
        found.append((f"reference/{rel}:{number}", text, reasons))
    return found, [key for key in ALLOWED if key not in used]


class TestContracts(unittest.TestCase):
    def test_hint_lines_state_contracts_not_recipes(self):
        found, _ = flagged()
        self.assertEqual(found, [], "these // | lines read like a recipe: state the contract there and move the "
                                    "derivation into the handout's hints (labs/README.md, \"Hints\"), or add a "
                                    "justified entry to ALLOWED:\n" +
                         "\n".join(f"  {where}: {text!r} ({', '.join(why)})" for where, text, why in found))

    def test_every_exception_is_justified_and_still_needed(self):
        _, unused = flagged()
        self.assertEqual(unused, [], "ALLOWED entries that match no flagged // | line: remove them")
        for key, why in ALLOWED.items():
            self.assertGreater(len(why.split()), 4, f"{key}: say why the formula stays")

    def test_the_checker_catches_the_recipes_it_was_written_for(self):
        # Lab 07's 1F1B warm-up count is what the student derives (issue 26).
        self.assertIn("min/max", recipe_marks("Warm-up: w = min(P - s - 1, m) forwards F0 .. F(w-1)"))
        self.assertIn("an assignment with arithmetic", recipe_marks("w = P - s - 1 forwards"))
        self.assertIn("a loop", recipe_marks("for step = 0 .. P-2: send chunk (rank - step) mod P"))
        self.assertIn("a loop", recipe_marks("for (int k = 0; k < m; ++k) forward k"))
        self.assertIn("modular index arithmetic", recipe_marks("send chunk (rank - step) % P to the right"))
        self.assertIn("numbered steps", recipe_marks("1. reduce-scatter, then 2. all-gather"))
        self.assertIn("numbered steps", recipe_marks("contiguous range. (1) Binomial scatter, (2) ring allgather"))
        self.assertIn("bit arithmetic", recipe_marks("the partner is rank ^ mask"))
        for contract in ("Fill `out` (count elements) with the sum over ranks; throw std::invalid_argument "
                         "if count < 0 (handout (b)).",
                         "Every rank of comm calls this, in the same order. See Note [Ring order].",
                         "Return RingStep{send_chunk, recv_chunk, reduce} for (rank, P, step).",
                         "Returns the schedule for stage s of P with m micro-batches: each micro-batch's "
                         "forward before its backward, no two messages on one tag."):
            self.assertEqual(recipe_marks(contract), [], contract)

    def test_the_1f1b_warm_up_count_is_not_in_the_skeleton(self):
        # Not even through ALLOWED: deriving the warm-up count is the 1F1B task.
        warm_up = re.compile(r"min\s*\(\s*P\s*-\s*s\s*-\s*1|P\s*-\s*s\s*-\s*1")
        for rel, number, text in hint_lines():
            if rel.startswith("07_"):
                self.assertNotRegex(text, warm_up, f"reference/{rel}:{number}")
        for path in (ROOT / "labs" / "07_pipeline" / "src").glob("*"):
            self.assertNotRegex(path.read_text(), warm_up, path)
        # Nor anywhere else a student reads it without opening a hint: the header, the
        # deck, and the handout with every hint dropped (export-student --hints none).
        sys.path.insert(0, str(ROOT / "grader"))
        import export_student
        handout = (ROOT / "labs" / "07_pipeline" / "README.md").read_text()
        self.assertRegex(handout, warm_up, "the warm-up count should be in task B's hints")
        texts = {"README.md --hints none": export_student.student_text("labs/07_pipeline/README.md", handout, "none"),
                 "lab07/pipeline.h": (ROOT / "labs" / "07_pipeline" / "include" / "lab07" / "pipeline.h").read_text(),
                 "slides.md": (ROOT / "slides" / "07_pipeline" / "slides.md").read_text(),
                 "grader/rubrics/07.toml": (ROOT / "grader" / "rubrics" / "07.toml").read_text(),
                 "bench/RESULTS.md": (ROOT / "labs" / "07_pipeline" / "bench" / "RESULTS.md").read_text()}
        # The public tests are read too: their oracles find 1F1B's counts by a search in a
        # simulated pipeline (tests/schedule_sim_util.h), never from the formula.
        for path in sorted((ROOT / "labs" / "07_pipeline" / "tests").glob("*")):
            texts[f"tests/{path.name}"] = path.read_text()
        in_flight = re.compile(r"min\s*\(\s*m\s*,\s*P\s*-\s*s\s*\)|P\s*-\s*s\s*\)|PMinusS", re.I)
        for name, text in texts.items():
            self.assertNotRegex(text.replace("−", "-"), warm_up, name)
            self.assertNotRegex(text.replace("−", "-"), in_flight, name)

    def test_the_zb_h1_placement_is_in_the_hints_only(self):
        # Task G's answer: stage s runs W(i - s) after B(i) (its W's lag its B's by s).
        # It may be in task G's hints (Hint 2) and the reference's solution, nowhere else
        # a student reads; and task B's warm-up count must not come in through task G's
        # header either.
        sys.path.insert(0, str(ROOT / "grader"))
        import export_student
        lag = re.compile(r"W\s*\(\s*i\s*-\s*s\s*\)|lag\s*=\s*(s|stage)\b|lag\s+(of\s+)?s\b|lags?\s+by\s+s\b")
        handout = (ROOT / "labs" / "07_pipeline" / "README.md").read_text().replace("−", "-")
        self.assertRegex(handout, lag, "the placement should be in task G's hints")
        labdir = ROOT / "labs" / "07_pipeline"
        texts = {"README.md --hints none": export_student.student_text("labs/07_pipeline/README.md", handout, "none"),
                 "lab07/zero_bubble.h": (labdir / "include" / "lab07" / "zero_bubble.h").read_text(),
                 "src/zero_bubble.cc": (labdir / "src" / "zero_bubble.cc").read_text(),
                 "grader/rubrics/07.toml": (ROOT / "grader" / "rubrics" / "07.toml").read_text(),
                 "bench/RESULTS.md": (labdir / "bench" / "RESULTS.md").read_text()}
        for path in sorted((labdir / "tests").glob("*")):
            texts[f"tests/{path.name}"] = path.read_text()
        warm_up = re.compile(r"P\s*-\s*s\s*-\s*1|P\s*-\s*s\b")
        for name, text in texts.items():
            self.assertNotRegex(text.replace("−", "-"), lag, name)
            if name in ("lab07/zero_bubble.h", "src/zero_bubble.cc"):
                self.assertNotRegex(text.replace("−", "-"), warm_up, name)

    def student_texts(self, lab: str, header: str, deck: str) -> dict[str, str]:
        """What a student of `lab` reads without opening a hint: the handout with every hint
        dropped (export-student --hints none), the API header, the skeleton and the deck."""
        sys.path.insert(0, str(ROOT / "grader"))
        import export_student
        labdir = ROOT / "labs" / lab
        texts = {"README.md --hints none": export_student.student_text(f"labs/{lab}/README.md",
                                                                       (labdir / "README.md").read_text(), "none"),
                 header: (labdir / "include" / header).read_text(),
                 f"slides/{deck}": (ROOT / "slides" / deck).read_text()}
        for path in sorted((labdir / "src").glob("*")):
            texts[f"src/{path.name}"] = path.read_text()
        return {name: text.replace("−", "-") for name, text in texts.items()}

    def test_the_binomial_tree_rules_are_in_the_hints_only(self):
        # Lab 02, task A: a rank's parent and children for any root (relative ranks, the
        # lowest set bit) are what the student derives from the tree's picture.
        rules = re.compile(r"lowbit|lowest set bit|\(v(?:rank)?\s*\+\s*root\)\s*%|vrank\s*=\s*\(|rank\s*-\s*root\s*\+")
        handout = (ROOT / "labs" / "02_collectives" / "README.md").read_text()
        self.assertRegex(handout, rules, "the tree's rules should be in task A's hints")
        for name, text in self.student_texts("02_collectives", "lab02/collectives.h",
                                             "02_collectives/slides.md").items():
            self.assertNotRegex(text, rules, name)

    def test_the_ring_step_table_is_in_the_hints_only(self):
        # Lab 03, task A: which chunk rank r sends and receives at step s.
        table = re.compile(r"\br(?:ank)?\s*-\s*s\s*-\s*[12]\b|\br(?:ank)?\s*-\s*t\s*-\s*1\b")
        handout = (ROOT / "labs" / "03_ring_allreduce" / "README.md").read_text()
        self.assertRegex(handout.replace("−", "-"), table, "the table should be in task A's hints")
        for name, text in self.student_texts("03_ring_allreduce", "lab03/ring.h",
                                             "03_ring_allreduce/slides.md").items():
            self.assertNotRegex(text, table, name)

    def test_the_vocabulary_parallel_loss_is_in_the_hints_only(self):
        # Lab 08, task C: which few numbers per row assemble the loss (a shift by the row
        # maximum, gathered; the sums of exp and the target's logit, allreduced).
        loss = re.compile(r"exp\s*\(\s*z\w*\s*-\s*M\s*\)|\bmax_r\b|M\s*=\s*max")
        handout = (ROOT / "labs" / "08_tensor_parallel" / "README.md").read_text().replace("−", "-")
        self.assertRegex(handout, loss, "the loss's numbers should be in task C's hints")
        for name, text in self.student_texts("08_tensor_parallel", "lab08/vocab_parallel.h",
                                             "08_tensor_parallel/slides.md").items():
            self.assertNotRegex(text, loss, name)


if __name__ == "__main__":
    unittest.main()
