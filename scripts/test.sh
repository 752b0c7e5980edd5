#!/usr/bin/env bash
# Installs, builds and runs the whole test suite (Vulkan validation on, lavapipe without a GPU),
# then fuzzes every parser briefly and runs the suite again under AddressSanitizer and
# UndefinedBehaviorSanitizer (a second build, with clang, in build-asan/).
# Usage: scripts/test.sh [--quick]   (--quick: the first part only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
export MN_VALIDATION=1
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900
[[ "${1:-}" == "--quick" ]] && exit 0
scripts/fuzz.sh 20
# The soak tests ran above. Under AddressSanitizer they take minutes, and its quarantine of
# freed memory (256 MB) grows the resident set their memory checks watch.
scripts/test_sanitize.sh -LE soak
