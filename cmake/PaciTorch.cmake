# LibTorch, as the target paci::torch. Only worker/ links it.
#
# The LibTorch is the torch package of the project's Python environment
# (scripts/python-env.sh links it as BUILD_DIR/python-env/libtorch): PyTorch 2.11,
# pinned in third_party/python/requirements.txt, the same one the Python tests
# import and the GPU machines run. -DPACI_LIBTORCH=<a torch folder> names
# another (a folder with include/torch and lib/libtorch_cpu.so).
#
# For the CPU (the default) paci::torch is libtorch_cpu and libc10 with their
# headers: find_package(Torch) of the CUDA wheel would ask for a CUDA toolkit.
# libtorch_cpu needs libcudart and libcupti of two nvidia wheels, which its own
# RPATH finds beside it (site-packages/nvidia/cu13/lib); no GPU is needed to run.
# With -DPACI_CUDA=ON it adds libtorch_cuda and libc10_cuda (the wheel's RPATH
# finds its CUDA libraries the same way), and needs no CUDA toolkit.
#
# The wheel carries protobuf 3.13's headers in include/google: paci::torch's
# include folder is a copy of include/ as links, less google/, so that targets
# that compile our .pb.cc or include a .pb.h see Debian's protobuf only.
set(PACI_LIBTORCH "${CMAKE_BINARY_DIR}/python-env/libtorch" CACHE PATH
    "the LibTorch: a torch package folder (default: scripts/python-env.sh's)")
set(PACI_TORCH_MIN_VERSION 2.7)  # the first wheels built with the C++11 ABI

get_filename_component(_paci_torch "${PACI_LIBTORCH}" REALPATH)
set(_paci_torch_version_h "${_paci_torch}/include/torch/csrc/api/include/torch/version.h")
if(NOT EXISTS "${_paci_torch_version_h}" OR NOT EXISTS "${_paci_torch}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "No LibTorch at ${PACI_LIBTORCH} (no include/torch/csrc/api/include/"
                      "torch/version.h or lib/libtorch_cpu.so there): run scripts/python-env.sh "
                      "(scripts/build.sh does), or pass -DPACI_LIBTORCH=<a torch folder>")
endif()

# The version: at least PACI_TORCH_MIN_VERSION.
# (2.10 on: torch/version.h includes torch/headeronly/version.h, which has them.)
set(_paci_torch_defines "")
foreach(header "${_paci_torch_version_h}" "${_paci_torch}/include/torch/headeronly/version.h")
  if(EXISTS "${header}")
    file(STRINGS "${header}" _lines REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
    string(APPEND _paci_torch_defines "${_lines};")
  endif()
endforeach()
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "TORCH_VERSION_${part} ([0-9]+)" _ "${_paci_torch_defines}")
  set(_paci_torch_${part} "${CMAKE_MATCH_1}")
endforeach()
set(PACI_TORCH_VERSION "${_paci_torch_MAJOR}.${_paci_torch_MINOR}.${_paci_torch_PATCH}")
if(PACI_TORCH_VERSION VERSION_LESS PACI_TORCH_MIN_VERSION)
  message(FATAL_ERROR "LibTorch ${PACI_TORCH_VERSION} at ${_paci_torch}: paci needs "
                      "${PACI_TORCH_MIN_VERSION} or newer (scripts/python-env.sh installs the "
                      "pinned one)")
endif()

# The ABI: our C++ libraries (gRPC, Abseil, protobuf) use libstdc++'s C++11
# ABI, so LibTorch must too; its functions on std::string then have cxx11 in
# their mangled names (std::__cxx11::basic_string, the B5cxx11 tag).
execute_process(COMMAND ${CMAKE_NM} -D --defined-only "${_paci_torch}/lib/libc10.so"
                OUTPUT_VARIABLE _paci_c10_symbols RESULT_VARIABLE _paci_nm_result)
if(NOT _paci_nm_result EQUAL 0)
  message(FATAL_ERROR "Cannot read the symbols of ${_paci_torch}/lib/libc10.so (${CMAKE_NM})")
endif()
string(FIND "${_paci_c10_symbols}" "cxx11" _paci_cxx11_at)
if(_paci_cxx11_at EQUAL -1)
  message(FATAL_ERROR "LibTorch ${PACI_TORCH_VERSION} at ${_paci_torch} was built with the old "
                      "libstdc++ ABI (_GLIBCXX_USE_CXX11_ABI=0); paci's other libraries use the "
                      "C++11 ABI: use a LibTorch built with it (PyTorch 2.7 or newer)")
endif()
unset(_paci_c10_symbols)

# include/ less google/ (protobuf 3.13), as links in the build folder.
set(_paci_torch_include "${CMAKE_BINARY_DIR}/torch-include")
file(REMOVE_RECURSE "${_paci_torch_include}")
file(MAKE_DIRECTORY "${_paci_torch_include}")
file(GLOB _paci_torch_entries RELATIVE "${_paci_torch}/include" "${_paci_torch}/include/*")
foreach(entry ${_paci_torch_entries})
  if(NOT entry STREQUAL "google")
    file(CREATE_LINK "${_paci_torch}/include/${entry}" "${_paci_torch_include}/${entry}" SYMBOLIC)
  endif()
endforeach()

add_library(paci_torch INTERFACE)
add_library(paci::torch ALIAS paci_torch)
target_include_directories(paci_torch SYSTEM INTERFACE
  "${_paci_torch_include}" "${_paci_torch_include}/torch/csrc/api/include")
set(_paci_torch_libs torch_cpu c10)
if(PACI_CUDA)
  list(PREPEND _paci_torch_libs torch torch_cuda c10_cuda)
endif()
foreach(lib ${_paci_torch_libs})
  if(NOT EXISTS "${_paci_torch}/lib/lib${lib}.so")
    message(FATAL_ERROR "LibTorch at ${_paci_torch} has no lib/lib${lib}.so (PACI_CUDA needs "
                        "a CUDA LibTorch)")
  endif()
  target_link_libraries(paci_torch INTERFACE "${_paci_torch}/lib/lib${lib}.so")
endforeach()
set(PACI_TORCH_DIR "${_paci_torch}")
message(STATUS "LibTorch ${PACI_TORCH_VERSION}: ${_paci_torch}")

# Compile time. A file that includes LibTorch's headers took 100-170 s to
# compile (RelWithDebInfo, four at once on two cores); two things bring that
# to 30-70 s (docs/contributing.md has the figures):
# - line tables only (-g1) where LibTorch's headers are compiled: full debug
#   information of its templates was 80 % of the objects' size and 40 % of
#   the time; backtraces keep their files and lines.
# - one precompiled <torch/torch.h> (paci_torch_pch) that every target
#   compiling against paci::torch reuses: paci_torch_precompiled_headers(),
#   called once every target exists (the top CMakeLists.txt).
target_compile_options(paci_torch INTERFACE $<$<CONFIG:RelWithDebInfo>:-g1>)
# -pthread (it defines _REENTRANT) wherever LibTorch is compiled, the
# precompiled header's target included: GCC uses a precompiled header only
# where the macros it was made with match.
target_compile_options(paci_torch INTERFACE -pthread)

# Whether TARGET compiles against paci::torch: paci_torch among its own link
# libraries or the usage requirements (INTERFACE_LINK_LIBRARIES, less
# $<LINK_ONLY:...>) of those, transitively.
function(_paci_compiles_torch target out)
  set(seen "")
  set(queue "")
  get_target_property(direct ${target} LINK_LIBRARIES)
  if(direct)
    list(APPEND queue ${direct})
  endif()
  while(queue)
    list(POP_FRONT queue item)
    if(item MATCHES "^\\$<" OR NOT TARGET "${item}")
      continue()
    endif()
    get_target_property(aliased "${item}" ALIASED_TARGET)
    if(aliased)
      set(item "${aliased}")
    endif()
    if(item STREQUAL "paci_torch")
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
    if(item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${item}")
    get_target_property(usage "${item}" INTERFACE_LINK_LIBRARIES)
    if(usage)
      list(APPEND queue ${usage})
    endif()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# The targets of DIR and the folders below it.
function(_paci_targets_below dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _paci_targets_below("${sub}" below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# paci_torch_pch precompiles <torch/torch.h> with the flags of our targets;
# every C++ target of ours that compiles against paci::torch reuses it, but
# one that links it and includes none of its headers (property
# PACI_NO_TORCH_PCH: loading the header would triple its compile time).
# ccache keeps the header itself (0.7 GB, about 100 MB compressed) as well as
# the objects: GCC does not make a precompiled header byte for byte again, and
# ccache hashes it into the key of each object that uses it
# (CCACHE_SLOPPINESS pch_defines,time_macros: the top CMakeLists.txt), so only
# a header restored from the cache lets a new build folder (another clone,
# the image's build stage) hit on those objects (about 5 minutes of two
# cores, and 75 s for the header).
function(paci_torch_precompiled_headers)
  # GCC's only: clang refuses a precompiled header where the command line's
  # macros differ (each test's PACI_SOURCE_DIR), and its sanitizer and fuzzer
  # builds compile few LibTorch files (scripts/sanitize.sh).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR PACI_SANITIZE OR PACI_FUZZ)
    return()
  endif()
  set(source "${CMAKE_BINARY_DIR}/paci_torch_pch.cc")
  file(WRITE "${source}" "// The target that precompiles <torch/torch.h> (cmake/PaciTorch.cmake).\n")
  add_library(paci_torch_pch OBJECT "${source}")
  target_link_libraries(paci_torch_pch PRIVATE paci::torch)
  target_compile_options(paci_torch_pch PRIVATE ${PACI_WARNINGS})
  target_precompile_headers(paci_torch_pch PRIVATE <torch/torch.h>)
  _paci_targets_below("${CMAKE_SOURCE_DIR}" targets)
  set(users 0)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(target STREQUAL "paci_torch_pch" OR type STREQUAL "INTERFACE_LIBRARY" OR
       type STREQUAL "UTILITY")
      continue()
    endif()
    _paci_compiles_torch(${target} compiles)
    get_target_property(opted_out ${target} PACI_NO_TORCH_PCH)
    if(compiles AND NOT opted_out)
      target_precompile_headers(${target} REUSE_FROM paci_torch_pch)
      math(EXPR users "${users} + 1")
    endif()
  endforeach()
  message(STATUS "LibTorch's precompiled header: ${users} targets")
endfunction()
