"""The grader's own tests (python3 -m unittest discover -s grader/tests -v)."""
