#!/usr/bin/env bash
# Installs what meganeura needs from Debian (when missing) and builds it into build/.
# Usage: scripts/setup.sh [--tests]   (--tests adds the packages only the test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config
  libvulkan-dev vulkan-validationlayers mesa-vulkan-drivers
  libshaderc-dev glslang-dev spirv-tools
  nlohmann-json3-dev libfmt-dev libcli11-dev zlib1g-dev libicu-dev
  libgtest-dev libbenchmark-dev dataset-fashion-mnist)
if [[ "${1:-}" == "--tests" ]]; then
  # PyTorch on the CPU and numpy give reference values that we did not compute ourselves.
  packages+=(python3 python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build build --parallel "$(nproc)"
