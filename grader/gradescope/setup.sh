#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image. The
# image must be Debian 12 or Ubuntu 24.04 (CMake 3.25 or newer from the
# distribution). It installs the Debian packages and builds the tree once, so
# that ccache makes each submission's build quick.
set -euo pipefail
cd /autograder/source
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
./dtl setup
./dtl build >/dev/null
