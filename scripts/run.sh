#!/usr/bin/env bash
# The main job: install, build, and train an MLP on Fashion-MNIST on the default device.
# Arguments go to `mn train` (e.g. --model cnn --epochs 2 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bin/mn train "$@"
