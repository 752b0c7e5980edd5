#!/usr/bin/env bash
# Installs, builds and runs the whole test suite (Vulkan validation on, lavapipe without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
export MN_VALIDATION=1
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900
