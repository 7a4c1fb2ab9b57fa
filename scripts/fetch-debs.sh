#!/bin/bash
# Run on the development machine, in the project root. Downloads the Debian packages that
# the GPU machine lacks (it reaches no package registry) into .devdeps/, which git ignores
# through .git/info/exclude. Send .devdeps along with the tree to the GPU machine and start
# the command there with: source scripts/unpack-debs.sh   (a copy of unpack-debs.sh in the tree)
set -euo pipefail
PKGS=${DEVDEPS:-"libdnnl2 libdnnl-dev libonnx1 libonnx-dev libonnxifi libprotobuf32 libprotobuf-dev pybind11-dev libgtest-dev libgmock-dev googletest dataset-fashion-mnist libonnx-testdata libdlpack-dev"}
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
mkdir -p .devdeps
[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update -qq
(cd .devdeps && apt-get download $PKGS 2>&1 | grep -v '^Get:' || true)
ls -la .devdeps
