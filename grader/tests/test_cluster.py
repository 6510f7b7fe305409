"""Running beyond one machine, as far as one machine can test it (cluster/README.md):
`./dtl mpirun --hostfile` runs a lab's tests over a hostfile of localhost entries and
honours its slots; in a Slurm allocation it picks `srun --mpi=pmix` only when srun
offers PMIx (checked with stand-in srun and mpirun commands that record how they
were called); and the sbatch scripts parse and benchmark the lab they name."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DTL = ROOT / "dtl"
BUILD = Path(os.environ.get("DTL_BUILD_DIR", ROOT / "build"))
LAB01_TEST = BUILD / "labs" / "01_point_to_point" / "lab01_reference_test"


def dtl(*args, env=None, timeout=120):
    return subprocess.run([str(DTL), *args], capture_output=True, text=True, errors="replace", timeout=timeout,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL)


class TestHostfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.dir = Path(cls.tmp.name)

    def hostfile(self, text: str) -> Path:
        path = self.dir / f"hosts-{abs(hash(text))}"
        path.write_text(text)
        return path

    @unittest.skipUnless(LAB01_TEST.is_file(), f"{LAB01_TEST} is not built")
    def test_lab_tests_run_over_a_hostfile(self):
        hosts = self.hostfile("localhost slots=4\n")
        run = dtl("mpirun", "--hostfile", str(hosts), "-n", "4", str(LAB01_TEST), "--gtest_brief=1")
        self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
        self.assertIn(f"dtl mpirun: mpirun --hostfile {hosts}", run.stderr)
        self.assertRegex(run.stdout, r"PASSED.*\d+ tests")

    def test_more_ranks_than_slots_is_refused(self):
        hosts = self.hostfile("localhost slots=2\n")
        run = dtl("mpirun", "--hostfile", str(hosts), "-n", "3", "true")
        self.assertNotEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("not enough slots", run.stdout + run.stderr)

    def test_a_missing_hostfile_is_named(self):
        missing = self.dir / "no-such-hosts"
        run = dtl("mpirun", "--hostfile", str(missing), "-n", "2", "true")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn(f"--hostfile {missing}: no such readable file", run.stderr)


class TestSlurmChoice(unittest.TestCase):
    """Stand-in srun and mpirun on PATH record their arguments; SLURM_JOB_ID makes
    ./dtl mpirun believe it runs inside an allocation."""

    def run_in_fake_slurm(self, pmix: bool, *args):
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir, log = Path(tmp) / "bin", Path(tmp) / "calls"
            bin_dir.mkdir()
            plugins = "MPI plugin types are...\n\tnone\n\tpmi2\n" + ("\tpmix\n" if pmix else "")
            (bin_dir / "srun").write_text(
                "#!/bin/sh\nif [ \"$1\" = --mpi=list ]; then printf '" + plugins.replace("\n", "\\n") + "'; exit 0; fi\n"
                f"echo \"srun $*\" >> {log}\n")
            (bin_dir / "mpirun").write_text(f"#!/bin/sh\necho \"mpirun $*\" >> {log}\n")
            for f in ("srun", "mpirun"):
                (bin_dir / f).chmod(0o755)
            env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="4242")
            env.pop("DTL_LAUNCHER", None)
            run = dtl("mpirun", *args, env=env)
            calls = log.read_text().strip() if log.exists() else ""
        return run, calls

    def test_srun_with_pmix_when_offered(self):
        run, calls = self.run_in_fake_slurm(True, "-n", "4", "prog", "--flag")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(calls, "srun --mpi=pmix -n 4 prog --flag")
        self.assertIn("srun --mpi=pmix (Slurm job 4242)", run.stderr)

    def test_mpirun_options_get_their_srun_form(self):
        run, calls = self.run_in_fake_slurm(True, "-np", "8", "--map-by", "ppr:4:node", "--bind-to", "core",
                                            "-x", "DTL_TRACE_OUT", "--mca", "pml", "ucx", "--nodes=2",
                                            "prog", "-x", "--map-by")
        self.assertEqual(run.returncode, 0, run.stderr)
        # the program's own arguments stay as they are
        self.assertEqual(calls, "srun --mpi=pmix -n 8 --ntasks-per-node=4 --cpu-bind=cores --nodes=2 "
                                "prog -x --map-by")
        run, calls = self.run_in_fake_slurm(True, "--map-by", "slot", "prog")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--map-by slot: srun takes ppr:N:node only", run.stderr)
        self.assertEqual(calls, "")

    def test_mpirun_reads_the_allocation_without_pmix(self):
        run, calls = self.run_in_fake_slurm(False, "-n", "4", "prog")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(calls, "mpirun -n 4 prog")  # no --oversubscribe: the allocation's slots hold
        self.assertIn("mpirun in Slurm job 4242", run.stderr)

    def test_launcher_forces_either(self):
        _, calls = self.run_in_fake_slurm(True, "--launcher", "mpirun", "-n", "2", "prog")
        self.assertEqual(calls, "mpirun -n 2 prog")
        _, calls = self.run_in_fake_slurm(False, "--launcher", "srun", "-n", "2", "prog")
        self.assertEqual(calls, "srun --mpi=pmix -n 2 prog")
        run, calls = self.run_in_fake_slurm(True, "--launcher", "ssh", "prog")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--launcher ssh: choose auto, mpirun or srun", run.stderr)


class TestSbatchScripts(unittest.TestCase):
    def test_each_script_parses_and_benchmarks_its_lab(self):
        scripts = sorted((ROOT / "cluster").glob("*.sbatch"))
        self.assertEqual([s.name[:5] for s in scripts], ["lab02", "lab03", "lab04"])
        for script in scripts:
            text = script.read_text()
            syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            self.assertEqual(syntax.returncode, 0, f"{script.name}: {syntax.stderr}")
            for option in ("--nodes=", "--ntasks-per-node=", "--time=", "--output="):
                self.assertRegex(text, rf"(?m)^#SBATCH {re.escape(option)}\S+", f"{script.name} lacks #SBATCH {option}")
            self.assertIn('source "${SLURM_SUBMIT_DIR:-.}/cluster/common.sh"', text, script.name)
            self.assertRegex(text, rf"(?m)^\s*cluster_bench {script.name[3:5]} \"\$@\"( .*)?$", script.name)
        common = subprocess.run(["bash", "-n", str(ROOT / "cluster" / "common.sh")], capture_output=True, text=True)
        self.assertEqual(common.returncode, 0, common.stderr)

    def test_gpu_count_survives_a_node_without_nvidia_smi(self):
        """The scripts run under `set -euo pipefail`; counting GPUs where there is no
        nvidia-smi must give 0, not end the job."""
        with tempfile.TemporaryDirectory() as tmp:
            tools = Path(tmp)
            for tool in ("bash", "grep"):  # all gpus_per_node may use; no nvidia-smi
                (tools / tool).symlink_to(shutil.which(tool))
            common = (ROOT / "cluster" / "common.sh").read_text()
            function = re.search(r"(?ms)^gpus_per_node\(\) \{.*?^\}", common).group(0)
            script = f'set -euo pipefail\n{function}\nn="$(gpus_per_node)"; echo "gpus=$n"\n'
            run = subprocess.run([str(tools / "bash"), "-c", script], capture_output=True, text=True,
                                 env={"PATH": f"{tools}:/nonexistent"})
        self.assertEqual((run.returncode, run.stdout.strip()), (0, "gpus=0"), run.stderr)

    @unittest.skipUnless(shutil.which("shellcheck"), "shellcheck is not installed")
    def test_shellcheck_clean(self):
        files = sorted(str(p) for p in (ROOT / "cluster").glob("*.sbatch")) + [str(ROOT / "cluster" / "common.sh")]
        run = subprocess.run(["shellcheck", "-x", *files], capture_output=True, text=True, cwd=ROOT)
        self.assertEqual(run.returncode, 0, run.stdout)


if __name__ == "__main__":
    unittest.main()
