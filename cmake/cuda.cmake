# TESSERA_CUDA = AUTO | ON | OFF: whether the CUDA backend (tessera/backend/cuda/) is built.
#   AUTO  builds it where nvcc, the CUDA runtime, cuBLASLt, cuDNN and NCCL are all found, and says in one
#         configure line which it found or what it lacked;
#   ON    requires them (a configure error names what is missing);
#   OFF   gives the CPU-only build: tessera/backend/cuda/no_cuda.cpp stands in for the backend, and no
#         CUDA header or library reaches any target.
# Defines TESSERA_CUDA_ENABLED and, when it is ON, the target tessera_cuda. Its code is compiled for
# CMAKE_CUDA_ARCHITECTURES, 90 (H100/H200) unless set. The CUDA runtime is linked statically (one
# library fewer to find on a GPU machine); cuBLASLt, cuDNN and NCCL dynamically, so that a GPU machine
# uses its own copies (scripts/gpu_check.sh finds them).
set(TESSERA_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (where the toolkit is found), ON or OFF")
set_property(CACHE TESSERA_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${TESSERA_CUDA}" _tessera_cuda_mode)
if(NOT _tessera_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TESSERA_CUDA must be AUTO, ON or OFF, not '${TESSERA_CUDA}'")
endif()

set(TESSERA_CUDA_ENABLED OFF)
set(_tessera_cuda_missing "")
if(_tessera_cuda_mode STREQUAL "OFF")
  set(TESSERA_NO_CUDA_REASON "TESSERA_CUDA=OFF")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _tessera_cuda_missing "nvcc")
  else()
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart_static)
      list(APPEND _tessera_cuda_missing "the CUDA runtime")
    endif()
    if(NOT TARGET CUDA::cublasLt)
      list(APPEND _tessera_cuda_missing "cuBLASLt")
    endif()
    find_path(TESSERA_CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TESSERA_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NOT TESSERA_CUDNN_INCLUDE_DIR OR NOT TESSERA_CUDNN_LIBRARY)
      list(APPEND _tessera_cuda_missing "cuDNN")
    endif()
    find_path(TESSERA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TESSERA_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NOT TESSERA_NCCL_INCLUDE_DIR OR NOT TESSERA_NCCL_LIBRARY)
      list(APPEND _tessera_cuda_missing "NCCL")
    endif()
  endif()
  if(_tessera_cuda_missing)
    string(REPLACE ";" ", " _tessera_cuda_missing "${_tessera_cuda_missing}")
    if(_tessera_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "TESSERA_CUDA=ON but not found: ${_tessera_cuda_missing} (install the CUDA toolkit with cuDNN "
                          "and NCCL, or configure with -DTESSERA_CUDA=AUTO or OFF)")
    endif()
    set(TESSERA_NO_CUDA_REASON "TESSERA_CUDA=AUTO found no ${_tessera_cuda_missing}")
  else()
    set(TESSERA_CUDA_ENABLED ON)
  endif()
endif()

if(NOT TESSERA_CUDA_ENABLED)
  message(STATUS "tessera: CUDA off (${TESSERA_NO_CUDA_REASON}): CPU-only build")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
if(CCACHE_PROGRAM AND TESSERA_CCACHE AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
enable_language(CUDA)
file(STRINGS "${TESSERA_CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_lines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1.\\2.\\3"
       _cudnn_version "${_cudnn_lines}")
file(STRINGS "${TESSERA_NCCL_INCLUDE_DIR}/nccl.h" _nccl_lines REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3" _nccl_version
       "${_nccl_lines}")
message(STATUS "tessera: CUDA on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_${CMAKE_CUDA_ARCHITECTURES}, cuBLASLt "
               "${CUDAToolkit_VERSION}, cuDNN ${_cudnn_version}, NCCL ${_nccl_version})")

file(GLOB TESSERA_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tessera/backend/cuda/*.cpp
     ${PROJECT_SOURCE_DIR}/tessera/backend/cuda/*.cu)
list(FILTER TESSERA_CUDA_SOURCES EXCLUDE REGEX "/(no_cuda|cuda_kernels)\\.cpp$")
add_library(tessera_cuda STATIC ${TESSERA_CUDA_SOURCES})
# Few files, and CUDA's headers differ between them: file by file. Position-independent: the Python
# module links it into a shared object.
set_target_properties(tessera_cuda PROPERTIES UNITY_BUILD OFF POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 17)
# Device code is C++17: CMake 3.25 knows no CUDA20 dialect for nvcc. So the .cu files include only
# headers that are C++17 (the backend's own and core/error.h). The host compiler warns as for C++.
target_compile_options(tessera_cuda PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>")
target_include_directories(tessera_cuda PRIVATE ${PROJECT_SOURCE_DIR} ${TESSERA_CUDNN_INCLUDE_DIR} ${TESSERA_NCCL_INCLUDE_DIR})
target_link_libraries(tessera_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt ${TESSERA_CUDNN_LIBRARY}
                      ${TESSERA_NCCL_LIBRARY})
