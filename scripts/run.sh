#!/usr/bin/env bash
# The main job: install, build, and run meganeura on the default device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bin/mn devices "$@"
