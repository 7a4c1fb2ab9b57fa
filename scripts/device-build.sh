#!/usr/bin/env bash
# One command on the GPU machine: unpack the carried Debian packages (.devdeps, see
# ../shared/device/README.md), configure, build in Release, and run the GPU tests and
# the demo. Logs go to $OUT (or ./out) so they come back from the device tool.
# Usage (on the GPU machine, repo root): scripts/device-build.sh [extra ctest args]
# TG_SKIP_CPU_TESTS=1 skips the CPU test labels there; TG_SKIP_CONFORMANCE=1 and TG_SKIP_DEMO=1
# skip the CUDA ONNX conformance run and the demo; TG_BUILD_ONLY=1 stops after the build;
# TG_TARGETS="a b" builds only those targets.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source scripts/unpack-debs.sh > "$OUT/unpack.log" 2>&1 || { cat "$OUT/unpack.log"; exit 1; }
export CMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH:/opt/devroot/usr/lib/x86_64-linux-gnu/cmake/GTest"
{
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DDNNL_INCLUDE_DIR=/opt/devroot/usr/include -DDNNL_LIBRARY=/opt/devroot/usr/lib/x86_64-linux-gnu/libdnnl.so &&
  cmake --build build-gpu -j "$(nproc)" ${TG_TARGETS:+--target $TG_TARGETS}
} > "$OUT/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -50 "$OUT/build.log"; exit $rc; fi
echo "build ok"
[ "${TG_BUILD_ONLY:-0}" = 1 ] && exit 0
(cd build-gpu && ctest -L gpu --output-on-failure "$@") 2>&1 | tee "$OUT/gpu-tests.log"
gpu_rc=${PIPESTATUS[0]}
if [ "${TG_SKIP_CPU_TESTS:-0}" != 1 ]; then  # already run by CI; skip to save GPU time
  (cd build-gpu && ctest -LE gpu -j "$(nproc)" --timeout 900) > "$OUT/cpu-tests.log" 2>&1
  echo "cpu tests: $(grep -E 'tests passed' "$OUT/cpu-tests.log" | tail -1)"
fi
if [ "${TG_SKIP_CONFORMANCE:-0}" != 1 ] && [ -d /opt/devroot/usr/share/libonnx-testdata/data/node ]; then
  ./build-gpu/tools/tgraph conformance /opt/devroot/usr/share/libonnx-testdata/data/node --device cuda -j "$(nproc)" \
    > "$OUT/conformance-cuda.log" 2>&1
  echo "ONNX conformance on CUDA: $(tail -1 "$OUT/conformance-cuda.log")"
fi
[ "${TG_SKIP_DEMO:-0}" = 1 ] || ./build-gpu/examples/train_fashion_mnist --epochs 4 --data /opt/devroot/usr/share/datasets/fashion-mnist --out "$OUT/fashion_mnist" > "$OUT/demo.log" 2>&1; tr "\r" "\n" < "$OUT/demo.log" | grep -E "^(epoch [0-9]+:|final)"
exit $gpu_rc
