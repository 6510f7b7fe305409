"""Submitted code that would run before the test main, or in its place, or as assembly.

One lab 01 skeleton (which scores 0) carries four attacks, one per file; each is
refused after the build, before anything runs (grader/dtlgrade/objects.py), named,
and its file graded as the skeleton's, so the total stays 0:

  - alpha_beta.cc: a constructor of priority 101 (.init_array.00101), which would
    run beside the test main's own and race it for the grader's key
    (dtl::trace::reset_counts() and the other names of dtl:: a lab may not use
    are checked one symbol at a time in test_imports_policy.py: in lab 01 the
    benchmark program does not even link the tracer);
  - halo.cc: `asm(".incbin ...")` at file scope, which reads any readable file into
    the object without appearing in the compiler's dependency list;
  - ping_pong.cc: `__asm__` pasted together by a macro (GLUE(__as, m__)), which no
    look at the source text finds: the preprocessed lines of the file are read;
  - ring.cc: a C function named `read` and a replacement of the global operator new:
    defined in the test program, each takes the place of the system's everywhere,
    the test main's key handover included.
"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

ATTACKS = {
    "alpha_beta.cc": """\
namespace {
volatile int seen;
__attribute__((constructor(101))) void first_in_line() { seen = 1; }
}  // namespace
""",
    "halo.cc": """\
asm(".section .rodata\\n.incbin \\"/etc/hostname\\"\\n.previous");
""",
    "ping_pong.cc": """\
#define GLUE(a, b) a##b
namespace {
[[maybe_unused]] void nothing() { GLUE(__as, m__)("nop"); }
}  // namespace
""",
    "ring.cc": """\
#include <cstddef>
#include <cstdlib>
#include <new>
extern "C" long read(int, void*, unsigned long) { return 0; }
void* operator new(std::size_t bytes) { return std::malloc(bytes ? bytes : 1); }
""",
}


class TestEarlyCode(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", source=helpers.SKELETON_SRC)
        for name, attack in ATTACKS.items():
            path = sub / name
            text = path.read_text()
            at = text.index("namespace dtl::lab01")
            path.write_text(text[:at] + attack + "\n" + text[at:])
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_scores_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0)
        self.assertZero(self.graded.json["tests"])

    def test_each_attack_is_named(self):
        out = self.graded.output
        self.assertIn("src/alpha_beta.cc uses section .init_array.00101", out)
        self.assertIn("start-up code that would run before the test main", out)
        self.assertRegex(out, r"src/halo\.cc uses (asm|\.incbin) at line \d+")
        self.assertRegex(out, r"src/ping_pong\.cc uses __asm__ at line \d+")
        self.assertIn("src/ring.cc uses read", out)
        self.assertIn("is a C name", out)
        self.assertIn("operator new(unsigned long)", out)
        self.assertIn("replaces the global operator new", out)


if __name__ == "__main__":
    unittest.main()
