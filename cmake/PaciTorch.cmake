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
