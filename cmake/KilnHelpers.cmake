# kiln_library(NAME SOURCES ... DEPS ...): one static library per module, named kiln_<NAME>.
# A module links only the modules DESIGN.md places above it, so a wrong include fails to link.
function(kiln_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(kiln_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kiln_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kiln_${name} PUBLIC ${ARG_DEPS})
endfunction()

# kiln_test(NAME SOURCES ... DEPS ...): one GoogleTest binary, each test case registered with CTest.
function(kiln_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE KILN_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KILN_TEST_TOKENIZER_DIR="${KILN_TEST_TOKENIZER_DIR}" KILN_VENV_PYTHON="${KILN_VENV_PYTHON}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "KILN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
