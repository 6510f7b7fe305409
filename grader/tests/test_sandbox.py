"""Submissions that try to escape, tried as a dishonest student would, in lab 01.

Two walls stand between a submission and the machine:

  - the imports check (grader/dtlgrade/imports.py): a ring.cc that is the correct solution
    plus a static initializer calling fopen (to copy reference/) and system (to
    leave a process behind) is refused before anything runs: the note names the
    file and both symbols, ring.cc is graded as the skeleton's (ring items 0),
    the other files keep their points, and nothing it meant to write exists;
  - the sandbox (grader/dtlgrade/sandbox.py): a ring.cc whose static initializer makes raw
    system calls (no imported symbol to refuse) to open the grader's own
    reference/ and the pristine tree's copy of it, to create a file under /tmp,
    to open a socket and to fork a process that sleeps for minutes. Inside the
    sandbox none of it reaches anything: every open fails (so the submission,
    which crashes its tests when an open succeeds, scores full marks), the /tmp
    file is not on the machine afterwards, and the sleeper died with the run
    (grading ends in its usual time, no such process is left).

The raw system calls are x86-64 Linux; elsewhere that class skips.
"""
import platform
import subprocess
import sys
import unittest
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

MARK = f"dtl-sandbox-{uuid.uuid4().hex[:12]}"
CHILD_NAME = f"dtl{uuid.uuid4().hex[:8]}"  # the forked sleeper's process name (15 characters at most)
LEAK_FILE = Path("/tmp") / f"{MARK}.leak"
TRIED_FILE = Path("/tmp") / f"{MARK}.tried"

IMPORTING_PRELUDE = f"""\
#include <cstdio>
#include <cstdlib>
namespace {{
// Runs before main: copy a reference file out, and leave a process behind.
const int kSneak = [] {{
  if (std::FILE* in = std::fopen("{helpers.ROOT}/reference/01_point_to_point/src/ring.cc", "r")) {{
    std::fclose(in);
    if (std::FILE* out = std::fopen("{TRIED_FILE}", "w")) std::fclose(out);
  }}
  return std::system("sleep 300 &");
}}();
}}  // namespace
"""

# Raw x86-64 system calls: nothing here is an imported symbol.
RAW_PRELUDE = f"""\
namespace {{
long raw(long nr, long a = 0, long b = 0, long c = 0, long d = 0) {{
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return ret;
}}
constexpr long kOpenat = 257, kClose = 3, kWrite = 1, kExitGroup = 231, kSocket = 41, kFork = 57,
               kNanosleep = 35, kPrctl = 157, kSetName = 15, kAtFdCwd = -100,
               kCreate = 0101 | 01000;  // O_WRONLY|O_CREAT|O_TRUNC
void leaked(const char* what) {{
  raw(kWrite, 2, reinterpret_cast<long>(what), 24);
  raw(kExitGroup, 3);
}}
const int kEscape = [] {{
  const char* paths[] = {{"{helpers.ROOT}/reference/01_point_to_point/src/ring.cc",
                          "../../tree/reference/01_point_to_point/src/ring.cc"}};
  for (const char* path : paths) {{
    const long fd = raw(kOpenat, kAtFdCwd, reinterpret_cast<long>(path), 0);
    if (fd >= 0) leaked("LEAKED: read reference\\n");
  }}
  const long fd = raw(kOpenat, kAtFdCwd, reinterpret_cast<long>("{LEAK_FILE}"), kCreate, 0644);
  if (fd >= 0) raw(kClose, fd);
  const long sock = raw(kSocket, 2 /* AF_INET */, 1 /* SOCK_STREAM */, 0);
  if (sock >= 0) raw(kClose, sock);
  if (raw(kFork) == 0) {{  // the child: named, then asleep for five minutes
    raw(kPrctl, kSetName, reinterpret_cast<long>("{CHILD_NAME}"));
    struct {{ long s, ns; }} t{{300, 0}};
    raw(kNanosleep, reinterpret_cast<long>(&t), 0);
    raw(kExitGroup, 0);
  }}
  return 0;
}}();
}}  // namespace
"""


def with_prelude(dest: Path, prelude: str) -> Path:
    """The reference's lab 01 sources, ring.cc with `prelude` after its includes."""
    sub = helpers.make_submission(dest)
    ring = sub / "ring.cc"
    text = ring.read_text()
    at = text.index("namespace dtl")
    ring.write_text(text[:at] + prelude + "\n" + text[at:])
    return sub


def sleepers() -> list[str]:
    """Processes the submissions meant to leave behind: `sleep 300`, or the forked child."""
    out = subprocess.run(["ps", "-eo", "pid,comm,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "sleep 300" in line or CHILD_NAME in line]


class TestRefusedImports(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = with_prelude(helpers.temp_folder(cls) / "sub", IMPORTING_PRELUDE)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_refusal_names_file_and_symbols(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertIn("refused: labs/01_point_to_point/src/ring.cc uses fopen", self.graded.output)
        self.assertIn("src/ring.cc uses system", self.graded.output)
        self.assertIn("never touches files", self.graded.output)
        self.assertIn("never starts processes", self.graded.output)
        self.assertIn("uses fopen", self.graded.json["output"])

    def test_ring_items_zero_others_full(self):
        self.assertGradescopeJson(self.graded)
        self.assertZero(self.graded.items("ring_shift"))
        for t in self.graded.items("ring_shift"):
            self.assertIn("not implemented", t["output"], t["name"])
        others = [t for t in self.graded.json["tests"]
                  if t not in self.graded.items("ring_shift") and t not in self.graded.items("perf")]
        self.assertFullMarks(others)

    def test_nothing_it_meant_to_do_happened(self):
        self.assertFalse(TRIED_FILE.exists())
        self.assertEqual(sleepers(), [])


@unittest.skipUnless(platform.machine() == "x86_64" and sys.platform == "linux", "raw x86-64 Linux system calls")
class TestSandboxWall(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not helpers.sandbox_works():
            raise unittest.SkipTest("bubblewrap cannot create namespaces on this machine")
        sub = with_prelude(helpers.temp_folder(cls) / "sub", RAW_PRELUDE)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def tearDown(self):
        LEAK_FILE.unlink(missing_ok=True)

    def test_no_import_refused(self):
        self.assertNotIn("refused:", self.graded.output)

    def test_nothing_was_reached(self):
        # An open of either reference/ would have crashed every test ("LEAKED").
        self.assertNotIn("LEAKED", self.graded.output)
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], self.graded.json["max_score"], self.graded.output[-3000:])
        self.assertFalse(LEAK_FILE.exists(), "a file under the machine's /tmp was written from inside")

    def test_no_process_outlives_the_run(self):
        self.assertEqual(sleepers(), [])
        self.assertLess(self.graded.seconds, 240)


if __name__ == "__main__":
    unittest.main()
