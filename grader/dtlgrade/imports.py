"""What a submission's compiled code imports, checked before anything of it runs.

Every object file lists the symbols it needs from elsewhere (`nm -u`). The code of a
lab needs MPI, the harness (`dtl::`), the C++ standard library, the C library's
memory, string and printing functions, libm, and on GPU labs the CUDA runtime; it
never needs the test harness's own state (dtl::trace, dtl::testing), to start a process, open a file or a socket, load a library, read the
environment, install a signal handler or an exit hook, or call MPI's profiling
interface (PMPI_*, which would slip past the grader's tracer). So the grader reads
the imports of every object file of the student library (`src/` and the `given/`
files compiled against the student's headers) and refuses the submission before
any test runs when one of them is

  - on the refused list below (with the reason), or on the lab's own
    (`[[imports.refuse]]` in grader/rubrics/NN.toml: e.g. the vendor collective the
    lab rebuilds), or
  - not on the allowed list (this module's, plus the lab's `[[imports.allow]]`).

Each refusal names the symbol, its demangled name and the file. What this cannot
see: a call made through a pointer the code computes itself (a function pointer
found in memory, inline assembly issuing a system call). The sandbox around every
run (sandbox.py) is the second wall for those.

Names are classified by their mangled form, which says unambiguously which
namespace a C++ symbol lives in (`_ZNSt...` is std::, `_ZN3dtl...` is dtl::),
whatever its return type or template arguments.
"""
from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------
# The default policy
# ---------------------------------------------------------------------------

# C symbols refused in every lab, by what they would let code do.
REFUSED_C: dict[str, list[str]] = {
    "starts processes": ["system", "popen", "fork", "vfork", "clone", "clone3", "exec*", "posix_spawn*",
                         "daemon", "kill", "killpg", "ptrace", "syscall", "prctl", "setsid", "setpgid",
                         "pthread_kill", "MPI_Comm_spawn*"],
    "touches files": ["fopen*", "freopen*", "open", "open64", "openat*", "creat*", "unlink*", "remove",
                      "rename*", "mkdir*", "rmdir", "opendir", "fdopendir", "readdir*", "*stat", "*stat64",
                      "__xstat*", "__lxstat*", "__fxstat*", "statx", "access", "faccessat", "chdir", "fchdir",
                      "truncate*", "ftruncate*", "symlink*", "link", "linkat", "chmod", "fchmod*", "chown*",
                      "mmap*", "dup", "dup2", "dup3", "realpath", "getcwd", "tmpfile*", "mkstemp*", "mkdtemp",
                      "MPI_File_*"],
    "uses the network": ["socket", "socketpair", "connect", "bind", "listen", "accept*", "getaddrinfo",
                         "gethostbyname*", "sendto", "recvfrom", "sendmsg", "recvmsg", "setsockopt",
                         "MPI_Open_port", "MPI_Comm_connect", "MPI_Comm_accept", "MPI_Comm_join",
                         "MPI_Publish_name", "MPI_Lookup_name"],
    "loads code": ["dlopen", "dlmopen", "dlsym", "dlvsym"],
    "reads or changes the environment": ["getenv", "secure_getenv", "setenv", "putenv", "unsetenv",
                                         "clearenv", "environ", "__environ"],
    "installs an exit hook": ["atexit", "at_quick_exit", "on_exit"],
    "ends the process early": ["exit", "_exit", "_Exit", "quick_exit"],
    "handles signals or timers": ["signal", "sigaction", "raise", "alarm", "setitimer", "timer_create",
                                  "sigprocmask", "pthread_sigmask"],
    "goes around the grader's MPI tracer (PMPI_*)": ["PMPI_*", "pmpi_*"],
}

# C symbols allowed in every lab (fnmatch patterns).
ALLOWED_C = [
    # MPI (the lab's [[imports.refuse]] takes out what a lab must not use) and its
    # predefined handles (MPI_COMM_WORLD is &ompi_mpi_comm_world, MPI_FLOAT &ompi_mpi_float,
    # MPI_REQUEST_NULL &ompi_request_null, MPI_MESSAGE_NULL &ompi_message_null).
    "MPI_*", "ompi_mpi_*", "ompi_request_null", "ompi_message_null", "ompi_message_no_proc",
    # The C++ runtime that any C++ code imports.
    "__cxa_*", "__gxx_personality_v0", "_Unwind_Resume", "__dynamic_cast", "__stack_chk_fail",
    "_GLOBAL_OFFSET_TABLE_", "__dso_handle", "__tls_get_addr", "__libc_single_threaded", "__once_proxy",
    "__errno_location", "__assert_fail", "abort",
    # Memory, strings, printing (stdout/stderr only: opening a file is refused above).
    "malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc",
    "mem*", "str*", "printf", "fprintf", "vprintf", "vfprintf", "snprintf", "vsnprintf", "sprintf",
    "vsprintf", "puts", "fputs", "putchar", "fputc", "putc", "fwrite", "fflush", "stdout", "stderr",
    "__printf_chk", "__fprintf_chk", "__snprintf_chk", "__vsnprintf_chk", "__sprintf_chk", "__memcpy_chk",
    "__memset_chk", "__memmove_chk", "__strcpy_chk", "rand", "srand", "qsort", "bsearch",
    # Threads, locks and clocks (std::thread, std::mutex, std::chrono, sleep_for).
    "pthread_mutex_*", "pthread_cond_*", "pthread_once", "pthread_key_*", "pthread_getspecific",
    "pthread_setspecific", "pthread_self", "pthread_equal", "sched_yield", "clock_gettime", "gettimeofday",
    "time", "nanosleep", "usleep",
]

# libm: these names, each also with an f or l suffix.
MATH = ["sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "fabs", "floor",
        "ceil", "round", "lround", "llround", "trunc", "nearbyint", "rint", "lrint", "fmod", "remainder",
        "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "erf", "erfc",
        "hypot", "fmax", "fmin", "fma", "ldexp", "frexp", "modf", "nextafter", "copysign", "scalbn",
        "__isnan", "__isinf", "__finite", "__fpclassify", "__signbit"]
ALLOWED_C += [f"{name}{suffix}" for name in MATH for suffix in ("", "f", "l")]

# What CUDA code imports; allowed only in object files compiled by nvcc (*.cu.o),
# where nvcc's own registration code needs atexit, or in labs whose rubric allows
# the runtime API.
NVCC_GENERATED = ["__cuda*", "__nv_*", "atexit"]

# C++ symbols inside std:: that reach outside the process: file streams, the
# filesystem library, and libstdc++'s own file layer under the streams
# (std::__basic_file<char>::open, xsputn, sys_open: open(2) and write(2) by another
# name). std::system is the C symbol, refused above.
REFUSED_STD = {"touches files": ["*basic_ifstream*", "*basic_ofstream*", "*basic_fstream*",
                                 "*basic_filebuf*", "*filesystem*", "*__basic_file*"]}

# The harness's own state, which no lab's code has a reason to touch: the tracer the
# tests count messages with (dtl::trace::reset_counts() would clear its counts) and
# the test main (dtl::testing). A lab refuses more of dtl:: by name in its rubric
# (labs 02 and 03 the harness's communicators, which reach the vendor collectives).
REFUSED_DTL = {"reaches the test harness's own state (the tracer's counts, the test main)":
               ["dtl::trace::*", "dtl::testing::*"]}

# The first name of a mangled std:: entity: St (std::) or one of the standard
# abbreviations (Sa allocator, Sb basic_string, Ss string, Si istream, So ostream, Sd iostream).
_STD = re.compile(r"^(?:St|S[absiod])")
_NAME = re.compile(r"^(\d+)")


def _namespace(mangled: str) -> str | None:
    """The outermost namespace (or class) of a mangled C++ name: "std", "dtl",
    "__cxxabiv1", "operator" for the global operators new and delete, "" for
    another global function, or None for a C name."""
    if not mangled.startswith("_Z"):
        return None
    rest = mangled[2:]
    if rest[:2] in ("TV", "TI", "TS", "TT"):  # vtable, typeinfo, typeinfo name, VTT
        rest = rest[2:]
    if rest.startswith(("nw", "na", "dl", "da")):
        return "operator"
    if rest.startswith("N"):
        rest = rest[1:].lstrip("KVRO")  # cv and ref qualifiers of a member function
    if _STD.match(rest):
        return "std"
    m = _NAME.match(rest)
    if not m:
        return "?"
    length = int(m.group(1))
    return rest[len(m.group(1)):len(m.group(1)) + length] if rest.startswith(m.group(1)) and length else "?"


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


# ---------------------------------------------------------------------------
# A lab's policy and the check
# ---------------------------------------------------------------------------

@dataclass
class Rule:
    """Symbols (fnmatch patterns, C names or demangled C++ names) and the files it
    applies to (paths inside the lab such as "src/ring_allreduce.cc"; empty: all)."""
    symbols: list[str]
    files: list[str] = field(default_factory=list)
    why: str = ""

    def applies_to(self, file: str) -> bool:
        return not self.files or _matches(file, self.files)


@dataclass
class Policy:
    allow: list[Rule] = field(default_factory=list)
    refuse: list[Rule] = field(default_factory=list)

    @classmethod
    def from_rubric(cls, data: dict) -> "Policy":
        """Reads the rubric's [imports] table: allow = [{symbols, files}], refuse =
        [{symbols, files, why}] (TOML: [[imports.allow]], [[imports.refuse]])."""
        table = data.get("imports", {})

        def rules(key: str) -> list[Rule]:
            return [Rule(list(r["symbols"]), list(r.get("files", [])), r.get("why", ""))
                    for r in table.get(key, [])]

        return cls(rules("allow"), rules("refuse"))


@dataclass
class Refusal:
    file: str      # inside the lab, e.g. src/ring.cc
    symbol: str    # as the linker sees it
    readable: str  # demangled
    why: str

    def __str__(self) -> str:
        shown = self.readable if self.readable == self.symbol else f"{self.readable} ({self.symbol})"
        return f"{self.file} uses {shown}: {self.why}"


def verdict(symbol: str, readable: str, file: str, policy: Policy) -> str | None:
    """Why `symbol` (imported by `file`) is refused, or None when it is allowed."""
    names = (symbol, readable)
    for rule in policy.refuse:
        if rule.applies_to(file) and any(_matches(n, rule.symbols) for n in names):
            return rule.why or "refused in this lab"
    if any(rule.applies_to(file) and any(_matches(n, rule.symbols) for n in names) for rule in policy.allow):
        return None
    space = _namespace(symbol)
    if space is None:  # a C name
        if file.endswith(".cu") and _matches(symbol, NVCC_GENERATED):
            return None
        for why, patterns in REFUSED_C.items():
            if _matches(symbol, patterns):
                return f"code under grading never {why}"
        if _matches(symbol, ALLOWED_C):
            return None
        return "not on this lab's list of imports (MPI, the harness, the C++ and C standard libraries, libm)"
    if space == "std":
        for why, patterns in REFUSED_STD.items():
            if _matches(readable, patterns):
                return f"code under grading never {why}"
        return None
    if space == "dtl":
        for why, patterns in REFUSED_DTL.items():
            if _matches(readable, patterns):
                return f"code under grading never {why}"
        return None
    if space in ("__cxxabiv1", "operator"):
        return None
    return "not on this lab's list of imports (MPI, the harness, the C++ and C standard libraries, libm)"


def undefined_symbols(obj: Path) -> list[tuple[str, str]]:
    """(mangled, demangled) for every symbol `obj` imports."""
    out = subprocess.run(["nm", "-u", "--format=posix", str(obj)], capture_output=True, text=True, check=True)
    names = sorted({line.split()[0] for line in out.stdout.splitlines() if line.strip()})
    if not names:
        return []
    readable = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True,
                              check=True).stdout.splitlines()
    return list(zip(names, readable))


def student_objects(tree: Path, build_dir: Path, lab_name: str) -> dict[str, Path]:
    """The object files of the student library dtl_labNN_student, by the file they
    come from inside the lab ("src/ring.cc", "given/reduce_copy.cu"); only those
    whose source is in `tree` now (a reused build folder keeps stale objects)."""
    lib_dir = build_dir / "labs" / lab_name / "CMakeFiles" / f"dtl_lab{lab_name[:2]}_student.dir"
    found = {}
    for obj in sorted(lib_dir.rglob("*.o")):
        rel = obj.relative_to(lib_dir).with_suffix("")  # src/ring.cc
        if (tree / "labs" / lab_name / rel).is_file():
            found[str(rel)] = obj
    return found


def check(tree: Path, build_dir: Path, lab_name: str, policy: Policy) -> list[Refusal]:
    """Every refused import of the lab's student library (see the module's docstring)."""
    refusals = []
    for file, obj in student_objects(tree, build_dir, lab_name).items():
        for symbol, readable in undefined_symbols(obj):
            why = verdict(symbol, readable, file, policy)
            if why is not None:
                refusals.append(Refusal(file, symbol, readable, why))
    return refusals


if __name__ == "__main__":  # python3 grader/dtlgrade/imports.py TREE BUILD_DIR LAB_NAME [RUBRIC.toml]
    import sys
    import tomllib

    data = tomllib.loads(Path(sys.argv[4]).read_text()) if len(sys.argv) > 4 else {}
    found = check(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Policy.from_rubric(data))
    print("\n".join(map(str, found)) or "no refused imports")
    sys.exit(1 if found else 0)
