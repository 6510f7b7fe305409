# dtl_add_lab(): everything a lab needs, so that labs/NN_topic/CMakeLists.txt is one call.
#
#   dtl_add_lab(RANKS 1 2 3 4 [HIDDEN_RANKS 5 6] [SUPPORTED_RANKS 1 2 3 4 6] TIMEOUT 120
#               [LIBS extra targets] [FLAVORED_LIBS dtl_lab03])
#
# From the lab's folder name (NN_topic) it builds, for each flavor F in {student, reference}:
#   dtl_labNN_F        library from labs/NN_topic/src/*.cc or reference/NN_topic/src/*.cc
#                      plus labs/NN_topic/given/*.cc (code handed to the student: one
#                      copy, compiled into both flavors, never submitted); *.cu from
#                      both folders where CUDA is built (DTL_HAVE_CUDA; the library
#                      then links dtl::cuda and defines DTL_LAB_HAS_CUDA=1). Files in
#                      src/ and given/ include each other's headers by name: the
#                      flavor's src/ and given/ are private include directories.
#   labNN_F_test       every tests/*_test.cc, with the MPI gtest main and the PMPI tracer
#   labNN_F_hidden     grader/hidden/NN_topic/*_test.cc when that folder exists
#   labNN_bench        bench/*_bench.cc against the reference (./dtl bench NN)
#   labNN_student_bench the same against the student library (./dtl bench NN --student,
#                      and the grader's performance items)
# and registers each test binary with ctest once per rank count (dtl_add_mpi_test(),
# DtlMpiTest.cmake), named
# labNN_F_test_npR and labNN_F_hidden_npR (labels: labNN, mpi, F, and hidden
# for the hidden ones). GPU tests go in tests/*_gpu_test.cc: they form their own
# binary labNN_F_gpu, labelled gpu, registered at GPU_RANKS (default 1 2).
# Without reference/ (a repository exported to students) only the student
# flavor is built.
#
# SUPPORTED_RANKS: the rank counts the public tests are written for (their batch
# sizes, stage counts, grids), when not every count works. The test binary then
# refuses any other count at start, naming these, instead of failing as if the
# student's code were wrong (see Note [Rank counts a test program supports] in
# harness/testing/gtest_mpi_main.cc). Without it every count must work.
#
# FLAVORED_LIBS names another lab's library without its flavor: each flavor F
# links <name>_F, so the student build of lab 04 runs the student's own lab-03
# ring and the reference build lab 03's reference. A lab named there (dtl_labNN)
# is configured too when DTL_LABS selects only this one (top-level CMakeLists.txt),
# and the grader copies it into its tree (grader/dtlgrade/lab.py,
# dependency_labs()).
include_guard(GLOBAL)
include(DtlMpiTest)  # dtl_add_mpi_test()

set(DTL_HIDDEN_DIR "${PROJECT_SOURCE_DIR}/grader/hidden" CACHE PATH
    "Where hidden tests live (one folder per lab, NN_topic)")

function(dtl_add_lab)
  cmake_parse_arguments(ARG "" "TIMEOUT" "RANKS;HIDDEN_RANKS;GPU_RANKS;SUPPORTED_RANKS;LIBS;FLAVORED_LIBS" ${ARGN})
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 3 4)
  endif()
  if(NOT ARG_GPU_RANKS)
    set(ARG_GPU_RANKS 1 2)
  endif()
  if(NOT ARG_HIDDEN_RANKS)
    set(ARG_HIDDEN_RANKS ${ARG_RANKS})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  get_filename_component(lab_name ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  string(SUBSTRING ${lab_name} 0 2 num)
  set(lab labNN)
  string(REPLACE "NN" "${num}" lab ${lab})

  file(GLOB student_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cc)
  file(GLOB reference_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/reference/${lab_name}/src/*.cc)
  # given/: code the lab hands the student (not written, not submitted, not
  # generated), compiled into both flavors from one copy. The rule (labs/README.md):
  # src/ holds exactly the files a student edits, each with a TODO(student).
  file(GLOB given_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/given/*.cc)
  # CUDA sources: compiled wherever nvcc is (CI has nvcc and no GPU), left out otherwise.
  set(has_cuda OFF)
  if(DTL_HAVE_CUDA)
    file(GLOB student_cu CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cu)
    file(GLOB reference_cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/reference/${lab_name}/src/*.cu)
    file(GLOB given_cu CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/given/*.cu)
    list(APPEND student_src ${student_cu})
    if(reference_src)
      list(APPEND reference_src ${reference_cu})
    endif()
    list(APPEND given_src ${given_cu})
    if(student_cu OR given_cu)
      set(has_cuda ON)
    endif()
  endif()
  file(GLOB test_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/*_test.cc)
  file(GLOB gpu_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/*_gpu_test.cc)
  if(gpu_src)
    list(REMOVE_ITEM test_src ${gpu_src})
  endif()
  file(GLOB hidden_src CONFIGURE_DEPENDS ${DTL_HIDDEN_DIR}/${lab_name}/*_test.cc)
  file(GLOB bench_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/bench/*_bench.cc)

  list(APPEND student_src ${given_src})
  if(reference_src)
    list(APPEND reference_src ${given_src})
  endif()
  set(flavors student)
  if(reference_src)
    list(APPEND flavors reference)
  endif()
  foreach(flavor IN LISTS flavors)
    set(lib dtl_${lab}_${flavor})
    add_library(${lib} STATIC ${${flavor}_src})
    target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
    if(flavor STREQUAL "student")
      set(flavor_src ${CMAKE_CURRENT_SOURCE_DIR}/src)
    else()
      set(flavor_src ${PROJECT_SOURCE_DIR}/reference/${lab_name}/src)
    endif()
    target_include_directories(${lib} PRIVATE ${flavor_src} ${CMAKE_CURRENT_SOURCE_DIR}/given)
    target_link_libraries(${lib} PUBLIC dtl::harness ${ARG_LIBS})
    foreach(flavored IN LISTS ARG_FLAVORED_LIBS)
      target_link_libraries(${lib} PUBLIC ${flavored}_${flavor})
    endforeach()
    if(has_cuda)
      target_link_libraries(${lib} PUBLIC dtl::cuda)
      target_compile_definitions(${lib} PUBLIC DTL_LAB_HAS_CUDA=1)
    endif()
    if(flavor STREQUAL "student")
      # A skeleton leaves parameters and locals unused until the TODOs are done.
      set(quiet -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unused-function)
      list(JOIN quiet "," quiet_cuda)
      target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${quiet}>
                                            $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${quiet_cuda}>)
    endif()

    set(kinds test)
    if(hidden_src)
      list(APPEND kinds hidden)
    endif()
    if(gpu_src AND DTL_HAVE_CUDA)
      list(APPEND kinds gpu)
    endif()
    foreach(kind IN LISTS kinds)
      set(exe ${lab}_${flavor}_${kind})
      add_executable(${exe} ${${kind}_src})
      target_link_libraries(${exe} PRIVATE ${lib} dtl::gtest_mpi_main)
      if(kind STREQUAL "test" AND ARG_SUPPORTED_RANKS)
        list(JOIN ARG_SUPPORTED_RANKS " " supported)
        set(supported_src ${CMAKE_CURRENT_BINARY_DIR}/${lab}_supported_ranks.cc)
        file(CONFIGURE OUTPUT ${supported_src} CONTENT
             "// Generated by dtl_add_lab(SUPPORTED_RANKS ...): see harness/testing/gtest_mpi_main.cc.\nnamespace dtl::testing {\nextern const char* const kSupportedRanks;\nconst char* const kSupportedRanks = \"@supported@\";\n}  // namespace dtl::testing\n"
             @ONLY)
        target_sources(${exe} PRIVATE ${supported_src})
      endif()
      set(ranks ${ARG_RANKS})
      if(kind STREQUAL "hidden")
        set(ranks ${ARG_HIDDEN_RANKS})
      elseif(kind STREQUAL "gpu")
        set(ranks ${ARG_GPU_RANKS})
        target_link_libraries(${exe} PRIVATE dtl::cuda)
      endif()
      set(labels ${lab} mpi ${flavor})
      if(kind STREQUAL "hidden" OR kind STREQUAL "gpu")
        list(APPEND labels ${kind})
      endif()
      dtl_add_mpi_test(${exe} RANKS ${ranks} LABELS ${labels} TIMEOUT ${ARG_TIMEOUT})
      # The refusal itself, at the first count from 1 to 6 that the tests are not written for.
      if(kind STREQUAL "test" AND ARG_SUPPORTED_RANKS)
        foreach(np RANGE 1 6)
          if(NOT np IN_LIST ARG_SUPPORTED_RANKS)
            dtl_add_mpi_test(${exe} NAME ${exe}_refuses RANKS ${np} LABELS ${lab} mpi ${flavor} TIMEOUT 60
              PASS_REGULAR_EXPRESSION "its tests are written for [0-9, or]+ ranks .*not ${np}[;] run it with -n")  # [;]: a bare ; would split the regex in two
            break()
          endif()
        endforeach()
      endif()
    endforeach()
  endforeach()

  foreach(flavor IN LISTS flavors)
    if(NOT bench_src)
      break()
    endif()
    set(exe ${lab}_${flavor}_bench)
    if(flavor STREQUAL "reference")
      set(exe ${lab}_bench)
    endif()
    # The flavor in a file of its own, not a definition on the target: the benchmark's
    # objects are then the same for both flavors, compiled once (ccache).
    set(flavor_src ${CMAKE_CURRENT_BINARY_DIR}/${exe}_flavor.cc)
    file(CONFIGURE OUTPUT ${flavor_src} CONTENT
         "// Generated by dtl_add_lab(): what this benchmark measures (harness/bench/bench_mpi_main.cc).\nnamespace dtl::bench {\nextern const char* kBenchFlavor;\nconst char* kBenchFlavor = \"@flavor@\";\n}  // namespace dtl::bench\n"
         @ONLY)
    add_executable(${exe} ${bench_src} ${flavor_src})
    target_link_libraries(${exe} PRIVATE dtl_${lab}_${flavor} dtl::bench_mpi_main)
  endforeach()
endfunction()
