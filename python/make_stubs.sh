#!/usr/bin/env bash
# Regenerates the package's type stubs (python/meganeura/_core/*.pyi) from the built extension
# with pybind11-stubgen (pinned, in a temporary virtual environment).
# Usage: python/make_stubs.sh [BUILD_DIR, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=$(mktemp -d)
trap 'rm -rf "$venv" "$venv.out"' EXIT
python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check pybind11-stubgen==2.5.1
PYTHONPATH="$build/python" "$venv/bin/pybind11-stubgen" meganeura._core -o "$venv.out" \
  --enum-class-locations "DType:meganeura._core"
rm -rf python/meganeura/_core
cp -r "$venv.out/meganeura/_core" python/meganeura/_core
echo "stubs written to python/meganeura/_core"
