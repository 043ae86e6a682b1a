# Imports LibTorch from a torch installation as target `torch`, the way
# torch.utils.cpp_extension does: <torch>/include and <torch>/lib of the
# package that `import torch` finds in TANDEM_PYTHON (or Python3_EXECUTABLE),
# or of TANDEM_TORCH_DIR.
#
# Not through torch's own CMake config: for a CUDA build of torch (every
# PyPI wheel) that config enables the CUDA language and looks for a CUDA
# toolkit even for CPU code, so a machine without nvcc cannot configure;
# where a toolkit exists it links that toolkit's cudart and NCCL rather than
# the wheel's; and it turns protobuf::libprotobuf into an empty placeholder.
# Device code enables CUDA itself, against the wheel's own libraries.
#
# Sets Torch_VERSION, TORCH_INSTALL_PREFIX and TANDEM_TORCH_CUDA (the CUDA
# version torch was built with, or empty). Included by Tandem's build and by
# its installed package config.
if(TARGET torch)
  return()
endif()

if(NOT TANDEM_TORCH_DIR)
  if(NOT TANDEM_PYTHON)
    if(NOT Python3_EXECUTABLE)
      find_package(Python3 COMPONENTS Interpreter REQUIRED)
    endif()
    set(TANDEM_PYTHON ${Python3_EXECUTABLE})
  endif()
  # Under pip's build isolation PYTHONPATH hides the environment's own
  # packages, torch among them; the probe looks at the environment itself.
  set(tandem_probe_env "")
  if("$ENV{PYTHONPATH}" MATCHES "pip-build-env")
    set(tandem_probe_env ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE)
  endif()
  execute_process(
    COMMAND ${tandem_probe_env} ${TANDEM_PYTHON} -c
            "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__.split('+')[0]); print(torch.version.cuda or ''); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    OUTPUT_VARIABLE tandem_torch_probe OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE tandem_torch_found
    ERROR_VARIABLE tandem_torch_error)
  if(NOT tandem_torch_found EQUAL 0)
    message(FATAL_ERROR "${TANDEM_PYTHON} cannot import torch (${tandem_torch_error}). Tandem builds against the "
                        "LibTorch of the torch in that environment: install it there first (pip install torch), or set TANDEM_PYTHON to a Python "
                        "that has it (scripts/setup.sh makes .venv).")
  endif()
  string(REPLACE "\n" ";" tandem_torch_probe "${tandem_torch_probe}")
  list(GET tandem_torch_probe 0 TANDEM_TORCH_DIR)
  list(GET tandem_torch_probe 1 Torch_VERSION)
  list(GET tandem_torch_probe 2 TANDEM_TORCH_CUDA)
  list(GET tandem_torch_probe 3 tandem_torch_abi)
else()
  # torch 2.x writes its version as three numbers, in headeronly/ (2.9 on)
  # or in the C++ frontend's include directory.
  set(tandem_version_header ${TANDEM_TORCH_DIR}/include/torch/headeronly/version.h)
  if(NOT EXISTS ${tandem_version_header})
    set(tandem_version_header ${TANDEM_TORCH_DIR}/include/torch/csrc/api/include/torch/version.h)
  endif()
  if(NOT EXISTS ${tandem_version_header})
    message(FATAL_ERROR "TANDEM_TORCH_DIR=${TANDEM_TORCH_DIR} holds no torch/version.h: point it at a torch package's directory")
  endif()
  set(Torch_VERSION "")
  foreach(part MAJOR MINOR PATCH)
    file(STRINGS ${tandem_version_header} tandem_line REGEX "define TORCH_VERSION_${part} ")
    string(REGEX REPLACE ".* ([0-9]+).*" "\\1" tandem_number "${tandem_line}")
    list(APPEND Torch_VERSION ${tandem_number})
  endforeach()
  list(JOIN Torch_VERSION "." Torch_VERSION)
  set(TANDEM_TORCH_CUDA "")
  if(EXISTS ${TANDEM_TORCH_DIR}/lib/libtorch_cuda.so)
    set(TANDEM_TORCH_CUDA "unknown")
  endif()
  set(tandem_torch_abi 1)
  # The installed package's own torch: what the build probed is remembered.
  if(DEFINED TANDEM_BUILT_TORCH_DIR AND TANDEM_TORCH_DIR STREQUAL TANDEM_BUILT_TORCH_DIR)
    set(TANDEM_TORCH_CUDA "${TANDEM_BUILT_TORCH_CUDA}")
    set(tandem_torch_abi ${TANDEM_BUILT_TORCH_ABI})
  endif()
endif()
set(TORCH_INSTALL_PREFIX ${TANDEM_TORCH_DIR})
# The oldest torch Tandem means to build against: the GPU machines' image
# (2.11). Only 2.15.0 is tested.
if(Torch_VERSION VERSION_LESS 2.11)
  message(FATAL_ERROR "torch ${Torch_VERSION} at ${TANDEM_TORCH_DIR} is too old: Tandem needs torch 2.11 or newer "
                      "(pip install --upgrade torch)")
endif()

set(tandem_torch_lib ${TANDEM_TORCH_DIR}/lib)
add_library(torch INTERFACE IMPORTED)
target_include_directories(torch SYSTEM INTERFACE ${TANDEM_TORCH_DIR}/include
                                                  ${TANDEM_TORCH_DIR}/include/torch/csrc/api/include)
# What torch's own targets declare for their users (torch_cpu, torch_cuda):
# the headers of the distributed package differ without them.
target_compile_definitions(torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${tandem_torch_abi} USE_DISTRIBUTED USE_C10D_GLOO
                                           USE_RPC USE_TENSORPIPE)
# The CPU half only. libtorch.so and libtorch_cuda.so (which pulls in every
# CUDA library of the wheel) are loaded at run time where a GPU driver is
# (src/train/cuda_library.hpp): linked in, they cost each process about
# 0.8 s and 370 MB on a machine without a GPU.
set(tandem_torch_libs -Wl,--no-as-needed ${tandem_torch_lib}/libtorch_cpu.so -Wl,--as-needed
                      ${tandem_torch_lib}/libc10.so)
if(EXISTS ${tandem_torch_lib}/libtorch_cuda.so)
  target_compile_definitions(torch INTERFACE USE_C10D_NCCL)  # as torch_cuda declares it
endif()
target_link_libraries(torch INTERFACE ${tandem_torch_libs})

# at::parallel_for is a template: its "#pragma omp parallel" is compiled in
# our own sources, and without -fopenmp it silently runs on one thread
# (Tandem's fused optimizer step did, on 2.15). Torch's CMake config adds
# the flag; importing the wheel by hand, we add it, and bind the OpenMP
# calls to the libgomp the wheel carries (the one libtorch_cpu loads), so a
# process holds one OpenMP runtime.
file(STRINGS ${TANDEM_TORCH_DIR}/include/ATen/Config.h tandem_torch_openmp REGEX "define AT_PARALLEL_OPENMP 1")
if(tandem_torch_openmp)
  file(GLOB tandem_torch_gomp ${tandem_torch_lib}/libgomp*.so*)
  if(NOT tandem_torch_gomp)
    message(FATAL_ERROR "torch at ${TANDEM_TORCH_DIR} parallelises with OpenMP but carries no libgomp in ${tandem_torch_lib}")
  endif()
  list(GET tandem_torch_gomp 0 tandem_torch_gomp)
  target_compile_options(torch INTERFACE -fopenmp)
  target_link_libraries(torch INTERFACE ${tandem_torch_gomp})
endif()

# The wheel finds its CUDA libraries (NCCL, cuDNN, cuBLAS, ...) at run time
# through its RPATH, $ORIGIN/../../nvidia/*/lib. The linker does not expand
# $ORIGIN, and took the CUDA toolkit's older libnccl from /usr/lib instead
# (11 undefined symbols): point it at the wheel's own.
file(GLOB tandem_wheel_lib_dirs LIST_DIRECTORIES true "${TANDEM_TORCH_DIR}/../nvidia/*/lib")
foreach(dir IN LISTS tandem_wheel_lib_dirs)
  get_filename_component(dir "${dir}" REALPATH)
  target_link_options(torch INTERFACE "LINKER:-rpath-link,${dir}")
endforeach()
message(STATUS "LibTorch ${Torch_VERSION} at ${TANDEM_TORCH_DIR} (CUDA build: ${TANDEM_TORCH_CUDA})")
