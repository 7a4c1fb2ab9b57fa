#!/usr/bin/env bash
# Copies the pinned TensorFlow wheel's plugin C headers that the CUDA device half of the
# TensorFlow plugin needs (stream_executor.h and what it includes) into .devdeps/tf_c, so the
# GPU machine, where TensorFlow cannot be installed, builds and runs tests/gpu_tf/ (send
# .devdeps along, as for the Debian packages). Needs scripts/install-deps.sh run first.
set -euo pipefail
cd "$(dirname "$0")/.."
src=.deps/tflib/tensorflow/include
[ -f "$src/tensorflow/c/experimental/stream_executor/stream_executor.h" ] || { echo "no TensorFlow headers in $src (scripts/install-deps.sh)"; exit 1; }
for h in tensorflow/c/experimental/stream_executor/stream_executor.h tensorflow/c/c_api_macros.h \
         tensorflow/c/tf_status.h xla/tsl/c/tsl_status.h; do
  mkdir -p ".devdeps/tf_c/$(dirname "$h")"
  cp "$src/$h" ".devdeps/tf_c/$h"
done
echo "headers in .devdeps/tf_c"
