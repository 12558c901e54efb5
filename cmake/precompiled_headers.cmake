# Precompiled headers: the large third-party headers most files of a target include (fmt,
# nlohmann/json, CLI11, GoogleTest) are parsed once per target instead of once per file. A build
# from scratch (CI builds two) spends about a third of its compile time parsing them. Left out
# under a compiler launcher: ccache caches nothing compiled through a precompiled header unless
# told to be sloppy about it, and a cached build gains nothing from one. C++ files only (not the
# C plugins, not nvcc's .cu files).
function(attn_precompile_headers target)
  if(CMAKE_CXX_COMPILER_LAUNCHER)
    return()
  endif()
  set(headers)
  foreach(header IN LISTS ARGN)
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

# A target of one file gains nothing from a header of its own: it reuses another's (same flags).
function(attn_reuse_precompiled_headers target from)
  if(NOT CMAKE_CXX_COMPILER_LAUNCHER)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()
