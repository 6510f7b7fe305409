"""The container recipes (container/) cannot be built here (no container engine):
they are kept to the steps CI does run — Debian 12, the repository copied whole,
`./dtl setup` then `./dtl build` — so that they cannot silently drift from them."""
import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class TestRecipes(unittest.TestCase):
    def test_dockerfile_runs_the_tested_steps(self):
        text = (ROOT / "container" / "Dockerfile").read_text()
        self.assertRegex(text, r"(?m)^ARG BASE=debian:12$")
        self.assertRegex(text, r"(?m)^FROM \$\{BASE\}$")
        self.assertRegex(text, r"(?m)^COPY \. /dtlabs$")
        self.assertRegex(text, r"(?m)^WORKDIR /dtlabs$")
        runs = re.findall(r"(?m)^RUN (.*(?:\\\n.*)*)", text)
        self.assertTrue(any(re.search(r"\./dtl setup && \./dtl build", r) for r in runs), runs)

    def test_apptainer_definition_runs_the_tested_steps(self):
        text = (ROOT / "container" / "dtlabs.def").read_text()
        self.assertRegex(text, r"(?m)^Bootstrap: docker$")
        self.assertRegex(text, r"(?m)^From: debian:12$")
        sections = dict(re.findall(r"(?ms)^%(\w+)\n(.*?)(?=^%|\Z)", text))
        self.assertIn(". /dtlabs", sections["files"])
        post = [line.strip() for line in sections["post"].splitlines() if line.strip()]
        self.assertLess(post.index("./dtl setup"), post.index("./dtl build"))
        self.assertIn("cd /dtlabs", post)
        self.assertIn('exec ./dtl "$@"', sections["runscript"])

    def test_build_outputs_stay_out_of_the_image(self):
        ignored = (ROOT / ".dockerignore").read_text().split()
        for path in ("build/", "build-*/", ".carry/"):
            self.assertIn(path, ignored)


if __name__ == "__main__":
    unittest.main()
