# Run at build time (tests/CMakeLists.txt, tandem_layer_tests SUITES):
# lists BINARY's tests and writes OUT, a CTest file with one test per
# GoogleTest suite, named after it and run with --gtest_filter=Suite.*.
#   cmake -D BINARY=... -D OUT=... -D LABEL=... -D TIMEOUT=... -P discover_suites.cmake
execute_process(COMMAND "${BINARY}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${status}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  # A suite's line is unindented: "Suite." or "Prefix/Suite.  # TypeParam = T".
  if(line MATCHES "^([^ #]+)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content "add_test([=[${suite}]=] [=[${BINARY}]=] [=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
           "set_tests_properties([=[${suite}]=] PROPERTIES LABELS ${LABEL} TIMEOUT ${TIMEOUT})\n")
  endif()
endforeach()
file(WRITE "${OUT}" "${content}")
