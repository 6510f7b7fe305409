# dtl_add_mpi_test(): one test program registered with ctest under mpiexec, once per
# rank count. Every test program the suite starts with mpiexec is registered
# through it: the labs' (dtl_add_lab(), and lab 09's kill check) and the harness's
# (harness/*/tests/CMakeLists.txt).
#
#   dtl_add_mpi_test(<target> RANKS 1 2 ... LABELS harness mpi ... TIMEOUT 120
#                    [NAME <prefix>] [MPIEXEC_FLAGS --enable-recovery ...] [ARGS ...]
#                    [PASS_REGULAR_EXPRESSION <regex>...] [FAIL_REGULAR_EXPRESSION <regex>...])
#
# For each R in RANKS it adds the test <prefix>_npR (prefix: NAME, default <target>):
#
#   ${DTL_MPIEXEC} ${DTL_MPIEXEC_FLAGS} [MPIEXEC_FLAGS] -n R $<TARGET_FILE:target> [ARGS]
#
# with LABELS, TIMEOUT, PROCESSORS R (so that ctest -j does not overload the
# machine) and the environment DTL_MPI_ENV (as root, oversubscribed: see
# DtlDependencies.cmake). PASS_/FAIL_REGULAR_EXPRESSION are the ctest properties
# of the same names, for a program whose verdict is in its output.
include_guard(GLOBAL)

function(dtl_add_mpi_test target)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT"
                        "RANKS;LABELS;MPIEXEC_FLAGS;ARGS;PASS_REGULAR_EXPRESSION;FAIL_REGULAR_EXPRESSION" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dtl_add_mpi_test(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_RANKS OR NOT ARG_TIMEOUT)
    message(FATAL_ERROR "dtl_add_mpi_test(${target}): RANKS and TIMEOUT are required")
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  foreach(np IN LISTS ARG_RANKS)
    set(name ${ARG_NAME}_np${np})
    add_test(NAME ${name}
             COMMAND ${DTL_MPIEXEC} ${DTL_MPIEXEC_FLAGS} ${ARG_MPIEXEC_FLAGS} -n ${np}
                     $<TARGET_FILE:${target}> ${ARG_ARGS})
    set_tests_properties(${name} PROPERTIES
      LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} PROCESSORS ${np} ENVIRONMENT "${DTL_MPI_ENV}")
    if(ARG_PASS_REGULAR_EXPRESSION)
      set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${ARG_PASS_REGULAR_EXPRESSION}")
    endif()
    if(ARG_FAIL_REGULAR_EXPRESSION)
      set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION "${ARG_FAIL_REGULAR_EXPRESSION}")
    endif()
  endforeach()
endfunction()
