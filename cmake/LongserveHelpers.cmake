# Helpers shared by every CMakeLists.txt of the project.

# Warnings are errors on project code only (third-party headers come in as SYSTEM).
function(longserve_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>)
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

# longserve_test(NAME SOURCES ... DEPS ... [LABELS ...]): one gtest binary registered with ctest.
# Tests run with the repository root as working directory so fixtures resolve the same everywhere.
function(longserve_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  longserve_target_options(${name})
  target_compile_definitions(${name} PRIVATE LONGSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
