#!/usr/bin/env bash
# On the GPU machine, after scripts/device-build.sh: runs the whole GPU test binary (or the tests
# a filter selects) under one compute-sanitizer tool, split into N gtest shards that run at once
# (the NVRTC compiles and the sanitizer's host work are CPU-bound; 16 cores). One line per shard:
# exit status, the tool's summary, tests passed and failed, seconds. Logs in $OUT.
# Usage: scripts/device-sanitize.sh memcheck|racecheck|initcheck|synccheck [shards] [gtest filter]
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
tool=$1 shards=${2:-4} filter=${3:-*}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
bin=./build-gpu/tests/tgraph_gpu_tests
args=(--tool "$tool" --show-backtrace device --print-limit 50)
[ "$tool" = racecheck ] && args+=(--racecheck-report hazard)
# The out-of-memory test asks the driver for 4 TiB on purpose; the failed cudaMalloc is the
# point of the test, not an error of ours, so memcheck runs it with API errors unreported.
oom=CudaExecutor.OutOfMemoryIsAnError
for ((i = 0; i < shards; i++)); do
  (
    start=$(date +%s)
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${TG_SANITIZE_TIMEOUT:-400}" \
      "$CS" "${args[@]}" $bin --gtest_filter="$filter-$oom" > "$OUT/$tool-$i.log" 2>&1
    rc=$?
    printf '%s shard %d/%d rc=%s %s; %s ok, %s failed, %ss\n' "$tool" "$i" "$shards" "$rc" \
      "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool-$i.log" | tail -1)" \
      "$(grep -cE '^\[       OK' "$OUT/$tool-$i.log")" "$(grep -cE '^\[  FAILED  \].*\(' "$OUT/$tool-$i.log")" \
      "$(($(date +%s) - start))"
  ) &
done
wait
if [ "$tool" = memcheck ] && [[ "$filter" = '*' || "$oom" == $filter ]]; then
  timeout 120 "$CS" "${args[@]}" --report-api-errors no $bin --gtest_filter="$oom" > "$OUT/$tool-oom.log" 2>&1
  echo "$tool $oom rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/$tool-oom.log" | tail -1)"
fi
