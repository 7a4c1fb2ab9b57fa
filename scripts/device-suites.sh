#!/usr/bin/env bash
# On the GPU machine after `TG_BUILD_ONLY=1 scripts/device-build.sh`: runs every suite of the
# GPU test binary in its own process (a sticky CUDA error in one suite cannot fail the
# others), prints one line per suite and collects the failures in $OUT/failures.txt.
# Usage: scripts/device-suites.sh [suite-regex]   (TG_PARALLEL=1: all suites at once — NVRTC
# compiles are CPU-bound, so this uses the GPU machine's cores; the out-of-memory test, which
# fills the device, is left out then and run alone at the end)
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
LOGS=${TMPDIR:-/tmp}/tg-suites; mkdir -p "$LOGS" "$OUT"
bin=./build-gpu/tests/tgraph_gpu_tests
run_suite() {  # suite filter log
  local start rc t
  start=$(date +%s%N)
  timeout 300 $bin --gtest_filter="$2" > "$3" 2>&1
  rc=$?
  t=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-28s rc=%-3s %6sms %s\n' "$1" "$rc" "$t" "$(grep -cE '^\[       OK' "$3") ok, $(grep -cE '^\[  FAILED  \].*\(' "$3") failed"
  if [ "$rc" != 0 ]; then  # failures with some context, into one file that comes back
    { echo "=== $1"; grep -E -B2 -A8 'Failure|FAILED  \]|what\(\)|exception' "$3" | head -400; } >> "$OUT/failures.txt"
  fi
  grep -E '^\[op_sweep\]' "$3" >> "$OUT/failures.txt"
}
suites=$($bin --gtest_list_tests | grep -E '^[A-Za-z]' | sed 's/\.$//' | grep -E "${1:-.}")
if [ "${TG_PARALLEL:-0}" = 1 ]; then
  for s in $suites; do
    run_suite "$s" "$s.*-CudaExecutor.OutOfMemoryIsAnError" "$LOGS/${s//\//_}.log" &
  done
  wait
  echo "$suites" | grep -qx CudaExecutor && run_suite OutOfMemory CudaExecutor.OutOfMemoryIsAnError "$LOGS/oom.log"
else
  for s in $suites; do run_suite "$s" "$s.*" "$LOGS/${s//\//_}.log"; done
fi
