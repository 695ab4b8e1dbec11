# kiln_library(NAME [MODULE DIR] [SHALLOW] SOURCES ... DEPS ... [PRIVATE_DEPS ...]): one static
# library per module, named kiln_<NAME>, built from src/kiln/<DIR> (DIR defaults to NAME; a
# room of a module is a DIR like train/step). A module links only the modules DESIGN.md places
# above it, and it sees only those: its include path is a folder of links,
# <build>/include_views/<NAME>/kiln/<module> -> src/kiln/<module>, for its own module and every
# module it links (directly or through them). An include of any other module fails to compile
# ("No such file"), not only to link (tests/layering checks that it does).
#
# SHALLOW: the module's own top-level files are its interface and each of its subdirectories
# is a room with a library of its own (backend/ and backend/cpu, backend/interpreter,
# backend/pjrt). Every view of the module then links those files one by one, and a room
# appears beside them only in the views of libraries that link the room's library.
#
# PRIVATE_DEPS: linked and seen by this library alone. Its dependents link them too (a static
# library cannot carry its dependencies) but neither see them nor get their include paths:
# the backend name table links every backend, and its users see the interface only.

# The modules `deps` show their dependents (KILN_MODULES), for kiln_<name>.
function(kiln_modules_of name deps out)
  set(modules)
  foreach(dep IN LISTS deps)
    if(NOT dep MATCHES "^kiln_")
      continue()  # a package (fmt, MPI, ...)
    endif()
    if(NOT TARGET ${dep})
      message(FATAL_ERROR "kiln_${name} links ${dep}, which is defined after it: define modules in dependency order")
    endif()
    get_target_property(dep_modules ${dep} KILN_MODULES)
    list(APPEND modules ${dep_modules})
  endforeach()
  set(${out} ${modules} PARENT_SCOPE)
endfunction()

# Makes the folder of links `view` for `modules` (see kiln_library).
function(kiln_include_view view modules)
  get_property(shallow_modules GLOBAL PROPERTY KILN_SHALLOW_MODULES)
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/kiln)
  foreach(module IN LISTS modules)
    # A room is covered by its parent's link when the parent is in the view whole (not
    # SHALLOW); else it is linked alone, beside a SHALLOW parent's files.
    set(covered FALSE)
    set(parent ${module})
    while(parent MATCHES "/")
      get_filename_component(parent ${parent} DIRECTORY)
      if(parent IN_LIST modules AND NOT parent IN_LIST shallow_modules)
        set(covered TRUE)
      endif()
    endwhile()
    if(covered)
      continue()
    endif()
    if(module IN_LIST shallow_modules)
      # The top-level files only. CONFIGURE_DEPENDS: a file added or removed there re-runs
      # CMake at the next build, so the view follows the tree.
      file(GLOB files LIST_DIRECTORIES false CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kiln/${module}/*)
      file(MAKE_DIRECTORY ${view}/kiln/${module})
      foreach(file IN LISTS files)
        get_filename_component(file_name ${file} NAME)
        file(CREATE_LINK ${file} ${view}/kiln/${module}/${file_name} SYMBOLIC)
      endforeach()
    else()
      get_filename_component(parent_dir ${view}/kiln/${module} DIRECTORY)
      file(MAKE_DIRECTORY ${parent_dir})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/kiln/${module} ${view}/kiln/${module} SYMBOLIC)
    endif()
  endforeach()
endfunction()

function(kiln_library name)
  cmake_parse_arguments(ARG "SHALLOW" "MODULE" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_MODULE)
    set(ARG_MODULE ${name})
  endif()
  if(ARG_SHALLOW)
    set_property(GLOBAL APPEND PROPERTY KILN_SHALLOW_MODULES ${ARG_MODULE})
  endif()
  add_library(kiln_${name} STATIC ${ARG_SOURCES})
  # Libraries are defined in dependency order (src/kiln/CMakeLists.txt), so each dependency
  # already carries the modules it shows its dependents.
  kiln_modules_of(${name} "${ARG_DEPS}" public_modules)
  kiln_modules_of(${name} "${ARG_PRIVATE_DEPS}" private_modules)
  set(modules ${ARG_MODULE} ${public_modules})
  list(REMOVE_DUPLICATES modules)
  set_target_properties(kiln_${name} PROPERTIES KILN_MODULES "${modules}")
  set(view ${CMAKE_BINARY_DIR}/include_views/${name})
  if(ARG_PRIVATE_DEPS)
    # Its own view adds the private modules; its dependents get a view without them.
    set(own_modules ${modules} ${private_modules})
    list(REMOVE_DUPLICATES own_modules)
    kiln_include_view(${view} "${own_modules}")
    kiln_include_view(${CMAKE_BINARY_DIR}/include_views/${name}.public "${modules}")
    target_include_directories(kiln_${name} PRIVATE ${view}
                               INTERFACE ${CMAKE_BINARY_DIR}/include_views/${name}.public)
  else()
    kiln_include_view(${view} "${modules}")
    target_include_directories(kiln_${name} PUBLIC ${view})
  endif()
  target_link_libraries(kiln_${name} PUBLIC ${ARG_DEPS})
  if(ARG_PRIVATE_DEPS)
    target_link_libraries(kiln_${name} PRIVATE ${ARG_PRIVATE_DEPS})
  endif()
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
