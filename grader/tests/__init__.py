"""The grader's own tests: python3 grader/tests/run_suite.py (what ./dtl test runs:
one class per process, several at once), or python3 -m unittest discover -s grader/tests -v."""
