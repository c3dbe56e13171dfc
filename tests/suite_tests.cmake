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
set(script "# Written by tests/suite_tests.cmake from ${TEST_EXECUTABLE} --gtest_list_tests\n")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([^ ]+)\\.( |$)")
    continue()
  endif()
  set(suite "${CMAKE_MATCH_1}")
  set(properties TIMEOUT 900)
  if(suite MATCHES "^ChaosLongTier")
    list(APPEND properties LABELS chaos RESOURCE_LOCK test_hosts_and_mpirun)
  elseif(suite MATCHES "^(MultiHost|SlurmCluster|Mpi|WorldSizes/MpiSuite)")
    list(APPEND properties RESOURCE_LOCK test_hosts_and_mpirun COST 1000)
  elseif(suite MATCHES "LongTier")
    list(APPEND properties COST 100)
  endif()
  string(APPEND script "add_test([=[${suite}]=] \"${TEST_EXECUTABLE}\" [=[--gtest_filter=${suite}.*]=])\n")
  string(APPEND script "set_tests_properties([=[${suite}]=] PROPERTIES ${properties})\n")
endforeach()
file(WRITE "${OUTPUT}" "${script}")
