#!/usr/bin/env bash
# Runs the GPU suite (the test binaries of ctest label `gpu`: every tensor-core kernel against
# float64, the self-test, the op conformance suite) on the device the tests select ($MN_DEVICE,
# else the first discrete GPU). Needs an existing build: nothing is installed or compiled, so it
# runs on a GPU machine that has only the driver and the binaries (docs/gpu-machine.md).
#
# Usage: scripts/test_gpu.sh [DIR]
#   DIR: a build tree (its bin/ is used) or a folder of copied binaries; default build.
#   It must hold gpu_suite.txt (written by cmake into bin/) and the binaries it lists.
#
# MN_REQUIRE_COOP defaults to `all` here: a tensor-core test fails, instead of skipping, when
# the device lacks one of its paths (nv, khr, wg, f16). Set MN_REQUIRE_COOP=khr,wg (say) on a
# device that offers only some, or 0 to let them skip. The Vulkan validation layer follows
# MN_VALIDATION as everywhere (leave it unset where the layer is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
[[ -f $dir/gpu_suite.txt ]] || dir=$dir/bin
if [[ ! -f $dir/gpu_suite.txt ]]; then
  echo "test_gpu.sh: no gpu_suite.txt in ${1:-build} or its bin/ (configure and build with" \
       "-DMN_BUILD_TESTS=ON, or copy bin/gpu_suite.txt with the binaries)" >&2
  exit 2
fi
export MN_REQUIRE_COOP=${MN_REQUIRE_COOP:-all}

failed=()
while read -r binary; do
  [[ -n $binary ]] || continue
  if [[ ! -x $dir/$binary ]]; then
    echo "test_gpu.sh: $dir/$binary is missing" >&2
    failed+=("$binary")
    continue
  fi
  echo "== $binary"
  "$dir/$binary" --gtest_brief=1 || failed+=("$binary")
done < "$dir/gpu_suite.txt"

if ((${#failed[@]})); then
  echo "GPU suite FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "GPU suite passed"
