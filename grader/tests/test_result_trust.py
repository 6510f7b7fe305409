"""Submissions that try to write their own results, tried as a dishonest student would.

Each is the lab 01 skeleton (which scores 0) plus one attack, and must still score
0, with a message that names what refused it (grader/README.md, "Limits"):

  - forged records (route 1 of the grader's threat model): every function of the
    skeleton first writes a "passed" start/end record pair for every test of the
    lab into every file descriptor 255..3 of the process, through stdout's FILE
    (nothing to refuse at link time: stdout, fprintf and fflush are allowed
    imports), then aborts. The progress file is one of those descriptors; the
    grader before the authenticated channel took those records and gave this
    submission 95 of 100 points. Now they do not check under the run's key, and
    the run passes no test: "could not be authenticated";
  - the static constructor of the issue's demonstration: it reads the progress
    file's path from envp and the tests from argv's --gtest_filter, appends
    "passed" records with std::__basic_file<char> (libstdc++'s file layer, below
    the file streams), and aborts before gtest writes its JSON. Refused at the
    imports (std::__basic_file reaches open(2)) and, were it not, by the channel;
  - a hidden listing (route 3): a constructor that sees --gtest_list_tests
    rewrites argv's filter to the tests the skeleton passes (the argument
    checks), so that each item would be scored on those alone. The expected tests
    now come from the reference's test program, and the tests a run runs from the
    key pipe, not argv.
"""
import sys
import tomllib
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


def lab01_tests() -> list[str]:
    """Every test name the public rubric of lab 01 names (all exact names)."""
    rubric = tomllib.loads((helpers.ROOT / "grader" / "rubrics" / "01.toml").read_text())
    return sorted({t for item in rubric["item"] for t in item["tests"]})


FORGE_PRELUDE = """\
#include <cstdio>
#include <cstdlib>
namespace {
// Forges a "passed" record for every test into every descriptor of the process,
// through stdout's FILE (stdout, fprintf and fflush are allowed imports), then ends.
[[maybe_unused]] void forge() {
  static const char* const kTests[] = {%s};
  std::fflush(stdout);
  for (int fd = 255; fd >= 3; --fd) {  // the newest first: the progress file is opened last
    stdout->_fileno = fd;
    for (const char* test : kTests) {
      std::fprintf(stdout, "{\\"event\\":\\"start\\",\\"test\\":\\"%%s\\"}\\n{\\"event\\":\\"end\\",\\"test\\":"
                   "\\"%%s\\",\\"status\\":\\"passed\\",\\"seconds\\":0,\\"failures\\":\\"\\"}\\n", test, test);
    }
    std::fflush(stdout);
  }
  std::abort();
}
}  // namespace
""" % ", ".join(f'"{t}"' for t in lab01_tests())

BASIC_FILE_PRELUDE = """\
#include <cstdlib>
#include <fstream>  // declares std::__basic_file<char>, the layer below the file streams
#include <cstring>
#include <ios>
#include <string>
namespace {
// The issue's demonstration: before main, append "passed" records for the tests
// the grader asked for to the progress file, and end before gtest writes its JSON.
__attribute__((constructor)) void forge_before_main(int argc, char** argv, char** envp) {
  const char* progress = nullptr;
  for (char** e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, "DTL_PROGRESS_FILE=", 18) == 0) progress = *e + 18;
  }
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_filter=", 15) == 0) filter = argv[i] + 15;
    if (std::strcmp(argv[i], "--gtest_list_tests") == 0) return;
  }
  if (progress == nullptr || filter.empty()) return;
  std::__basic_file<char> file;
  if (file.open(progress, std::ios_base::out | std::ios_base::app) == nullptr) return;
  filter += ':';
  for (std::size_t at = 0, colon; (colon = filter.find(':', at)) != std::string::npos; at = colon + 1) {
    const std::string test = filter.substr(at, colon - at);
    const std::string records = "{\\"event\\":\\"start\\",\\"test\\":\\"" + test + "\\"}\\n{\\"event\\":\\"end\\",\\"test\\":\\"" +
                                test + "\\",\\"status\\":\\"passed\\",\\"seconds\\":0,\\"failures\\":\\"\\"}\\n";
    file.xsputn(records.data(), static_cast<std::streamsize>(records.size()));
  }
  file.close();
  std::abort();
}
}  // namespace
"""

# The skeleton passes the argument checks (they come before each TODO block); the
# listing shows only those, so every item would be scored on them alone.
HIDE_PRELUDE = """\
#include <cstring>
namespace {
__attribute__((constructor)) void hide_failing_tests(int argc, char** argv) {
  static char kOnlyPassing[] = "--gtest_filter=*.RejectsBad*";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_filter=", 15) == 0) argv[i] = kOnlyPassing;
  }
}
}  // namespace
"""


def skeleton_with(dest: Path, prelude: str, call: str = "") -> Path:
    """The lab 01 skeleton with `prelude` before `namespace dtl::lab01` in every file,
    and `call` made first in every function the student writes."""
    sub = helpers.make_submission(dest, source=helpers.SKELETON_SRC)
    for path in sorted(sub.glob("*.cc")):
        text = path.read_text()
        at = text.index("namespace dtl::lab01")
        text = text[:at] + prelude + "\n" + text[at:]
        if call:
            text = text.replace("throw dtl::NotImplemented(", f"{call}; throw dtl::NotImplemented(")
        path.write_text(text)
    return sub


class TestForgedRecords(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = skeleton_with(helpers.temp_folder(cls) / "sub", FORGE_PRELUDE, "forge()")
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_scores_zero(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0, self.graded.output[-3000:])
        self.assertZero(self.graded.json["tests"])

    def test_the_refusal_is_named(self):
        self.assertNotIn("refused: labs/", self.graded.output)  # nothing to refuse at link time
        for t in self.graded.json["tests"]:
            if t["name"].startswith(helpers.ITEM_PREFIXES["perf"]):
                continue
            self.assertIn("could not be authenticated", t["output"], t["name"])


class TestBasicFileConstructor(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = skeleton_with(helpers.temp_folder(cls) / "sub", BASIC_FILE_PRELUDE)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_scores_zero_refusing_basic_file(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0, self.graded.output[-3000:])
        self.assertZero(self.graded.json["tests"])
        self.assertIn("std::__basic_file<char>::open", self.graded.output)
        self.assertIn("never touches files", self.graded.output)


class TestHiddenListing(helpers.GraderAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sub = skeleton_with(helpers.temp_folder(cls) / "sub", HIDE_PRELUDE)
        cls.graded = helpers.grade("--submission", str(sub), "--no-hidden")

    def test_scores_zero_on_every_test(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertEqual(self.graded.json["score"], 0, self.graded.output[-3000:])
        self.assertZero(self.graded.json["tests"])
        # Every item fails on its own tests, not only on the argument checks.
        for t in self.graded.json["tests"]:
            if not t["name"].startswith(helpers.ITEM_PREFIXES["perf"]):
                self.assertIn("is not implemented yet", t["output"], t["name"])


if __name__ == "__main__":
    unittest.main()
