#!/usr/bin/env bash
# Builds the libFuzzer harnesses (build-asan/bin/fuzz_<parser>, with ASan and UBSan) and runs
# each for a bounded time over its seed corpus fuzz/corpus/<parser>/; new inputs go to
# build-asan/fuzz/<parser>/, never into the repository. A crash, a sanitizer report, a hang of
# more than 10 s or an allocation of more than 512 MB fails the run; the input is saved as
# build-asan/fuzz/artifacts/<parser>-crash-... (add it to fuzz/corpus/<parser>/ as crash-<what>
# once the parser is fixed, so that the test suite replays it).
# Usage: scripts/fuzz.sh [seconds per harness (default 60)] [parser ...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
if (($#)); then
  parsers=("$@")
else
  parsers=()
  for f in fuzz/*_fuzz.cpp; do
    name="$(basename "$f" _fuzz.cpp)"
    parsers+=("$name")
  done
fi
scripts/build_sanitize.sh "${parsers[@]/#/fuzz_}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-asan/fuzz/artifacts
for p in "${parsers[@]}"; do
  mkdir -p "build-asan/fuzz/$p"
  log="build-asan/fuzz/$p.log"
  if ! build-asan/bin/"fuzz_$p" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="build-asan/fuzz/artifacts/$p-" \
    "build-asan/fuzz/$p" "fuzz/corpus/$p" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz_$p failed (log: $log)" >&2
    exit 1
  fi
  echo "fuzz_$p: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds} s, $(ls "build-asan/fuzz/$p" | wc -l) new inputs, no failure"
done
