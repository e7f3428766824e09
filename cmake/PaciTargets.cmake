# One line per target, every target with the project's warnings, in the spirit
# of abseil's absl_cc_library.
#
#   paci_cc_library(NAME server_job_store SRCS job_store.cc
#                   DEPS paci::proto ... PRIVATE_DEPS SQLite::SQLite3 ...)
# builds paci_server_job_store with the alias paci::server_job_store; DEPS are
# what its headers need (PUBLIC), PRIVATE_DEPS what only its sources need.
#
#   paci_cc_binary(NAME paci_coordinator SRCS coordinator_main.cc DEPS ...)
#
#   paci_cc_test(NAME server_job_store_test SRCS job_store_test.cc DEPS ...
#                [ONE_PROCESS] [TIMEOUT seconds])
# links GoogleTest and GoogleMock, defines PACI_SOURCE_DIR (for test data) and
# registers every case with ctest; ONE_PROCESS runs all cases in one process
# instead (a process linked to LibTorch takes about a second to start). In a
# RelWithDebInfo build a test's own sources compile at -O1 (what it links of
# paci stays at -O2): about half the compile time of a GoogleTest file, a
# fifth of one using LibTorch (-O1 still reads LibTorch's precompiled header,
# -O0 would not), and a third of the whole build's compiling is tests.
#
# Every target's debug information in a RelWithDebInfo build is line tables
# only (PACI_DEBUG_INFO, -g1): backtraces, sanitizer reports and profilers keep
# their functions, files and lines; what goes is the description of every type
# and local variable, most of it gRPC's, protobuf's and abseil's templates. For
# the 101 files without LibTorch that was a fifth of their compile time (248 to
# 196 s, one at a time) and four fifths of their objects (228 to 48 MB). It is
# the project's default, so the images' build stage shares ccache's hits.

set(PACI_WARNINGS -Wall -Wextra -Wno-unused-parameter)
# clang checks the lock annotations GCC ignores (ABSL_GUARDED_BY, ...), and a
# finding is an error: the sanitizer build (scripts/sanitize.sh) is clang's and
# compiles every file that does not use LibTorch; tests/static checks the rest.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND PACI_WARNINGS -Wthread-safety -Werror=thread-safety)
endif()
set(PACI_DEBUG_INFO "$<$<CONFIG:RelWithDebInfo>:-g1>")
set(PACI_COMPILE_OPTIONS ${PACI_WARNINGS} ${PACI_DEBUG_INFO})

function(paci_cc_library)
  cmake_parse_arguments(PACI "" "NAME" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(paci_${PACI_NAME} ${PACI_SRCS})
  add_library(paci::${PACI_NAME} ALIAS paci_${PACI_NAME})
  target_link_libraries(paci_${PACI_NAME} PUBLIC ${PACI_DEPS} PRIVATE ${PACI_PRIVATE_DEPS})
  target_compile_options(paci_${PACI_NAME} PRIVATE ${PACI_COMPILE_OPTIONS})
endfunction()

function(paci_cc_binary)
  cmake_parse_arguments(PACI "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${PACI_NAME} ${PACI_SRCS})
  target_link_libraries(${PACI_NAME} PRIVATE ${PACI_DEPS})
  target_compile_options(${PACI_NAME} PRIVATE ${PACI_COMPILE_OPTIONS})
endfunction()

function(paci_cc_test)
  cmake_parse_arguments(PACI "ONE_PROCESS" "NAME;TIMEOUT" "SRCS;DEPS" ${ARGN})
  add_executable(${PACI_NAME} ${PACI_SRCS})
  target_link_libraries(${PACI_NAME} PRIVATE ${PACI_DEPS} GTest::gmock GTest::gtest_main)
  target_compile_options(${PACI_NAME} PRIVATE ${PACI_COMPILE_OPTIONS}
                         "$<$<CONFIG:RelWithDebInfo>:-O1>")
  target_compile_definitions(${PACI_NAME} PRIVATE PACI_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  set(properties)
  if(PACI_TIMEOUT)
    set(properties TIMEOUT ${PACI_TIMEOUT})
  endif()
  if(PACI_ONE_PROCESS)
    add_test(NAME ${PACI_NAME} COMMAND ${PACI_NAME})
    if(properties)
      set_tests_properties(${PACI_NAME} PROPERTIES ${properties})
    endif()
  elseif(properties)
    gtest_discover_tests(${PACI_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES ${properties})
  else()
    gtest_discover_tests(${PACI_NAME} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
