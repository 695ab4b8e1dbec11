# kiln_library(NAME [MODULE DIR] SOURCES ... DEPS ...): one static library per module, named
# kiln_<NAME>, built from src/kiln/<DIR> (DIR defaults to NAME; a room of a module is a DIR
# like train/step). A module links only the
# modules DESIGN.md places above it, and it sees only those: its include path is a folder of
# links, <build>/include_views/<NAME>/kiln/<module> -> src/kiln/<module>, for its own module
# and every module it links (directly or through them). An include of any other module fails
# to compile ("No such file"), not only to link (tests/layering checks that it does).
function(kiln_library name)
  cmake_parse_arguments(ARG "" "MODULE" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_MODULE)
    set(ARG_MODULE ${name})
  endif()
  add_library(kiln_${name} STATIC ${ARG_SOURCES})
  # Libraries are defined in dependency order (src/kiln/CMakeLists.txt), so each dependency
  # already carries the modules it sees.
  set(modules ${ARG_MODULE})
  foreach(dep IN LISTS ARG_DEPS)
    if(NOT dep MATCHES "^kiln_")
      continue()  # a package (fmt, MPI, ...)
    endif()
    if(NOT TARGET ${dep})
      message(FATAL_ERROR "kiln_${name} links ${dep}, which is defined after it: define modules in dependency order")
    endif()
    get_target_property(dep_modules ${dep} KILN_MODULES)
    list(APPEND modules ${dep_modules})
  endforeach()
  list(REMOVE_DUPLICATES modules)
  set_target_properties(kiln_${name} PROPERTIES KILN_MODULES "${modules}")
  set(view ${CMAKE_BINARY_DIR}/include_views/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/kiln)
  # A room of a module (train/step) is a module of its own: linked alone when its parent is
  # not in the view, covered by the parent's link when it is.
  foreach(module IN LISTS modules)
    set(covered FALSE)
    set(parent ${module})
    while(parent MATCHES "/")
      get_filename_component(parent ${parent} DIRECTORY)
      if(parent IN_LIST modules)
        set(covered TRUE)
      endif()
    endwhile()
    if(covered)
      continue()
    endif()
    get_filename_component(parent_dir ${view}/kiln/${module} DIRECTORY)
    file(MAKE_DIRECTORY ${parent_dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/kiln/${module} ${view}/kiln/${module} SYMBOLIC)
  endforeach()
  target_include_directories(kiln_${name} PUBLIC ${view})
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
