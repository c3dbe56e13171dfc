# OpenBLAS, OpenMP variant (Debian's libopenblas-openmp-dev). We link this variant on purpose: its
# threads are the same libgomp team as our own parallel_for, so one pool of --threads workers serves
# both and the two never fight over the cores (the pthread variant spins its own threads; see
# shared/BENCHMARKING.md for what that costs PyTorch).
# Cache variables, so a machine that keeps it elsewhere (a prefix unpacked from .debs, as on the lent
# GPU machines) can point at it: -DTESSERA_OPENBLAS_LIB=... -DTESSERA_OPENBLAS_INCLUDE=...
set(TESSERA_OPENBLAS_LIB /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so CACHE FILEPATH
    "OpenBLAS, OpenMP variant: the library")
set(TESSERA_OPENBLAS_INCLUDE /usr/include/x86_64-linux-gnu/openblas-openmp CACHE PATH
    "OpenBLAS, OpenMP variant: the directory holding cblas.h")
set(_ob_lib ${TESSERA_OPENBLAS_LIB})
set(_ob_inc ${TESSERA_OPENBLAS_INCLUDE})
if(NOT EXISTS ${_ob_lib} OR NOT EXISTS ${_ob_inc}/cblas.h)
  message(FATAL_ERROR "OpenBLAS (OpenMP variant) not found: apt-get install libopenblas-openmp-dev")
endif()
add_library(tessera_openblas INTERFACE)
target_include_directories(tessera_openblas SYSTEM INTERFACE ${_ob_inc})
target_link_libraries(tessera_openblas INTERFACE ${_ob_lib})

# oneDNN (Debian's libdnnl-dev) for convolutions; see tessera/backend/cpu/onednn_conv.h for why.
find_package(dnnl CONFIG REQUIRED)

# nlohmann-json: safetensors headers, metrics lines. zlib: gzipped IDX files and checksums.
# toml++: training configs.
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
# libpng (Debian's libpng-dev): the image-folder dataset's PNG decoder (data/image_folder.h).
find_package(PNG REQUIRED)
find_package(tomlplusplus REQUIRED)
# cpp-httplib (Debian's libcpp-httplib-dev, a compiled library there): tessera serve's HTTP server
# (serve/http_server.h says why this one).
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# Gloo (Debian's libgloo-dev): the `gloo` backend's collectives over its TCP transport.
find_package(Gloo CONFIG REQUIRED)

# Open MPI (Debian's libopenmpi-dev): the `mpi` backend. Optional, as MLX does it: without MPI the
# backend compiles as tessera/dist/backends/mpi/no_mpi.cpp, which says how to get it.
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only; the C++ bindings are deprecated
find_package(MPI COMPONENTS CXX QUIET)
