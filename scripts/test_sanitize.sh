#!/usr/bin/env bash
# The whole test suite built with AddressSanitizer and UndefinedBehaviorSanitizer (clang, in
# build-asan/) and run on lavapipe with validation on. Any sanitizer report fails its test.
# Leak checking is off: lavapipe, LLVM and the validation layer keep allocations until exit
# that are not ours to free (our own objects are counted by the soak tests instead).
# Usage: scripts/test_sanitize.sh [ctest arguments, e.g. -R Idx]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build_sanitize.sh
export MN_VALIDATION=1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure --parallel "$(nproc)" --timeout 1800 "$@"
