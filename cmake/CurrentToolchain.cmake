# The current shader toolchain that scripts/setup.sh installs into .venv from pinned PyPI wheels
# (scripts/toolchain-requirements.txt, docs/shader-toolchain.md):
#   MN_GLSLANG_LIBRARY  libslang-glslang-*.so (glslang 16.2), loaded at run time
#   MN_SPIRV_VAL        spirv-val 2025.5, which the tests run on what that compiler makes
# Either may be given with -D; empty when not found (the kernels that need them are then off,
# and the tests that need them say they skipped).
set(_mn_site ${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages)
if(NOT MN_GLSLANG_LIBRARY)
  file(GLOB _mn_found ${_mn_site}/slangpy/libslang-glslang-*.so)
  list(SORT _mn_found)
  list(POP_BACK _mn_found MN_GLSLANG_LIBRARY)
endif()
if(NOT MN_SPIRV_VAL)
  file(GLOB _mn_found ${_mn_site}/cmeel.prefix/bin/spirv-val)
  list(POP_BACK _mn_found MN_SPIRV_VAL)
endif()
message(STATUS "current glslang: ${MN_GLSLANG_LIBRARY}")
message(STATUS "spirv-val for tensor-addressed kernels: ${MN_SPIRV_VAL}")
