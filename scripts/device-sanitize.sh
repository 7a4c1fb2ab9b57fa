#!/usr/bin/env bash
# On the GPU machine, after scripts/device-build.sh: runs the whole GPU test binary (or the tests
# a filter selects) under one compute-sanitizer tool, split into gtest shards. One line per
# shard: exit status, the tool's summary, tests passed and failed, seconds. Logs in $OUT.
# Usage: scripts/device-sanitize.sh memcheck|racecheck|initcheck|synccheck [shards] [gtest filter]
# TG_SHARDS="2 6" runs only those shards; TG_SANITIZE_PARALLEL=0|1 overrides the default.
#
# memcheck runs the shards one after another: with other processes on the GPU at the same time
# it has faulted inside a control-flow test that passes alone and never fails unsanitized
# (bench/RESULTS.md, fifth session); TG_SANITIZE_PARALLEL=1 runs them at once anyway.
# racecheck runs them at once (it is slow: the CUB sorts take minutes) and leaves out the
# 10,000-iteration loop test (its kernels are checked by the other control-flow tests; 30,000
# instrumented launches do not finish in time). cuDNN's warpgroup GEMMs report shared-memory
# hazards racecheck cannot judge (vendor code, not ours), but excluding them from instrumentation
# (--kernel-name-exclude) makes the tool fail "to handle a hardware exception" in the first
# convolution (seventh session): they stay instrumented, and the digest counts hazards per kernel
# ($OUT/racecheck-kernels.txt) so ours can be told from theirs. TG_RACECHECK_EXCLUDE=1 excludes
# them anyway. It also runs
# with TGRAPH_NO_CUDA_GRAPH=1: racecheck aborts a process that replays a CUDA graph with
# conditional bodies ("error when dereferencing Unified Memory from the host", fifth and sixth
# sessions), while shared-memory hazards are a property of the kernels, which are the same
# captured or not. Tests that assert a capture then fail by design; the verdict is the hazard
# summary (TG_RACECHECK_CAPTURE=1 keeps capture on).
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
tool=$1
shards=${2:-$([ "$tool" = racecheck ] && echo 16 || echo 8)}
filter=${3:-*}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
bin=./build-gpu/tests/tgraph_gpu_tests
args=(--tool "$tool" --show-backtrace yes --print-limit 50)
# The out-of-memory test asks the driver for 4 TiB on purpose; the failed cudaMalloc is the
# point of the test, not an error of ours, so memcheck runs it with API errors unreported.
oom=CudaExecutor.OutOfMemoryIsAnError
skip=$oom
parallel=${TG_SANITIZE_PARALLEL:-0}
if [ "$tool" = racecheck ]; then
  args+=(--racecheck-report hazard)
  help=$("$CS" --help 2>&1)
  if [ "${TG_RACECHECK_EXCLUDE:-0}" = 1 ]; then
    if grep -q -- --kernel-name-exclude <<< "$help"; then args+=(--kernel-name-exclude kns=cudnn)
    elif grep -q -- '--exclude ' <<< "$help"; then args+=(--exclude kns=cudnn)
    else echo "note: this compute-sanitizer has no kernel filter; cuDNN's kernels are checked too"; fi
  fi
  skip+=:CudaControlFlow.TenThousandIterationWhileLoopIsCaptured
  parallel=${TG_SANITIZE_PARALLEL:-1}
  [ "${TG_RACECHECK_CAPTURE:-0}" = 1 ] || export TGRAPH_NO_CUDA_GRAPH=1
fi
shard() {
  local i=$1 start rc
  start=$(date +%s)
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${TG_SANITIZE_TIMEOUT:-400}" \
    "$CS" "${args[@]}" $bin --gtest_filter="$filter-$skip" > "$OUT/$tool-$i.log" 2>&1
  rc=$?
  printf '%s shard %d/%d rc=%s %s; %s ok, %s failed, %ss\n' "$tool" "$i" "$shards" "$rc" \
    "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$tool-$i.log" | tail -1)" \
    "$(grep -cE '^\[       OK' "$OUT/$tool-$i.log")" "$(grep -cE '^\[  FAILED  \].*\(' "$OUT/$tool-$i.log")" \
    "$(($(date +%s) - start))"
  # the tool's own reports (hazards, faults) with their first lines, into one file that comes back
  grep -E -A12 '^========= (Error|Internal|Invalid|Race|Warning)' "$OUT/$tool-$i.log" | head -80 |
    sed "s/^/[$tool $i] /" >> "$OUT/$tool-digest.txt"
}
for i in ${TG_SHARDS:-$(seq 0 $((shards - 1)))}; do
  if [ "$parallel" = 1 ]; then shard "$i" & else shard "$i"; fi
done
wait
if [ "$tool" = racecheck ]; then  # the two accesses of each hazard, by kernel, over every shard
  cat "$OUT"/racecheck-[0-9]*.log 2>/dev/null | grep -oE '(Write|Read) Thread \([0-9,]+\) at [^+ ]+' |
    sed -E 's/.* at //' | sort | uniq -c | sort -rn > "$OUT/racecheck-kernels.txt"
  echo "racecheck: hazard accesses in $(wc -l < "$OUT/racecheck-kernels.txt") kernels ($OUT/racecheck-kernels.txt)"
fi
if [ "$tool" = memcheck ] && [[ "$filter" = '*' || "$oom" == $filter ]]; then
  timeout 120 "$CS" "${args[@]}" --report-api-errors no $bin --gtest_filter="$oom" > "$OUT/$tool-oom.log" 2>&1
  echo "$tool $oom rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/$tool-oom.log" | tail -1)"
fi
