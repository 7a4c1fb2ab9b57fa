#!/usr/bin/env bash
# Installs what tgraph needs to build and test on Debian 12, with apt and pip only.
# Idempotent and quiet when everything is present; run as root (or with sudo on the PATH).
set -euo pipefail
PY=${PYTHON:-python3}
APT_PKGS="build-essential cmake ninja-build ccache pkg-config git libgtest-dev libgmock-dev
  libdnnl-dev libonnx-dev libprotobuf-dev protobuf-compiler clang-format clang-tidy
  dataset-fashion-mnist libonnx-testdata libdlpack-dev libgloo-dev"
PIP_PKGS="numpy pytest nanobind matplotlib"

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
for p in $APT_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] apt: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
pip_missing=()
for p in $PIP_PKGS; do
  $PY -c "import $p" 2>/dev/null || pip_missing+=("$p")
done
if [ ${#pip_missing[@]} -gt 0 ]; then
  echo "[install-deps] pip: ${pip_missing[*]}"
  $PY -m pip install -q "${pip_missing[@]}"
fi
# scikit-build-core: the TensorFlow plugin's package is built by pip without build isolation in
# its test (test_pip_package_puts_the_plugin_where_tensorflow_loads_it).
$PY -c "import scikit_build_core" 2>/dev/null || $PY -m pip install -q "scikit-build-core>=0.10"
# ONNX's Python package, pinned: its backend tests (node, pytorch-converted, pytorch-operator,
# simple) are the newest-ONNX conformance suites of `make test` (tests/conformance/onnx_1_22_*).
ONNX_VERSION=1.22.0
if ! $PY -c "import onnx, sys; sys.exit(onnx.__version__ != '$ONNX_VERSION')" 2>/dev/null; then
  echo "[install-deps] pip: onnx==$ONNX_VERSION"
  $PY -m pip install -q "onnx==$ONNX_VERSION" || echo "[install-deps] onnx not installed: its conformance suites will be skipped"
fi
# PyTorch: the peer of the benchmarks and what tgraph.torch converts; its tests are skipped
# without it, so a failed install (it is large) does not stop the build.
if ! $PY -c "import torch" 2>/dev/null; then
  echo "[install-deps] pip: torch (optional)"
  $PY -m pip install -q torch || echo "[install-deps] torch not installed: the PyTorch frontend tests will be skipped"
fi
# TensorFlow for the TGRAPH plugin (python/tensorflow, issue 24), pinned, and apart from the
# interpreter's packages: it requires numpy < 2.2, which must not replace the interpreter's.
# Optional: without it the plugin is not built and its tests are skipped.
TF_VERSION=2.19.1
TF_DIR="$(cd "$(dirname "$0")/.." && pwd)/.deps/tflib"
if [ "${TGRAPH_NO_TENSORFLOW:-0}" != 1 ] && \
   [ ! -f "$TF_DIR/tensorflow/include/tensorflow/c/experimental/stream_executor/stream_executor.h" ]; then
  echo "[install-deps] pip: tensorflow-cpu==$TF_VERSION into $TF_DIR (optional)"
  $PY -m pip install -q --upgrade --target "$TF_DIR" "tensorflow-cpu==$TF_VERSION" 2>&1 | grep -v "^WARNING: Running pip as" || true
  [ -f "$TF_DIR/tensorflow/include/tensorflow/c/experimental/stream_executor/stream_executor.h" ] ||
    echo "[install-deps] tensorflow-cpu not installed: the TensorFlow plugin and its tests will be skipped"
fi
# The cuDNN frontend (header-only C++ graph API: the fused attention engines), from PyPI's
# nvidia-cudnn-frontend wheel, headers only, into .deps/cudnn_frontend/include (and a copy in
# .devdeps, which goes to the GPU machine). Optional: without it attention is decomposed on CUDA.
CFE_VERSION=1.32.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$ROOT/.deps/cudnn_frontend/include/cudnn_frontend.h" ]; then
  echo "[install-deps] pip download: nvidia-cudnn-frontend==$CFE_VERSION (headers)"
  tmp=$(mktemp -d)
  if $PY -m pip download -q --no-deps -d "$tmp" "nvidia-cudnn-frontend==$CFE_VERSION" 2>/dev/null; then
    mkdir -p "$ROOT/.deps/cudnn_frontend"
    $PY -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith('include/')]" \
      "$(ls "$tmp"/*.whl | head -1)" "$ROOT/.deps/cudnn_frontend"
  else
    echo "[install-deps] nvidia-cudnn-frontend not downloaded: attention is decomposed on CUDA"
  fi
  rm -rf "$tmp"
fi
if [ -d "$ROOT/.devdeps" ] && [ -f "$ROOT/.deps/cudnn_frontend/include/cudnn_frontend.h" ] &&
   [ ! -f "$ROOT/.devdeps/cudnn_frontend/include/cudnn_frontend.h" ]; then
  mkdir -p "$ROOT/.devdeps/cudnn_frontend" && cp -r "$ROOT/.deps/cudnn_frontend/include" "$ROOT/.devdeps/cudnn_frontend/"
fi
# The GPU machine's build needs DLPack's header too, which ../shared/device/fetch-debs.sh does
# not fetch: its .deb goes into .devdeps beside the others.
if [ -d "$ROOT/.devdeps" ] && ! ls "$ROOT/.devdeps"/libdlpack-dev_*.deb > /dev/null 2>&1; then
  (cd "$ROOT/.devdeps" && apt-get download libdlpack-dev > /dev/null 2>&1) ||
    echo "[install-deps] libdlpack-dev not downloaded into .devdeps: the GPU build will not configure"
fi
echo "[install-deps] ok"
