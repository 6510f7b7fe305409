#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image. The
# image must be Debian 12 or Ubuntu 24.04 (CMake 3.25 or newer from the
# distribution). It installs the Debian packages, builds the tree once (a warm
# ccache), and builds the graded lab's course objects into the image by grading
# the skeleton (grader/README.md, "The build"): each submission then compiles
# only its own files.
set -euo pipefail
cd /autograder/source
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
./dtl setup
./dtl build >/dev/null
LAB="$(cat grader/gradescope/LAB)"
hidden=()
[[ -d grader/gradescope/hidden ]] && hidden=(--hidden grader/gradescope/hidden)
# Where the sandbox cannot run here, this grades nothing: the first submission builds them.
python3 grader/grade.py "$LAB" --skeleton "${hidden[@]}" --json /tmp/dtl-course-objects.json >/dev/null || true
