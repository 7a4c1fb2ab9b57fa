#!/usr/bin/env bash
# Runs every test suite of a build and ends with one summary line of counts.
# Usage: scripts/run-tests.sh BUILD_DIR
set -uo pipefail
BUILD=${1:-build}
status=0
log=$(mktemp)
(cd "$BUILD" && ctest --output-on-failure -j "$(nproc)" --timeout 900) 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
ctest_line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1)
skipped=$(grep -cE '\*\*\*Skipped|Not Run' "$log" || true)

# The installed package must be usable from another project: build examples/ against it.
# (Skipped for sanitizer builds: a plain consumer cannot link an instrumented library.)
prefix=$(mktemp -d)
if [ "${TG_SKIP_CONSUMER:-0}" = 1 ]; then
  consumer="find_package(tgraph) consumer: skipped (sanitizer build)"
elif cmake --install "$BUILD" --prefix "$prefix" >/dev/null &&
   cmake -S examples -B "$BUILD/examples-installed" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null &&
   cmake --build "$BUILD/examples-installed" >/dev/null &&
   "$BUILD/examples-installed/hello_graph" --quiet; then
  consumer="find_package(tgraph) consumer: ok"
else
  consumer="find_package(tgraph) consumer: FAILED"
  status=1
fi
rm -rf "$prefix" "$log"
echo "== summary: ctest: ${ctest_line:-no result} (${skipped} skipped); ${consumer}"
exit $status
