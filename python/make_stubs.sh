#!/usr/bin/env bash
# Regenerates the package's type stubs (python/meganeura/_core/*.pyi) from the built extension
# with pybind11-stubgen (pinned, installed into a temporary folder).
# Usage: python/make_stubs.sh [BUILD_DIR, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tools=$(mktemp -d)
trap 'rm -rf "$tools" "$tools.out"' EXIT
# The tests' virtual environment when there is one (scripts/setup.sh --tests): the stubs name
# NumPy's types only where the generator can import NumPy.
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
"$python" -m pip install --quiet --disable-pip-version-check --target "$tools" \
  pybind11-stubgen==2.5.1
PYTHONPATH="$build/python:$tools" "$python" -m pybind11_stubgen meganeura._core -o "$tools.out" \
  --enum-class-locations "DType:meganeura._core"
rm -rf python/meganeura/_core
cp -r "$tools.out/meganeura/_core" python/meganeura/_core
echo "stubs written to python/meganeura/_core"
