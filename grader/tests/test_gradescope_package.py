"""The Gradescope package (grader/gradescope/make_package.sh): the zip holds
setup.sh, run_autograder and the repository under source/; run_autograder, in a
folder laid out as Gradescope's /autograder (AUTOGRADER_ROOT), grades the
submission it finds there and writes results/results.json."""
import json
import os
import subprocess
import sys
import unittest
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402


class TestGradescopePackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp = helpers.temp_folder(cls)
        cls.zip_path = tmp / "autograder.zip"
        subprocess.run([str(helpers.ROOT / "grader" / "gradescope" / "make_package.sh"), helpers.LAB,
                        str(cls.zip_path)], check=True, capture_output=True, timeout=120)
        cls.root = tmp / "autograder"
        with zipfile.ZipFile(cls.zip_path) as z:
            z.extractall(cls.root)
            for info in z.infolist():  # zipfile drops the mode bits; Gradescope's unzip keeps them
                mode = info.external_attr >> 16
                if mode:
                    os.chmod(cls.root / info.filename, mode)
        helpers.make_submission(cls.root / "submission", source=helpers.SKELETON_SRC)
        cls.autograder = subprocess.run([str(cls.root / "run_autograder")], env=dict(os.environ, AUTOGRADER_ROOT=str(cls.root)),
                                 capture_output=True, text=True, timeout=helpers.GRADE_TIMEOUT)

    def test_zip_layout(self):
        names = set(zipfile.ZipFile(self.zip_path).namelist())
        for required in ("setup.sh", "run_autograder", "source/dtl", "source/grader/grade.py",
                         "source/grader/dtlgrade/cli.py",
                         "source/grader/gradescope/LAB", "source/reference/01_point_to_point/src/ring.cc"):
            self.assertIn(required, names)

    def test_run_autograder_writes_results(self):
        self.assertEqual(self.autograder.returncode, 0, self.autograder.stdout[-3000:] + self.autograder.stderr[-2000:])
        results = json.loads((self.root / "results" / "results.json").read_text())
        self.assertEqual(results["score"], 0)           # the skeleton
        self.assertEqual(results["max_score"], 100)     # public, speed and example hidden items
        self.assertTrue(all("status" in t for t in results["tests"]))


if __name__ == "__main__":
    unittest.main()
