#!/usr/bin/env bash
# Installs, builds and runs the whole test suite (Vulkan validation on, lavapipe without a GPU),
# then fuzzes every parser briefly and runs the suite again under AddressSanitizer and
# UndefinedBehaviorSanitizer (a second build, with clang, in build-asan/).
# Usage: scripts/test.sh [--quick]   (--quick: the first part only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
# The Python package installed into .venv from build/ (nothing is compiled twice), then imported
# from outside the source tree; its tests (ctest python_package) import the build tree.
.venv/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --config-settings=build-dir=build --config-settings=cmake.build-type=RelWithDebInfo \
  --config-settings=cmake.define.MN_BUILD_TESTS=ON --config-settings=cmake.define.MN_BUILD_BENCH=ON .
(cd / && "$OLDPWD/.venv/bin/python" -c \
  "import meganeura; assert 'site-packages' in meganeura.__file__, meganeura.__file__")
export MN_VALIDATION=1
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900
[[ "${1:-}" == "--quick" ]] && exit 0
scripts/fuzz.sh 20
# The soak tests ran above. Under AddressSanitizer they take minutes, and its quarantine of
# freed memory (256 MB) grows the resident set their memory checks watch.
scripts/test_sanitize.sh -LE soak
