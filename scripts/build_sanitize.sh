#!/usr/bin/env bash
# Configures and builds build-asan/: clang with AddressSanitizer and UndefinedBehaviorSanitizer
# (-fno-sanitize-recover: any report stops the process), the library, the mn command, the test
# suite and the libFuzzer harnesses of fuzz/. Used by scripts/test_sanitize.sh and
# scripts/fuzz.sh; extra arguments are ninja targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests --clang --no-build
source scripts/ccache-env.sh
if [[ ! -f build-asan/build.ninja ]]; then
  # -O1: the usual sanitizer trade between build time and run time; line tables are all the
  # sanitizers' reports need (file:line in every frame).
  cmake -S . -B build-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Sanitize \
    -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" -DMN_BUILD_FUZZERS=ON -DMN_BUILD_TESTS=ON \
    -DMN_BUILD_BENCH=OFF "${mn_compiler_launcher[@]}"
fi
cmake --build build-asan --parallel "$(nproc)" ${1:+--target "$@"}
