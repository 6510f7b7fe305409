"""Submissions that try to escape, tried as a dishonest student would, in lab 01.

Two walls stand between a submission and the machine:

  - the imports check (grader/dtlgrade/imports.py): a ring.cc that is the correct solution
    plus a static initializer calling fopen (to copy reference/) and system (to
    leave a process behind) is refused before anything runs: the note names the
    file and both symbols, ring.cc is graded as the skeleton's (ring items 0),
    the other files keep their points, and nothing it meant to write exists;
  - the sandbox (grader/dtlgrade/sandbox.py), tried on its own (TestRunView): a
    program of plain libc calls, run as a test run is (only its run folder
    writable, only its own program of build/ visible), tries to open the
    grader's own reference/ and the pristine tree's copy, another program of
    build/, the compiler cache; to write its own program, build/ and the
    machine's /tmp; to keep a capability, unmount, or make a user namespace;
    and forks a process that sleeps for minutes. None of it reaches anything,
    and the sleeper died with the run; unwrapped, the same program reaches them
    all. (A submission can no longer make raw system calls: inline assembly is
    refused at build time, test_early_code.py.)
"""
import os
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
# The sleeper's argument: 300 seconds and a fraction unique to this run, so that
# sleepers() finds what a submission left behind and not another program's sleep.
SLEEP = f"sleep 300.{uuid.uuid4().int % 10**9:09d}"

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
  return std::system("{SLEEP} &");
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
    """Processes the submissions meant to leave behind: SLEEP, or the forked child."""
    out = subprocess.run(["ps", "-eo", "pid,comm,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if SLEEP in line or CHILD_NAME in line]


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


PROBE = r"""
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
// Each probe prints "NAME reached" or "NAME blocked".
static void say(const char* name, bool reached) { std::printf("%s %s\n", name, reached ? "reached" : "blocked"); }
static bool can_open(const char* path, int flags) {
  const int fd = open(path, flags, 0644);
  if (fd >= 0) close(fd);
  return fd >= 0;
}
int main(int argc, char** argv) {
  // argv: grader's reference, tree's reference, another program's name in build/, this program, build/ folder,
  //       the machine's /tmp file to create, the compiler cache folder ("" when none), the run folder,
  //       the name of the sleeper to fork ("-": none), the folder that covers reference/ (a mount inside)
  say("grader_reference", can_open(argv[1], O_RDONLY));
  say("tree_reference", can_open(argv[2], O_RDONLY));
  say("other_program", can_open((std::string(argv[5]) + "/" + argv[3]).c_str(), O_RDONLY));
  const std::string moved = std::string(argv[4]) + ".moved";  // replace the program (open for writing: ETXTBSY)
  const bool replaced = rename(argv[4], moved.c_str()) == 0;
  if (replaced) rename(moved.c_str(), argv[4]);
  say("own_program_replace", replaced);
  say("build_write", can_open((std::string(argv[5]) + "/planted").c_str(), O_WRONLY | O_CREAT));
  say("tmp_write", can_open(argv[6], O_WRONLY | O_CREAT));
  say("ccache", argv[7][0] != '\0' && can_open(argv[7], O_RDONLY | O_DIRECTORY));
  say("run_folder_write", can_open((std::string(argv[8]) + "/mine").c_str(), O_WRONLY | O_CREAT));
  std::ifstream status("/proc/self/status");
  std::string line, caps = "?";
  while (std::getline(status, line)) if (line.rfind("CapEff:", 0) == 0) caps = line.substr(7);
  say("capabilities", caps.find_first_not_of("\t 0") != std::string::npos);
  say("umount", umount2(argv[10], MNT_DETACH) == 0);
  say("new_user_namespace", unshare(CLONE_NEWUSER) == 0);
  if (argc > 10 && std::strcmp(argv[9], "-") != 0 && fork() == 0) {
    prctl(PR_SET_NAME, argv[9]);
    sleep(300);
    _exit(0);
  }
  return 0;
}
"""
TRIED_FILE_PROBE = Path("/tmp") / f"{MARK}.probe"


@unittest.skipUnless(sys.platform == "linux", "Linux namespaces")
class TestRunView(unittest.TestCase):
    """What a test run can reach, probed by a program of its own (plain libc calls:
    the sandbox is tried on its own, behind the import and assembly checks). In the
    run's sandbox it reaches neither reference/, nor another program of build/, nor
    the compiler cache; it cannot write its own program, build/ or the machine's /tmp;
    it has no capability (the grader runs as root here) and cannot make a user
    namespace to get one back; its forked sleeper dies with the run. Unwrapped, the
    same program reaches them, so the probe itself is shown to work."""

    @classmethod
    def setUpClass(cls):
        from dtlgrade import sandbox
        if not helpers.sandbox_works():
            raise unittest.SkipTest("bubblewrap cannot create namespaces on this machine")
        work = helpers.temp_folder(cls) / "work"
        ref = work / "tree" / "reference" / "01_point_to_point" / "src"
        ref.mkdir(parents=True)
        (ref / "ring.cc").write_text("// the pristine tree's copy\n")
        (work / "tree" / "grader" / "hidden").mkdir(parents=True)
        exe_dir = work / "build" / "labs" / "01_point_to_point"
        exe_dir.mkdir(parents=True)
        (exe_dir / "lab01_bench").write_text("the reference's benchmark\n")
        runs = work / "runs"
        runs.mkdir()
        (work / "probe.cc").write_text(PROBE)
        cls.probe = exe_dir / "probe"
        subprocess.run(["c++", "-O1", "-o", str(cls.probe), str(work / "probe.cc")], check=True)
        cache = sandbox.ccache_dir()
        cls.args = [str(cls.probe), str(helpers.ROOT / "reference" / "01_point_to_point" / "src" / "ring.cc"),
                    str(ref / "ring.cc"), "lab01_bench", str(cls.probe), str(exe_dir),
                    str(TRIED_FILE_PROBE), str(cache or ""), str(runs), CHILD_NAME,
                    str(work / "tree" / "reference")]
        box = sandbox.Sandbox(tree=work, writable=[runs], hidden=[work / "tree" / "reference",
                                                                  work / "tree" / "grader" / "hidden"],
                              programs_only=work / "build")
        run = subprocess.run(box.wrap(cls.args, runs), cwd=runs, capture_output=True, text=True, timeout=60,
                             preexec_fn=box.limits())
        cls.inside = dict(line.split() for line in run.stdout.splitlines() if line.count(" ") == 1)
        cls.inside_output = run.stdout + run.stderr
        cls.sleepers_after_run = sleepers()
        TRIED_FILE_PROBE.unlink(missing_ok=True)
        (exe_dir / "planted").unlink(missing_ok=True)
        # Unwrapped, without the sleeper (the umount of a folder that is no mount there fails harmlessly).
        outside_args = cls.args[:9] + ["-"] + cls.args[10:]
        run = subprocess.run(outside_args, cwd=runs, capture_output=True, text=True, timeout=60)
        cls.outside = dict(line.split() for line in run.stdout.splitlines() if line.count(" ") == 1)
        TRIED_FILE_PROBE.unlink(missing_ok=True)

    def test_probe_works_unwrapped(self):
        for name in ("grader_reference", "tree_reference", "other_program", "own_program_replace", "build_write",
                     "tmp_write", "run_folder_write"):
            self.assertEqual(self.outside.get(name), "reached", name)
        if os.geteuid() == 0:  # the grader as root, as on Gradescope: unwrapped, the capabilities are there
            self.assertEqual(self.outside.get("capabilities"), "reached")

    def test_run_reaches_nothing_it_must_not(self):
        self.assertEqual(self.inside.get("run_folder_write"), "reached", self.inside_output)
        for name in ("grader_reference", "tree_reference", "other_program", "own_program_replace", "build_write",
                     "ccache", "capabilities", "umount", "new_user_namespace"):
            self.assertEqual(self.inside.get(name), "blocked", f"{name}:\n{self.inside_output}")

    def test_machine_tmp_untouched_and_no_sleeper_left(self):
        self.assertEqual(self.inside.get("tmp_write"), "reached")  # its own /tmp...
        self.assertFalse(TRIED_FILE_PROBE.exists())                # ...not the machine's
        self.assertEqual(self.sleepers_after_run, [])


if __name__ == "__main__":
    unittest.main()
