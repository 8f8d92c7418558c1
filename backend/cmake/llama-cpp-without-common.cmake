# Included by CMake at the end of every `project()` call while cargo builds llama.cpp
# (`CMAKE_PROJECT_INCLUDE`, set in .cargo/config.toml): turns off llama.cpp's `common` library.
#
# llama-cpp-2 depends on llama-cpp-sys-2 with its default features, one of which builds `common`
# (chat templates, argument parsing, an HTTP client; nlohmann::json throughout), even when
# llama-cpp-2's own `common` feature is off, as here: Flipside calls nothing in it. It was more
# than half of llama.cpp's build: on 2 cores, 321 instead of 148 CPU-seconds (179 s instead of
# 85 s alone). Without the library llama-cpp-sys-2 links none (it looks for the directory), and
# its wrapper around `common`, compiled anyway, is never referenced.
#
# A normal variable shadows the `-DLLAMA_BUILD_COMMON=ON` cache entry, and llama.cpp's
# `option()` keeps it (policy CMP0077).
if(PROJECT_NAME STREQUAL "llama.cpp")
  set(LLAMA_BUILD_COMMON OFF)
endif()
