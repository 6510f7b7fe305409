#!/usr/bin/env python3
"""The dtlabs autograder's entry point: ./dtl grade NN [options] runs this file,
and so does Gradescope's run_autograder. The grader is the package dtlgrade/
beside it; its __init__.py says which module does what."""
import sys

from dtlgrade.cli import main

if __name__ == "__main__":
    sys.exit(main())
