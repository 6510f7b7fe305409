"""The import and definition rules, one symbol at a time (no build): what the grader
refuses by name before anything of a submission runs.

  - dtl:: is allowed by name, not wholesale: dtl::trace (reset_counts() would clear
    the counts the tests check) and dtl::testing are refused in every lab, the
    harness's communicators in labs 02 and 03 (their rubrics), while the lab's own
    names and the harness's MPI helpers stay allowed;
  - std::__basic_file<char>, libstdc++'s file layer under the streams, is refused
    like the streams;
  - objects.definition_problem(): a C name (`read`), operator new, a strong
    definition outside dtl:: or in dtl::testing, and an ifunc are refused; the
    lab's own functions, template instantiations (weak) and the compilers' own
    C names (DW.ref.*, nvcc's __cuda*) are not;
  - objects.asm_lines(): assembly tokens in code, not in comments or strings, and
    in preprocessed text only on lines from the submitted files.
"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helpers  # noqa: E402
from dtlgrade import imports, objects  # noqa: E402
from dtlgrade.lab import read_toml  # noqa: E402


def policy(lab: str) -> imports.Policy:
    return imports.Policy.from_rubric(read_toml(helpers.ROOT / "grader" / "rubrics" / f"{lab}.toml"))


class TestDtlByName(unittest.TestCase):
    def test_harness_state_refused_everywhere(self):
        for lab in ("01", "04", "09"):
            why = imports.verdict("_ZN3dtl5trace12reset_countsEv", "dtl::trace::reset_counts()", "src/x.cc",
                                  policy(lab))
            self.assertIn("test harness's own state", why, lab)
            self.assertIsNotNone(imports.verdict("_ZN3dtl7testing4commEv", "dtl::testing::comm()", "src/x.cc",
                                                 policy(lab)))

    def test_communicators_refused_in_labs_02_and_03(self):
        sym, readable = ("_ZN3dtl15MpiCommunicator9allreduceEv", "dtl::MpiCommunicator::allreduce()")
        for lab in ("02", "03"):
            self.assertIn("harness communicator", imports.verdict(sym, readable, "src/x.cc", policy(lab)), lab)
        self.assertIsNone(imports.verdict(sym, readable, "src/x.cc", policy("04")))

    def test_the_labs_own_names_and_mpi_helpers_stay_allowed(self):
        self.assertIsNone(imports.verdict("_ZN3dtl5lab0110ring_shiftEv", "dtl::lab01::ring_shift()", "src/ring.cc",
                                          policy("01")))
        self.assertIsNone(imports.verdict("_ZN3dtl8mpi_typeEv", "dtl::mpi_type()", "src/ring.cc", policy("02")))

    def test_basic_file_refused(self):
        why = imports.verdict("_ZNSt12__basic_fileIcE4openEPKcSt13_Ios_Openmodei",
                              "std::__basic_file<char>::open(char const*, std::_Ios_Openmode, int)", "src/x.cc",
                              policy("01"))
        self.assertIn("never touches files", why)


class TestDefinitions(unittest.TestCase):
    def test_refused(self):
        cases = [("read", "T"), ("MPI_Send", "T"), ("_Znwm", "T"), ("_Znwm", "W"), ("open", "W"),
                 ("_ZN3dtl7testing4commEv", "T"), ("_ZN6helperEv", "T"), ("_ZNSt6vectorIiE9push_backEv", "T"),
                 ("_ZN3dtl5lab013fooEv", "i")]
        for name, kind in cases:
            self.assertIsNotNone(objects.definition_problem(name, kind, False), (name, kind))

    def test_allowed(self):
        cases = [("_ZN3dtl5lab0110ring_shiftEv", "T", False), ("_ZNSt6vectorIiE9push_backEv", "W", False),
                 ("DW.ref.__gxx_personality_v0", "V", False), ("__cudaRegisterLinkedBinary_x", "T", True),
                 ("_ZTVN3dtl5lab015ErrorE", "V", False)]
        for name, kind, cuda in cases:
            self.assertIsNone(objects.definition_problem(name, kind, cuda), (name, kind))


class TestAssemblyScan(unittest.TestCase):
    def test_source_text(self):
        text = 'int a; // asm("x") in a comment\nconst char* s = "asm";\n  __asm__ volatile("syscall");\n'
        self.assertEqual(objects.asm_lines(text, None), [("", 3, "__asm__")])

    def test_preprocessed_lines_of_submitted_files_only(self):
        text = ('# 1 "/usr/include/stdio.h"\nextern int f() __asm__("g");\n'
                '# 5 "/t/src/ring.cc"\nint x;\n  __asm__("nop");\n')
        self.assertEqual(objects.asm_lines(text, {"/t/src/ring.cc"}), [("/t/src/ring.cc", 6, "__asm__")])


if __name__ == "__main__":
    unittest.main()
