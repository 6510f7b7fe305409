"""dtlgrade: the dtlabs autograder (./dtl grade NN, see grader/README.md).

What a grading does, in order, and the module that does it:
  1. lab.py         reads the lab's rubric (grader/rubrics/NN.toml plus hidden
                    rubrics) and finds the labs whose library it links;
  2. submission.py  takes the lab's src/ files from the submission (a folder
                    holding them, or a checkout of the repository) -- only file
                    names that exist in the lab's src/, only regular files --
                    and drops them into a pristine tree copied from this
                    repository (CMake, cmake/, harness/, the lab's tests, headers
                    and hidden tests): tests, headers and harness are never the
                    student's;
  3. build.py       configures and builds only that lab's student test binaries;
                    a build that fails, or that read files a submission may not
                    include, scores 0 with the compiler's errors;
  4. runner.py      runs each test binary under mpirun at every rank count the
                    rubric names, in its own session, with a per-test timeout
                    (the test main's watchdog) and a grader-side limit on time
                    and output (process.py); a crash, a hang or a flood costs the
                    tests it hit and the run resumes with the remaining tests;
  5. score.py       scores the rubric items, all or nothing;
     perf.py        scores the speed items against the reference's benchmark;
  6. report.py      prints a table and writes Gradescope's results.json.
grading.py runs these steps for one submission or a batch; cli.py is the
command line.
"""
