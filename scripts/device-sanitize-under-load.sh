#!/usr/bin/env bash
# On the GPU machine, after scripts/device-build.sh: runs the tests a filter selects under
# memcheck `tries` times while `loaders` unsanitized processes keep the GPU busy (the op sweep,
# repeated), one line per try. This is the condition under which memcheck faulted in
# CudaControlFlow.WhileLoopNewtonSqrtReturnsBeforesResults (bench/RESULTS.md, fifth session);
# the environment passes through, so variants compare directly, e.g.
#   CUDA_MODULE_LOADING=EAGER scripts/device-sanitize-under-load.sh 'CudaControlFlow.WhileLoopNewton*'
# Usage: scripts/device-sanitize-under-load.sh <gtest filter> [tries=3] [loaders=7]
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
filter=$1 tries=${2:-3} loaders=${3:-7}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
bin=./build-gpu/tests/tgraph_gpu_tests
pids=()
for ((i = 0; i < loaders; i++)); do
  timeout 300 $bin --gtest_filter='Ops/OpSweep.*' --gtest_repeat=1000 > /dev/null 2>&1 &
  pids+=($!)
done
sleep 3
tag=${TG_LOAD_TAG:-load}
for ((k = 1; k <= tries; k++)); do
  log="$OUT/$tag-$k.log"
  timeout 120 "$CS" --tool memcheck --show-backtrace yes --print-limit 20 $bin --gtest_filter="$filter" > "$log" 2>&1
  echo "$tag try $k rc=$? $(grep 'ERROR SUMMARY' "$log" | tail -1); $(grep -cE '^\[       OK' "$log") ok," \
    "$(grep -cE '^\[  FAILED  \].*\(' "$log") failed; first: $(grep -m1 -E 'Invalid|Program hit' "$log" | cut -c1-160)"
done
kill "${pids[@]}" 2> /dev/null
wait 2> /dev/null
