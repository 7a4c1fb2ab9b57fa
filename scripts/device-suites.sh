#!/usr/bin/env bash
# On the GPU machine after `TG_BUILD_ONLY=1 scripts/device-build.sh`: runs every suite of the
# GPU test binary in its own process (a sticky CUDA error in one suite cannot fail the
# others), prints one line per suite and collects the failures in $OUT/failures.txt.
# Usage: scripts/device-suites.sh [suite-regex]
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
LOGS=${TMPDIR:-/tmp}/tg-suites; mkdir -p "$LOGS" "$OUT"
bin=./build-gpu/tests/tgraph_gpu_tests
for s in $($bin --gtest_list_tests | grep -E '^[A-Za-z]' | sed 's/\.$//' | grep -E "${1:-.}"); do
  log="$LOGS/${s//\//_}.log"
  start=$(date +%s%N)
  timeout 300 $bin --gtest_filter="$s.*" > "$log" 2>&1
  rc=$?
  t=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-28s rc=%-3s %6sms %s\n' "$s" "$rc" "$t" "$(grep -cE '^\[       OK' "$log") ok, $(grep -cE '^\[  FAILED  \].*\(' "$log") failed"
  # failures (with a few lines of context) of every suite into one file that comes back
  if [ "$rc" != 0 ]; then
    { echo "=== $s"; grep -E -B2 -A8 'Failure|FAILED  \]|what\(\)|exception' "$log" | head -400; } >> "$OUT/failures.txt"
  fi
  grep -E '^\[op_sweep\]' "$log" >> "$OUT/failures.txt"
done
