"""Hidden tests catch, on their own, the faults the public tests catch.

Hidden tests exist to catch code tuned to the public ones, so each hidden item
checks its lab's properties itself (data against the vendor or a closed form,
tags with decoys in flight, the tracer's message counts and bytes, no vendor
collective) with inputs the public tests do not use: other tags, counts, roots,
rank counts and communicators. Three faults that the public tests catch, each
the reference with one function replaced and graded with the default hidden
tests (grader/hidden/NN_*), must each cost the hidden item that covers the
function, and nothing else of the hidden rubric:

  lab 01  ring_shift sends and receives every message with tag 0 (right data);
  lab 02  broadcast_binomial is linear: the root sends to every rank itself
          (right data; P - 1 messages from the root, not ceil(log2 P));
  lab 03  reduce_scatter_ring divides the wrong elements for the average when
          count % P != 0 (sums, and counts divisible by P, stay right).

The hidden tests before these checked only the data of a few calls and let all
three through. Whether the public items pass is not asserted: a submission tuned
to the public tests may pass them; the hidden items must not care.
"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402

# Lab 01: a ring that ignores its tag argument.
RING_TAG_ZERO = """\
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  DTL_MPI_CHECK(MPI_Sendrecv(send_buf.data(), count, MPI_BYTE, right, 0,  //
                             recv_buf.data(), count, MPI_BYTE, left, 0, comm, MPI_STATUS_IGNORE));
"""

# Lab 02: a linear broadcast, P - 1 messages from the root.
LINEAR_BROADCAST = """\
  if (rank == root) {
    for (int r = 0; r < size; ++r) {
      if (r != root) DTL_MPI_CHECK(MPI_Send(buf.data(), count, type, r, tag, comm));
    }
  } else {
    DTL_MPI_CHECK(MPI_Recv(buf.data(), count, type, root, tag, comm, MPI_STATUS_IGNORE));
  }
"""

# Lab 03: the reference's reduce-scatter, but the average divides the own chunk as if
# every chunk held count / P elements: wrong only when P does not divide the count.
AVERAGE_OF_EVEN_CHUNKS = helpers.mutated_body(
    "reduce_scatter_ring", "03",
    ("    for (T& x : chunk_span(buf, size, rank)) x /= static_cast<T>(size);\n",
     "    const std::size_t even = buf.size() / size;\n"
     "    for (T& x : buf.subspan(rank * even, even)) x /= static_cast<T>(size);\n"))


def hidden_item(run: helpers.GradeRun, prefix: str) -> dict:
    """The one JSON test whose name starts with `prefix`."""
    found = [t for t in run.json["tests"] if t["name"].startswith(prefix)]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} items start with {prefix!r}: {[t['name'] for t in run.json['tests']]}")
    return found[0]


class HiddenCatchCase(helpers.GraderAssertions):
    """Grades lab LAB with FUNCTION's body replaced by BODY; the hidden item CAUGHT
    must score 0 with a message containing each of MARKERS, the hidden item SPARED
    must keep its points."""
    LAB: str
    FUNCTION: str
    BODY: str
    CAUGHT: str
    SPARED: str
    MARKERS: tuple[str, ...]

    @classmethod
    def setUpClass(cls):
        sub = helpers.make_submission(helpers.temp_folder(cls) / "sub", cls.FUNCTION, cls.BODY, lab=cls.LAB)
        cls.graded = helpers.grade("--submission", str(sub), lab=cls.LAB)

    def test_graded(self):
        self.assertEqual(self.graded.returncode, 0, self.graded.output[-3000:])
        self.assertGradescopeJson(self.graded)
        self.assertNotIn("does not compile", self.graded.output)

    def test_hidden_item_catches_the_fault(self):
        item = hidden_item(self.graded, self.CAUGHT)
        self.assertEqual(item["visibility"], "after_published")
        self.assertZero([item])
        self.assertNotIn("grader set-up problem", item["output"])
        self.assertNotIn("not run", item["output"].lower())
        for marker in self.MARKERS:
            self.assertIn(marker, item["output"], item["name"])

    def test_other_hidden_item_keeps_its_points(self):
        self.assertFullMarks([hidden_item(self.graded, self.SPARED)])


class TestLab01RingTagZero(HiddenCatchCase, unittest.TestCase):
    LAB, FUNCTION, BODY = "01", "ring_shift", RING_TAG_ZERO
    CAUGHT, SPARED = "Hidden: ring and ping-pong", "Hidden: halo"
    MARKERS = ("HiddenRing.", "ring_shift", "tag")


class TestLab02LinearBroadcast(HiddenCatchCase, unittest.TestCase):
    LAB, FUNCTION, BODY = "02", "broadcast_binomial", LINEAR_BROADCAST
    CAUGHT, SPARED = "Hidden: broadcast", "Hidden: scatter, gather, reduce"
    MARKERS = ("HiddenBroadcast.", "broadcast_binomial", "ceil(log2 P)")


class TestLab03AverageWrongForUnevenCounts(HiddenCatchCase, unittest.TestCase):
    LAB, FUNCTION, BODY = "03", "reduce_scatter_ring", AVERAGE_OF_EVEN_CHUNKS
    CAUGHT, SPARED = "Hidden: reduce-scatter", "Hidden: segmented ring"
    MARKERS = ("HiddenRing.", "avg", "expected")

    def test_caught_by_the_reduce_scatter_on_its_own(self):
        # Not only through allreduce_ring: the reduce-scatter's own test fails.
        self.assertIn("HiddenRing.ReduceScatterOnItsOwn", hidden_item(self.graded, self.CAUGHT)["output"])


if __name__ == "__main__":
    unittest.main()
