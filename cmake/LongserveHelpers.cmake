# Helpers shared by every CMakeLists.txt of the project.

# Warnings are errors on project code only (third-party headers come in as SYSTEM).
function(longserve_target_options target)
  if(LONGSERVE_FUZZ)
    return()
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>)
  # GCC 12 reports -Wrestrict false positives inside libstdc++'s std::string at -O3 (GCC bug
  # 105329); they are not about our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
  # GCC 13 reports -Warray-bounds and -Wstringop-overflow false positives inside fmt 9's float
  # formatting (bigint's std::copy in format_dragon, inlined at -O3 into files that format a
  # double with a precision); fixed upstream in fmt 10, but Debian bookworm ships fmt 9.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-array-bounds -Wno-stringop-overflow>)
  endif()
  if(LONGSERVE_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()

# longserve_library(NAME SOURCES ... DEPS ...): one layer = one static library `ls_NAME`,
# whose public include root is src/ (so headers are included as "core/status.h").
function(longserve_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_SOURCES)  # a layer with no code yet: headers only
    add_library(ls_${name} INTERFACE)
    target_include_directories(ls_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(ls_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(ls_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ls_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ls_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  longserve_target_options(ls_${name})
endfunction()

# One precompiled header for every gtest binary (gtest and the standard headers most tests use):
# each of ~100 test files otherwise parses gtest.h again, about a second per file in every tree
# CI builds. A test target must then have exactly ls_test_pch's compile definitions (clang
# checks); one that adds its own (e.g. the real-server tests' LONGSERVE_BINARY) passes NO_PCH.
# Clang only: GCC 12 loses the system-header status of code inlined from a precompiled header and
# then reports libstdc++'s own -Wstringop-overflow false positives (std::string operator+ at -O3)
# as errors in our files.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  option(LONGSERVE_TEST_PCH "Share one precompiled header among the gtest binaries" ON)
else()
  option(LONGSERVE_TEST_PCH "Share one precompiled header among the gtest binaries" OFF)
endif()
function(longserve_test_pch)
  if(NOT LONGSERVE_TEST_PCH OR TARGET ls_test_pch)
    return()
  endif()
  # An executable like the tests (same -fPIE), so its header is valid for them.
  add_executable(ls_test_pch ${PROJECT_SOURCE_DIR}/tests/common/test_pch.cpp)
  target_link_libraries(ls_test_pch PRIVATE GTest::gtest GTest::gtest_main)
  longserve_target_options(ls_test_pch)
  target_compile_definitions(ls_test_pch PRIVATE LONGSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_precompile_headers(ls_test_pch PRIVATE
    <gtest/gtest.h> <algorithm> <cmath> <cstdint> <cstring> <memory> <optional> <random> <string>
    <string_view> <utility> <vector>)
endfunction()

# longserve_test(NAME SOURCES ... DEPS ... [LABELS ...] [RUN_SERIAL] [NO_PCH]): one gtest binary
# registered with ctest (RUN_SERIAL: its tests run alone, e.g. when they take a whole device's
# memory; NO_PCH: see longserve_test_pch). Tests run with the repository root as working
# directory so fixtures resolve the same everywhere.
function(longserve_test name)
  cmake_parse_arguments(ARG "RUN_SERIAL;NO_PCH" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(LONGSERVE_FUZZ)
    return()
  endif()
  set(serial FALSE)
  if(ARG_RUN_SERIAL)
    set(serial TRUE)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  longserve_target_options(${name})
  target_compile_definitions(${name} PRIVATE LONGSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(LONGSERVE_TEST_PCH AND NOT ARG_NO_PCH)
    longserve_test_pch()
    target_precompile_headers(${name} REUSE_FROM ls_test_pch)
  endif()
  include(GoogleTest)
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${ARG_LABELS}" RUN_SERIAL ${serial} DISCOVERY_TIMEOUT 60)
endfunction()

# longserve_fuzzer(NAME SOURCES ... DEPS ... SEEDS dir [SECONDS n]): a libFuzzer target, built
# only in a fuzz configuration (-DLONGSERVE_FUZZ=ON with clang; see scripts/setup.sh), and run
# briefly by ctest (label "fuzz") from the seed corpus in SEEDS. New inputs go to a scratch
# folder in the build tree, never into the repository.
function(longserve_fuzzer name)
  cmake_parse_arguments(ARG "" "SEEDS;SECONDS" "SOURCES;DEPS" ${ARGN})
  if(NOT LONGSERVE_FUZZ)
    return()
  endif()
  if(NOT ARG_SECONDS)
    set(ARG_SECONDS 15)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set(scratch ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
      sh -c "rm -rf '${scratch}' && mkdir -p '${scratch}' && exec '$<TARGET_FILE:${name}>' -max_total_time=${ARG_SECONDS} -rss_limit_mb=2048 -timeout=10 '${scratch}' '${ARG_SEEDS}'"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()
