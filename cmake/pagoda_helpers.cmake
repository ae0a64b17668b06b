# pagoda_module(NAME DEPS ...): one static library per folder under src/.
# Sources are every *.cc in src/NAME (recursively, except */cuda/*), tests are the
# *_test.cc files beside them, gathered into one executable per module.
function(pagoda_module name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE all CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cc)
  set(srcs "")
  set(tests "")
  foreach(f ${all})
    if(f MATCHES "_test\\.cc$")
      list(APPEND tests ${f})
    elseif(NOT f MATCHES "/cuda/")
      list(APPEND srcs ${f})
    endif()
  endforeach()
  add_library(pagoda_${name} STATIC ${srcs})
  target_include_directories(pagoda_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(pagoda_${name} PUBLIC ${ARG_DEPS})
  target_compile_definitions(pagoda_${name} PUBLIC PAGODA_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  if(PAGODA_BUILD_TESTS AND tests)
    set(label unit)
    if(name STREQUAL "kernels")
      set(label kernel)
    endif()
    pagoda_test(${name} SOURCES ${tests} DEPS pagoda_${name} LABELS ${label})
  endif()
endfunction()

# pagoda_test(NAME SOURCES ... DEPS ... LABELS ...): a GoogleTest executable whose
# tests are registered one by one with ctest, carrying the given labels.
function(pagoda_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(pagoda_${name}_tests ${ARG_SOURCES})
  target_link_libraries(pagoda_${name}_tests PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(pagoda_${name}_tests PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR})
  gtest_discover_tests(pagoda_${name}_tests
    PROPERTIES LABELS "${ARG_LABELS}"
    DISCOVERY_TIMEOUT 60)
endfunction()
