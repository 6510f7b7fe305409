"""The wall around every run of a submission's code: bubblewrap plus resource limits.

A submission is C++ that the grader compiles and runs; it must not be able to read
the reference solutions or the hidden tests, write outside its build, reach the
network, leave processes behind, or touch the results the grader writes. So every
configure, build and test run goes through Sandbox.wrap(), which puts the command
inside `bwrap` (Debian's bubblewrap) with

  - only the system's read-only folders (/usr, /etc, and the /lib, /bin links),
    the pristine tree read-only with the folders named `hidden` (reference/, the
    hidden tests' sources, ...) covered by empty ones, and the build and work
    folders writable; nothing else of the machine: not the grader's checkout, not
    other submissions, not the home folders;
  - a fresh /tmp and /dev/shm (Open MPI's shared memory lives there), a minimal
    /dev (plus only /dev/nvidia* when a GPU run needs them);
  - its own network namespace (only a loopback: mpirun's ranks talk over it and
    shared memory; nothing outside can be reached), PID namespace (when the run's
    first process ends, the kernel kills every process left in it: no orphan
    outlives a run) and IPC namespace, and --die-with-parent (if the grader dies,
    so does the run);

  - its own user namespace with every capability dropped (--unshare-user
    --cap-drop ALL --disable-userns): a grader running as root (Gradescope, a
    container) gives the submission no CAP_SYS_ADMIN to unmount what covers
    reference/ (the process limit still does not bind a real root, measured);
  - for a test run, none of the build folder but the programs on its command
    line (read-only): not the other test programs (hidden tests), not the
    reference's library or benchmark, and nothing there to overwrite before the
    grader runs it; the build folder is read-only for runs in any case, and the
    compiler cache is mounted for builds only (a run could otherwise poison the
    objects of the next submission), and so is the build folder of the course's
    prebuilt objects (read-only: the links read them; prebuilt.py);
  - tmpfs of a fixed size for /tmp and /dev/shm;

and limits() sets per-process resource limits (CPU seconds, file size, open files,
processes, address space: 6 GiB per compiler process, 16 GiB per rank where no
GPU is used; no core files) before the command starts, inherited by mpirun and
every rank.

Where bwrap is missing or cannot create namespaces (some containers forbid it),
probe() says why; the grader then refuses to run unless told --no-sandbox, and
says so in its report. Nothing is ever run unsandboxed silently.
"""
from __future__ import annotations

import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# Per-process limits of a test run (each rank is a process). A build gets the same
# but for the file size (object files with debug information are large).
CPU_SECONDS = 600               # far above any test's wall limit: a spinning rank is killed by the wall clock first
FILE_BYTES = 256 << 20          # no test output file is near this
BUILD_FILE_BYTES = 2 << 30
OPEN_FILES = 4096
PROCESSES = 4096                # counted per user; not enforced for root (the sandbox's PID namespace is the wall there)
ADDRESS_SPACE_BYTES = 16 << 30  # per process; left unlimited where CUDA runs (it reserves huge virtual ranges)
BUILD_ADDRESS_SPACE_BYTES = 6 << 30  # per compiler process: `#include "/dev/zero"` ends there, not in the machine's memory

TMP_BYTES = 1 << 30              # the sandbox's /tmp
SHM_BYTES = 4 << 30              # its /dev/shm: Open MPI's shared-memory segments, 8 ranks of large messages

# /sys: hwloc (inside mpirun) reads the CPU topology there.
SYSTEM_READ_ONLY = ["/usr", "/etc", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt", "/sys"]


def probe() -> tuple[bool, str]:
    """(True, "") when bwrap can create the namespaces the sandbox needs here, else
    (False, why)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bwrap (Debian's bubblewrap) is not installed: run ./dtl setup"
    try:
        result = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                                 "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
                                 "--die-with-parent", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap could not start: {e}"
    if result.returncode != 0:
        return False, f"bwrap cannot create namespaces here ({result.stderr.strip() or result.returncode})"
    return True, ""


@dataclass
class Sandbox:
    """How one submission's commands are wrapped. `tree` is visible read-only, the
    paths in `hidden` (inside tree) are covered by empty folders, `writable` are
    read-write. `programs_only`, a folder inside tree, is covered too, but for the
    files under it that the command names (the program a run runs). `cache`: the
    compiler cache is mounted (builds only). `read_only`: folders outside tree, visible
    read-only (the prebuilt course objects a build links). enabled=False wraps nothing
    (--no-sandbox)."""
    tree: Path
    writable: list[Path] = field(default_factory=list)
    hidden: list[Path] = field(default_factory=list)
    enabled: bool = True
    gpu: bool = False
    programs_only: Path | None = None
    cache: bool = False
    read_only: list[Path] = field(default_factory=list)

    def wrap(self, cmd: list[str], cwd: Path) -> list[str]:
        if not self.enabled:
            return cmd
        args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--hostname", "sandbox",
                # No capability inside, even for a grader running as root; no new user namespace to get some back.
                "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        for path in SYSTEM_READ_ONLY:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--dev", "/dev"]
        if self.gpu:  # the driver's device files, and nothing else of the machine's /dev
            for node in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind-try", str(node), str(node)]
        args += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        args += ["--ro-bind", str(self.tree), str(self.tree)]
        for path in self.read_only:
            args += ["--ro-bind", str(path), str(path)]
        for path in self.hidden:
            if path.exists():
                args += ["--size", "4096", "--tmpfs", str(path), "--remount-ro", str(path)]
        if self.programs_only is not None and self.programs_only.exists():
            args += ["--tmpfs", str(self.programs_only)]
            for arg in cmd:
                path = Path(arg)
                if path.is_absolute() and path.is_relative_to(self.programs_only) and path.is_file():
                    args += ["--ro-bind", str(path), str(path)]
            args += ["--remount-ro", str(self.programs_only)]
        for path in self.writable:
            path.mkdir(parents=True, exist_ok=True)
            args += ["--bind", str(path), str(path)]
        cache = ccache_dir() if self.cache else None
        if cache is not None:  # the compiler writes objects there; nothing of the submission runs in a build
            # CCACHE_DIR too: inside, HOME is /tmp, where ccache would look for an empty cache.
            args += ["--bind", str(cache), str(cache), "--setenv", "CCACHE_DIR", str(cache)]
        else:
            args += ["--setenv", "CCACHE_DISABLE", "1"]
        args += ["--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--chdir", str(cwd), "--"]
        return args + cmd

    def limits(self, build: bool = False):
        """A preexec_fn for subprocess.Popen: the resource limits of one run."""
        gpu = self.gpu

        def apply() -> None:
            def cap(which: int, value: int) -> None:
                soft, hard = resource.getrlimit(which)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (value, value))

            cap(resource.RLIMIT_CPU, CPU_SECONDS)
            cap(resource.RLIMIT_FSIZE, BUILD_FILE_BYTES if build else FILE_BYTES)
            cap(resource.RLIMIT_NOFILE, OPEN_FILES)
            cap(resource.RLIMIT_NPROC, PROCESSES)
            cap(resource.RLIMIT_CORE, 0)
            if build:
                cap(resource.RLIMIT_AS, BUILD_ADDRESS_SPACE_BYTES)
            elif not gpu:
                cap(resource.RLIMIT_AS, ADDRESS_SPACE_BYTES)

        return apply


def ccache_dir() -> Path | None:
    """ccache's cache folder when ccache is in use (CMake's compiler launcher)."""
    if shutil.which("ccache") is None:
        return None
    try:
        out = subprocess.run(["ccache", "--get-config", "cache_dir"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":  # python3 grader/dtlgrade/sandbox.py: says whether the sandbox works here
    ok, why = probe()
    print("sandbox: bwrap works here" if ok else f"sandbox unavailable: {why}")
    raise SystemExit(0 if ok else 1)
