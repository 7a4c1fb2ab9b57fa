#!/usr/bin/env bash
# On the GPU machine after `TG_BUILD_ONLY=1 scripts/device-build.sh`: runs every suite of the
# GPU test binary in its own process (a sticky CUDA error in one suite cannot fail the
# others), writes one log per suite to $OUT/suites/, and prints one line per suite.
# Usage: scripts/device-suites.sh [suite-regex]
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/suites"
bin=./build-gpu/tests/tgraph_gpu_tests
for s in $($bin --gtest_list_tests | grep -E '^[A-Za-z]' | sed 's/\.$//' | grep -E "${1:-.}"); do
  log="$OUT/suites/${s//\//_}.log"
  start=$(date +%s%N)
  timeout 300 $bin --gtest_filter="$s.*" > "$log" 2>&1
  rc=$?
  t=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-28s rc=%-3s %6sms %s\n' "$s" "$rc" "$t" "$(grep -cE '^\[       OK' "$log") ok, $(grep -cE '^\[  FAILED  \].*\(' "$log") failed"
done
