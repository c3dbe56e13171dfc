# Registers one ctest test per GoogleTest suite of TEST_EXECUTABLE (run after each build of it), for
# the AddressSanitizer pass: there a process costs about 0.25 s to start and to check for leaks at
# exit, times 1,200 tests. Suites carry the properties tests/CMakeLists.txt gives their tests.
#   cmake -DTEST_EXECUTABLE=... -DOUTPUT=... -P suite_tests.cmake
execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE status
                TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${status}):\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
# The suites in order, and how many tests each holds: with no timings yet (a fresh clone) ctest
# starts tests by COST, so the suites with most tests start first instead of last.
set(suites "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ]+)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(count_${suite} 0)
  elseif(line MATCHES "^  [^ ]")
    math(EXPR count_${suite} "${count_${suite}} + 1")
  endif()
endforeach()
set(script "# Written by tests/suite_tests.cmake from ${TEST_EXECUTABLE} --gtest_list_tests\n")
foreach(suite IN LISTS suites)
  set(properties TIMEOUT 900)
  if(suite MATCHES "^ChaosLongTier")
    list(APPEND properties LABELS chaos RESOURCE_LOCK test_hosts_and_mpirun)
  elseif(suite MATCHES "(^|/)Cuda")
    list(APPEND properties LABELS gpu SKIP_REGULAR_EXPRESSION "[=[\\[  SKIPPED \\]]=]")
  elseif(suite MATCHES "^(MultiHost|SlurmCluster|Mpi|WorldSizes/MpiSuite)")
    list(APPEND properties RESOURCE_LOCK test_hosts_and_mpirun COST 1000)
  elseif(suite MATCHES "LongTier")
    list(APPEND properties COST 100)
  else()
    list(APPEND properties COST ${count_${suite}})
  endif()
  string(APPEND script "add_test([=[${suite}]=] \"${TEST_EXECUTABLE}\" [=[--gtest_filter=${suite}.*]=])\n")
  list(JOIN properties " " properties)  # spaces, so that a bracket argument stays one argument
  string(APPEND script "set_tests_properties([=[${suite}]=] PROPERTIES ${properties})\n")
endforeach()
file(WRITE "${OUTPUT}" "${script}")
