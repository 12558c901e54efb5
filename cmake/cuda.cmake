# ATTN_CUDA=AUTO enables the CUDA language when nvcc is found; ON requires it; OFF skips it.
# Sets ATTN_HAVE_CUDA for the folders that hold CUDA implementations.
set(ATTN_HAVE_CUDA OFF)
if(NOT ATTN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    # The toolkit's standard place, for shells whose PATH lacks it.
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90 machine code plus compute_90 PTX, which newer devices JIT-compile.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # C++17 for device code: CMake 3.25.1 (Debian 12) knows no C++20 flag for nvcc and fails to
    # generate any target with .cu sources under CMAKE_CUDA_STANDARD 20.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(ATTN_HAVE_CUDA ON)
  elseif(ATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTN_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  endif()
endif()
