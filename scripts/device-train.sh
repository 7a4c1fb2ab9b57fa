#!/usr/bin/env bash
# On the GPU machine (repo root, .devdeps carried): builds the training benchmark (and the Python
# module when TG_PY=1), then runs the commands given as arguments, each a shell line, logging to
# $OUT (TG_EXTRA="a b": more targets). Usage: scripts/device-train.sh 'build-gpu/bench/bench_train_resnet --batch 256' ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
t0=$(date +%s)
targets="bench_train_resnet ${TG_EXTRA:-}"
[ "${TG_PY:-0}" = 1 ] && targets="$targets tgraph_python"
TG_BUILD_ONLY=1 TG_TARGETS="$targets" scripts/device-build.sh || exit 1
echo "built in $(( $(date +%s) - t0 )) s"
# shellcheck disable=SC1091
source scripts/unpack-debs.sh > /dev/null 2>&1
export PYTHONPATH=$PWD/build-gpu/python:$PWD/bench
i=0
for cmd in "$@"; do
  i=$((i + 1))
  echo "== $cmd"
  t1=$(date +%s)
  bash -c "$cmd" > "$OUT/run$i.log" 2>&1
  echo "rc $? in $(( $(date +%s) - t1 )) s"
  tail -c 3000 "$OUT/run$i.log"
done
